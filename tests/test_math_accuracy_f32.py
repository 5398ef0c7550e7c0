"""Accuracy of the CPU back end's float32 maths: our own functions (codegen/f32single.py
``OWN_F32``) and the float64 ones on widened lanes (codegen/mathlib.py ``F32_VIA_F64``).

Each function is sampled over every float32 (bit patterns at a fixed stride from a seeded
offset: log-uniform magnitudes and both signs, subnormals to the largest finite value)
against NumPy in x87 long double (erf: ``math``'s float64, 2^-28 of a float32 ulp), and the
bound is what the modules claim: 0.5 + 2^-6 ulp for the widened code, f32single.ULP_BOUND for
the functions computed in float32 on CPUs with FMA (f32single.SINGLE_F32; benchmarks/accuracy.py
--all-float32 and benchmarks/f32_exhaustive.py sweep every float32), and for those a dense run
of consecutive float32 around each argument-reduction edge and threshold. Special values (zeros, subnormals, inf, NaN, overflow and underflow
thresholds, huge arguments) must come out as NumPy's float32 ufuncs give them, and each
function's float32 gradient must match central differences of it in float64.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys

import mpmath as mp
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import f32single, jit, kernel, mathlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import derive_math_coefficients  # noqa: E402 - the tool lives beside the benchmarks
MAX_ULP = 0.5 + 2.0 ** -6
STRIDE = 1 << 14            # 2^18 = 262144 bit patterns per function
LONG_DOUBLE_OK = np.finfo(np.longdouble).nmant >= 63


def f_exp(x):
    return np.exp(x)


def f_expm1(x):
    return np.expm1(x)


def f_exp2(x):
    return np.exp2(x)


def f_log(x):
    return np.log(x)


def f_log1p(x):
    return np.log1p(x)


def f_log2(x):
    return np.log2(x)


def f_log10(x):
    return np.log10(x)


def f_sin(x):
    return np.sin(x)


def f_cos(x):
    return np.cos(x)


def f_tan(x):
    return np.tan(x)


def f_arcsin(x):
    return np.arcsin(x)


def f_arccos(x):
    return np.arccos(x)


def f_arctan(x):
    return np.arctan(x)


def f_sinh(x):
    return np.sinh(x)


def f_cosh(x):
    return np.cosh(x)


def f_tanh(x):
    return np.tanh(x)


def f_arcsinh(x):
    return np.arcsinh(x)


def f_arccosh(x):
    return np.arccosh(x)


def f_arctanh(x):
    return np.arctanh(x)


def f_cbrt(x):
    return np.cbrt(x)


def f_sqrt(x):
    return np.sqrt(x)


def f_erf(x):
    return sg.erf(x)


def f_erfc(x):
    return sg.erfc(x)


def f_pow(x, y):
    return x ** y


def f_arctan2(y, x):
    return np.arctan2(y, x)


def f_hypot(x, y):
    return np.hypot(x, y)


def f_fmod(x, y):
    return np.fmod(x, y)


def _float64_only(fn):
    each = np.vectorize(fn, otypes=[np.float64])
    return lambda x: each(np.asarray(x, np.float64))


# op -> (traced function, NumPy reference (float64 and long double), span of the gradient
# check). Every op the lowering table sends to a math library for float32.
UNARY = {
    "exp": (f_exp, np.exp, (-10, 10)), "expm1": (f_expm1, np.expm1, (-5, 5)),
    "exp2": (f_exp2, np.exp2, (-10, 10)), "log": (f_log, np.log, (0.1, 100)),
    "log1p": (f_log1p, np.log1p, (-0.9, 100)), "log2": (f_log2, np.log2, (0.1, 100)),
    "log10": (f_log10, np.log10, (0.1, 100)), "sin": (f_sin, np.sin, (-10, 10)),
    "cos": (f_cos, np.cos, (-10, 10)), "tan": (f_tan, np.tan, (-1.4, 1.4)),
    "arcsin": (f_arcsin, np.arcsin, (-0.9, 0.9)), "arccos": (f_arccos, np.arccos, (-0.9, 0.9)),
    "arctan": (f_arctan, np.arctan, (-10, 10)), "sinh": (f_sinh, np.sinh, (-5, 5)),
    "cosh": (f_cosh, np.cosh, (-5, 5)), "tanh": (f_tanh, np.tanh, (-3, 3)),
    "arcsinh": (f_arcsinh, np.arcsinh, (-10, 10)),
    "arccosh": (f_arccosh, np.arccosh, (1.1, 100)),
    "arctanh": (f_arctanh, np.arctanh, (-0.9, 0.9)), "cbrt": (f_cbrt, np.cbrt, (0.1, 10)),
    "sqrt": (f_sqrt, np.sqrt, (0.1, 100)),
    "erf": (f_erf, _float64_only(math.erf), (-3, 3)),
    "erfc": (f_erfc, _float64_only(math.erfc), (-3, 3)),
}
# op -> (traced function, NumPy reference, gradient spans of x and y)
BINARY = {
    "pow": (f_pow, np.power, ((0.5, 4), (-3, 3))),
    "arctan2": (f_arctan2, np.arctan2, ((0.5, 5), (-5, 5))),
    "hypot": (f_hypot, np.hypot, ((0.5, 5), (-5, -0.5))),
    "fmod": (f_fmod, np.fmod, ((0.1, 10), (1.5, 3))),
}

F32_MAX = float(np.finfo(np.float32).max)
SPECIAL = np.array(
    [0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, 1.17549435e-38, -1.17549435e-38, F32_MAX,
     -F32_MAX, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 2.0, 1e-8, -1e-8,
     88.72283, 88.72284, 89.0, 89.41598, 89.416, -87.33654, -103.97207, -103.97208, -104.0,
     -149.0, -150.0, -151.0, 127.99999, 128.0, 10.0, 11.0, 1e10, -1e10, 1e30, -1e30,
     2.0 ** 21, -(2.0 ** 21), 2097152.2, math.pi / 2, math.pi, 0.99999994, -0.99999994,
     1.0000001], np.float32)


def _all_float32(seed: int) -> np.ndarray:
    offset = int(np.random.default_rng(seed).integers(STRIDE))
    bits = np.arange(offset, 1 << 32, STRIDE, dtype=np.uint64).astype(np.uint32)
    return bits.view(np.float32)


def _reference(ufunc, args):
    if LONG_DOUBLE_OK:
        try:
            return ufunc(*(a.astype(np.longdouble) for a in args))
        except TypeError:           # erf: no long double version (float64 is ample)
            pass
    return np.asarray(ufunc(*(a.astype(np.float64) for a in args)), np.float64)


def ulp_error(got, ref):
    """|got - ref| in float32 ulps at ref, for finite references and results."""
    with np.errstate(over="ignore", invalid="ignore"):
        ref32 = ref.astype(np.float32)
        spacing = np.spacing(np.abs(ref32)).astype(ref.dtype)
    keep = np.isfinite(ref32) & np.isfinite(got)
    return np.abs(got[keep].astype(ref.dtype) - ref[keep]) / spacing[keep]


def ulp_bound(op: str) -> float:
    """The bound of ``op`` as this machine computes it (the first word of ``what``)."""
    if op in f32single.SINGLE_F32 and jit.target()["math"].fma:
        return f32single.ULP_BOUND[op]
    return MAX_ULP


def _check_bound(got, ref, what):
    err = ulp_error(got, ref)
    bound = ulp_bound(what.split()[0].rstrip(","))
    assert err.size and err.max() <= bound, (what, float(err.max()), bound)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_float32_within_bound_over_every_binade(op):
    fn, ufunc, _ = UNARY[op]
    x = np.concatenate([_all_float32(seed=len(op)), SPECIAL])
    with np.errstate(all="ignore"):
        got = sg.differentiate(fn)(x)
        ref = _reference(ufunc, [x])
    assert got.dtype == np.float32
    _check_bound(got, ref, op)


LN2 = math.log(2.0)
# op -> points where the float32 code changes case or cancels most: rounding edges of the
# reduction (k ln2 + ln2/2 for exp, sqrt(1/2) 2^e for log), the thresholds of each branch,
# overflow and underflow, the subnormal boundary
EDGES = {
    "exp": [(k + 0.5) * LN2 for k in range(-150, 128, 7)]
    + [0.0, -0.0, 88.72283, -87.33654, -103.97208, -103.27893, 1e-4],
    "log": [2.0 ** e * math.sqrt(0.5) for e in range(-148, 129, 5)]
    + [0.0, 1.0, 2.0 ** -126, 2.0 ** -140, 3.4e38],
    "log1p": [0.0, -0.0, 2.0 ** -25, -(2.0 ** -25), math.sqrt(2) - 1, math.sqrt(0.5) - 1, -0.5,
              -0.999, 1.0, 2.0 ** 24, 1e30, 1e-10],
    "sin": [k * math.pi / 4 for k in range(-40, 41)]
    + [252.89821, f32single.REDUCE_MAX_F32, -f32single.REDUCE_MAX_F32, 2.0 ** -12, 2.0 ** -126],
    "cos": [k * math.pi / 4 for k in range(-40, 41)]
    + [252.89821, f32single.REDUCE_MAX_F32, -f32single.REDUCE_MAX_F32, 2.0 ** -12, 2.0 ** -126],
    "tanh": [0.0, -0.0, f32single.TANH_POLY_MAX_F32, -f32single.TANH_POLY_MAX_F32, 0.2, 1.0, 5.0,
             f32single.TANH_CLAMP_F32 / 2, 2.0 ** -12, 2.0 ** -126],
}
DENSE = 1 << 13         # consecutive float32 each side of an edge


def _around(points) -> np.ndarray:
    """DENSE consecutive float32 on each side of each point (bit patterns: every float32
    there, not a grid)."""
    centres = np.array(points, np.float32).view(np.int32).astype(np.int64)
    steps = np.arange(-DENSE, DENSE, dtype=np.int64)
    near = (centres[:, None] + steps[None, :]).ravel()
    near = near[(near >= np.iinfo(np.int32).min) & (near <= np.iinfo(np.int32).max)]
    return near.astype(np.int32).view(np.float32)


@pytest.mark.parametrize("op", sorted(f32single.SINGLE_F32))
def test_float32_dense_around_reduction_edges(op):
    fn, ufunc, _ = UNARY[op]
    x = _around(EDGES[op])
    with np.errstate(all="ignore"):
        got = sg.differentiate(fn)(x)
        ref = _reference(ufunc, [x])
        want = ufunc(x)
    _assert_as_numpy(got, want, ref, op)


def test_float32_coefficients_are_the_derived_ones():
    """f32single's float32 tables are what the mpmath derivation produces, bit for bit, and
    each is a float32."""
    for name, values in derive_math_coefficients.coefficients_f32().items():
        held = getattr(f32single, name)
        assert held == values, name
        assert all(float(np.float32(v)) == v for v in held), name
    assert f32single.TANH_POLY_MAX_F32 == derive_math_coefficients.TANH_POLY_MAX_F32


def test_float32_log_split_is_exact_for_every_exponent():
    """e * LOG_LN2_F32[0] is exact in float32 for every exponent log meets (|e| <= 152): the
    high part has at most 16 significant bits."""
    mantissa, _ = np.frexp(f32single.LOG_LN2_F32[0])
    assert float(mantissa * 2.0 ** 16) == int(mantissa * 2.0 ** 16)
    e = np.arange(-152, 129, dtype=np.float32)
    np.testing.assert_array_equal(e * np.float32(f32single.LOG_LN2_F32[0]),
                                  e.astype(np.float64) * f32single.LOG_LN2_F32[0])


@pytest.mark.parametrize("op", sorted(f32single.SINGLE_F32))
def test_float32_arithmetic_where_the_cpu_has_fma(op):
    """With FMA the function is computed in float32 (its own IR, no float64 on the way)."""
    fn = UNARY[op][0]
    text = sg.differentiate(fn).llvm_ir(np.ones(8, np.float32))
    name = f32single.SINGLE_F32[op][0]
    assert (name in text) == jit.target()["math"].fma


def _random_float32(rng, n, lo, hi):
    """n float32 with log-uniform magnitudes in [lo, hi] and random signs."""
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    return (mag * rng.choice([-1.0, 1.0], n)).astype(np.float32)


@pytest.mark.parametrize("op", sorted(BINARY))
def test_two_argument_functions_within_bound(op):
    fn, ufunc, _ = BINARY[op]
    rng = np.random.default_rng(7)
    n = 100_000
    if op == "pow":     # results in range: bases near 1 for big exponents
        x = _random_float32(rng, n, 1e-3, 1e3)
        y = rng.uniform(-12, 12, n).astype(np.float32)
        x = np.abs(x)
    else:
        x, y = _random_float32(rng, n, 1e-45, F32_MAX), _random_float32(rng, n, 1e-45, F32_MAX)
    with np.errstate(all="ignore"):
        got = sg.differentiate(fn)(x, y)
        ref = _reference(ufunc, [x, y])
    _check_bound(got, ref, op)


def _nearest_float32_to_multiples_of_half_pi(ks):
    with mp.workdps(40):
        centres = np.array([float(int(k) * mp.pi / 2) for k in ks]).astype(np.float32)
    return np.concatenate([centres, np.nextafter(centres, np.float32(0)),
                           np.nextafter(centres, np.float32(np.inf))])


def _mp_reference(fn, x):
    with mp.workdps(40):
        return np.array([float(fn(mp.mpf(float(v)))) for v in x])


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_trig_next_to_multiples_of_half_pi(op):
    """Where the reduction cancels most, below the Cody-Waite bound and beyond it (the
    Payne-Hanek path), and the largest arguments."""
    rng = np.random.default_rng(3)
    ks = np.concatenate([np.arange(1, 200), rng.integers(200, 1_335_000, 300)])
    x = np.concatenate([_nearest_float32_to_multiples_of_half_pi(ks),
                        np.array([1e22, 1e30, 1.6e38, F32_MAX, 2.0 ** 21, 2097152.2],
                                 np.float32),
                        _random_float32(rng, 300, 2.0 ** 21, F32_MAX)])
    x = np.concatenate([x, -x])
    got = sg.differentiate(UNARY[op][0])(x)
    ref = _mp_reference(getattr(mp, op), x)
    _check_bound(got, ref.astype(np.float64), op)


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_far_and_near_lanes_mixed_in_one_vector(op):
    """float32 lanes past the Cody-Waite bound take f64math's far-argument call: each element
    as it comes out alone (length 1: the scalar code)."""
    f = sg.differentiate(UNARY[op][0])
    for n in (3, 17, 1001):
        x = np.where(np.arange(n) % 2 == 0, 0.75 + np.arange(n),
                     1e10 + 1e9 * np.arange(n)).astype(np.float32)
        got = f(x)
        alone = np.array([f(x[i:i + 1])[0] for i in range(n)])
        np.testing.assert_array_equal(got, alone)
        _check_bound(got, _reference(UNARY[op][1], [x]), op)


@pytest.fixture(params=[[], [("b", 2)], [("d", 4)]], ids=["no-simd-variants", "2-lanes", "4-lanes"])
def other_vector_isa(request):
    """Compile as for a CPU whose vector ABI offers other widths than the float32 loop's:
    the vectoriser then calls the far check lane by lane, or not at all."""
    math_ = jit.target()["math"]
    saved = math_.isas
    math_.isas = request.param
    math_._far_loaded.clear()         # the library for these variants, under the same names
    yield request.param
    math_.isas = saved
    math_._far_loaded.clear()


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
def test_far_lanes_whatever_vector_width_the_loop_gets(op, other_vector_isa):
    f = sg.differentiate(UNARY[op][0])
    x = np.where(np.arange(203) % 3 == 0, 1e12 + np.arange(203),
                 0.5 + np.arange(203)).astype(np.float32)
    _check_bound(f(x), _reference(UNARY[op][1], [x]), op)


def _assert_as_numpy(got, want, ref, what):
    """NaN where NumPy's float32 ufunc gives NaN, the same infinities and signed zeros, and
    finite values within the bound of the reference."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=what)
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want), err_msg=what)
    inf = np.isinf(want)
    np.testing.assert_array_equal(got[inf], want[inf], err_msg=what)
    zero = want == 0
    np.testing.assert_array_equal(got[zero], want[zero], err_msg=what)
    np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]), err_msg=what)
    _check_bound(got, ref, what)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_special_values_as_numpy(op):
    fn, ufunc, _ = UNARY[op]
    f = sg.differentiate(fn)
    with np.errstate(all="ignore"):
        want = np.asarray(ufunc(SPECIAL), np.float32) if op in ("erf", "erfc") else ufunc(SPECIAL)
        ref = _reference(ufunc, [SPECIAL])
        for n in (1, 64):       # the scalar code and the vectorised loop
            got = f(np.tile(SPECIAL, n))[:SPECIAL.size]
            _assert_as_numpy(got, want, ref, f"{op}, {n} copies")


@pytest.mark.parametrize("op", sorted(BINARY))
def test_two_argument_special_values_as_numpy(op):
    fn, ufunc, _ = BINARY[op]
    values = np.array([0.0, -0.0, 1e-45, -1e-45, 1.0, -1.0, 0.5, -2.0, 3.0, -3.0, 2.5, 1e30,
                       -1e30, F32_MAX, np.inf, -np.inf, np.nan], np.float32)
    x, y = (a.ravel() for a in np.meshgrid(values, values))
    with np.errstate(all="ignore"):
        got = sg.differentiate(fn)(x, y)
        want = ufunc(x, y)
        ref = _reference(ufunc, [x, y])
    _assert_as_numpy(got, want, ref, op)


def _central_difference(ufunc, x, h):
    return (ufunc(x + h) - ufunc(x - h)) / (2 * h)


def _assert_gradient_close(got, want, what):
    scale = np.max(np.abs(want))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6 * scale, err_msg=what)


@pytest.mark.parametrize("op", sorted(UNARY))
def test_float32_gradient_against_float64_central_differences(op):
    fn, ufunc, (lo, hi) = UNARY[op]
    x = np.random.default_rng(5).uniform(lo, hi, 2001).astype(np.float32)
    got = sg.differentiate(fn).grad(x)
    assert got.dtype == np.float32
    x64 = x.astype(np.float64)
    _assert_gradient_close(got, _central_difference(ufunc, x64, 1e-6 * np.maximum(1, np.abs(x64))),
                           op)


@pytest.mark.parametrize("op", sorted(BINARY))
def test_two_argument_gradients_against_float64_central_differences(op):
    fn, ufunc, ((xl, xh), (yl, yh)) = BINARY[op]
    rng = np.random.default_rng(6)
    x = rng.uniform(xl, xh, 2001).astype(np.float32)
    y = rng.uniform(yl, yh, 2001).astype(np.float32)
    if op == "fmod":    # away from the jumps of fmod in y (x / y an integer)
        q = x.astype(np.float64) / y
        keep = np.abs(q - np.round(q)) > 1e-3
        x, y = x[keep], y[keep]
    gx, gy = sg.grad(fn, wrt=(0, 1))(x, y)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    hx, hy = 1e-6 * np.maximum(1, np.abs(x64)), 1e-6 * np.maximum(1, np.abs(y64))
    _assert_gradient_close(gx, _central_difference(lambda v: ufunc(v, y64), x64, hx), op + " x")
    _assert_gradient_close(gy, _central_difference(lambda v: ufunc(x64, v), y64, hy), op + " y")


@pytest.fixture
def without_fma():
    """Compile as for a CPU without FMA (f64math's exact-products reduction for the trig
    functions, unfused multiply-adds elsewhere): any machine tests that code path."""
    math_ = jit.target()["math"]
    saved = math_.fma
    math_.fma = False
    yield
    math_.fma = saved


@pytest.mark.parametrize("op", sorted(mathlib.OWN_F32))
def test_own_functions_without_fma_within_bound(op, without_fma):
    fn, ufunc, _ = UNARY[op]
    x = np.concatenate([_all_float32(seed=11)[::4], SPECIAL])
    with np.errstate(all="ignore"):
        got = sg.differentiate(fn)(x)
        ref = _reference(ufunc, [x])
    _check_bound(got, ref, op)


def _many_calls(fn):
    def many(x):
        return (fn(x) + fn(x * 0.5) + fn(x * 0.25) + fn(x * 0.125) + fn(x * 2.0)
                + fn(x * 3.0) + fn(x * -1.5) + fn(x * 0.75) + fn(x * 1.25) + fn(-x))
    return many


@pytest.mark.parametrize("op", ["sin", "exp", "log1p", "tanh"])
def test_stages_with_many_calls_call_the_float64_library(op):
    """A float32 stage with more of our own calls than kernel.OUTLINE_MATH_CALLS calls
    f64math's out-of-line library on widened lanes instead of inlining each call."""
    assert kernel.OUTLINE_MATH_CALLS < 10
    f = sg.differentiate(_many_calls(getattr(np, op)))
    x = np.random.default_rng(8).uniform(0.1, 3.0, 203).astype(np.float32)
    assert f"symgrad_{op}_own" in f.llvm_ir(x)
    got = f(x)
    assert got.dtype == np.float32
    with np.errstate(invalid="ignore"):         # (log1p(-x) for x > 1)
        want = _many_calls(getattr(np, op))(x.astype(np.float64))
    # ten float32 terms summed: a few float32 ulps of the largest term
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.nanmax(np.abs(want)))


PRECISE = '''
import numpy as np
import symgrad as sg

def f(x):
    return np.sin(x) + np.exp(x) + np.log1p(x) + np.arctan(x)

x = np.linspace(0, 3, 1001, dtype=np.float32)
text = sg.differentiate(f).llvm_ir(x, optimized=True)
assert "_ZGV" not in text and "sg_sin_f32" not in text, text    # scalar libm calls only
assert "symgrad_sinf" not in text and "symgrad_sin" in text     # the double one, widened
got = sg.differentiate(f)(x)
np.testing.assert_allclose(got, f(x.astype(np.float64)), rtol=3e-7)
print("ok")
'''


def test_precise_math_mode_widens_to_scalar_libm(tmp_path):
    path = tmp_path / "precise32.py"
    path.write_text(PRECISE)
    env = dict(os.environ, SYMGRAD_PRECISE_MATH="1", SYMGRAD_NO_CACHE="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
