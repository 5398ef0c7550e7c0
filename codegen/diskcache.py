"""The on-disk machine-code cache: entries only this user could have written, authenticated.

An entry ``<dir>/<key[:2]>/<key>.o`` is ``MAGIC``, the key (64 hex digits), a tag (64 hex
digits) and the object code, where the tag is HMAC-SHA256 under a per-user secret of the key
and the object code. Loading an entry runs its bytes as native code, so a checksum anyone can
compute is not enough: whoever can write the directory (another user of a shared machine, a
restored CI cache) could otherwise make this process run their code, or crash it with garbage.

* The secret is 32 random bytes in ``$XDG_CONFIG_HOME/symgrad/cache-key`` (default
  ``~/.config``), created on first use with mode 0600. It is kept outside the cache directory,
  so a copy of the directory cannot vouch for its own entries.
* The cache directory and its subdirectories must belong to this user and not be writable by
  group or others; otherwise the disk cache is off for the process (one warning says why).
* An entry is opened with ``O_NOFOLLOW | O_NONBLOCK`` and used only if it is a regular file of
  this user that others cannot write: a FIFO, a device or a symlink in its place never blocks
  or redirects the read. An entry that fails any check, or whose tag does not match, is ignored
  and the kernel is recompiled (and rewritten).
* Entries are written to a temporary file and renamed into place (atomic on POSIX); a failed
  write (a full disk) removes the temporary file.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import stat
import tempfile
import threading
import warnings

MAGIC = b"SYMGRADO"
KEY_BYTES = 32
_HEAD = len(MAGIC) + 64 + 64

_lock = threading.Lock()
_secrets: dict[str, bytes | None] = {}    # secret file -> its bytes (None: unusable)
_roots: dict[str, bool] = {}              # cache directory -> usable


def secret_path() -> str:
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "symgrad", "cache-key")


def _problem(st: os.stat_result, private: bool = False) -> str | None:
    """Why a file or directory of this status cannot be trusted, or None."""
    uid = getattr(os, "geteuid", None)
    if uid is not None and st.st_uid != uid():
        return f"owned by uid {st.st_uid}, not this user"
    if st.st_mode & (0o077 if private else 0o022):
        return f"mode {stat.filemode(st.st_mode)}: {'readable or ' if private else ''}" \
               "writable by others"
    return None


def _safe_directory(path: str, create: bool) -> str | None:
    """None when ``path`` is a directory only this user can write (made 0700 if missing),
    else the reason it is not."""
    try:
        if create:
            os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as e:
        return e.strerror or str(e)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    return _problem(st)


def _open_regular(path: str, private: bool = False) -> bytes | None:
    """The contents of ``path`` if it is a regular file this user owns and others cannot
    write (nor read, if ``private``); None otherwise. Never follows a symlink, never blocks."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or _problem(st, private):
            return None
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)


def _write_new(directory: str, path: str, data: bytes, replace: bool) -> None:
    """Write ``data`` to a temporary file in ``directory`` (mode 0600), then move it to
    ``path``: replacing what is there, or (``replace=False``) only if nothing is. Raises
    OSError; the temporary file never stays behind."""
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)     # fails if another process created it first
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def secret() -> bytes | None:
    """The per-user HMAC key (created on first use); None if it cannot be had safely."""
    path = secret_path()
    with _lock:
        if path not in _secrets:
            _secrets[path] = _load_or_create_secret(path)
        return _secrets[path]


def _load_or_create_secret(path: str) -> bytes | None:
    directory = os.path.dirname(path)
    if _safe_directory(directory, create=True) is not None:
        return None
    for _ in range(2):
        data = _open_regular(path, private=True)
        if data is not None:
            return data if len(data) == KEY_BYTES else None
        if os.path.lexists(path):
            return None            # there, but not a private regular file of ours
        try:
            _write_new(directory, path, os.urandom(KEY_BYTES), replace=False)
        except FileExistsError:
            continue               # another process made it just now: read theirs
        except OSError:
            return None
    return None


def usable_root(root: str) -> bool:
    """Is ``root`` a cache directory this process may use? (Checked once per process; a
    refusal warns once.)"""
    with _lock:
        if root in _roots:
            return _roots[root]
    why = _safe_directory(root, create=True)
    if why is None and secret() is None:
        why = f"no private key at {secret_path()} (it must be a 0600 file of this user)"
    if why is not None:
        warnings.warn(f"symgrad: not using the machine-code cache {root}: {why}. Set "
                      "SYMGRAD_CACHE_DIR to a directory only you can write (or "
                      "SYMGRAD_NO_CACHE=1).", RuntimeWarning, stacklevel=4)
    with _lock:
        _roots[root] = why is None
    return why is None


def _tag(key: str, obj: bytes) -> bytes:
    return hmac.new(secret(), key.encode() + b"\0" + obj, hashlib.sha256).hexdigest().encode()


def read(root: str, key: str) -> tuple[bytes | None, bool]:
    """``(object code, rejected)``: the object if a trustworthy entry for ``key`` exists;
    ``rejected`` when something was there but failed a check."""
    directory = os.path.join(root, key[:2])
    path = os.path.join(directory, key + ".o")
    if not os.path.lexists(path):
        return None, False
    if _safe_directory(directory, create=False) is not None:
        return None, True
    data = _open_regular(path)
    if (data is None or len(data) <= _HEAD or data[:len(MAGIC)] != MAGIC
            or data[len(MAGIC):len(MAGIC) + 64] != key.encode()):
        return None, True
    obj = data[_HEAD:]
    if not hmac.compare_digest(data[len(MAGIC) + 64:_HEAD], _tag(key, obj)):
        return None, True          # corrupt, truncated, or not written by this user
    return obj, False


def write(root: str, key: str, obj: bytes) -> bool:
    """Store ``obj`` under ``key``; False if it could not be (read-only or full disk, an
    unsafe subdirectory): that only costs a recompile next time."""
    directory = os.path.join(root, key[:2])
    if _safe_directory(directory, create=True) is not None:
        return False
    try:
        _write_new(directory, os.path.join(directory, key + ".o"),
                   MAGIC + key.encode() + _tag(key, obj) + obj, replace=True)
    except OSError:
        return False
    return True
