"""``apply_retrying`` with a body that is not a list: an iterable of ops (a
generator) is read once, so a retry after a lost answer resends the same ops
with the same op_ids and the service answers ``duplicate``; a body that is not
ops at all gets the service's 400, as ``apply`` does, not a TypeError.

The answer is lost for real: a transport that forwards the first POST to the
real server, then drops the answer (as a reset connection would)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from syncd.client import AsyncClient, Client, ServiceError, ops
from tests.client.conftest import NS, make_token
from tests.conftest import RunningServer


class LoseFirstAnswer(httpx.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.posts = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST":
            self.posts += 1
            if self.posts == 1:
                response.read()
                response.close()
                raise httpx.ReadError("connection reset", request=request)
        return response


class AsyncLoseFirstAnswer(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.posts = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        if request.method == "POST":
            self.posts += 1
            if self.posts == 1:
                await response.aread()
                await response.aclose()
                raise httpx.ReadError("connection reset", request=request)
        return response


def _ops() -> list[ops.Op]:
    return [ops.gcounter_increment(1), ops.gcounter_increment(2)]


async def test_a_generator_body_is_retried_whole(server: RunningServer) -> None:
    def blocking() -> None:
        transport = LoseFirstAnswer()
        with Client(server.url, make_token(3), NS, transport=transport) as client:
            answer = client.apply_retrying("gc:g", (op for op in _ops()))  # type: ignore[arg-type]
            assert transport.posts == 2 and answer["duplicate"] is True
            view = client.read("gc:g")
            assert view is not None and view["value"] == 3

    await asyncio.to_thread(blocking)
    transport = AsyncLoseFirstAnswer()
    async with AsyncClient(server.url, make_token(4), NS, transport=transport) as client:
        answer = await client.apply_retrying("gc:g", (op for op in _ops()))  # type: ignore[arg-type]
        assert transport.posts == 2 and answer["duplicate"] is True
        view = await client.read("gc:g")
        assert view is not None and view["value"] == 6


@pytest.mark.parametrize("body", ["increment", ["increment"], [1, 2]])
async def test_a_body_of_no_ops_gets_the_services_answer(
    server: RunningServer, body: object
) -> None:
    async with AsyncClient(server.url, make_token(3), NS) as client:
        with pytest.raises(ServiceError) as refused:
            await client.apply("gc:h", body)  # type: ignore[arg-type]
        with pytest.raises(ServiceError) as retried:
            await client.apply_retrying("gc:h", body)  # type: ignore[arg-type]
        assert (retried.value.status, retried.value.code) == (400, refused.value.code)
