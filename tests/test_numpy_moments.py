"""np.cov, np.corrcoef, np.ptp, np.trapezoid and the copying/viewing constructors (np.copy,
np.asanyarray, np.ascontiguousarray, np.asfortranarray): values, dtypes and shapes equal to
NumPy's on python and cpu (float64 and float32 inputs, NumPy's float64 default of cov
included), gradients against central differences, float32 gradients against float64, the
special points (one variable, one observation, a constant row), NumPy's errors, and which
results are fresh memory (a copy may be written into) or a view (writing is refused)."""
import warnings

import numpy as np
import pytest

import symgrad as sg

TARGETS = ["python", "cpu"]
W = np.arange(1.0, 8.0)
FW = [1, 2, 1, 1, 3, 1, 1]

CASES = {
    "cov": lambda x: np.cov(x),
    "cov_rowvar_false": lambda x: np.cov(x.T, rowvar=False),
    "cov_bias": lambda x: np.cov(x, bias=True),
    "cov_ddof": lambda x: np.cov(x, ddof=3),
    "cov_two": lambda x: np.cov(x[0], x[1]),
    "cov_one_variable": lambda x: np.cov(x[0]),
    "cov_fweights": lambda x: np.cov(x, fweights=FW),
    "cov_aweights": lambda x: np.cov(x, aweights=W),
    "cov_both_weights": lambda x: np.cov(x, fweights=FW, aweights=W, ddof=2),
    "cov_dtype32": lambda x: np.cov(x, dtype=np.float32),
    "corrcoef": lambda x: np.corrcoef(x),
    "corrcoef_two": lambda x: np.corrcoef(x[0], x[1]),
    "corrcoef_one": lambda x: np.corrcoef(x[0]),
    "corrcoef_rowvar_false": lambda x: np.corrcoef(x.T, rowvar=False),
    "ptp": lambda x: np.ptp(x),
    "ptp_axis": lambda x: np.ptp(x, axis=1),
    "ptp_keepdims": lambda x: np.ptp(x, axis=0, keepdims=True),
    "trapezoid": lambda x: np.trapezoid(x),
    "trapezoid_axis0": lambda x: np.trapezoid(x, axis=0),
    "trapezoid_dx": lambda x: np.trapezoid(x, dx=0.3),
    "trapezoid_x": lambda x: np.trapezoid(x, x[0] ** 2),
    "trapezoid_x2d": lambda x: np.trapezoid(x, np.cumsum(x * x, axis=1)),
    "copy": lambda x: np.copy(x) * 2,
    "ascontiguousarray_0d": lambda x: np.ascontiguousarray(x[0, 0]),
    "asfortranarray": lambda x: np.asfortranarray(x) + 1,
    "asanyarray": lambda x: np.asanyarray(x) - 1,
}


def _x(dtype=np.float64, seed=0):
    return np.random.default_rng(seed).normal(size=(3, 7)).astype(dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", CASES)
def test_values_dtypes_and_shapes_equal_numpy(name, dtype, target):
    fn = CASES[name]
    x = _x(dtype)
    want, got = fn(x), sg.differentiate(fn, target=target)(x)
    assert np.shape(got) == np.shape(want)
    assert np.asarray(got).dtype == np.asarray(want).dtype
    tol = 1e-12 if np.asarray(want).dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.max(np.abs(want)))


@pytest.mark.parametrize("name", [n for n in CASES if n != "cov_dtype32"])   # (float32 sums)
def test_gradients_against_central_differences(name):
    fn = CASES[name]
    loss = lambda x: np.sum(np.sin(fn(x)) * np.arange(1.0, 1.0 + np.size(fn(x))).reshape(np.shape(fn(x))))  # noqa: E731
    assert sg.check_grad(loss, _x(seed=1)) < 1e-6


@pytest.mark.parametrize("name", ["cov", "corrcoef", "ptp_axis", "trapezoid_x", "copy"])
def test_float32_gradients_follow_float64(name):
    fn = CASES[name]
    loss = lambda x: np.sum(fn(x) ** 2)  # noqa: E731
    x = _x(seed=2)
    g32 = sg.grad(loss, target="cpu")(x.astype(np.float32))
    np.testing.assert_allclose(g32, sg.grad(loss, target="cpu")(x), rtol=2e-4, atol=2e-4)
    assert g32.dtype == np.float32


@pytest.mark.parametrize("target", TARGETS)
def test_special_points_as_numpy(target):
    """One observation (no degrees of freedom: NumPy divides by zero, nan/inf), a constant
    row (corrcoef 0/0 = nan there, the others finite), ptp at ties (0)."""
    one = np.array([[1.0], [2.0]])
    const = np.array([[1.0, 1.0, 1.0], [0.0, 2.0, 5.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for fn, x in ((lambda x: np.cov(x), one), (lambda x: np.corrcoef(x), const),
                      (lambda x: np.cov(x), const), (lambda x: np.ptp(x, axis=1), const)):
            np.testing.assert_array_equal(sg.differentiate(fn, target=target)(x), fn(x))
    # corrcoef's gradient where the row is not constant: its diagonal is 1 whatever x is
    g = sg.grad(lambda x: np.sum(np.diag(np.corrcoef(x))), target=target)(_x())
    np.testing.assert_allclose(g, 0.0, atol=1e-12)


def test_numpy_errors_and_refusals():
    with pytest.raises(sg.UnsupportedSyntaxError, match="pass fweights as a constant"):
        sg.differentiate(lambda x, w: np.cov(x, fweights=w))(_x(), np.ones(7))
    with pytest.raises(ValueError, match="aweights cannot be negative"):
        sg.differentiate(lambda x: np.cov(x, aweights=-W))(_x())
    with pytest.raises(TypeError, match="fweights must be integer"):
        sg.differentiate(lambda x: np.cov(x, fweights=W / 2))(_x())
    with pytest.raises(RuntimeError, match="incompatible numbers of samples"):
        sg.differentiate(lambda x: np.cov(x, aweights=W[:3]))(_x())
    with pytest.raises(ValueError, match="more than 2 dimensions"):
        sg.differentiate(lambda x: np.cov(x))(np.ones((2, 2, 2)))
    with pytest.raises(sg.UnsupportedSyntaxError, match="out="):
        sg.differentiate(lambda x: np.ptp(x, out=x))(_x())


@pytest.mark.parametrize("target", TARGETS)
def test_a_copy_is_fresh_memory_and_the_as_functions_are_views(target):
    """np.copy of an argument may be written into (the caller's array is untouched); the
    as*array functions may return the argument itself, so writing into them is refused."""
    def written_copy(x):
        y = np.copy(x)
        y[0] = 5.0
        return np.sum(y * x)
    x = np.array([1.0, 2.0, 3.0])
    kept = x.copy()
    assert sg.differentiate(written_copy, target=target)(x) == written_copy(kept)
    np.testing.assert_array_equal(x, kept)
    np.testing.assert_array_equal(sg.grad(written_copy, target=target)(x), [5.0, 4.0, 6.0])
    for spelling in (np.asarray, np.asanyarray, np.ascontiguousarray, np.asfortranarray):
        def written_view(x, f=spelling):
            y = f(x)
            y[0] = 5.0
            return np.sum(y)
        with pytest.raises(sg.UnsupportedSyntaxError, match="argument"):
            sg.differentiate(written_view, target=target)(x)


@pytest.mark.parametrize("target", TARGETS)
def test_np_shape_size_and_ndim_of_traced_arrays_are_static_ints(target):
    def f(x):
        n, m = np.shape(x)
        scale = np.size(x) + np.size(x, 1) * 10 + np.ndim(x) * 100
        return np.sum(x) * scale / (n * m)
    x = _x()
    np.testing.assert_allclose(sg.differentiate(f, target=target)(x), f(x), rtol=1e-14)
    assert "np.full_like(x, 13.8571428571428" in sg.differentiate(f).grad.source_for(x)  # 291/21
