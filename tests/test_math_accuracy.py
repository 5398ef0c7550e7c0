"""Accuracy of the CPU back end's own float64 maths (codegen/f64math.py ``OWN_F64``).

Each function is sampled over the whole range it claims (log-uniform magnitudes, both signs,
fixed seeds) and compared with an extended-precision reference: x87 long double for the bulk,
mpmath for the arguments where a reference itself needs care (next to multiples of pi/2,
huge arguments). The bound is the project's: <= 2 ulp. Special values are checked exactly.
"""
from __future__ import annotations

import os
import subprocess
import sys

import mpmath as mp
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import f64math, jit, mathlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import derive_math_coefficients  # noqa: E402 - the tool lives beside the benchmarks

MAX_ULP = 2.0
N = 20_000
LONG_DOUBLE_OK = np.finfo(np.longdouble).nmant >= 63


def f_sin(x):
    return np.sin(x)


def f_cos(x):
    return np.cos(x)


def f_tan(x):
    return np.tan(x)


def f_log1p(x):
    return np.log1p(x)


def f_tanh(x):
    return np.tanh(x)


def f_exp(x):
    return np.exp(x)


def f_expm1(x):
    return np.expm1(x)


# op -> (traced function, mpmath reference, magnitude spans (lo, hi) sampled log-uniformly,
#        signs sampled)
TRIG_SPANS = [(1e-310, 1e-8), (1e-8, 4.0), (4.0, 2.0 ** 21), (2.0 ** 21, 1e308)]
CASES = {
    "sin": (f_sin, mp.sin, TRIG_SPANS, (-1, 1)),
    "cos": (f_cos, mp.cos, TRIG_SPANS, (-1, 1)),
    "tan": (f_tan, mp.tan, TRIG_SPANS, (-1, 1)),
    "log1p": (f_log1p, mp.log1p, [(1e-310, 1e-8), (1e-8, 1.0), (1.0, 1e308)], (1,)),
    "tanh": (f_tanh, mp.tanh, [(1e-310, 1e-8), (1e-8, 0.55), (0.55, 1.5), (1.5, 40.0),
                               (40.0, 1e308)], (-1, 1)),
    "exp": (f_exp, mp.exp, [(1e-310, 1.0), (1.0, 709.0)], (-1, 1)),
    "expm1": (f_expm1, mp.expm1, [(1e-310, 1.0), (1.0, 709.0)], (-1, 1)),
}
OWN = [op for op in CASES if op in mathlib.OWN_F64]


def samples(op, seed=0):
    rng = np.random.default_rng(seed)
    spans, signs = CASES[op][2], CASES[op][3]
    parts = []
    for lo, hi in spans:
        mag = np.exp(rng.uniform(np.log(lo), np.log(hi), N))
        parts.append(mag * rng.choice(signs, N))
    x = np.concatenate(parts)
    if op == "log1p":       # (-1, 0) too, log-uniform in the distance to -1 and to 0
        near_minus_one = -1 + np.exp(rng.uniform(np.log(1e-16), 0, N))
        x = np.concatenate([x, -x[:N], near_minus_one])
    return x[(x > -1) | (op != "log1p")]


def ulp_error(got, ref_long):
    """|got - ref| in units of the spacing of doubles at ref (finite results only)."""
    ref = ref_long.astype(np.float64)
    spacing = np.spacing(np.abs(ref)).astype(np.longdouble)
    keep = np.isfinite(ref)
    return np.abs(got[keep].astype(np.longdouble) - ref_long[keep]) / spacing[keep]


def mp_reference(fn, x):
    """fn at 60 digits, as head + tail doubles summed in long double (NumPy would convert an
    mpf through a 15-digit string)."""
    with mp.workdps(60):
        values = [fn(mp.mpf(float(v))) for v in x]
        head = np.array([float(v) for v in values])
        tail = np.array([float(v - mp.mpf(h)) if mp.isfinite(v) else 0.0
                         for v, h in zip(values, head)])
    return head.astype(np.longdouble) + tail.astype(np.longdouble)


@pytest.mark.parametrize("op", OWN)
def test_own_math_within_two_ulp_over_claimed_range(op):
    f = sg.differentiate(CASES[op][0])
    x = samples(op)
    got = f(x)
    if LONG_DOUBLE_OK:
        ref = getattr(np, op)(x.astype(np.longdouble))
    else:                   # platforms whose long double is a double: slower, fewer points
        x = x[::20]
        got = got[::20]
        ref = mp_reference(CASES[op][1], x)
    err = ulp_error(got, ref)
    assert err.max() <= MAX_ULP, (op, float(err.max()), x[np.argmax(err)])


def _near_multiples_of_half_pi(count, k_max, seed=1):
    """The doubles nearest k pi/2 (and their neighbours): where the reduction cancels most."""
    rng = np.random.default_rng(seed)
    ks = np.unique(rng.integers(1, k_max, count))
    with mp.workdps(60):
        centres = [float(int(k) * mp.pi / 2) for k in ks]
    x = np.array(centres)
    return np.concatenate([x, np.nextafter(x, 0), np.nextafter(x, np.inf)])


@pytest.fixture(params=["fma", "no-fma"])
def fma_mode(request):
    """Compile as for a CPU with FMA or without (plain multiplies and adds, the exact-products
    Cody-Waite reduction: it runs the same on any CPU, so every machine tests it)."""
    math = jit.target()["math"]
    saved = math.fma
    math.fma = request.param == "fma"
    yield request.param
    math.fma = saved


@pytest.mark.parametrize("op", [op for op in ("sin", "cos", "tan", "log1p", "tanh")
                                if op in OWN])
def test_without_fma_within_two_ulp_too(op, fma_mode):
    x = samples(op, seed=2)[::4]
    got = sg.differentiate(CASES[op][0])(x)
    err = ulp_error(got, getattr(np, op)(x.astype(np.longdouble)))
    assert err.max() <= MAX_ULP, (op, fma_mode, float(err.max()), x[np.argmax(err)])


@pytest.mark.parametrize("op", [op for op in ("sin", "cos", "tan") if op in OWN])
def test_sin_cos_next_to_multiples_of_half_pi(op, fma_mode):
    x = np.concatenate([_near_multiples_of_half_pi(300, 1_300_000),
                        np.array([1e22, 1e300, 1.7976931348623157e308, 2.0 ** 21,
                                  np.nextafter(2.0 ** 21, np.inf),
                                  6381956970095103.0 * 2.0 ** 797])])    # glibc's cos: 8 ulp
    x = np.concatenate([x, -x])
    got = sg.differentiate(CASES[op][0])(x)
    err = ulp_error(got, mp_reference(CASES[op][1], x))
    assert err.max() <= MAX_ULP, (op, float(err.max()), x[np.argmax(err)])


@pytest.mark.parametrize("op", [op for op in ("sin", "cos", "tan") if op in OWN])
def test_far_and_near_lanes_mixed_in_one_vector(op):
    """Every other element past the Cody-Waite bound: far lanes take the Payne-Hanek helper,
    near ones not. Each element must come out as it does on its own (a length-1 call: the
    scalar code) and within the bound; odd lengths exercise the scalar remainder loop."""
    f = sg.differentiate(CASES[op][0])
    for n in (3, 17, 1001):
        x = np.where(np.arange(n) % 2 == 0, 0.75 + np.arange(n), 1e10 + 1e9 * np.arange(n))
        got = f(x)
        alone = np.array([f(x[i:i + 1])[0] for i in range(n)])
        np.testing.assert_array_equal(got, alone)
        err = ulp_error(got, getattr(np, op)(x.astype(np.longdouble)))
        assert err.max() <= MAX_ULP


@pytest.fixture(params=[[], [("b", 2)], [("d", 4)]], ids=["no-simd-variants", "2-lanes", "4-lanes"])
def other_vector_isa(request):
    """Compile as for a CPU whose vector ABI offers other widths than the loop's: the
    vectoriser then calls the far check lane by lane, or not at all (no variants)."""
    math = jit.target()["math"]
    saved = math.isas
    math.isas = request.param
    math._far_loaded.clear()         # the library for these variants, under the same names
    yield request.param
    math.isas = saved
    math._far_loaded.clear()         # and back to this machine's library


@pytest.mark.parametrize("op", [op for op in ("sin", "cos", "tan") if op in OWN])
def test_far_lanes_whatever_vector_width_the_loop_gets(op, other_vector_isa):
    f = sg.differentiate(CASES[op][0])
    x = np.where(np.arange(203) % 3 == 0, 1e12 + np.arange(203), 0.5 + np.arange(203))
    err = ulp_error(f(x), getattr(np, op)(x.astype(np.longdouble)))
    assert err.max() <= MAX_ULP


def _reference(op, x):
    return (getattr(np, op)(x.astype(np.longdouble)) if LONG_DOUBLE_OK
            else mp_reference(CASES[op][1], x))


@pytest.mark.parametrize("op", [op for op in ("exp", "expm1") if op in OWN])
def test_exp_at_the_ends_of_the_reduced_interval(op):
    """Where x = k ln2 + r has |r| near ln2/2 the polynomial (EXP_POLY, fitted on that
    interval) is at its worst, and expm1's 2^k p + (2^k - 1) cancels most for k = 1, -1."""
    k = np.arange(-1070, 1021, 7).astype(float)
    with mp.workdps(40):
        ends = np.array([float((mp.mpf(int(j)) + mp.mpf(h)) * mp.log(2)) for j in k
                         for h in (0.5, -0.5)])
    x = np.concatenate([ends * (1 + u) for u in (-2.0 ** -30, -2.0 ** -45, 0.0, 2.0 ** -45,
                                                  2.0 ** -30)])
    x = x[(x > -745) & (x < 709.7)]
    err = ulp_error(sg.differentiate(CASES[op][0])(x), _reference(op, x))
    assert err.max() <= MAX_ULP, (op, float(err.max()), x[np.argmax(err)])


@pytest.mark.skipif("tanh" not in OWN, reason="tanh is libm's")
def test_tanh_where_it_and_expm1_lie_in_different_binades(fma_mode):
    """tanh x = E / (E + 2) with E = e^2x - 1 about 2 tanh x (1 + tanh x): just below a power
    of two tanh x sits at the top of its binade while E has crossed into the next one up,
    where half an ulp of E is a whole ulp of tanh. E is never rounded on its own there
    (_tanh_body keeps it as a head and a tail): rounding it gave 1.47 ulp."""
    rng = np.random.default_rng(3)
    x = np.concatenate([np.arctanh(2.0 ** -j * (1 - rng.uniform(0, 4 * 2.0 ** -j, 400)))
                        for j in range(1, 40)])
    x = np.concatenate([x, -x])
    err = ulp_error(sg.differentiate(f_tanh)(x), _reference("tanh", x))
    assert err.max() <= MAX_ULP, (fma_mode, float(err.max()), x[np.argmax(err)])


@pytest.mark.skipif("tanh" not in OWN, reason="tanh is libm's")
def test_tanh_at_the_steps_of_its_reduction(fma_mode):
    """2|x| = k ln2 + r with k rounded down: at each multiple of ln2 / 2 r jumps from ln2 to
    0 (both ends of TANH_EXP_POLY's interval) and 2^k - 1 gains a bit."""
    with mp.workdps(40):
        steps = np.array([float(j * mp.log(2) / 2) for j in range(1, 60)])
    x = np.concatenate([steps, np.nextafter(steps, 0), np.nextafter(steps, np.inf),
                        steps * (1 - 2.0 ** -40), steps * (1 + 2.0 ** -40)])
    x = np.concatenate([x, -x])
    err = ulp_error(sg.differentiate(f_tanh)(x), _reference("tanh", x))
    assert err.max() <= MAX_ULP, (fma_mode, float(err.max()), x[np.argmax(err)])


SPECIAL = {
    "sin": [(0.0, 0.0), (-0.0, -0.0), (5e-324, 5e-324), (-1e-300, -1e-300), (1e-9, 1e-9),
            (np.inf, np.nan), (-np.inf, np.nan), (np.nan, np.nan)],
    "cos": [(0.0, 1.0), (-0.0, 1.0), (5e-324, 1.0), (1e-9, 1.0), (np.inf, np.nan),
            (-np.inf, np.nan), (np.nan, np.nan)],
    "tan": [(0.0, 0.0), (-0.0, -0.0), (5e-324, 5e-324), (-1e-300, -1e-300), (1e-9, 1e-9),
            (np.inf, np.nan), (-np.inf, np.nan), (np.nan, np.nan)],
    "log1p": [(0.0, 0.0), (-0.0, -0.0), (5e-324, 5e-324), (-1e-300, -1e-300), (-1.0, -np.inf),
              (-1.5, np.nan), (-np.inf, np.nan), (np.inf, np.inf), (np.nan, np.nan),
              (1.7976931348623157e308, 709.782712893384)],
    "tanh": [(0.0, 0.0), (-0.0, -0.0), (5e-324, 5e-324), (-1e-300, -1e-300), (1e-9, 1e-9),
             (25.0, 1.0), (-25.0, -1.0), (1e300, 1.0), (np.inf, 1.0), (-np.inf, -1.0),
             (np.nan, np.nan)],
}


@pytest.mark.parametrize("op", [op for op in SPECIAL if op in OWN])
def test_special_values(op):
    x = np.array([a for a, _ in SPECIAL[op]])
    want = np.array([b for _, b in SPECIAL[op]])
    f = sg.differentiate(CASES[op][0])
    for n in (1, 64):       # scalar code and the vectorised loop
        got = f(np.tile(x, n))[:x.size]
        np.testing.assert_array_equal(got, want)
        signed = ~np.isnan(want)       # a NaN's sign is not specified
        np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))


def test_coefficients_are_the_derived_ones():
    """f64math's tables are what the mpmath derivation produces, bit for bit."""
    for name, values in derive_math_coefficients.coefficients().items():
        held = getattr(f64math, name)
        held = held if isinstance(held, list) else [held]
        assert held == values, name
    # the fits cover the reduced arguments: |r| <= ln2/2 (k rounded), 0 <= r < ln2 (down)
    assert derive_math_coefficients.EXP_R_MAX > float(mp.log(2)) / 2
    assert derive_math_coefficients.TANH_R_MAX > float(mp.log(2))


def test_pi_over_two_split_is_exact_for_every_reduced_quotient():
    """k * part is exact for k < 2^21 (the parts have <= 32 significant bits) and the bound
    keeps k = rint(|x| 2/pi) below 2^21."""
    for part in f64math.PIO2_PARTS[:-1]:
        mantissa, exponent = np.frexp(part)
        assert float(mantissa * 2.0 ** 32) == int(mantissa * 2.0 ** 32)
    assert f64math.REDUCE_MAX * f64math.TWO_OVER_PI + 1 < 2 ** 21


PRECISE = '''
import numpy as np
import symgrad as sg

def f(x):
    return np.sin(x) + np.cos(x) + np.log1p(x) + np.tanh(x)

x = np.linspace(0, 3, 1001)
text = sg.differentiate(f).llvm_ir(x, optimized=True)
assert "_ZGV" not in text and "sg_sin_f64" not in text, text    # scalar libm calls only
np.testing.assert_allclose(sg.differentiate(f)(x), f(x), rtol=1e-15)
print("ok")
'''


def test_precise_math_mode_keeps_scalar_libm(tmp_path):
    path = tmp_path / "precise.py"
    path.write_text(PRECISE)
    env = dict(os.environ, SYMGRAD_PRECISE_MATH="1", SYMGRAD_NO_CACHE="1", PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
