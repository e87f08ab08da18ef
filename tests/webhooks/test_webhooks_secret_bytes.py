"""The webhook secret is the bytes of ``SERVICE_WEBHOOK_SECRET`` as set
(docs/webhooks.md#signing), whatever they are: a real ``syncd`` process with
a secret that is not UTF-8 starts and signs with exactly those bytes.

Found by probing: such a value reaches Python as surrogate escapes, the
dispatcher encoded it strictly, and the server died at start with a
UnicodeEncodeError traceback."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx

from tests.http.support import issue, op
from tests.webhooks.test_webhooks_shutdown import SlowReceiver, valid

SECRET_BYTES = b"secret-\xff\xfe-latin1-\xe9"


async def test_a_secret_that_is_not_utf8_signs_with_its_bytes(spawn_server: Any) -> None:
    receiver = await SlowReceiver(delay=0).start()
    try:
        server = spawn_server(
            {
                "SERVICE_WEBHOOK_URL": receiver.url,
                # As the environment holds it (subprocess encodes it back to these bytes).
                "SERVICE_WEBHOOK_SECRET": os.fsdecode(SECRET_BYTES),
            }
        )
        async with httpx.AsyncClient(base_url=server.url) as client:
            h = await issue(client)
            r = await op(client, h, "gc:n", {"op": "increment", "amount": 1})
            assert r.status_code == 200, r.text
        async with asyncio.timeout(5):
            while not receiver.bodies:
                await asyncio.sleep(0.01)
        assert valid(SECRET_BYTES, receiver.bodies[0], receiver.signatures[0])
        assert server.terminate() == 0, server.log()
    finally:
        await receiver.close()
