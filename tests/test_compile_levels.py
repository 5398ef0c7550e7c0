"""How much LLVM optimises a kernel depends on its size (codegen.kernel.LIGHT_MAX_ITERATIONS):
stages of a few iterations are compiled without optimisation (optnone), the rest with the
full pipeline. Both must compute the same values as the NumPy reference back end."""
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import kernel
from symgrad.codegen.kernel import LIGHT_MAX_ITERATIONS
from symgrad.codegen.mathlib import OWN_F64


def mixed(a, x):
    # small stages (over a's few elements) beside large ones (over x): reductions, a max,
    # transcendental functions, a broadcast between the two sizes
    s = np.exp(a) * np.sin(a) + np.log1p(a * a)
    m = np.max(s)
    z = np.tanh(x[:, None] * s[None, :] - m)
    return np.sum(z * z) + np.sum(np.cos(s)) * np.sum(np.exp(-x * x))


def light_functions(ir_text: str) -> set[str]:
    return set(re.findall(r'define [^\n]*@"(sg_\w+(?:\.body)?)"\([^\n]*optnone', ir_text))


@pytest.mark.parametrize("n_small", [3, LIGHT_MAX_ITERATIONS])
def test_light_and_full_stages_agree_with_python(n_small):
    rng = np.random.default_rng(1)
    a = rng.uniform(0.1, 1.0, n_small)
    x = rng.uniform(-1.0, 1.0, 4 * LIGHT_MAX_ITERATIONS + 5)
    cpu = sg.differentiate(mixed, wrt=(0, 1))
    ref = sg.differentiate(mixed, wrt=(0, 1), target="python")
    assert cpu(a, x) == pytest.approx(ref(a, x), rel=1e-12)
    for got, want in zip(cpu.grad(a, x), ref.grad(a, x)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-14)
    light = light_functions(cpu.grad.llvm_ir(a, x))
    assert light, "the stages over a's elements are compiled light"
    assert any(f.endswith(".body") for f in light)


def test_large_stages_keep_the_full_pipeline():
    x = np.linspace(-1.0, 1.0, LIGHT_MAX_ITERATIONS + 1)
    f = sg.grad(lambda x: np.sum(np.tanh(x) * x))
    assert light_functions(f.llvm_ir(x)) == set()
    np.testing.assert_allclose(f(x), np.tanh(x) + x * (1 - np.tanh(x) ** 2), rtol=1e-13)


def test_scalar_program_compiles_light_and_is_right():
    f = sg.grad(lambda x: np.sin(x) * np.exp(x) + np.log1p(x * x))
    x = 0.7
    want = np.cos(x) * np.exp(x) + np.sin(x) * np.exp(x) + 2 * x / (1 + x * x)
    assert f(x) == pytest.approx(want, rel=1e-14)


# -- our own float64 functions out of line (codegen.kernel.OUTLINE_MATH_CALLS) ------------------

def _many_calls(fn):
    """A loop with more calls of ``fn`` than the bound: its stage calls fn out of line."""
    def many(x):
        return (fn(x) + fn(x * 0.5) + fn(x * 0.25) + fn(x * 0.125) + fn(x * 2.0)
                + fn(x * 3.0) + fn(x * -1.5) + fn(x * 0.75) + fn(x * 1.25) + fn(-x))
    return many


# wide and special arguments: far ones for sin/cos/tan (Payne-Hanek), huge ones, inf, NaN,
# subnormals, and a length that leaves a remainder after every vector width
SPECIAL = [0.0, -0.0, 1e-310, -5e-324, 1e-8, 0.3, -1.7, 20.0, -700.0, 705.0, 1e5, 3e7, 1e10,
           -1e22, 1e300, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("op", sorted(OWN_F64))
def test_outlined_math_is_the_inlined_math(op, monkeypatch):
    fn = getattr(np, op)
    rng = np.random.default_rng(2)
    x = np.concatenate([SPECIAL, rng.uniform(-4, 4, 19), rng.uniform(-1e6, 1e6, 6)])
    with np.errstate(all="ignore"):
        outlined = sg.differentiate(_many_calls(fn))
        text = outlined.llvm_ir(x)
        assert f"symgrad_{op}_own" in text, "the stage calls the library"
        got = outlined(x)
        got_grad = outlined.grad(x)
        monkeypatch.setattr(kernel, "OUTLINE_MATH_CALLS", 10 ** 6)
        inlined = sg.differentiate(_many_calls(fn))
        assert f"symgrad_{op}_own" not in inlined.llvm_ir(x)
        want, want_grad = inlined(x), inlined.grad(x)
        ref = sg.differentiate(_many_calls(fn), target="python")
        want_np = ref(x)
    for mine, theirs in ((got, want), (got_grad, want_grad)):
        np.testing.assert_array_equal(np.isnan(mine), np.isnan(theirs))
        np.testing.assert_array_equal(np.isinf(mine), np.isinf(theirs))
        finite = np.isfinite(theirs)
        np.testing.assert_array_max_ulp(mine[finite], theirs[finite], maxulp=1)
    finite = np.isfinite(want_np)
    np.testing.assert_array_equal(np.isfinite(got), finite)
    np.testing.assert_allclose(got[finite], want_np[finite], rtol=1e-12, atol=1e-300)


def test_few_calls_stay_inline():
    f = sg.grad(lambda x: np.sum(np.sin(x) * np.exp(x) + np.tanh(x)))
    x = np.linspace(-2.0, 2.0, 100)
    assert kernel.OUTLINE_MATH_CALLS >= 4
    assert "_own" not in f.llvm_ir(x)
    np.testing.assert_allclose(f(x), np.cos(x) * np.exp(x) + np.sin(x) * np.exp(x)
                               + 1 - np.tanh(x) ** 2, rtol=1e-13, atol=1e-15)


def test_library_simd_versions_are_vectorised():
    """The out-of-line library's 4- and 8-lane versions are widened code, not a lane loop
    (the forced-width loop of f64math._own_lanes; a failure would cost speed, not values)."""
    import re

    from symgrad.codegen import jit
    from symgrad.codegen.mathlib import _own_library_module, _own_loops, finish_cpu_module
    math = jit.target()["math"]
    wide = [lanes for _, lanes in math.isas if lanes >= 4]
    if not wide:
        pytest.skip("this CPU has no 256- or 512-bit vectors")
    module, public = _own_library_module("sin", math)
    text = _own_loops(finish_cpu_module(str(module), module.math_calls, math))
    optimized = str(jit.optimize(text))
    for lanes in wide:
        body = re.search(rf'define [^\n]*@sg__ZGV\wN{lanes}v_symgrad_sin_own\w*\.lanes\(.*?\n}}\n',
                         optimized, re.S)
        assert body is not None, lanes
        assert re.search(rf'fmul <{lanes} x double>', body.group(0)), lanes
        assert "br " not in body.group(0), "one vector iteration, no loop left"


def beside_a_big_stage(small, big):
    s = np.exp(small) * np.sin(small) - small * small        # stages over small's elements
    return np.sum(np.tanh(big[:, None] * s[None, :])) + np.sum(s * np.log1p(s * s))


def test_small_stages_beside_a_big_one_compile_light():
    from symgrad.codegen.kernel import LIGHT_CAP, LIGHT_SHARE
    n_small = 2 * LIGHT_MAX_ITERATIONS + 3                   # above the absolute bound
    n_big = 2 * LIGHT_SHARE            # the (big, small) stage: 2 * SHARE * n_small iterations
    assert n_small <= LIGHT_CAP
    rng = np.random.default_rng(4)
    small, big = rng.uniform(0.1, 1.0, n_small), rng.uniform(-1.0, 1.0, n_big)
    cpu = sg.differentiate(beside_a_big_stage, wrt=(0, 1))
    ref = sg.differentiate(beside_a_big_stage, wrt=(0, 1), target="python")
    assert cpu(small, big) == pytest.approx(ref(small, big), rel=1e-12)
    for got, want in zip(cpu.grad(small, big), ref.grad(small, big)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)
    assert light_functions(cpu.grad.llvm_ir(small, big))
    # alone, the same small stages get the full pipeline
    alone = sg.grad(lambda small: np.sum(np.exp(small) * np.sin(small) - small * small))
    assert light_functions(alone.llvm_ir(small)) == set()


def recurrence(w, xs):
    h = np.zeros(4)
    for t in range(xs.shape[0]):
        h = np.tanh(w * h + xs[t]) * np.exp(-h * h)
    return np.sum(h)


def test_loop_bodies_keep_the_full_pipeline():
    """A loop region's stages run once per iteration: never compiled light, however few
    elements they have."""
    w, xs = np.linspace(0.1, 0.4, 4), np.linspace(-1.0, 1.0, 200).reshape(50, 4)
    cpu = sg.differentiate(recurrence, wrt=(0, 1))
    ref = sg.differentiate(recurrence, wrt=(0, 1), target="python")
    assert "= loop(" in cpu.grad.ir_for(w, xs)
    assert cpu(w, xs) == pytest.approx(ref(w, xs), rel=1e-12)
    for got, want in zip(cpu.grad(w, xs), ref.grad(w, xs)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-13)
    light = light_functions(cpu.grad.llvm_ir(w, xs))
    region = re.findall(r'define [^\n]*@"(sg_r\d+_\w+)"', cpu.grad.llvm_ir(w, xs))
    assert region, "the loop is a region of its own functions"
    assert not light & set(region)


def _rotation(t):
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def rotations(angles, p):
    r = _rotation(angles[0]) @ _rotation(angles[1]) @ _rotation(angles[2])
    q = r @ p
    return np.sum(q * q) + np.sum(r @ r.T)


def test_small_matmuls_compile_light_and_call_the_library_kernel():
    """3x3 products in scalar-sized code: the module is light (every function optnone), the
    products call the matmul library, which is compiled optimised once; both targets agree."""
    angles, p = np.array([0.1, -0.7, 2.3]), np.array([[1.0], [-2.0], [0.5]])
    cpu = sg.differentiate(rotations, wrt=(0, 1))
    ref = sg.differentiate(rotations, wrt=(0, 1), target="python")
    text = cpu.grad.llvm_ir(angles, p)
    defined = re.findall(r'^define [^\n]*', text, re.M)
    assert defined and all("optnone" in line for line in defined)
    assert re.search(r'^declare void @"symgrad_mm_float64_\d+', text, re.M)
    assert cpu(angles, p) == pytest.approx(ref(angles, p), rel=1e-13)
    for got, want in zip(cpu.grad(angles, p), ref.grad(angles, p)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


# -- stage bodies of the same text are one function (codegen.kernel._shared_body) --------------

def two_determinants(a, b):
    # two LU factorisations, each a loop region of the same stages over other buffers
    return np.linalg.slogdet(a)[1] + np.linalg.det(b / 4.0)


def test_stages_of_the_same_structure_share_one_body():
    rng = np.random.default_rng(4)
    a = rng.uniform(-1, 1, (6, 6)) + 2.0 * np.eye(6)
    b = rng.uniform(-1, 1, (6, 6)) + 2.0 * np.eye(6)
    cpu = sg.differentiate(two_determinants, wrt=(0, 1))
    ref = sg.differentiate(two_determinants, wrt=(0, 1), target="python")
    text = cpu.grad.llvm_ir(a, b)
    bodies = dict((name, line) for line, name in re.findall(
        r'^(define [^\n]*@"(sg_\w+\.body)"\([^\n]*)', text, re.M))
    called = re.findall(r'call void @"(sg_\w+\.body)"\(', text)
    shared = {name for name in called if called.count(name) > 1}
    assert shared, "the two factorisations' stages call the same bodies"
    assert len(bodies) < len(called)
    for name in shared:    # compiled once: never inlined, a root of its own for the split
        assert not bodies[name].startswith("define internal ") and "noinline" in bodies[name]
    # a body reads its parameters from its own first slot on: its wrapper passes that slot
    wrapper_call = r'getelementptr i64, ptr %"params", i64 [1-9]\d*\n\s*call void @"sg_\w+\.body"'
    assert re.search(wrapper_call, text)
    assert cpu(a, b) == pytest.approx(ref(a, b), rel=1e-12)
    for got, want in zip(cpu.grad(a, b), ref.grad(a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
    # each determinant alone: the shared code computes the very same bits
    alone = sg.grad(lambda a: np.linalg.slogdet(a)[1])(a)
    np.testing.assert_array_equal(cpu.grad(a, b)[0], alone)


# -- short innermost loops of a loop region: one vector a step (codegen.short_loops) ----------

def test_short_region_loops_interleave_once_and_reductions_keep_theirs():
    rng = np.random.default_rng(7)
    a, b = (rng.uniform(-1, 1, (6, 6)) + 2.0 * np.eye(6) for _ in range(2))
    cpu = sg.differentiate(two_determinants, wrt=(0, 1))
    ref = sg.differentiate(two_determinants, wrt=(0, 1), target="python")
    text = cpu.grad.llvm_ir(a, b)
    hint = re.search(r'^(!\d+) = !\{ !"llvm\.loop\.interleave\.count", i32 1 \}', text, re.M)
    assert hint, "a short loop carries the hint"
    ids = re.findall(rf'^(!\d+) = !{{ (!\d+), {hint.group(1)} }}', text, re.M)
    assert ids and all(a == b for a, b in ids)       # each loop's node names itself first
    bodies = re.findall(r'^define [^\n]*\.body"\(.*?^}', text, re.M | re.S)
    hinted = [body for body in bodies if _hinted_loops(body)]
    assert hinted and all(" reassoc " not in body and "_r" in body.split("(")[0] for body in hinted)
    assert any(" reassoc " in body for body in bodies)     # the sums' loops: as they are
    for got, want in zip(cpu.grad(a, b), ref.grad(a, b)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-13)
    big = rng.uniform(-1, 1, (40, 40)) + 8.0 * np.eye(40)     # rows of 40: no hint
    assert not _hinted_loops(sg.grad(lambda m: np.linalg.slogdet(m)[1]).llvm_ir(big))


def _hinted_loops(text):
    return re.findall(r'^\s*br label [^\n]*, !llvm\.loop !\d+$', text, re.M)
