"""``syncd backup --url`` that http.client cannot send, or that would not reach
``/v1/admin/backup``: one line, exit 2, nothing created (they were a
UnicodeError traceback leaving DEST behind, a misleading "the answer broke
off", or a 404 for a path after the query)."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncd.cli import main


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:1/ä", "expected printable ASCII with no blanks"),
        ("http://bücher.invalid:1", "expected printable ASCII with no blanks"),
        ("http://127.0.0.1:1/a b", "expected printable ASCII with no blanks"),
        ("http://127.0.0.1:1/\n", "expected printable ASCII with no blanks"),
        ("http://" + "a" * 64 + ":1", "the host name cannot be looked up"),
        ("http://a..b:1", "the host name cannot be looked up"),
        ("http://127.0.0.1:1?x=1", "expected no user@, ?query or #fragment"),
        ("http://127.0.0.1:1?", "expected no user@, ?query or #fragment"),
        ("http://127.0.0.1:1#top", "expected no user@, ?query or #fragment"),
        ("http://admin:pw@127.0.0.1:1", "expected no user@, ?query or #fragment"),
    ],
)
def test_an_unsendable_url_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, words: str
) -> None:
    dest = tmp_path / "copy"
    assert main(["backup", str(dest), "--token", "t", "--url", url], env={}) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"syncd backup: --url {url!r}: {words}"), err
    assert err.count("\n") == 1
    assert not dest.exists()
