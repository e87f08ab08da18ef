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


@pytest.mark.parametrize(
    "headers",
    [
        # A proxy that writes Forwarded, and a client's own X-Forwarded-For
        # passed through: the forged one was read first.
        {"x-forwarded-for": "6.6.6.6", "forwarded": "for=1.2.3.4"},
        # A proxy that writes X-Forwarded-For, and a client's own Forwarded.
        {"x-forwarded-for": "1.2.3.4", "forwarded": "for=6.6.6.6"},
    ],
)
def test_both_headers_from_a_trusted_proxy_name_no_client(headers: dict[str, str]) -> None:
    """Which of the two the proxy wrote cannot be told from the request, and
    the other is the client's to choose: neither is believed, and the request
    counts under the proxy's address (a client cannot pick its own)."""
    assert client_address("10.0.0.1", headers, PROXIES) == "10.0.0.1"


def test_either_header_alone_is_read() -> None:
    assert client_address("10.0.0.1", {"x-forwarded-for": "1.2.3.4"}, PROXIES) == "1.2.3.4"
    assert client_address("10.0.0.1", {"forwarded": "for=1.2.3.4"}, PROXIES) == "1.2.3.4"
