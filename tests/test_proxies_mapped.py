"""IPv4-mapped IPv6 addresses (``::ffff:a.b.c.d``) behind trusted proxies.

A proxy listening on a dual-stack socket writes an IPv4 client's address in
its mapped form (nginx's ``$remote_addr`` on ``listen [::]`` with
``ipv6only=off``), and a peer can reach syncd that way too. The mapped form
is the IPv4 address: a trusted proxy in it is still trusted, and a client is
counted under the address it has when it comes directly, not under a second
spelling of it."""

from __future__ import annotations

import pytest

from syncd.proxies import client_address, parse_networks

PROXIES = parse_networks("10.0.0.1, 192.168.0.0/16")


@pytest.mark.parametrize(
    ("peer", "headers", "client"),
    [
        # a trusted proxy's address in its mapped form: still the proxy
        ("::ffff:10.0.0.1", {"x-forwarded-for": "1.2.3.4"}, "1.2.3.4"),
        # a trusted hop in its mapped form is skipped as the plain one is
        ("10.0.0.1", {"x-forwarded-for": "1.2.3.4, ::ffff:192.168.1.2"}, "1.2.3.4"),
        ("10.0.0.1", {"forwarded": 'for=1.2.3.4, for="[::ffff:192.168.1.2]:80"'}, "1.2.3.4"),
        # the client's own address: the one it has when it comes directly
        ("10.0.0.1", {"x-forwarded-for": "::ffff:1.2.3.4"}, "1.2.3.4"),
        ("10.0.0.1", {"forwarded": 'for="[::ffff:1.2.3.4]:4711"'}, "1.2.3.4"),
    ],
)
def test_a_mapped_address_is_its_ipv4_address(
    peer: str, headers: dict[str, str], client: str
) -> None:
    assert client_address(peer, headers, PROXIES) == client


def test_a_trusted_ipv6_proxy_is_not_an_ipv4_one() -> None:
    """Only the ``::ffff:0:0/96`` block maps: another IPv6 address whose last
    32 bits spell a trusted IPv4 proxy is not that proxy."""
    assert client_address("2001:db8::a00:1", {"x-forwarded-for": "1.2.3.4"}, PROXIES) == (
        "2001:db8::a00:1"
    )
