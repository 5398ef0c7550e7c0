"""The CPU back end's run-time contract: size-generic machine code, threads, out=, inputs
never mutated, non-contiguous inputs, result types, errors before native code runs,
inspection (llvm_ir / asm), SIMD math in the optimised IR."""
import re
import threading

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import dispatch, jit, llvm as cpu
from symgrad.codegen.kernel import LIGHT_MAX_ITERATIONS
from symgrad.codegen.mathlib import OWN_F64


def softplus_sum(x):
    return np.mean(np.log1p(np.exp(x)) * x)


def w1(x, y):
    return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(x * y)


def _grad_at_sizes(g, sizes):
    for n in sizes:
        x = np.linspace(-2, 2, n)
        ref = sg.grad(softplus_sum, target="python")(x)
        np.testing.assert_allclose(g(x), ref, rtol=1e-14, atol=1e-16)


def test_new_size_reuses_machine_code():
    """Sizes share machine code (the mean's 1/n is a run-time parameter) within each of the
    two optimisation classes: stages of at most kernel.LIGHT_MAX_ITERATIONS iterations compile
    unoptimised, so the first size past that compiles once more, and never again. (Passed only
    with the machine code already on disk before: a fresh machine compiled at n = 1000.)"""
    from codegen import kernel
    small = kernel.LIGHT_MAX_ITERATIONS
    g = sg.grad(softplus_sum)
    g(np.linspace(-1, 1, small - 6))
    before = cpu.stats()["compiles"]
    _grad_at_sizes(g, (small - 5, small, 3))
    assert cpu.stats()["compiles"] == before
    _grad_at_sizes(g, (1000,))
    assert cpu.stats()["compiles"] <= before + 1
    large = cpu.stats()["compiles"]
    _grad_at_sizes(g, (small + 1, 5000, 77))
    assert cpu.stats()["compiles"] == large


def test_new_2d_shape_reuses_machine_code():
    def f(a, b):
        return np.sum(np.tanh(a @ b) * 2.0, axis=1)
    g = sg.grad(f, wrt=(0, 1))
    rng = np.random.default_rng(0)
    g(rng.normal(size=(30, 40)), rng.normal(size=(40, 50)))   # every stage past the light bound
    dispatch.functions()   # threaded calls' runtime: compiled once per process, not per shape
    before = cpu.stats()["compiles"]
    a, b = rng.normal(size=(70, 20)), rng.normal(size=(20, 90))
    for x, y in zip(g(a, b), sg.grad(f, wrt=(0, 1), target="python")(a, b)):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14)   # (BLAS sums in its order)
    assert cpu.stats()["compiles"] == before


def test_structure_change_compiles():
    g = sg.grad(softplus_sum)
    g(np.ones(4))
    before = cpu.stats()["compiles"] + cpu.stats()["disk_hits"]
    g(np.ones(4, np.float32))   # a new dtype is new machine code
    assert cpu.stats()["compiles"] + cpu.stats()["disk_hits"] > before


@pytest.mark.parametrize("threads", ["2", "3", "5"])
def test_threads_match_single_thread(monkeypatch, threads):
    """Elementwise results are bit for bit those of one thread, for any thread count (the
    split points fall where a vector iteration would: llvm.split_bounds)."""
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", threads)   # whatever this machine's core count
    rng = np.random.default_rng(1)
    x, y = rng.uniform(-2, 2, 200_001), rng.uniform(-2, 2, 200_001)
    f = sg.differentiate(lambda x, y: np.sum(w1(x, y)), wrt=(0, 1))
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 1 << 40)
    single = f.value_and_grad(x, y)
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 1000)
    f2 = sg.differentiate(lambda x, y: np.sum(w1(x, y)), wrt=(0, 1))
    multi = f2.value_and_grad(x, y)
    assert f2.value_and_grad._compiled([x, y]).prepared["cpu"].parallel
    np.testing.assert_allclose(multi[0], single[0], rtol=1e-12)
    for a, b in zip(multi[1], single[1]):
        np.testing.assert_array_equal(a, b)


def test_split_bounds():
    assert cpu.split_bounds(10, 3, vector_axis=False) == [0, 3, 6, 10]
    for extent, parts in ((200_001, 3), (1000, 7), (128 * 5 + 3, 4), (100, 4), (10**6, 16)):
        b = cpu.split_bounds(extent, parts, vector_axis=True)
        assert b[0] == 0 and b[-1] == extent and len(b) - 1 <= parts
        assert all(lo < hi for lo, hi in zip(b, b[1:]))
        assert all(v % cpu.SPLIT_ALIGN == 0 for v in b[:-1])


def test_parallel_reductions_over_the_split_axis(monkeypatch):
    monkeypatch.setattr(cpu, "PARALLEL_MIN", 64)
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", "3")   # split the work whatever the core count

    def f(x):
        return np.sum(np.max(x, axis=0) + np.min(x, axis=0)) + np.sum(np.prod(x * 0.0 + 1.0, axis=0)) \
            + np.sum(np.sum(x, axis=1))
    def gather(x):
        return np.sum(np.take(x, np.array([0, 2, 2, 299]), axis=0) ** 2)
    x = np.random.default_rng(2).normal(size=(300, 7))
    for fn in (f, gather):
        cpu_f = sg.differentiate(fn)
        py_f = sg.differentiate(fn, target="python")
        np.testing.assert_allclose(cpu_f(x), py_f(x), rtol=1e-12)
        np.testing.assert_allclose(cpu_f.grad(x), py_f.grad(x), rtol=1e-12)


def test_out_writes_into_preallocated_arrays():
    g = sg.grad(w1, wrt=(0, 1))
    x, y = np.linspace(0, 1, 50), np.linspace(1, 2, 50)
    ox, oy = np.empty(50), np.empty(50)
    res = g(x, y, out=(ox, oy))
    assert res[0] is ox and res[1] is oy
    ref = sg.grad(w1, wrt=(0, 1), target="python")(x, y)
    np.testing.assert_allclose(ox, ref[0], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(oy, ref[1], rtol=1e-13, atol=1e-15)
    xc = x.copy()
    g(x, y, out=(x, oy))            # out aliasing an input: computed first, then copied
    np.testing.assert_allclose(x, ref[0], rtol=1e-13, atol=1e-15)
    with pytest.raises(ValueError):
        g(xc, y, out=(np.empty(49), oy))
    with pytest.raises(ValueError):
        g(xc, y, out=(np.empty(50, np.float32), oy))
    with pytest.raises(ValueError):
        g(xc, y, out=ox)


def test_caller_arrays_are_never_mutated_or_returned():
    def f(x):
        y = x * 1.0
        y[0] = 5.0
        return y, x, x[1:]
    fc = sg.differentiate(f)
    x = np.arange(4.0)
    keep = x.copy()
    a, b, c = fc(x)
    np.testing.assert_array_equal(x, keep)
    assert not np.shares_memory(a, x) and not np.shares_memory(b, x) and not np.shares_memory(c, x)
    np.testing.assert_array_equal(b, x)
    np.testing.assert_array_equal(c, x[1:])


def test_non_contiguous_and_readonly_inputs():
    g = sg.grad(lambda x: np.sum(np.sin(x) * x))
    base = np.linspace(0, 3, 40).reshape(8, 5)
    view = base.T                        # Fortran order
    ref = sg.grad(lambda x: np.sum(np.sin(x) * x), target="python")(view)
    np.testing.assert_allclose(g(view), ref, rtol=1e-14)
    ro = np.linspace(0, 1, 9)
    ro.setflags(write=False)
    np.testing.assert_allclose(g(ro), np.sin(ro) + ro * np.cos(ro), rtol=1e-14)
    empty = np.zeros(0)
    assert g(empty).shape == (0,)


def test_result_types():
    f = sg.differentiate(lambda x, y: x * y + np.sin(x), wrt=(0, 1))
    v = f(1.5, 2.0)
    assert type(v) is float
    gx, gy = f.grad(1.5, 2.0)
    assert type(gx) is float and type(gy) is float
    v32 = f(np.float32(1.5), np.float32(2.0))
    assert isinstance(v32, np.float32)
    arr = f(np.ones(3), 2.0)
    assert isinstance(arr, np.ndarray) and arr.dtype == np.float64 and arr.flags.owndata
    assert isinstance(sg.differentiate(lambda x: np.sum(x))(np.ones(3, np.float32)), np.float32)


def test_bad_calls_raise_before_native_code():
    f = sg.differentiate(lambda x, y: np.sum(x * y))
    with pytest.raises(TypeError):
        f(np.ones(3))
    with pytest.raises(TypeError):
        f(np.ones(3), np.ones(3), np.ones(3))
    with pytest.raises(ValueError):
        f(np.ones(3), np.ones(4))
    with pytest.raises(TypeError):
        f({1.0, 2.0}, np.ones(2))   # a set (a list would be a pytree argument, DESIGN.md §2)
    with pytest.raises(TypeError):
        f(np.ones(3), "a")
    g = sg.differentiate(lambda x, idx: np.sum(np.take(x, idx)))
    with pytest.raises(IndexError):
        g(np.ones(3), np.array([0, 3]))
    with pytest.raises(IndexError):
        g(np.ones(3), np.array([-4]))
    assert g(np.ones(3), np.array([-3, 2])) == 2.0


def test_native_entry_rejects_mismatched_arrays_directly():
    g = sg.grad(lambda x: np.sum(x * x))
    x = np.ones(5)
    g(x)
    native = g._compiled([x]).prepared["cpu"]
    with pytest.raises(TypeError):
        native([np.ones(6)])
    with pytest.raises(TypeError):
        native([np.ones(5, np.float32)])
    with pytest.raises(TypeError):
        native([[1.0] * 5])


def test_concurrent_calls_from_threads():
    g = sg.grad(lambda x: np.sum(np.exp(x) * x))
    xs = [np.linspace(0, 1, 257) * k for k in range(8)]
    want = [np.exp(x) * (1 + x) for x in xs]
    got = [None] * 8
    errors = []

    def work(k):
        try:
            for _ in range(50):
                got[k] = g(xs[k])
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-14)


# above the size that compiles unoptimised (codegen.kernel.LIGHT_MAX_ITERATIONS), whose loops
# are not vectorised
N_WIDE = 2 * LIGHT_MAX_ITERATIONS + 7


def test_llvm_ir_asm_and_simd_math():
    g = sg.grad(w1, wrt=(0, 1))
    x = np.linspace(0, 1, N_WIDE)
    text = g.llvm_ir(x, x)
    assert "define void @\"sg_run\"" in text and "symgrad_sin" in text and "sg_exp_f64" in text
    assert "1000" not in text and f", {N_WIDE}" not in text.split("declare")[0]
    opt = g.llvm_ir(x, x, optimized=True)
    # The vector width is the host's (2 lanes with SSE, 4 with AVX2, 8 with AVX-512): never
    # assume one, only that the loop was widened.
    for fn in ("sin", "cos", "log1p", "tanh"):
        if fn in OWN_F64:       # our own, inlined; sin/cos call a far-argument check per vector
            far_check = re.search(rf"call <\d+ x double> @_ZGV\w+_symgrad_{fn}_far\w*\(<", opt)
            assert OWN_F64[fn][0] not in opt and (fn not in ("sin", "cos") or far_check), fn
        else:                   # libmvec vector calls: _ZGV<isa>N<lanes>v_<fn>
            assert re.search(rf"_ZGV[a-z]N\d+v_(symgrad_)?{fn}\(<\d+ x double>", opt), fn
    # float64 exp is our own branch-free code, inlined and widened with the rest of the loop
    assert "sg_exp_f64" not in opt and re.search(r"@llvm\.rint\.v\d+f64", opt)
    assert re.search(r"\bv?movup[sd]\b", g.asm(x, x))   # packed (vector) loads and stores


def test_float32_vectorises_too():
    """float32 exp and sin are our own, inlined and vectorised: in float32 arithmetic where
    the CPU has FMA (codegen/f32single.py, sin's far check a float call with SIMD versions),
    else float64 arithmetic on widened lanes (codegen/f32math.py); arctan the float64 libmvec
    function on widened lanes: all in vector code."""
    g = sg.grad(lambda x: np.sum(np.exp(x) * np.sin(x) + np.arctan(x) * x))
    opt = g.llvm_ir(np.ones(N_WIDE, np.float32), optimized=True)
    assert not re.search(r"sg_(exp|sin)_f32", opt) and "_expf" not in opt   # all inlined
    assert re.search(r"fpext <\d+ x float> .* to <\d+ x double>", opt)      # (arctan)
    if jit.target()["math"].fma:
        assert re.search(r"call <\d+ x float> @_ZGV\w+_symgrad_sinf_far\w*\(<", opt)
    else:
        assert re.search(r"call <\d+ x double> @_ZGV\w+_symgrad_sin_far\w*\(<", opt)
    assert re.search(r"_ZGV[a-z]N\d+v_(symgrad_)?atan\(<\d+ x double>", opt)


PRECISE = '''
import numpy as np
import symgrad as sg

def f(x):
    return np.sum(np.exp(x) * np.sin(x))

g = sg.grad(f)
x = np.linspace(-3, 3, 1001)
assert "_ZGV" not in g.llvm_ir(x, optimized=True)       # scalar libm calls only
np.testing.assert_allclose(g(x), np.exp(x) * (np.sin(x) + np.cos(x)), rtol=1e-15, atol=1e-15)
print("ok")
'''


def test_precise_math_mode_uses_scalar_libm(tmp_path):
    import os
    import subprocess
    import sys
    path = tmp_path / "precise.py"
    path.write_text(PRECISE)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, SYMGRAD_PRECISE_MATH="1", SYMGRAD_NO_CACHE="1", PYTHONPATH=root)
    proc = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
