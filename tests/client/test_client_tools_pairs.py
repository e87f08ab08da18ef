"""build_tools (and so AgentTools) given something other than (crdt_id, type)
pairs says what it wants, instead of 'too many values to unpack': a dict
{id: type} iterated its keys and unpacked each id string."""

from __future__ import annotations

from typing import Any

import pytest

from syncd.client.tools import build_tools


@pytest.mark.parametrize(
    "crdts",
    [{"visits": "gcounter"}, ["visits"], [("visits", "gcounter", "x")], [("visits",)], "ab"],
)
def test_not_pairs_are_refused_clearly(crdts: Any) -> None:
    with pytest.raises(ValueError, match=r"\(crdt_id, type\) pairs"):
        build_tools(crdts)


def test_pairs_as_lists_still_work() -> None:
    tools = build_tools([["visits", "gcounter"], ("title", "lwwregister")])  # type: ignore[list-item]
    assert tools[0].name == "service_read_visits"
