"""Run plans on disk (codegen.plans, codegen.program_key): a
fresh process with its machine code on disk builds no schedule and no LLVM IR, imports
neither llvmlite.ir nor the emitters, and gets the right values; and a plan is never found
for anything that changes the code: another program, constant, dtype, shape, option, host,
code generator setting or source file."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import diskcache, jit, plans, program_key, tiling
from symgrad.ir import Graph, Node

CHILD = r"""
import json, sys
import numpy as np
import symgrad as sg
from symgrad.codegen import jit

SCALE = float(sys.argv[2])


def f(x, y):
    return np.sum(x * np.sin(y) * SCALE + np.exp(-x * x) * np.log1p(y * y) + np.tanh(x * y))


def g(x, y):
    return np.sum(x * np.cos(y) * SCALE + np.exp(-x * x) * np.log1p(y * y) + np.tanh(x * y))


fn = {"f": f, "g": g}[sys.argv[1]]
dtype, n = sys.argv[3], int(sys.argv[4])
x = np.linspace(-1.0, 1.0, n).astype(dtype)
y = np.linspace(0.5, 2.0, n).astype(dtype)
got = sg.grad(fn, wrt=(0, 1))(x, y)
modules = sorted(sys.modules)
want = sg.grad(fn, wrt=(0, 1), target="python")(x, y)
print(json.dumps({"stats": jit.STATS, "modules": modules, "dtype": str(got[0].dtype),
                  "error": max(float(np.max(np.abs(a - b) / (1 + np.abs(b))))
                               for a, b in zip(got, want))}))
"""

# what building IR needs and a run plan's disk hit does not
IR_MODULES = ("llvmlite.ir", "llvmlite.binding", "symgrad.codegen.kernel",
              "symgrad.codegen.schedule", "symgrad.codegen.f64math", "symgrad.codegen.f32math",
              "symgrad.codegen.loop_body", "symgrad.codegen.module_split")


_script: list = []


def child(cache, which="f", scale="1.5", dtype="float64", n="1000", **env):
    """Run CHILD (from a file: symgrad reads the functions' source) in a fresh process."""
    if not _script:
        path = os.path.join(os.path.dirname(str(cache)), "plan_child.py")
        with open(path, "w") as f:
            f.write(CHILD)
        _script.append(path)
    environ = dict(os.environ, SYMGRAD_CACHE_DIR=str(cache), **env)
    environ.pop("SYMGRAD_NO_CACHE", None)
    run = subprocess.run([sys.executable, _script[0], which, scale, dtype, n], env=environ,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    assert out["error"] < tolerance and out["dtype"] == dtype
    return out


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A cache directory holding the machine code and run plan of ``child()``'s program."""
    cache = tmp_path_factory.mktemp("plans")
    first = child(cache)
    assert first["stats"]["plan_writes"] == 1 and first["stats"]["plan_hits"] == 0
    return cache


def test_a_fresh_process_with_its_plan_on_disk_builds_no_ir(warm):
    out = child(warm)
    assert out["stats"]["plan_hits"] == 1 and out["stats"]["compiles"] == 0
    assert out["stats"]["disk_hits"] >= 1 and out["stats"]["plan_writes"] == 0
    assert not [m for m in IR_MODULES if m in out["modules"]]


@pytest.mark.parametrize("change", [
    {"which": "g"},                         # another program (cos for sin)
    {"scale": "2.5"},                       # another constant: the same IR text, other params
    {"dtype": "float32"},
    {"n": "999"},                           # another size: the machine code is shared
    {"n": "1"},                             # another shape class
    {"SYMGRAD_PRECISE_MATH": "1"},          # an option that changes the code
])
def test_every_key_ingredient_changed_misses_the_plan(warm, tmp_path, change):
    # a copy of the warm directory per case, so that the cases do not see each other's plans
    cache = tmp_path / "cache"
    _copy_tree(warm, cache)
    out = child(cache, **change)
    assert out["stats"]["plan_hits"] == 0 and out["stats"]["plan_writes"] == 1
    again = child(cache, **change)
    assert again["stats"]["plan_hits"] == 1 and again["stats"]["compiles"] == 0
    if "n" in change and change["n"] == "999" or "scale" in change:
        assert out["stats"]["compiles"] == 0     # the kernel's machine code served both


def test_the_thread_count_is_not_in_a_plan_and_both_run_right(warm):
    """A plan holds no thread count (the machine code and the plan do not depend on it: each
    Native reads SYMGRAD_NUM_THREADS when made), so one plan serves both, with right values."""
    for threads in ("1", "2"):
        out = child(warm, n="200000", SYMGRAD_NUM_THREADS=threads)
        assert out["error"] < 1e-12


def test_a_plan_whose_machine_code_is_gone_takes_the_ir_path(tmp_path):
    cache = tmp_path / "cache"
    child(cache)
    for dirpath, _, files in os.walk(cache):
        for name in files:
            if name.endswith(".o"):
                os.unlink(os.path.join(dirpath, name))
    out = child(cache)
    assert out["stats"]["plan_hits"] == 0 and out["stats"]["compiles"] >= 1


def test_a_tampered_plan_is_rejected(tmp_path):
    cache = tmp_path / "cache"
    child(cache)
    plans = [os.path.join(d, n) for d, _, files in os.walk(cache) for n in files
             if n.endswith(".plan")]
    assert len(plans) == 1
    with open(plans[0], "r+b") as f:
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    out = child(cache)
    assert out["stats"]["plan_hits"] == 0 and out["stats"]["disk_rejects"] >= 1


def _copy_tree(src, dst):
    os.makedirs(dst, mode=0o700)
    for dirpath, dirnames, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        for d in dirnames:
            os.makedirs(os.path.join(dst, rel, d), mode=0o700)
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                data = f.read()
            path = os.path.join(dst, rel, name)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)


# -- in this process ------------------------------------------------------------------------------

def _graph(fn, *args):
    return sg.differentiate(fn)._graph(list(args))


def _w(x):
    return np.sum(np.exp(x) * 2.5)


def test_the_host_and_the_code_are_in_the_key(monkeypatch):
    graph = _graph(_w, np.ones(4))
    key = plans.plan_key(graph)
    assert key is not None and key == plans.plan_key(graph)
    st = jit.target()
    monkeypatch.setitem(st, "features", st["features"] + ",+symgrad-test")
    assert plans.plan_key(graph) != key
    monkeypatch.setitem(st, "features", st["features"].rsplit(",", 1)[0])
    assert plans.plan_key(graph) == key
    monkeypatch.setitem(st, "cpu", st["cpu"] + "-other")
    assert plans.plan_key(graph) != key
    monkeypatch.undo()
    # a source file edited (its size or time): another fingerprint
    monkeypatch.setattr(program_key, "_fingerprint", [program_key.code_fingerprint() + "x"])
    assert plans.plan_key(graph) != key
    monkeypatch.undo()
    assert plans.plan_key(graph, "guard_flags=1") != key


def test_the_fingerprint_lists_every_module():
    import symgrad
    fingerprint = program_key.code_fingerprint()
    for package in (os.path.dirname(symgrad.__file__), os.path.dirname(jit.__file__)):
        for name in os.listdir(package):
            if name.endswith(".py"):
                assert f"\n{name}:{os.path.getsize(os.path.join(package, name))}:" in \
                    "\n" + fingerprint


def test_constants_are_keyed_by_their_bits():
    def digest(value):
        h = diskcache.hasher()
        graph = _graph(lambda x: np.sum(x * value), np.ones(3))
        assert program_key.graph_digest(graph, h)
        return h.hexdigest()

    assert digest(2.5) == digest(2.5)
    assert len({digest(2.5), digest(-2.5), digest(2.5000000000000004), digest(0.1)}) == 4
    weights = np.arange(3.0)
    a = digest(weights)
    weights2 = weights.copy()
    weights2[1] = -0.0 if weights2[1] == 0 else weights2[1] + 1
    assert digest(weights2) != a


def test_an_attribute_it_cannot_encode_makes_no_key():
    class Opaque:
        pass

    node = object.__new__(Node)      # (as ir.make builds one; no op takes such an attribute)
    for name, value in (("op", "const"), ("inputs", ()), ("dtype", "float64"), ("shape", ()),
                        ("attrs", (Opaque(),))):
        object.__setattr__(node, name, value)
    assert not program_key.graph_digest(Graph("opaque", (), (), (node,)), diskcache.hasher())
    assert program_key.graph_digest(_graph(_w, np.ones(4)), diskcache.hasher())


def test_a_patched_setting_neither_reads_nor_writes_plans(monkeypatch):
    recorded = program_key.knobs()
    assert program_key.knobs_match(recorded) and program_key.knobs_at_defaults()
    monkeypatch.setattr(tiling, "CHUNK_BYTES", 64)
    assert not program_key.knobs_match(recorded)
    assert not program_key.knobs_at_defaults()
    monkeypatch.undo()
    assert program_key.knobs_match(recorded) and program_key.knobs_at_defaults()
    from symgrad.codegen import mathlib
    saved = set(mathlib.F32_VIA_F64)
    try:
        mathlib.F32_VIA_F64.discard("exp")        # a computed table changed in place
        assert not program_key.knobs_match(recorded)
    finally:
        mathlib.F32_VIA_F64.update(saved)
    assert program_key.knobs_match(recorded)


def test_a_patched_setting_recompiles_in_process(monkeypatch, tmp_path):
    """With the plan of a signature on disk, a process that patched a code generator
    setting builds the IR again (and writes no plan)."""
    monkeypatch.setenv("SYMGRAD_CACHE_DIR", str(tmp_path / "cache"))
    x = np.linspace(0.0, 1.0, 64)
    fn = sg.differentiate(_w)
    fn.grad(x)                                 # plan written
    key = plans.plan_key(fn.grad._graph([x]), "guard_flags=0")
    assert plans.find(key) is not None
    monkeypatch.setattr(tiling, "CHUNK_BYTES", 1 << 12)
    writes, compiles = jit.STATS["plan_writes"], jit.STATS["compiles"]
    assert plans.find(key) is None
    again = sg.differentiate(_w)
    np.testing.assert_allclose(again.grad(x), np.exp(x) * 2.5)
    assert jit.STATS["plan_writes"] == writes and again.grad._graph([x]) is not None
