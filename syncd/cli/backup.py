"""``syncd backup DEST``: an online backup of a running server (docs/operations.md#backup-and-restore).

It asks the server for the backup (``POST /v1/admin/backup`` with the root
admin secret) instead of copying the data directory, because only the server
knows which bytes of its log are whole; it unpacks the tar the server streams
into ``DEST`` (new or empty), fsyncs every file, and verifies the copy the way
``syncd verify`` would, so a backup that exits 0 is one that restores. Exit 0
when all is well, 1 when the transfer or the copy is bad, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import sys
import tarfile
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Final

from syncd.cli.command import INTERRUPTED, Commands, add_command
from syncd.cli.health import local_address
from syncd.cli.verify import LAYOUT, UNPACKING, verify_dir

REQUEST_TIMEOUT_S: Final = 600.0
"""How long one read may wait: the server answers once everything queued is
durable, and the stream may pause while the server's disk is busy."""

CONNECT_TIMEOUT_S: Final = 10.0
"""How long the connection to the server may take: a host that does not answer
(down, or a firewall dropping packets) is named after this, not after the
kernel's SYN retries (about 2 minutes) or :data:`REQUEST_TIMEOUT_S`."""

DOWNLOAD_CHUNK_BYTES: Final = 1024 * 1024

MANIFEST: Final = "MANIFEST.json"
"""The backup's last member (``syncd.store.embedded.backup.MANIFEST``)."""


def register(commands: Commands) -> None:
    parser = add_command(
        commands,
        "backup",
        run,
        help="an online backup of a running server into DEST (embedded store)",
        description="Take an online backup of a running syncd (embedded store) into DEST.",
    )
    parser.add_argument("dest", help="a new or empty directory")
    parser.add_argument(
        "--url", help="the server (default: from SERVICE_BIND, https with SERVICE_TLS_CERT)"
    )
    parser.add_argument(
        "--token",
        help="the root admin secret (default: SERVICE_ADMIN_TOKEN or the data dir's);"
        " other users of the machine see it in ps: prefer SERVICE_ADMIN_TOKEN or --token-file",
    )
    parser.add_argument(
        "--token-file",
        metavar="PATH",
        help="read the root admin secret from this file (one line)",
    )
    parser.add_argument(
        "--without-admin-token",
        action="store_true",
        help="leave the data directory's generated admin secret (admin_token) out of the copy",
    )
    parser.add_argument(
        "--max-rate",
        type=float,
        metavar="MIB_S",
        help="limit the backup to this many MiB/s, so it takes less from the writes going on",
    )


def _default_url(env: Mapping[str, str]) -> str:
    """The server's URL from SERVICE_BIND, https when SERVICE_TLS_CERT is set (the
    server then serves nothing but TLS: plain HTTP there is closed unanswered);
    ValueError naming the setting when it is bad. The address is the one
    ``syncd health`` asks (127.0.0.1 for ``[::]``, which is dual-stack)."""
    try:
        host, port = local_address(env)
    except ValueError as exc:
        raise ValueError(f"{exc} (or give --url)") from None
    scheme = "https" if env.get("SERVICE_TLS_CERT") else "http"
    return f"{scheme}://{'[' + host + ']' if ':' in host else host}:{port}"


def _bad_url(url: str) -> str | None:
    """Why ``url`` cannot be the server's URL, or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 (ValueError for a bad port)
    except ValueError as exc:
        return str(exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected http://host:port or https://host:port"
    if not all(0x21 <= ord(ch) < 0x7F for ch in url):
        # http.client sends the request line as ASCII: anything else ended in
        # a UnicodeError traceback or a misleading "broke off" (a blank).
        return (
            "expected printable ASCII with no blanks (an international host name in its "
            "xn-- form, other characters %-encoded)"
        )
    try:
        # What the resolver is given: a label over 63 characters or an empty
        # one (a..b) fails here, as a UnicodeError traceback in the request.
        parts.hostname.encode("idna")
    except UnicodeError as exc:
        return f"the host name cannot be looked up ({exc})"
    if parts.username is not None or parts.query or parts.fragment or url.endswith(("?", "#")):
        # The request goes to the URL's path + /v1/admin/backup: a query or
        # fragment would end up before that path, and urllib sends no user info.
        return "expected no user@, ?query or #fragment (the path /v1/admin/backup is added)"
    return None


def _bad_max_rate(rate: float | None) -> str | None:
    """Why ``--max-rate`` is refused, or None: the server's bounds, checked here
    so the answer is one line before anything is asked of the server."""
    if rate is None:
        return None
    from syncd.http.handlers.admin import max_rate_problem  # not on every command's start

    return max_rate_problem(rate)


def read_token_file(path: str) -> str:
    """A secret kept in a file (``--token-file``): its text without the line
    end an editor or ``echo`` adds; OSError when it cannot be read."""
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read().removesuffix("\n").removesuffix("\r")


def _default_token(env: Mapping[str, str]) -> str | None:
    token = env.get("SERVICE_ADMIN_TOKEN")
    if token:
        return token
    path = Path(env.get("SERVICE_DATA_DIR") or "./data") / "admin_token"
    try:
        return path.read_text().strip() or None
    except OSError:
        return None


def run(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    # The directory the path names, as the OS resolves it: as text,
    # "DIR/missing/.." does not exist, so it passed for a new directory (DIR's
    # files neither refused nor spared: a failed backup removed "what it
    # made", DIR's contents). Messages name the resolved path.
    dest = Path(os.path.realpath(args.dest))
    try:
        in_use = dest.exists() and (not dest.is_dir() or any(dest.iterdir()))
    except OSError as exc:
        # A name too long, a directory that may not be read or searched.
        print(f"syncd backup: {dest}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if in_use:
        print(f"syncd backup: {dest} must be a new or empty directory", file=sys.stderr)
        return 2
    if args.token and args.token_file:
        print("syncd backup: give --token or --token-file, not both", file=sys.stderr)
        return 2
    if args.token_file:
        try:
            token: str | None = read_token_file(args.token_file)
        except OSError as exc:
            print(
                f"syncd backup: --token-file {args.token_file}: {exc.strerror or exc}",
                file=sys.stderr,
            )
            return 2
    else:
        token = args.token or _default_token(env)
    if not token:
        print(
            "syncd backup: no admin token (SERVICE_ADMIN_TOKEN, --token-file or --token)",
            file=sys.stderr,
        )
        return 2
    from syncd.auth.admin import sendable_in_a_header

    if not sendable_in_a_header(token):
        print(
            "syncd backup: the admin token cannot be sent in a header: it holds a control"
            " character or starts or ends with a blank",
            file=sys.stderr,
        )
        return 2
    try:
        base = args.url or _default_url(env)
    except ValueError as exc:
        print(f"syncd backup: {exc}", file=sys.stderr)
        return 2
    problem = _bad_url(base)
    if problem is not None:
        print(f"syncd backup: --url {base!r}: {problem}", file=sys.stderr)
        return 2
    problem = _bad_max_rate(args.max_rate)
    if problem is not None:
        print(f"syncd backup: --max-rate {args.max_rate!r}: {problem}", file=sys.stderr)
        return 2
    url = base.rstrip("/") + "/v1/admin/backup"
    query = []
    if args.max_rate is not None:
        # repr, not :g, which rounds (0.9999999 would reach the server as 1).
        query.append(f"max_rate={args.max_rate!r}")
    if args.without_admin_token:
        query.append("admin_token=false")
    if query:
        url += "?" + "&".join(query)
    # The secret's bytes as the server holds them (UTF-8, and an environment
    # value that is not UTF-8 as it came): http.client would encode a str as
    # Latin-1, refusing most non-ASCII secrets and sending others wrong.
    bearer = b"Bearer " + token.encode("utf-8", "surrogateescape")
    request = urllib.request.Request(url, method="POST", data=b"")
    request.add_header("Authorization", bearer)  # type: ignore[arg-type]
    created = _missing(dest)
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _undo(dest, created)  # the parents it made before failing
        print(f"syncd backup: cannot create {dest}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    with _stop_signals_as_interrupt():
        return _take(request, url, dest, created)


def _take(request: urllib.request.Request, url: str, dest: Path, created: list[Path]) -> int:
    """Download, unpack and verify the backup into ``dest`` (made, with the
    parents in ``created``); the exit status."""
    try:
        problem = _download(request, url, dest)
        if problem is None:
            _fsync_tree(dest / UNPACKING)
            _move_into_place(dest)
    except OSError as exc:
        # Writing the copy failed: a full disk, a file size limit, a directory
        # that is not writable. What was written is no backup.
        problem = f"cannot write the copy into {dest}: {exc.strerror or exc}"
    except KeyboardInterrupt as exc:
        # Ctrl-C or a stop signal: what was written is no backup; one line, not a traceback.
        return _interrupted(dest, created, exc)
    if problem is not None:
        print(f"syncd backup: {problem}", file=sys.stderr)
        _undo(dest, created)
        return 1
    try:
        return verify_dir(dest)
    except KeyboardInterrupt as exc:
        # The last step: a copy not verified is no backup to keep (one that
        # exits 0 is one that restores), so Ctrl-C here is undone as before.
        return _interrupted(dest, created, exc)


STOP_SIGNALS: Final[dict[int, str]] = {signal.SIGTERM: "terminated", signal.SIGHUP: "hung up"}
"""Signals taken as Ctrl-C is, with the word that says so: the polite stop
of ``timeout``, ``kill`` and a systemd unit's stop, and the hangup of a
terminal or SSH session that ran the command. They killed it where it stood,
leaving a half-unpacked copy in ``DEST``."""


class _Stopped(KeyboardInterrupt):
    """One of :data:`STOP_SIGNALS` came."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stop(signum: int, frame: object) -> None:
    raise _Stopped(signum)


@contextlib.contextmanager
def _stop_signals_as_interrupt() -> Iterator[None]:
    """:data:`STOP_SIGNALS` raise :class:`_Stopped` meanwhile (where signals
    can be handled: the main thread), but one ignored already stays ignored
    (``nohup`` ignores SIGHUP); the previous handlers are put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {
        sig: signal.signal(sig, _stop)
        for sig in STOP_SIGNALS
        if signal.getsignal(sig) is not signal.SIG_IGN
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupted(dest: Path, created: list[Path], stop: KeyboardInterrupt) -> int:
    """Ctrl-C or a stop signal: undo what was written, say so in one line;
    the shell's status for the signal (128 + its number). Stop signals are
    ignored meanwhile, so that the undoing is not itself cut short."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            if signal.getsignal(sig) is _stop:  # put back by _stop_signals_as_interrupt
                signal.signal(sig, signal.SIG_IGN)
    _undo(dest, created)
    if isinstance(stop, _Stopped):
        print(f"syncd backup: {STOP_SIGNALS[stop.signum]}; {dest} is as it was", file=sys.stderr)
        return 128 + stop.signum
    print(f"syncd backup: interrupted; {dest} is as it was", file=sys.stderr)
    return INTERRUPTED


def _move_into_place(dest: Path) -> None:
    """Move the unpacked backup from ``dest/UNPACKING`` into ``dest``, the
    manifest last (a directory with it is whole), and remove the staging
    directory; each step made durable before the next."""
    from syncd.store.embedded.log import fsync_dir

    staging = dest / UNPACKING
    for name in os.listdir(staging):
        if name != MANIFEST:
            os.replace(staging / name, dest / name)
    fsync_dir(str(dest))
    os.replace(staging / MANIFEST, dest / MANIFEST)
    staging.rmdir()
    fsync_dir(str(dest))


def _download(request: urllib.request.Request, url: str, dest: Path) -> str | None:
    """Fetch the backup and unpack it into ``dest``; what went wrong, or None."""
    with tempfile.TemporaryFile(dir=dest) as tar_file:
        try:
            with _OPENER.open(request, timeout=REQUEST_TIMEOUT_S) as response:
                while chunk := response.read(DOWNLOAD_CHUNK_BYTES):
                    _write(tar_file, chunk)
        except urllib.error.HTTPError as exc:
            return _refusal(url, exc.code, exc.read(), exc.headers.get("location"))
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, _ConnectTimeout):
                return (
                    f"{url}: no connection within {CONNECT_TIMEOUT_S:g} s (the host does not"
                    " answer: is it up and the address right, or does a firewall drop it?)"
                )
            return f"{url}: {exc}"
        except _WriteError as exc:
            raise exc.error from None  # the local copy, not the transfer: run() says so
        except OSError as exc:
            return f"{url}: {exc}"
        except http.client.HTTPException as exc:  # a broken chunked answer, among others
            return f"{url}: the answer broke off before its end ({type(exc).__name__})"
        tar_file.seek(0)
        staging = dest / UNPACKING
        staging.mkdir()
        try:
            with tarfile.open(fileobj=tar_file, mode="r:") as tar:
                return _unpack(tar, staging)
        except tarfile.TarError as exc:
            return f"the stream is not a whole tar ({exc}): it was cut short or is not a backup"


def _unpack(tar: tarfile.TarFile, dest: Path) -> str | None:
    """Extract a backup's members into ``dest``; why the tar is not one, or None.

    A backup holds the layout's directories and regular files at plain
    relative paths, each once, and ends with its manifest; anything else
    (a link, a device, an absolute or ``..`` name, a stream that stops before
    the manifest) is refused whole rather than extracted and trusted."""
    names: set[str] = set()
    last = None
    for member in tar:
        problem = _bad_member(member, names)
        if problem is not None:
            return f"the stream is not a backup: {member.name!r} {problem}"
        names.add(member.name)
        last = member.name
        tar.extract(member, dest, filter="data")
    if last != MANIFEST:
        # The manifest is written last: without it the stream stopped early
        # (a tar may end at any member's edge and still read as whole).
        return f"the stream ended before its {MANIFEST}: it was cut short"
    return None


def _bad_member(member: tarfile.TarInfo, seen: set[str]) -> str | None:
    """Why one tar member has no place in a backup, or None."""
    name = member.name
    if name.startswith("/") or any(part in ("", ".", "..") for part in name.split("/")):
        return "is not a path inside the backup"
    if name in seen:
        return "comes twice"
    if member.isdir():
        return None if name in LAYOUT else "is a directory a backup does not have"
    if not member.isreg():
        return "is not a regular file (a backup holds no links or special files)"
    if name in LAYOUT:
        return "is a file where a backup has a directory"
    folder = name.rpartition("/")[0]
    if folder and folder not in LAYOUT:
        # Unpacked, its directory would be made on the way: refused as a
        # directory member of that name is.
        return "is in a directory a backup does not have"
    return None


class _WriteError(Exception):
    """Writing the downloaded bytes failed (``error``), as opposed to reading them."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _write(file: IO[bytes], chunk: bytes) -> None:
    try:
        file.write(chunk)
    except OSError as exc:
        raise _WriteError(exc) from None


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are not followed: urllib would send the root admin secret on
    to wherever the answer points (another host included), as a GET the
    backup route does not take. The redirect is reported with its target."""

    def redirect_request(self, *args: Any) -> None:
        return None


class _ConnectTimeout(TimeoutError):
    """The connection to the server took longer than :data:`CONNECT_TIMEOUT_S`."""


def _connect(address: tuple[str, int], timeout: Any = None, source: Any = None) -> socket.socket:
    """``socket.create_connection`` with at most :data:`CONNECT_TIMEOUT_S` for
    the connect; the socket then waits ``timeout`` (the read timeout) on each read."""
    if not isinstance(timeout, (int, float)):  # http.client's "the default" sentinel
        timeout = socket.getdefaulttimeout()
    limit = CONNECT_TIMEOUT_S if timeout is None else min(timeout, CONNECT_TIMEOUT_S)
    try:
        sock = socket.create_connection(address, limit, source)
    except TimeoutError as exc:
        raise _ConnectTimeout(str(exc)) from None
    sock.settimeout(timeout)
    return sock


class _HTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _connect


class _HTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _connect


class _HTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_HTTPConnection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(
            _HTTPSConnection,
            req,
            context=self._context,  # type: ignore[attr-defined]
        )


_OPENER: Final = urllib.request.build_opener(_NoRedirects, _HTTPHandler, _HTTPSHandler)


def _refusal(url: str, status: int, body: bytes, location: str | None = None) -> str:
    """The server's refusal in one line: its status, code and message."""
    try:
        error = json.loads(body)
        text = f"{status} {error['error']}: {error['message']}"
    except (ValueError, TypeError, KeyError):
        text = f"{status} {body.decode('utf-8', 'replace')[:300]}"
    if status in (401, 403):
        text += " (--token or SERVICE_ADMIN_TOKEN must be the server's root admin secret)"
    if 300 <= status < 400:
        text = f"{status} redirect to {location!r}, not followed (give --url the server itself)"
    return f"{url} refused the backup: {text}"


def _missing(dest: Path) -> list[Path]:
    """``dest`` and its ancestors that do not exist yet, innermost first: what
    ``mkdir(parents=True)`` makes, and a failed backup removes again."""
    missing: list[Path] = []
    for path in (dest, *dest.absolute().parents):
        if path.exists():
            break
        missing.append(path)
    return missing


def _undo(dest: Path, created: list[Path]) -> None:
    """Leave ``dest`` as it was: gone, with the parents this run made, if it
    made it; else empty again."""
    if created:
        shutil.rmtree(dest, ignore_errors=True)
        for parent in created[1:]:
            try:
                parent.rmdir()
            except FileNotFoundError:
                continue  # its making failed (mkdir stopped above it)
            except OSError:
                return  # not empty: something else wrote there meanwhile; keep it
        return
    for entry in dest.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _fsync_tree(root: Path) -> None:
    from syncd.store.embedded.log import fsync_dir

    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(directory)
