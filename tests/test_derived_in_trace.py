"""Calling a derived Function (``f.grad``, ``value_and_grad``, ``hvp``) inside a differentiated
function splices in the derivative's graph (it used to inline the primal function silently)."""
import numpy as np

import symgrad as sg


def loss(x, w):
    return np.sum(np.tanh(x * w) ** 2)


input_grad = sg.grad(loss, wrt=0)
both = sg.value_and_grad(loss, wrt=(0, 1))
hess_vec = sg.hvp(loss)


def grad_norm(w, x):
    g = input_grad(x, w)
    return np.sum(g * g)


def value_plus_grads(w, x):
    value, (gx, gw) = both(x, w)
    return value + np.sum(gx * gw)


def curvature(w, x):
    return np.sum(hess_vec(x, np.ones_like(x), w) * x)


X = np.array([0.5, -1.0, 0.3])
W = np.array([1.0, 2.0, -0.7])


def test_grad_inside_trace_is_the_gradient():
    f = sg.differentiate(grad_norm)
    expected = np.sum(input_grad(X, W) ** 2)
    assert abs(f(W, X) - expected) < 1e-14
    assert sg.check_grad(f, W, X) < 1e-6           # second order through the nested grad


def test_value_and_grad_inside_trace():
    f = sg.differentiate(value_plus_grads)
    value, (gx, gw) = both(X, W)
    assert abs(f(W, X) - (value + np.sum(gx * gw))) < 1e-14
    assert sg.check_grad(f, W, X) < 1e-6


def test_hvp_inside_trace():
    f = sg.differentiate(curvature)
    assert abs(f(W, X) - np.sum(hess_vec(X, np.ones(3), W) * X)) < 1e-13
