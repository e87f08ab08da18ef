"""A minimal router: method + path pattern -> handler.

Patterns are literal segments and ``{name}`` parameters. A parameter matches
exactly one *raw* segment, which is percent-decoded afterwards, so an encoded
slash stays inside its parameter (``..%2F..%2Fetc`` is a bad namespace, not a
different route). Unknown paths are 404, known paths with another method 405.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from syncd.errors import ApiError
from syncd.http.request import Request
from syncd.http.response import Response, StreamResponse, Upgrade

HandlerResult = Response | StreamResponse | Upgrade
Handler = Callable[[Request], HandlerResult | Awaitable[HandlerResult]]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: str
    handler: Handler
    segments: tuple[str, ...]
    params: tuple[int, ...]
    """Indexes of the parameter segments."""


def _segments(path: str) -> tuple[str, ...]:
    return tuple(path.split("/")[1:])


Shape = tuple[int, tuple[int, ...]]
"""A dynamic route's segment count and parameter positions."""


class Router:
    def __init__(self) -> None:
        self._static: dict[str, dict[str, Route]] = {}
        # Dynamic routes by shape, then by their literal segments (parameter
        # positions blanked): matching is one dict look-up per shape, of
        # which there are only a few, instead of a scan of every route.
        self._shapes: dict[int, list[tuple[int, ...]]] = {}
        self._dynamic: dict[Shape, dict[tuple[str, ...], dict[str, Route]]] = {}
        self._routes: list[Route] = []

    def add(self, method: str, pattern: str, handler: Handler) -> None:
        segments = _segments(pattern)
        params = tuple(i for i, s in enumerate(segments) if s.startswith("{") and s.endswith("}"))
        route = Route(method, pattern, handler, segments, params)
        self._routes.append(route)
        if not params:
            self._static.setdefault(pattern, {})[method] = route
            return
        shapes = self._shapes.setdefault(len(segments), [])
        if params not in shapes:
            shapes.append(params)
        literal = tuple("" if i in params else seg for i, seg in enumerate(segments))
        by_literal = self._dynamic.setdefault((len(segments), params), {})
        by_literal.setdefault(literal, {})[method] = route

    @property
    def routes(self) -> list[tuple[str, str]]:
        return [(r.method, r.pattern) for r in self._routes]

    def match(self, method: str, path: str) -> tuple[Handler, dict[str, str]]:
        """The handler and decoded parameters, or ApiError 404/405."""
        by_method = self._static.get(path)
        if by_method is not None:
            route = by_method.get(method) or (by_method.get("GET") if method == "HEAD" else None)
            if route is None:
                raise _not_allowed(by_method)
            return route.handler, {}
        segments = _segments(path)
        count = len(segments)
        for params in self._shapes.get(count, ()):
            if not all(segments[i] for i in params):
                continue  # an empty parameter never matches
            literal = tuple("" if i in params else seg for i, seg in enumerate(segments))
            by_method = self._dynamic[(count, params)].get(literal)
            if by_method is None:
                continue
            route = by_method.get(method) or (by_method.get("GET") if method == "HEAD" else None)
            if route is None:
                raise _not_allowed(by_method)
            return route.handler, {
                route.segments[i][1:-1]: unquote(segments[i], errors="replace") for i in params
            }
        raise ApiError(404, "not_found", "no such route")


def _not_allowed(by_method: dict[str, Any]) -> ApiError:
    methods = sorted(by_method)
    return ApiError(
        405,
        "method_not_allowed",
        "method not allowed",
        (("allow", ", ".join(methods)),),
    )
