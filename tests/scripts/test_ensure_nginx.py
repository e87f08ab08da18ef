"""``scripts/ensure-nginx.sh`` installs nginx with a ``policy-rc.d`` that keeps
the package from starting a system nginx, and leaves the machine's own
``policy-rc.d`` as it found it (a container image's "exit 101", an admin's
rules): it used to delete whatever was there. Run in a mount namespace of its
own, with a tmpfs on /usr/sbin (so nginx is missing and the machine's
/usr/sbin untouched) and an apt-get that only records what it saw."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "ensure-nginx.sh"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="needs root and unshare for a mount namespace",
)

FAKE_APT_GET = """#!/bin/sh
# Records the policy in force while "installing".
if [ "$1" = install ]; then cat /usr/sbin/policy-rc.d > "$SEEN"; fi
exit 0
"""


def run_in_namespace(tmp_path: Path, existing: str | None) -> tuple[str, str | None]:
    """The policy apt-get saw, and /usr/sbin/policy-rc.d after the script."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    apt_get = bindir / "apt-get"
    apt_get.write_text(FAKE_APT_GET)
    apt_get.chmod(0o755)
    seen, after = tmp_path / "seen", tmp_path / "after"
    setup = "mount -t tmpfs tmpfs /usr/sbin"
    if existing is not None:
        (tmp_path / "existing").write_text(existing)
        setup += f" && cp {tmp_path / 'existing'} /usr/sbin/policy-rc.d"
    check = f"if [ -e /usr/sbin/policy-rc.d ]; then cat /usr/sbin/policy-rc.d > {after}; fi"
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "bash",
            "-c",
            f"{setup} && bash {SCRIPT}; status=$?; {check}; exit $status",
        ],
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SEEN": str(seen)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return seen.read_text(), (after.read_text() if after.exists() else None)


def test_the_install_runs_under_exit_101_and_none_is_left(tmp_path: Path) -> None:
    seen, after = run_in_namespace(tmp_path, None)
    assert "exit 101" in seen
    assert after is None


def test_a_policy_that_was_there_is_put_back(tmp_path: Path) -> None:
    mine = "#!/bin/sh\n# the machine's own\nexit 0\n"
    seen, after = run_in_namespace(tmp_path, mine)
    assert "exit 101" in seen
    assert after == mine
