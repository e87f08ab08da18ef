"""A SERVICE_WEBHOOK_URL refused at start: its error line names the problem
and the URL's scheme and host, never its credentials, path or query (which
often carry a secret), as the delivery logs show ``safe_url`` only. Found by
probing: a malformed port or IPv6 host quoted the whole URL, ``user:pass@``
included, and whitespace in the path quoted the secret path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SECRET = "s3cretXYZ"


@pytest.mark.parametrize(
    ("url", "words", "shown"),
    [
        (
            f"http://user:{SECRET}@hooks.internal:abc/in",
            "malformed",
            "'http://hooks.internal:abc/…'",
        ),
        (f"http://user:{SECRET}@[::1/in", "Invalid IPv6 URL", "'http://[::1/…'"),
        (
            f"http://hooks.internal/services/{SECRET} x",
            "whitespace in its path",
            "'http://hooks.internal/…'",
        ),
        (
            f"https://hooks.internal/in?token={SECRET}\x7f",
            "control character",
            "'https://hooks.internal/…'",
        ),
    ],
)
def test_a_refused_url_shows_no_secret_in_the_error(
    url: str, words: str, shown: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "syncd", "serve"],
        env={
            **os.environ,
            "SERVICE_DATA_DIR": str(tmp_path / "data"),
            "SERVICE_BIND": "127.0.0.1:0",
            "SERVICE_WEBHOOK_URL": url,
        },
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("syncd: SERVICE_WEBHOOK_URL: ") and words in done.stderr
    assert shown in done.stderr
    assert SECRET not in done.stderr + done.stdout
