"""Which forwarding header a trusted proxy's request is read from, and what a
hop is in ``Forwarded`` (RFC 7239): the header a proxy wrote is the only one
to believe, and a client may send either (docs/configuration.md,
``SERVICE_TRUSTED_PROXIES``)."""

from __future__ import annotations

import pytest

from syncd.proxies import client_address, parse_networks

PROXIES = parse_networks("10.0.0.1")


@pytest.mark.parametrize(
    ("headers", "client"),
    [
        # The proxy's own element tells no client (only proto and host): the
        # hop it stands for is unknown, and the client's forged element to
        # its left is not read.
        ({"forwarded": "for=6.6.6.6, proto=https;host=example.com"}, "10.0.0.1"),
        ({"forwarded": "for=6.6.6.6, by=10.0.0.1"}, "10.0.0.1"),
        # one element per hop, its for= wherever it stands
        ({"forwarded": "for=6.6.6.6, proto=https;for=1.2.3.4"}, "1.2.3.4"),
        ({"forwarded": 'proto=https; for="[2001:db8::7]:4711" ;by=10.0.0.1'}, "2001:db8::7"),
    ],
)
def test_each_forwarded_element_is_one_hop(headers: dict[str, str], client: str) -> None:
    assert client_address("10.0.0.1", headers, PROXIES) == client
