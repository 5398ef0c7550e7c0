"""The machine-code cache: disk hits across processes, corrupt and stale entries, two processes
compiling at once, SYMGRAD_NO_CACHE, the version in the key, and what must never be loaded
(entries this user's secret did not sign, FIFOs, symlinks, directories others can write) or
left behind (temporary files after a failed write). Each scenario runs in fresh processes (the
in-memory cache would otherwise answer), with its own secret (XDG_CONFIG_HOME)."""
import hashlib
import hmac
import json
import os
import stat
import subprocess
import sys


import symgrad
from symgrad.codegen import jit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository

PROGRAM = r'''
import json, sys
import numpy as np
import symgrad as sg
from symgrad.codegen import llvm

def f(x, y):   # (the matmul links the kernel library: an entry of its own)
    products = np.sum(np.outer(x, y) @ np.outer(y, x)) * 1e-3
    return np.sum(x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(x * y)) + products

g = sg.grad(f, wrt=(0, 1))
x, y = np.linspace(-1, 1, 101), np.linspace(0, 2, 101)
gx, gy = g(x, y)
print(json.dumps({"stats": llvm.stats(), "sum": float(gx.sum() + gy.sum())}))
'''


def script(cache_dir, prefix=""):
    """The program as a file (symgrad reads a function's source) next to the cache."""
    path = os.path.join(str(cache_dir), f"prog{abs(hash(prefix))}.py")
    with open(path, "w") as f:
        f.write(prefix + PROGRAM)
    return path


def config_dir(cache_dir):
    """Where the test's processes keep their secret: beside the cache, not in it."""
    return os.path.join(os.path.dirname(str(cache_dir)), os.path.basename(str(cache_dir)) + "-config")


def run(cache_dir, extra_env=None, wait=True, prefix=""):
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT,
               XDG_CONFIG_HOME=config_dir(cache_dir))
    env.pop("SYMGRAD_NO_CACHE", None)
    env.update(extra_env or {})
    proc = subprocess.Popen([sys.executable, script(cache_dir, prefix)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc if not wait else finish(proc)


def finish(proc):
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def cache_files(d):
    return sorted(os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs if f.endswith(".o"))


def temp_files(d):
    return [f for _, _, fs in os.walk(d) for f in fs if f.startswith(".tmp-")]


def test_second_process_loads_from_disk(tmp_path):
    first = run(tmp_path)
    assert first["stats"]["compiles"] >= 1 and first["stats"]["disk_writes"] >= 1
    second = run(tmp_path)
    assert second["stats"]["compiles"] == 0 and second["stats"]["disk_hits"] >= 1
    assert second["sum"] == first["sum"]


def test_a_library_entry_lost_is_compiled_alone(tmp_path):
    """The module on disk links a library whose entry is gone (deleted, or never written by
    another version): the library is compiled on its own, the module still comes from disk."""
    first = run(tmp_path)
    before = set(cache_files(tmp_path))
    for path in before:          # each entry in turn: the library's among them
        with open(path, "rb") as f:
            saved = f.read()
        os.unlink(path)
        again = run(tmp_path)
        assert again["sum"] == first["sum"]
        assert again["stats"]["compiles"] == 1 and again["stats"]["disk_hits"] >= 1
        assert os.path.exists(path)          # written again
        with open(path, "rb") as f:
            assert f.read() == saved         # the same machine code


def test_corrupt_and_truncated_entries_recompile(tmp_path):
    reference = run(tmp_path)
    files = cache_files(tmp_path)
    assert files
    for k, path in enumerate(files):
        with open(path, "r+b") as f:
            if k % 2:
                f.truncate(40)                 # truncated header
            else:
                f.seek(-16, os.SEEK_END)       # flipped bytes in the object code
                f.write(b"\xff" * 16)
    again = run(tmp_path)
    assert again["stats"]["disk_rejects"] >= 1 and again["stats"]["compiles"] >= 1
    assert again["sum"] == reference["sum"]
    healed = run(tmp_path)                     # the recompiled entry replaced the bad one
    assert healed["stats"]["compiles"] == 0


def test_garbage_file_under_the_right_name(tmp_path):
    reference = run(tmp_path)
    for path in cache_files(tmp_path):
        with open(path, "wb") as f:
            f.write(b"not an object file at all")
    again = run(tmp_path)
    assert again["sum"] == reference["sum"] and again["stats"]["disk_rejects"] >= 1


def test_two_processes_compiling_at_once(tmp_path):
    procs = [run(tmp_path, wait=False) for _ in range(3)]
    results = [finish(p) for p in procs]
    assert len({r["sum"] for r in results}) == 1
    assert not temp_files(tmp_path)
    later = run(tmp_path)
    assert later["stats"]["compiles"] == 0 and later["sum"] == results[0]["sum"]


def test_no_cache_env_disables_disk(tmp_path):
    res = run(tmp_path, {"SYMGRAD_NO_CACHE": "1"})
    assert res["stats"]["disk_writes"] == 0 and not cache_files(tmp_path)


def test_version_is_part_of_the_key(monkeypatch):
    text = "define void @sg_run() {\nret void\n}\n"
    key = jit.key_of(text)
    monkeypatch.setattr(symgrad, "__version__", symgrad.__version__ + ".post1")
    assert jit.key_of(text) != key


def test_stale_version_entries_are_ignored(tmp_path):
    first = run(tmp_path)
    res = run(tmp_path, prefix="import symgrad; symgrad.__version__ = '999.0'\n")
    assert res["stats"]["compiles"] >= 1 and res["stats"]["disk_hits"] == 0
    assert res["sum"] == first["sum"]


def test_cache_dir_default_and_env(monkeypatch, tmp_path):
    monkeypatch.delenv("SYMGRAD_CACHE_DIR", raising=False)
    monkeypatch.delenv("SYMGRAD_NO_CACHE", raising=False)
    assert jit.cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "symgrad")
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path))
    assert jit.cache_dir() == str(tmp_path)
    monkeypatch.setenv("SYMGRAD_NO_CACHE", "1")
    assert jit.cache_dir() is None


def forge(path, obj, tag):
    key = os.path.basename(path)[:-2].encode()
    with open(path, "wb") as f:
        f.write(jit.diskcache.MAGIC + key + tag + obj)


def test_forged_entries_are_recompiled_not_loaded(tmp_path):
    """Garbage behind a matching plain sha256 (what anyone can compute) segfaulted the process
    when it was loaded; so would an HMAC under any key but this user's secret."""
    reference = run(tmp_path)
    files = cache_files(tmp_path)
    garbage = b"\x7fELF" + b"\xcc" * 4096
    for k, path in enumerate(files):
        if k % 2 == 0:
            tag = hashlib.sha256(garbage).hexdigest().encode()
        else:
            key = os.path.basename(path)[:-2].encode()
            tag = hmac.new(b"not the secret" * 3, key + b"\0" + garbage, hashlib.sha256)
            tag = tag.hexdigest().encode()
        forge(path, garbage, tag)
    again = run(tmp_path)
    assert again["stats"]["disk_rejects"] >= len(files) and again["stats"]["disk_hits"] == 0
    assert again["stats"]["compiles"] >= 1 and again["sum"] == reference["sum"]
    assert run(tmp_path)["stats"]["compiles"] == 0      # rewritten, signed, trusted


def test_secret_is_private_and_outside_the_cache(tmp_path):
    run(tmp_path)
    path = os.path.join(config_dir(tmp_path), "symgrad", "cache-key")
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 32
    assert not [f for _, _, fs in os.walk(tmp_path) for f in fs if "key" in f]
    os.chmod(path, 0o644)              # readable by others: useless as a secret
    res = run(tmp_path)
    assert res["stats"]["disk_hits"] == 0 and res["stats"]["disk_writes"] == 0


def test_fifo_in_place_of_an_entry_does_not_hang(tmp_path):
    reference = run(tmp_path)
    files = cache_files(tmp_path)
    for path in files:
        os.unlink(path)
        os.mkfifo(path)
    again = run(tmp_path)            # (finish() has a deadline: a blocked open fails the test)
    assert again["stats"]["disk_rejects"] >= 1 and again["sum"] == reference["sum"]
    assert all(stat.S_ISREG(os.stat(p).st_mode) for p in files)   # replaced by real entries


def test_symlinked_and_foreign_writable_entries_are_not_loaded(tmp_path):
    reference = run(tmp_path)
    files = cache_files(tmp_path)
    for k, path in enumerate(files):
        if k % 2 == 0:               # a symlink to a perfectly good entry: still refused
            os.rename(path, path + ".real")
            os.symlink(os.path.basename(path) + ".real", path)
        else:
            os.chmod(path, 0o666)
    again = run(tmp_path)
    assert again["stats"]["disk_hits"] == 0 and again["stats"]["disk_rejects"] >= 1
    assert again["sum"] == reference["sum"]


def test_directory_writable_by_others_is_refused(tmp_path):
    cache = tmp_path / "shared"
    cache.mkdir()
    os.chmod(cache, 0o777)
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(cache), PYTHONPATH=ROOT,
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = subprocess.run([sys.executable, script(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["stats"]["disk_writes"] == 0 and res["stats"]["compiles"] >= 1
    assert not cache_files(cache) and "not using the machine-code cache" in proc.stderr
    (tmp_path / "private").mkdir()
    assert res["sum"] == run(tmp_path / "private")["sum"]


FULL_DISK = """import resource, signal
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # a failed write is an error, not a kill
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))   # files cannot grow past 2 KB
"""


def test_failed_writes_leave_no_temporary_files(tmp_path):
    (tmp_path / "roomy").mkdir()
    (tmp_path / "full").mkdir()
    reference = run(tmp_path / "roomy")
    res = run(tmp_path / "full", prefix=FULL_DISK)
    assert res["stats"]["disk_writes"] == 0 and res["stats"]["compiles"] >= 1
    assert res["sum"] == reference["sum"]
    assert not temp_files(tmp_path / "full") and not cache_files(tmp_path / "full")


def test_unavailable_directory_quietly_means_no_disk_cache(tmp_path):
    """A cache directory that cannot be made (here: below a regular file; a read-only disk
    behaves the same) only costs recompiles: no warning, no error."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(blocker / "cache"), PYTHONPATH=ROOT,
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    proc = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", script(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["stats"]["disk_writes"] == 0 and res["stats"]["compiles"] >= 1
