"""Hypothesis strategies for hostile input: JSON of every shape, ops, HTTP requests,
WebSocket frames and messages, tokens and claims.

Everything is built to reach deep into the server as often as to bounce off its
edges: most requests are well framed and authenticated with ids from a small
pool (so ops meet existing CRDTs of every type), and the hostile parts are mixed
in — wrong types, bad encodings, lies about lengths, limits plus or minus one.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack
from hypothesis import strategies as st

from tests.conftest import ADMIN

FUZZ_MAX_BODY = 200_000
"""The fuzz server's body limit: small enough that cases cross it cheaply, large
enough for a 64 KiB element."""


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """Pick a strategy with the given weights, then draw from it (``st.one_of``
    collapses repeated branches, so it cannot weight)."""
    pool = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.sampled_from(pool).flatmap(lambda strategy: strategy)


def rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True about once in ``one_in`` draws. Hypothesis favours minimal choices
    (its examples often start from all-zero), so the minimal choice here is
    False: the common, well-formed path."""
    return bool(draw(st.integers(1, one_in)) == one_in)


# --- names --------------------------------------------------------------------

TYPES = ("gcounter", "pncounter", "orset", "lwwregister", "presence", "rga", "tree")
PREFIX = {
    "gcounter": "gc:",
    "pncounter": "pn:",
    "orset": "or:",
    "lwwregister": "lw:",
    "presence": "pr:",
    "rga": "rg:",
    "tree": "tr:",
}
OPS = {
    "gcounter": ("increment",),
    "pncounter": ("increment", "decrement"),
    "orset": ("add", "remove"),
    "lwwregister": ("set",),
    "presence": ("update", "leave"),
    "rga": ("insert", "delete"),
    "tree": ("add", "move", "update", "delete"),
}

GOOD_IDS = [p + "f" for p in PREFIX.values()] + [p + "g" for p in PREFIX.values()] + ["plain"]
TRICKY_SEGMENTS = [
    "",
    ".",
    "..",
    "...",
    "%2e%2e",
    "..%2F..%2Fetc",
    "..%2f..%2f..%2fetc%2fpasswd",
    "%2F",
    "a%2Fb",
    "a%5Cb",
    "%00",
    "a%00b",
    "%ff",
    "%C3%A9",
    "%",
    "%zz",
    "%%",
    "a b",
    "é",
    "x" * 128,
    "x" * 129,
    "y" * 256,
    "y" * 257,
    "-a",
    "_a",
    "a.b-c_d",
    "gc:",
    "gc:%3A",
    "~@+=",
    "%7E",
    "con",
    "nul",
    "LOCK",
    "log",
    "snapshots",
    "admin_token",
]
NAMESPACES = ["app", "app", "app", "demo", "other"]

_SEGMENT_CHARS = st.characters(codec="utf-8", exclude_characters="/?#\r\n \t")
percent_encoded = st.binary(min_size=1, max_size=12).map(lambda b: "".join(f"%{x:02X}" for x in b))
segment = st.one_of(
    st.sampled_from(TRICKY_SEGMENTS),
    st.text(_SEGMENT_CHARS, max_size=20),
    percent_encoded,
)
namespace = weighted((4, st.sampled_from(NAMESPACES)), (1, segment))
crdt_id = weighted((4, st.sampled_from(GOOD_IDS)), (1, segment))


# --- JSON of every shape ------------------------------------------------------------

MIN_WIRE_INT = -(2**63)
MAX_WIRE_INT = 2**64 - 1
"""msgpack carries integers of this range only; JSON's larger ones come as raw text."""

json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=MIN_WIRE_INT, max_value=MAX_WIRE_INT),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
json_value = st.recursive(
    json_scalar,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
    ),
    max_leaves=6,
)
WEIRD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    1.5,
    -0.0,
    "",
    "x",
    "\x00",
    "é",
    [],
    {},
    [1],
    {"a": 1},
    2**53 - 1,
    2**53,
    2**63 - 1,
    2**63,
    MAX_WIRE_INT,
    MIN_WIRE_INT,
    1e308,
    "x" * 300,
]
anything = st.one_of(st.sampled_from(WEIRD_VALUES), json_value)
"""A value for a field that may be of any type: cheap odd values first, then random JSON."""


def nested(depth: int, leaf: str = "1", kind: str = "[") -> str:
    if kind == "[":
        return "[" * depth + leaf + "]" * depth
    return '{"k":' * depth + leaf + "}" * depth


RAW_JSON_SPECIALS = [
    "",
    " ",
    "null",
    "NaN",
    "Infinity",
    "-Infinity",
    '{"op":"increment","amount":NaN}',
    '{"op":"increment","amount":1e400}',
    '{"op":"increment","amount":-0}',
    '{"op":"increment","amount":1.0}',
    '{"op":"increment","amount":' + "9" * 5000 + "}",
    '{"op":"increment","amount":' + "9" * 4000 + "}",
    '{"op":"set","value":1e-400}',
    '{"op":"set","value":' + "1" * 400 + "}",
    '{"op":"increment","op":"add","element":1}',
    '{"op":"add","element":1,"element":2}',
    '{"op":"increment"} trailing',
    '{"op":"increment"}{"op":"increment"}',
    "\ufeff{}",
    '{"op":"add","element":"\\ud800"}',
    '{"op":"add","element":"\\udfff\\ud800"}',
    '{"op":"add","element":{"\\ud800":1}}',
    '{"op":"insert","index":0,"text":"\\ud83d"}',
    '{"op":"update","data":{"\\u0000":"\\u0000"}}',
    '{"op":"add","id":"\\ud800","parent":"root"}',
    '["increment"]',
    "[[]]",
    "[{}]",
    '{"op":{"op":"increment"}}',
    '{"op":null}',
    '{"op":"insert","index":1e2,"text":"a"}',
    '{"op":"insert","index":-1,"text":"a"}',
    '{"op":"delete","index":0,"count":' + str(2**64) + "}",
    '{"op":"increment","amount":9007199254740992}',
    '{"op":"increment","amount":9007199254740991}',
    '{"op":"set","value":1,"timestamp":' + str(2**63) + "}",
    '{"op":"update","data":{},"ttl_ms":300001}',
    '{"op":"add","element":' + nested(63) + "}",
    '{"op":"add","element":' + nested(64) + "}",
    '{"op":"add","element":' + nested(65) + "}",
    '{"op":"add","element":' + nested(62, kind="{") + "}",
    nested(64),
    nested(65),
    nested(100_000),
    nested(5000, kind="{"),
    '{"client_id":7,"permissions":{"read":["*"],"write":["*"]}}',
    '{"client_id":1,"rules":{"r":[{"p":"*"}],"w":[{"p":"*","o":255}],"rl":5}}',
    '{"client_id":1e3,"permissions":{}}',
    '{"client_id":1,"permissions":{},"ttl_ms":' + str(10**30) + "}",
    '{"namespace":"app","client_id":1,"permissions":{"read":[],"write":[],"admin":true}}',
    '{"namespace":"../x","client_id":1,"permissions":{}}',
]
RAW_BYTES_SPECIALS = [
    b'{"op":"\xff"}',
    b'{"op":"add","element":"\xc0\xaf"}',
    b'{"op":"add","element":"\xed\xa0\x80"}',
    b'{"op":"add","element":"\xf4\x90\x80\x80"}',
    b"\xff\xfe{\x00}\x00",
    b"\x00",
    b'{"op":"increment"}\x00',
]


_INT = st.one_of(st.integers(min_value=-2, max_value=5), anything)
_COMMON: dict[str, st.SearchStrategy[Any]] = {
    "op_id": st.one_of(st.sampled_from(["a", "b", "k" * 128, "k" * 129]), anything),
    "client_id": st.one_of(st.sampled_from([0, 7, 8]), anything),
    "type": st.one_of(st.sampled_from(TYPES), anything),
}
_FIELDS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "gcounter": {"amount": _INT},
    "pncounter": {"amount": _INT},
    "orset": {"element": anything},
    "lwwregister": {"value": anything, "timestamp": _INT},
    "presence": {
        "data": st.one_of(st.dictionaries(st.text(max_size=5), anything, max_size=3), anything),
        "ttl_ms": st.one_of(st.sampled_from([999, 1000, 300000, 300001]), _INT),
    },
    "rga": {
        "index": _INT,
        "after": st.one_of(st.sampled_from([None, "1@7", "2@0", "0@0", "x@y", "1@"]), anything),
        "text": st.one_of(st.text(max_size=10), anything),
        "values": st.one_of(st.lists(anything, max_size=3), anything),
        "count": _INT,
        "ids": st.one_of(
            st.lists(st.sampled_from(["1@7", "1@0", "3@7", "bad"]), max_size=3), anything
        ),
    },
    "tree": {
        "id": st.one_of(st.sampled_from(["a", "b", "root", "c"]), anything),
        "parent": st.one_of(st.sampled_from(["a", "b", "root", "zz"]), anything),
        "data": st.one_of(st.dictionaries(st.text(max_size=5), anything, max_size=3), anything),
        "pos": st.one_of(st.text(max_size=4), anything),
    },
}


def _op_for(type_name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Ops of one type: its fields, often of the wrong type or range, plus the common ones."""
    return st.builds(
        lambda name, chosen: {"op": name, **chosen},
        st.one_of(st.sampled_from(OPS[type_name]), st.sampled_from(["", "nope", None, 1])),
        st.fixed_dictionaries({}, optional={**_FIELDS[type_name], **_COMMON}),
    )


_VALID: dict[str, st.SearchStrategy[dict[str, Any]]] = {
    "gcounter": st.builds(lambda a: {"op": "increment", "amount": a}, st.integers(1, 100)),
    "pncounter": st.builds(
        lambda n, a: {"op": n, "amount": a}, st.sampled_from(OPS["pncounter"]), st.integers(1, 9)
    ),
    "orset": st.builds(
        lambda n, e: {"op": n, "element": e}, st.sampled_from(OPS["orset"]), json_value
    ),
    "lwwregister": st.builds(lambda v: {"op": "set", "value": v}, json_value),
    "presence": st.one_of(
        st.builds(
            lambda d: {"op": "update", "data": d},
            st.dictionaries(st.text(max_size=4), json_value, max_size=3),
        ),
        st.just({"op": "leave"}),
    ),
    "rga": st.one_of(
        st.builds(
            lambda i, t: {"op": "insert", "index": i, "text": t},
            st.integers(0, 3),
            st.text(min_size=1, max_size=6),
        ),
        st.builds(
            lambda v: {"op": "insert", "after": None, "values": v},
            st.lists(json_value, min_size=1, max_size=3),
        ),
        st.builds(lambda i: {"op": "delete", "index": i}, st.integers(0, 3)),
    ),
    "tree": st.builds(
        lambda n, i, parent, pos: {"op": n, "id": i, "parent": parent, "pos": pos, "data": {}},
        st.sampled_from(OPS["tree"]),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["root", "a", "b", "c"]),
        st.text(max_size=2),
    ),
}
"""Ops that usually apply (given the CRDT's state), so state builds up between the odd ones."""

op_body = weighted(*((1, _op_for(t)) for t in TYPES), *((2, v) for v in _VALID.values()))
op_request = weighted((4, op_body), (2, st.lists(op_body, min_size=0, max_size=3)), (1, anything))


def _dumps(value: Any, ascii_only: bool) -> str:
    return json.dumps(value, ensure_ascii=ascii_only)


def _big_element(size: int) -> bytes:
    return b'{"op":"add","element":"' + b"x" * size + b'"}'


json_body: st.SearchStrategy[bytes] = weighted(
    (
        12,
        st.builds(_dumps, op_request, st.booleans()).map(
            lambda s: s.encode("utf-8", "surrogatepass")
        ),
    ),
    (
        1,
        st.sampled_from([65536 - 2, 65536 - 1, 65536, FUZZ_MAX_BODY - 24, FUZZ_MAX_BODY]).map(
            _big_element
        ),
    ),
    (2, st.sampled_from(RAW_JSON_SPECIALS).map(lambda s: s.encode("utf-8", "surrogatepass"))),
    (1, st.sampled_from(RAW_BYTES_SPECIALS)),
    (1, st.binary(max_size=64)),
)


# --- HTTP requests ---------------------------------------------------------------------

ROUTES = [
    (8, "POST", "/v1/namespaces/{ns}/crdts/{id}/ops"),
    (3, "GET", "/v1/namespaces/{ns}/crdts/{id}"),
    (2, "POST", "/v1/namespaces/{ns}/tokens"),
    (1, "POST", "/v1/tokens"),
    (1, "GET", "/v1/namespaces/{ns}/tokens/me"),
    (1, "GET", "/v1/namespaces/{ns}/crdts"),
    (1, "DELETE", "/v1/namespaces/{ns}/crdts/{id}"),
    (1, "GET", "/v1/namespaces/{ns}/crdts/{id}/events"),
    (1, "GET", "/v1/namespaces/{ns}/ws"),
    (1, "GET", "/health/live"),
    (1, "GET", "/health/ready"),
    (1, "GET", "/metrics"),
    (1, "GET", "/v1/openapi.json"),
    (1, "GET", "/demo/"),
    (1, "GET", "/demo/token"),
    (1, "GET", "/demo/{id}"),
    (1, "OPTIONS", "/v1/namespaces/{ns}/crdts/{id}/ops"),
    (1, "GET", "/"),
    (1, "GET", "/{id}"),
]
"""(weight, method, pattern): ops dominate, since they reach the deepest code."""
METHODS = ["GET", "POST", "DELETE", "PUT", "HEAD", "OPTIONS", "PATCH", "TRACE", "get", "XYZ"]
QUERY_KEYS = ["since", "epoch", "format", "return", "token", "prefix", "limit", "cursor", "x", ""]
QUERY_VALUES = st.one_of(
    st.sampled_from(
        ["crdt", "state", "0", "1", "-1", "1000", "1001", "99999999999999999999", "9" * 5000]
    ),
    st.integers(min_value=-5, max_value=2000).map(str),
    st.text(st.characters(codec="ascii", exclude_characters="&#% \r\n"), max_size=10),
    percent_encoded,
    st.sampled_from(["%", "%zz", "%ff%fe", "%C3%28", "a+b", "%00"]),
)
query = weighted(
    (3, st.just("")),
    (
        1,
        st.lists(st.tuples(st.sampled_from(QUERY_KEYS), QUERY_VALUES), max_size=4).map(
            lambda pairs: "?" + "&".join(f"{k}={v}" for k, v in pairs)
        ),
    ),
)


@st.composite
def path_and_method(draw: st.DrawFn) -> tuple[str, str]:
    default_method, pattern = draw(
        st.sampled_from([(m, p) for weight, m, p in ROUTES for _ in range(weight)])
    )
    path = pattern.replace("{ns}", draw(namespace)).replace("{id}", draw(crdt_id))
    if rarely(draw, 10):
        path = path + "/" + draw(segment)
    if rarely(draw, 20):
        path = path.replace("/", "//", 1)
    method = draw(st.sampled_from(METHODS)) if rarely(draw, 4) else default_method
    return method, path + draw(query)


def bearer_values(token: str) -> st.SearchStrategy[str | None]:
    return st.one_of(
        st.just("Bearer " + ADMIN),
        st.just("Bearer " + token),
        st.just("bearer " + token),
        st.just(None),
        st.sampled_from(["Bearer ", "Bearer", "Basic Zm9vOmJhcg==", "Bearer a.b", "Bearer ..."]),
        st.text(st.characters(codec="latin-1", exclude_characters="\r\n"), max_size=20).map(
            lambda s: "Bearer " + s
        ),
    )


CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "APPLICATION/JSON",
    "application/merge-patch+json",
    "text/plain",
    "application/x-www-form-urlencoded",
    "",
    ";",
    "application/json;;;",
]
header_name = st.text(
    st.sampled_from("abcdefghijklmnopqrstuvwxyz-_0123456789!#$%&'*+.^`|~XYZ"),
    min_size=1,
    max_size=12,
)
header_value = st.one_of(
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30),
    st.binary(max_size=12).map(lambda b: b.decode("latin-1")),
)


@st.composite
def http_request(draw: st.DrawFn, token: str) -> tuple[bytes, list[str]]:
    """One or two (pipelined) raw requests, and their methods in order."""
    count = 2 if rarely(draw, 8) else 1
    raw = b""
    methods: list[str] = []
    for _ in range(count):
        one, method = draw(_one_request(token))
        raw += one
        methods.append(method)
    if rarely(draw, 20):
        raw += draw(st.binary(max_size=40))
    return raw, methods


@st.composite
def _one_request(draw: st.DrawFn, token: str) -> tuple[bytes, str]:
    method, target = draw(path_and_method())
    version = draw(st.sampled_from(["HTTP/1.1"] * 12 + ["HTTP/1.0", "HTTP/2.0", "HTTP/1.2", "HTP"]))
    headers: list[tuple[str, str]] = []
    if not rarely(draw, 16):
        headers.append(("Host", "t"))
    auth = draw(bearer_values(token))
    if auth is not None:
        headers.append(("Authorization", auth))
    if "/ws" in target and not rarely(draw, 3):
        headers += [
            ("Upgrade", draw(st.sampled_from(["websocket", "WebSocket", "h2c", ""]))),
            ("Connection", draw(st.sampled_from(["Upgrade", "keep-alive, Upgrade", "close"]))),
            ("Sec-WebSocket-Version", draw(st.sampled_from(["13", "8", "", "13, 8"]))),
            (
                "Sec-WebSocket-Key",
                draw(st.sampled_from(["dGhlIHNhbXBsZSBub25jZQ==", "short", "", "!!!!"])),
            ),
        ]
    if rarely(draw, 4):
        headers.append(
            ("Origin", draw(st.sampled_from(["https://ok.example", "https://evil", ""])))
        )
    if method == "OPTIONS" and draw(st.booleans()):
        headers.append(("Access-Control-Request-Method", draw(st.sampled_from(METHODS))))
        headers.append(("Access-Control-Request-Headers", draw(header_value)))
    if rarely(draw, 5):
        headers.append(("Connection", draw(st.sampled_from(["close", "keep-alive", "x"]))))
    if rarely(draw, 3):
        headers += draw(st.lists(st.tuples(header_name, header_value), max_size=3))
    body = b""
    if method in ("POST", "PUT", "PATCH") or rarely(draw, 10):
        body = draw(json_body)
        ctype = draw(st.sampled_from(CONTENT_TYPES[:2] * 4 + CONTENT_TYPES))
        if ctype or draw(st.booleans()):
            headers.append(("Content-Type", ctype))
    framing = draw(st.sampled_from(["length"] * 6 + ["chunked"] * 2 + ["short", "long", "none"]))
    if rarely(draw, 12):
        headers.append(("Expect", "100-continue"))
    payload = b""
    if framing == "length":
        if body or method in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", str(len(body))))
        payload = body
    elif framing == "chunked":
        headers.append(("Transfer-Encoding", "chunked"))
        payload = draw(_chunked(body))
    elif framing == "short" and body:
        headers.append(("Content-Length", str(len(body) - 1)))
        payload = body
    elif framing == "long":
        headers.append(("Content-Length", str(len(body) + draw(st.integers(1, 5)))))
        payload = body
    head = f"{method} {target} {version}\r\n".encode("utf-8", "surrogatepass")
    for name, value in headers:
        head += name.encode("latin-1") + b": " + value.encode("latin-1") + b"\r\n"
    return head + b"\r\n" + payload, method.upper()


@st.composite
def _chunked(draw: st.DrawFn, body: bytes) -> bytes:
    out = b""
    pos = 0
    while pos < len(body):
        size = draw(st.integers(1, max(1, len(body) - pos)))
        piece = body[pos : pos + size]
        ext = draw(st.sampled_from([b"", b"", b";name=value", b" "]))
        out += f"{len(piece):x}".encode() + ext + b"\r\n" + piece + b"\r\n"
        pos += size
    tail = draw(
        st.sampled_from([b"0\r\n\r\n"] * 6 + [b"0\r\nX-Trailer: v\r\n\r\n", b"", b"zz\r\n"])
    )
    return out + tail


# --- WebSocket messages and frames ------------------------------------------------------

good_ref = st.one_of(st.integers(-3, 10**6), st.text(max_size=6))
ref = weighted((3, good_ref), (1, st.none()), (1, anything))
ws_id = weighted(
    (6, st.sampled_from(GOOD_IDS)), (1, st.sampled_from(TRICKY_SEGMENTS)), (1, anything)
)
ws_op = st.builds(
    lambda crdt, body, r, extra: {"kind": "op", "id": crdt, "op": body, "ref": r, **extra},
    ws_id,
    op_request,
    good_ref,
    st.fixed_dictionaries({}, optional={"x": anything}),
)
ws_message = weighted(
    (6, ws_op),
    (
        1,
        st.fixed_dictionaries(
            {"kind": st.just("op")}, optional={"id": ws_id, "op": op_request, "ref": ref}
        ),
    ),
    (
        2,
        st.fixed_dictionaries(
            {"kind": st.just("subscribe"), "id": ws_id},
            optional={
                "since": st.one_of(st.integers(-2, 10), anything),
                "epoch": st.one_of(st.text(max_size=16), anything),
                "ref": ref,
            },
        ),
    ),
    (1, st.fixed_dictionaries({"kind": st.just("unsubscribe")}, optional={"id": ws_id})),
    (1, st.fixed_dictionaries({"kind": st.just("ping")}, optional={"ref": ref})),
    (1, st.fixed_dictionaries({"kind": anything})),
    (1, anything),
)

MSGPACK_BOMBS = [
    b"\xdd\xff\xff\xff\xff",  # array 32 announcing 4 G items
    b"\xdf\xff\xff\xff\xff",  # map 32 announcing 4 G pairs
    b"\xdb\xff\xff\xff\xff",  # str 32 announcing 4 GiB
    b"\xc6\xff\xff\xff\xff",  # bin 32 announcing 4 GiB
    b"\xc9\xff\xff\xff\xff\x01",  # ext 32 announcing 4 GiB
    b"\xdc\xff\xff" + b"\xc0" * 10,  # array 16 announcing 65535, holding 10
    b"\x81\xa4kind\xdd\x7f\xff\xff\xff",
    b"\x91" * 100_000 + b"\xc0",  # arrays nested 100k deep
    b"\x81\xa1k" * 5000 + b"\xc0",  # maps nested 5000 deep
    b"\x81\xa4kind" + b"\x91" * 70 + b"\xc0",
    b"\xd6\xff\x00\x00\x00\x00",  # timestamp ext
    b"\xd4\x05\x00",  # fixext 1
    b"\x81\x01\xa4ping",  # integer key
    b"\x81\xc4\x04kind\xa4ping",  # bin key
    b"\x81\xa4kind\xa4ping\xc1",  # reserved byte after
    b"\x82\xa4kind\xa4ping\xa4kind\xa4ping",  # duplicate keys
    b"\x81\xa4kind\xa4\xff\xfe\xfd\xfc",  # invalid UTF-8 str
    b"\x83\xa4kind\xa2op\xa2id\xa4gc:f\xa2op\x81\xa2op\xa9increment",  # op without ref
    b"\x84\xa4kind\xa2op\xa2id\xa4gc:f\xa3ref\x01\xa2op\x82\xa2op\xa9increment\xa6amount\xcb\x7f\xf8\x00\x00\x00\x00\x00\x00",
    b"\x84\xa4kind\xa2op\xa2id\xa4gc:f\xa3ref\x01\xa2op\x82\xa2op\xa9increment\xa6amount\xcf\xff\xff\xff\xff\xff\xff\xff\xff",
    b"",
]


def _packb(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


msgpack_payload = weighted(
    (6, ws_message.map(_packb)),
    (1, st.sampled_from(MSGPACK_BOMBS)),
    (1, st.binary(max_size=40)),
    (
        1,
        st.builds(
            lambda b, pre: pre + b,
            st.binary(max_size=20),
            st.sampled_from([b"\x81", b"\xdf", b"\x91"]),
        ),
    ),
)
text_payload = st.one_of(
    ws_message.map(lambda m: json.dumps(m).encode()),
    st.sampled_from(RAW_JSON_SPECIALS).map(lambda s: s.encode("utf-8", "surrogatepass")),
    st.sampled_from(RAW_BYTES_SPECIALS),
    st.sampled_from([b'{"kind":"ping"}', b'{"kind":"ping","ref":"\xff"}', nested(70).encode()]),
)


@st.composite
def ws_frames(draw: st.DrawFn) -> tuple[bytes, bool]:
    """A run of client frames, mostly well formed messages with every lie mixed
    in, and whether their lengths are honest (so a later frame is read as one)."""
    out = b""
    honest = True
    for _ in range(draw(st.integers(1, 5))):
        unit, shape = draw(_ws_unit())
        out += unit
        honest = honest and shape not in ("raw", "odd")
    return out, honest


@st.composite
def _ws_unit(draw: st.DrawFn) -> tuple[bytes, str]:
    shape = draw(
        st.sampled_from(
            ["binary"] * 5 + ["text"] * 3 + ["fragmented"] * 2 + ["control", "raw", "odd"]
        )
    )
    return draw(_ws_shape(shape)), shape


@st.composite
def _ws_shape(draw: st.DrawFn, shape: str) -> bytes:
    mask = draw(st.one_of(st.binary(min_size=4, max_size=4), st.just(b"\x00\x00\x00\x00")))
    if shape == "binary":
        return frame(0x2, draw(msgpack_payload), mask)
    if shape == "text":
        return frame(0x1, draw(text_payload), mask)
    if shape == "fragmented":
        opcode = draw(st.sampled_from([0x1, 0x2]))
        payload = draw(msgpack_payload if opcode == 0x2 else text_payload)
        cuts = sorted(draw(st.lists(st.integers(0, len(payload)), max_size=3)))
        pieces = [payload[a:b] for a, b in zip([0, *cuts], [*cuts, len(payload)], strict=True)]
        out = b""
        for i, piece in enumerate(pieces):
            last = i == len(pieces) - 1
            out += frame(opcode if i == 0 else 0x0, piece, mask, fin=last)
            if not last and rarely(draw, 4):
                out += frame(0x9, b"mid", mask)
        return out
    if shape == "control":
        opcode = draw(st.sampled_from([0x8, 0x9, 0xA]))
        payload = draw(
            st.one_of(
                st.binary(max_size=20),
                st.binary(min_size=126, max_size=130),
                st.builds(
                    lambda code, reason: code.to_bytes(2, "big") + reason,
                    st.sampled_from(
                        [1000, 1001, 1002, 1005, 1006, 1015, 999, 2999, 3000, 4999, 5000, 65535]
                    ),
                    st.sampled_from([b"", b"bye", b"\xff\xfe", b"x" * 123]),
                ),
            )
        )
        return frame(opcode, payload, mask, fin=not rarely(draw, 8))
    if shape == "raw":
        return draw(st.binary(max_size=30))
    # "odd": a frame whose header lies or breaks a rule
    opcode = draw(st.sampled_from([0x0, 0x1, 0x2, 0x3, 0x7, 0xB, 0xF]))
    payload = draw(st.binary(max_size=30))
    return frame(
        opcode,
        payload,
        draw(st.one_of(st.none(), st.just(mask))),
        fin=draw(st.booleans()),
        rsv=draw(st.integers(0, 7)),
        length=draw(
            st.one_of(
                st.none(),
                st.integers(0, 200),
                st.sampled_from([2**16, 2**31, 2**63 - 1, 2**63, 2**64 - 1]),
            )
        ),
        length_form=draw(st.sampled_from([None, 0, 126, 127])),
    )


def frame(
    opcode: int,
    payload: bytes,
    mask: bytes | None,
    *,
    fin: bool = True,
    rsv: int = 0,
    length: int | None = None,
    length_form: int | None = None,
) -> bytes:
    from tests.fuzz.support import client_frame

    return client_frame(
        opcode, payload, fin=fin, rsv=rsv, mask=mask, length=length, length_form=length_form
    )


# --- tokens ---------------------------------------------------------------------------------

B64_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


@st.composite
def mutated_token(draw: st.DrawFn, tokens: list[str]) -> str:
    """A valid token, then a few random edits: flips, cuts, insertions, swaps."""
    token = draw(st.sampled_from(tokens))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(
            st.sampled_from(
                ["flip", "cut", "insert", "delete", "swap", "pad", "case", "dot", "dup"]
            )
        )
        n = len(token)
        at = draw(st.integers(0, max(0, n - 1)))
        if kind == "flip" and n:
            token = token[:at] + draw(st.sampled_from(B64_CHARS)) + token[at + 1 :]
        elif kind == "cut":
            token = token[:at]
        elif kind == "insert":
            extra = draw(
                st.one_of(st.sampled_from(list(B64_CHARS + "=.+/ %")), st.text(max_size=3))
            )
            token = token[:at] + extra + token[at:]
        elif kind == "delete" and n:
            token = token[:at] + token[at + 1 :]
        elif kind == "swap":
            head, _, tail = token.partition(".")
            token = tail + "." + head
        elif kind == "pad":
            head, _, tail = token.partition(".")
            token = (
                head + "=" * draw(st.integers(0, 3)) + "." + tail + "=" * draw(st.integers(0, 3))
            )
        elif kind == "case":
            token = token.swapcase()
        elif kind == "dot":
            token = token.replace(".", draw(st.sampled_from(["", "..", ".x.", "\x00"])), 1)
        elif kind == "dup":
            token = token + token
    return token


claim_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=MIN_WIRE_INT, max_value=MAX_WIRE_INT),
    st.floats(),
    st.text(max_size=12),
    st.binary(max_size=8),
)
claim_any = st.recursive(
    claim_scalar,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=6), st.integers(-3, 3)), children, max_size=4),
    ),
    max_leaves=5,
)
glob = st.one_of(
    st.sampled_from(
        ["*", "gc:*", "{clientId}", "u:{clientId}:*", "**", "", "a" * 513, "*{clientId}*"]
    ),
    st.text(max_size=12),
    claim_any,
)
rule = st.one_of(
    st.fixed_dictionaries(
        {"p": glob},
        optional={
            "o": st.one_of(st.integers(-1, 256), claim_any),
            "e": st.one_of(st.integers(-1, MAX_WIRE_INT), claim_any),
            "x": claim_any,
        },
    ),
    claim_any,
)
permissions = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "read": st.one_of(st.lists(glob, max_size=4), claim_any),
            "write": st.one_of(st.lists(glob, max_size=4), claim_any),
            "admin": st.one_of(st.booleans(), claim_any),
        },
    ),
    st.fixed_dictionaries(
        {"v": st.one_of(st.just(2), claim_any)},
        optional={
            "r": st.one_of(st.lists(rule, max_size=4), claim_any),
            "w": st.one_of(st.lists(rule, max_size=4), claim_any),
            "rl": st.one_of(st.integers(-1, 2 * 10**6), claim_any),
        },
    ),
    st.lists(rule, min_size=65, max_size=66).map(lambda rules: {"v": 2, "r": rules}),
    claim_any,
)
claims_map = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "namespace": st.one_of(
                st.sampled_from(["app", "other", "../x", "", "a" * 129]), claim_any
            ),
            "client_id": st.one_of(
                st.integers(-1, 2**53), st.sampled_from([2**53 - 1, 2**64 - 1]), claim_any
            ),
            "expires_at": st.one_of(
                st.sampled_from([0, 1, 2**63 - 1, 2**63, 4102444800000]), claim_any
            ),
            "permissions": permissions,
            "issued_at": st.one_of(st.sampled_from([0, 1, -1, 2**63 - 1, 2**63]), claim_any),
            "extra": claim_any,
        },
    ),
    claim_any,
)
