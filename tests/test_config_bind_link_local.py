"""SERVICE_BIND on a link-local IPv6 address without its zone id
("[fe80::1]:3000") was taken, and the server's bind refused it after the
store was opened: exit 1 and "cannot start: [Errno 22] error while attempting
to bind on address ('fe80::1', 3000, 0, 0): invalid argument", which says
nothing of what is missing. fe80::/10 exists once per interface, so the
kernel needs to know which: the setting is now refused with the form to
write, one line, exit 2, before anything is opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from syncd.config import ConfigError, from_env
from tests.conftest import start_to_the_end

MESSAGE = (
    "SERVICE_BIND: '[fe80::1]:3000': a link-local address is on every interface:"
    " name one with a zone id, as in [fe80::1%eth0]:3000"
)


def test_a_link_local_address_without_a_zone_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        from_env({"SERVICE_BIND": "[fe80::1]:3000"})
    assert str(info.value) == MESSAGE


@pytest.mark.parametrize("bind", ["[fe80::1%lo]:3000", "[fe80::1%1]:3000", "[::1]:3000"])
def test_with_a_zone_or_not_link_local_it_is_taken(bind: str) -> None:
    assert from_env({"SERVICE_BIND": bind}).bind == bind


def test_the_real_process_refuses_it_in_one_line(tmp_path: Path) -> None:
    proc = start_to_the_end(tmp_path / "data", SERVICE_BIND="[fe80::1]:3000")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.decode().strip().splitlines() == [f"syncd: {MESSAGE}"]
    assert not (tmp_path / "data").exists()
