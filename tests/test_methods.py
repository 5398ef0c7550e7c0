"""Bound methods and functions as arguments: ``sg.differentiate(model.loss)`` has a static
``self`` whose attributes are read like globals (rebinding one is seen on the next call), and a
function argument (``act=np.tanh``, passed or defaulted, or a pytree leaf) is static, keyed by
identity."""
import numpy as np
import pytest

import symgrad as sg

TARGETS = ["python", "cpu"]


class Model:
    def __init__(self, n):
        self.W = np.arange(n * n, dtype=float).reshape(n, n) / (n * n) - 0.3
        self.scale = 2.0

    def predict(self, x):
        return np.tanh(self.W @ x)

    def loss(self, x):
        return self.scale * np.sum(self.predict(x) ** 2)


def numeric_grad(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = eps
        g.flat[i] = (f(x + e) - f(x - e)) / (2 * eps)
    return g


@pytest.mark.parametrize("target", TARGETS)
def test_bound_method_binds_self_as_static(target):
    m = Model(4)
    f = sg.differentiate(m.loss, target=target)
    x = np.linspace(-1.0, 1.0, 4)
    assert f(x) == pytest.approx(m.loss(x), rel=1e-14)
    np.testing.assert_allclose(f.grad(x), numeric_grad(m.loss, x), rtol=1e-7, atol=1e-9)
    value, grad = sg.value_and_grad(m.loss, target=target)(x)
    assert value == pytest.approx(m.loss(x), rel=1e-14)
    np.testing.assert_allclose(grad, f.grad(x), rtol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_rebound_attribute_is_seen_in_place_change_is_not(target):
    m = Model(3)
    f = sg.differentiate(m.loss, target=target)
    x = np.ones(3)
    before = f(x)
    m.scale = 3.0                      # rebinding: seen, like a rebound global
    assert f(x) == pytest.approx(1.5 * before, rel=1e-14)
    np.testing.assert_allclose(f.grad(x), numeric_grad(m.loss, x), rtol=1e-7, atol=1e-9)
    m.W = m.W * 0.5                    # a new array: seen
    assert f(x) == pytest.approx(m.loss(x), rel=1e-14)
    traced = f(x)
    m.W[0, 0] = 7.0                    # in place: not seen (documented: pass data as arguments)
    assert f(x) == traced


@pytest.mark.parametrize("target", TARGETS)
def test_method_called_inside_a_trace_sees_rebound_attributes(target):
    m = Model(3)

    def loss(x):
        return m.loss(x) + 1.0

    f = sg.differentiate(loss, target=target)
    x = np.full(3, 0.5)
    assert f(x) == pytest.approx(m.loss(x) + 1.0, rel=1e-14)
    m.scale = -1.0
    assert f(x) == pytest.approx(m.loss(x) + 1.0, rel=1e-14)


def test_large_attribute_array_is_named_in_the_source():
    m = Model(10)
    f = sg.differentiate(m.loss, target="python")
    f.grad(np.ones(10))
    assert "attribute 'W' of an object" in f.grad.source


def scaled_activation(x, scale=2.0, act=np.tanh):
    return scale * np.sum(act(x))


@pytest.mark.parametrize("target", TARGETS)
def test_function_arguments_are_static_by_identity(target):
    f = sg.differentiate(scaled_activation, target=target)
    x = np.array([0.1, -0.4, 0.9])
    assert f(x) == pytest.approx(2.0 * np.sum(np.tanh(x)), rel=1e-14)
    np.testing.assert_allclose(f.grad(x), 2.0 * (1.0 - np.tanh(x) ** 2), rtol=1e-14)
    np.testing.assert_allclose(f.grad(x, 3.0, np.sin), 3.0 * np.cos(x), rtol=1e-14)
    np.testing.assert_allclose(f.grad(x, act=lambda z: z * z), 4.0 * x, rtol=1e-14)
    np.testing.assert_allclose(f.grad(x), 2.0 * (1.0 - np.tanh(x) ** 2), rtol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_function_leaf_of_a_pytree_is_static(target):
    def layer(params, x):
        return np.sum(params["act"](params["W"] @ x))

    W = np.array([[0.5, -0.2], [0.1, 0.3]])
    x = np.array([1.0, 2.0])
    g = sg.grad(layer, wrt=1, target=target)({"W": W, "act": np.tanh}, x)
    np.testing.assert_allclose(g, W.T @ (1.0 - np.tanh(W @ x) ** 2), rtol=1e-14)
    g = sg.grad(layer, wrt=1, target=target)({"W": W, "act": np.sin}, x)
    np.testing.assert_allclose(g, W.T @ np.cos(W @ x), rtol=1e-14)
    with pytest.raises(TypeError, match="act"):   # a function leaf has no gradient
        sg.grad(layer, target=target)({"W": W, "act": np.tanh}, x)


def test_an_object_argument_is_a_clear_type_error():
    class Params:
        a = 2.0

    with pytest.raises(TypeError, match="tuple/list/dict/namedtuple of them, got Params"):
        sg.differentiate(lambda p, x: x * 2.0)(Params(), 1.0)
