"""A large module compiles as several parts on several threads (codegen.module_split,
codegen.jit.compile_objects): the split is a function of the text alone, every thread count
gives the same objects, keys and results, a broken part raises the whole module's error, a
small module never starts a thread, and a module of parts is one disk-cache entry."""
import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import diskcache, jit, module_split

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stages(x, w):
    """Several stages of real work: matmuls calling the matmul library and one with an epilogue
    kernel of its own, shifted slices whose gradients call the copy library."""
    h = np.tanh(x @ w)
    s = np.sum(np.exp(h) * h, axis=1)
    m = np.max(h, axis=0)
    z = (h - m[None, :]) @ w.T
    shifted = np.sum(x[1:] * x[:-1]) + np.sum(z[2:] * z[:-2])
    rows = np.sum(np.square(np.stack([x, 2.0 * x]) @ w - 1.0), axis=1)   # an epilogue kernel
    return (np.sum(np.log1p(z * z)) + np.sum(s * s) + np.sum(np.sin(x) * np.cos(z)) + shifted
            + np.sum(rows * rows))


def _args():
    rng = np.random.default_rng(3)
    return rng.normal(size=(37, 19)), rng.normal(size=(19, 19)) * 0.3


@pytest.fixture
def small_parts(monkeypatch):
    """Split modules of a test's size (the real bound keeps them whole)."""
    monkeypatch.setattr(module_split, "PART_COST", 1500)


def _gradient_text():
    x, w = _args()
    g = sg.differentiate(stages, wrt=(0, 1))
    g.grad(x, w)
    native = g.grad._inspect_entry(x, w).prepared["cpu"]
    return native.program.text


def _defined(text):
    return re.findall(r'^define [^@]*@"([^"]+)"', text, re.M)


def test_parts_define_every_function_once_and_helpers_in_one_part(small_parts):
    text = _gradient_text()
    parts = module_split.split(text)
    assert len(parts) > 1
    exported = [n for n in _defined(text) if not re.search(
        rf'^define internal [^@]*@"{re.escape(n)}"', text, re.M)]
    found = [n for p in parts for n in _defined(p) if n in exported]
    assert sorted(found) == sorted(exported)            # each exported function exactly once
    helpers = [n for n in _defined(text) if re.search(
        rf'^define internal [^@]*@"{re.escape(n)}"[^\n]*\bnoinline\b', text, re.M)]
    assert helpers
    for h in helpers:                                    # compiled once, all its callers beside it
        assert sum(h in _defined(p) for p in parts) == 1
    libraries = set(re.findall(r'^declare [^@]*@"(symgrad_(?:mm|copy)_\w+)"', text, re.M))
    assert {"copy", "mm"} <= {name.split("_")[1] for name in libraries}
    for p in parts:                                      # a part calling a library declares it
        for name in libraries:
            if f'call void @"{name}"' in p:
                assert re.search(rf'^declare [^@]*@"{name}"', p, re.M)
    assert module_split.split(text) == parts             # a function of the text alone


def test_every_thread_count_gives_the_same_objects_keys_and_results(small_parts, monkeypatch):
    text = _gradient_text()
    objects = {}
    for threads in (1, 2, 3):
        monkeypatch.setattr(jit, "COMPILE_THREADS", threads)
        objects[threads] = jit.compile_objects(text)
    assert len(objects[1]) > 1
    assert objects[1] == objects[2] == objects[3]
    x, w = _args()
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(jit, "COMPILE_THREADS", threads)
        g = sg.differentiate(stages, wrt=(0, 1))
        results.append((g.grad(x, w), g.grad._inspect_entry(x, w).prepared["cpu"].key))
    (a, key_a), (b, key_b) = results
    assert key_a == key_b
    for u, v in zip(a, b):
        assert np.array_equal(u, v)
    ref = sg.differentiate(stages, wrt=(0, 1), target="python").grad(x, w)
    for u, v in zip(a, ref):
        np.testing.assert_allclose(u, v, rtol=1e-12, atol=1e-12)


def test_split_module_computes_what_the_whole_module_computes(monkeypatch):
    x, w = _args()
    whole = sg.differentiate(stages, wrt=(0, 1)).grad(x, w)
    monkeypatch.setattr(module_split, "PART_COST", 1500)
    monkeypatch.setattr(jit, "COMPILE_THREADS", 2)
    text = _gradient_text()
    assert len(module_split.split(text)) > 1
    # a fresh compile of the split module (the in-memory cache holds the whole one's code)
    st = jit.target()
    monkeypatch.setitem(st, "kernels", {})
    split = sg.differentiate(stages, wrt=(0, 1)).grad(x, w)
    for u, v in zip(whole, split):
        assert np.array_equal(u, v)


def test_a_broken_part_raises_the_whole_modules_error(small_parts, monkeypatch):
    text = _gradient_text()
    # break one exported function's body: an instruction naming an undefined value
    name = [n for n in _defined(text) if n.startswith("sg_stage") and ".body" not in n][-1]
    head = re.search(rf'^define [^@]*@"{re.escape(name)}".*\n\{{\n', text, re.M)
    ret = text.index("  ret void", head.end())
    broken = text[:ret] + '  %"bad" = fadd double %"nowhere", 1.0\n' + text[ret:]
    assert len(module_split.split(broken)) > 1
    with pytest.raises(RuntimeError) as whole:
        jit._optimize(broken, jit._init()["tm"])
    for threads in (1, 2):
        monkeypatch.setattr(jit, "COMPILE_THREADS", threads)
        with pytest.raises(RuntimeError) as parts:
            jit.compile_objects(broken)
        assert str(parts.value) == str(whole.value)
        assert "nowhere" in str(parts.value)


def test_a_small_module_starts_no_thread(monkeypatch):
    x, w = _args()

    def f(x):
        return np.sum(np.sin(x) * x)

    g = sg.differentiate(f)
    g.grad(x[0])
    text = g.grad._inspect_entry(x[0]).prepared["cpu"].program.text
    assert module_split.split(text) == [text]

    def no_threads(*args, **kwargs):
        raise AssertionError("a thread was started for a module of one part")

    monkeypatch.setattr(threading, "Thread", no_threads)
    monkeypatch.setattr(jit, "COMPILE_THREADS", 4)
    assert len(jit.compile_objects(text)) == 1


def test_one_thread_starts_no_thread_for_parts(small_parts, monkeypatch):
    text = _gradient_text()

    def no_threads(*args, **kwargs):
        raise AssertionError("a thread was started with COMPILE_THREADS = 1")

    monkeypatch.setattr(threading, "Thread", no_threads)
    monkeypatch.setattr(jit, "COMPILE_THREADS", 1)
    assert len(jit.compile_objects(text)) > 1


def test_pack_round_trip():
    objs = [b"\x7fELF one", b"", b"\x7fELF three" * 100]
    assert jit.unpack(jit.pack(objs)) == objs
    assert jit.pack([b"\x7fELF"]) == b"\x7fELF"        # one object: stored as it is
    assert jit.unpack(b"\x7fELF") == [b"\x7fELF"]
    with pytest.raises(ValueError):
        jit.unpack(jit.pack(objs)[:-1])


def test_private_scope_is_per_thread():
    seen = []
    with jit._private.calls():
        assert jit._private.mine.private
        t = threading.Thread(target=lambda: seen.append(getattr(jit._private.mine, "private",
                                                                False)))
        t.start()
        t.join()
    assert seen == [False]
    assert not jit._private.mine.private


PROGRAM = r'''
import json, sys
import numpy as np
import symgrad as sg
from symgrad.codegen import jit, llvm, module_split
module_split.PART_COST = 1500
jit.COMPILE_THREADS = int(sys.argv[1])
sys.path.insert(0, {tests!r})
from test_parallel_compile import stages, _args
x, w = _args()
gx, gw = sg.differentiate(stages, wrt=(0, 1)).grad(x, w)
print(json.dumps({{"stats": llvm.stats(), "x": gx.tolist(), "w": gw.tolist()}}))
'''


def _run(tmp_path, threads):
    env = dict(os.environ, SYMGRAD_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=ROOT,
               XDG_CONFIG_HOME=str(tmp_path / "config"))
    env.pop("SYMGRAD_NO_CACHE", None)
    out = subprocess.run([sys.executable, "-c", PROGRAM.format(tests=os.path.join(ROOT, "tests")),
                          str(threads)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_module_of_parts_is_one_disk_entry(tmp_path):
    first = _run(tmp_path, 2)
    compiled = first["stats"]["compiles"]     # the gradient and the libraries it calls
    assert compiled >= 1 and first["stats"]["disk_writes"] == compiled
    entries = [os.path.join(d, f) for d, _, files in os.walk(tmp_path / "cache") for f in files
               if f.endswith(".o")]    # (not the .host entry: codegen.host_cpu)
    # one entry per compiled text, however many parts it compiled as (at this PART_COST the
    # far maths' check libraries split too, so the gradient is not the only text of parts)
    assert len(entries) == compiled
    assert any(open(e, "rb").read()[diskcache._HEAD:].startswith(jit.PARTS_MAGIC)
               for e in entries)
    again = _run(tmp_path, 1)        # another thread count reads the same entries
    assert again["stats"]["compiles"] == 0 and again["stats"]["disk_hits"] == compiled
    assert again["x"] == first["x"] and again["w"] == first["w"]
