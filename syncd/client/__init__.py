"""syncd's Python client (docs/clients.md#python-syncdclient).

- :class:`AsyncClient` / :class:`Client` (blocking): ``read`` (None when the
  service answers with an error status), ``read_state`` (``?format=crdt``),
  ``fetch`` (raises), a typed helper per op of every type
  (``gcounter_increment``, ``orset_add``, ``rga_insert``, ``tree_move``, ...),
  ``apply``/``batch``, and ``apply_retrying`` (one ``op_id``, safe retries).
- Token pre-validation at construction, before any connection:
  :class:`TokenParseError` or :class:`TokenExpiredError` (both :class:`TokenError`).
- ``subscribe(ids)`` (WebSocket) and ``events(id)`` (SSE): async iterators of
  deltas that reconnect and resume with ``since`` and ``epoch``; a refusal by
  the service raises :class:`ServiceError` (:class:`TokenRevokedError` for a
  revoked token), including a stream the service ends (expiry, revocation).
- :class:`Replica`: a local copy of one CRDT kept current by deltas;
  ``wait_for_seq`` fails with :class:`EpochChangedError` when the CRDT's life
  (its epoch) waited in ends.
- :mod:`syncd.client.tools`: agent tool definitions and execution;
  :mod:`syncd.client.mcp_server`: the same tools over MCP (``syncd mcp``).

Needs ``httpx`` and ``websockets`` (the ``syncd[client]`` extra).
"""

from syncd.client import ops
from syncd.client.aio import AsyncClient
from syncd.client.config import ClientConfig
from syncd.client.errors import (
    ClientError,
    EpochChangedError,
    MessageTooLargeError,
    ServiceError,
    TokenError,
    TokenExpiredError,
    TokenNamespaceError,
    TokenParseError,
    TokenRevokedError,
    TransportError,
)
from syncd.client.replica import Replica, ReplicaLagError
from syncd.client.retry import new_op_id, with_retries, with_retries_sync
from syncd.client.stream import EventStream, Subscription
from syncd.client.sync import BlockingStream, Client
from syncd.client.token import check_token
from syncd.client.tools import (
    AgentTools,
    SyncAgentTools,
    Tool,
    anthropic_tools,
    build_tools,
    openai_tools,
    parse_tool_name,
    tool_name,
)

__all__ = [
    "AgentTools",
    "AsyncClient",
    "BlockingStream",
    "Client",
    "ClientConfig",
    "ClientError",
    "EpochChangedError",
    "EventStream",
    "MessageTooLargeError",
    "Replica",
    "ReplicaLagError",
    "ServiceError",
    "Subscription",
    "SyncAgentTools",
    "TokenError",
    "TokenExpiredError",
    "TokenNamespaceError",
    "TokenParseError",
    "TokenRevokedError",
    "Tool",
    "TransportError",
    "anthropic_tools",
    "build_tools",
    "check_token",
    "new_op_id",
    "openai_tools",
    "ops",
    "parse_tool_name",
    "tool_name",
    "with_retries",
    "with_retries_sync",
]
