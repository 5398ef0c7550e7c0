"""The check every program of tests/test_user_programs*.py goes through: the value on each
target against the plain NumPy call, the gradient against central differences of the plain
call and target="cpu" against target="python" (the reference back end), and the gradient's
CUDA plan run by the CPU emulation (codegen.ptx_emulate) against the reference."""
import inspect

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


def check_api(fn, args, wrt=0, fd_rtol=1e-6, fd_atol=1e-7, cuda=True, hessian=True, vmap_axes=None,
              sympy=False, tmp_path=None, export_c=True):
    """``check_program`` and then the rest of the API contract on the same program: value_and_grad,
    jvp (against the gradient), jacobian in both modes (summed over the output: the gradient),
    hessian (against central differences of the gradient) and hvp (against the hessian) for
    each ``wrt`` argument, vmap over ``vmap_axes`` (its value and its gradient against a loop of
    plain calls), with ``tmp_path`` the exported .py (NumPy alone) and, with ``export_c``, .c
    (compiled by gcc) of the gradient, and with ``sympy`` the gradient's sympy expression at scalar arguments."""
    wrts = wrt if isinstance(wrt, tuple) else (wrt,)
    want = check_program(fn, args, wrt, fd_rtol, fd_atol, cuda)
    tol = dict(rtol=1e-10, atol=1e-12)
    f = sg.differentiate(fn, wrt=wrt, target="cpu")
    value, g = f.value_and_grad(*args)
    assert_tree_close(value, fn(*args), 1e-10, 1e-12, f"{fn.__name__} value_and_grad value")
    assert_tree_close(g if isinstance(wrt, tuple) else (g,), want, 1e-10, 1e-12, f"{fn.__name__} value_and_grad")
    rng = np.random.default_rng(0)
    tangents = [_random_like(args[i], rng) for i in wrts]
    for target in TARGETS:
        value, tangent = sg.jvp(fn, wrt=wrt, target=target)(*args, *tangents)
        assert_tree_close(value, fn(*args), 1e-10, 1e-12, f"{fn.__name__} jvp value on {target}")
        slope = sum(float(np.sum(np.asarray(gi) * t)) for gi, t in zip(leaves(want), leaves(tangents)))
        np.testing.assert_allclose(total(tangent), slope, err_msg=f"{fn.__name__} jvp on {target}", **tol)
    if any(isinstance(args[i], (tuple, list, dict)) for i in wrts):
        return   # jacobian and hessian refuse pytree arguments (README); the rest needs them
    out_ndim = np.ndim(fn(*args))
    for mode in ("fwd", "rev"):
        jac = sg.jacobian(fn, wrt=wrt, mode=mode, target="cpu")(*args)
        jac = jac if isinstance(wrt, tuple) else (jac,)
        for j, gi in zip(jac, want):
            np.testing.assert_allclose(np.sum(j, axis=tuple(range(out_ndim))), gi,
                                       err_msg=f"{fn.__name__} jacobian {mode}", **tol)
    for i, gi in zip(wrts, want):
        if not hessian:
            break
        rest = [a for k, a in enumerate(args) if k != i]
        grad_i = sg.grad(fn, wrt=i, target="python")
        H = np.asarray(sg.hessian(fn, wrt=i, target="cpu")(*args))
        x = np.asarray(args[i], dtype=np.float64)
        fd = np.zeros(x.shape + x.shape)
        for k in np.ndindex(x.shape):
            up, down = x.copy(), x.copy()
            up[k] += 1e-5
            down[k] -= 1e-5
            step = [(u if isinstance(args[i], np.ndarray) else float(u)) for u in (up, down)]
            fd[(Ellipsis,) + k] = (np.asarray(grad_i(*_with(args, i, step[0]))) -
                                   np.asarray(grad_i(*_with(args, i, step[1])))) / 2e-5
        scale = max(1.0, float(np.max(np.abs(H))))
        np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-6 * scale, err_msg=f"{fn.__name__} hessian d/d{i}")
        v = rng.standard_normal(x.shape) if x.ndim else 0.3
        hv = sg.hvp(fn, wrt=i, target="cpu")(args[i], v, *rest)
        want_hv = np.tensordot(H, v, axes=x.ndim) if x.ndim else H * v
        np.testing.assert_allclose(hv, want_hv, err_msg=f"{fn.__name__} hvp d/d{i}", rtol=1e-9,
                                   atol=1e-11 * scale)
    if vmap_axes is not None:
        _check_vmap(fn, args, wrt, vmap_axes)
    if tmp_path is not None:
        _check_exports(sg.grad(fn, wrt=wrt, target="python"), args, want, tmp_path, export_c)
    if sympy:
        names = list(inspect.signature(fn).parameters)
        exprs = sg.grad(fn, wrt=wrt, target="python").sympy(*args)
        exprs = exprs if isinstance(wrt, tuple) else (exprs,)
        values = dict(zip(names, args))
        for e, gi in zip(exprs, want):
            e = e.subs({x: values[x.name] for x in e.free_symbols})
            np.testing.assert_allclose(float(e.evalf()), gi, err_msg=f"{fn.__name__} sympy", **tol)


def _random_like(value, rng):
    """A random tangent with ``value``'s structure (0.7 for a float)."""
    if isinstance(value, dict):
        return {k: _random_like(v, rng) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_random_like(v, rng) for v in value)
    return rng.standard_normal(value.shape) if isinstance(value, np.ndarray) else 0.7


def _check_vmap(fn, args, wrt, in_axes, batch=3):
    """``sg.vmap(fn)`` and ``sg.vmap(sg.grad(fn))`` on a batch made by perturbing each mapped
    argument, against the plain call per example."""
    rng = np.random.default_rng(1)
    batched = [np.stack([a + 0.01 * k * rng.standard_normal(np.shape(a)) for k in range(batch)])
               if ax == 0 else a for a, ax in zip(args, in_axes)]
    per = [[b[k] if ax == 0 else b for b, ax in zip(batched, in_axes)] for k in range(batch)]
    for target in TARGETS:
        got = sg.vmap(fn, in_axes=tuple(in_axes), target=target)(*batched)
        np.testing.assert_allclose(got, np.stack([fn(*p) for p in per]), rtol=1e-10, atol=1e-12,
                                   err_msg=f"{fn.__name__} vmap on {target}")
        g = sg.vmap(sg.grad(fn, wrt=wrt, target=target), in_axes=tuple(in_axes))(*batched)
        g = g if isinstance(wrt, tuple) else (g,)
        ref = sg.grad(fn, wrt=wrt, target="python")
        for k, p in enumerate(per):
            r = ref(*p)
            r = r if isinstance(wrt, tuple) else (r,)
            for gi, ri in zip(g, r):
                np.testing.assert_allclose(np.asarray(gi)[k], ri, rtol=1e-10, atol=1e-12,
                                           err_msg=f"{fn.__name__} vmap grad on {target}")


def _check_exports(g, args, want, tmp_path, export_c=True):
    """The gradient exported as a .py module (run with NumPy alone) and as C (gcc)."""
    import shutil
    path = sg.export(g, tmp_path / f"{g.__name__}.py", *args)
    text = path.read_text()
    assert "import symgrad" not in text and "from symgrad" not in text, "the module imports symgrad"
    namespace = {}
    exec(compile(text, str(path), "exec"), namespace)
    fns = [v for k, v in namespace.items() if callable(v) and k.startswith("grad_")]
    got = fns[-1](*args)
    assert_tree_close(got if isinstance(got, tuple) else (got,), want, 1e-12, 1e-13, f"{g.__name__} exported .py")
    if not export_c or shutil.which("gcc") is None:
        return
    from test_export import _call_c
    # -O0: gcc -O2 spends 25-30 s allocating registers in the one 3700-line function of a
    # Kalman filter's gradient (hunt2); the numbers are what is checked here
    got = _call_c(g, tmp_path, *args, opt="-O0")
    assert_tree_close(tuple(got), want, 1e-11, 1e-13, f"{g.__name__} exported .c")
