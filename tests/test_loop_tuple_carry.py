"""Loops whose carry is a (nested) tuple/list of arrays and Python numbers (an LSTM's
``(h, c)`` state) are traced as loop regions, one carry per leaf (symgrad.loops,
``_container_carries``): the IR does not grow with the trip count. Each case is checked on
target="python" and target="cpu" against the plain function for values and central
differences for gradients; a body that changes the container's structure is unrolled (values
still right) and a leaf whose shape keeps changing is refused naming it."""
from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg

TARGETS = ("python", "cpu")


def lstm_cell(W, state, x):
    h, c = state
    gate = 1.0 / (1.0 + np.exp(-(W @ h + x)))
    c = gate * c + (1.0 - gate) * np.tanh(W @ c - x)
    return (np.tanh(c) * gate, c)


def lstm_loss(W, xs):
    state = (np.zeros(4), np.zeros(4))
    for x in xs:
        state = lstm_cell(W, state, x)
    return np.sum(state[0] ** 2)


def gru_cell(W, h, x):
    z = 1.0 / (1.0 + np.exp(-(W @ h + x)))
    candidate = np.tanh(W.T @ (z * h) + x)
    new = (1.0 - z) * h + z * candidate
    return new, np.sum(new * x)   # the state and an output


def gru_loss(W, xs):
    carry = (np.full(4, 0.1), np.zeros(()))
    for x in xs:
        h, total = carry
        h, out = gru_cell(W, h, x)
        carry = (h, total + out)
    return carry[1] + np.sum(carry[0])


def list_carry(W, xs):
    state = [np.zeros(4), np.ones(4)]
    for x in xs:
        a, b = state
        state = [np.tanh(W @ b + x), 0.5 * a + 0.5 * b]
    return np.sum(state[0] * state[1])


def nested_tuple(W, xs):
    state = (np.zeros(4), (np.ones(4), np.zeros(4)))
    for x in xs:
        h, (c, m) = state
        h = np.tanh(W @ h + c * x)
        state = (h, (0.9 * c + 0.1 * h, np.maximum(m, h)))
    h, (c, m) = state
    return np.sum(h) + np.sum(c ** 2) + np.sum(m)


def array_and_float(W, xs):
    state = (np.zeros(4), 0.0)
    for x in xs:
        h, energy = state
        h = np.tanh(W @ h + x)
        state = (h, energy + np.sum(h ** 2))
    return state[1] * np.sum(state[0])


def scalar_leaf_peeled(W, xs):
    state = (0.0, np.zeros(4))   # the first leaf becomes an array in the first iteration
    for x in xs:
        state = (np.tanh(state[0] + W @ state[1]), state[1] + x)
    return np.sum(state[0] * state[1])


CASES = [lstm_loss, gru_loss, list_carry, nested_tuple, array_and_float, scalar_leaf_peeled]


def _args(trips, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(4, 4)) * 0.5, rng.normal(size=(trips, 4))


def _central_difference(fn, W, xs, d, h=1e-5):
    return (fn(W + h * d, xs) - fn(W - h * d, xs)) / (2 * h)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_value_and_gradient(fn, target):
    W, xs = _args(12)
    f = sg.differentiate(fn, wrt=0, target=target)
    assert f(W, xs) == pytest.approx(fn(W, xs), rel=1e-12, abs=1e-12)
    d = np.random.default_rng(1).normal(size=W.shape)
    assert np.sum(f.grad(W, xs) * d) == pytest.approx(_central_difference(fn, W, xs, d), rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("fn", CASES, ids=lambda f: f.__name__)
def test_traced_as_one_loop_region_whatever_the_trip_count(fn):
    listings = []
    for trips in (10, 60):
        listing = sg.differentiate(fn, wrt=0, target="python").ir_for(*_args(trips))
        assert "= loop(" in listing
        listings.append(len(listing.splitlines()))
    assert listings[0] == listings[1]


def growing_tuple(W, xs):
    state = (np.zeros(4),)
    for x in xs:
        state = state + (np.tanh(W @ state[-1] + x),)   # one item longer each iteration
    return sum(np.sum(s) for s in state)


def leaf_changes_type(W, xs):
    state = [np.zeros(4), 0]
    for x in xs:
        h, k = state
        state = [np.tanh(W @ h + x), (h, k)] if k == 0 else [np.tanh(W @ h + x), 0]
    return np.sum(state[0])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [growing_tuple, leaf_changes_type], ids=lambda f: f.__name__)
def test_a_structure_change_is_unrolled_with_the_right_values(fn, target):
    W, xs = _args(7)
    f = sg.differentiate(fn, wrt=0, target=target)
    assert "= loop(" not in f.ir_for(W, xs)
    assert f(W, xs) == pytest.approx(fn(W, xs), rel=1e-12)
    d = np.random.default_rng(1).normal(size=W.shape)
    assert np.sum(f.grad(W, xs) * d) == pytest.approx(_central_difference(fn, W, xs, d), rel=1e-6, abs=1e-8)


def growing_leaf(x):
    state = (np.zeros(2), 1.0)
    for t in range(10):
        state = (np.concatenate([state[0], x]), state[1])
    return np.sum(state[0])


def test_a_leaf_changing_shape_is_refused_naming_it():
    with pytest.raises(sg.UnsupportedSyntaxError, match=r"'state\[0\]' changes shape from \(5,\) to \(8,\)"):
        sg.differentiate(growing_leaf)(np.ones(3))


def in_place_into_item(W, xs):
    state = (np.zeros(4), np.zeros(4))
    for x in xs:
        h, c = state
        c += x              # writes into the array the tuple holds
        state = (np.tanh(W @ h + c), c)
    return np.sum(state[0]) + np.sum(state[1])


@pytest.mark.parametrize("target", TARGETS)
def test_writing_in_place_into_an_item_is_refused_as_without_a_region(target):
    """The aliasing check still sees that ``c`` is the tuple's array (the leaves share the
    container's buffers), in the region as in the unrolled loop."""
    W, xs = _args(8)
    f = sg.differentiate(in_place_into_item, wrt=0, target=target)
    with pytest.raises(sg.UnsupportedSyntaxError, match=r"'c', which may share memory with 'state'"):
        f(W, xs)
