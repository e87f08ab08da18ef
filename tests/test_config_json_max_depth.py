"""SERVICE_JSON_MAX_DEPTH took any positive integer, but JSON is decoded
recursively and Python stops the decoder near its recursion limit (1000
levels, less the server's own frames): with the setting at 100000 a body 2000
deep was refused as "JSON nesting deeper than 100000", which it was not, and
the setting promised what the server cannot do. It now has a maximum the
decoder reaches (MAX_JSON_MAX_DEPTH), each level of which a real server
honours; a larger value is one line, exit 2."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from syncd.config import MAX_JSON_MAX_DEPTH, ConfigError, from_env
from tests.http.support import issue


def test_a_depth_past_what_the_decoder_can_reach_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_JSON_MAX_DEPTH": "100000"})
    assert str(info.value) == (
        f"SERVICE_JSON_MAX_DEPTH: must be at most {MAX_JSON_MAX_DEPTH}, got 100000"
    )


def nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


async def test_the_maximum_is_honoured_by_a_real_server(make_server: Any) -> None:
    assert from_env({"SERVICE_JSON_MAX_DEPTH": str(MAX_JSON_MAX_DEPTH)}).json_max_depth == (
        MAX_JSON_MAX_DEPTH
    )
    srv = await make_server(json_max_depth=MAX_JSON_MAX_DEPTH)
    async with httpx.AsyncClient(base_url=srv.url) as client:
        h = {**await issue(client), "content-type": "application/json"}
        url = "/v1/namespaces/app/crdts/lw:deep/ops"
        # The op's value is nested deeper than a value may be: refused by the
        # op's own check, after the whole body was decoded.
        at_the_limit = '{"op":"set","value":' + nested(MAX_JSON_MAX_DEPTH - 1) + "}"
        r = await client.post(url, content=at_the_limit, headers=h)
        assert r.status_code == 400 and r.json()["error"] == "invalid_op", r.text
        past_it = '{"op":"set","value":' + nested(MAX_JSON_MAX_DEPTH) + "}"
        r = await client.post(url, content=past_it, headers=h)
        assert r.status_code == 400, r.text
        assert r.json()["message"] == f"JSON nesting deeper than {MAX_JSON_MAX_DEPTH}"
