"""Authorization cost per request: warm token cache vs. a cold signature check.

One "request" is what the HTTP layer does before touching a CRDT:
``authenticate`` (header parse, root-secret compare, cache lookup, expiry,
namespace, rate limit) and ``check_write`` against a V2 token with a few rules.
The warm figure is the steady state (target: at most 5 us); the cold one has
the cache turned off, so every request pays for the ed25519 verification.

``--revocations N`` fills the revocation table first (docs/permissions.md#revoking-tokens):
N-1 other clients of the namespace, and the measured client itself with a
line before its token's ``issued_at``, so each request takes the whole check
(a lookup that finds an entry, and the comparison) and is let through.

    .venv/bin/python -m perf.bench.auth_cost [--n 200000] [--revocations N]
"""

from __future__ import annotations

import argparse
import json
import time

from perf.suite.registry import TARGETS
from syncd.auth import AdminSecret, Authenticator, SigningKey, issue_token
from syncd.auth.revocations import Revocation

RULES = {
    "r": [{"p": "pr:*"}, {"p": "or:cart-{clientId}"}],
    "w": [
        {"p": "lw:settings", "o": 0x01, "e": 4_000_000_000_000},
        {"p": "gc:*", "o": 0x01},
        {"p": "or:cart-{clientId}", "o": 0x03},
    ],
    # High enough that the loop never hits 429, so the limiter's normal path
    # (append, expire) is what is measured.
    "rl": 1_000_000,
}


def _per_request_us(auth: Authenticator, header: str, n: int) -> float:
    authenticate = auth.authenticate
    check_write = auth.check_write
    start = time.perf_counter()
    for _ in range(n):
        p = authenticate(header, "demo")
        check_write(p, "or:cart-42", "orset", 0x02)
    return (time.perf_counter() - start) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="requests for the warm run")
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument(
        "--revocations", type=int, default=0, help="revocations in the table (see above)"
    )
    args = ap.parse_args(argv)
    key = SigningKey.generate()
    admin = AdminSecret("bench-admin-secret-0123456789abcdef")
    now = time.time_ns() // 1_000_000
    token = issue_token(
        key, namespace="demo", client_id=42, ttl_ms=3_600_000, rules=RULES, now_ms=now
    )
    header = f"Bearer {token}"

    warm = Authenticator(key, admin)
    if args.revocations > 0:
        others = [Revocation("demo", 1000 + i, now, now) for i in range(args.revocations - 1)]
        warm.revocations.replace([*others, Revocation("demo", 42, now - 1, now)])
    _per_request_us(warm, header, 1000)  # fill the cache, warm up
    warm_us = min(_per_request_us(warm, header, args.n) for _ in range(3))

    cold = Authenticator(key, admin, cache_size=0)
    cold_us = min(_per_request_us(cold, header, max(1000, args.n // 100)) for _ in range(3))

    print(f"revocations in the table: {args.revocations}")
    print(
        f"warm cache: {warm_us:6.2f} us per request (authenticate + check_write; target {TARGETS['auth.warm']})"
    )
    print(f"cold verify:{cold_us:7.2f} us per request (cache disabled: ed25519 verify each time)")
    print(f"ratio: {cold_us / warm_us:.0f}x")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {"warm_us": warm_us, "cold_us": cold_us, "revocations": args.revocations},
                f,
                indent=2,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
