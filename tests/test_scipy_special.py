"""scipy.special's everyday functions on traced values (symgrad.scipy_special): logsumexp,
softmax, log_softmax, expit, logit, xlogy, xlog1py, ndtr, log_ndtr, betaln, entr, rel_entr,
kl_div, huber, pseudo_huber. Values against scipy's on the python and cpu targets in float64
and float32, derivatives against central differences (first and second order), the tails and
special points, scipy's signatures, static calls keeping scipy's own results, and two
realistic programs (a logistic regression loss, a mixture log-likelihood) through grad and
hessian."""
import inspect
import warnings

import numpy as np
import pytest

scipy_special = pytest.importorskip("scipy.special")

import symgrad as sg  # noqa: E402
from symgrad.scipy_special import BUILDERS  # noqa: E402

S = scipy_special
TARGETS = ("python", "cpu")
# the generated NumPy source computes both sides of a select, which may meet inf / NaN
IGNORE_FLOAT_WARNINGS = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _args(name):
    """Each function's arguments, spread over its formulas' regions."""
    r = _rng(sum(map(ord, name)))
    normal = r.normal(size=(5, 6)) * 3
    positive = r.uniform(0.05, 5, size=(5, 6))
    return {
        "logsumexp": (normal,), "softmax": (normal,), "log_softmax": (normal,),
        "expit": (np.concatenate([r.uniform(-40, 40, 24), [0.0, -0.5, 0.5, 1e-8, -1e-8, 30.0]]),),
        "logit": (np.concatenate([r.uniform(0.001, 0.999, 24),
                                  [0.3, 0.65, 0.5, 0.2999, 0.6501, 1e-6]]),),
        "xlogy": (normal, positive), "xlog1py": (normal, r.uniform(-0.95, 5, size=(5, 6))),
        "ndtr": (np.concatenate([r.uniform(-30, 8, 26), [0.0, -1.0, 1.0, -0.6]]),),
        "log_ndtr": (np.concatenate([r.uniform(-60, 10, 24),
                                     [-20.0, -19.99, -20.01, -1.0, -0.99, 6.5]]),),
        "betaln": (np.concatenate([r.uniform(0.1, 30, 20), [2e6, 3e7, 0.5, 1e7, 40.0, 1.0]]),
                   np.concatenate([r.uniform(0.1, 30, 20), [1.5, 2.0, 4e7, 3.0, 1e3, 1.0]])),
        "entr": (positive,), "rel_entr": (positive, r.uniform(0.05, 5, size=(5, 6))),
        "kl_div": (positive, r.uniform(0.05, 5, size=(5, 6))),
        "huber": (r.uniform(0.1, 3, size=(5, 6)), normal),
        "pseudo_huber": (r.uniform(0.1, 3, size=(5, 6)), normal),
    }[name]


# each case: (scipy function, keyword arguments, float64 relative tolerance against scipy)
CASES = {
    "logsumexp": (S.logsumexp, {}, 1e-15), "logsumexp axis=1": (S.logsumexp, {"axis": 1}, 1e-15),
    "logsumexp axis=(0, 1) keepdims": (S.logsumexp, {"axis": (0, 1), "keepdims": True}, 1e-15),
    "softmax": (S.softmax, {}, 1e-14), "softmax axis=0": (S.softmax, {"axis": 0}, 1e-14),
    "log_softmax": (S.log_softmax, {}, 1e-14),
    "log_softmax axis=1": (S.log_softmax, {"axis": 1}, 1e-14),
    "expit": (S.expit, {}, 1e-15), "logit": (S.logit, {}, 1e-15),
    "xlogy": (S.xlogy, {}, 1e-15), "xlog1py": (S.xlog1py, {}, 1e-15),
    "ndtr": (S.ndtr, {}, 1e-14), "log_ndtr": (S.log_ndtr, {}, 1e-14),
    "betaln": (S.betaln, {}, 1e-13), "entr": (S.entr, {}, 1e-15),
    "rel_entr": (S.rel_entr, {}, 1e-15), "kl_div": (S.kl_div, {}, 1e-15),
    "huber": (S.huber, {}, 1e-15), "pseudo_huber": (S.pseudo_huber, {}, 1e-15),
}


def _case(label):
    fn, kwargs, tol = CASES[label]
    name = label.split()[0]

    if len(_args(name)) == 1:
        def call(x):
            return fn(x, **kwargs)
    else:
        def call(x, y):
            return fn(x, y, **kwargs)
    return name, call, tol


def _close(got, want, rtol, name, args):
    """Relative, but absolute on the scale of the arguments where the result is a difference
    of terms of that size (rel_entr's x log(x/y) near x == y, kl_div's - x + y too)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    scale = max(float(np.max(np.abs(a))) for a in args) if name in ("rel_entr", "kl_div") else 1e-3
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale)


def test_every_builder_has_a_case():
    assert {label.split()[0] for label in CASES} == set(BUILDERS)


@IGNORE_FLOAT_WARNINGS
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("label", sorted(CASES))
def test_float64_values_against_scipy(label, target):
    name, call, tol = _case(label)
    args = _args(name)
    got = sg.differentiate(call, target=target)(*args)
    assert np.asarray(got).dtype == np.float64
    _close(got, call(*args), tol, name, args)


@IGNORE_FLOAT_WARNINGS
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("label", sorted(CASES))
def test_float32_values_stay_float32(label, target):
    name, call, _ = _case(label)
    args = tuple(a.astype(np.float32) for a in _args(name))
    if name == "log_ndtr":   # float32's own range: its tail formula takes over below -10
        args = (np.concatenate([args[0][args[0] > -40], np.float32([-10.0, -9.99, -10.01, -35.0])]),)
    if name == "betaln":     # float32 has 7 digits: keep the lgammas of a size it can hold
        args = tuple(np.minimum(a, np.float32(100)) for a in args)
    got = sg.differentiate(call, target=target)(*args)
    assert np.asarray(got).dtype == np.float32
    want = call(*(a.astype(np.float64) for a in args))
    _close(got, want, 3e-5 if name in ("betaln", "logsumexp", "log_softmax") else 4e-6, name, args)


def _wrt(name):
    return tuple(range(len(_args(name))))


def _grad_args(name):
    """The value points, less those central differences cannot measure: logit's below 0.01
    (the step is 6e-6: 1e-6 is out of its domain, 0.004 too curved) and betaln's lgammas of 1e7
    (their differences lose the digits)."""
    args = _args(name)
    if name in ("logit", "betaln"):
        args = tuple(a[:20] if name == "betaln" else a[a > 1e-2] for a in args)
    return args


@IGNORE_FLOAT_WARNINGS
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("label", sorted(CASES))
def test_gradients_against_central_differences(label, target):
    name, call, _ = _case(label)
    args = _grad_args(name)
    for i in _wrt(name):
        f = sg.differentiate(call, wrt=i, target=target)
        assert sg.check_grad(f, *args, wrt=i) < 1e-6, (name, i)


SECOND_ORDER = ["logsumexp axis=1", "softmax axis=0", "log_softmax", "expit", "logit", "xlogy",
                "log_ndtr", "betaln", "kl_div", "pseudo_huber"]


@IGNORE_FLOAT_WARNINGS
@pytest.mark.parametrize("label", SECOND_ORDER)
def test_second_derivatives_against_central_differences(label):
    name, call, _ = _case(label)
    args = _grad_args(name)
    for i in _wrt(name):
        gradient = sg.grad(sg.differentiate(call, wrt=i, target="cpu"), wrt=i)
        # (trigamma through digamma's series: differences of it hold about 6 digits)
        limit = 1e-5 if name == "betaln" else 1e-6
        assert sg.check_grad(gradient, *args, wrt=i) < limit, (name, i)


# ---- tails and special points -----------------------------------------------------------

def _both(fn, *args):
    """fn traced on python and cpu; they agree, and their value is returned."""
    got = [sg.differentiate(fn, target=t)(*args) for t in TARGETS]
    np.testing.assert_allclose(got[1], got[0], rtol=1e-15)   # the CPU's libm: a few ulps
    return got[1]


@IGNORE_FLOAT_WARNINGS
def test_logsumexp_special_slices():
    ninf, inf, nan = -np.inf, np.inf, np.nan
    a = np.array([[ninf, ninf, ninf], [1.0, inf, 2.0], [1.0, nan, 2.0], [ninf, 0.0, ninf],
                  [inf, inf, 0.0], [1000.0, 1000.0, -1000.0], [-1e308, -1e308, 0.0]])
    def f(a):
        return S.logsumexp(a, axis=1)
    want = f(a)
    np.testing.assert_array_equal(want[:5], [ninf, inf, nan, 0.0, inf])
    np.testing.assert_array_equal(_both(f, a), want)
    # a dominant term: the log1p form keeps the small one's contribution (log(1 + 4e-18))
    tiny = np.array([0.0, -40.0])
    assert _both(lambda a: S.logsumexp(a), tiny) == S.logsumexp(tiny) > 0
    # its gradient is the softmax, ties shared, and 0 for the -inf terms
    g = sg.grad(f)(np.array([[3.0, 3.0, ninf], [1.0, 2.0, 3.0]]))
    np.testing.assert_allclose(g, [[0.5, 0.5, 0.0], S.softmax([1.0, 2.0, 3.0])], rtol=1e-15)


@IGNORE_FLOAT_WARNINGS
def test_logsumexp_weights_and_sign():
    a = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 0.0], [2.0, 5.0, 1.0], [0.5, np.inf, 1.0]])
    b = np.array([[1.0, -1.0, 0.5], [1.0, -1.0, 1.0], [1.0, 0.0, -3.0], [1.0, 0.0, 2.0]])

    def signed(a, b):
        return S.logsumexp(a, axis=1, b=b, return_sign=True)

    def unsigned(a, b):
        return S.logsumexp(a, axis=1, b=b)
    for t in TARGETS:
        out, sgn = sg.differentiate(signed, target=t)(a, b)
        want_out, want_sgn = signed(a, b)
        np.testing.assert_allclose(out, want_out, rtol=1e-15)
        np.testing.assert_array_equal(sgn, want_sgn)
        np.testing.assert_allclose(sg.differentiate(unsigned, target=t)(a, b), unsigned(a, b),
                                   rtol=1e-15)   # NaN where the weighted sum is negative
    # gradients in a and in b, a zero weight included (d/db there is exp(a) / sum)
    a, b = a[:3], np.abs(b[:3]) + np.array([[0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    for i in (0, 1):
        assert sg.check_grad(sg.differentiate(unsigned, wrt=i), a, b, wrt=i) < 1e-6
    gb = sg.grad(unsigned, wrt=1)(a, b)
    np.testing.assert_allclose(gb[2, 1], np.exp(5.0) / np.sum(b[2] * np.exp(a[2])), rtol=1e-14)


@IGNORE_FLOAT_WARNINGS
def test_logsumexp_shapes():
    a = _rng(5).normal(size=(4, 6))
    row = _rng(6).uniform(0.1, 2, size=6)
    for fn, args in ((lambda a: S.logsumexp(a, axis=-1), (a,)),
                     (lambda a: S.logsumexp(a, keepdims=True), (a,)),
                     (lambda a, b: S.logsumexp(a, axis=1, b=b), (a, row)),   # b broadcasts
                     (lambda a, b: S.logsumexp(a, b=b, axis=0, keepdims=True), (a, row)),
                     (lambda a: S.logsumexp(a), (np.float64(0.3),)),            # 0-d
                     (lambda a: S.logsumexp(a, axis=0), (a[0, 0],))):
        got = _both(fn, *args)
        want = fn(*args)
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(got, want, rtol=1e-15)
        assert sg.check_grad(fn, *args) < 1e-7
    # lists, of numbers or of traced values, are arrays as in scipy
    def listed(a):
        return S.logsumexp(a, axis=1, b=[1.0, 2.0, 0.5, 1.0, 1.0, 3.0]) \
            + S.softmax([a[0, 0], a[0, 1], 2.0])[0]
    np.testing.assert_allclose(_both(listed, a), listed(a), rtol=1e-15)
    assert sg.check_grad(listed, a) < 1e-7
    # a Python float is a 0-d traced value too
    assert sg.differentiate(lambda x: S.logsumexp(x) + S.expit(x))(0.5) == \
        pytest.approx(0.5 + S.expit(0.5), rel=1e-15)


def test_forward_mode_and_vmap():
    x = _rng(8).normal(size=(3, 5))
    t = _rng(9).normal(size=(3, 5))

    def f(x):
        return S.logsumexp(x, axis=1) + np.sum(S.expit(x) * S.log_ndtr(x), axis=1)
    value, tangent = sg.jvp(f)(x, t)
    np.testing.assert_allclose(value, f(x), rtol=1e-14)
    jac = sg.jacobian(f, mode="rev")(x)
    np.testing.assert_allclose(tangent, np.einsum("iab,ab->i", jac, t), rtol=1e-13)
    per_row = sg.vmap(lambda r: S.logsumexp(r) + S.softmax(r)[0])(x)
    np.testing.assert_allclose(per_row, S.logsumexp(x, axis=1) + S.softmax(x, axis=1)[:, 0],
                               rtol=1e-14)


def test_softmax_along_an_axis_and_over_everything():
    x = _rng(3).normal(size=(3, 4))
    whole = _both(lambda x: S.softmax(x), x)
    assert whole.sum() == pytest.approx(1.0, abs=1e-15)     # scipy's default: the whole array
    np.testing.assert_allclose(whole, S.softmax(x), rtol=1e-15)
    rows = _both(lambda x: S.softmax(x, axis=1), x)
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, rtol=1e-15)
    np.testing.assert_allclose(_both(lambda x: S.log_softmax(x, axis=0), x),
                               S.log_softmax(x, axis=0), rtol=1e-15)
    # saturated: log_softmax stays finite where log(softmax) is -inf
    big = np.array([1000.0, 1.0])
    np.testing.assert_array_equal(_both(lambda x: S.log_softmax(x), big), [0.0, -999.0])


def test_expit_tails_without_overflow():
    x = np.array([-800.0, -50.0, 0.0, 50.0, 800.0, -np.inf, np.inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # no overflow in the generated NumPy source either
        got = _both(lambda x: S.expit(x), x)
        g = sg.grad(lambda x: S.expit(x), target="python")(x)
    np.testing.assert_allclose(got, S.expit(x), rtol=1e-15)
    assert got[2] == 0.5 and got[0] == 0.0 and got[4] == 1.0
    np.testing.assert_allclose(g, S.expit(x) * S.expit(-x), rtol=1e-15)
    assert g[2] == 0.25
    assert np.isnan(_both(lambda x: S.expit(x), np.array([np.nan])))[0]


@IGNORE_FLOAT_WARNINGS
def test_logit_ends():
    p = np.array([0.0, 1.0, -0.5, 1.5, 0.5, np.nan])
    np.testing.assert_array_equal(_both(lambda p: S.logit(p), p), S.logit(p))


@IGNORE_FLOAT_WARNINGS
def test_xlogy_at_x_zero():
    x = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0])
    y = np.array([0.0, 3.0, -1.0, np.inf, np.nan, 0.0, 1e-300])
    for fn, yy, log in ((S.xlogy, y, np.log), (S.xlog1py, y - 1, np.log1p)):
        yy[6] = 1e-300
        def f(x, y, fn=fn):
            return fn(x, y)
        np.testing.assert_array_equal(_both(f, x, yy), fn(x, yy))
        for t in TARGETS:
            gx = sg.grad(f, wrt=0, target=t)(x, yy)
            gy = sg.grad(f, wrt=1, target=t)(x, yy)
            # d/dx at x == 0 is log(y) where that is finite, 0 where y is not in the domain,
            # never NaN (but at y = NaN)
            assert not np.any(np.isnan(gx[:4])) and not np.isnan(gx[6])
            assert gx[1] == pytest.approx(log(yy[1]), rel=1e-15)
            assert gx[6] == pytest.approx(log(1e-300), rel=1e-15)
            np.testing.assert_array_equal(gy[[0, 1, 2, 3, 6]], 0.0)
    # the second derivative in x and y at x == 0: 1 / y
    h = sg.hessian(lambda v: S.xlogy(v[0], v[1]))(np.array([0.0, 2.0]))
    np.testing.assert_allclose(h, [[0.0, 0.5], [0.5, 0.0]], rtol=1e-15)


def test_log_ndtr_far_left():
    import mpmath
    mpmath.mp.dps = 50
    x = np.array([-40.0, -20.5, -20.0, -19.5, -5.0, -1.0, 0.0, 3.0, 10.0, -1e10, -np.inf, np.inf])

    def ref(v):
        return float(mpmath.log(mpmath.ncdf(v))) if np.isfinite(v) else (0.0 if v > 0 else -np.inf)
    got = _both(lambda x: S.log_ndtr(x), x)
    want = np.array([ref(v) for v in x])
    # (x / sqrt 2 rounds: erfc's relative error grows as 2 x^2 ulp, scipy's too)
    np.testing.assert_allclose(got, want, rtol=2e-14)
    np.testing.assert_allclose(got, S.log_ndtr(x), rtol=2e-14)
    assert got[0] == pytest.approx(-804.6084420137538, rel=1e-15)
    # d/dx log Phi(x) = phi(x) / Phi(x), about -x far left
    g = sg.grad(lambda x: S.log_ndtr(x))(x[:10])
    want_g = [float(mpmath.npdf(v) / mpmath.ncdf(v)) for v in x[:10]]
    np.testing.assert_allclose(g, want_g, rtol=5e-14)
    x32 = np.float32([-40.0, -12.0, -10.5, -9.5, -3.0])
    got32 = _both(lambda x: S.log_ndtr(x), x32)
    assert got32.dtype == np.float32 and np.all(np.isfinite(got32))
    np.testing.assert_allclose(got32, [ref(float(v)) for v in x32], rtol=1e-6)


@IGNORE_FLOAT_WARNINGS
def test_special_points_match_scipy():
    ninf, inf, nan = -np.inf, np.inf, np.nan
    pts = np.array([0.0, -0.0, 1.0, -1.0, 2.5, inf, ninf, nan])
    grid_x, grid_y = (v.ravel() for v in np.meshgrid(pts, pts))
    for name in ("rel_entr", "kl_div", "huber", "pseudo_huber", "betaln"):
        fn = getattr(S, name)
        got = _both(lambda x, y, fn=fn: fn(x, y), grid_x, grid_y)
        want = fn(grid_x, grid_y)
        if name == "betaln":   # scipy's own lbeta at +-inf and the poles is its own (cephes)
            keep = np.isfinite(grid_x) & np.isfinite(grid_y) & (grid_x > 0) & (grid_y > 0)
            got, want = got[keep], want[keep]
        np.testing.assert_allclose(got, want, rtol=1e-15, err_msg=name)
    for name in ("entr", "ndtr", "log_ndtr", "expit", "logit"):
        fn = getattr(S, name)
        np.testing.assert_allclose(_both(lambda x, fn=fn: fn(x), pts), fn(pts), rtol=1e-15,
                                   err_msg=name)


@IGNORE_FLOAT_WARNINGS
@pytest.mark.parametrize("target", TARGETS)
def test_entropies_at_zero(target):
    """entr, rel_entr, kl_div are 0 (kl_div: y) at x == 0, and their x-derivative there is
    the one-sided infinite one (-log x - 1 -> +inf for entr, log(x/y) + 1 -> -inf for the
    others), JAX's and PyTorch's; the second derivative -1/x -> -inf."""
    x = np.array([0.0, 0.5, 2.0, -1.0])
    y = np.array([2.0, 1.0, 2.0, 0.5])
    np.testing.assert_array_equal(_both(lambda x: S.entr(x), x), S.entr(x))
    g = sg.grad(lambda x: S.entr(x), target=target)(x)
    np.testing.assert_allclose(g, [np.inf, -np.log(0.5) - 1, -np.log(2.0) - 1, 0.0], rtol=1e-15)
    h = sg.hessian(lambda x: np.sum(S.entr(x)), target=target)(x[:3])
    np.testing.assert_allclose(np.diagonal(h), [-np.inf, -2.0, -0.5], rtol=1e-15)
    for fn, dy0 in ((S.rel_entr, 0.0), (S.kl_div, 1.0)):
        def f(x, y, fn=fn):
            return fn(x, y)
        gx, gy = sg.grad(f, wrt=(0, 1), target=target)(x[:3], y[:3])
        assert gx[0] == -np.inf and gy[0] == dy0
        np.testing.assert_allclose(gx[1:], np.log(x[1:3] / y[1:3]) + (1 if fn is S.rel_entr else 0),
                                   rtol=1e-15, atol=1e-16)


# ---- spellings ---------------------------------------------------------------------------

def test_signatures_are_scipys():
    for name, build in BUILDERS.items():
        theirs = getattr(S, name)
        ours = inspect.signature(build)
        if isinstance(theirs, np.ufunc):
            assert theirs.nin == len(ours.parameters), name
            assert all(p.kind is p.POSITIONAL_ONLY for p in ours.parameters.values()), name
        else:
            assert ours == inspect.signature(theirs), name


def test_static_calls_keep_scipys_results():
    def f(x):
        return x * S.logsumexp(np.array([1.0, 2.0])) + S.expit(3.0) + S.log_ndtr(-40.0) \
            + S.betaln(2.0, 3.0)
    want = S.expit(3.0) + S.log_ndtr(-40.0) + S.betaln(2.0, 3.0)
    assert sg.differentiate(f)(1.0) == f(1.0)
    assert sg.grad(f)(1.0) == S.logsumexp(np.array([1.0, 2.0]))
    assert f(0.0) == want


def test_unsupported_keywords_are_refused_by_name():
    def f(x):
        return S.logsumexp(x, axis=0, bogus=1)
    with pytest.raises(sg.UnsupportedSyntaxError, match="bogus"):
        sg.differentiate(f)(np.ones(3))


# ---- realistic programs ------------------------------------------------------------------

def logistic_loss(w, X, y):
    p = S.expit(X @ w)
    return -np.mean(S.xlogy(y, p) + S.xlogy(1 - y, 1 - p))


def mixture_loglik(mu, X, log_w):
    # log sum_k w_k N(x | mu_k, I), summed over points: logsumexp over the components (axis=1)
    d2 = np.sum((X[:, None, :] - mu[None, :, :]) ** 2, axis=2)
    return np.sum(S.logsumexp(log_w[None, :] - 0.5 * d2, axis=1))


def _logistic_data():
    r = _rng(7)
    X = r.normal(size=(40, 3))
    y = (r.uniform(size=40) < S.expit(X @ np.array([1.0, -2.0, 0.5]))).astype(np.float64)
    return r.normal(size=3) * 0.3, X, y


@pytest.mark.parametrize("target", TARGETS)
def test_logistic_regression_grad_and_hessian(target):
    w, X, y = _logistic_data()
    f = sg.differentiate(logistic_loss, target=target)
    assert f(w, X, y) == pytest.approx(logistic_loss(w, X, y), rel=1e-14)
    p = S.expit(X @ w)
    np.testing.assert_allclose(f.grad(w, X, y), X.T @ (p - y) / len(y), rtol=1e-13)
    h = sg.hessian(logistic_loss, target=target)(w, X, y)
    np.testing.assert_allclose(h, (X.T * (p * (1 - p))) @ X / len(y), rtol=1e-13)
    assert sg.check_grad(f, w, X, y) < 1e-7


@pytest.mark.parametrize("target", TARGETS)
def test_mixture_loglik_grad_and_hessian(target):
    r = _rng(11)
    X, mu, log_w = r.normal(size=(30, 2)) * 2, r.normal(size=(3, 2)), np.log([0.2, 0.5, 0.3])
    f = sg.differentiate(mixture_loglik, target=target)
    assert f(mu, X, log_w) == pytest.approx(mixture_loglik(mu, X, log_w), rel=1e-14)
    d2 = np.sum((X[:, None, :] - mu[None, :, :]) ** 2, axis=2)
    resp = S.softmax(log_w[None, :] - 0.5 * d2, axis=1)
    np.testing.assert_allclose(f.grad(mu, X, log_w),
                               np.einsum("nk,nkd->kd", resp, X[:, None, :] - mu[None, :, :]),
                               rtol=1e-12)
    h = sg.hessian(mixture_loglik, target=target)(mu, X, log_w)
    assert h.shape == (3, 2, 3, 2)
    np.testing.assert_allclose(h, np.transpose(h, (2, 3, 0, 1)), rtol=1e-12, atol=1e-12)
    gradient = sg.grad(mixture_loglik, target=target)
    assert sg.check_grad(gradient, mu, X, log_w) < 1e-6
    assert sg.check_grad(f, mu, X, log_w, wrt=2) < 1e-7


# ---- the GPU back end's kernels, run on the CPU (codegen.ptx_emulate) --------------------

@IGNORE_FLOAT_WARNINGS
@pytest.mark.parametrize("label", ["logsumexp axis=1", "log_softmax axis=1", "expit", "xlogy",
                                   "log_ndtr", "betaln", "pseudo_huber"])
def test_ptx_emulation_of_value_and_grad(label):
    from symgrad.codegen import ptx_emulate
    name, call, _ = _case(label)
    args = _grad_args(name)
    for dtype, rtol in ((np.float64, 1e-13), (np.float32, 2e-5)):
        typed = [a.astype(dtype) for a in args]
        f = sg.value_and_grad(call)
        got = ptx_emulate.run(f._compiled(typed).graph, typed)
        want = sg.value_and_grad(call, target="python")(*typed)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol, err_msg=f"{label} {dtype}")
