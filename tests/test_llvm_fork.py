"""Forked children (multiprocessing's "fork" context: Dask's and joblib's process pools) can
call compiled functions after the parent has started its worker threads, or while another of
its threads held one of the back end's locks. Each scenario runs in a fresh process with a
deadline, so a hang fails the test instead of stalling the suite."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="no fork on Windows")

PRELUDE = """
import multiprocessing as mp
import threading
import time

import numpy as np
import symgrad as sg
from symgrad import api
from symgrad.codegen import jit
from symgrad.codegen import llvm as cpu


def f(x):
    return np.sum(np.sin(x) * x)


g = sg.grad(f)
x = np.linspace(0.0, 1.0, 50_000)


def work(k):
    return float(np.sum(g(x + k)))


def fresh(k):
    # a function the parent never compiled: the child traces, schedules and compiles it
    h = sg.grad(lambda x: np.sum(np.cos(x) * x * x))
    return float(np.sum(h(x + k)))


def new_shape(k):
    # g traces a new signature (a 2-d argument) in the child: its lock must be free there
    return float(np.sum(g(np.reshape(x[:50_000], (250, 200)) + k)))


def reference(k):
    return float(np.sum(np.sin(x + k) + (x + k) * np.cos(x + k)))
"""

POOL_STARTED = PRELUDE + """
work(0.0)
assert g._compiled([x]).prepared["cpu"].parallel          # the worker threads ran in the parent
with mp.get_context("fork").Pool(2) as pool:
    got = pool.map(work, [1.0, 2.0, 3.0])
np.testing.assert_allclose(got, [reference(k) for k in (1.0, 2.0, 3.0)], rtol=1e-12)
print("ok")
"""

LOCKS_HELD = PRELUDE + """
work(0.0)
native = g._compiled([x]).prepared["cpu"]
held, release = threading.Event(), threading.Event()


def hold():
    # another thread in the middle of a call, of tracing a new signature and of building a
    # kernel at the moment of the fork
    with native.lock, g._lock, api._prepare_lock, cpu._pool_lock:
        held.set()
        release.wait()


t = threading.Thread(target=hold)
t.start()
held.wait()
ctx = mp.get_context("fork")
with ctx.Pool(1) as pool:
    got = pool.map(work, [1.0]) + pool.map(fresh, [0.5]) + pool.map(new_shape, [2.0])
release.set()
t.join()
np.testing.assert_allclose(got[0], reference(1.0), rtol=1e-12)
np.testing.assert_allclose(got[1], fresh(0.5), rtol=1e-12)
np.testing.assert_allclose(got[2], new_shape(2.0), rtol=1e-12)
print("ok")
"""

COMPILING = PRELUDE + """
# a thread holds the compiler lock (as a compile does) when the main thread forks: the fork
# waits for it, and the child can compile
work(0.0)
held = threading.Event()


def compile_for_a_while():
    with jit._lock:
        held.set()
        time.sleep(0.3)


t = threading.Thread(target=compile_for_a_while)
t.start()
held.wait()
with mp.get_context("fork").Pool(1) as pool:
    got = pool.map(fresh, [0.25])
t.join()
np.testing.assert_allclose(got[0], fresh(0.25), rtol=1e-12)
print("ok")
"""


@pytest.mark.parametrize("script", [POOL_STARTED, LOCKS_HELD, COMPILING],
                         ids=["pool-started", "locks-held", "compiling"])
def test_forked_children_do_not_hang(tmp_path, script):
    path = tmp_path / "child.py"
    path.write_text(script)
    # parallel even on a one-core machine, and for this modest size
    env = dict(os.environ, PYTHONPATH=ROOT, SYMGRAD_NUM_THREADS="2",
               SYMGRAD_PARALLEL_MIN="1000", SYMGRAD_CACHE_DIR=str(tmp_path / "cache"))
    try:
        proc = subprocess.run([sys.executable, str(path)], env=env, capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("a forked child hung")
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]
