"""Every op's derivative against central finite differences: first order on scalars and arrays,
float64 and float32; second order through grad-of-grad on scalar functions."""
import math

import numpy as np
import pytest

import symgrad as sg

# (name, function, low, high): inputs are drawn uniformly from [low, high].
UNARY = [
    ("neg", lambda x: -x, -2, 2),
    ("exp", lambda x: np.exp(x), -2, 2),
    ("log", lambda x: np.log(x), 0.2, 3),
    ("log1p", lambda x: np.log1p(x), -0.5, 3),
    ("expm1", lambda x: np.expm1(x), -2, 2),
    ("sqrt", lambda x: np.sqrt(x), 0.2, 3),
    ("sin", lambda x: np.sin(x), -3, 3),
    ("cos", lambda x: np.cos(x), -3, 3),
    ("tan", lambda x: np.tan(x), -1.2, 1.2),
    ("arcsin", lambda x: np.arcsin(x), -0.9, 0.9),
    ("arccos", lambda x: np.arccos(x), -0.9, 0.9),
    ("arctan", lambda x: np.arctan(x), -3, 3),
    ("sinh", lambda x: np.sinh(x), -2, 2),
    ("cosh", lambda x: np.cosh(x), -2, 2),
    ("tanh", lambda x: np.tanh(x), -2, 2),
    ("abs", lambda x: np.abs(x), 0.1, 2),
    ("abs_neg", lambda x: abs(x), -2, -0.1),
    ("square", lambda x: x ** 2, -2, 2),
    ("cube", lambda x: x ** 3.0, -2, 2),
    ("rpow", lambda x: 2.0 ** x, -2, 2),
    ("reciprocal", lambda x: 1.0 / x, 0.5, 2),
    ("math_exp", lambda x: sg.exp(x) * sg.sin(x), -2, 2),
    ("sign_times", lambda x: np.sign(x) * x * x, 0.1, 2),
    ("cast32", lambda x: np.float32(2.0) * x, -2, 2),
]

BINARY = [
    ("add", lambda x, y: x + y, -2, 2),
    ("sub", lambda x, y: x - y, -2, 2),
    ("mul", lambda x, y: x * y, -2, 2),
    ("div", lambda x, y: x / y, 0.5, 2),
    ("pow", lambda x, y: x ** y, 0.5, 2),
    ("arctan2", lambda x, y: np.arctan2(x, y), 0.3, 2),
    ("maximum", lambda x, y: np.maximum(x, y * 1.3), 0.1, 2),
    ("minimum", lambda x, y: np.minimum(x, y * 1.3), 0.1, 2),
    ("where", lambda x, y: np.where(x > y, x * y, x - y), -2, 2),
    ("hypot", lambda x, y: np.sqrt(x * x + y * y), 0.3, 2),
]


def _rand(rng, low, high, shape):
    return rng.uniform(low, high, size=shape) if shape else float(rng.uniform(low, high))


@pytest.mark.parametrize("shape", [(), (5,), (2, 3)])
@pytest.mark.parametrize("name, fn, low, high", UNARY, ids=[u[0] for u in UNARY])
def test_unary_first_order(name, fn, low, high, shape):
    rng = np.random.default_rng(0)
    x = _rand(rng, low, high, shape)
    assert sg.check_grad(fn, x) < 1e-6


@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("name, fn, low, high", BINARY, ids=[b[0] for b in BINARY])
def test_binary_first_order(name, fn, low, high, shape):
    rng = np.random.default_rng(1)
    x, y = _rand(rng, low, high, shape), _rand(rng, low, high, shape)
    assert sg.check_grad(fn, x, y, wrt=(0, 1)) < 1e-6


@pytest.mark.parametrize("name, fn, low, high", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcasting(name, fn, low, high):
    """A scalar and a (2, 3) array, a row and a column: unbroadcasting sums correctly."""
    rng = np.random.default_rng(2)
    assert sg.check_grad(fn, float(rng.uniform(low, high)), rng.uniform(low, high, (2, 3)), wrt=(0, 1)) < 1e-6
    assert sg.check_grad(fn, rng.uniform(low, high, (3, 1)), rng.uniform(low, high, (4,)), wrt=(0, 1)) < 1e-6


@pytest.mark.parametrize("name, fn, low, high", UNARY, ids=[u[0] for u in UNARY])
def test_unary_float32(name, fn, low, high):
    """float32 gradients keep the dtype and agree with float64 to float32 precision."""
    x64 = np.random.default_rng(3).uniform(low, high, 6)
    x32 = x64.astype(np.float32)
    g32 = sg.grad(fn, target="python")(x32)
    g64 = sg.grad(fn, target="python")(x32.astype(np.float64))
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, g64, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name, fn, low, high", UNARY[:16], ids=[u[0] for u in UNARY[:16]])
def test_unary_second_order(name, fn, low, high):
    """grad-of-grad of a scalar function is its second derivative."""
    x = 0.5 * (low + high) + 0.1
    f = sg.differentiate(fn, target="python")
    h = 1e-4
    numeric = (f.grad(x + h) - f.grad(x - h)) / (2 * h)
    assert abs(f.grad.grad(x) - numeric) <= 1e-6 * max(1.0, abs(numeric))


@pytest.mark.parametrize("name, fn, low, high", BINARY[:6], ids=[b[0] for b in BINARY[:6]])
def test_binary_second_order(name, fn, low, high):
    x, y = 0.7 * low + 0.3 * high, 0.4 * low + 0.6 * high
    f = sg.differentiate(fn, wrt=0, target="python")
    h = 1e-4
    numeric = (f.grad(x + h, y) - f.grad(x - h, y)) / (2 * h)
    assert abs(f.grad.grad(x, y) - numeric) <= 1e-6 * max(1.0, abs(numeric))


# Reductions, linear algebra and shape ops.
ARRAY_FUNCTIONS = [
    ("sum", lambda x: np.sum(np.sin(x)), (3, 4)),
    ("sum_axis0", lambda x: np.sum(np.sin(x) * np.sum(x, axis=0)), (3, 4)),
    ("sum_axis1_keepdims", lambda x: np.sum(x * np.sum(x * x, axis=1, keepdims=True)), (3, 4)),
    ("sum_neg_axis", lambda x: np.sum(np.cos(np.sum(x, axis=-1))), (2, 3, 4)),
    ("sum_axes_tuple", lambda x: np.sum(np.exp(np.sum(x, axis=(0, 2)))), (2, 3, 4)),
    ("mean", lambda x: np.mean(x * x) + x.mean(axis=0).sum(), (3, 4)),
    ("prod", lambda x: np.prod(x, axis=1).sum(), (3, 4)),
    ("max", lambda x: np.max(x * x), (3, 4)),
    ("max_axis", lambda x: np.sum(np.max(np.sin(x), axis=0)), (3, 4)),
    ("min_axis_keepdims", lambda x: np.sum(x - np.min(x, axis=1, keepdims=True)), (3, 4)),
    ("reduce_max_tf", lambda x: sg.reduce_sum(sg.exp(x - sg.reduce_max(x))), (5,)),
    ("dot_vv", lambda x: np.dot(x, np.cos(x)), (5,)),
    ("matmul_mm", lambda x: np.sum(np.tanh(x @ x.T)), (3, 4)),
    ("matmul_mv", lambda x: np.sum((x @ np.arange(4.0)) ** 2), (3, 4)),
    ("matmul_vm", lambda x: np.sum(np.sin(np.arange(3.0) @ x)), (3, 4)),
    ("matmul_batch", lambda x: np.sum(np.sin(x @ np.transpose(x, (0, 2, 1)))), (2, 3, 4)),
    ("transpose", lambda x: np.sum(x.T * np.arange(12.0).reshape(4, 3)), (3, 4)),
    ("reshape", lambda x: np.sum(np.sin(x.reshape(2, 6)) * np.arange(12.0).reshape(2, 6)), (3, 4)),
    ("reshape_neg", lambda x: np.sum(np.exp(x.reshape(-1)) * np.arange(12.0)), (3, 4)),
    ("getitem_int", lambda x: x[0] * x[-1] + x[2] ** 2, (5,)),
    ("getitem_slice", lambda x: np.sum(x[1:] - x[:-1] ** 2), (6,)),
    ("getitem_stride", lambda x: np.sum(x[::2] * x[1::2]), (6,)),
    ("getitem_reverse", lambda x: np.sum(x * x[::-1] * np.arange(6.0)), (6,)),
    ("getitem_2d", lambda x: np.sum(x[1, :] * x[:, 2].sum()) + np.sum(x[:2, 1:3] ** 2), (3, 4)),
    ("getitem_newaxis", lambda x: np.sum(x[:, None] * x[None, :]), (4,)),
    ("stack", lambda x: np.sum(np.stack([x, x * x, np.sin(x)], axis=1) ** 2), (4,)),
    ("concatenate", lambda x: np.sum(np.concatenate([x, x[:2] * 3.0]) ** 2), (4,)),
    ("broadcast_rows", lambda x: np.sum(np.exp(x - np.max(x, axis=1, keepdims=True))), (3, 4)),
    ("clip", lambda x: np.sum(np.clip(x, -0.5, 0.5) * x), (7,)),
    ("where_arrays", lambda x: np.sum(np.where(x > 0, np.sin(x), x * x)), (7,)),
    ("logsumexp", lambda x: np.log(np.sum(np.exp(x))), (6,)),
    ("zeros_like", lambda x: np.sum(x * x + np.ones_like(x) + np.zeros(x.shape)), (5,)),
    ("gather_rows", lambda x: np.sum(np.sin(x[np.array([2, 0, 2, -1])]) * np.arange(4.0)[:, None]), (3, 4)),
    ("gather_cols", lambda x: np.sum(np.exp(x[:, [3, 3, 0]]) * x[:, [1, 2, 0]]), (3, 4)),
    ("norm_var_std", lambda x: np.linalg.norm(x) + np.var(x) * np.std(x, axis=0).sum()
     + np.linalg.norm(x, axis=1).sum() + np.log2(np.hypot(x, 2.0)).sum(), (3, 4)),
    ("np_take", lambda x: np.sum(np.take(x, np.array([[0, 1], [1, 1]]), axis=1) ** 3), (3, 2)),
    # without axis=, np.take reads the flattened array (it took rows: a wrong value)
    ("np_take_flat", lambda x: np.sum(np.take(x, np.array([5, 0, 5, -2])) ** 3) + np.take(x, 1), (3, 2)),
    ("take_method_argmax", lambda x: x.take(np.argmax(x)) ** 2 * np.sum(x), (3, 2)),
]


@pytest.mark.parametrize("name, fn, shape", ARRAY_FUNCTIONS, ids=[a[0] for a in ARRAY_FUNCTIONS])
def test_array_ops_first_order(name, fn, shape):
    rng = np.random.default_rng(4)
    x = rng.uniform(-1.5, 1.5, shape)
    if name == "prod":
        x = rng.uniform(0.5, 1.5, shape)
    assert sg.check_grad(fn, x) < 1e-6


@pytest.mark.parametrize("name, fn, shape", ARRAY_FUNCTIONS, ids=[a[0] for a in ARRAY_FUNCTIONS])
def test_array_ops_float32(name, fn, shape):
    x = np.random.default_rng(5).uniform(0.5, 1.5, shape)
    g32 = sg.grad(fn, target="python")(x.astype(np.float32))
    g64 = sg.grad(fn, target="python")(x)
    assert g32.dtype == np.float32 and g32.shape == x.shape
    np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-4)


def test_kink_conventions():
    """Derivatives at kinks follow JAX: abs'(0) = 0; max ties split evenly, and so do
    np.maximum/np.minimum ties (what a central difference gives there)."""
    assert sg.grad(lambda x: abs(x), target="python")(0.0) == 0.0
    g = sg.grad(lambda x: np.max(x), target="python")(np.array([1.0, 3.0, 3.0]))
    np.testing.assert_array_equal(g, [0.0, 0.5, 0.5])


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_extremum_ties_split_evenly(name, target):
    """np.maximum/np.minimum on a tie: half the cotangent to each operand (JAX), equal to the
    central difference; off the tie all of it to the operand that is the result; a NaN
    operand gives no finite share. Forward mode agrees (tangent (t_x + t_y) / 2 on a tie)."""
    fn = getattr(np, name)
    grad = sg.grad(lambda x, y: np.sum(fn(x, y)), wrt=(0, 1), target=target)
    x = np.array([1.0, 2.0, 0.0, -3.0, np.inf, np.nan])
    y = np.array([1.0, 0.5, 0.0, 4.0, np.inf, 1.0])
    gx, gy = grad(x, y)
    x_wins = fn(x[:4], y[:4]) == x[:4]
    np.testing.assert_array_equal(gx[:4], np.where(x[:4] == y[:4], 0.5, x_wins))
    np.testing.assert_array_equal(gy[:4], np.where(x[:4] == y[:4], 0.5, ~x_wins))
    assert (gx[4], gy[4]) == (0.5, 0.5) and (gx[5], gy[5]) == (0.0, 0.0)
    h = 1e-6
    central = (fn(1.0 + h, 1.0) - fn(1.0 - h, 1.0)) / (2 * h)
    assert abs(gx[0] - central) < 1e-9
    jvp = sg.jvp(lambda x, y: fn(x, y), wrt=(0, 1), target=target)
    assert jvp(1.0, 1.0, 1.0, 3.0)[1] == 2.0
    assert jvp(2.0, 1.0, 1.0, 3.0)[1] == (1.0 if name == "maximum" else 3.0)
    np.testing.assert_array_equal(sg.grad(lambda x: np.sum(np.clip(x, 0.0, 1.0)), target=target)(
        np.array([0.0, 1.0, 0.5, 2.0])), [0.5, 0.5, 1.0, 0.0])


def test_sympy_agrees_on_a_composite():
    """The generated derivative equals sympy.diff of the same expression."""
    import sympy
    s = sympy.Symbol("s")
    expr = sympy.sin(s) * sympy.exp(-s * s) + sympy.log(1 + s * s) * sympy.tanh(s)
    reference = sympy.lambdify(s, sympy.diff(expr, s))
    g = sg.grad(lambda x: np.sin(x) * np.exp(-x * x) + np.log1p(x * x) * np.tanh(x), target="python")
    for v in (-1.3, -0.2, 0.0, 0.4, 2.0):
        assert abs(g(v) - reference(v)) <= 1e-13 * max(1.0, abs(reference(v)))


@pytest.mark.parametrize("shape", [(), (4,)])
def test_stop_gradient_is_identity_forward_zero_backward(shape):
    x = _rand(np.random.default_rng(6), -2, 2, shape)
    f = sg.differentiate(lambda x: x * sg.stop_gradient(x) + np.sin(sg.stop_gradient(x)), target="python")
    np.testing.assert_allclose(f(x), x * x + np.sin(x))
    np.testing.assert_array_equal(f.grad(x), x)   # d/dx of x * c at c = x


def test_gather_with_traced_integer_labels():
    """Row lookup by integer data (an embedding table), its gradient a scatter-add."""
    def lookup(table, labels):
        return np.sum(np.tanh(table[labels]) ** 2)
    table = np.random.default_rng(7).standard_normal((3, 4))
    labels = np.array([0, 2, 2, 1])
    assert sg.check_grad(lookup, table, labels) < 1e-6
    source = sg.grad(lookup).source_for(table, labels)
    assert "np.add.at(b_table, (labels,)," in source
    f = sg.differentiate(lookup, target="python")
    with pytest.raises(IndexError):
        f(table, np.array([0, 3]))


def test_matmul_shared_matrix_over_a_batch():
    """A plain matrix applied to a batch: its gradient folds the batch into one matmul."""
    def batched(w, x):
        return np.sum(np.sin(x @ w)) + np.sum(np.cos(w @ np.transpose(x, (0, 2, 1))))
    rng = np.random.default_rng(8)
    w, x = rng.standard_normal((3, 3)), rng.standard_normal((4, 2, 3))
    assert sg.check_grad(batched, w, x, wrt=(0, 1)) < 1e-6
    source = sg.grad(batched).source_for(w, x)
    code = [line for line in source.splitlines() if not line.strip().startswith("#")]
    assert sum(line.count("@") for line in code) == 4   # no per-batch products summed afterwards


# ----------------------------------------------------------------------------------------------
# NumPy coverage (issue 12): the functions real gradient code calls, on both targets. Values are
# checked against NumPy itself (the function run eagerly is NumPy's reference).
NUMPY_UNARY = [
    ("arcsinh", lambda x: np.arcsinh(x), -3, 3),
    ("arccosh", lambda x: np.arccosh(x), 1.2, 4),
    ("arctanh", lambda x: np.arctanh(x), -0.8, 0.8),
    ("exp2", lambda x: np.exp2(x), -2, 2),
    ("log2", lambda x: np.log2(x), 0.2, 3),
    ("log10", lambda x: np.log10(x), 0.2, 3),
    ("cbrt", lambda x: np.cbrt(x), 0.2, 3),
    ("cbrt_negative", lambda x: np.cbrt(x), -3, -0.2),
    ("erf", lambda x: sg.erf(x) * x, -2, 2),
    ("math_erfc", lambda x: math.erfc(x) if not isinstance(x, np.ndarray) else sg.erfc(x), -2, 2),
    ("lgamma", lambda x: sg.lgamma(x), 2.5, 14),
    ("math_lgamma", lambda x: math.lgamma(x) if not isinstance(x, np.ndarray) else sg.lgamma(x), 0.2, 0.9),
    ("lgamma_negative", lambda x: sg.lgamma(x), -3.9, -3.3),
    ("gamma", lambda x: sg.gamma(x), 0.2, 6),
    ("gamma_negative", lambda x: sg.gamma(x), -1.9, -1.1),
    ("digamma", lambda x: sg.digamma(x), 2, 14),
    ("digamma_reflected", lambda x: sg.digamma(x), -2.45, -2.1),
    ("deg2rad", lambda x: np.sin(np.deg2rad(x * 50)) + np.radians(x), -2, 2),
    ("rad2deg", lambda x: np.rad2deg(x) * np.degrees(x), -2, 2),
    ("sinc", lambda x: np.sinc(x), -2, 2),
    ("square", lambda x: np.square(x), -2, 2),
    ("reciprocal", lambda x: np.reciprocal(x), 0.5, 2),
    ("floor", lambda x: np.floor(x * 3) * x, -2, 2),
    ("ceil", lambda x: np.ceil(x * 3) * x, -2, 2),
    ("rint", lambda x: (np.rint(x * 3) + np.round(x, 1) + np.around(x)) * x, -2, 2),
    ("trunc", lambda x: np.trunc(x * 3) * x + np.fix(x), -2, 2),
    ("nan_to_num", lambda x: np.nan_to_num(np.log(x)) * x, 0.2, 3),
    ("mod_const", lambda x: (x * 3) % 0.7 + np.mod(x, -0.3), -2, 2),
    ("floordiv_const", lambda x: ((x * 3) // 0.7) * x, -2, 2),
    ("real_imag_conj", lambda x: np.real(x) * np.conj(x) + np.imag(x) + np.conjugate(x), -2, 2),
]

NUMPY_BINARY = [
    ("hypot", lambda x, y: np.hypot(x, y), -2, 2),
    ("fmod", lambda x, y: np.fmod(x * 3, y), 0.3, 2),
    ("remainder", lambda x, y: np.remainder(x * 3, y) + (x * 5) % (-y), 0.3, 2),
    ("fmax", lambda x, y: np.fmax(x, y * 1.3), 0.1, 2),
    ("fmin", lambda x, y: np.fmin(x, y * 1.3), 0.1, 2),
    ("logaddexp2", lambda x, y: np.logaddexp2(x, y), -2, 2),
    ("copysign", lambda x, y: np.copysign(x, y - 1.0), 0.1, 2),
]

TARGETS = ("python", "cpu")


def _on(target, fn, wrt=0):
    return sg.differentiate(fn, wrt=wrt, target=target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(), (5,), (2, 3)])
@pytest.mark.parametrize("name, fn, low, high", NUMPY_UNARY, ids=[u[0] for u in NUMPY_UNARY])
def test_numpy_unary(name, fn, low, high, shape, target):
    x = _rand(np.random.default_rng(10), low, high, shape)
    f = _on(target, fn)
    np.testing.assert_allclose(f(x), fn(x), rtol=1e-13, atol=1e-15)
    assert sg.check_grad(f, x) < 1e-6


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, fn, low, high", NUMPY_UNARY, ids=[u[0] for u in NUMPY_UNARY])
def test_numpy_unary_second_order_and_float32(name, fn, low, high, target):
    x = 0.37 * low + 0.63 * high
    f = _on(target, fn)
    h = 1e-4
    numeric = (f.grad(x + h) - f.grad(x - h)) / (2 * h)
    assert abs(f.grad.grad(x) - numeric) <= 1e-6 * max(1.0, abs(numeric))
    x64 = np.random.default_rng(11).uniform(low, high, 6)
    g32 = f.grad(x64.astype(np.float32))
    assert g32.dtype == np.float32
    assert f(x64.astype(np.float32)).dtype == np.asarray(fn(x64.astype(np.float32))).dtype
    np.testing.assert_allclose(g32, f.grad(x64.astype(np.float32).astype(np.float64)), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("name, fn, low, high", NUMPY_BINARY, ids=[b[0] for b in NUMPY_BINARY])
def test_numpy_binary(name, fn, low, high, shape, target):
    rng = np.random.default_rng(12)
    x, y = _rand(rng, low, high, shape), _rand(rng, low, high, shape)
    f = _on(target, fn, (0, 1))
    np.testing.assert_allclose(f(x, y), fn(x, y), rtol=1e-13, atol=1e-15)
    assert sg.check_grad(f, x, y, wrt=(0, 1)) < 1e-6
    assert sg.check_grad(f, float(rng.uniform(low, high)), rng.uniform(low, high, (2, 3)), wrt=(0, 1)) < 1e-6
    g = sg.differentiate(fn, wrt=0, target=target)
    x0, y0 = 0.7 * low + 0.3 * high, 0.4 * low + 0.6 * high
    numeric = (g.grad(x0 + 1e-4, y0) - g.grad(x0 - 1e-4, y0)) / 2e-4
    assert abs(g.grad.grad(x0, y0) - numeric) <= 1e-6 * max(1.0, abs(numeric))


@pytest.mark.parametrize("target", TARGETS)
def test_numpy_elementwise_special_points(target):
    """Derivatives and values where the formulas have a special case."""
    sinc = sg.differentiate(lambda x: np.sinc(x), target=target)
    assert sinc(0.0) == 1.0 and sinc.grad(0.0) == 0.0
    assert abs(sinc.grad.grad(0.0) - (-math.pi ** 2 / 3)) < 1e-12
    hyp = sg.differentiate(lambda a, b: np.hypot(a, b), wrt=(0, 1), target=target)
    big = np.array([3e200, -1e300, 0.0, 3.0])
    other = np.array([4e200, 1e300, 0.0, -4.0])
    np.testing.assert_allclose(hyp(big, other), np.hypot(big, other), rtol=1e-15)
    ga, gb = hyp.grad(big, other)
    np.testing.assert_allclose(ga, [0.6, -2 ** -0.5, 0.0, 0.6], rtol=1e-15)
    np.testing.assert_allclose(gb, [0.8, 2 ** -0.5, 0.0, -0.8], rtol=1e-15)
    fm = sg.differentiate(lambda a, b: np.fmax(a, b) + np.fmin(a, b), wrt=(0, 1), target=target)
    a, b = np.array([np.nan, 1.0, np.nan, 2.0]), np.array([1.0, np.nan, np.nan, 3.0])
    np.testing.assert_array_equal(fm(a, b), np.fmax(a, b) + np.fmin(a, b))
    ga, gb = fm.grad(np.array([np.nan, 1.0, 2.0]), np.array([1.0, np.nan, 3.0]))
    np.testing.assert_array_equal(ga, [0.0, 2.0, 1.0])
    np.testing.assert_array_equal(gb, [2.0, 0.0, 1.0])
    # % and // follow NumPy: the sign of the divisor, -0.0 and a / 0
    a = np.array([5.5, -5.5, 5.5, -5.5, 6.0, -6.0, 0.0, 1.0, 1e17, -0.0])
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, -2.0, 0.0, 3.0, 2.0])
    ops = sg.differentiate(lambda a, b: (a % b, a // b, np.divmod(a, b)[0]), wrt=(0, 1), target=target)
    with np.errstate(all="ignore"):
        want = (a % b, a // b, a // b)
    for got, exp in zip(ops(a, b), want):
        np.testing.assert_array_equal(got, exp)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(exp))
    rem = sg.differentiate(lambda a, b: a % b, wrt=(0, 1), target=target)
    ga, gb = rem.grad(a[:6], b[:6])
    np.testing.assert_array_equal(ga, np.ones(6))
    np.testing.assert_array_equal(gb, -np.floor(a[:6] / b[:6]))
    ints = sg.differentiate(lambda x, k: x * (k % 3) + x * (k // -3), target=target)
    k = np.array([-7, -1, 0, 4, 8])
    np.testing.assert_array_equal(ints(np.ones(5), k), k % 3 + k // -3)
    nan = sg.differentiate(lambda x: np.nan_to_num(x, nan=1.5, posinf=7.0) * x, target=target)
    x = np.array([np.nan, np.inf, -np.inf, 2.0])
    np.testing.assert_array_equal(nan(x)[[0, 3]], [np.nan, 4.0])   # nan * 1.5 is nan
    np.testing.assert_array_equal(nan.grad(np.array([2.0, 3.0])), [4.0, 6.0])
    cb = sg.differentiate(lambda x: np.cbrt(x), target=target)
    np.testing.assert_allclose(cb(np.array([-8.0, 27.0])), [-2.0, 3.0], rtol=1e-15)
    np.testing.assert_allclose(cb.grad(np.array([-8.0, 27.0])), [1 / 12, 1 / 27], rtol=1e-14)
    r = sg.differentiate(lambda x: np.round(x) + np.round(x, 2) + np.round(x, -1), target=target)
    x = np.array([0.5, 1.5, 2.5, -0.5, 12.345, 15.0])
    np.testing.assert_array_equal(r(x), np.round(x) + np.round(x, 2) + np.round(x, -1))
    np.testing.assert_array_equal(r.grad(x), np.zeros(6))


W = np.linspace(0.5, 1.7, 60)   # fixed weights: every output element gets its own cotangent


def _weigh(y):
    y = np.ravel(y) if not isinstance(y, list) else np.concatenate([np.ravel(v) for v in y])
    return np.sum(np.sin(y) * W[:y.size]) if y.size <= 60 else np.sum(np.sin(y))


NUMPY_ARRAY = [
    ("moveaxis", lambda x: np.moveaxis(x, 0, -1), (2, 3, 4)),
    ("moveaxis_multi", lambda x: np.moveaxis(x, [0, 1], [-1, 0]), (2, 3, 4)),
    ("swapaxes", lambda x: np.swapaxes(x, 0, 2), (2, 3, 4)),
    ("rollaxis", lambda x: np.rollaxis(x, 2, 0), (2, 3, 4)),
    ("expand_dims", lambda x: np.expand_dims(x, (0, -1)) * np.arange(12.0).reshape(1, 3, 4, 1), (3, 4)),
    ("squeeze_axis", lambda x: np.squeeze(x, axis=1), (3, 1, 4)),
    ("ravel", lambda x: np.ravel(x.T), (3, 4)),
    ("flip", lambda x: np.flip(x) + np.flip(x, 1) + np.fliplr(x) + np.flipud(x), (3, 4)),
    ("roll", lambda x: np.roll(x, 2) * np.roll(x, -1, axis=1) + np.roll(x, (1, 2), axis=(0, 1)), (3, 4)),
    ("rot90", lambda x: np.rot90(x) * 2 + np.rot90(x, 2).T[:, :3].sum() + np.rot90(x, -1), (4, 4)),
    ("tile", lambda x: np.tile(x, (2, 1, 3)), (3, 4)),
    ("repeat", lambda x: np.concatenate([np.repeat(x, 2), np.repeat(x, [1, 0, 3], axis=0).ravel()]), (3, 2)),
    ("pad_constant", lambda x: np.pad(x, ((1, 2), (0, 1)), constant_values=0.5), (3, 4)),
    ("pad_modes", lambda x: np.concatenate([np.pad(x, 2, mode="edge").ravel(), np.pad(x, (1, 2), mode="reflect").ravel(),
                                            np.pad(x, 1, mode="wrap").ravel()]), (3, 4)),
    ("atleast", lambda x: np.atleast_3d(x) * np.atleast_2d(x[0]).sum() + np.atleast_1d(x[0, 0]).sum(), (3, 4)),
    ("diag_both", lambda x: np.diag(x) + np.diag(np.diag(x), 1)[:3, :3].sum() + np.diag(x[0], -2).sum(), (4, 4)),
    ("diagonal_offset", lambda x: np.concatenate([np.diagonal(x, 1), np.diagonal(x, -1), np.trace(x, 1)[None]]), (3, 4)),
    ("diagonal_axes", lambda x: np.diagonal(x, 0, 1, 2), (2, 3, 3)),
    ("tril_triu", lambda x: np.tril(x) * 2 + np.triu(x, 1) - np.tril(x, -1) * np.triu(x), (3, 4)),
    ("stacks", lambda x: np.concatenate([np.vstack([x, x[:1]]).ravel(), np.hstack([x, x]).ravel(),
                                         np.column_stack([x[0], x[1]]).ravel(), np.dstack([x, x]).ravel(),
                                         np.row_stack([x[0], x[1]]).ravel()]), (3, 4)),
    ("splits", lambda x: [p * (i + 1) for i, p in enumerate(np.split(x, 2, axis=1) + np.array_split(x, 2)
                                                              + np.vsplit(x, [1]) + np.hsplit(x, [1, 3]))], (3, 4)),
    ("dsplit", lambda x: [p * (i + 1) for i, p in enumerate(np.dsplit(x, 2))], (2, 3, 4)),
    ("append", lambda x: np.append(x, x[0]) + np.append(x, x[:1], axis=0).sum(), (3, 4)),
    ("diff", lambda x: np.concatenate([np.diff(x).ravel(), np.diff(x, 2, axis=0).ravel(),
                                       np.diff(x, prepend=0.5, append=x[:, :1]).ravel()]), (3, 4)),
    ("gradient", lambda x: np.concatenate([g.ravel() for g in np.gradient(x * x, 0.5)]
                                          + [np.gradient(x[0], edge_order=2)]), (3, 4)),
    ("std_var", lambda x: np.concatenate([np.std(x, axis=0, ddof=1), np.var(x, axis=1, keepdims=True).ravel(),
                                          [np.var(x), np.std([x[0, 0], x[1, 1], 2.0])]]), (3, 4)),
    ("average", lambda x: np.concatenate([np.average(x, axis=1, weights=np.arange(1.0, 5.0)),
                                          [np.average(x, weights=x * x), np.average(x)]]), (3, 4)),
    ("clip_keywords", lambda x: np.clip(x, a_min=-0.5, a_max=0.7) * x + np.clip(x, None, 0.2), (3, 4)),
    ("select", lambda x: np.select([x < -0.5, x > 0.5], [x * x, np.sin(x)], default=x * 3), (3, 4)),
    ("linspace", lambda x: np.linspace(x[0], x[1], 5) * np.linspace(x[2], 2.0, 4, endpoint=False).sum(), (3,)),
    ("linspace_arrays", lambda x: np.linspace(x[0], x[1], 4, axis=1), (2, 3)),
    ("norms_vector", lambda x: np.stack([np.linalg.norm(x[0], o) for o in (1, 2, np.inf, -np.inf, 3, 0.5)]
                                        + [np.linalg.norm([x[0, 0], x[1, 1]])]), (3, 4)),
    ("norms_axis", lambda x: np.concatenate([np.linalg.norm(x, 1, axis=1), np.linalg.norm(x, np.inf, axis=0),
                                             np.linalg.norm(x, axis=0, keepdims=True).ravel()]), (3, 4)),
    ("norms_matrix", lambda x: np.stack([np.linalg.norm(x, o) for o in (1, -1, np.inf, -np.inf, "fro", None)]), (3, 4)),
    ("r_c_", lambda x: np.concatenate([np.r_[x[0], 0.5, 1:3, x[1, :2]], np.c_[x[0], x[1], 0:4].ravel(),
                                       np.r_[x, x[:1]].ravel(), np.c_[x, x[:, :1]].ravel()]), (3, 4)),
    ("methods", lambda x: np.concatenate([x.var(axis=0, ddof=1), x.std(1), (x.round(1) * x)[0], x.swapaxes(0, 1)[0],
                                          x.diagonal(1), [x.trace()], x.repeat(2, axis=0)[:, 0], x.conj()[0],
                                          x.clip(min=-0.5)[1], x.clip(max=0.5)[2], x.real[0] + x.imag[0]]), (3, 4)),
    ("take_along_axis", lambda x: np.take_along_axis(x, np.array([[0, 2], [1, 1], [3, -1]]), 1)
     + np.take_along_axis(x, np.array([[2, 0, 1, 1]]), 0).sum(), (3, 4)),
    ("mixed_index", lambda x: np.concatenate([x[1, 1:, [0, 2]].ravel(), x[:, 1, [3, 0, 1]].ravel(),
                                              x[[2, 0], 1:3, 2].ravel()]), (3, 4, 5)),
    ("bool_mask", lambda x: np.concatenate([x[np.array([True, False, True])].ravel(), x[:, [True, False, True, True]].ravel(),
                                            x[np.arange(12).reshape(3, 4) % 5 == 1]]), (3, 4)),
]


def _array_input(name, shape, seed):
    rng = np.random.default_rng(seed)
    if name == "norms_vector":   # away from the kinks of |x| and of max/min ties
        return rng.uniform(0.3, 1.5, shape) * np.where(rng.uniform(size=shape) < 0.5, -1, 1)
    return rng.uniform(-1.5, 1.5, shape)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, fn, shape", NUMPY_ARRAY, ids=[a[0] for a in NUMPY_ARRAY])
def test_numpy_array_functions(name, fn, shape, target):
    x = _array_input(name, shape, 13)
    f = _on(target, fn)
    got, want = f(x), fn(x)
    for g, w in zip(got, want) if isinstance(want, list) else [(got, want)]:
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, rtol=1e-13, atol=1e-14)
    loss = _on(target, lambda x: _weigh(fn(x)))
    assert sg.check_grad(loss, x) < 1e-6
    g32 = loss.grad(x.astype(np.float32))
    assert g32.dtype == np.float32
    got32, want32 = f(x.astype(np.float32)), fn(x.astype(np.float32))
    for g, w in zip(got32, want32) if isinstance(want32, list) else [(got32, want32)]:
        assert np.asarray(g).dtype == np.asarray(w).dtype   # NumPy's promotion, float32 kept
    np.testing.assert_allclose(g32, loss.grad(x), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name, fn, shape", NUMPY_ARRAY, ids=[a[0] for a in NUMPY_ARRAY])
def test_numpy_array_functions_second_order(name, fn, shape):
    """The gradient's own gradient (a Hessian-vector product) against finite differences."""
    x = _array_input(name, shape, 14)
    first = sg.grad(lambda x: _weigh(fn(x)), target="python")
    assert sg.check_grad(lambda x: np.sum(np.cos(first(x)) * np.arange(x.size).reshape(x.shape)), x) < 1e-5


MIXED_KEYS = [
    (3, slice(2, None), [1, 3]), (slice(None), 2, [0, 4, 4]), ([1, 0], 2, slice(1, 3)),
    (Ellipsis, [2, -1]), (1, Ellipsis, [0, 3]), ([[0, 1], [3, 3]], slice(None, None, -1), 0),
    (None, 2, slice(None), [1]), (slice(1, 3), None, [4, 0], 1),
    (np.array([True, False, True, True]),), (slice(None), np.array([False, True, True, False, False, True])),
    (0, np.arange(30).reshape(6, 5) % 4 == 0), (Ellipsis, np.array([True, False, True, False, True])),
    ([0, 3], [1, 5]), ([[0], [3]], slice(1, 4), [1, 4, -1]), (slice(None), [[2, 0]], [[1], [3]]),
    (np.arange(24).reshape(4, 6) % 5 == 0, [4, 0, 1, 2, 3]), ([1, 2], Ellipsis, [0, 0]),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("key", MIXED_KEYS, ids=[str(i) for i in range(len(MIXED_KEYS))])
def test_mixed_advanced_indexing_matches_numpy(key, target):
    x = np.random.default_rng(15).standard_normal((4, 6, 5))

    def pick(x):
        return x[key]
    f = _on(target, pick)
    np.testing.assert_array_equal(f(x), x[key])
    assert sg.check_grad(_on(target, lambda x: _weigh(pick(x) * pick(x))), x) < 1e-6


@pytest.mark.parametrize("target", TARGETS)
def test_traced_index_arrays_and_refused_keys(target):
    def by_labels(x, k):
        return np.sum(np.sin(x[1, :, k])) + np.sum(np.take_along_axis(x[0], k[None, :2], 1) ** 2)
    x, k = np.random.default_rng(16).standard_normal((2, 3, 4)), np.array([3, 0, -1])
    f = _on(target, by_labels)
    np.testing.assert_allclose(f(x, k), by_labels(x, k), rtol=1e-14)
    assert sg.check_grad(f, x, k) < 1e-6

    def traced_mask(x):
        return np.sum(x[x > 0])

    def two_arrays(x, i, j):
        return np.sum(np.sin(x[i, 1:, j])) + np.sum(x[i, j, None] ** 2)
    i, j = np.array([[0], [1]]), np.array([2, -1, 0])
    f = _on(target, two_arrays)
    np.testing.assert_allclose(f(x, i, j), two_arrays(x, i, j), rtol=1e-14)
    assert sg.check_grad(f, x, i, j) < 1e-6
    with pytest.raises(IndexError):   # a traced index out of range on one axis, in range flat
        f(x, i, np.array([4, 0, 0]))
    def at_traced_position(x, k):   # an integer read from the data picks a row
        return np.sum(np.sin(x[k[0], 1:]) * x[1, k[1]])
    f, rows = _on(target, at_traced_position), np.array([2, -1])
    np.testing.assert_allclose(f(x[0], rows), at_traced_position(x[0], rows), rtol=1e-14)
    assert sg.check_grad(f, x[0], rows) < 1e-6
    with pytest.raises(IndexError):
        f(x[0], np.array([3, 0]))
    for fn, construct in ((traced_mask, "boolean mask computed from traced data"),):
        with pytest.raises(sg.UnsupportedSyntaxError, match=construct) as info:
            _on(target, fn)(np.ones((3, 3)))
        assert info.value.lineno > 0 and "test_derivatives.py" in info.value.filename


@pytest.mark.parametrize("target", TARGETS)
def test_norms_and_spreads_at_zero(target):
    """At a zero vector (or constant data) every norm and std has gradient 0, finite at the
    second order too (no 0 / 0), as abs'(0) = 0."""
    def norms(x):
        return (np.linalg.norm(x) + np.linalg.norm(x, 1) + np.linalg.norm(x, 3)
                + np.linalg.norm(x, np.inf) + np.std(x) + np.std(x, ddof=1))
    f = _on(target, norms)
    zero = np.zeros(4)
    assert f(zero) == 0.0
    np.testing.assert_array_equal(f.grad(zero), np.zeros(4))
    h = sg.hvp(norms, target=target)(zero, np.ones(4))
    assert np.all(np.isfinite(h))
    np.testing.assert_allclose(_on(target, lambda x: np.std(x))(np.full(3, 2.0)), 0.0)
    np.testing.assert_array_equal(_on(target, lambda x: np.std(x)).grad(np.full(3, 2.0)), np.zeros(3))
    one = _on(target, lambda a: np.linspace(a, 2.0, 1) * a)
    np.testing.assert_array_equal(one(3.0), np.linspace(3.0, 2.0, 1) * 3.0)
