"""The on-disk machine-code cache: entries only this user could have written, authenticated.

An entry ``<dir>/<key[:2]>/<key>.o`` is ``MAGIC``, the key (64 hex digits), a tag (64 hex
digits) and the object code, where the tag is keyed BLAKE2b-256 under a per-user secret of the
key and the object code (``<key>.host``, LLVM's view of the host CPU, ``codegen.host_cpu``, the
same way). Loading an entry runs its bytes as native code, so a checksum anyone can compute
is not enough: whoever can write the directory (another user of a shared machine, a
restored CI cache) could otherwise make this process run their code, or crash it with garbage.

* The secret is 32 random bytes in ``$XDG_CONFIG_HOME/symgrad/cache-key`` (default
  ``~/.config``), created on first use with mode 0600. It is kept outside the cache directory,
  so a copy of the directory cannot vouch for its own entries.
* The cache directory and its subdirectories must belong to this user and not be writable by
  anyone else (group-writable is accepted for the user's own private group, which a umask of
  002 gives every new directory); otherwise the disk cache is off for the process (one
  warning says why). A directory that cannot be made (a read-only disk) quietly means no
  disk cache, as does a key that cannot be written.
* An entry is opened with ``O_NOFOLLOW | O_NONBLOCK`` and used only if it is a regular file of
  this user that others cannot write: a FIFO, a device or a symlink in its place never blocks
  or redirects the read. An entry that fails any check, or whose tag does not match, is ignored
  and the kernel is recompiled (and rewritten).
* Entries are written to a temporary file and renamed into place (atomic on POSIX); a failed
  write (a full disk) removes the temporary file.

The machine code of a module compiled as several parts is one entry (:func:`pack`).
"""
from __future__ import annotations

import os
import stat
import threading
import warnings

try:     # (_blake2 directly: hashlib and hmac import OpenSSL's _hashlib, ~2-3 ms a process)
    from _blake2 import blake2b
except ImportError:       # a Python built without it
    from hashlib import blake2b
try:
    from _operator import _compare_digest as compare_digest     # what hmac.compare_digest is
except ImportError:
    from hmac import compare_digest

PARTS_MAGIC = b"SGPARTS1"     # an entry of several objects (one object: ELF as it is)
MAGIC = b"SYMGRAD2"     # (2: tags are keyed BLAKE2b; entries of 1, HMAC-SHA256, read as foreign)
KEY_BYTES = 32
_HEAD = len(MAGIC) + 64 + 64

_lock = threading.Lock()
_secrets: dict[str, bytes | None] = {}    # secret file -> its bytes (None: unusable)
_roots: dict[str, bool] = {}              # cache directory -> usable


def secret_path() -> str:
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(config, "symgrad", "cache-key")


def _private_group(gid: int) -> bool:
    """Is ``gid`` this user's own group (the "user private group" of most Linux systems,
    where a umask of 002 makes every new directory group-writable)?"""
    try:
        import grp
        import pwd
        user = pwd.getpwuid(os.geteuid()).pw_name
        return gid == os.getegid() and set(grp.getgrgid(gid).gr_mem) <= {user}
    except (ImportError, KeyError, OSError):
        return False


def _problem(st: os.stat_result, private: bool = False) -> str | None:
    """Why a file or directory of this status cannot be trusted, or None. ``private``: not
    even readable by anyone else (the secret)."""
    uid = getattr(os, "geteuid", None)
    if uid is not None and st.st_uid != uid():
        return f"owned by uid {st.st_uid}, not this user"
    mode = stat.filemode(st.st_mode)
    if private and st.st_mode & 0o077:
        return f"mode {mode}: others may read or write it"
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and not _private_group(st.st_gid)):
        return f"mode {mode}: others may write it"
    return None


class Unavailable(Exception):
    """A directory that cannot be made or read (a read-only or missing disk): no disk cache,
    quietly, as before anything was checked."""


def _safe_directory(path: str, create: bool) -> str | None:
    """None when ``path`` is a directory only this user can write (made 0700 if missing),
    else the reason it is not; raises Unavailable when it cannot be had at all."""
    try:
        if create:
            os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as e:
        raise Unavailable(e) from None
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
    import tempfile     # (here: a disk hit writes nothing, and tempfile costs 1-2 ms to import)

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


def _load_or_create_secret(path: str) -> bytes | str | None:
    """The secret; or why it is unsafe (str); or None when it cannot be had (read-only disk)."""
    directory = os.path.dirname(path)
    try:
        why = _safe_directory(directory, create=True)
    except Unavailable:
        return None
    if why is not None:
        return f"{directory}: {why}"
    for _ in range(2):
        data = _open_regular(path, private=True)
        if data is not None:
            return data if len(data) == KEY_BYTES else f"{path}: not a symgrad key"
        if os.path.lexists(path):
            return f"{path}: not a regular file of this user that only it can read"
        try:
            _write_new(directory, path, os.urandom(KEY_BYTES), replace=False)
        except FileExistsError:
            continue               # another process made it just now: read theirs
        except OSError:
            return None
    return None


def _secret_state() -> bytes | str | None:
    path = secret_path()
    with _lock:
        if path not in _secrets:
            _secrets[path] = _load_or_create_secret(path)
        return _secrets[path]


def secret() -> bytes | None:
    """The per-user MAC key (created on first use); None if it cannot be had safely."""
    state = _secret_state()
    return state if isinstance(state, bytes) else None


def usable_root(root: str) -> bool:
    """Is ``root`` a cache directory this process may use? Checked once per process; an
    unsafe directory or key warns once, a read-only disk quietly means no disk cache."""
    with _lock:
        if root in _roots:
            return _roots[root]
    try:
        why = _safe_directory(root, create=True)
    except Unavailable:
        why = ""
    if why is None:
        state = _secret_state()
        why = None if isinstance(state, bytes) else state or ""
    if why:
        warnings.warn(f"symgrad: not using the machine-code cache {root}: {why}. Set "
                      "SYMGRAD_CACHE_DIR to a directory only you can write, or "
                      "SYMGRAD_NO_CACHE=1.", RuntimeWarning, stacklevel=4)
    with _lock:
        _roots[root] = why is None
    return why is None


def _after_fork_in_child():
    global _lock
    _lock = threading.Lock()    # another thread may have held it at the fork


os.register_at_fork(after_in_child=_after_fork_in_child)


def hasher(data: bytes = b""):
    """A new 256-bit BLAKE2b hash (64 hex digits: the cache's keys)."""
    return blake2b(data, digest_size=32)


def _tag(key: str, obj: bytes) -> bytes:
    """Keyed BLAKE2b, a MAC by construction (RFC 7693), under the per-user secret."""
    mac = blake2b(key.encode() + b"\0", digest_size=32, key=secret())
    mac.update(obj)
    return mac.hexdigest().encode()


def read(root: str, key: str, suffix: str = ".o") -> tuple[bytes | None, bool]:
    """``(object code, rejected)``: the object if a trustworthy entry for ``key`` exists;
    ``rejected`` when something was there but failed a check. ``suffix``: the kind of entry
    (``.o`` machine code; ``codegen.jit`` keeps its view of the host CPU as ``.host``)."""
    directory = os.path.join(root, key[:2])
    path = os.path.join(directory, key + suffix)
    if not os.path.lexists(path):
        return None, False
    try:
        if _safe_directory(directory, create=False) is not None:
            return None, True
    except Unavailable:
        return None, False
    data = _open_regular(path)
    if (data is None or len(data) <= _HEAD or data[:len(MAGIC)] != MAGIC
            or data[len(MAGIC):len(MAGIC) + 64] != key.encode()):
        return None, True
    obj = data[_HEAD:]
    if not compare_digest(data[len(MAGIC) + 64:_HEAD], _tag(key, obj)):
        return None, True          # corrupt, truncated, or not written by this user
    return obj, False


def write(root: str, key: str, obj: bytes, suffix: str = ".o") -> bool:
    """Store ``obj`` under ``key``; False if it could not be (read-only or full disk, an
    unsafe subdirectory): that only costs a recompile next time."""
    directory = os.path.join(root, key[:2])
    try:
        if _safe_directory(directory, create=True) is not None:
            return False
    except Unavailable:
        return False
    try:
        _write_new(directory, os.path.join(directory, key + suffix),
                   MAGIC + key.encode() + _tag(key, obj) + obj, replace=True)
    except OSError:
        return False
    return True


def pack(objs: list[bytes]) -> bytes:
    """One cache entry for a module's objects (a single object is stored as it is)."""
    if len(objs) == 1:
        return objs[0]
    head = PARTS_MAGIC + len(objs).to_bytes(4, "little") + b"".join(
        len(o).to_bytes(8, "little") for o in objs)
    return head + b"".join(objs)


def unpack(data: bytes) -> list[bytes]:
    if not data.startswith(PARTS_MAGIC):
        return [data]
    n = int.from_bytes(data[8:12], "little")
    sizes = [int.from_bytes(data[12 + 8 * k:20 + 8 * k], "little") for k in range(n)]
    objs, at = [], 12 + 8 * n
    for size in sizes:
        objs.append(data[at:at + size])
        at += size
    if at != len(data):
        raise ValueError("a cache entry of parts whose sizes do not add up")
    return objs
