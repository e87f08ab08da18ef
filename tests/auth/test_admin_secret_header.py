"""A ``SERVICE_ADMIN_TOKEN`` that no ``Authorization`` header can carry (a
space or tab at either end, a control character) is named in a warning at
start, without its value: otherwise every admin request gets 401 and
nothing says why."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from syncd.auth.admin import sendable_in_a_header

WARNING = "SERVICE_ADMIN_TOKEN begins or ends with a space or tab, or holds a control character"


@pytest.mark.parametrize(
    ("secret", "sendable"),
    [
        ("admin-secret-0123456789", True),
        ("admin secret\twith inner blanks", True),
        ("admin-secret-ünïcode-0123", True),
        ("admin-secret-0123456789 ", False),
        (" admin-secret-0123456789", False),
        ("\tadmin-secret-0123456789", False),
        ("admin-secret-0123456789\n", False),
        ("admin-secret\x00-0123456789", False),
        ("admin-secret\x7f-0123456789", False),
    ],
)
def test_which_secrets_a_header_carries(secret: str, sendable: bool) -> None:
    assert sendable_in_a_header(secret) is sendable


@pytest.mark.parametrize("http_parser", ["h11"])
async def test_a_secret_no_header_carries_is_warned_of_at_start(
    make_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "admin-secret-with-a-trailing-space-0123 "
    caplog.set_level(logging.WARNING, logger="syncd.auth")
    server = await make_server(admin_token=secret)
    # What a client sends (HTTP clients refuse the trailing space, or drop it).
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get(
            "/v1/namespaces/app/usage", headers={"authorization": f"Bearer {secret.strip()}"}
        )
    assert r.status_code == 401, r.text
    assert WARNING in caplog.text
    assert secret.strip() not in caplog.text


@pytest.mark.parametrize("http_parser", ["h11"])
async def test_a_secret_a_header_carries_is_not_warned_of(
    make_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="syncd.auth")
    await make_server(admin_token="admin secret with inner blanks 0123")
    assert WARNING not in caplog.text
