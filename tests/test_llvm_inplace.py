"""Item writes into local arrays on target="cpu": an update may overwrite its base's buffer in
place only when nothing else reads that buffer, and views (reshape, expand_dims, transpose)
share their operand's buffer, so the operand's other readers count too
(codegen.schedule.Schedule._update_in_place). Each function is checked against NumPy running
the same source, target="python", and finite differences."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen.schedule import Schedule


def reshape_of_sum(x):
    m = np.sum(x)
    w = np.reshape(np.sum(x), (1,)) * 1.0
    w[0] = 0.0
    return m + np.sum(w)


def expand_dims_of_sum(x):
    m = np.sum(x)
    w = np.expand_dims(np.sum(x), 0) * 1.0
    w[0] = 7.0
    return m + np.sum(w)


def view_of_product_read_later(x):
    p = np.reshape(x * x, (2, 3))
    w = np.reshape(p, (6,)) * 1.0   # a fresh array in NumPy, a view once x * 1 is x
    w[4] = 0.5
    return np.sum(w * x) + np.sum(p[1] * 2.0)


def flattened_matmul(x):
    a = np.reshape(x, (2, 3))
    m = a @ a.T
    w = np.reshape(m, (4,)) * 1.0
    w[1] = 1.0
    return np.sum(w * w) + np.sum(m * m)


def transpose_of_matmul(x):
    a = np.reshape(x, (2, 3))
    m = a @ a.T
    w = m.T * 1.0
    w[0, 1] = 1.0
    return np.sum(w) + np.sum(m * m)


def two_writes_then_dot(x):
    v = np.zeros_like(x)
    v[0] = np.sum(x * x)
    v[0] = np.sum(x)
    return np.dot(v, x) * np.sum(x)


def chained_writes(x):
    v = np.zeros_like(x)
    v[0] = x[1] * 2.0
    v[2] = x[0]
    v[1:3] = np.sin(x[3:5])
    return np.sum(v * np.sin(x))


def writes_that_read_back(x):
    v = np.zeros_like(x)
    v[0] = x[1] * 2.0
    v[1] = v[0] + 1.0
    v[0] = 3.0
    return np.sum(v * np.sin(x)) + v[0] * v[1]


FUNCTIONS = [reshape_of_sum, expand_dims_of_sum, view_of_product_read_later,
             flattened_matmul, transpose_of_matmul, two_writes_then_dot, chained_writes,
             writes_that_read_back]


@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_value_and_gradient_match_numpy_python_and_differences(fn):
    x = np.array([1.0, 2.0, 3.0, -0.5, 0.25, 1.5])
    want = fn(x.copy())                        # NumPy running the same source
    for target in ("cpu", "python"):
        f = sg.differentiate(fn, target=target)
        assert f(x) == pytest.approx(want, rel=1e-13), target
    g_cpu = sg.grad(fn, target="cpu")(x)
    g_py = sg.grad(fn, target="python")(x)
    np.testing.assert_allclose(g_cpu, g_py, rtol=1e-13, atol=1e-13)
    assert sg.check_grad(sg.differentiate(fn, target="cpu"), x) < 1e-6


def test_issue_example_two_writes_gradient():
    def f(y, s):
        v = np.zeros_like(y)
        v[0] = s * s
        v[0] = s
        return np.dot(v, y) * s
    y = np.array([2.0])
    for target in ("cpu", "python"):
        assert sg.grad(f, wrt=1, target=target)(y, 1.5) == pytest.approx(6.0, rel=1e-15)
        assert sg.differentiate(f, target=target)(y, 1.5) == pytest.approx(4.5, rel=1e-15)


def test_unshared_updates_still_happen_in_place():
    """The fix must not copy where nothing else reads: a chain of writes into a fresh
    array (what gradients of slicing produce) shares one buffer."""
    x = np.arange(6.0)
    graph = sg.differentiate(chained_writes)._inspect_entry(x).graph
    sched = Schedule(graph)
    homes = {sched.loc[n].buf for n in sched.loc if n.op == "setitem"}
    assert len(homes) == 1, homes
