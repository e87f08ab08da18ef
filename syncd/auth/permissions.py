"""Token permissions: their shapes (V1 glob lists, V2 rules) and the decisions.

The same shape rules serve two callers: the token decoder (a bad shape there is
a forged or corrupt token: 401) and the token-issue endpoint (a bad request
body: 400). So the parsers raise :class:`PermissionsError` and each caller maps
it to its own answer.

Decisions (docs/permissions.md#v2-rules): V1 grants by any matching glob; a V1 ``admin`` may
read and write every key of its namespace. V2 tries rules in order, skips a rule
whose ``e`` has passed, and lets the first matching rule decide; a write rule's
mask ``o`` (absent = all ops) must hold every bit of the op's mask, and a
mask that holds no op of the type (0, or bits of other types' ops) refuses
every write to it (even a check with an empty mask, as restore and revert make
up front). ``o`` on a read rule is ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from syncd.auth.globs import GlobSet, Matcher, compile_glob
from syncd.crdt.validate import json_int

CLIENT_ID_PLACEHOLDER = "{clientId}"

MAX_PATTERNS = 64
"""Globs per V1 list or rules per V2 list. Every denied request walks the whole
list, and the 4096-character token cap would stop far larger lists anyway."""

MAX_PATTERN_CHARS = 512
"""Characters per glob: ids are at most 256 characters; the margin leaves room
for ``{clientId}`` and stars."""

MAX_MASK = 0xFF
"""Op masks are per-type bit sets; the richest type (tree) uses four bits."""

MAX_EXPIRES_AT = 2**63 - 1
"""Expiry timestamps (ms) are stored as signed 64-bit integers."""

MAX_RATE_LIMIT = 1_000_000
"""A per-token ``rl`` beyond what one server can serve is a mistake, refused."""


class PermissionsError(ValueError):
    """A permissions object of the wrong shape; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class Rule:
    """A V2 rule: glob ``pattern`` (may hold ``{clientId}``), op ``mask``
    (None = every op), ``expires_at`` in ms (None = only the token's expiry)."""

    pattern: str
    mask: int | None = None
    expires_at: int | None = None

    def to_map(self) -> dict[str, Any]:
        out: dict[str, Any] = {"p": self.pattern}
        if self.mask is not None:
            out["o"] = self.mask
        if self.expires_at is not None:
            out["e"] = self.expires_at
        return out


@dataclass(frozen=True, slots=True)
class V1Permissions:
    version: ClassVar[int] = 1
    read: tuple[str, ...] = ()
    write: tuple[str, ...] = ()
    admin: bool = False

    def to_map(self) -> dict[str, Any]:
        return {"read": list(self.read), "write": list(self.write), "admin": self.admin}


@dataclass(frozen=True, slots=True)
class V2Permissions:
    version: ClassVar[int] = 2
    read: tuple[Rule, ...] = ()
    write: tuple[Rule, ...] = ()
    rate_limit: int | None = None

    def to_map(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "v": 2,
            "r": [r.to_map() for r in self.read],
            "w": [r.to_map() for r in self.write],
        }
        if self.rate_limit is not None:
            out["rl"] = self.rate_limit
        return out


Permissions = V1Permissions | V2Permissions


# --- shape checks ---------------------------------------------------------


def _int_in(value: object, low: int, high: int, json_body: bool) -> int | None:
    """``value`` as an int from ``low`` to ``high``, else None. A bool is never
    a number. In a JSON request body ``2.0`` is the integer 2 (as JSON Schema
    says); in token claims, which syncd itself encodes, only an int is."""
    number = json_int(value) if json_body else (value if type(value) is int else None)
    return number if number is not None and low <= number <= high else None


def _check_keys(obj: Mapping[Any, Any], allowed: frozenset[str], what: str) -> None:
    extra = [k for k in obj if k not in allowed]
    if extra:
        shown = ", ".join(sorted(repr(k) for k in extra))
        raise PermissionsError(f"{what}: has unknown field(s) {shown}")


def _pattern(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise PermissionsError(f"{what}: must be a string")
    if len(value) > MAX_PATTERN_CHARS:
        raise PermissionsError(f"{what}: is longer than {MAX_PATTERN_CHARS} characters")
    return value


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise PermissionsError(f"{what}: must be an array")
    if len(value) > MAX_PATTERNS:
        raise PermissionsError(f"{what}: has more than {MAX_PATTERNS} entries")
    return value


def _globs(value: object, what: str) -> tuple[str, ...]:
    return tuple(_pattern(v, f"{what}[{i}]") for i, v in enumerate(_list(value, what)))


_V1_KEYS = frozenset({"read", "write", "admin"})
_V2_KEYS = frozenset({"v", "r", "w", "rl"})
_RULE_KEYS = frozenset({"p", "o", "e"})


def parse_v1(obj: object, *, what: str = "permissions") -> V1Permissions:
    """``{read: [glob], write: [glob], admin?: bool}``; absent lists are empty."""
    if not isinstance(obj, dict):
        raise PermissionsError(f"{what}: must be an object")
    _check_keys(obj, _V1_KEYS, what)
    admin = obj.get("admin", False)
    if not isinstance(admin, bool):
        raise PermissionsError(f"{what}.admin: must be a boolean")
    return V1Permissions(
        read=_globs(obj.get("read", []), f"{what}.read"),
        write=_globs(obj.get("write", []), f"{what}.write"),
        admin=admin,
    )


def parse_rule(obj: object, what: str, *, json_body: bool = False) -> Rule:
    if not isinstance(obj, dict):
        raise PermissionsError(f"{what}: must be an object")
    _check_keys(obj, _RULE_KEYS, what)
    if "p" not in obj:
        raise PermissionsError(f"{what}.p: is required")
    pattern = _pattern(obj["p"], f"{what}.p")
    mask = obj.get("o")
    if mask is not None:
        mask = _int_in(mask, 0, MAX_MASK, json_body)
        if mask is None:
            raise PermissionsError(f"{what}.o: must be an integer from 0 to {MAX_MASK}")
    expires_at = obj.get("e")
    if expires_at is not None:
        expires_at = _int_in(expires_at, 0, MAX_EXPIRES_AT, json_body)
        if expires_at is None:
            raise PermissionsError(f"{what}.e: must be a non-negative integer (ms)")
    return Rule(pattern, mask, expires_at)


def parse_v2(
    obj: object, *, require_v: bool, what: str = "permissions", json_body: bool = False
) -> V2Permissions:
    """``{v: 2, r: [rule], w: [rule], rl?: int}``. ``v`` is required inside token
    claims (it marks the version) and optional in an issue body's ``rules``;
    ``json_body``: parsed from a request's JSON (``2.0`` counts as 2)."""
    if not isinstance(obj, dict):
        raise PermissionsError(f"{what}: must be an object")
    _check_keys(obj, _V2_KEYS, what)
    if ("v" in obj or require_v) and _int_in(obj.get("v"), 2, 2, json_body) is None:
        raise PermissionsError(f"{what}.v: must be 2")
    rl = obj.get("rl")
    if rl is not None:
        rl = _int_in(rl, 1, MAX_RATE_LIMIT, json_body)
        if rl is None:
            raise PermissionsError(f"{what}.rl: must be an integer from 1 to {MAX_RATE_LIMIT}")
    read = _list(obj.get("r", []), f"{what}.r")
    write = _list(obj.get("w", []), f"{what}.w")
    return V2Permissions(
        read=tuple(
            parse_rule(r, f"{what}.r[{i}]", json_body=json_body) for i, r in enumerate(read)
        ),
        write=tuple(
            parse_rule(r, f"{what}.w[{i}]", json_body=json_body) for i, r in enumerate(write)
        ),
        rate_limit=rl,
    )


def parse_permissions(obj: object) -> Permissions:
    """The ``permissions`` claim of a token: V2 when it holds ``v``, else V1."""
    if isinstance(obj, dict) and "v" in obj:
        return parse_v2(obj, require_v=True)
    return parse_v1(obj)


# --- compiled form and decisions -------------------------------------------


class CompiledRule(NamedTuple):
    match: Matcher
    mask: int | None
    expires_at: int | None
    pattern: str
    """The pattern with ``{clientId}`` expanded, for messages."""


class RuleList:
    """V2 rules with ``{clientId}`` expanded and globs compiled, once per token."""

    __slots__ = ("_has_expiry", "rules")

    def __init__(self, rules: tuple[Rule, ...], client_id: int) -> None:
        cid = str(client_id)
        compiled = []
        for r in rules:
            pattern = r.pattern.replace(CLIENT_ID_PLACEHOLDER, cid)
            compiled.append(CompiledRule(compile_glob(pattern), r.mask, r.expires_at, pattern))
        self.rules: tuple[CompiledRule, ...] = tuple(compiled)
        self._has_expiry = any(r.expires_at is not None for r in rules)

    def first_match(self, crdt_id: str, clock_ms: Callable[[], int]) -> CompiledRule | None:
        """The rule that decides for ``crdt_id``: the first unexpired one that
        matches. The clock is read only when some rule can expire."""
        now = clock_ms() if self._has_expiry else 0
        for rule in self.rules:
            if rule.expires_at is not None and now >= rule.expires_at:
                continue
            if rule.match(crdt_id):
                return rule
        return None

    def grant_ends(self, crdt_id: str, now: int) -> int | None:
        """When these rules stop granting ``crdt_id``, as seen at ``now``: None
        while a rule without ``e`` decides, else the instant the grant ends
        (``now`` when none grants it now).

        When the deciding rule expires, the next unexpired match decides, so
        the grant lasts through a chain of rules; one pass finds its end,
        since an expired rule never comes back and a pattern never starts
        matching later."""
        at = now
        for rule in self.rules:
            expires_at = rule.expires_at
            if expires_at is not None and at >= expires_at:
                continue
            if rule.match(crdt_id):
                if expires_at is None:
                    return None
                at = expires_at
        return at


class CompiledPermissions:
    """What the request-time checks consult: V1 glob sets or V2 rule lists."""

    __slots__ = ("full_access", "read_globs", "read_rules", "write_globs", "write_rules")

    def __init__(self, permissions: Permissions, client_id: int) -> None:
        self.read_globs: GlobSet | None = None
        self.write_globs: GlobSet | None = None
        self.read_rules: RuleList | None = None
        self.write_rules: RuleList | None = None
        if isinstance(permissions, V1Permissions):
            self.full_access = permissions.admin
            self.read_globs = GlobSet(permissions.read)
            self.write_globs = GlobSet(permissions.write)
        else:
            self.full_access = False
            self.read_rules = RuleList(permissions.read, client_id)
            self.write_rules = RuleList(permissions.write, client_id)

    def can_read(self, crdt_id: str, clock_ms: Callable[[], int]) -> bool:
        if self.full_access:
            return True
        if self.read_globs is not None:
            return self.read_globs.matches(crdt_id)
        assert self.read_rules is not None
        return self.read_rules.first_match(crdt_id, clock_ms) is not None

    def read_ends(self, crdt_id: str, now: int) -> int | None:
        """When the read of ``crdt_id`` stops being granted, as seen at ``now``
        (``now`` when it is not granted now); None: never (the token's own
        expiry aside)."""
        if self.full_access:
            return None
        if self.read_globs is not None:
            return None if self.read_globs.matches(crdt_id) else now
        assert self.read_rules is not None
        return self.read_rules.grant_ends(crdt_id, now)

    def write_denial(
        self, crdt_id: str, type_name: str, mask: int, clock_ms: Callable[[], int]
    ) -> str | None:
        """None when the write is allowed, else the reason it is not."""
        if self.full_access:
            return None
        if self.write_globs is not None:
            if self.write_globs.matches(crdt_id):
                return None
            return f"no write permission matches {crdt_id!r}"
        assert self.write_rules is not None
        rule = self.write_rules.first_match(crdt_id, clock_ms)
        if rule is None:
            return f"no write rule matches {crdt_id!r}"
        if rule.mask is not None and mask & ~rule.mask:
            return (
                f"op not allowed by the rule's mask: rule {rule.pattern!r} allows "
                f"0x{rule.mask:02x}, this {type_name} op needs 0x{mask:02x}"
            )
        if rule.mask is not None and not rule.mask & _op_bits(type_name, crdt_id):
            # Allows no op of the type at all, so no write: also for the
            # up-front checks of restore and revert, which ask with an empty
            # mask (that fits in every mask, 0 too) and no type (the id's
            # prefix, or every type, stands for it).
            ops = f"{type_name} op" if type_name else "op"
            return f"no write: rule {rule.pattern!r} allows 0x{rule.mask:02x}, no {ops}"
        return None


def _op_bits(type_name: str, crdt_id: str) -> int:
    """The OR of the op-mask bits of ``type_name``'s ops (every bit for a type
    this does not know). Without a type (the up-front checks of restore and
    revert, made before the id is looked up), the type the id's prefix fixes,
    or for an id without one every type's ops: a mask that holds no op the
    id can take refuses there as it does once the type is known, so an
    absent id is 403 as an existing one is (not 404: that told a token that
    may not read it whether it exists). Imported here, not at the top:
    clients import this module (through the token codec) and need none of
    the CRDT types."""
    from syncd.crdt.types import TYPES

    if not type_name:
        from syncd.crdt.types import type_for_id

        type_name = type_for_id(crdt_id) or ""
    if type_name:
        cls = TYPES.get(type_name)
        if cls is None:
            return MAX_MASK
        classes: Iterable[Any] = (cls,)
    else:
        classes = TYPES.values()
    bits = 0
    for each in classes:
        for bit in each.OPS.values():
            bits |= bit
    return bits
