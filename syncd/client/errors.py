"""Errors the client raises.

``TokenError`` and its two subclasses come from local pre-validation, before
any connection (docs/clients.md#token-pre-validation); ``ServiceError`` is a refusal by the service
(its ``{"error", "message"}`` body), :class:`TokenRevokedError` when the
refusal is ``token_revoked`` (an admin revoked the token: only the service can
know, so there is no local check); ``TransportError`` is a failure to talk to
it at all (refused connection, reset, timeout), the case worth retrying.
"""

from __future__ import annotations

from typing import Any


class ClientError(Exception):
    """Base of every error raised by :mod:`syncd.client`."""


class TokenError(ClientError):
    """The token was refused locally, before any connection."""


class TokenParseError(TokenError, ValueError):
    """The token is not a well-formed syncd token (the signature is not checked)."""


class TokenExpiredError(TokenError):
    """The token's ``expires_at`` has passed."""

    def __init__(self, message: str, expires_at: int) -> None:
        super().__init__(message)
        self.expires_at = expires_at


class TokenNamespaceError(TokenError, ValueError):
    """The token is for another namespace than the client's (every call would be 403)."""


class ServiceError(ClientError):
    """The service answered with an error status and body."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.retry_after = retry_after
        """Seconds to wait, from ``Retry-After`` (429 answers)."""
        self.body: dict[str, Any] = body or {}
        """The whole error body (``history_expired`` carries ``oldest``)."""

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed later (rate limit, store down)."""
        return self.status in (429, 502, 503, 504)


class TokenRevokedError(ServiceError):
    """401 ``token_revoked``: an admin revoked the client's tokens issued before
    some time (docs/permissions.md#revoking-tokens). Retrying with the same
    token cannot help; a token issued after the revocation works. Raised by
    requests, and by streams the service ends for it."""


def service_error(
    status: int,
    code: str,
    message: str,
    retry_after: float | None = None,
    body: dict[str, Any] | None = None,
) -> ServiceError:
    """The exception for a refusal: :class:`TokenRevokedError` for
    ``token_revoked``, else :class:`ServiceError`."""
    cls = TokenRevokedError if code == "token_revoked" else ServiceError
    return cls(status, code, message, retry_after, body)


class TransportError(ClientError):
    """The service could not be reached, or the connection failed mid-request."""


class EpochChangedError(ClientError):
    """A wait for a seq (``Replica.wait_for_seq``) in one life of a CRDT (its
    ``epoch``) that life ended before the seq came: the CRDT was deleted, or
    deleted and made anew, and the new life's seqs start again at 1, so the
    seq awaited will never come in it."""

    def __init__(self, message: str, expected: str, epoch: str | None) -> None:
        super().__init__(message)
        self.expected = expected
        """The epoch waited in."""
        self.epoch = epoch
        """The replica's epoch when the wait failed (None: deleted)."""


class MessageTooLargeError(ClientError):
    """A stream message was over the client's size bound; reconnecting would
    only fetch it again, so the stream ends with this instead."""


__all__ = [
    "ClientError",
    "EpochChangedError",
    "MessageTooLargeError",
    "ServiceError",
    "TokenError",
    "TokenExpiredError",
    "TokenNamespaceError",
    "TokenParseError",
    "TokenRevokedError",
    "TransportError",
    "service_error",
]
