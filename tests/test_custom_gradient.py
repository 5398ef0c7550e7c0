"""``@sg.custom_gradient`` (TensorFlow's form): the rule is traced, appears in the generated
source, replaces the value's own derivative, composes with grad of grad where it is
differentiable and with jvp where it is linear in the upstream (a clear error where not)."""
import numpy as np
import pytest

import symgrad as sg

TARGETS = ["python", "cpu"]


@sg.custom_gradient
def log1pexp(x):
    """TensorFlow's example: log(1 + exp(x)) with the gradient written as 1 - 1 / (1 + e^x),
    which stays finite where exp(x) overflows (TensorFlow's own gradient gives nan there)."""
    e = np.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return np.log(1 + e), grad


@sg.custom_gradient
def clip_gradient_norm(x):
    """The value is x; the gradient passing through is clipped to norm 0.5 (tf's clipping)."""
    def grad(dy):
        return sg.clip_by_norm(dy, 0.5)
    return x * 1.0, grad


@sg.custom_gradient
def scaled_product(x, y):
    """Two float arguments: a gradient for each (a deliberately scaled one for y)."""
    def grad(upstream):
        return upstream * y, upstream * x * 3.0
    return x * y, grad


def model(x, w):
    h = log1pexp(x @ w)
    return np.sum(clip_gradient_norm(h) * h)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("target", TARGETS)
def test_a_numerically_stable_rule(target):
    x = np.array([-3.0, 0.5, 100.0])
    np.testing.assert_allclose(sg.grad(log1pexp, target=target)(x), sigmoid(x), rtol=1e-14)
    np.testing.assert_allclose(log1pexp(x), np.log1p(np.exp(x)), rtol=1e-14)   # eager: NumPy
    f = sg.differentiate(log1pexp, target=target)
    np.testing.assert_allclose(f(x), np.log(1 + np.exp(x)), rtol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_gradient_clipping_rule_inside_a_bigger_function(target):
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    g = sg.grad(model, wrt=(0, 1), target=target)(x, w)
    # by hand: s = log1pexp(x @ w); loss = sum(clip(s) * s) with clip's value s and its
    # gradient clipped: d loss / ds = s + clip_by_norm(s, 0.5)
    z = x @ w
    s = np.log1p(np.exp(z))
    upstream = s
    clipped = upstream * min(1.0, 0.5 / np.linalg.norm(upstream))
    ds = s + clipped
    dz = ds * sigmoid(z)
    np.testing.assert_allclose(g[0], dz @ w.T, rtol=1e-12)
    np.testing.assert_allclose(g[1], x.T @ dz, rtol=1e-12)
    assert sg.differentiate(model, target=target)(x, w) == pytest.approx(np.sum(s * s), rel=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_several_float_arguments(target):
    def f(x, y):
        return np.sum(scaled_product(x, y) + x)
    gx, gy = sg.grad(f, wrt=(0, 1), target=target)(np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    np.testing.assert_allclose(gx, [4.0, 5.0])
    np.testing.assert_allclose(gy, [3.0, 6.0])


@pytest.mark.parametrize("target", TARGETS)
def test_grad_of_grad_differentiates_the_rule(target):
    second = sg.grad(sg.grad(log1pexp), target=target)
    for x in (-2.0, 0.5, 3.0):
        s = sigmoid(x)
        assert second(x) == pytest.approx(s * (1 - s), rel=1e-13)
    hv = sg.hvp(lambda x: np.sum(log1pexp(x)), target=target)(np.array([0.1, -1.0]), np.ones(2))
    s = sigmoid(np.array([0.1, -1.0]))
    np.testing.assert_allclose(hv, s * (1 - s), rtol=1e-13)


@pytest.mark.parametrize("target", TARGETS)
def test_forward_mode_transposes_a_linear_rule(target):
    x, t = np.array([-3.0, 0.5, 100.0]), np.array([1.0, -2.0, 0.5])
    value, tangent = sg.jvp(log1pexp, target=target)(x, t)
    np.testing.assert_allclose(tangent, sigmoid(x) * t, rtol=1e-14)
    _, tangent = sg.jvp(lambda x, y: scaled_product(x, y), wrt=(0, 1), target=target)(
        2.0, 5.0, 1.0, 1.0)
    assert tangent == 5.0 + 6.0   # J t with the rule's (scaled) partials: 5 * 1 + 2 * 3 * 1


def test_forward_mode_through_a_nonlinear_rule_is_a_clear_error():
    with pytest.raises(TypeError, match="clip_gradient_norm.*not linear in the upstream"):
        sg.jvp(model, target="python")(np.ones((3, 4)), np.ones((4, 2)), np.ones((3, 4)))


def test_the_rule_appears_in_the_generated_source():
    f = sg.grad(log1pexp, target="python")
    f(np.array([0.5, 1.0]))
    assert "1.0 - 1.0 / (1.0 + e)" in f.source
    assert "np.log" not in f.source     # the value's own derivative is replaced
    assert "custom_gradient" not in sg.differentiate(log1pexp, target="python").ir_for(np.ones(2))


def test_bad_rules_are_clear_errors():
    @sg.custom_gradient
    def no_rule(x):
        return x * 2.0

    @sg.custom_gradient
    def two_gradients(x):
        return x * 2.0, lambda g: (g, g)

    @sg.custom_gradient
    def wrong_shape(x):
        return np.sum(x), lambda g: np.ones(5) * g

    @sg.custom_gradient
    def two_values(x):
        return (x, x), lambda g: g

    @sg.custom_gradient
    def packed(xs):
        return xs[0] * xs[1], lambda g: (g, g)

    with pytest.raises(TypeError, match="one float array"):
        sg.grad(lambda x: np.sum(two_values(x)[0]))(np.ones(3))
    with pytest.raises(TypeError, match="separate array arguments"):
        sg.grad(lambda x: np.sum(packed((x, x))))(np.ones(3))
    with pytest.raises(TypeError, match=r"return \(value, grad_fn\)"):
        sg.grad(lambda x: np.sum(no_rule(x)))(np.ones(3))
    with pytest.raises(TypeError, match="2 gradient"):
        sg.grad(lambda x: np.sum(two_gradients(x)))(np.ones(3))
    with pytest.raises(ValueError, match="shape"):
        sg.grad(lambda x: wrong_shape(x))(np.ones(3))


def test_a_scalar_rule_for_an_array_argument_means_every_element():
    @sg.custom_gradient
    def total(x):
        return np.sum(x), lambda g: g * 2.0
    np.testing.assert_allclose(sg.grad(total, target="python")(np.ones(3)), [2.0, 2.0, 2.0])


def repeated(x):
    for _ in range(3):
        x = log1pexp(x) * 0.5
    return np.sum(x)


def branchy(x):
    if np.sum(x) > 0:
        y = log1pexp(x)
    else:
        y = x * x
    return np.sum(y)


@pytest.mark.parametrize("target", TARGETS)
def test_the_rule_inside_loops_and_branches(target):
    x = np.array([0.3, -1.2, 2.0])
    assert sg.check_grad(repeated, x) < 1e-6
    np.testing.assert_allclose(sg.grad(branchy, target=target)(x), sigmoid(x), rtol=1e-14)
    np.testing.assert_allclose(sg.grad(branchy, target=target)(-x), -2 * x, rtol=1e-14)
    g = sg.grad(repeated, target=target)(x)
    h = 1e-6
    numeric = [(repeated(x + h * e) - repeated(x - h * e)) / (2 * h) for e in np.eye(3)]
    np.testing.assert_allclose(g, numeric, rtol=1e-7)


def test_float32_keeps_its_dtype():
    x = np.array([0.5, -1.0], dtype=np.float32)
    for target in TARGETS:
        g = sg.grad(log1pexp, target=target)(x)
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, sigmoid(x.astype(np.float64)), rtol=1e-6)


def long_loop(x):
    for _ in range(40):     # long enough to stay one loop region (not unrolled)
        x = log1pexp(x) * 0.5 + 0.1
    return np.sum(x)


def test_the_rule_inside_a_loop_region_on_every_target():
    """A custom_gradient node inside a loop body: back ends get its value there too."""
    x = np.array([0.3, -1.2, 2.0])
    want = sg.grad(long_loop, target="python")(x)
    np.testing.assert_allclose(sg.grad(long_loop, target="cpu")(x), want, rtol=1e-13)
    assert sg.differentiate(long_loop, target="cpu")(x) == pytest.approx(long_loop(x), rel=1e-14)
    _, t = sg.jvp(long_loop, target="cpu")(x, np.ones(3))
    assert t == pytest.approx(float(np.sum(want)), rel=1e-12)
    assert sg.check_grad(long_loop, x) < 1e-6
