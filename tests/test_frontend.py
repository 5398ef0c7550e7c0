"""The supported Python subset (DESIGN.md §3), each construct traced, run and differentiated."""
import math
import sys

import numpy as np
import pytest

import symgrad as sg

SCALE = 3.0                        # a module global read while tracing
WEIGHTS = np.array([0.5, -1.0, 2.0])


def helper(a, b=2.0):
    return a * b + math.sin(a)


def uses_helper_and_globals(x):
    return helper(x) * SCALE + helper(x, b=0.5)


def tuple_unpack(x, y):
    a, b = x * y, x + y
    (c, d), e = (a, b), a * b
    return c + d + e


def multiple_returns(x):
    return x * x, np.sin(x)


def conditional_expression(x):
    return x * x if x > 0 else -x


def static_if(x, n):
    if n > 2:
        return x ** n
    return x * n


def data_if_assignments(x):
    if x > 1.0:
        y = x * x
        z = 1.0
    else:
        y = np.sin(x)
        z = 2.0
    return y * z


def data_if_early_return(x):
    if x < 0:
        return -x * 3.0
    y = x * x
    return y + 1.0


def nested_def_and_lambda(x):
    sq = lambda v: v * v           # noqa: E731
    def cube(v):
        return v * sq(v)
    return cube(x) + sq(x)


def closure_factory(k):
    def inner(x):
        return np.exp(k * x)
    return inner


def for_static_range(x):
    s = 0.0
    for i in range(1, 4):
        s = s + x ** i / i
    return s


def for_over_shape(x):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i] * (i + 1)
    return total


def list_append_and_stack(x):
    parts = []
    for i in range(3):
        parts.append(x * (i + 1))
    return np.sum(np.stack(parts) ** 2)


def comprehension_concat(x):
    return np.sum(np.concatenate([x * k for k in range(1, 3)]) ** 2)


def functional_update(x):
    y = np.zeros_like(x)
    y[0] = x[1] * 2.0
    y[1:] = x[:-1] ** 2
    y[2] += x[0]
    return np.sum(y * y)


def copy_then_update(x):
    y = x.copy()
    y[0] = 0.0
    return np.sum(y ** 2)


def augmented_assignment(x, y):
    s = x
    s *= y
    s += 1.0
    s -= x / 2.0
    s /= 2.0
    s **= 2
    return s


def integer_data(x, labels):
    return np.sum(x * labels)


def bool_mask(x, mask):
    return np.sum(np.where(mask, x * x, 0.0))


def builtins_min_max(x, y):
    return max(x, y) + min(x * 2.0, y)


def for_over_array_rows(x):
    s = 0.0
    for row in x:
        s = s + np.sum(row) ** 2
    return s


def enumerate_zip(x, y):
    s = 0.0
    for i, (a, b) in enumerate(zip([x, y], [y, x])):
        s = s + (i + 1) * a * b
    return s


def method_calls(x):
    return x.sum() + x.mean() * x.max() - x.min() + x.reshape(2, 2).T.sum(axis=0)[1]


def len_builtin(x):
    return x[len(x) - 1] * len(x)


def calls_decorated(x):
    return square(x) + 1.0


@sg.differentiate
def square(x):
    return x * x


def raises_on_bad_static(x, n):
    if n < 0:
        raise ValueError("n must be non-negative")
    return x * n


SCALAR_CASES = [
    (uses_helper_and_globals, (0.7,), 0),
    (tuple_unpack, (0.7, 1.3), (0, 1)),
    (multiple_returns, (0.7,), 0),
    (conditional_expression, (0.7,), 0),
    (conditional_expression, (-0.7,), 0),
    (static_if, (0.7, 3), 0),
    (static_if, (0.7, 1), 0),
    (data_if_assignments, (1.5,), 0),
    (data_if_assignments, (0.5,), 0),
    (data_if_early_return, (-0.5,), 0),
    (data_if_early_return, (0.5,), 0),
    (nested_def_and_lambda, (0.7,), 0),
    (closure_factory(0.3), (0.7,), 0),
    (for_static_range, (0.7,), 0),
    (augmented_assignment, (0.7, 1.3), (0, 1)),
    (builtins_min_max, (0.7, 1.3), (0, 1)),
    (builtins_min_max, (1.7, 1.3), (0, 1)),
    (enumerate_zip, (0.7, 1.3), (0, 1)),
    (calls_decorated, (0.7,), 0),
]


@pytest.mark.parametrize("fn, args, wrt", SCALAR_CASES, ids=lambda v: getattr(v, "__name__", None))
def test_scalar_subset(fn, args, wrt):
    f = sg.differentiate(fn, wrt=wrt, target="python")
    expected = fn.fn(*args) if isinstance(fn, sg.Function) else fn(*args)
    np.testing.assert_allclose(f(*args), expected, rtol=1e-14)
    assert sg.check_grad(f, *args, wrt=wrt) < 1e-6


ARRAY_CASES = [
    (for_over_shape, (np.array([0.3, -0.2, 0.9]),)),
    (list_append_and_stack, (np.array([0.3, -0.2, 0.9]),)),
    (comprehension_concat, (np.array([0.3, -0.2, 0.9]),)),
    (functional_update, (np.array([0.3, -0.2, 0.9, 1.1]),)),
    (copy_then_update, (np.array([0.3, -0.2, 0.9]),)),
    (for_over_array_rows, (np.arange(6.0).reshape(3, 2) / 5,)),
    (method_calls, (np.array([0.3, -0.2, 0.9, 0.4]),)),
    (len_builtin, (np.array([0.3, -0.2, 0.9]),)),
    (conditional_expression, (np.array([0.3, -0.2, 0.9]),)),
    (data_if_assignments, (np.array([0.3, 1.2, 1.9]),)),
    (data_if_early_return, (np.array([-0.3, 1.2, 1.9]),)),
]


@pytest.mark.parametrize("fn, args", ARRAY_CASES, ids=lambda v: getattr(v, "__name__", None))
def test_array_subset(fn, args):
    f = sg.differentiate(fn, target="python")
    if fn in (conditional_expression, data_if_assignments, data_if_early_return):
        expected = np.array([fn(float(v)) for v in args[0]])   # elementwise if on arrays
    else:
        expected = fn(*[a.copy() for a in args])
    np.testing.assert_allclose(f(*args), expected, rtol=1e-14)
    assert sg.check_grad(f, *args) < 1e-6


def test_caller_arrays_never_mutated():
    x = np.array([0.3, -0.2, 0.9, 1.1])
    before = x.copy()
    f = sg.differentiate(functional_update, target="python")
    f(x), f.grad(x)
    np.testing.assert_array_equal(x, before)


def test_integer_and_bool_data():
    x = np.array([0.5, 1.5, -2.0])
    labels = np.array([1, 0, 2])
    g = sg.grad(integer_data, target="python")(x, labels)
    np.testing.assert_array_equal(g, labels.astype(float))
    mask = np.array([True, False, True])
    np.testing.assert_allclose(sg.grad(bool_mask, target="python")(x, mask), np.where(mask, 2 * x, 0))
    with pytest.raises(TypeError, match="cannot differentiate"):
        sg.grad(integer_data, wrt=1, target="python")(x, labels)


def test_static_int_argument_specialises():
    f = sg.differentiate(static_if, target="python")
    assert f.grad(2.0, 3) == pytest.approx(12.0)
    assert f.grad(2.0, 1) == pytest.approx(1.0)
    assert len(f.grad._cache) == 2


def test_user_exception_on_static_path():
    f = sg.differentiate(raises_on_bad_static, target="python")
    with pytest.raises(ValueError, match="non-negative"):
        f(1.0, -1)


def test_data_if_selects_taken_branch_derivative():
    f = sg.differentiate(data_if_assignments, target="python")
    assert f.grad(1.5) == pytest.approx(2 * 1.5)
    assert f.grad(0.5) == pytest.approx(2 * math.cos(0.5))


def test_eager_sg_functions_run_plain_python():
    def plain(x):
        z = x - sg.reduce_max(x)
        return -sg.reduce_sum(z - sg.log(sg.reduce_sum(sg.exp(z))))
    x = np.array([1.0, 2.0, 3.0])
    assert plain(x) == pytest.approx(sg.differentiate(plain, target="python")(x))
    assert sg.exp(0.0) == 1.0 and sg.stop_gradient(2.5) == 2.5
    np.testing.assert_allclose(sg.maximum(x, 2.0), np.maximum(x, 2.0))


def test_float32_weak_python_scalars():
    x = np.array([1.0, 2.0], dtype=np.float32)
    f = sg.differentiate(lambda x: x * 2.5 + 1, target="python")
    assert f(x).dtype == np.float32 and f.grad(x).dtype == np.float32


@pytest.mark.skipif(sys.version_info < (3, 11), reason="needs code positions (Python 3.11+); "
                    "3.10 reports such lambdas as ambiguous")
def test_lambdas_sharing_a_line_are_told_apart():
    square, cube = sg.grad(lambda x: x * x, target="python"), sg.grad(lambda x: x * x * x, target="python")
    assert (square(2.0), cube(2.0)) == (4.0, 12.0)
    nested = sg.grad(lambda x: (lambda x: x * 5.0)(x) + x, target="python")
    assert nested(1.0) == 6.0


def rows_with_builtins(x, y):
    s = 0.0
    for i, xi in enumerate(x):
        s = s + xi * i
    for a, b in zip(x, y):
        s = s + a * b
    first, *rest = x
    return s + sum(x) + max(x[0], x[1]) + len(list(x)) + first * len(rest)


def test_traced_arrays_iterate_over_rows_with_builtins():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    f = sg.differentiate(rows_with_builtins, wrt=(0, 1), target="python")
    assert f(x, y) == pytest.approx(rows_with_builtins(x, y))
    assert sg.check_grad(f, x, y, wrt=(0, 1)) < 1e-8
