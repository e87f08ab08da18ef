"""SERVICE_DATA_DIR with spaces around it (an env file's ``SERVICE_DATA_DIR=
/var/lib/syncd``, which docker --env-file keeps) was taken as is: a relative
path, so the server kept its data in ``./ /var/lib/syncd`` under its working
directory, and a later start with the typo fixed found an empty store. It now
stops the start with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from syncd.config import ConfigError, from_env
from tests.conftest import SIGNING_KEY_HEX


@pytest.mark.parametrize("value", [" {dir}", "{dir} ", "{dir}\n", " "])
def test_spaces_around_the_data_dir_stop_the_start(value: str, tmp_path: Path) -> None:
    meant = tmp_path / "data"
    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "syncd"],
        env={
            "PATH": "/usr/bin:/bin",
            "SERVICE_BIND": "127.0.0.1:1",
            "SERVICE_SIGNING_KEY": SIGNING_KEY_HEX,
            "SERVICE_DATA_DIR": value.format(dir=meant),
        },
        cwd=work,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("syncd: SERVICE_DATA_DIR: "), proc.stderr
    assert list(work.iterdir()) == [] and not meant.exists()


def test_a_data_dir_without_spaces_around_it_is_taken() -> None:
    assert from_env({"SERVICE_DATA_DIR": "/srv/my data"}).data_dir == Path("/srv/my data")
    assert from_env({"SERVICE_DATA_DIR": ""}).data_dir == Path("./data")
    with pytest.raises(ConfigError, match="has spaces or line breaks around it"):
        from_env({"SERVICE_DATA_DIR": " /srv/data"})


@pytest.mark.parametrize("name", ["SERVICE_TLS_CERT", "SERVICE_TLS_KEY"])
def test_tls_files_with_spaces_around_them_say_so(name: str) -> None:
    """Refused before as "/etc/syncd/tls.crt  is not a readable file", the
    space unseen in the message."""
    env = {"SERVICE_TLS_CERT": "/etc/syncd/tls.crt", "SERVICE_TLS_KEY": "/etc/syncd/tls.key"}
    env[name] += " "
    with pytest.raises(ConfigError) as info:
        from_env(env)
    assert info.value.variable == name
    assert "has spaces or line breaks around it" in str(info.value)
