"""The replica contract (docs/protocol.md) against a real server: a replica
built from the WebSocket's snapshot delta and kept current with its op deltas
equals the server's state and read view at every seq, as ``?at=`` reads it,
after a restore and a revert (ordinary ops, so ordinary deltas), and after a
restart (snapshot plus replay)."""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from syncd.crdt.base import Crdt
from syncd.crdt.types import TYPES
from syncd.store import history_index
from syncd.store.embedded.store import FileStore
from tests.conftest import RunningServer
from tests.ws.support import NS, mint, open_ws, recv, send_mp

Op = dict[str, Any]
OpMaker = Callable[[random.Random, int], Op]

WRITERS = (7, 8, 9)
OPS = 30
MORE_OPS = {"rga": 50, "tree": 90}
"""Types whose random ops are often refused get more tries."""
SEED = os.environ.get("SYNCD_CONTRACT_SEED", "contract")
TREE_IDS = ["a", "b", "c", "d", "e"]


def _counter(rng: random.Random, i: int) -> Op:
    return {"op": rng.choice(["increment", "decrement"]), "amount": rng.randint(1, 5)}


def _orset(rng: random.Random, i: int) -> Op:
    return {
        "op": rng.choice(["add", "add", "remove"]),
        "element": rng.choice([1, "a", [1], {"k": 1}]),
    }


def _lww(rng: random.Random, i: int) -> Op:
    return {"op": "set", "value": rng.choice([1, "x", None, [i]])}


def _presence(rng: random.Random, i: int) -> Op:
    if rng.random() < 0.2:
        return {"op": "leave"}
    # Long lives: a view read a moment later still shows every entry.
    return {"op": "update", "data": {"i": i}, "ttl_ms": rng.randint(100_000, 300_000)}


def _rga(rng: random.Random, i: int) -> Op:
    if rng.random() < 0.65:
        text = rng.choice(["a", "bc", "é😀", "x\u0301"])
        return {"op": "insert", "index": rng.choice([0, 0, 1, 2, 5]), "text": text}
    return {"op": "delete", "index": rng.randint(0, 3), "count": rng.randint(1, 2)}


def _tree(rng: random.Random, i: int) -> Op:
    kind = rng.choice(["add", "add", "add", "move", "move", "move", "update", "delete"])
    op: Op = {"op": kind, "id": rng.choice(TREE_IDS)}
    if kind in ("add", "move"):
        # The root often, so that adds apply; the others make moves and cycles.
        op["parent"] = rng.choice(["root", "root", *TREE_IDS])
        if rng.random() < 0.5:
            op["pos"] = rng.choice(["a", "m"])
    if kind in ("add", "update"):
        op["data"] = {"i": i}
    return op


MAKERS: dict[str, tuple[str, OpMaker]] = {
    "gcounter": ("gc:c", lambda rng, i: {"op": "increment", "amount": rng.randint(1, 5)}),
    "pncounter": ("pn:c", _counter),
    "orset": ("or:s", _orset),
    "lwwregister": ("lw:r", _lww),
    "presence": ("pr:p", _presence),
    "rga": ("rg:t", _rga),
    "tree": ("tr:t", _tree),
}


FIRST: dict[str, Op] = {
    "tree": {"op": "add", "id": "a"},
    "rga": {"op": "insert", "index": 0, "text": "start"},
}
"""An op that surely applies first, so that random refusals cannot leave the
CRDT without a state to read mid-way."""


@pytest.fixture(params=["h11"])
def http_parser(request: pytest.FixtureRequest) -> str:
    # One parser is enough here: the contract is the engine's, not the parser's.
    return str(request.param)


class Mirror:
    """A client-side replica: the snapshot delta, then op deltas in seq order,
    with its state and view kept at every seq."""

    def __init__(self, cls: type[Crdt], snapshot: dict[str, Any]) -> None:
        assert snapshot["kind"] == "snapshot"
        state = snapshot["state"]
        self.crdt = cls.new() if state is None else cls.from_state(state)
        self.seq: int = snapshot["seq"]
        self.states: dict[int, Any] = {self.seq: self.crdt.state()}
        self.crdts: dict[int, Crdt] = {self.seq: self.crdt.clone()}

    def apply(self, delta: dict[str, Any]) -> None:
        assert delta["kind"] == "op", delta
        assert delta["seq"] == self.seq + 1, (delta["seq"], self.seq)
        self.crdt.apply_delta(delta["op"])
        self.seq = delta["seq"]
        self.states[self.seq] = self.crdt.state()
        self.crdts[self.seq] = self.crdt.clone()


async def _follow(ws: Any, mirror: Mirror, seq: int) -> None:
    while mirror.seq < seq:
        mirror.apply(await recv(ws))


def _view(answer: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in answer.items() if k not in ("id", "type", "seq", "epoch")}


@pytest.fixture(autouse=True)
def small_checkpoints(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints and store snapshots every few hundred bytes, so that ``?at=``
    reads and the restart start from states (``from_state``) and not only
    from the first op."""
    monkeypatch.setattr(history_index, "CHECKPOINT_MIN_BYTES", 300)
    defaults = FileStore.__init__.__kwdefaults__
    assert defaults is not None and "snapshot_every_bytes" in defaults
    monkeypatch.setitem(defaults, "snapshot_every_bytes", 1500)


@pytest.fixture
async def http() -> AsyncIterator[Callable[[RunningServer, int], httpx.AsyncClient]]:
    made: list[httpx.AsyncClient] = []

    def client(server: RunningServer, client_id: int) -> httpx.AsyncClient:
        made.append(
            httpx.AsyncClient(
                base_url=f"{server.url}/v1/namespaces/{NS}/crdts",
                headers={"Authorization": f"Bearer {mint(client_id)}"},
                timeout=10,
            )
        )
        return made[-1]

    yield client
    for one in made:
        await one.aclose()


async def _check_at(reader: httpx.AsyncClient, crdt_id: str, mirror: Mirror, now: int) -> None:
    for k, state in mirror.states.items():
        full = (await reader.get(f"/{crdt_id}", params={"at": k, "format": "crdt"})).json()
        assert full["seq"] == k and full["state"] == state, f"state at {k}"
        view = (await reader.get(f"/{crdt_id}", params={"at": k})).json()
        assert _view(view) == mirror.crdts[k].view(now), f"view at {k}"


async def _check_now(reader: httpx.AsyncClient, crdt_id: str, mirror: Mirror, now: int) -> None:
    full = (await reader.get(f"/{crdt_id}", params={"format": "crdt"})).json()
    assert (full["seq"], full["state"]) == (mirror.seq, mirror.crdt.state())
    view = (await reader.get(f"/{crdt_id}")).json()
    assert _view(view) == mirror.crdt.view(now)


@pytest.mark.parametrize("type_name", sorted(MAKERS))
async def test_replica_equals_server_through_history_restore_revert_and_restart(
    make_server: Callable[..., Any],
    http: Callable[[RunningServer, int], httpx.AsyncClient],
    tmp_path: Path,
    type_name: str,
) -> None:
    crdt_id, maker = MAKERS[type_name]
    cls = TYPES[type_name]
    data_dir = tmp_path / "contract"
    server: RunningServer = await make_server(data_dir=data_dir, rate_limit=1_000_000)
    writers = [http(server, cid) for cid in WRITERS]
    rng = random.Random(f"{type_name}-{SEED}")
    count = MORE_OPS.get(type_name, OPS)
    async with open_ws(server, mint(5)) as ws, open_ws(server, mint(6)) as late:
        await send_mp(ws, {"kind": "subscribe", "id": crdt_id})
        mirror = Mirror(cls, await recv(ws))
        first = FIRST.get(type_name)
        if first is not None:
            answer = await writers[0].post(f"/{crdt_id}/ops", json=first)
            assert answer.status_code == 200, answer.text
        seq = 1 if first is not None else 0
        late_mirror: Mirror | None = None
        for i in range(count):
            body: Any = maker(rng, i)
            if rng.random() < 0.2:
                body = [body, maker(rng, i)]
            answer = await rng.choice(writers).post(f"/{crdt_id}/ops", json=body)
            if answer.status_code == 200:
                seq = answer.json()["seq"]
            else:
                assert answer.json()["error"] in ("invalid_op", "cycle"), answer.text
            if i == count // 2 and seq:
                # A replica that starts mid-way, from the snapshot delta.
                await send_mp(late, {"kind": "subscribe", "id": crdt_id})
                late_mirror = Mirror(cls, await recv(late))
        await _follow(ws, mirror, seq)
        now = server.app.engine.now_ms()
        await _check_now(writers[0], crdt_id, mirror, now)
        await _check_at(writers[0], crdt_id, mirror, now)
        assert late_mirror is not None
        await _follow(late, late_mirror, seq)
        assert late_mirror.crdt.state() == mirror.crdt.state()
        if cls.RESTORABLE:
            target = rng.randint(0, seq)
            answer = await writers[0].post(f"/{crdt_id}/restore", json={"seq": target})
            assert answer.status_code == 200, answer.text
            await _follow(ws, mirror, answer.json()["seq"])
            now = server.app.engine.now_ms()
            await _check_now(writers[0], crdt_id, mirror, now)
            assert mirror.crdt.view(now)["value"] == mirror.crdts[target].view(now)["value"]
        if cls.REVERTIBLE:
            answer = await writers[0].post(f"/{crdt_id}/revert", json={"client_id": WRITERS[1]})
            assert answer.status_code == 200, answer.text
            await _follow(ws, mirror, answer.json()["seq"])
            await _check_now(writers[0], crdt_id, mirror, server.app.engine.now_ms())
    await server.server.shutdown()
    restarted: RunningServer = await make_server(data_dir=data_dir, rate_limit=1_000_000)
    reader = http(restarted, WRITERS[0])
    now = restarted.app.engine.now_ms()
    await _check_now(reader, crdt_id, mirror, now)
    await _check_at(reader, crdt_id, mirror, now)


@pytest.mark.parametrize("undo", ["restore", "revert"])
async def test_tree_restore_and_revert_bring_back_data_equal_only_in_python(
    make_server: Callable[..., Any],
    http: Callable[[RunningServer, int], httpx.AsyncClient],
    undo: str,
) -> None:
    # {"v": 1} and {"v": true} are equal Python values but not equal JSON.
    server: RunningServer = await make_server()
    owner, other = http(server, WRITERS[0]), http(server, WRITERS[1])
    added = await owner.post("/tr:d/ops", json={"op": "add", "id": "a", "data": {"v": 1}})
    assert added.status_code == 200, added.text
    changed = await other.post("/tr:d/ops", json={"op": "update", "id": "a", "data": {"v": True}})
    assert changed.status_code == 200, changed.text
    body = {"seq": 1} if undo == "restore" else {"client_id": WRITERS[1]}
    answer = await owner.post(f"/tr:d/{undo}", json=body)
    assert answer.status_code == 200 and answer.json()["applied"] == 1, answer.text
    node = (await owner.get("/tr:d")).json()["value"]["children"][0]
    assert node["id"] == "a" and type(node["data"]["v"]) is int
