"""Errors that travel to clients as ``{"error": code, "message": text}``.

A leaf module: every layer (crdt, store, auth, http, ws) may raise these. The
transport layers turn them into an HTTP answer or a WebSocket ``error`` message.
"""

from __future__ import annotations


class ApiError(Exception):
    """A refusal with an HTTP status, a stable machine code and a human message."""

    __slots__ = ("code", "headers", "message", "status")

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers

    def body(self) -> dict[str, str]:
        return {"error": self.code, "message": self.message}


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
    return ApiError(503, "unavailable", message)
