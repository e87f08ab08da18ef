"""The root admin secret: from the environment, or made once in a 0600 file."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from syncd.auth import AdminSecret, AdminSecretError
from syncd.auth.admin import ADMIN_TOKEN_FILE, _create_secret_file


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_created_with_0600_and_reused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="syncd")
    data_dir = tmp_path / "data"  # does not exist yet
    first = AdminSecret.load(None, data_dir)
    path = data_dir / ADMIN_TOKEN_FILE
    assert first.path == path
    assert _mode(path) == 0o600
    secret = path.read_text().strip()
    assert len(secret) >= 40
    assert first.matches(secret)
    assert not first.matches(secret + "x")
    assert not first.matches(secret[:-1])
    # A later start reuses the file.
    second = AdminSecret.load(None, data_dir)
    assert second.matches(secret)
    assert path.read_text().strip() == secret
    assert [p.name for p in data_dir.iterdir()] == [ADMIN_TOKEN_FILE]  # no temp files left
    # The log names the file, never the value.
    assert str(path) in caplog.text
    assert secret not in caplog.text
    assert secret not in repr(first)


def test_mode_is_0600_even_with_a_permissive_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        AdminSecret.load(None, tmp_path)
    finally:
        os.umask(old)
    assert _mode(tmp_path / ADMIN_TOKEN_FILE) == 0o600


def test_env_value_wins_and_writes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="syncd")
    secret = "an-admin-secret-from-the-environment"
    admin = AdminSecret.load(secret, tmp_path)
    assert admin.matches(secret)
    assert admin.path is None
    assert not (tmp_path / ADMIN_TOKEN_FILE).exists()
    assert secret not in caplog.text


def test_short_env_value_warns_without_the_value(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="syncd")
    admin = AdminSecret.load("hunter2", tmp_path)
    assert admin.matches("hunter2")
    assert "shorter" in caplog.text
    assert "hunter2" not in caplog.text


def test_empty_env_value_means_unset(tmp_path: Path) -> None:
    AdminSecret.load("", tmp_path)
    assert (tmp_path / ADMIN_TOKEN_FILE).exists()


def test_existing_file_is_used(tmp_path: Path) -> None:
    (tmp_path / ADMIN_TOKEN_FILE).write_text("preset-secret-value-123456\n")
    os.chmod(tmp_path / ADMIN_TOKEN_FILE, 0o600)
    assert AdminSecret.load(None, tmp_path).matches("preset-secret-value-123456")


def test_loose_file_mode_is_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="syncd")
    path = tmp_path / ADMIN_TOKEN_FILE
    path.write_text("preset-secret-value-123456\n")
    os.chmod(path, 0o644)
    AdminSecret.load(None, tmp_path)
    assert "readable by others" in caplog.text
    assert "preset-secret-value-123456" not in caplog.text


@pytest.mark.parametrize("content", [b"", b"   \n", b"\xff\xfe", b"x" * 5000])
def test_unusable_file_stops_the_start(tmp_path: Path, content: bytes) -> None:
    (tmp_path / ADMIN_TOKEN_FILE).write_bytes(content)
    with pytest.raises(AdminSecretError) as ei:
        AdminSecret.load(None, tmp_path)
    assert str(tmp_path / ADMIN_TOKEN_FILE) in str(ei.value)


def test_directory_in_the_way(tmp_path: Path) -> None:
    (tmp_path / ADMIN_TOKEN_FILE).mkdir()
    with pytest.raises(AdminSecretError):
        AdminSecret.load(None, tmp_path)


def test_symlink_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("secret-in-another-file-123456\n")
    (tmp_path / ADMIN_TOKEN_FILE).symlink_to(target)
    with pytest.raises(AdminSecretError):
        AdminSecret.load(None, tmp_path)


def test_racing_creator_keeps_the_first_secret(tmp_path: Path) -> None:
    path = tmp_path / ADMIN_TOKEN_FILE
    assert _create_secret_file(path, "winner-secret-aaaaaaaaaaaaaaa")
    assert not _create_secret_file(path, "loser-secret-bbbbbbbbbbbbbbbb")
    assert path.read_text().strip() == "winner-secret-aaaaaaaaaaaaaaa"
    assert sorted(p.name for p in tmp_path.iterdir()) == [ADMIN_TOKEN_FILE]


def test_matches_is_total() -> None:
    admin = AdminSecret("ascii-secret-value-1234567890")
    assert not admin.matches("\u00e9\u00e8 non-ascii")
    assert not admin.matches("\udc80 lone surrogate")
    assert not admin.matches("")
    with pytest.raises(ValueError):
        AdminSecret("")
