"""A rebound module global, closure cell or module attribute is seen on the next call,
whatever the argument shapes (it used to be frozen into each cached signature, so a shape
seen before returned the old answer and a new shape the new one). Derived functions
(f.grad, value_and_grad, hvp, and a derivative called inside another trace) see it too. A
global array mutated in place is not seen: arrays are copied into the IR when traced."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import capture_helpers as m  # noqa: E402

import symgrad as sg  # noqa: E402

TARGETS = ["cpu", "python"]
A, B = np.array([1.0, 2.0, 3.0]), np.array([1.0, -1.0])


@pytest.fixture(autouse=True)
def restore_globals():
    saved = m.SCALE, m.WEIGHTS.copy(), m.config.OFFSET, m.helper
    yield
    m.SCALE, m.WEIGHTS, m.config.OFFSET, m.helper = saved
    vars(m).pop("len", None)


@pytest.mark.parametrize("target", TARGETS)
def test_rebound_global_is_seen_for_seen_and_new_shapes(target):
    f = sg.differentiate(m.scaled, target=target)
    vg, h = f.value_and_grad, sg.hvp(f)
    assert f(A) == 28.0 and f(B) == 4.0
    np.testing.assert_array_equal(f.grad(A), 4.0 * A)
    np.testing.assert_array_equal(h(A, A), 4.0 * A)
    m.SCALE = 3.0
    for x in (A, B, np.ones(4)):
        assert f(x) == 3.0 * np.sum(x * x)
        np.testing.assert_array_equal(f.grad(x), 6.0 * x)
        value, grad = vg(x)
        assert value == 3.0 * np.sum(x * x)
        np.testing.assert_array_equal(grad, 6.0 * x)
        np.testing.assert_array_equal(h(x, x), 6.0 * x)
        np.testing.assert_array_equal(sg.grad(m.scaled, target=target)(x), 6.0 * x)


@pytest.mark.parametrize("target", TARGETS)
def test_rebound_closure_cell_is_seen(target):
    inner, set_k = m.closure(2.0)
    f = sg.differentiate(inner, target=target)
    assert f(A) == 12.0 and f.grad(A)[0] == 2.0
    set_k(5.0)
    assert f(A) == 30.0 and f.grad(A)[0] == 5.0 and f(B) == 0.0


@pytest.mark.parametrize("target", TARGETS)
def test_rebound_module_attribute_is_seen(target):
    f = sg.differentiate(m.offset, target=target)
    assert f(A) == 9.0
    m.config.OFFSET = -1.0
    assert f(A) == 3.0


@pytest.mark.parametrize("target", TARGETS)
def test_rebound_helper_function_and_shadowed_builtin(target):
    f = sg.differentiate(m.calls_helper, target=target)
    assert f(A) == 6.0
    m.helper = lambda x: x * 10.0
    assert f(A) == 60.0 and f.grad(A)[0] == 10.0
    g = sg.differentiate(m.uses_len, target=target)
    assert g(A) == 18.0
    m.len = lambda x: 1   # a global now shadows the builtin
    assert g(A) == 6.0


@pytest.mark.parametrize("target", TARGETS)
def test_global_array_rebound_is_seen_but_mutation_in_place_is_not(target):
    f = sg.differentiate(m.weighted, target=target)
    assert f(A) == 14.0
    m.WEIGHTS[0] = 100.0          # in place: the traced copy is kept (documented)
    assert f(A) == 14.0
    m.WEIGHTS = np.array([0.0, 0.0, 1.0])
    assert f(A) == 3.0
    np.testing.assert_array_equal(f.grad(A), [0.0, 0.0, 1.0])


def test_derivative_called_inside_a_trace_sees_the_change():
    f = sg.differentiate(m.scaled)

    def uses_grad(x):
        return np.sum(f.grad(x) * x)
    g = sg.differentiate(uses_grad)
    assert g(A) == 2.0 * 2.0 * 14.0
    m.SCALE = 1.0
    assert g(A) == 2.0 * 14.0


def test_equal_scalar_rebind_keeps_the_trace():
    """Re-assigning an equal number (another float object) is not a change: no retrace."""
    f = sg.differentiate(m.scaled)
    f(A)
    (entry,) = f._cache.values()
    old = m.SCALE
    m.SCALE = float("2.0")   # equal, another object
    assert m.SCALE is not old and f(A) == 28.0
    assert next(iter(f._cache.values())) is entry
    m.SCALE = -0.0   # unequal as a constant (1 / -0.0 differs): traced again
    assert f(A) == -0.0
    assert next(iter(f._cache.values())) is not entry


def test_only_user_names_are_checked_on_each_call():
    """np (a library module) and numpy's own functions are not recorded: every record is an
    identity check on every call."""
    f = sg.differentiate(m.scaled)
    f.grad(A)
    (entry,) = f.grad._cache.values()
    assert [name for _, name, _ in entry.captures] == ["SCALE"]
