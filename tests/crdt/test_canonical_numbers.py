"""Canonical JSON writes numbers as ECMAScript does (RFC 8785), so the server,
the Python client and the JavaScript client (which reads ``1.0`` as ``1``) give
a value one identity; values without floats encode exactly as before."""

from __future__ import annotations

import json
import math
import random
import shutil
import struct
import subprocess
from typing import Any

import pytest

from syncd.crdt.lwwregister import LWWRegister
from syncd.crdt.orset import ORSet
from syncd.crdt.tree import Tree
from syncd.crdt.validate import canonical_json, es_number, json_value
from tests.crdt.crdt_testlib import ctx

ES_NUMBERS: list[tuple[float, str]] = [
    # What node's String(x) writes for each float (the table in
    # clients/js/test/canonical.test.js holds some of them as JSON text).
    (1.0, "1"),
    (-0.0, "0"),
    (0.0, "0"),
    (-1.0, "-1"),
    (0.1, "0.1"),
    (0.30000000000000004, "0.30000000000000004"),
    (1.5, "1.5"),
    (-2.25, "-2.25"),
    (100.0, "100"),
    (1234.5678, "1234.5678"),
    (1e-06, "0.000001"),
    (1.5e-06, "0.0000015"),
    (1.234e-06, "0.000001234"),
    (1e-07, "1e-7"),
    (-1e-07, "-1e-7"),
    (5e-07, "5e-7"),
    (1.2345e-07, "1.2345e-7"),
    (1.23e-18, "1.23e-18"),
    (5e-324, "5e-324"),
    (2.2250738585072014e-308, "2.2250738585072014e-308"),
    (1.7976931348623157e308, "1.7976931348623157e+308"),
    (-1.7976931348623157e308, "-1.7976931348623157e+308"),
    (9007199254740991.0, "9007199254740991"),
    (9007199254740992.0, "9007199254740992"),
    (9007199254740994.0, "9007199254740994"),
    (1.152921504606847e18, "1152921504606847000"),
    (1e16, "10000000000000000"),
    (1.5e16, "15000000000000000"),
    (1e20, "100000000000000000000"),
    (1.2345678901234568e20, "123456789012345680000"),
    (1e21, "1e+21"),
    (1.5e21, "1.5e+21"),
    (1e23, "1e+23"),
    (1e100, "1e+100"),
    (4.35, "4.35"),
    (0.000123456, "0.000123456"),
    (0.12345678901234568, "0.12345678901234568"),
    (333333333.3333333, "333333333.3333333"),
]

NODE_SAMPLE = 3000
"""Random finite doubles (every bit pattern equally likely, so every exponent
range) checked against node itself in one process."""


def test_floats_are_written_as_ecmascript_writes_them() -> None:
    for value, text in ES_NUMBERS:
        assert es_number(value) == text, value
        assert canonical_json(value) == text, value
        assert canonical_json([value]) == f"[{text}]", value
        assert canonical_json({"b": {"v": value}, "a": "é.e-"}) == (
            f'{{"a":"é.e-","b":{{"v":{text}}}}}'
        ), value
        assert json_value({"n": [value, 1]}, "element") == f'{{"n":[{text},1]}}', value
        assert float(text) == value  # the text reads back as the same number


def test_floats_agree_with_node() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    rng = random.Random(8785)
    values = [v for v, _ in ES_NUMBERS]
    while len(values) < NODE_SAMPLE + len(ES_NUMBERS):
        value = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))[0]
        if math.isfinite(value):
            values.append(value)
    values += [rng.uniform(-1e6, 1e6) for _ in range(300)]
    values += [float(rng.randrange(-(2**63), 2**64)) for _ in range(300)]
    script = (
        "const v = JSON.parse(require('fs').readFileSync(0, 'utf8'));"
        "process.stdout.write(JSON.stringify(v.map((x) => String(x))));"
    )
    done = subprocess.run(
        [node, "-e", script], input=json.dumps(values), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stdout)
    wrong = [
        (v, es_number(v), e) for v, e in zip(values, expected, strict=True) if es_number(v) != e
    ]
    assert not wrong, wrong[:10]


def test_values_without_floats_encode_as_before() -> None:
    def before(value: Any) -> str:
        return json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )

    values: list[Any] = [
        "x",
        "1.0",
        "e-7",
        "",
        0,
        -(2**63),
        2**64 - 1,
        2**53 + 1,
        True,
        None,
        [],
        {},
        {"b": [1, "2.5", {"z": None}], "a": "v1.2 e+3", "😀": "\u2028\x00\x7f"},
        ["file.txt", "one-two"] * 20,
    ]
    for value in values:
        assert canonical_json(value) == before(value), value
        assert json_value(value, "element") == before(value), value


def test_integers_stay_exact() -> None:
    # Beyond 2^53 JavaScript cannot tell 2^53 from 2^53+1; syncd keeps 64-bit
    # integers exact, as the wire carries them, while floats round as ECMAScript does.
    assert canonical_json(2**53 + 1) == "9007199254740993"
    assert canonical_json(float(2**53 + 2)) == "9007199254740994"
    assert canonical_json(2**64 - 1) == "18446744073709551615"


def test_not_finite_and_non_json_are_refused() -> None:
    for bad in (math.nan, math.inf, [-math.inf], {"a": {"b": math.nan}}):
        with pytest.raises(ValueError):
            canonical_json(bad)


def test_orset_element_written_as_float_is_removed_as_integer() -> None:
    s = ORSet.new()
    for element in (1.0, {"x": 2.5, "n": 1e16}, [0.0, -0.0]):
        s.apply_op({"op": "add", "element": element}, ctx(1))
    for element in (1, {"n": 10**16, "x": 2.5}, [0, 0]):
        assert element in s
        delta = s.apply_op({"op": "remove", "element": element}, ctx(2))
        assert delta["dots"], element
    assert s.view(0) == {"value": []}
    # One identity: adding 1 after 1.0 supersedes its dot.
    s.apply_op({"op": "add", "element": 1.0}, ctx(1))
    delta = s.apply_op({"op": "add", "element": 1}, ctx(2))
    assert delta["dots"] == [[1, 4]]
    assert s.view(0) == {"value": [1.0]}


def test_orset_state_written_before_holds_both_forms_as_one_element() -> None:
    # What a store written before this change can hold: 1 and 1.0 as two
    # elements (their canonical texts then were "1" and "1.0"), each with dots.
    old = {
        "elements": [[1, [[1, 1]]], [1.0, [[2, 1], [3, 1]]], ["a", [[1, 2]]]],
        "vv": {"1": 2, "2": 1, "3": 1},
        "cloud": [],
    }
    s = ORSet.from_state(old)
    assert s.view(0) == {"value": ["a", 1]}
    assert s.state()["elements"] == [["a", [[1, 2]]], [1, [[1, 1], [2, 1], [3, 1]]]]
    delta = s.apply_op({"op": "remove", "element": 1.0}, ctx(4))
    assert delta["dots"] == [[1, 1], [2, 1], [3, 1]]
    assert s.view(0) == {"value": ["a"]}
    # A replica fed the old deltas ends the same way.
    replica = ORSet.new()
    replica.apply_delta({"op": "add", "element": 1, "dot": [1, 1], "dots": []})
    replica.apply_delta({"op": "add", "element": 1.0, "dot": [2, 1], "dots": []})
    replica.apply_delta(delta)
    assert replica.view(0) == {"value": []}


def test_register_tie_between_one_identity_is_the_same_on_every_replica() -> None:
    sets = [
        {"value": 1, "timestamp": 5, "client_id": 1},
        {"value": 1.0, "timestamp": 5, "client_id": 1},
        {"value": 0.5, "timestamp": 5, "client_id": 1},
    ]
    kept = set()
    for order in ([0, 1, 2], [1, 0, 2], [2, 1, 0], [2, 0, 1]):
        r = LWWRegister.new()
        for i in order:
            r.apply_delta(sets[i])
        kept.add(json.dumps(r.view(0)["value"]))
    # "1" > "0.5" as canonical JSON; of 1 and 1.0, the one a read shows as 1.0.
    assert kept == {"1.0"}


def test_restore_still_brings_back_the_float_a_read_showed() -> None:
    # 1.0 and 1 are one identity, but a read shows them differently: a restore
    # of a register or of node data brings back the very one the target had.
    r = LWWRegister.new()
    r.apply_op({"op": "set", "value": 1.0}, ctx(1, now_ms=10))
    target = r.clone()
    r.apply_op({"op": "set", "value": 1}, ctx(1, now_ms=20))
    assert r.restore_ops(target) == [{"op": "set", "value": 1.0}]
    assert r.restore_ops(r.clone()) == []
    tree = Tree.new()
    tree.apply_op({"op": "add", "id": "a", "data": {"v": 1.0}}, ctx(1))
    target_tree = tree.clone()
    tree.apply_op({"op": "update", "id": "a", "data": {"v": 1}}, ctx(1))
    assert tree.restore_ops(target_tree) == [{"op": "update", "id": "a", "data": {"v": 1.0}}]
