"""Static computations inside a traced function: ``len`` of a Python list that holds traced
values, and NumPy's pure-Python helpers (``np.broadcast_shapes``) on static arguments, run
directly instead of being refused or interpreted."""
import numpy as np

import symgrad as sg


def uses_len(x):
    parts = [x, 2.0 * x, None]
    kept = [p for p in parts if p is not None]
    return np.sum(np.stack(kept)) / len(kept)


def uses_broadcast_shapes(x, y):
    shape = np.broadcast_shapes(x.shape, y.shape)
    return np.sum(x * y) * len(shape)


def test_len_of_a_list_of_traced_values():
    f = sg.differentiate(uses_len)
    x = np.array([1.0, 2.0])
    assert f(x) == uses_len(x) == 4.5
    np.testing.assert_allclose(f.grad(x), [1.5, 1.5])


def test_numpy_python_helpers_on_static_arguments():
    f = sg.differentiate(uses_broadcast_shapes)
    x, y = np.ones((2, 3)), np.arange(3.0)
    assert f(x, y) == uses_broadcast_shapes(x, y) == 12.0
    np.testing.assert_allclose(f.grad(x, y), np.tile(2 * y, (2, 1)))
