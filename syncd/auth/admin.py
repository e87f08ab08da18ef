"""The root admin secret: ``SERVICE_ADMIN_TOKEN``, or one made and kept on disk.

When the variable is unset, a random secret is created once and written to
``<data_dir>/admin_token``. The file is born with mode 0600 (it never exists
with looser permissions, not even for an instant) and appears whole or not at
all: the secret is written and fsynced under a temporary name, then hard-linked
into place, which fails if the file already exists, so two starts racing both
end up with the one secret that won. Later starts reuse the file. The log names
the file, never the secret.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from syncd.files import NotRegularFile, open_regular

log = logging.getLogger("syncd.auth")

ADMIN_TOKEN_FILE = "admin_token"
SECRET_BYTES = 32
"""Random bytes in a generated secret (256 bits; 43 base64url characters)."""
MIN_SECRET_CHARS = 16
"""A configured secret shorter than this is accepted with a warning."""
MAX_SECRET_FILE_BYTES = 4096
"""An admin_token file larger than this is not ours; refuse to start."""


class AdminSecretError(Exception):
    """The admin token file is unusable; the message names the path, never content."""


class AdminSecret:
    __slots__ = ("_secret", "path")

    def __init__(self, secret: str, path: Path | None = None) -> None:
        if not secret:
            raise ValueError("the admin secret must not be empty")
        self._secret = _secret_bytes(secret)
        self.path = path
        """Where the secret is kept, when it came from a file."""

    def __repr__(self) -> str:
        return f"AdminSecret(path={self.path!r})"

    def matches(self, bearer: str) -> bool:
        """Constant-time comparison (only the length can leak).

        A bearer from the ``Authorization`` header is its bytes as sent, one
        character each (headers are decoded as latin-1); one from ``?token=``
        is UTF-8 text. So a secret that is not ASCII matches the bytes either
        spelling stands for: encoded as UTF-8 only, the header's would be
        encoded twice and never match."""
        as_text = bearer.encode("utf-8", "surrogatepass")
        if bearer.isascii():
            return hmac.compare_digest(as_text, self._secret)
        try:
            as_sent = bearer.encode("latin-1")
        except UnicodeEncodeError:
            as_sent = as_text
        # Both compared, whatever the first says.
        text_matches = hmac.compare_digest(as_text, self._secret)
        return hmac.compare_digest(as_sent, self._secret) | text_matches

    @classmethod
    def load(cls, env_value: str | None, data_dir: Path) -> AdminSecret:
        """``SERVICE_ADMIN_TOKEN`` when set (non-empty), else the file in ``data_dir``."""
        if env_value:
            if len(env_value) < MIN_SECRET_CHARS:
                log.warning(
                    "SERVICE_ADMIN_TOKEN is shorter than %d characters; use a long random value",
                    MIN_SECRET_CHARS,
                )
            if not sendable_in_a_header(env_value):
                log.warning(
                    "SERVICE_ADMIN_TOKEN begins or ends with a space or tab, or holds a control"
                    " character: no Authorization header can carry it as set (HTTP strips"
                    " the spaces around a header value and refuses control characters),"
                    " so no admin route will accept it; remove them"
                )
            _warn_if_shadowed(Path(data_dir) / ADMIN_TOKEN_FILE, env_value)
            return cls(env_value)
        path = Path(data_dir) / ADMIN_TOKEN_FILE
        existing = _read_secret(path)
        if existing is not None:
            log.info("admin token read from %s", path)
            return cls(existing, path)
        secret = secrets.token_urlsafe(SECRET_BYTES)
        won = _create_secret_file(path, secret)
        if not won:
            # Another process created it between our read and our link: use theirs.
            existing = _read_secret(path)
            if existing is None:
                raise AdminSecretError(f"admin token file {path} vanished while starting")
            log.info("admin token read from %s", path)
            return cls(existing, path)
        log.info("admin token created in %s (mode 0600); read it from there", path)
        return cls(secret, path)


def sendable_in_a_header(secret: str) -> bool:
    """Whether ``Authorization: Bearer <secret>`` carries the secret as it is:
    HTTP drops the spaces and tabs around a header value (and the bearer is
    stripped of them too), and parsers refuse a value with a control character
    (a tab inside is allowed). A secret from the environment is taken as
    set, so one that fails this matches no header: the root admin could only
    be reached by ``?token=``, which no admin route reads."""
    if secret[:1] in (" ", "\t") or secret[-1:] in (" ", "\t"):
        return False  # a blank at either end (no equality on the secret: see tests/security)
    return all(ch == "\t" or not (ord(ch) < 0x20 or ord(ch) == 0x7F) for ch in secret)


def _secret_bytes(secret: str) -> bytes:
    """The secret's bytes as set: an environment value that is not UTF-8
    reaches Python with those bytes as surrogate escapes (a strict encode
    would refuse it, and the server would not start)."""
    return secret.encode("utf-8", "surrogateescape")


def _warn_if_shadowed(path: Path, env_value: str) -> None:
    """One warning when a different admin token file is ignored: an operator who
    reads the file for the token would otherwise get 401s and no clue why."""
    try:
        existing = _read_secret(path)
    except AdminSecretError:
        existing = None  # unreadable or malformed: not in force either way
    if existing is not None and not hmac.compare_digest(
        _secret_bytes(existing), _secret_bytes(env_value)
    ):
        log.warning(
            "admin token: SERVICE_ADMIN_TOKEN is in force (the environment wins); "
            "%s holds a different token, which is ignored - delete it or make them equal",
            path,
        )


def _read_secret(path: Path) -> str | None:
    try:
        fd = open_regular(path, follow_links=False)
    except FileNotFoundError:
        return None
    except NotRegularFile:
        raise AdminSecretError(f"admin token file {path} is not a regular file") from None
    except OSError as e:
        raise AdminSecretError(f"cannot open admin token file {path}: {e.strerror}") from None
    mode = os.fstat(fd).st_mode
    with os.fdopen(fd, "rb") as f:
        if mode & 0o077:
            log.warning("admin token file %s is readable by others; chmod 600 it", path)
        data = f.read(MAX_SECRET_FILE_BYTES + 1)
    if len(data) > MAX_SECRET_FILE_BYTES:
        raise AdminSecretError(f"admin token file {path} is too large")
    try:
        secret = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise AdminSecretError(f"admin token file {path} is not text") from None
    if not secret:
        raise AdminSecretError(f"admin token file {path} is empty; delete it to make a new one")
    return secret


def _create_secret_file(path: Path, secret: str) -> bool:
    """Write ``secret`` to ``path`` unless the file exists; True if we wrote it."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(secret.encode("utf-8") + b"\n")
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:
            # A file system without hard links: O_EXCL on the final name still
            # keeps an existing secret safe.
            return _create_exclusive(path, secret)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    _fsync_dir(path.parent)
    return True


def _create_exclusive(path: Path, secret: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(secret.encode("utf-8") + b"\n")
        f.flush()
        os.fsync(f.fileno())
    return True


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
