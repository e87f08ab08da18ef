"""``syncd serve``: the real process over TCP, SIGTERM exit 0, sd_notify, the systemd unit,
one-line refusals, and the help that names the settings."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.cli.support import run_without
from tests.conftest import ADMIN

ROOT = Path(__file__).resolve().parents[2]


def test_subprocess_serves_and_sigterm_exits_zero(spawn_server: Any) -> None:
    server = spawn_server()
    with urllib.request.urlopen(f"{server.url}/health/live", timeout=5) as resp:
        assert resp.status == 200
    req = urllib.request.Request(
        f"{server.url}/v1/namespaces/app/tokens",
        data=json.dumps({"client_id": 1, "permissions": {"read": ["*"], "write": ["*"]}}).encode(),
        headers={"authorization": f"Bearer {ADMIN}", "content-type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert "token" in json.load(resp)
    assert server.terminate() == 0
    assert "syncd stopped" in server.log()


def test_random_admin_token_written_and_not_logged(spawn_server: Any, tmp_path: Path) -> None:
    server = spawn_server({"SERVICE_ADMIN_TOKEN": ""})
    token_file = tmp_path / "data" / "admin_token"
    assert token_file.exists()
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    secret = token_file.read_text().strip()
    server.terminate()
    assert secret not in server.log()
    assert str(token_file) in server.log()


def test_an_ignored_admin_token_file_is_named_in_one_warning(
    spawn_server: Any, tmp_path: Path
) -> None:
    first = spawn_server({"SERVICE_ADMIN_TOKEN": ""})  # writes data/admin_token
    first.terminate()
    file_secret = (tmp_path / "data" / "admin_token").read_text().strip()
    second = spawn_server({"SERVICE_ADMIN_TOKEN": "an-admin-token-set-in-the-environment"})
    second.terminate()
    warnings = [
        line for line in second.log().splitlines() if "admin token" in line and "WARNING" in line
    ]
    assert len(warnings) == 1
    assert "SERVICE_ADMIN_TOKEN is in force" in warnings[0] and "admin_token" in warnings[0]
    assert file_secret not in second.log()
    third = spawn_server({"SERVICE_ADMIN_TOKEN": file_secret})  # the same token: nothing to say
    third.terminate()
    assert "is in force" not in third.log()


def test_sd_notify_ready_watchdog_stopping(spawn_server: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    server = spawn_server({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "200000"})
    messages: list[str] = []
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not any("WATCHDOG=1" in m for m in messages):
        messages.append(sock.recv(4096).decode())
    assert any(m.startswith("READY=1") for m in messages)
    assert any("WATCHDOG=1" in m for m in messages)
    server.terminate()
    while not any("STOPPING=1" in m for m in messages):
        messages.append(sock.recv(4096).decode())
    sock.close()


def test_sighup_without_tls_keeps_serving(spawn_server: Any) -> None:
    # The unit's ExecReload sends SIGHUP whether TLS is on or not.
    server = spawn_server()
    server.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "nothing to reload" not in server.log():
        assert server.proc.poll() is None, "SIGHUP killed the server"
        assert time.monotonic() < deadline, server.log()
        time.sleep(0.05)
    with urllib.request.urlopen(f"{server.url}/health/live", timeout=5) as resp:
        assert resp.status == 200
    assert server.terminate() == 0


def test_a_notify_socket_nobody_reads_never_blocks_the_server(
    spawn_server: Any, tmp_path: Path
) -> None:
    # Its queue fills after a few datagrams; a tiny WATCHDOG_USEC (1 us) fills
    # it at once. The server must go on answering and stop on SIGTERM.
    path = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        server = spawn_server({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "1"})
        time.sleep(1)
        for _ in range(3):
            with urllib.request.urlopen(f"{server.url}/health/live", timeout=5) as resp:
                assert resp.status == 200
        assert server.terminate(timeout=10) == 0
        received = 0
        sock.settimeout(0)
        with contextlib.suppress(BlockingIOError):
            while sock.recv(4096):
                received += 1
        assert received > 1  # READY=1 and the watchdog pings that fitted


@pytest.mark.parametrize(
    "address", ["@syncd-test-nobody-listens", "missing/notify.sock", "/" + "x" * 200]
)
def test_a_bad_notify_socket_is_one_warning(
    spawn_server: Any, tmp_path: Path, address: str
) -> None:
    server = spawn_server({"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "20000"})
    time.sleep(0.5)  # some 50 watchdog pings, all failing
    with urllib.request.urlopen(f"{server.url}/health/live", timeout=5) as resp:
        assert resp.status == 200
    assert server.terminate() == 0
    warnings = [line for line in server.log().splitlines() if "sd_notify" in line]
    assert len(warnings) == 1 and "WARNING" in warnings[0], warnings


@pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)
def test_systemd_unit_verifies(tmp_path: Path) -> None:
    unit = (ROOT / "systemd" / "syncd.service").read_text()
    syncd_bin = Path(sys.executable).parent / "syncd"
    unit = unit.replace("/opt/syncd/.venv/bin/syncd", str(syncd_bin))
    target = tmp_path / "syncd.service"
    target.write_text(unit)
    out = subprocess.run(["systemd-analyze", "verify", str(target)], capture_output=True, text=True)
    problems = [ln for ln in (out.stdout + out.stderr).splitlines() if "syncd.service" in ln]
    assert out.returncode == 0 and not problems, out.stdout + out.stderr


def test_the_systemd_steps_work_in_their_own_install_layout() -> None:
    """docs/operations.md's systemd steps: `syncd` is not on PATH there, the
    unit is verified only once ExecStart exists, and the env file asks for
    literal values (systemd never runs $(...))."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## systemd") : text.index("## Container")]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S)
    assert block is not None
    lines = [line.split("#")[0].strip() for line in block.group(1).splitlines()]
    commands = [line for line in lines if line]
    install = next(i for i, c in enumerate(commands) if "pip install" in c)
    verify = next(i for i, c in enumerate(commands) if "systemd-analyze verify" in c)
    assert verify > install
    assert "/etc/systemd/system/syncd.service" in commands[verify]
    for command in commands:
        words = command.replace("sudo ", "").split()
        assert words[0] != "syncd" and "$(syncd" not in command, command
    unit = (ROOT / "systemd" / "syncd.service").read_text()
    assert "ExecStart=/opt/syncd/.venv/bin/syncd serve" in unit
    env_file = (ROOT / "systemd" / "syncd.env").read_text()
    for line in env_file.splitlines():
        setting = line.lstrip("#").strip()
        if re.match(r"[A-Z_]+=", setting):
            assert "$(" not in setting and "`" not in setting, line
    assert "/opt/syncd/.venv/bin/syncd keygen" in env_file


def test_database_url_without_the_postgres_extra_is_one_line(tmp_path: Path) -> None:
    result = run_without(
        ["psycopg", "psycopg_pool"],
        ["serve"],
        {
            "DATABASE_URL": "postgresql://u@127.0.0.1:1/db",
            "SERVICE_DATA_DIR": str(tmp_path),
            # Any free port: the default 3000 may be taken on the machine, and
            # the bind is checked first (its own one line).
            "SERVICE_BIND": "127.0.0.1:0",
        },
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "pip install 'syncd[postgres]'" in result.stderr and "DATABASE_URL" in result.stderr


def test_help_names_the_settings_and_where_all_of_them_are() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "syncd", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    assert "docs/configuration.md" in result.stdout
    reference = (ROOT / "docs" / "configuration.md").read_text()
    named = set(re.findall(r"\b(?:SERVICE_[A-Z_]+|DATABASE_URL)\b", result.stdout))
    assert {"SERVICE_BIND", "SERVICE_DATA_DIR", "SERVICE_SIGNING_KEY"} <= named
    for variable in named:
        assert f"`{variable}`" in reference, variable


def test_a_second_syncd_on_a_data_directory_in_use_is_one_line(
    spawn_server: Any, tmp_path: Path
) -> None:
    """It takes the lock before it writes anything: no stray admin_token, no
    traceback, exit 2."""
    first = spawn_server({})  # SERVICE_ADMIN_TOKEN set: it writes no admin_token
    data = tmp_path / "data"
    assert (data / "LOCK").exists() and not (data / "admin_token").exists()
    env = {
        "PATH": "/usr/bin:/bin",
        "SERVICE_DATA_DIR": str(data),
        "SERVICE_BIND": "127.0.0.1:0",
        "SERVICE_SIGNING_KEY": "11" * 32,
    }
    second = subprocess.run(
        [sys.executable, "-m", "syncd"], env=env, capture_output=True, text=True, timeout=60
    )
    assert second.returncode == 2, second.stderr
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
    assert lines[0].startswith("syncd: the data directory") and "in use" in lines[0]
    assert not (data / "admin_token").exists()
    assert first.proc.poll() is None  # the first one serves on


def test_the_unit_does_not_restart_a_refused_start() -> None:
    """Exit 2 is a refusal a restart cannot cure (a bad setting, a data
    directory in use or damaged, a database that refuses the node).
    Restart=on-failure restarted it every RestartSec for ever: each try takes
    longer than StartLimitIntervalSec / StartLimitBurst (10 s / 5, systemd's
    defaults), so the start limit never stopped it, and the journal filled
    with the same line every two seconds."""
    unit = (ROOT / "systemd" / "syncd.service").read_text()
    settings = [line.split("=", 1) for line in unit.splitlines() if "=" in line]
    values = {key: value for key, value in settings if not key.startswith("#")}
    assert values["Restart"] == "on-failure"
    assert "2" in values["RestartPreventExitStatus"].split()
