"""The demo token limit per client address, for IPv6 clients: one host holds
a whole /64 (SLAAC, privacy addresses, a provider's delegated prefix), so
counting each address apart let one machine mint demo tokens without end by
changing its last 64 bits. An IPv6 client is counted by its /64."""

from __future__ import annotations

from typing import Any

import httpx

from syncd.http.handlers.demo import DEMO_TOKENS_PER_WINDOW
from syncd.proxies import parse_networks


async def test_addresses_of_one_ipv6_64_share_one_limit(make_server: Any) -> None:
    server = await make_server(demo=True, trusted_proxies=parse_networks("127.0.0.1"))
    async with httpx.AsyncClient(base_url=server.url) as client:

        async def mint(address: str) -> int:
            answer = await client.get("/demo/token", headers={"x-forwarded-for": address})
            return answer.status_code

        for n in range(DEMO_TOKENS_PER_WINDOW):
            assert await mint(f"2001:db8:1:2::{n + 1:x}") == 200
        assert await mint("2001:db8:1:2:ffff:ffff:ffff:ffff") == 429  # the same /64
        assert await mint("2001:db8:1:3::1") == 200  # another /64: another client
        assert await mint("192.0.2.1") == 200  # IPv4: by its address, as before
