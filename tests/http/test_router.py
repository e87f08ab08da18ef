"""The router's matching: literal segments and ``{name}`` parameters, one raw
segment each, percent-decoded after matching; 404 and 405."""

from __future__ import annotations

import httpx
import pytest

from syncd.errors import ApiError
from syncd.http.request import Request
from syncd.http.response import Response
from syncd.http.router import Router
from tests.conftest import RunningServer
from tests.http.support import ADMIN_HEADERS


def handler(request: Request) -> Response:
    return Response()


@pytest.fixture
def router() -> Router:
    r = Router()
    r.add("GET", "/health/live", handler)
    r.add("GET", "/v1/namespaces/{ns}/crdts", handler)
    r.add("POST", "/v1/namespaces/{ns}/crdts/{id}/ops", handler)
    r.add("GET", "/v1/namespaces/{ns}/crdts/{id}", handler)
    r.add("DELETE", "/v1/namespaces/{ns}/crdts/{id}", handler)
    r.add("GET", "/v1/a/{x}/{y}/{z}", handler)
    return r


def params(router: Router, method: str, path: str) -> tuple[str, dict[str, str]]:
    route, found = router.match_route(method, path)
    return route.pattern, found


def test_parameters_of_one_two_and_three_segments(router: Router) -> None:
    assert params(router, "GET", "/v1/namespaces/app/crdts") == (
        "/v1/namespaces/{ns}/crdts",
        {"ns": "app"},
    )
    assert params(router, "POST", "/v1/namespaces/app/crdts/gc:x/ops") == (
        "/v1/namespaces/{ns}/crdts/{id}/ops",
        {"ns": "app", "id": "gc:x"},
    )
    assert params(router, "GET", "/v1/a/1/2/3")[1] == {"x": "1", "y": "2", "z": "3"}
    assert params(router, "GET", "/health/live") == ("/health/live", {})


def test_a_parameter_is_decoded_after_matching_so_an_encoded_slash_stays_in_it(
    router: Router,
) -> None:
    assert params(router, "GET", "/v1/namespaces/a%2Fb/crdts/x%3Ay%2F..")[1] == {
        "ns": "a/b",
        "id": "x:y/..",
    }
    # Undecodable bytes are replaced, not refused here (the id checks refuse them).
    assert params(router, "GET", "/v1/namespaces/app/crdts/%ff")[1] == {
        "ns": "app",
        "id": "\ufffd",
    }


def test_head_takes_get_and_other_methods_are_405_with_allow(router: Router) -> None:
    assert params(router, "HEAD", "/v1/namespaces/app/crdts/x")[0] == (
        "/v1/namespaces/{ns}/crdts/{id}"
    )
    with pytest.raises(ApiError) as refused:
        router.match_route("PUT", "/v1/namespaces/app/crdts/x")
    assert refused.value.status == 405
    assert refused.value.headers == (("allow", "DELETE, GET, HEAD"),)
    with pytest.raises(ApiError) as static:
        router.match_route("POST", "/health/live")
    assert static.value.status == 405


@pytest.mark.parametrize(
    "path",
    [
        "/v1/namespaces//crdts/x",  # an empty parameter never matches
        "/v1/namespaces/app/crdts/",
        "/v1/namespaces/app/crdts/x/ops/more",
        "/v1/namespaces/app/things/x",
        "/v2/namespaces/app/crdts/x",
        "",
    ],  # "*" is OPTIONS *'s, and 400 with any other method (test_methods.py)
)
def test_what_matches_no_route_is_404(router: Router, path: str) -> None:
    with pytest.raises(ApiError) as missing:
        router.match_route("GET", path)
    assert missing.value.status == 404


async def test_allow_names_every_method_a_path_takes(server: RunningServer) -> None:
    """A 405's Allow lists HEAD wherever GET is served (it is), as the
    preflight's Allow does; every method it names is taken (not 405)."""
    paths = (
        "/v1/namespaces/app/crdts",
        "/v1/namespaces/app/crdts/gc:x",
        "/v1/namespaces/app/crdts/gc:x/ops",
        "/v1/namespaces/app/tokens",
        "/v1/namespaces/app/tokens/me",
        "/v1/namespaces/app/revocations",
        "/v1/namespaces/app/revocations/7",
        "/v1/namespaces/app/usage",
        "/v1/openapi.json",
        "/health/live",
        "/metrics",
    )
    async with httpx.AsyncClient(base_url=server.url, headers=ADMIN_HEADERS) as http:
        for path in paths:
            refused = await http.request("PATCH", path)
            assert refused.status_code == 405, (path, refused.text)
            allow = refused.headers["allow"].split(", ")
            assert ("GET" in allow) == ("HEAD" in allow), (path, allow)
            preflight = await http.options(path)
            if preflight.status_code == 204:
                assert preflight.headers["allow"] == refused.headers["allow"], path
            for method in allow:
                taken = await http.request(method, path)
                assert taken.status_code != 405, (path, method, taken.text)
