"""Request-level authentication and authorization.

The HTTP and WebSocket layers call, per request::

    principal = auth.authenticate(headers.get("authorization"), ns)   # 401/403/429
    auth.check_read(principal, crdt_id)                                # 403
    auth.check_write(principal, crdt_id, type_name, op_mask)           # 403

and :meth:`Authenticator.rate_check` for every WebSocket op and subscribe
message.

Verifying an ed25519 signature costs ~140 us, far more than everything else
here, so verified tokens are kept in a bounded LRU cache keyed by the token
string: the signature of a token is checked once, while its expiry,
revocation, namespace and rate are checked on every call. Only verified tokens
enter the cache, so garbage cannot evict good entries.

Keys: a token verifies under the current signing key or one of the previous
ones (``SERVICE_PREVIOUS_SIGNING_KEYS``), tried in that order on a cache miss;
the principal remembers which (``key_id``, shown by ``tokens/me``).

Revocation (:mod:`syncd.auth.revocations`): one dictionary lookup per
request, keyed by a string each principal carries ready-made, and skipped
altogether while nothing is revoked.

The checks after :meth:`authenticate` take no namespace: they assume the
principal was authenticated for the request's namespace (a token only ever
grants inside its own namespace; the root admin everywhere).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from syncd.auth.admin import AdminSecret
from syncd.auth.permissions import CompiledPermissions, Permissions, V2Permissions
from syncd.auth.ratelimit import RateLimiter, monotonic_ms
from syncd.auth.revocations import RevocationTable, revoke_key, token_revoked
from syncd.auth.tokens import SigningKey, invalid_token, verify_token_any
from syncd.errors import ApiError, forbidden

TOKEN_CACHE_SIZE = 10_000
"""Verified tokens kept (about a kilobyte each with their compiled globs)."""

DEFAULT_RATE_LIMIT = 100
"""Requests per sliding second per token (``SERVICE_RATE_LIMIT``, docs/permissions.md#rate-limits)."""

ROOT_CLIENT_ID = 0
"""The writer identity of the root admin (it has no token, hence no client id)."""

RATE_LIMITED_MESSAGE = "too many requests"

TOKEN_EXPIRED_MESSAGE = "token expired"

NOT_A_BEARER_MESSAGE = (
    "the bearer is neither the admin secret nor a token (a token is two base64url "
    "parts joined by '.')"
)
"""A bearer without a dot cannot be a token: most often a mistyped admin secret."""

NO_END_MS = 2**63
"""The end of a read that never ends: past every ms timestamp (int64)."""

TIMER_SLACK_MS = 1
"""Added to the delay of a timer set for an expiry: uvloop rounds delays down
to whole milliseconds, and a timer that fires before the instant finds
nothing expired and must be set again."""


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True, eq=False)
class Principal:
    """Who made a request: the root admin, or the holder of a verified token."""

    root: bool
    namespace: str | None
    """The token's namespace; None for the root admin (every namespace)."""
    client_id: int
    expires_at: int | None
    """ms since the epoch; None for the root admin (never expires)."""
    permissions: Permissions | None
    """As issued (``{clientId}`` unexpanded); None for the root admin."""
    rate_limit: int | None
    """Requests per sliding second; None = not rate-limited (the root admin)."""
    rate_key: bytes | None = field(repr=False)
    """What the rate limiter counts by: the token's signature (kept out of
    repr: with the claims, it would rebuild the token)."""
    compiled: CompiledPermissions | None = field(repr=False)
    issued_at: int = 0
    """The token's ``issued_at`` (ms); 0 for a token without one, and the root admin."""
    key_id: str | None = None
    """The id of the key that signed the token (syncd/auth/tokens.py); None
    for the root admin."""
    revoke_key: str = field(default="", repr=False)
    """``namespace/client_id``, what revocations are looked up by; empty for
    the root admin (it cannot be revoked)."""

    @property
    def version(self) -> int:
        """1 or 2 for tokens, 0 for the root admin."""
        return 0 if self.permissions is None else self.permissions.version

    @property
    def ns_admin(self) -> bool:
        """A V1 token with ``admin: true``: admin of its own namespace."""
        return self.compiled is not None and self.compiled.full_access


ROOT = Principal(
    root=True,
    namespace=None,
    client_id=ROOT_CLIENT_ID,
    expires_at=None,
    permissions=None,
    rate_limit=None,
    rate_key=None,
    compiled=None,
)


def _missing_token() -> ApiError:
    return ApiError(401, "missing_token", "missing bearer token")


def token_expired() -> ApiError:
    return ApiError(401, "token_expired", TOKEN_EXPIRED_MESSAGE)


def rate_limited(retry_after: int, message: str = RATE_LIMITED_MESSAGE) -> ApiError:
    """429 with the seconds to wait in ``Retry-After`` and in the body's
    ``retry_after`` (as a WebSocket ``error`` message carries it)."""
    return ApiError(
        429,
        "rate_limited",
        message,
        headers=(("Retry-After", str(retry_after)),),
        extra={"retry_after": retry_after},
    )


class Authenticator:
    def __init__(
        self,
        signing_key: SigningKey,
        admin_secret: AdminSecret | None,
        *,
        default_rate_limit: int = DEFAULT_RATE_LIMIT,
        clock_ms: Callable[[], int] = wall_clock_ms,
        cache_size: int = TOKEN_CACHE_SIZE,
        rate_limiter: RateLimiter | None = None,
        rate_clock_ms: Callable[[], int] = monotonic_ms,
        previous_keys: Sequence[SigningKey] = (),
    ) -> None:
        """``clock_ms`` is wall time (token and rule expiry); the rate limiter
        measures its window on ``rate_clock_ms`` (monotonic), unless a ready
        ``rate_limiter`` is given. ``cache_size=0`` turns the cache off.
        Tokens signed by ``signing_key`` or one of ``previous_keys`` verify."""
        if default_rate_limit < 1:
            raise ValueError("default_rate_limit must be at least 1")
        if cache_size < 0:
            raise ValueError("cache_size must not be negative")
        self._key = signing_key
        keys = [signing_key]
        for key in previous_keys:
            if all(key.seed != known.seed for known in keys):
                keys.append(key)
        self.keys: tuple[SigningKey, ...] = tuple(keys)
        """The keys tokens may be signed with: the current one first."""
        self._admin = admin_secret
        self.default_rate_limit = default_rate_limit
        self._clock = clock_ms
        self._cache_size = cache_size
        self._cache: OrderedDict[str, Principal] = OrderedDict()
        self.rate_limiter = rate_limiter or RateLimiter(clock_ms=rate_clock_ms)
        self.revocations = RevocationTable()
        """Revoked clients, and the open connections a revocation ends."""
        self._revoked = self.revocations.before
        """The table's dictionary itself (changed only in place)."""

    def use_admin_secret(self, admin_secret: AdminSecret) -> None:
        """Set the root admin secret (read at start-up, from the environment or
        the data directory); until then no bearer is the root admin."""
        self._admin = admin_secret

    # --- authentication ----------------------------------------------------

    def authenticate(
        self,
        authorization: str | None,
        ns: str | None,
        *,
        query_token: str | None = None,
    ) -> Principal:
        """The principal behind a request to namespace ``ns`` (None: a route
        without one), counted against its rate limit.

        ``authorization`` is the ``Authorization`` header; ``query_token`` the
        ``?token=`` of a WebSocket upgrade or event stream, used when the
        header holds no bearer: a browser behind a site's password sends its
        ``Basic`` credentials on those requests too, and cannot send another.
        """
        if authorization is not None and (
            authorization.startswith("Bearer ") or authorization[:7].lower() == "bearer "
        ):
            bearer = authorization[7:].strip(" \t")
        elif query_token is not None:
            bearer = query_token
        elif authorization is not None:
            raise invalid_token("authorization must be 'Bearer <token>'")
        else:
            raise _missing_token()
        if not bearer:
            raise invalid_token("the bearer token is empty")
        if self._admin is not None and self._admin.matches(bearer):
            return ROOT
        # principal_for's cache hit, inline: once per request.
        cache = self._cache
        principal = cache.get(bearer)
        if principal is None:
            principal = self.principal_for(bearer)
        else:
            cache.move_to_end(bearer)
        assert principal.expires_at is not None
        if self._clock() >= principal.expires_at:
            self._cache.pop(bearer, None)
            raise token_expired()
        revoked = self._revoked
        if revoked:
            before = revoked.get(principal.revoke_key)
            if before is not None and principal.issued_at < before:
                raise token_revoked()
        if ns is not None and principal.namespace != ns:
            raise forbidden(f"the token is for namespace {principal.namespace!r}, not {ns!r}")
        # rate_check(), inline: once per request.
        if principal.rate_key is not None and principal.rate_limit is not None:
            retry_after = self.rate_limiter.hit(principal.rate_key, principal.rate_limit)
            if retry_after:
                raise rate_limited(retry_after)
        return principal

    def principal_for(self, token: str) -> Principal:
        """The principal of a token with a valid signature (cached), without the
        expiry, namespace and rate checks."""
        principal = self._cache.get(token)
        if principal is not None:
            self._cache.move_to_end(token)
            return principal
        if "." not in token:
            raise invalid_token(NOT_A_BEARER_MESSAGE)
        claims, signature, key = verify_token_any(token, self.keys)
        permissions = claims.permissions
        rl = permissions.rate_limit if isinstance(permissions, V2Permissions) else None
        principal = Principal(
            root=False,
            namespace=claims.namespace,
            client_id=claims.client_id,
            expires_at=claims.expires_at,
            permissions=permissions,
            rate_limit=rl if rl is not None else self.default_rate_limit,
            rate_key=signature,
            compiled=CompiledPermissions(permissions, claims.client_id),
            issued_at=claims.issued_at or 0,
            key_id=key.key_id,
            revoke_key=revoke_key(claims.namespace, claims.client_id),
        )
        # An expired token is not cached: at a full cache its entry would
        # evict a live token's before authenticate dropped it again, so one
        # expired token sent over and over would flush the cache. A cache
        # miss only: the check costs nothing beside the signature's.
        if self._cache_size and self._clock() < claims.expires_at:
            self._cache[token] = principal
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return principal

    def rate_check(self, principal: Principal) -> None:
        """Count one request (HTTP request, WebSocket op or subscribe); 429 over the limit."""
        if principal.rate_key is None or principal.rate_limit is None:
            return
        retry_after = self.rate_limiter.hit(principal.rate_key, principal.rate_limit)
        if retry_after:
            raise rate_limited(retry_after)

    def check_expiry(self, principal: Principal) -> None:
        """401 ``token_expired`` once the token has expired, ``token_revoked``
        once it is revoked (for long-lived connections, e.g. before each
        WebSocket op)."""
        if principal.expires_at is not None and self._clock() >= principal.expires_at:
            raise token_expired()
        if self._revoked and self.revocations.is_revoked(principal):
            raise token_revoked()

    def now_ms(self) -> int:
        """The wall clock that token and rule expiry are measured on (ms)."""
        return self._clock()

    def seconds_until(self, at_ms: int) -> float:
        """The delay for a loop timer that must not fire before ``at_ms`` on
        this clock (0 once it has passed). Loop timers run on the monotonic
        clock, so whoever it calls checks :meth:`now_ms` again."""
        return max(at_ms - self._clock() + TIMER_SLACK_MS, 0) / 1000

    # --- authorization -----------------------------------------------------

    def can_read(self, principal: Principal, crdt_id: str) -> bool:
        compiled = principal.compiled
        if compiled is None:
            return principal.root
        return compiled.can_read(crdt_id, self._clock)

    def check_read(self, principal: Principal, crdt_id: str) -> None:
        if not self.can_read(principal, crdt_id):
            raise forbidden(f"no read permission matches {crdt_id!r}")

    def read_ends(self, principal: Principal, crdt_id: str) -> int | None:
        """When the principal's read of ``crdt_id`` ends (ms since the epoch):
        its token's expiry, or earlier when the rules that grant the read
        expire first (docs/permissions.md#when-access-ends); the current time
        or earlier when it may not read it now; None: never (the root admin).
        A long-lived stream ends at this instant."""
        now = self._clock()
        compiled = principal.compiled
        if compiled is None:
            return None if principal.root else now
        ends = compiled.read_ends(crdt_id, now)
        expires_at = principal.expires_at
        if expires_at is None or (ends is not None and ends < expires_at):
            return ends
        return expires_at

    def read_ended(self, principal: Principal, crdt_id: str) -> ApiError:
        """Why a read that :meth:`read_ends` said would end has ended: the
        token expired (401 ``token_expired``), or the rules that granted it did
        (403 ``forbidden``, as any new request for it would get)."""
        expires_at = principal.expires_at
        if expires_at is not None and self._clock() >= expires_at:
            return token_expired()
        return forbidden(f"the read permission for {crdt_id!r} expired")

    def check_write(self, principal: Principal, crdt_id: str, type_name: str, mask: int) -> None:
        """403 unless the principal may apply ops with these mask bits (the OR
        of a batch's ops) to ``crdt_id`` of type ``type_name``."""
        compiled = principal.compiled
        if compiled is None:
            if principal.root:
                return
            raise forbidden("no write permission")
        denial = compiled.write_denial(crdt_id, type_name, mask, self._clock)
        if denial is not None:
            raise forbidden(denial)

    def check_may_write(self, principal: Principal, crdt_id: str) -> None:
        """403 unless some write to ``crdt_id`` may be allowed, whatever its
        type: the check a route makes before it looks the CRDT up (restore,
        revert), so that an id the principal may not write is 403 whether or
        not it exists (a 404 would tell it which ids exist). The route checks
        again with the type and the ops' mask."""
        self.check_write(principal, crdt_id, "", 0)

    def is_admin(self, principal: Principal, ns: str | None) -> bool:
        """The root admin, or a V1 admin token of namespace ``ns``."""
        if principal.root:
            return True
        return principal.ns_admin and ns is not None and principal.namespace == ns

    def check_admin(self, principal: Principal, ns: str | None) -> None:
        if not self.is_admin(principal, ns):
            raise forbidden("admin permission required")

    def cache_len(self) -> int:
        return len(self._cache)
