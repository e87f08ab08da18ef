"""What the async and the sync client share: token state, URLs, answers and errors."""

from __future__ import annotations

import email.utils
import functools
import json
import math
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import httpx

from syncd.auth.tokens import Claims
from syncd.client.config import ClientConfig
from syncd.client.errors import ServiceError, service_error
from syncd.client.ops import Op
from syncd.client.token import check_expiry, check_token

DEFAULT_TIMEOUT_S: Final = 10.0
"""Per request (connect, each read, each write): an op is acknowledged after a
group commit, milliseconds normally; ten seconds means the service is stuck."""


@functools.cache
def default_tls() -> ssl.SSLContext:
    """The TLS context of every client of this process: httpx's default
    (certifi's CA bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR`` as set when
    the first client is made). httpx would make one per client, loading the
    bundle each time: 50 ms of CPU, most of making a client, against 0.2 ms
    with this one (an agent's tool that makes a client per call pays it at
    every call). A context is safe to share: connections take their settings
    from it, and nothing here changes it."""
    return httpx.create_ssl_context()


class ClientCore:
    """Configuration and the validated token; raises the token errors at construction."""

    def __init__(self, config: ClientConfig, clock_ms: Callable[[], int]) -> None:
        self.config = config
        self._clock_ms = clock_ms
        self.claims: Claims = check_token(
            config.token, namespace=config.namespace, clock_ms=clock_ms
        )
        self.headers: Final = {"authorization": f"Bearer {config.token}"}

    @property
    def client_id(self) -> int:
        return self.claims.client_id

    @property
    def namespace(self) -> str:
        return self.config.namespace

    def check_token(self) -> None:
        """TokenExpiredError once the token has expired: no request goes out with it."""
        check_expiry(self.claims, self._clock_ms())

    def ops_request(
        self, crdt_id: str, body: Op | Sequence[Op], return_state: bool, origin: str | None = None
    ) -> tuple[str, dict[str, str], Any]:
        """``(url, query, json body)`` of an ops POST (``origin``: the batch's)."""
        payload = body if isinstance(body, dict) else list(body)
        params = {"return": "state"} if return_state else {}
        if origin is not None:
            params["origin"] = origin
        return self.config.crdt_url(crdt_id, "/ops"), params, payload

    def history_params(
        self,
        before: int | None,
        limit: int | None,
        client_id: int | None = None,
        origin: str | None = None,
    ) -> dict[str, str]:
        params = {}
        if before is not None:
            params["before"] = str(before)
        if limit is not None:
            params["limit"] = str(limit)
        if client_id is not None:
            params["client_id"] = str(client_id)
        if origin is not None:
            params["origin"] = origin
        return params

    @staticmethod
    def revert_body(
        client_id: int | None,
        origin: str | None,
        since_seq: int | None,
        until_seq: int | None,
        op_id: str | None,
    ) -> dict[str, Any]:
        """The body of ``POST …/revert``; ValueError when it names no writer."""
        if client_id is None and origin is None:
            raise ValueError("a revert names whose ops to take back: client_id, origin or both")
        fields = {
            "client_id": client_id,
            "origin": origin,
            "since_seq": since_seq,
            "until_seq": until_seq,
            "op_id": op_id,
        }
        return {key: value for key, value in fields.items() if value is not None}

    @staticmethod
    def at_params(seq: int, crdt_format: bool) -> dict[str, str]:
        params = {"at": str(seq)}
        if crdt_format:
            params["format"] = "crdt"
        return params

    @staticmethod
    def restore_body(seq: int, op_id: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {"seq": seq}
        if op_id is not None:
            body["op_id"] = op_id
        return body

    def list_params(self, prefix: str, limit: int | None, cursor: str | None) -> dict[str, str]:
        params = {"prefix": prefix} if prefix else {}
        if limit is not None:
            params["limit"] = str(limit)
        if cursor is not None:
            params["cursor"] = cursor
        return params


def error_from(status: int, headers: Mapping[str, str], content: bytes) -> ServiceError:
    """The service's ``{"error", "message"}`` body as an exception (any body, really)."""
    code, message = f"http_{status}", content[:200].decode("utf-8", "replace")
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        code = body["error"]
        message = str(body.get("message", ""))
    return service_error(
        status,
        code,
        message,
        retry_after_s(headers.get("retry-after")),
        body if isinstance(body, dict) else None,
    )


def retry_after_s(raw: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP
    date (RFC 9110 10.2.3: proxies send dates); None when absent or unreadable
    (NaN included: it would make every comparison with it false)."""
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            return None
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return max(0.0, seconds) if math.isfinite(seconds) else None


def json_answer(response: httpx.Response) -> Any:
    """The JSON body of a 2xx answer; ServiceError for any other status."""
    if not 200 <= response.status_code < 300:
        raise error_from(response.status_code, response.headers, response.content)
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise ServiceError(
            response.status_code, "bad_response", "the service's answer is not JSON"
        ) from None
