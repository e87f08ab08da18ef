"""A minimal router: method + path pattern -> handler.

Patterns are literal segments and ``{name}`` parameters. A parameter matches
exactly one *raw* segment, which is percent-decoded afterwards, so an encoded
slash stays inside its parameter (``..%2F..%2Fetc`` is a bad namespace, not a
different route). Unknown paths are 404, known paths with another method 405.
The asterisk-form target (``OPTIONS *``) asks about the server as a whole
(RFC 9110 9.3.7): 200 with an ``Allow`` of every method some route takes; any
other method with it is 400.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Final
from urllib.parse import unquote

from syncd.errors import ApiError
from syncd.http.request import Request
from syncd.http.response import Deferred, Response, StreamResponse, Upgrade

HandlerResult = Response | StreamResponse | Upgrade | Deferred
Handler = Callable[[Request], HandlerResult | Awaitable[HandlerResult]]
Guard = Callable[[Request], None]
"""What a route checks of a request's head alone (its token and permission),
raising ApiError to refuse it: run before a ``100 Continue``, so a client that
may not send the body is told so before it uploads it (RFC 9110 10.1.1)."""


@dataclass(frozen=True)
class Route:
    method: str
    pattern: str
    handler: Handler
    segments: tuple[str, ...]
    params: tuple[int, ...]
    """Indexes of the parameter segments."""
    kind: str = ""
    """Its route class (:func:`route_class`): the ``route`` label of the
    request histogram and of nothing else."""
    names: tuple[str, ...] = ()
    """The parameters' names, in the order of ``params``."""
    guard: Guard | None = None
    """Checked before a ``100 Continue`` (see :data:`Guard`); the handler
    checks again with the body (a guard may leave what it found on the
    request, e.g. ``Request.principal``, so the rate is counted once)."""


UNMATCHED: Final = "none"
"""The route class of a request no route matched (404, 405)."""

_CLASS_OF_LAST_LITERAL: Final = {
    "tokens": "tokens",
    "me": "tokens",
    "openapi.json": "openapi",
    "revocations": "admin",
    "usage": "admin",
    "backup": "admin",
    "ws": "websocket",
    "hocuspocus": "yjs",
}


def route_class(method: str, pattern: str) -> str:
    """A short, bounded name for what a route does (``ops``, ``read``,
    ``list``, ``events``, ``websocket``, ``yjs``, ``history``, ``restore``, ``revert``,
    ``tokens``, ``admin``, ``health``, ``metrics``, ``openapi``, ``demo``,
    ``cors``, ``delete``), so per-route metrics stay a few series."""
    if method == "OPTIONS":
        return "cors"
    segments = _segments(pattern)
    first = segments[0] if segments else ""
    if first in ("health", "metrics", "demo"):
        return first
    literals = [s for s in segments if not s.startswith("{")]
    last = literals[-1] if literals else ""
    if last == "crdts":
        if not segments[-1].startswith("{"):
            return "list"
        return "delete" if method == "DELETE" else "read"
    return _CLASS_OF_LAST_LITERAL.get(last, last or UNMATCHED)


def _segments(path: str) -> tuple[str, ...]:
    return tuple(path.split("/")[1:])


class _Shape:
    """Dynamic routes with one segment count and one set of parameter positions.

    Matching builds the key of the literal segments with one C call
    (``itemgetter``) and looks it up: one dict probe per shape, of which
    there are only a few, instead of a scan of every route. The getters
    index ``path.split("/")``, whose first item (before the first slash) no
    route looks at, so the list needs no slicing.
    """

    __slots__ = ("count", "literal_key", "params", "routes", "values")

    def __init__(self, count: int, params: tuple[int, ...]) -> None:
        self.count = count
        self.params = params
        literal = tuple(i + 1 for i in range(count) if i not in params)
        self.literal_key: Callable[[list[str]], Any] = (
            itemgetter(*literal) if literal else (lambda _: ())
        )
        # The parameters' raw segments, always as a tuple (itemgetter of one
        # index returns the item itself).
        at = tuple(i + 1 for i in params)
        self.values: Callable[[list[str]], tuple[str, ...]] = (
            itemgetter(*at) if len(at) > 1 else _one_item(at[0])
        )
        self.routes: dict[Any, dict[str, Route]] = {}


def _one_item(i: int) -> Callable[[list[str]], tuple[str, ...]]:
    def values(split: list[str]) -> tuple[str, ...]:
        return (split[i],)

    return values


class Router:
    def __init__(self) -> None:
        self._static: dict[str, dict[str, Route]] = {}
        self._shapes: dict[int, list[_Shape]] = {}
        self._routes: list[Route] = []

    def add(self, method: str, pattern: str, handler: Handler, guard: Guard | None = None) -> None:
        segments = _segments(pattern)
        params = tuple(i for i, s in enumerate(segments) if s.startswith("{") and s.endswith("}"))
        names = tuple(segments[i][1:-1] for i in params)
        route = Route(
            method, pattern, handler, segments, params, route_class(method, pattern), names, guard
        )
        self._routes.append(route)
        if not params:
            self._static.setdefault(pattern, {})[method] = route
            return
        shapes = self._shapes.setdefault(len(segments), [])
        shape = next((s for s in shapes if s.params == params), None)
        if shape is None:
            shape = _Shape(len(segments), params)
            shapes.append(shape)
        shape.routes.setdefault(shape.literal_key(["", *segments]), {})[method] = route

    @property
    def routes(self) -> list[tuple[str, str]]:
        return [(r.method, r.pattern) for r in self._routes]

    def match(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        """The handler and decoded parameters, or ApiError 404/405."""
        route, params = self.match_route(method, path)
        return route.handler, params

    def match_route(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        """The route and decoded parameters, or ApiError 404/405."""
        by_method = self._static.get(path)
        if by_method is not None:
            route = by_method.get(method) or (by_method.get("GET") if method == "HEAD" else None)
            if route is None:
                raise _not_allowed(by_method)
            return route, {}
        split = path.split("/")  # split[0], before the first slash, is not a segment
        for shape in self._shapes.get(len(split) - 1, ()):
            found = shape.routes.get(shape.literal_key(split))
            if found is None:
                continue
            values = shape.values(split)
            if "" in values:
                continue  # an empty parameter never matches
            route = found.get(method) or (found.get("GET") if method == "HEAD" else None)
            if route is None:
                raise _not_allowed(found)
            if "%" in path:
                values = tuple(unquote(v, errors="replace") if "%" in v else v for v in values)
            names = route.names
            if len(names) == 2:  # most routes: {ns} and {id}; dict(zip()) costs twice this
                return route, {names[0]: values[0], names[1]: values[1]}
            return route, dict(zip(names, values, strict=True))
        if path == "*":  # here, not first: no cost to any other request
            return self._server_options(method), {}
        raise ApiError(404, "not_found", "no such route")

    def _server_options(self, method: str) -> Route:
        """``OPTIONS *``'s route, or 400 for another method with that target
        (it names no resource; RFC 9112 3.2.4 keeps it for OPTIONS)."""
        if method != "OPTIONS":
            raise ApiError(400, "bad_request", "the target * is only for OPTIONS")
        allow = ", ".join(sorted(self.methods)).encode("ascii")

        def options(_: Request) -> Response:
            return Response(200, b"", None, ((b"allow", allow),))

        return Route("OPTIONS", "*", options, (), (), route_class("OPTIONS", "*"))

    @property
    def methods(self) -> frozenset[str]:
        """Every method some route takes: HEAD wherever GET is, and OPTIONS (``OPTIONS *``)."""
        methods = {route.method for route in self._routes} | {"OPTIONS"}
        if "GET" in methods:
            methods.add("HEAD")
        return frozenset(methods)


def _not_allowed(by_method: dict[str, Any]) -> ApiError:
    # HEAD is served wherever GET is (match_route), so Allow names it too, as
    # an OPTIONS answer's Allow does (RFC 9110 10.2.1: every method it takes).
    methods = sorted({*by_method, "HEAD"} if "GET" in by_method else by_method)
    return ApiError(
        405,
        "method_not_allowed",
        "method not allowed",
        (("allow", ", ".join(methods)),),
    )
