"""The machine-code cache: disk hits across processes, corrupt and stale entries, two processes
compiling at once, SYMGRAD_NO_CACHE, and the version in the key. Each scenario runs in fresh
processes (the in-memory cache would otherwise answer)."""
import json
import os
import subprocess
import sys


import symgrad
from codegen import jit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository

PROGRAM = r'''
import json, sys
import numpy as np
import symgrad as sg
from codegen import llvm

def f(x, y):
    return np.sum(x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(x * y))

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


def run(cache_dir, extra_env=None, wait=True, prefix=""):
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(cache_dir), PYTHONPATH=ROOT)
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


def test_second_process_loads_from_disk(tmp_path):
    first = run(tmp_path)
    assert first["stats"]["compiles"] >= 1 and first["stats"]["disk_writes"] >= 1
    second = run(tmp_path)
    assert second["stats"]["compiles"] == 0 and second["stats"]["disk_hits"] >= 1
    assert second["sum"] == first["sum"]


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
    assert not [f for _, _, fs in os.walk(tmp_path) for f in fs if f.startswith(".tmp-")]
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
