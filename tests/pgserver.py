"""A throw-away PostgreSQL server of the test suite's own.

The suite never uses, reconfigures or restarts a PostgreSQL it did not start.
``ThrowawayPostgres`` does what pytest-postgresql's process fixture does
(initdb into a temporary directory, a free port, its own settings, stopped and
removed at the end) and two things that library does not: it runs the server
binaries as the ``postgres`` system user when the suite runs as root (initdb
refuses root, and CI here runs as root), and it restarts the server in place,
which the cluster fault tests need. With ``password``, TCP connections must
give it (scram-sha-256, as a production server asks), for the tests of a
refused password; ``url`` then carries it.

The binaries are found with ``pg_config --bindir`` or, where that points at a
directory without ``initdb`` (Debian's client-only wrappers), under
``/usr/lib/postgresql/<version>/bin``, newest version first.

``SYNCD_TEST_PG=<url>`` (no database name) points the suite at an existing
server instead; nothing then restarts it or changes its settings, and the tests
that must restart PostgreSQL start a throw-away server of their own anyway.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

SUPERUSER: Final = "syncd"
SYSTEM_USER: Final = "postgres"  # who runs the binaries when the suite runs as root
START_TIMEOUT_S: Final = 60
# Where Debian and Ubuntu put the server binaries (pg_config may be a client-only wrapper).
DEBIAN_BINARIES: Final = Path(os.environ.get("SYNCD_PG_LIBDIR", "/usr/lib/postgresql"))
INSTALL_HINT: Final = "apt-get install postgresql (PostgreSQL 15+ server binaries: initdb, pg_ctl)"

# The cluster tests run three nodes, each with a pool, a LISTEN session and a
# replication slot, beside per-test databases: room for all of them.
SERVER_SETTINGS: Final = {
    "listen_addresses": "'127.0.0.1'",
    "wal_level": "logical",
    "max_replication_slots": "64",
    "max_wal_senders": "64",
    "max_connections": "300",
    # Test data is thrown away: no need to wait for the disk on every commit.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "64MB",
    "log_min_messages": "warning",
}


class PostgresMissing(RuntimeError):
    """No PostgreSQL server binaries on this machine."""


def find_bindir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            candidates.append(Path(out))
    if DEBIAN_BINARIES.is_dir():
        versions = sorted(
            (p for p in DEBIAN_BINARIES.iterdir() if p.name.isdigit()),
            key=lambda p: int(p.name),
            reverse=True,
        )
        candidates.extend(v / "bin" for v in versions)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    raise PostgresMissing(f"PostgreSQL server binaries not found; install them: {INSTALL_HINT}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThrowawayPostgres:
    """One PostgreSQL server in a temporary directory; ``url`` has no database name."""

    def __init__(
        self,
        bindir: Path | None = None,
        settings: dict[str, str] | None = None,
        *,
        password: str | None = None,
    ) -> None:
        self.bindir = bindir or find_bindir()
        self.password = password
        self.settings = {**SERVER_SETTINGS, **(settings or {})}
        self.root = Path(tempfile.mkdtemp(prefix="syncd-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as_system_user = os.geteuid() == 0

    @property
    def url(self) -> str:
        user = SUPERUSER if self.password is None else f"{SUPERUSER}:{self.password}"
        return f"postgresql://{user}@127.0.0.1:{self.port}"

    def _run(self, *args: str) -> None:
        command = [str(self.bindir / args[0]), *args[1:]]
        if self._as_system_user:
            command = ["runuser", "-u", SYSTEM_USER, "--", *command]
        result = subprocess.run(command, capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if result.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise RuntimeError(f"{args[0]} failed: {result.stderr.strip()}\n{tail}")

    def start(self) -> ThrowawayPostgres:
        auth = ["--auth=trust"]
        if self.password is not None:
            pwfile = self.root / "password"
            pwfile.write_text(self.password + "\n")
            auth = ["--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={pwfile}"]
        if self._as_system_user:
            account = pwd.getpwnam(SYSTEM_USER)
            for path in (self.root, *self.root.iterdir()):
                os.chown(path, account.pw_uid, account.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, *auth, "--no-sync", "-E", "UTF8")
        lines = [f"{k} = {v}" for k, v in self.settings.items()]
        lines += [f"port = {self.port}", f"unix_socket_directories = '{self.root}'"]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# syncd test suite\n" + "\n".join(lines) + "\n")
        self._pg_ctl("start")
        return self

    def _pg_ctl(self, action: str, *extra: str) -> None:
        log = str(self.root / "server.log")
        self._run("pg_ctl", action, "-D", str(self.data), "-l", log, "-w", "-t", "60", *extra)

    def restart(self) -> None:
        """Stop (fast: sessions are ended, as in a real restart) and start again."""
        self._pg_ctl("restart", "-m", "fast")

    def halt(self) -> None:
        """Stop the server (fast: sessions are ended) but keep its data: an
        outage that :meth:`resume` ends."""
        self._pg_ctl("stop", "-m", "fast")

    def resume(self) -> None:
        """Start a server :meth:`halt` stopped, on the same port and data."""
        self._pg_ctl("start")

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, OSError, subprocess.TimeoutExpired):
            self._pg_ctl("stop", "-m", "immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def throwaway_postgres(
    settings: dict[str, str] | None = None, *, password: str | None = None
) -> Iterator[ThrowawayPostgres]:
    server = ThrowawayPostgres(settings=settings, password=password)
    try:
        yield server.start()
    finally:
        server.stop()
