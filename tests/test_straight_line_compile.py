"""Straight-line code compiles in time linear in its statements (issue 13): a long program is
split into stages of at most STAGE_OPS ops, each its own function; a program whose stages are
all small (scalar code) is a module of optnone functions only, which jit compiles with the -O0
code generator (jit.is_light); the cyclic garbage collector pauses while a signature compiles
(symgrad.gc_pause). None of this may change a result."""
import gc
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad import gc_pause
from symgrad.codegen import jit, schedule, wide_stage

STATEMENTS = 120


def _source(n: int) -> str:
    """n statements, each reading the previous value and a pseudo-random earlier one (the
    benchmark's shape: benchmarks/compile_profile.straight_line_source)."""
    lines = ["import numpy as np", "", "", "def line(x):", "    v0 = x"]
    state = 12345
    for i in range(1, n + 1):
        state = (state * 1103515245 + 12345) % 2 ** 31
        j = state % i
        op = ("np.sin({a}) * 0.9 + {b} * 0.1", "{a} * {b} * 0.5 + 0.25",
              "np.tanh({a}) - {b} * 0.3", "{a} + np.exp(-{b} * {b}) * 0.2")[i % 4]
        lines.append(f"    v{i} = " + op.format(a=f"v{i - 1}", b=f"v{j}"))
    lines.append(f"    return np.sum(v{n})")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def line(tmp_path_factory):
    path = tmp_path_factory.mktemp("straight") / "straight_line.py"
    path.write_text(_source(STATEMENTS))
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)   # symgrad reads the file
    return namespace["line"]


def _defines(ir_text: str) -> list[str]:
    return [ln for ln in ir_text.splitlines() if ln.startswith("define")]


def _inputs(dtype, shape):
    rng = np.random.default_rng(3)
    if shape == ():
        return dtype(0.3)
    return rng.uniform(-1.0, 1.0, shape).astype(dtype)


def _value_and_grad(fn, x, **kwargs):
    f = sg.differentiate(fn, **kwargs)
    return f(x), f.grad(x), f


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(), (37,)], ids=["scalar", "vector"])
def test_split_and_unsplit_kernels_agree(line, monkeypatch, dtype, shape):
    """Stages of 16 ops (many functions, values handed over in memory) against one stage
    (every value in registers): the same arithmetic in the same order. Scalar code is
    unvectorised, so bitwise equal. Vector loops may be widened by a different width in each
    stage, and a SIMD math function may differ from its scalar or other-width self in the
    last ulp, so they agree to 1 ulp per value (an ulp at one statement scaled by the chain's
    derivative: checked against the relative spacing of the dtype instead)."""
    x = _inputs(dtype, shape)
    monkeypatch.setattr(schedule, "STAGE_OPS", 16)
    monkeypatch.setattr(wide_stage, "WIDE_STAGE_OPS", 16)   # (wide stages may grow past STAGE_OPS)
    split_v, split_g, split = _value_and_grad(line, x)
    split_functions = len(_defines(split.grad.llvm_ir(x)))   # (the IR is built when asked)
    monkeypatch.setattr(schedule, "STAGE_OPS", 10 ** 6)
    monkeypatch.setattr(wide_stage, "WIDE_STAGE_OPS", 10 ** 6)
    whole_v, whole_g, whole = _value_and_grad(line, x)
    assert split_functions > 4 * len(_defines(whole.grad.llvm_ir(x)))
    ref_v, ref_g, _ = _value_and_grad(line, x, target="python")
    if shape == ():
        assert np.asarray(split_v).tobytes() == np.asarray(whole_v).tobytes()
        assert np.asarray(split_g).tobytes() == np.asarray(whole_g).tobytes()
    else:
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(split_v, whole_v, rtol=64 * eps)
        np.testing.assert_allclose(split_g, whole_g, rtol=64 * eps, atol=64 * eps)
    rtol = 1e-11 if dtype == np.float64 else 2e-4
    np.testing.assert_allclose(split_v, ref_v, rtol=rtol)
    np.testing.assert_allclose(split_g, ref_g, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_large_kernel_is_split_into_bounded_functions(line, monkeypatch, dtype):
    """Loops of at most STAGE_OPS ops (float32: the loop vectoriser's), float64 ones of at most
    WIDE_STAGE_OPS (codegen.wide_stage's SIMD code; set to 300 here, so that 120 statements
    make several)."""
    monkeypatch.setattr(wide_stage, "WIDE_STAGE_OPS", 300)
    bound = schedule.STAGE_OPS if dtype == np.float32 else wide_stage.WIDE_STAGE_OPS
    x = _inputs(dtype, (37,))
    f = sg.differentiate(line)
    text = f.grad.llvm_ir(x)
    bodies = [d for d in _defines(text) if ".body" in d or ".wide" in d]
    # the gradient has ~10 ops a statement: several stages of at most `bound` ops
    assert len(bodies) >= 8 * STATEMENTS // bound
    sizes = [len(b.split("\n"))
             for b in re.findall(r"^define [^\n]*\.(?:body|wide).*?^}", text, re.S | re.M)]
    assert max(sizes) < 8 * bound


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_scalar_code_is_one_light_module_and_right(line, dtype):
    """Every stage of scalar code is light, so every function is optnone and the module is
    compiled by the -O0 code generator, with the values of the reference back end."""
    x = _inputs(dtype, ())
    value, grad, f = _value_and_grad(line, x)
    for g in (f, f.grad):
        text = g.llvm_ir(x)
        defines = _defines(text)
        assert defines and all("optnone" in d for d in defines)
        assert "alwaysinline" not in text
    ref_v, ref_g, _ = _value_and_grad(line, x, target="python")
    rtol = 1e-12 if dtype == np.float64 else 2e-5
    assert value == pytest.approx(ref_v, rel=rtol)
    assert grad == pytest.approx(ref_g, rel=rtol)


def test_vector_code_keeps_the_full_pipeline(line):
    x = _inputs(np.float64, (5000,))
    text = sg.differentiate(line).grad.llvm_ir(x)
    assert not jit.is_light(text)
    assert not any("optnone" in d for d in _defines(text) if ".body" in d or ".wide" in d)


def test_is_light_reads_the_text():
    light = ('define void @"a"() noinline nounwind optnone\n{\nret void\n}\n'
             'define void @"b"() noinline optnone\n{\nret void\n}\n')
    assert jit.is_light(light)
    assert not jit.is_light(light + 'define void @"c"() nounwind\n{\nret void\n}\n')
    assert not jit.is_light('declare double @"sin"(double)\n')


def test_light_module_ir_compiles_and_runs():
    """A module jit.is_light accepts: optimised text (no passes) and machine code."""
    f = sg.grad(lambda x: np.sin(x) * np.exp(x) + np.tanh(x * x))
    x = 0.4
    text = f.llvm_ir(x)
    assert jit.is_light(text)
    assert "define" in f.llvm_ir(x, optimized=True)
    want = np.cos(x) * np.exp(x) + np.sin(x) * np.exp(x) + 2 * x * (1 - np.tanh(x * x) ** 2)
    assert f(x) == pytest.approx(want, rel=1e-14)


def test_compiling_pauses_the_collector_and_restores_it(line):
    assert gc.isenabled()
    seen = []
    original = schedule.Schedule.__init__

    def spy(self, *args, **kwargs):
        seen.append(gc.isenabled())
        original(self, *args, **kwargs)

    schedule.Schedule.__init__ = spy
    try:
        sg.grad(lambda x: np.sin(x) * x)(np.ones(3))
    finally:
        schedule.Schedule.__init__ = original
    assert seen and not any(seen)
    assert gc.isenabled()


def test_collector_restored_after_a_failed_compile():
    def bad(x):
        return np.linalg.svd(x)   # refused with a clear error
    with pytest.raises(Exception):
        sg.grad(lambda x: np.sum(bad(x)[0]))(np.ones((3, 3)))
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "a collector the user disabled stays disabled"
    finally:
        gc.enable()
