"""The client address behind trusted proxies: the parsing (sans-I/O) and a real
server whose per-address demo limit follows it."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from syncd.config import ConfigError, from_env
from syncd.http.handlers.demo import DEMO_TOKENS_PER_WINDOW
from syncd.proxies import MAX_HOPS, client_address, parse_networks

PROXIES = parse_networks("10.0.0.1, 192.168.0.0/16, ::1")


@pytest.mark.parametrize(
    ("peer", "headers", "client"),
    [
        ("203.0.113.9", {"x-forwarded-for": "1.2.3.4"}, "203.0.113.9"),  # not a proxy: ignored
        ("10.0.0.1", {"x-forwarded-for": "1.2.3.4"}, "1.2.3.4"),
        (
            "10.0.0.1",
            {"x-forwarded-for": "6.6.6.6, 1.2.3.4, 192.168.1.2"},
            "1.2.3.4",
        ),  # rightmost untrusted
        ("10.0.0.1", {}, "10.0.0.1"),
        ("10.0.0.1", {"x-forwarded-for": "garbage"}, "10.0.0.1"),
        ("::1", {"forwarded": 'for="[2001:db8::7]:4711";proto=https'}, "2001:db8::7"),
        ("10.0.0.1", {"forwarded": "for=192.168.5.5, for=198.51.100.17:80"}, "198.51.100.17"),
        ("10.0.0.1", {"x-forwarded-for": "192.168.1.1"}, "10.0.0.1"),  # only proxies: the peer
    ],
)
def test_client_address(peer: str, headers: dict[str, str], client: str) -> None:
    assert client_address(peer, headers, PROXIES) == client


def test_no_trusted_proxies_means_the_peer() -> None:
    assert client_address("10.0.0.1", {"x-forwarded-for": "1.2.3.4"}, ()) == "10.0.0.1"


def test_the_setting_is_checked() -> None:
    assert from_env({"SERVICE_TRUSTED_PROXIES": "127.0.0.1, 10.0.0.0/8"}).trusted_proxies
    with pytest.raises(ConfigError, match="SERVICE_TRUSTED_PROXIES"):
        from_env({"SERVICE_TRUSTED_PROXIES": "10.0.0.0/8, proxy.example"})


async def exhaust(client: httpx.AsyncClient, forwarded_for: str) -> int:
    """Demo tokens until refused; the status of the first refusal."""
    headers = {"x-forwarded-for": forwarded_for}
    for _ in range(DEMO_TOKENS_PER_WINDOW):
        assert (await client.get("/demo/token", headers=headers)).status_code == 200
    return (await client.get("/demo/token", headers=headers)).status_code


async def test_limits_follow_the_forwarded_address_from_a_trusted_proxy(make_server: Any) -> None:
    server = await make_server(demo=True, trusted_proxies=parse_networks("127.0.0.1"))
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert await exhaust(client, "1.2.3.4") == 429
        other = await client.get("/demo/token", headers={"x-forwarded-for": "5.6.7.8"})
        assert other.status_code == 200  # another client behind the same proxy


async def test_forged_headers_from_anyone_else_are_ignored(make_server: Any) -> None:
    server = await make_server(demo=True)  # no trusted proxies
    async with httpx.AsyncClient(base_url=server.url) as client:
        assert await exhaust(client, "1.2.3.4") == 429
        forged = await client.get("/demo/token", headers={"x-forwarded-for": "5.6.7.8"})
        assert forged.status_code == 429  # still this socket's address


@pytest.mark.parametrize("header", ["x-forwarded-for", "forwarded"])
def test_forwarding_hops_are_read_up_to_max_hops(header: str) -> None:
    """The client is found within the rightmost ``MAX_HOPS`` hops; one further
    left is not read (a header can be made arbitrarily long), and the peer
    is taken instead, as for a chain of trusted proxies only."""

    def value(hops: list[str]) -> str:
        if header == "x-forwarded-for":
            return ", ".join(hops)
        return ", ".join(f"for={hop}" for hop in hops)

    proxies = [f"192.168.0.{i}" for i in range(1, MAX_HOPS)]  # MAX_HOPS - 1 trusted hops
    within = ["1.2.3.4", *proxies]
    assert len(within) == MAX_HOPS
    assert client_address("10.0.0.1", {header: value(within)}, PROXIES) == "1.2.3.4"
    beyond = ["1.2.3.4", "192.168.1.1", *proxies]
    assert client_address("10.0.0.1", {header: value(beyond)}, PROXIES) == "10.0.0.1"
