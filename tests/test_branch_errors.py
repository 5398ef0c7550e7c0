"""An error while tracing one side of an ``if`` on data (a shape error, an index out of range,
a misspelled name) is NumPy's error only when that side runs: symgrad traces both sides, so
the side that raised becomes an error guard (symgrad.guards.raised) and the other side is the
value; a call that takes the failing side raises the same exception, naming the same line."""
import numpy as np
import pytest

import symgrad as sg

TARGETS = ("cpu", "python")
X = np.arange(12.0).reshape(3, 4)


def grow_zero_d(x, X):
    v = np.where(np.sum(x) > 0, np.sum(x), 0.0)   # a 0-d array, as in NumPy
    if np.sum(x * x) > 10.0:
        v -= X          # NumPy: "non-broadcastable output operand", only when it runs
    return v * 2.0


def index_in_else(x, X):
    if np.sum(x) > 0:
        return np.sum(x * 3.0)
    else:
        return X[5, 0] * np.sum(x)


def name_in_then(x):
    y = x * 2.0
    if np.max(x) > 100.0:
        y = y + undefined_name   # noqa: F821 - NameError, only if this side runs
    return np.sum(y * y)


def in_a_loop(x, X):
    acc = np.zeros(3)
    for i in range(4):
        if np.sum(x) > 5.0 + i:
            acc = acc + X[i, :3]   # row 3 is out of range for a (3, 4) X
        else:
            acc = acc + x * i
    return np.sum(acc * acc)


def both_sides_raise(x, X):
    if np.sum(x) > 0:
        y = X[7]
    else:
        y = X[8]
    return np.sum(y)


@pytest.mark.parametrize("target", TARGETS)
def test_the_side_not_taken_does_not_raise(target):
    f = sg.differentiate(grow_zero_d, target=target)
    x = np.ones(3)
    assert f(x, X) == grow_zero_d(x, X)
    np.testing.assert_allclose(f.grad(x, X), np.full(3, 2.0))
    np.testing.assert_allclose(sg.hessian(f)(x, X), np.zeros((3, 3)))
    g = sg.differentiate(index_in_else, target=target)
    assert g(x, X) == index_in_else(x, X)
    np.testing.assert_allclose(g.grad(x, X), np.full(3, 3.0))
    h = sg.differentiate(name_in_then, target=target)
    assert h(x) == name_in_then(x)
    np.testing.assert_allclose(h.grad(x), 8.0 * x)


@pytest.mark.parametrize("target", TARGETS)
def test_the_side_taken_raises_numpys_error_at_its_line(target):
    x = np.full(3, 4.0)
    with pytest.raises(ValueError):
        grow_zero_d(x, X)
    for call in (sg.differentiate(grow_zero_d, target=target),
                 sg.differentiate(grow_zero_d, target=target).grad,
                 sg.differentiate(grow_zero_d, target=target).value_and_grad,
                 sg.hessian(sg.differentiate(grow_zero_d, target=target))):
        with pytest.raises(ValueError, match="non-broadcastable") as info:
            call(x, X)
        assert f"{__file__}:{grow_zero_d.__code__.co_firstlineno + 3}" in str(info.value)
        assert "v -= X" in str(info.value)
    with pytest.raises(IndexError, match="out of bounds"):
        sg.differentiate(index_in_else, target=target)(-np.ones(3), X)
    with pytest.raises(NameError, match="undefined_name"):
        sg.differentiate(name_in_then, target=target).grad(np.full(3, 200.0))


@pytest.mark.parametrize("target", TARGETS)
def test_in_a_loop_region_and_under_vmap(target):
    f = sg.differentiate(in_a_loop, target=target)
    x = np.array([0.5, 1.0, 1.5])          # sum 3: never the first side
    np.testing.assert_allclose(f(x, X), in_a_loop(x, X))
    np.testing.assert_allclose(f.grad(x, X), sg.differentiate(in_a_loop, target="python").grad(x, X))
    with pytest.raises(IndexError):
        in_a_loop(np.full(3, 3.0), X)       # sum 9 > 8: the fourth trip reads X[3]
    with pytest.raises(IndexError, match="out of bounds"):
        f(np.full(3, 3.0), X)
    v = sg.vmap(sg.differentiate(grow_zero_d, target=target), in_axes=(0, None))
    np.testing.assert_allclose(v(np.stack([np.ones(3), np.full(3, 0.5)]), X), [6.0, 3.0])
    with pytest.raises(ValueError, match="non-broadcastable"):
        v(np.stack([np.ones(3), np.full(3, 4.0)]), X)


@pytest.mark.parametrize("target", TARGETS)
def test_both_sides_raising_is_an_error_while_tracing(target):
    with pytest.raises(IndexError, match="out of bounds"):
        sg.differentiate(both_sides_raise, target=target)(np.ones(3), X)
