"""lgamma, gamma (elementwise primitives: libm's lgamma_r / tgamma on the CPU, libdevice's on
the GPU) and digamma (a composition of primitives, so trigamma comes from autodiff): values
against mpmath on every back end, derivatives against mpmath's polygamma and central
differences, the special points, scipy.special's and math's spellings, a Student-t likelihood
with a learned nu, the C export, the sympy form, the generated NumPy source.

The per-op tables of test_derivatives / test_forward / test_ptx / test_export carry the three
functions too (first and second order on every target, forward mode, PTX assembly and its CPU
emulation, C); this file holds what those tables cannot say."""
import math
import os
import subprocess
import sys

import mpmath
import numpy as np
import pytest
import scipy.special
import sympy

import symgrad as sg
from symgrad.codegen import ptx_emulate

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_export import GCC, _compare, needs_gcc  # noqa: E402

TARGETS = ("python", "cpu")
mpmath.mp.dps = 40
# NumPy warns where the generated source meets inf / NaN (both sides of a select are computed)
IGNORE_FLOAT_WARNINGS = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def lgamma_f(x):
    return sg.lgamma(x)


def gamma_f(x):
    return sg.gamma(x)


def digamma_f(x):
    return sg.digamma(x)


def _log_abs_gamma(v):
    return mpmath.log(abs(mpmath.gamma(v)))


FUNCTIONS = {"lgamma": (lgamma_f, _log_abs_gamma), "gamma": (gamma_f, mpmath.gamma),
             "digamma": (digamma_f, mpmath.digamma)}


def _points(seed=0, n=400):
    """Positive (both sides of the shift at 10, large), tiny, negative non-integers."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([rng.uniform(0.5, 10, n), rng.uniform(10, 40, n // 4),
                        10 ** rng.uniform(1, 300, n // 4), 10 ** rng.uniform(-300, -1, n // 8),
                        rng.uniform(-30, 0.5, n), -(10 ** rng.uniform(-300, 14, n // 8))])
    return x[(x > 0) | (np.abs(x - np.rint(x)) > 1e-6)]


def _want(ref, x):
    return np.array([float(ref(mpmath.mpf(float(v)))) for v in x])


def _error(got, want, limit=1e300):
    """|got - want| / max(|want|, 1) where the result is finite (below ``limit``): relative
    error, absolute near the roots (lgamma at 1 and 2, digamma at 1.4616...), where no float
    formula is relative."""
    ok = np.isfinite(want) & (np.abs(want) < limit)
    return np.abs(np.asarray(got, np.float64)[ok] - want[ok]) / np.maximum(np.abs(want[ok]), 1.0)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_float64_values_against_mpmath(name, target):
    fn, ref = FUNCTIONS[name]
    x = _points()
    if name == "gamma":
        x = x[x < 171]
    got = sg.differentiate(fn, target=target)(x)
    # python's lgamma is CPython's math.lgamma (1e-13 near its roots), the CPU's glibc's
    tol = 1e-13 if (name, target) == ("lgamma", "python") else 2e-15
    assert _error(got, _want(ref, x)).max() < tol


def test_digamma_relative_error_away_from_its_roots():
    """The composition is within 1e-14 relative of psi wherever |psi| is not small (each
    negative unit interval and (0, inf) hold one root, where only absolute error is bounded)."""
    x = _points(seed=3)
    want = _want(mpmath.digamma, x)
    away = np.abs(want) > 0.1
    for target in TARGETS:
        got = sg.differentiate(digamma_f, target=target)(x[away])
        assert (np.abs(got - want[away]) / np.abs(want[away])).max() < 1e-14


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@IGNORE_FLOAT_WARNINGS
def test_float32_values_against_mpmath(name, target):
    fn, ref = FUNCTIONS[name]
    x = _points(seed=1).astype(np.float32)
    x = x[(x > 0) | (x != np.rint(x))]
    if name == "gamma":
        x = x[(x < 35) & (x > -30)]
    got = sg.differentiate(fn, target=target)(x)
    assert got.dtype == np.float32
    want = _want(ref, x.astype(np.float64))
    # lgamma and gamma: float64 rounded once; digamma: float32 arithmetic throughout
    tol = 1e-6 if name == "digamma" else 6e-8
    assert _error(got, want, limit=float(np.finfo(np.float32).max)).max() < tol


# ----------------------------------------------------------------------------------------------
# Special points: C99's lgamma / tgamma, scipy's digamma (math raises at the poles; arrays give
# these values, as NumPy functions do).
INF, NAN = math.inf, math.nan
SPECIAL = np.array([1.0, 2.0, 0.0, -0.0, -1.0, -2.0, -1e300, 1e300, INF, -INF, NAN, 171.7,
                    171.6, 5e-310, -5e-310, -2.5, 0.5])
EXPECTED = {
    "lgamma": [0.0, 0.0, INF, INF, INF, INF, INF, 1e300 * (math.log(1e300) - 1), INF, INF, NAN,
               math.lgamma(171.7), math.lgamma(171.6), -math.log(5e-310), -math.log(5e-310),
               math.lgamma(-2.5), math.log(math.sqrt(math.pi))],
    "gamma": [1.0, 1.0, INF, -INF, NAN, NAN, NAN, INF, INF, NAN, NAN, INF, math.gamma(171.6),
              INF, -INF, math.gamma(-2.5), math.sqrt(math.pi)],
    "digamma": [-np.euler_gamma, 1 - np.euler_gamma, -INF, INF, NAN, NAN, NAN, math.log(1e300),
                INF, NAN, NAN, float(mpmath.digamma(171.7)), float(mpmath.digamma(171.6)),
                -INF, INF, float(mpmath.digamma(-2.5)), -np.euler_gamma - 2 * math.log(2)],
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@IGNORE_FLOAT_WARNINGS
def test_special_points(name, target):
    got = sg.differentiate(FUNCTIONS[name][0], target=target)(SPECIAL)
    want = np.array(EXPECTED[name])
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)
    assert np.array_equal(np.signbit(got[np.isinf(want)]), np.signbit(want[np.isinf(want)]))
    scalar = sg.differentiate(FUNCTIONS[name][0], target=target)(SPECIAL[0])
    assert scalar == pytest.approx(EXPECTED[name][0], rel=1e-14, abs=0)


@IGNORE_FLOAT_WARNINGS
def test_special_points_match_scipy_where_it_is_right():
    """scipy's gammaln(-inf) is -inf and gammaln(5e-310) inf (1/x overflowed); C's lgamma, math's
    and ours give +inf and 709.9. Everything else agrees with scipy.special."""
    with np.errstate(all="ignore"):
        for name, theirs in (("lgamma", scipy.special.gammaln), ("gamma", scipy.special.gamma),
                             ("digamma", scipy.special.digamma)):
            got = sg.differentiate(FUNCTIONS[name][0])(SPECIAL)
            want = theirs(SPECIAL)
            differ = ~np.isclose(got, want, rtol=1e-14, atol=0, equal_nan=True)
            assert set(SPECIAL[differ]) <= ({-INF, 5e-310, -5e-310} if name == "lgamma" else set()), name


def test_eager_calls_on_numpy_values():
    np.testing.assert_array_equal(sg.lgamma(np.array([0.0, -3.0, 1.0])), [INF, INF, 0.0])
    assert sg.gamma(np.float32(4.0)) == 6 and sg.gamma(np.float32(4.0)).dtype == np.float32
    assert sg.lgamma(3) == math.lgamma(3) and np.asarray(sg.lgamma(3)).dtype == np.float64
    np.testing.assert_allclose(sg.digamma(np.arange(1, 5)), scipy.special.digamma(np.arange(1, 5)),
                               rtol=1e-15)
    assert sg.psi is sg.digamma and sg.gammaln is sg.lgamma
    with pytest.raises(ValueError):   # math's functions on static values keep Python's behaviour
        sg.differentiate(lambda x: x * math.lgamma(0.0))(1.0)


# ----------------------------------------------------------------------------------------------
# Derivatives

@pytest.mark.parametrize("target", TARGETS)
def test_derivatives_against_polygamma(target):
    """lgamma' = psi, lgamma'' = psi' (trigamma, from autodiff of the composition), gamma' =
    gamma psi, psi'' on x > 0 and negative points away from the roots of psi''."""
    x = np.concatenate([np.linspace(0.05, 30, 40), [150.0, 1e5, 1e40],
                        -np.linspace(0.05, 9.95, 40)[1::2] - 0.25])
    x = x[np.abs(x - np.rint(x)) > 1e-3]
    d1 = sg.grad(lgamma_f, target=target)
    d2 = sg.grad(lambda v: np.sum(d1(v)), target=target)
    d3 = sg.grad(lambda v: np.sum(d2(v)), target=target)

    def poly(n, v):
        return _want(lambda t: mpmath.polygamma(n, t), v)
    np.testing.assert_allclose(d1(x), poly(0, x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(d2(x), poly(1, x), rtol=1e-13)
    pos = x[x > 0]
    np.testing.assert_allclose(d3(pos), poly(2, pos), rtol=1e-12)
    small = x[x < 30]
    np.testing.assert_allclose(sg.grad(gamma_f, target=target)(small),
                               _want(lambda t: mpmath.gamma(t) * mpmath.digamma(t), small), rtol=1e-13)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_first_and_second_derivatives_against_central_differences(name, target):
    fn = FUNCTIONS[name][0]
    for x in (0.37, 3.3, 12.5, -1.4, -3.7):
        f = sg.differentiate(fn, target=target)
        h = 1e-5 * max(1.0, abs(x))
        numeric = (f(x + h) - f(x - h)) / (2 * h)
        assert abs(f.grad(x) - numeric) <= 1e-7 * max(1.0, abs(numeric)), x
        numeric2 = (f.grad(x + h) - f.grad(x - h)) / (2 * h)
        assert abs(f.grad.grad(x) - numeric2) <= 1e-6 * max(1.0, abs(numeric2)), x
    xs = np.array([[0.3, 2.5, 7.0], [-0.5, -2.25, 4.5]])
    assert sg.check_grad(lambda v: np.sum(fn(v) * v), xs) < 1e-7
    value, tangent = sg.jvp(fn, target=target)(xs, np.ones_like(xs))      # forward mode
    d1 = sg.grad(lambda v: np.sum(fn(v)), target=target)
    np.testing.assert_allclose(tangent, d1(xs), rtol=1e-13)
    d2 = sg.grad(lambda v: np.sum(d1(v)), target=target)
    np.testing.assert_allclose(sg.hessian(lambda v: np.sum(fn(v)), target=target)(xs[0]),
                               np.diag(d2(xs[0])), rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
@IGNORE_FLOAT_WARNINGS
def test_derivatives_at_special_points(target):
    """Integers >= 1/2 (the reflection's tan(pi r) is 0 on the side not taken: it divides by a
    safe operand, no 0 * inf), the shift's boundary at 10, the reflection's at 1/2."""
    d1 = sg.grad(lgamma_f, target=target)
    d2 = sg.grad(sg.grad(lgamma_f), target=target)
    x = np.array([0.5, 1.0, 2.0, 3.0, 10.0, 20.0, 1e300, INF])
    np.testing.assert_allclose(d1(x), [float(mpmath.digamma(v)) if v < INF else INF for v in x],
                               rtol=1e-14)
    np.testing.assert_allclose(d2(x[:6]), _want(lambda t: mpmath.polygamma(1, t), x[:6]), rtol=1e-14)
    np.testing.assert_allclose(d2(x[6:]), [1e-300, 0.0], rtol=1e-14)   # psi'(x) ~ 1 / x
    assert d1(-2.0) != d1(-2.0) and d1(0.0) == -INF and d1(-0.0) == INF   # the poles
    assert sg.grad(gamma_f, target=target)(1.0) == pytest.approx(-np.euler_gamma, rel=1e-15)
    assert sg.grad(gamma_f, target=target)(200.0) == INF


def student_t_nll(nu, x):
    """Student-t negative log likelihood of data x, degrees of freedom nu learned."""
    n = x.shape[0]
    return -(n * (math.lgamma((nu + 1) / 2) - math.lgamma(nu / 2) - 0.5 * math.log(nu * math.pi))
             - (nu + 1) / 2 * np.sum(np.log1p(x * x / nu)))


@pytest.mark.parametrize("target", TARGETS)
def test_student_t_likelihood_with_a_learned_nu(target):
    x = np.random.default_rng(5).standard_t(4.0, 50)
    nu = 3.7
    grad = sg.grad(student_t_nll, target=target)
    want = -(len(x) * (0.5 * scipy.special.digamma((nu + 1) / 2) - 0.5 * scipy.special.digamma(nu / 2)
                       - 0.5 / nu) - 0.5 * np.sum(np.log1p(x * x / nu))
             + (nu + 1) / 2 * np.sum(x * x / (nu * nu + nu * x * x)))
    assert grad(nu, x) == pytest.approx(want, rel=1e-12)
    assert sg.check_grad(student_t_nll, nu, x) < 1e-7
    hess = sg.hessian(student_t_nll)(nu, x)
    h = 1e-5
    assert float(hess) == pytest.approx((grad(nu + h, x) - grad(nu - h, x)) / (2 * h), rel=1e-6)
    assert sg.hvp(student_t_nll)(nu, 1.0, x) == pytest.approx(float(hess), rel=1e-12)


# ----------------------------------------------------------------------------------------------
# Spellings a user writes: math.lgamma / math.gamma on scalars, scipy.special on arrays.

def scipy_mix(x):
    return np.sum(scipy.special.gammaln(x) + scipy.special.digamma(x) * scipy.special.psi(x)
                  + scipy.special.gamma(x / 4) + scipy.special.erf(x / 9) + scipy.special.erfc(x))


def math_mix(x):
    return math.lgamma(x) * math.gamma(x / 3) + math.erf(x)


@pytest.mark.parametrize("target", TARGETS)
def test_scipy_special_and_math_are_recognised(target):
    x = np.array([0.4, 1.7, 5.5])
    f = sg.differentiate(scipy_mix, target=target)
    assert f(x) == pytest.approx(scipy_mix(x), rel=1e-13)
    assert sg.check_grad(f, x) < 1e-7
    g = sg.differentiate(math_mix, target=target)
    assert g(2.3) == pytest.approx(math_mix(2.3), rel=1e-13)
    assert sg.check_grad(g, 2.3) < 1e-7


def test_scipy_on_static_values_keeps_scipy():
    def f(x):
        return x * scipy.special.gammaln(-np.inf)   # scipy's own value: -inf
    assert sg.differentiate(f, target="python")(2.0) == -INF


def test_cpu_calls_the_reentrant_lgamma():
    """glibc's lgamma writes signgam (a data race between the kernel's threads): the CPU calls
    lgamma_r with a local for the sign."""
    text = sg.differentiate(lgamma_f).llvm_ir(np.ones(4))
    assert "symgrad_lgamma_r" in text and '@"symgrad_lgamma"(' not in text
    big = np.linspace(0.1, 50, 200_000)   # enough work for the thread pool
    np.testing.assert_allclose(sg.differentiate(lgamma_f)(big),
                               sg.differentiate(lgamma_f, target="python")(big), rtol=1e-13,
                               atol=1e-15)   # (CPython's lgamma near its root at 2)


@IGNORE_FLOAT_WARNINGS
def test_ptx_emulation_at_special_points():
    for name, (fn, _) in FUNCTIONS.items():
        f = sg.value_and_grad(lambda v: np.sum(fn(v)))
        x = np.concatenate([SPECIAL[np.isfinite(SPECIAL)], [0.7, 3.1, -4.6]])
        graph = f._compiled([x]).graph
        got = ptx_emulate.run(graph, [x])
        want = sg.value_and_grad(lambda v: np.sum(fn(v)), target="python")(x)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-13, err_msg=name)
        x32 = np.array([0.7, 3.1, -4.6, 12.0], np.float32)
        got = ptx_emulate.run(f._compiled([x32]).graph, [x32])
        want = sg.value_and_grad(lambda v: np.sum(fn(v)), target="python")(x32)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=2e-6, err_msg=name)


# ----------------------------------------------------------------------------------------------
# Exports: C (gcc), sympy / LaTeX, the generated NumPy module.

@needs_gcc
def test_c_export_compiles_and_agrees(tmp_path):
    assert GCC is not None
    x = np.array([[0.3, 2.5, 7.0], [-0.5, -2.25, 14.0]])
    for fn in (lgamma_f, gamma_f, digamma_f):
        _compare(sg.value_and_grad(lambda v: np.sum(fn(v)), target="python"), tmp_path, x,
                 rtol=1e-13)
    _compare(sg.value_and_grad(student_t_nll, target="python"), tmp_path, 3.7,
             np.linspace(-2, 2, 7), rtol=1e-13)


def test_sympy_form():
    """lgamma is sympy's loggamma (log|gamma| for symgrad: the same for x > 0), gamma gamma, and
    digamma's composition is recognised and shown as polygamma(0, x), loggamma's derivative in
    sympy, so sympy.diff of the form agrees with symgrad's gradient."""
    x = sympy.Symbol("x", real=True)
    assert sg.differentiate(lgamma_f).sympy(2.5) == sympy.loggamma(x)
    assert sg.differentiate(gamma_f).sympy(2.5) == sympy.gamma(x)
    assert sg.differentiate(gamma_f).latex(2.5) == r"\Gamma\left(x\right)"
    assert sg.grad(lgamma_f).sympy(2.5) == sympy.polygamma(0, x)
    assert sg.grad(gamma_f).sympy(2.5) == sympy.gamma(x) * sympy.polygamma(0, x)
    v = sympy.IndexedBase("v", real=True)[sympy.Symbol("i", integer=True, nonnegative=True)]
    assert sg.grad(lambda v: np.sum(sg.lgamma(v))).sympy(np.ones(300)) == \
        sympy.polygamma(0, v)                     # the symbolic-length form
    nu = sympy.Symbol("nu", real=True)
    data = np.array([0.3, -1.2])
    form, grad_form = sg.differentiate(student_t_nll).sympy(3.7, data), sg.grad(student_t_nll).sympy(3.7, data)
    assert grad_form.has(sympy.polygamma(0, nu / 2))
    assert sympy.simplify(sympy.diff(form, nu) - grad_form) == 0
    trigamma = sg.grad(sg.grad(digamma_f)).sympy(2.5)   # digamma's derivative: its composition
    assert abs(float(trigamma.subs(x, 2.5)) - float(mpmath.polygamma(2, 2.5))) < 1e-13


def test_generated_source_needs_only_numpy(tmp_path):
    g = sg.grad(lambda v: np.sum(sg.lgamma(v) + sg.gamma(v) + sg.digamma(v)), target="python")
    x = np.concatenate([SPECIAL, [0.7, 3.1, -4.6]])
    path = sg.export(g, tmp_path / "grad.py", x)
    np.save(tmp_path / "x.npy", x)
    script = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import numpy as np; import grad; "
              "np.seterr(all='ignore'); "
              f"np.save({str(tmp_path / 'out.npy')!r}, grad.grad_lambda(np.load({str(tmp_path / 'x.npy')!r}))); "
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('symgrad', 'scipy')))")
    run = subprocess.run([sys.executable, "-I", "-c", script], cwd=tmp_path, check=True,
                         capture_output=True, text=True)
    assert run.stdout.strip() == "[]"
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), g(x))
    assert "math" in path.read_text()
