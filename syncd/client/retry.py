"""Safe retries: one ``op_id`` for every attempt, so a retried op applies once.

An op whose answer was lost (connection reset after the service applied it)
is retried with the same ``op_id``; the service recognises it and answers
with the first answer and ``"duplicate": true`` (docs/data-model.md#op-ids). Retried:
transport failures and the service's "try later" answers (429 honouring
``Retry-After``, 502/503/504). Anything else is final and raised at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final, TypeVar

from syncd.client.errors import ServiceError, TransportError
from syncd.client.ops import Op
from syncd.client.resume import Backoff

T = TypeVar("T")

RETRY_ATTEMPTS: Final = 4
"""Attempts in all: rides out a restart or a brief outage (about 1.5 s of
waiting), short enough that a caller is not kept waiting on a dead service."""
RETRY_BASE_S: Final = 0.1
RETRY_MAX_S: Final = 2.0
RETRY_AFTER_MAX_S: Final = 10.0
"""Longest ``Retry-After`` honoured; a longer one is the caller's decision."""
OP_ID_MAX_LEN: Final = 128
"""Characters in an ``op_id`` the service takes (docs/data-model.md#op-ids)."""


def new_op_id() -> str:
    return uuid.uuid4().hex


def with_op_ids(body: Op | Iterable[Op], op_id: str) -> Op | list[Op]:
    """Copies of the op(s) with an ``op_id`` where they have none: ``op_id`` for
    a single op, ``op_id.<i>`` for the i-th op of a batch (read once: an
    iterator is consumed). What is not an op is left for the service to refuse
    (400, as :meth:`apply` gets).

    When ``op_id.<i>`` would pass :data:`OP_ID_MAX_LEN`, the batch's ids are
    ``<sha256 of op_id>.<i>`` instead (65 characters and the index): still
    derived from ``op_id`` alone, so a retry, or the same call again, gets the
    same ids and the service answers it as a duplicate."""
    if isinstance(body, dict):
        return body if "op_id" in body else {**body, "op_id": op_id}
    if isinstance(body, str | bytes):
        return [body]  # type: ignore[list-item]
    batch = list(body)
    base = op_id
    if len(f"{op_id}.{max(len(batch) - 1, 0)}") > OP_ID_MAX_LEN:
        base = hashlib.sha256(op_id.encode("utf-8", "surrogatepass")).hexdigest()
    return [
        {**op, "op_id": f"{base}.{i}"} if isinstance(op, dict) and "op_id" not in op else op
        for i, op in enumerate(batch)
    ]


def retryable(exc: BaseException) -> bool:
    if isinstance(exc, TransportError):
        return True
    return isinstance(exc, ServiceError) and exc.retryable


def _delay(exc: BaseException, backoff: Backoff) -> float:
    delay = backoff.next_delay()
    if isinstance(exc, ServiceError) and exc.retry_after is not None:
        delay = max(delay, min(exc.retry_after, RETRY_AFTER_MAX_S))
    return delay


async def with_retries(
    call: Callable[[str], Awaitable[T]],
    *,
    op_id: str | None = None,
    attempts: int = RETRY_ATTEMPTS,
    base_s: float = RETRY_BASE_S,
    max_s: float = RETRY_MAX_S,
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
) -> T:
    """``await call(op_id)`` until it succeeds, a non-retryable error, or
    ``attempts`` tries; every try gets the same ``op_id`` (new by default)::

        await with_retries(lambda op_id: client.gcounter_increment("gc:x", 2, op_id=op_id))
    """
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    key = op_id or new_op_id()
    backoff = Backoff(base_s, max_s)
    for attempt in range(1, attempts + 1):
        try:
            return await call(key)
        except (TransportError, ServiceError) as exc:
            if attempt == attempts or not retryable(exc):
                raise
            await sleep(_delay(exc, backoff))
    raise AssertionError("unreachable")


def with_retries_sync(
    call: Callable[[str], T],
    *,
    op_id: str | None = None,
    attempts: int = RETRY_ATTEMPTS,
    base_s: float = RETRY_BASE_S,
    max_s: float = RETRY_MAX_S,
    sleep: Callable[[float], Any] = time.sleep,
    deadline: float | None = None,
) -> T:
    """The blocking twin of :func:`with_retries`.

    ``deadline`` (a :func:`time.monotonic` time) bounds the waits between
    tries, as ``asyncio.timeout`` bounds the async one's: a wait that would
    end past it waits until it and raises TimeoutError (a blocking call
    cannot be cancelled from outside; the calls themselves are bounded by
    :meth:`syncd.client.sync.Client.deadline`)."""
    if attempts < 1:
        raise ValueError("attempts must be >= 1")
    key = op_id or new_op_id()
    backoff = Backoff(base_s, max_s)
    for attempt in range(1, attempts + 1):
        try:
            return call(key)
        except (TransportError, ServiceError) as exc:
            if attempt == attempts or not retryable(exc):
                raise
            delay = _delay(exc, backoff)
            if deadline is not None and time.monotonic() + delay >= deadline:
                sleep(max(0.0, deadline - time.monotonic()))
                raise TimeoutError("the deadline passed while waiting to try again") from exc
            sleep(delay)
    raise AssertionError("unreachable")
