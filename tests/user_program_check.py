"""The check every program of tests/test_user_programs*.py goes through: the value on each
target against the plain NumPy call, the gradient against central differences of the plain
call and target="cpu" against target="python" (the reference back end), and the gradient's
CUDA plan run by the CPU emulation (codegen.ptx_emulate) against the reference."""
import numpy as np

import symgrad as sg
from symgrad.codegen import ptx_emulate
from symgrad.runtime import flat_plan, flat_values

TARGETS = ("cpu", "python")


def leaves(tree):
    """The arrays and floats of a (nested) tuple/list/dict result, in order."""
    stack, out = [tree], []
    while stack:
        t = stack.pop()
        if isinstance(t, dict):
            stack.extend(reversed([t[k] for k in t]))
        elif isinstance(t, (tuple, list)):
            stack.extend(reversed(t))
        else:
            out.append(t)
    return out


def total(tree) -> float:
    """The sum of all outputs: what symgrad's gradient differentiates."""
    return float(sum(np.sum(np.asarray(v, dtype=np.float64)) for v in leaves(tree)))


def central_difference(fn, args, i, eps=1e-6):
    """d total(fn(*args)) / d args[i], by central differences in float64."""
    x = args[i]
    if isinstance(x, float):
        up, down = list(args), list(args)
        up[i], down[i] = x + eps, x - eps
        return (total(fn(*up)) - total(fn(*down))) / (2 * eps)
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[k] += eps
        down[k] -= eps
        out[k] = (total(fn(*_with(args, i, up))) - total(fn(*_with(args, i, down)))) / (2 * eps)
    return out


def _with(args, i, value):
    out = list(args)
    out[i] = value.astype(args[i].dtype) if isinstance(args[i], np.ndarray) else value
    return out


def assert_tree_close(got, want, rtol, atol, what):
    g, w = leaves(got), leaves(want)
    assert len(g) == len(w), (what, len(g), len(w))
    for k, (a, b) in enumerate(zip(g, w)):
        np.testing.assert_allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"{what}: leaf {k}")


def check_program(fn, args, wrt=0, fd_rtol=1e-6, fd_atol=1e-7, cuda=True, value_rtol=1e-10):
    """Values, gradients (every target against central differences and against each other)
    and, with ``cuda``, the gradient's CUDA plan under the emulation. Returns the reference
    gradient (a tuple, one per ``wrt`` entry)."""
    wrts = wrt if isinstance(wrt, tuple) else (wrt,)
    want_value = fn(*args)
    grads = {}
    for target in TARGETS:
        f = sg.differentiate(fn, wrt=wrt, target=target)
        assert_tree_close(f(*args), want_value, value_rtol, 1e-12, f"{fn.__name__} value on {target}")
        g = f.grad(*args)
        g = g if isinstance(wrt, tuple) else (g,)
        for i, gi in zip(wrts, g):
            if isinstance(args[i], np.ndarray):
                assert np.shape(gi) == args[i].shape, (fn.__name__, target, i)
                assert np.asarray(gi).dtype == args[i].dtype, (fn.__name__, target, i, np.asarray(gi).dtype)
            np.testing.assert_allclose(gi, central_difference(fn, args, i), rtol=fd_rtol, atol=fd_atol,
                                       err_msg=f"{fn.__name__} d/d{i} on {target} vs central differences")
        grads[target] = g
    single = any(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in args)
    tol = 3e-5 if single else 1e-11
    assert_tree_close(grads["cpu"], grads["python"], tol, tol, f"{fn.__name__} cpu vs python")
    if cuda:
        check_cuda(sg.differentiate(fn, wrt=wrt, target="python").grad, args, grads["python"], tol)
    return grads["python"]


def check_cuda(f, args, want, tol=1e-11):
    """``f``'s graph for ``args`` through the CUDA plan (emulated) against ``want``."""
    values = f.bind(list(args), {})   # the defaults applied, as a call does
    graph = f._graph(values)
    if graph.in_tree is not None:   # pytree arguments: the kernels see their leaves
        values = flat_values(values, flat_plan(graph.in_tree))
    got = ptx_emulate.run(graph, values)
    got = got if isinstance(want, tuple) and isinstance(got, tuple) else (got,)
    assert_tree_close(got, want, tol, tol, f"{f.__name__} cuda emulation vs python")


def check_float32(fn, args32, args64, wrt, target, name):
    """``fn`` on float32 arguments on ``target``: NumPy's dtype and value, and a float32
    gradient (of each array argument) within 2e-4 of the reference's float64 one. Returns the
    differentiated function and its gradient."""
    f = sg.differentiate(fn, wrt=wrt, target=target)
    value, want_value = f(*args32), fn(*args32)
    assert np.asarray(value).dtype == np.asarray(want_value).dtype   # NumPy's promotion
    np.testing.assert_allclose(value, want_value, rtol=1e-5, atol=1e-5)
    want = sg.differentiate(fn, wrt=wrt, target="python").grad(*args64)
    got = f.grad(*args32)
    for i, g, w in zip(wrt, got, want):
        if isinstance(args32[i], np.ndarray):
            assert g.dtype == np.float32, (name, i)
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4, err_msg=f"{name} d/d{i}")
    return f, got
