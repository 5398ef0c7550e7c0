"""Every target returns the same structure: ``wrt=(0,)`` gives a 1-tuple (DESIGN.md §2), a
function returning a 1-tuple or nested tuples gives them back as they are, and value_and_grad
nests the two. (target="python" used to return the bare first element of a 1-tuple, and
raised 'float object is not iterable' for a scalar.) The CUDA back end is checked through its
CPU emulation of the PTX plan."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen import ptx_emulate


def dot(x, y):
    return np.sum(x * y)


def one_tuple(x, y):
    return (np.sum(x * y),)


def nested(x, y):
    return x * 2.0, (np.sum(x * y), (y - x,))


def empty_inner(x, y):
    return np.sum(x) * y, ()


X, Y = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 4.0])
ARGS = {"arrays": (X, Y), "floats": (1.5, -2.0)}


def _run(target, fn, wrt, kind, args):
    f = sg.differentiate(fn, wrt=wrt, target="python" if target == "cuda-emulated" else target)
    f = {"call": f, "grad": f.grad, "value_and_grad": f.value_and_grad}[kind]
    if target == "cuda-emulated":
        return ptx_emulate.run(f._graph(list(args)), list(args))
    return f(*args)


def _assert_same(got, want, where="result"):
    """Same nesting, same leaf kinds (Python float for a float64 scalar, else an array), same
    numbers."""
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want), f"{where}: {got!r} vs {want!r}"
        for k, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, f"{where}[{k}]")
        return
    assert type(got) is type(want), f"{where}: {type(got).__name__} vs {type(want).__name__}"
    np.testing.assert_allclose(got, want, rtol=1e-14, err_msg=where)


def _expected(fn, wrt, kind, args):
    """The structure and numbers by hand (the gradient of the sum of all outputs)."""
    x, y = args
    box = (lambda v: float(v)) if np.ndim(x) == 0 else (lambda v: np.asarray(v, dtype=float))
    value = {dot: lambda: float(np.sum(x * y)),
             one_tuple: lambda: (float(np.sum(x * y)),),
             nested: lambda: (box(x * 2.0), (float(np.sum(x * y)), (box(y - x),))),
             empty_inner: lambda: (box(np.sum(x) * y), ())}[fn]()
    # empty_inner: d/dx sum(sum(x) * y) = sum(y) in every element, d/dy = sum(x)
    dx = {dot: y, one_tuple: y, nested: 2.0 + y - 1.0, empty_inner: np.sum(y) + 0 * x}[fn]
    dy = {dot: x, one_tuple: x, nested: x + 1.0, empty_inner: np.sum(x) + 0 * y}[fn]
    grads = tuple(box(g) for g in (dx, dy))
    grad = grads[wrt] if isinstance(wrt, int) else tuple(grads[i] for i in wrt)
    return {"call": value, "grad": grad, "value_and_grad": (value, grad)}[kind]


@pytest.mark.parametrize("target", ["cpu", "python", "cuda-emulated"])
@pytest.mark.parametrize("kind, wrt", [("call", 0)] + [
    (kind, wrt) for kind in ("grad", "value_and_grad") for wrt in (0, (0,), (1,), (0, 1), (1, 0))])
@pytest.mark.parametrize("fn", [dot, one_tuple, nested, empty_inner])
@pytest.mark.parametrize("args", ARGS.values(), ids=ARGS.keys())
def test_every_target_returns_the_same_tree(target, kind, wrt, fn, args):
    _assert_same(_run(target, fn, wrt, kind, args), _expected(fn, wrt, kind, args))


def test_generated_source_returns_a_one_tuple():
    source = sg.differentiate(dot, wrt=(0,), target="python").grad.source_for(X, Y)
    assert source.rstrip().splitlines()[-1].strip() == "return (y,)", source


# A returned list is a list on every target (it used to come back as a tuple).
def returns_a_list(s, t):
    return [s * t, t]


def returns_nested_lists(x, s):
    return (x * s, [np.sum(x), [s * s]])


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_list_outputs_stay_lists(target):
    assert sg.differentiate(returns_a_list, target=target)(2.0, 3.0) == [6.0, 3.0]
    value = sg.differentiate(returns_nested_lists, target=target)(np.ones(2), 2.0)
    assert type(value) is tuple and type(value[1]) is list and type(value[1][1]) is list
    assert value[1] == [2.0, [4.0]]
    np.testing.assert_array_equal(value[0], [2.0, 2.0])
    both, grads = sg.value_and_grad(returns_nested_lists, wrt=(0, 1), target=target)(np.ones(2), 2.0)
    assert type(both[1]) is list and type(grads) is tuple
    np.testing.assert_allclose(grads[0], [3.0, 3.0])
    assert grads[1] == 6.0
