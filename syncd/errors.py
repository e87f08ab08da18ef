"""Errors that travel to clients as ``{"error": code, "message": text}``.

A leaf module: every layer (crdt, store, auth, http, ws) may raise these. The
transport layers turn them into an HTTP answer or a WebSocket ``error`` message.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A refusal with an HTTP status, a stable machine code and a human message."""

    __slots__ = ("code", "extra", "headers", "message", "status")

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: tuple[tuple[str, str], ...] = (),
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.extra = extra
        """More fields of the error body (``history_expired``: ``oldest``)."""

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message}
        if self.extra:
            body.update(self.extra)
        return body


def bad_request(message: str) -> ApiError:
    return ApiError(400, "bad_request", message)


def invalid_op(message: str) -> ApiError:
    return ApiError(400, "invalid_op", message)


def invalid_id(message: str) -> ApiError:
    return ApiError(400, "invalid_id", message)


def invalid_namespace(message: str) -> ApiError:
    return ApiError(400, "invalid_namespace", message)


def unknown_type(message: str) -> ApiError:
    return ApiError(400, "unknown_type", message)


def type_mismatch(message: str) -> ApiError:
    return ApiError(409, "type_mismatch", message)


def cycle(message: str) -> ApiError:
    return ApiError(409, "cycle", message)


def not_found(message: str = "not found") -> ApiError:
    return ApiError(404, "not_found", message)


def forbidden(message: str) -> ApiError:
    return ApiError(403, "forbidden", message)


def unavailable(message: str = "storage is unavailable") -> ApiError:
    """503 for a refusal that is no storage failure (shutting down, too many
    connections); a store raises :class:`StoreUnavailable`."""
    return ApiError(503, "unavailable", message)


class StoreUnavailable(ApiError):
    """A store could not make records durable: 503 ``unavailable``.

    Only the stores raise it (``syncd/store/``), so a caller tells a failed
    disk or database from a refused op by the type alone. An ``ApiError`` of
    any other type from ``Store.commit`` came from the op's own checks in
    ``apply()``, and nothing was written; a ``StoreUnavailable`` means the
    store could not persist what ``apply()`` returned (or, before it ran,
    could not take writes at all): on a local store, memory may then be
    ahead of the disk. A store's reads raise it too when the disk or the
    database cannot answer.

    ``status`` and ``code`` differ from 503 ``unavailable`` in one case: the
    log refusing a record over its size limit (413 ``payload_too_large``),
    where the op was applied but cannot be made durable either.
    """

    __slots__ = ()

    def __init__(
        self,
        message: str = "storage is unavailable",
        *,
        status: int = 503,
        code: str = "unavailable",
    ) -> None:
        super().__init__(status, code, message)


def not_restorable(reason: str) -> ApiError:
    """409: this type cannot be taken back to an earlier state by its ops."""
    return ApiError(409, "not_restorable", reason)


def not_revertible(reason: str) -> ApiError:
    """409: this type cannot take back one writer's ops and keep the others'."""
    return ApiError(409, "not_revertible", reason)


def crdt_too_large(message: str) -> ApiError:
    """413: the op would take one CRDT's state past ``SERVICE_MAX_CRDT_BYTES``."""
    return ApiError(413, "crdt_too_large", message)


def quota_exceeded(message: str) -> ApiError:
    """403: the op would take a namespace past one of its quotas."""
    return ApiError(403, "quota_exceeded", message)


def history_expired(message: str, oldest: int) -> ApiError:
    """410: the history asked for is older than what is retained."""
    return ApiError(410, "history_expired", message, extra={"oldest": oldest})
