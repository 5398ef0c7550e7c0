"""Programs written the way users write them (TensorFlow ports, scientific code), each on every
target, checked against central differences or the mathematics: regressions for defects such
programs found. ``"cuda"`` runs the CUDA plan through the CPU emulator (``codegen.ptx_emulate``)."""
import re

import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import ptx_emulate
from user_program_check import central_difference

TARGETS = ["python", "cpu", "cuda"]


def call(transform, target, *args):
    """``transform(target)`` is an ``sg.Function``; on "cuda" its graph runs in the emulator."""
    if target == "cuda":
        f = transform("python")
        return ptx_emulate.run(f._graph(list(args)), list(args))
    return transform(target)(*args)


def central_differences(fn, x, eps=1e-6):
    """d sum(fn(x)) / dx, float64 central differences."""
    return central_difference(fn, (x,), 0, eps)


# -- np.prod with zeros: d prod / d x[i] is the product of the others, not prod / x = 0 / 0 ------
def product(x):
    return np.prod(x)


def product_weighted(x):
    return np.sum(np.prod(x, axis=(0, 2), keepdims=True) * np.array([1.0, 2.0, 3.0])[:, None])


@pytest.mark.parametrize("target", TARGETS)
def test_prod_gradient_with_zero_entries(target):
    x = np.array([0.0, 2.0, 3.0])
    np.testing.assert_array_equal(call(lambda t: sg.grad(product, target=t), target, x), [6.0, 0.0, 0.0])
    two = np.array([0.0, 0.0, 3.0])
    np.testing.assert_array_equal(call(lambda t: sg.grad(product, target=t), target, two), [0.0, 0.0, 0.0])
    y = np.arange(24.0).reshape(2, 3, 4) / 7.0 - 1.0
    y[0, 1, 3] = y[1, 2, 0] = 0.0
    got = call(lambda t: sg.grad(product_weighted, target=t), target, y)
    np.testing.assert_allclose(got, central_differences(product_weighted, y), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("target", TARGETS)
def test_prod_second_derivative_with_two_zeros(target):
    x = np.array([0.0, 0.0, 3.0, 2.0])
    want = np.zeros((4, 4))
    want[0, 1] = want[1, 0] = 6.0
    np.testing.assert_array_equal(call(lambda t: sg.hessian(product, target=t), target, x), want)
    value, tangent = call(lambda t: sg.jvp(product, target=t), target, np.array([0.0, 2.0, 3.0]),
                          np.array([1.0, 0.0, 0.0]))
    assert (value, tangent) == (0.0, 6.0)


# -- what sg.grad(fn) accepts: a library function or a partial gets a TypeError saying what to pass
class Quadratic:
    def __call__(self, x):
        return np.sum(x * x)


@pytest.mark.parametrize("fn, says", [
    (np.sin, "np.sin is a library function"), (np.prod, "np.prod is a library function"),
    (np.linalg.norm, "np.linalg.norm is a library function"), (sg.exp, "sg.exp is a library"),
    (abs, "abs has no Python source"), (Quadratic(), "Quadratic().__call__"),
    (__import__("functools").partial(product_weighted), "functools.partial")])
def test_non_python_functions_get_a_clear_type_error(fn, says):
    for transform in (sg.grad, sg.differentiate, sg.value_and_grad, sg.jacobian, sg.vmap):
        with pytest.raises(TypeError, match=r"symgrad differentiates Python functions.*" + re.escape(says)):
            transform(fn)
    np.testing.assert_array_equal(sg.grad(Quadratic().__call__)(np.array([1.0, -2.0])), [2.0, -4.0])


# -- clip_by_norm / clip_by_global_norm at norm == clip_norm: TF's tie rule (all to the norm) ---
def clipped_by_norm(t):
    return np.sum(sg.clip_by_norm(t, 5.0) * np.array([1.0, 2.0]))


def clipped_by_global_norm(a, b):
    (ca, cb), _ = sg.clip_by_global_norm([a, b], 5.0)
    return np.sum(ca) + 2.0 * np.sum(cb)


@pytest.mark.parametrize("target", TARGETS)
def test_clip_by_norm_gradient_at_the_clip_norm_is_tensorflows(target):
    # TF: maximum(norm, clip_norm) passes a tie's gradient to norm, so the gradient is that of
    # t * clip_norm / norm (the clipping side): w - (t . w) t / norm^2 with w = (1, 2)
    t, w = np.array([3.0, 4.0]), np.array([1.0, 2.0])
    want = w - (t @ w) * t / 25.0
    np.testing.assert_allclose(call(lambda g: sg.grad(clipped_by_norm, target=g), target, t),
                               want, rtol=1e-12)
    got = call(lambda g: sg.grad(clipped_by_global_norm, wrt=(0, 1), target=g), target,
               np.array([3.0]), np.array([4.0]))
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-12)
    below = np.array([0.3, 0.4])   # off the tie both conventions agree: no clipping
    np.testing.assert_allclose(call(lambda g: sg.grad(clipped_by_norm, target=g), target, below), w)


# -- break / continue on data in short loops (which unroll otherwise) and over constant arrays --
def grow_until(x):
    for i in range(3):
        x = x * 1.5
        if x > 5.0:
            break
    return x


def skip_large(x):
    s = 0.0
    for i in range(4):
        if x * i > 2.0:
            continue
        s = s + x * i
    return s


def scaled_by_constants(x):
    for b in np.array([1.0, 2.0, 3.0, 0.5, 0.5, 4.0]):
        if x > 4.0:
            continue
        x = x * b
    return x


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn, x, value, slope", [
    (grow_until, 1.0, 3.375, 3.375), (grow_until, 3.0, 6.75, 2.25),
    (skip_large, 1.0, 3.0, 3.0), (skip_large, 0.5, 3.0, 6.0),
    (scaled_by_constants, 1.0, 6.0, 6.0), (scaled_by_constants, 0.1, 0.6, 6.0)])
def test_break_and_continue_on_data_in_short_loops(target, fn, x, value, slope):
    assert fn(x) == pytest.approx(value, rel=1e-15)
    assert call(lambda t: sg.differentiate(fn, target=t), target, x) == pytest.approx(fn(x), rel=1e-15)
    assert call(lambda t: sg.grad(fn, target=t), target, x) == pytest.approx(slope, rel=1e-15)


# -- f.sympy: a select of conditions stays a condition; loops that stop on data are refused ----
def select_of_conditions(x):
    inside = np.where(x > 0, x < 1, x > -1)
    return np.where(np.logical_not(inside), -x, x * 2.0)


def doubling_until(x):
    while x < 10.0:
        x = x * 2.0
    return x


def test_sympy_of_selected_conditions_and_loops_that_stop_on_data():
    f = sg.differentiate(select_of_conditions)
    form, slope = f.sympy(0.5), f.grad.sympy(0.5)
    (x,) = form.free_symbols
    for v in (-3.0, -0.5, 0.5, 1.5):
        assert float(form.subs(x, v)) == select_of_conditions(v)
        assert float(slope.subs(x, v)) == (2.0 if -1 < v < 1 else -1.0)
    for fn in (doubling_until, grow_until):
        with pytest.raises(NotImplementedError, match="on data"):
            sg.differentiate(fn).grad.sympy(1.5)
        with pytest.raises(NotImplementedError, match="on data"):
            sg.differentiate(fn).latex(1.5)


# -- x % c with a constant divisor: a zero result has the divisor's sign (NumPy), +0.0 for c > 0
def phase(x):
    return x % 2.0


def phase_negative(x):
    return x % -3.0


@pytest.mark.parametrize("target", TARGETS)
def test_remainder_by_a_constant_keeps_the_sign_of_zero(target):
    x = np.array([4.0, -4.0, 3.0, -3.0, 0.0, -0.0, 5.5, -5.5])
    for fn in (phase, phase_negative):
        got = call(lambda t: sg.differentiate(fn, target=t), target, x)
        np.testing.assert_array_equal(got, fn(x))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(fn(x)))
        np.testing.assert_array_equal(call(lambda t: sg.grad(fn, target=t), target, x), np.ones(8))
    assert np.signbit(call(lambda t: sg.differentiate(phase, target=t), target, 4.0)) == np.signbit(4.0 % 2.0)


# -- y[mask] = value: NumPy's masked assignment of one value is a select ------------------------
def relu_by_mask(x):
    y = x.copy()
    y[y < 0] = 0.0
    return np.sum(y ** 2)


def rows_by_mask(X):
    Y = X * 2.0
    Y[np.sum(X, axis=1) > 0] = np.mean(X)
    return np.sum(Y * X)


@pytest.mark.parametrize("target", TARGETS)
def test_masked_assignment_of_one_value(target):
    x = np.array([-1.0, 2.0, 3.0, -0.5])
    assert call(lambda t: sg.differentiate(relu_by_mask, target=t), target, x) == relu_by_mask(x)
    np.testing.assert_array_equal(call(lambda t: sg.grad(relu_by_mask, target=t), target, x),
                                  [0.0, 4.0, 6.0, 0.0])
    X = np.array([[1.0, -3.0], [2.0, 1.0], [-1.0, 0.5]])
    assert call(lambda t: sg.differentiate(rows_by_mask, target=t), target, X) == \
        pytest.approx(rows_by_mask(X.copy()), rel=1e-14)
    np.testing.assert_allclose(call(lambda t: sg.grad(rows_by_mask, target=t), target, X),
                               central_differences(rows_by_mask, X), rtol=1e-7, atol=1e-8)


def masked_array_value(x):
    y = x.copy()
    y[y > 1.0] = x[:1]
    return np.sum(y)


def test_masked_assignment_of_an_array_is_refused_at_its_line():
    with pytest.raises(sg.UnsupportedSyntaxError, match=r"test_user_programs.py:\d+.*y\[mask\] = v"):
        sg.grad(masked_array_value)(np.array([0.5, 2.0]))


# -- & | ^ ~ on boolean arrays are NumPy's logical operators ----------------------------------
def band_select(x):
    inside = (x > 0) & (x < 1)
    outside = (x < -1) | (x > 2)
    return np.sum(np.where(inside ^ outside, x * x, 0.0) + np.where(~inside, x, 0.0))


def bitwise_on_floats(x):
    return np.sum((x > 0) & x)


@pytest.mark.parametrize("target", TARGETS)
def test_logical_operators_on_masks(target):
    x = np.array([-2.0, -0.5, 0.5, 1.5, 3.0])
    assert call(lambda t: sg.differentiate(band_select, target=t), target, x) == band_select(x)
    np.testing.assert_allclose(call(lambda t: sg.grad(band_select, target=t), target, x),
                               central_differences(band_select, x), rtol=1e-8)
    with pytest.raises(sg.UnsupportedSyntaxError, match="bitwise operations on numbers"):
        sg.differentiate(bitwise_on_floats, target="python")(x)


# -- arrays in the other byte order (data read from a big-endian file) --------------------------
def tanh_energy(X, w, labels):
    return np.sum(np.tanh(X @ w) ** 2 * labels)


@pytest.mark.parametrize("target", TARGETS)
def test_big_endian_arguments(target):
    X = np.arange(12.0).reshape(4, 3) / 10.0
    w, labels = np.array([0.5, -1.0, 0.25]), np.array([1, 0, 2, 1])
    big = (X.astype(">f8"), w.astype(">f8"), labels.astype(">i8"))
    for transform in (sg.differentiate, sg.grad):
        got = call(lambda t: transform(tanh_energy, target=t), target, *big)
        np.testing.assert_array_equal(got, call(lambda t: transform(tanh_energy, target=t), target,
                                                X, w, labels))


# -- what is refused says what it is -----------------------------------------------------------
def multiply_at(x, idx):
    y = np.ones(4)
    np.multiply.at(y, idx, x)
    return np.sum(y)


def test_ufunc_at_other_than_add_is_named():
    x, idx = np.array([1.0, 2.0]), np.array([0, 2])
    with pytest.raises(sg.UnsupportedSyntaxError, match=r"np\.multiply\.at on traced values"):
        sg.grad(multiply_at)(x, idx)


# -- hvp / hessp of a function with a parameter left to its default (scipy's hessp=(x, p)) ----
def scaled_rosenbrock(x, scale=100.0):
    return np.sum(scale * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def weighted_fit(x, w, scale=2.0):
    return scale * np.sum((x * w - 1.0) ** 2)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_hessian_vector_products_take_defaults_and_keywords(target):
    from scipy import optimize
    x, p = np.array([0.5, 1.0, 1.5]), np.array([1.0, -2.0, 0.5])
    f = sg.differentiate(scaled_rosenbrock, target=target)
    want = optimize.rosen_hess_prod(x, p)
    np.testing.assert_allclose(f.hessp(x, p), want, rtol=1e-13)
    np.testing.assert_allclose(sg.hvp(scaled_rosenbrock, target=target)(x, p, scale=100.0), want,
                               rtol=1e-13)
    result = optimize.minimize(f, np.zeros(3), jac=f.grad, hessp=f.hessp, method="trust-ncg")
    np.testing.assert_allclose(result.x, np.ones(3), atol=1e-6)
    w = np.array([1.0, 2.0, 3.0])
    h = sg.hvp(weighted_fit, wrt=1, target=target)   # x is the second parameter: (w, v, x)
    np.testing.assert_allclose(h(w, p, x), 4.0 * x * x * p, rtol=1e-14)
    np.testing.assert_allclose(h(w, p, x, scale=1.0), 2.0 * x * x * p, rtol=1e-14)


# -- vmap of a function with a parameter left to its default: the default is not batched ------
def example_loss(w, x, y, l2=1e-2):
    return (x @ w - y) ** 2 + l2 * np.sum(w * w)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_vmap_leaves_defaults_unbatched(target):
    w, X, Y = np.array([0.5, -1.0]), np.arange(6.0).reshape(3, 2), np.array([1.0, 0.0, 2.0])
    want = np.stack([2 * (X[i] @ w - Y[i]) * X[i] + 2e-2 * w for i in range(3)])
    per_example = sg.vmap(sg.grad(example_loss), in_axes=(None, 0, 0), target=target)
    np.testing.assert_allclose(per_example(w, X, Y), want, rtol=1e-14)
    explicit = sg.vmap(sg.grad(example_loss), in_axes=(None, 0, 0, None), target=target)
    np.testing.assert_allclose(explicit(w, X, Y, 0.0), want - 2e-2 * w, rtol=1e-14, atol=1e-15)
    values = sg.vmap(example_loss, in_axes=(None, 0, 0, 0), target=target)(w, X, Y, np.ones(3))
    np.testing.assert_allclose(values, (X @ w - Y) ** 2 + np.sum(w * w), rtol=1e-14)
    scaled = sg.vmap(scale_by_default, target=target)
    np.testing.assert_array_equal(scaled(Y), Y[:, None] * DEFAULT_SCALE)    # the default: whole
    np.testing.assert_array_equal(scaled(Y, DEFAULT_SCALE.copy()), Y * DEFAULT_SCALE)  # batched
    np.testing.assert_array_equal(scaled(Y), Y[:, None] * DEFAULT_SCALE)    # (not the last plan)


DEFAULT_SCALE = np.array([2.0, 3.0, 4.0])


def scale_by_default(x, s=DEFAULT_SCALE):
    return x * s


# -- TensorFlow's reduce_* signature, traced and eager: a list of axes, keepdims third --------
def tf_style_reductions(x):
    m = sg.reduce_max(x, 1, True)
    return sg.reduce_sum((x - m) ** 2, axis=[0, 1]) + sg.reduce_mean(x, [0]).sum()


def numpy_positional_dtype(x):
    return np.sum(x, 0, np.float64)   # NumPy's third positional is dtype, not keepdims


@pytest.mark.parametrize("target", TARGETS)
def test_tensorflow_reductions_port_by_renaming(target):
    x = np.array([[1.0, 4.0, 2.0], [0.5, -1.0, 3.0]])
    eager = tf_style_reductions(x)   # the undecorated function runs as plain Python
    assert eager == pytest.approx(np.sum((x - x.max(1, keepdims=True)) ** 2) + x.mean(0).sum())
    assert call(lambda t: sg.differentiate(tf_style_reductions, target=t), target, x) == \
        pytest.approx(eager, rel=1e-15)
    np.testing.assert_allclose(call(lambda t: sg.grad(tf_style_reductions, target=t), target, x),
                               central_differences(tf_style_reductions, x), rtol=1e-7)
    with pytest.raises(sg.UnsupportedSyntaxError, match=r"np\.sum\(\.\.\., \.\.\., \.\.\.\)"):
        call(lambda t: sg.differentiate(numpy_positional_dtype, target=t), target, x)


# -- sg.check_grad of pytree arguments and outputs -----------------------------------------------
def model_with_report(params, x, labels):
    h = np.tanh(x @ params["W"] + params["b"][0])
    picked = h[np.arange(x.shape[0]), labels]
    return {"loss": np.sum(picked ** 2) * params["b"][1], "h": h}


def test_check_grad_of_pytrees():
    rng = np.random.default_rng(0)
    params = {"W": rng.normal(size=(3, 2)), "b": (np.array([0.1, -0.2]), 0.5)}
    x, labels = rng.normal(size=(4, 3)), np.array([0, 1, 1, 0])
    assert sg.check_grad(model_with_report, params, x, labels) < 1e-8
    assert sg.check_grad(model_with_report, params, x, labels, wrt=(0, 1)) < 1e-8
    wrong = sg.custom_gradient(lambda v: (v * 1.0, lambda up: 2.0 * up))
    assert sg.check_grad(lambda p: np.sum(wrong(p["a"])), {"a": np.ones(3)}) > 0.4


# -- + on boolean masks is logical or (NumPy); - and unary - on booleans are NumPy's TypeError --
def either_mask(x):
    both = (x > 0) + (x > 1)
    return np.sum(np.where(both, x * x, 0.0)) + np.sum(both + True)


def mask_difference(x):
    return (x > 0) - (x > 1)


@pytest.mark.parametrize("target", TARGETS)
def test_boolean_addition_is_logical_or(target):
    x = np.array([-1.0, 0.5, 2.0, 3.0])
    assert call(lambda t: sg.differentiate(either_mask, target=t), target, x) == either_mask(x)
    np.testing.assert_array_equal(call(lambda t: sg.grad(either_mask, target=t), target, x),
                                  [0.0, 1.0, 4.0, 6.0])
    with pytest.raises(TypeError, match="numpy boolean subtract"):
        call(lambda t: sg.differentiate(mask_difference, target=t), target, x)
