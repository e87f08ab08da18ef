"""SERVICE_CORS_ORIGINS entries are compared with the browser's Origin header
as written, and a browser sends a lowercase scheme and host, a port only when
it is not the scheme's default, and nothing after. An entry written otherwise
(copied from the address bar with its trailing slash, in capitals, with
:443) was taken and never matched: the page's every request failed CORS with
nothing in the server's log. Such an entry now stops the start with one line
giving the form to write."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncd.config import ConfigError, from_env
from tests.conftest import start_to_the_end


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("https://app.example/", "https://app.example"),
        ("https://app.example/index.html", "https://app.example"),
        ("HTTPS://App.Example", "https://app.example"),
        ("https://app.example:443", "https://app.example"),
        ("http://localhost:80", "http://localhost"),
        ("https://[::1]:443/", "https://[::1]"),
    ],
)
def test_an_origin_no_browser_sends_names_the_one_to_write(written: str, meant: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_CORS_ORIGINS": f"https://ok.example, {written}"})
    assert info.value.variable == "SERVICE_CORS_ORIGINS"
    assert f"{written!r} never matches an Origin header; write {meant!r}" in str(info.value)


@pytest.mark.parametrize(
    "written", ["app.example", "https://", "https://app.example:99999", "*.example", "http://[::1"]
)
def test_what_is_no_origin_at_all(written: str) -> None:
    with pytest.raises(ConfigError, match="is not an origin: write scheme://host"):
        from_env({"SERVICE_CORS_ORIGINS": written})


def test_origins_as_browsers_send_them_are_taken() -> None:
    written = (
        " https://app.example , http://localhost:3000, https://[::1]:8443,"
        " chrome-extension://abcdef, null, *, ,https://app.example"
    )
    assert from_env({"SERVICE_CORS_ORIGINS": written}).cors_origins == (
        "https://app.example",
        "http://localhost:3000",
        "https://[::1]:8443",
        "chrome-extension://abcdef",
        "null",
        "*",
    )


def test_the_start_is_refused_in_one_line(tmp_path: Path) -> None:
    proc = start_to_the_end(tmp_path / "data", SERVICE_CORS_ORIGINS="https://app.example/")
    assert proc.returncode == 2
    assert proc.stderr.decode().strip().splitlines() == [
        "syncd: SERVICE_CORS_ORIGINS: 'https://app.example/' never matches an Origin header;"
        " write 'https://app.example' (no path or trailing slash, lowercase, no default port)"
    ]
