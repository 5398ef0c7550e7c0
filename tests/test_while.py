"""``while`` loops: static tests run while tracing, data-dependent ones become capped loop
regions whose guard grows the cap when a call needs more trips (symgrad.while_loops,
symgrad.guards). Each program of the table is checked on target="python" and "cpu" against
plain NumPy execution of the undecorated function: values, gradients against central finite
differences, forward mode against reverse, second order, and vmap with a different trip count
per example; then the retry path, out=, compile counts, the limit, and the refusals."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pytest

import symgrad as sg
from ptx_child import assemble_in_child
from symgrad import guards
from symgrad.codegen import llvm

TARGETS = ("python", "cpu")


# ----------------------------------------------------------------------------------------------
# The programs

def newton_sqrt(a):
    x = a
    while abs(x * x - a) > 1e-12 * a:
        x = 0.5 * (x + a / x)
    return x


def bisection(c):
    # the cube root of c: ~36 halvings, more than the first cap (the retry path)
    lo = 0.0 * c
    hi = c + 1.0
    while hi - lo > 1e-10:
        mid = 0.5 * (lo + hi)
        if mid * mid * mid > c:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def fixed_point(p):
    x = 0.0 * p
    step = 1.0 + 0.0 * p
    while step > 1e-13:
        new = 0.5 * np.cos(p * x) + p
        step = abs(new - x)
        x = new
    return x


def damped(k, x0):
    # a damped oscillator stepped until a time (or an energy) condition: ~200 steps
    x = x0
    v = 0.0 * x0
    t = 0.0 * k
    while t < 2.0 and 0.5 * (v * v + k * x * x) > 1e-12:
        a = -k * x - 0.3 * v
        v = v + 0.01 * a
        x = x + 0.01 * v
        t = t + 0.01
    return x * x + v


def break_continue(x):
    s = 0.0 * x
    i = 0.0 * x
    while i < 50.0:
        i = i + 1.0
        if np.sin(i * x) > 0.7:
            continue
        s = s + np.sin(i * x) * x
        if s > 2.5:
            break
    return s + 0.1 * i * x


def long_loop(x, limit):
    # as many trips as limit says: thousands need several cap increases
    s = 0.0 * x
    t = 0.0 * limit
    while t < limit:
        s = s + np.sin(x + 1e-3 * t)
        t = t + 1.0
    return s


def static_while(x):
    k = 0
    while k < 6:
        x = np.sin(x) + 0.1 * k
        k += 1
    return x


def turns_data(x):
    y = 1.0          # a Python float: the test is static at first...
    while y < 100.0:
        y = y * x    # ... and data from the second trip on
    return y + x


def static_then_break(x):
    k = 0
    while k < 100:       # a static test; the break on data makes the rest a data loop
        k += 1
        x = x * 1.1
        if x > 5.0:
            break
    return x + k


def while_in_for(a):
    out = np.zeros_like(a)
    for i in range(a.shape[0]):
        x = a[i]
        while abs(x * x - a[i]) > 1e-12 * a[i]:
            x = 0.5 * (x + a[i] / x)
        out[i] = x
    return np.sum(out * a)


def for_in_while(x):
    v = x
    total = 0.0 * x[0]
    while np.sum(v * v) > 1e-3:
        acc = 0.0 * x[0]
        for j in range(v.shape[0]):
            acc = acc + np.sin(v[j])
        total = total + acc
        v = 0.7 * v
    return total


def while_in_while(x):
    total = 0.0 * x
    n = 0.0 * x
    while n < 4.0:
        y = x + n
        while y > 0.5:
            y = 0.8 * y
            total = total + y
        n = n + 1.0
    return total


def while_in_if(x):
    if x > 1.0:
        while x > 1.0:
            x = 0.5 * x
    else:
        x = 3.0 * x * x
    return x


@dataclass
class Case:
    fn: object
    args: tuple
    batch: tuple = ()             # per-argument batches for vmap (different trip counts)
    fd: bool = True               # differentiable where finite differences can see it
    hvp: bool = True
    tol: float = 1e-6
    axes: tuple = field(default=(0,))


CASES = {
    "newton_sqrt": Case(newton_sqrt, (2.0,), (np.array([2.0, 4e6, 9.0, 0.3]),)),
    # piecewise linear in c (each halving picks a side): gradients are checked against forward
    # mode and across targets, not against finite differences
    "bisection": Case(bisection, (2.0,), (np.array([2.0, 30.0, 0.5]),), fd=False, hvp=False),
    "fixed_point": Case(fixed_point, (0.7,), (np.array([0.7, 0.2, 1.1]),)),
    "damped": Case(damped, (1.3, 0.8), (np.array([1.3, 2.0, 0.5]), np.array([0.8, 0.1, 1.0])),
                   axes=(0, 0)),
    "break_continue": Case(break_continue, (0.37,), (np.array([0.37, 0.05, 1.3]),), hvp=False),
    "long_loop": Case(long_loop, (0.4, 3000.5), (np.array([0.4, 0.1, 0.9]), 2000.5),
                      axes=(0, None)),
    "static_while": Case(static_while, (0.3,), (np.array([0.3, 1.0, -2.0]),)),
    "turns_data": Case(turns_data, (1.7,), (np.array([1.7, 3.0, 1.2]),)),
    # Newton's stopping rule leaves ~1e-12 relative: finite differences see 1e-6 of it
    "while_in_for": Case(while_in_for, (np.array([2.0, 3.0, 5e3, 0.5, 7.0, 11.0]),),
                         tol=1e-5, batch=(np.array([[2.0, 3.0, 5.0, 0.5, 7.0, 11.0],
                                    [4e6, 1.0, 2.0, 3.0, 4.0, 5.0]]),)),
    "for_in_while": Case(for_in_while, (np.array([0.3, -0.5, 0.8, 0.1, 0.2, -0.4]),),
                         (np.array([[0.3, -0.5, 0.8, 0.1, 0.2, -0.4],
                                    [3.0, 2.0, 1.0, 0.1, 0.2, 0.3]]),), hvp=False),
    "static_then_break": Case(static_then_break, (0.3,), (np.array([0.3, 4.9, 1e-3]),)),
    "while_in_if": Case(while_in_if, (37.0,), (np.array([37.0, 0.3, 5e4]),)),
    "while_in_while": Case(while_in_while, (2.3,), (np.array([2.3, 0.4, 7.0]),)),
}


def _fd_grad(fn, args, i, eps=1e-6):
    x = np.asarray(args[i], dtype=float)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[k] += eps
        down[k] -= eps
        a = list(args)
        a[i] = up if x.ndim else float(up)
        f_up = fn(*a)
        a[i] = down if x.ndim else float(down)
        g[k] = (f_up - fn(*a)) / (2 * eps)
    return g


def _assert_close(got, want, tol):
    np.testing.assert_allclose(np.asarray(got, dtype=float), np.asarray(want, dtype=float),
                               rtol=tol, atol=tol)


@pytest.fixture(autouse=True)
def _fresh_caps():
    """Every test starts from the initial caps (a cap grown by another test would hide the
    retry path)."""
    saved = dict(guards.CAPS)
    guards.CAPS.clear()
    yield
    guards.CAPS.clear()
    guards.CAPS.update(saved)


# ----------------------------------------------------------------------------------------------
# The table

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients(name, target):
    case = CASES[name]
    f = sg.differentiate(case.fn, target=target)
    _assert_close(f(*case.args), case.fn(*case.args), 1e-12)
    g = sg.grad(f)(*case.args)
    if case.fd:
        _assert_close(g, _fd_grad(case.fn, case.args, 0), case.tol)
    value, grad = sg.value_and_grad(f)(*case.args)
    _assert_close(value, case.fn(*case.args), 1e-12)
    _assert_close(grad, g, 1e-12)
    # forward mode along a direction agrees with reverse mode
    x = np.asarray(case.args[0], dtype=float)
    direction = np.linspace(0.5, 1.5, x.size).reshape(x.shape) if x.ndim else 1.0
    value, tangent = sg.jvp(f)(*case.args, direction)
    _assert_close(value, case.fn(*case.args), 1e-12)
    _assert_close(tangent, np.sum(np.asarray(g) * direction), 1e-9)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.hvp and c.fd))
def test_second_order(name, target):
    case = CASES[name]
    f = sg.differentiate(case.fn, target=target)
    x = np.asarray(case.args[0], dtype=float)
    v = np.linspace(0.5, 1.5, x.size).reshape(x.shape) if x.ndim else 1.0
    hv = sg.hvp(f)(case.args[0], v, *case.args[1:])
    grad = sg.grad(case.fn, target="python")
    eps = 1e-5
    up = grad(*((x + eps * v if x.ndim else float(x + eps * v)),) + tuple(case.args[1:]))
    down = grad(*((x - eps * v if x.ndim else float(x - eps * v)),) + tuple(case.args[1:]))
    _assert_close(hv, (np.asarray(up) - np.asarray(down)) / (2 * eps), 1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_with_a_trip_count_per_example(name, target):
    case = CASES[name]
    f = sg.differentiate(case.fn, target=target)
    batch = case.batch
    in_axes = case.axes if len(case.axes) > 1 else case.axes[0]
    got = sg.vmap(f, in_axes=in_axes)(*batch)
    size = len(batch[0])

    def example(k):
        return [b[k] if ax == 0 else b for b, ax in zip(batch, case.axes)]
    want = [case.fn(*example(k)) for k in range(size)]
    _assert_close(got, want, 1e-12)
    grads = sg.vmap(sg.grad(f), in_axes=in_axes)(*batch)
    one = sg.grad(case.fn, target="python")
    _assert_close(grads, [one(*example(k)) for k in range(size)], 1e-10)


def test_jacobian_and_hessian_through_a_while():
    def normalise(v):
        s = np.sum(v * v)
        x = s
        while abs(x * x - s) > 1e-13 * s:
            x = 0.5 * (x + s / x)
        return v / x

    v = np.array([1.0, 2.0, 3.0])
    want = np.eye(3) / np.linalg.norm(v) - np.outer(v, v) / np.linalg.norm(v) ** 3
    for target in TARGETS:
        _assert_close(sg.jacobian(normalise, target=target)(v), want, 1e-9)
        hess = sg.hessian(lambda v: np.sum(normalise(v)), target=target)(v)
        grad = sg.grad(lambda v: np.sum(normalise(v)), target="python")
        fd = np.array([(grad(v + 1e-5 * e) - grad(v - 1e-5 * e)) / 2e-5 for e in np.eye(3)])
        _assert_close(hess, fd, 1e-6)


# ----------------------------------------------------------------------------------------------
# Caps: the retry, out=, compile counts, the limit

@pytest.mark.parametrize("target", TARGETS)
def test_the_cap_grows_and_a_shorter_call_still_runs_right(target):
    f = sg.differentiate(long_loop, target=target)
    for _ in range(2):   # the second call takes the hot path (the CPU back end's call plan)
        assert f(0.4, 10.5) == pytest.approx(long_loop(0.4, 10.5), rel=1e-12)
    assert f(0.4, 3000.5) == pytest.approx(long_loop(0.4, 3000.5), rel=1e-12)
    key = next(iter(guards.CAPS))
    assert guards.CAPS[key] >= 3001                       # grew from 16, by GROWTH each time
    assert f(0.4, 10.5) == pytest.approx(long_loop(0.4, 10.5), rel=1e-12)
    assert sg.grad(f)(0.4, 3000.5) == pytest.approx(_fd_grad(long_loop, (0.4, 3000.5), 0),
                                                     rel=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_out_is_right_after_a_retry(target):
    def scaled(x, limit):
        t = 0.0 * limit
        y = x
        while t < limit:
            y = 0.999 * y + 0.001 * np.cos(x)
            t = t + 1.0
        return y

    x = np.linspace(0.1, 1.0, 5)
    out = np.full(5, np.nan)
    f = sg.differentiate(scaled, target=target)
    result = f(x, 700.5, out=out)
    assert result is out
    np.testing.assert_allclose(out, scaled(x, 700.5), rtol=1e-12)


def test_the_ir_and_the_machine_code_do_not_grow_with_the_cap():
    f = sg.differentiate(long_loop)
    f.grad(0.4, 5.5)                                   # fits the first cap
    small = f.grad.ir
    compiles = llvm.stats()["compiles"]
    f.grad(0.4, 3000.5)                                # three cap increases, traced again
    big = f.grad.ir
    assert len(big.splitlines()) == len(small.splitlines())   # only the trip count differs
    assert big != small
    assert llvm.stats()["compiles"] == compiles        # the trip count is a run-time parameter


@pytest.mark.parametrize("target", TARGETS)
def test_an_endless_loop_is_a_clear_error_after_bounded_growth(target, monkeypatch):
    monkeypatch.setattr(guards, "MAX_TRIPS", 2 ** 12)   # the default is 2**24 trips

    def endless(x):
        while x > 0.0:
            x = x + 1.0
        return x

    f = sg.differentiate(endless, target=target)
    with pytest.raises(sg.WhileLimitError, match="did not end within 4096 trips"):
        f(1.0)
    assert f(-1.0) == -1.0


def test_the_source_shows_the_cap_and_runs_as_shown():
    f = sg.differentiate(newton_sqrt, target="python")
    f(2.0)
    source = f.source
    assert "raise RuntimeError" in source and "while trips < 16 and not done:" in source
    namespace = {"np": np}
    exec(source, namespace)
    assert namespace["newton_sqrt"](2.0) == pytest.approx(np.sqrt(2.0), rel=1e-14)
    with pytest.raises(RuntimeError, match="needs more than 16 trips"):
        namespace["newton_sqrt"](1e300)


def test_export_writes_the_capped_loop_to_python_only(tmp_path):
    f = sg.differentiate(newton_sqrt)
    path = sg.export(f, tmp_path / "newton.py", 2.0)
    namespace: dict = {}
    exec(path.read_text(), namespace)
    assert namespace["newton_sqrt"](2.0) == pytest.approx(np.sqrt(2.0), rel=1e-14)
    with pytest.raises(ValueError, match="only a .py"):
        sg.export(f, tmp_path / "newton.c", 2.0)


# ----------------------------------------------------------------------------------------------
# CUDA through the PTX emulation, and ptxas

def _vector_newton(v):
    s = np.sum(v * v)
    x = s
    while abs(x * x - s) > 1e-13 * s:
        x = 0.5 * (x + s / x)
    return v / x


def test_cuda_emulation_of_a_while_gradient():
    # (array arguments: a scalar argument inside a loop body is not yet lowered for CUDA)
    from symgrad.codegen import ptx_emulate
    from symgrad.guards import with_guard_outputs
    f = sg.differentiate(_vector_newton, target="python")
    v = np.array([3.0, 4.0, 1e3])
    want = f.grad(v)                                     # grows the cap to fit
    graph = with_guard_outputs(f.grad.graph_for([v])[0])
    grad, flags = ptx_emulate.run(graph, [v])
    assert not any(flags)
    _assert_close(grad, want, 1e-12)
    guards.CAPS.clear()                                  # the first cap (16) is too small
    short = with_guard_outputs(f.grad.graph_for([np.array([1e150, 1.0, 2.0])])[0])
    assert any(ptx_emulate.run(short, [np.array([1e150, 1.0, 2.0])])[1])


_PTX_SCRIPT = """
import sys
import symgrad as sg
sys.path.insert(0, {tests!r})
from test_while import newton_sqrt, while_in_for
import numpy as np
f = sg.differentiate(newton_sqrt, target="cuda")
open(sys.argv[1], "w").write(f.grad.ptx(2.0, arch="sm_80"))
g = sg.differentiate(while_in_for, target="cuda")
open(sys.argv[2], "w").write(g.grad.ptx(np.array([2.0, 3.0, 4.0, 5.0, 6.0]), arch="sm_80"))
"""


def test_ptx_of_while_gradients_assembles(tmp_path):
    assemble_in_child(_PTX_SCRIPT, [tmp_path / "newton.ptx", tmp_path / "nested.ptx"])


# ----------------------------------------------------------------------------------------------
# Refusals

def _appends(x):
    ys = []
    while x < 3.0:
        x = x + 1.0
        ys.append(x)
    return np.sum(np.array(ys))


def _returns(x):
    while x < 3.0:
        x = x * 2.0
        if x > 2.0:
            return x
    return x


def _endless_static(x):
    k = 0
    while k >= 0:
        k += 1
    return x


def _array_test(x):
    while x > 0.0:
        x = x - 1.0
    return x


def _changes_shape(x):
    y = x
    while np.sum(y) < 10.0:
        y = np.concatenate([y, y])
    return y


@pytest.mark.parametrize("fn, args, words", [
    (_appends, (0.5,), "list.append on 'ys' inside a while loop on data"),
    (_returns, (0.5,), "return (or global/nonlocal) inside a while loop on data"),
    (_endless_static, (0.5,), "runs more than 10000 iterations"),
    (_array_test, (np.ones(3),), "a while test on an array of shape (3,)"),
    (_changes_shape, (np.ones(2),), "loop-carried variable 'y' changes shape from (2,) to (4,)"),
])
def test_refused_while_loops_name_the_line(fn, args, words):
    f = sg.differentiate(fn, target="python")
    with pytest.raises(sg.UnsupportedSyntaxError) as info:
        f(*args)
    assert words in str(info.value)
    assert info.value.lineno > 0 and os.path.basename(__file__) in str(info.value)


# ----------------------------------------------------------------------------------------------
# sg.checkpoint: a while inside a recomputed cell

@sg.checkpoint
def _newton_cell(h, x):
    y = h + 1.0
    while abs(y * y - x) > 1e-12 * x:
        y = 0.5 * (y + x / y)
    return np.tanh(y * h)


def _checkpointed_rnn(h, xs):
    for t in range(xs.shape[0]):
        h = _newton_cell(h, xs[t])
    return h


@pytest.mark.parametrize("target", TARGETS)
def test_a_while_inside_a_checkpointed_cell(target):
    xs = np.array([0.2, 0.03, 0.5, 0.7, 0.15, 2e-4])
    f = sg.differentiate(_checkpointed_rnn, target=target)
    plain = _checkpointed_rnn   # called eagerly, a checkpointed function is the function
    _assert_close(f(0.7, xs), plain(0.7, xs), 1e-12)
    _assert_close(sg.grad(f)(0.7, xs), _fd_grad(plain, (0.7, xs), 0), 1e-6)


# ----------------------------------------------------------------------------------------------
# Early exit: a loop stops once its done flag is set, however large its cap has grown

def _walk(v, limit):
    # a vector state stepped until its first entry passes a limit: limit trips or so
    t = 0.0 * limit
    while t < limit:
        v = 0.99 * v + 0.01 * np.sin(v + t)
        t = t + 1.0
    return v


def _grow_cap(f):
    f(0.4, 3000.5)                                     # the cap grows to 8192
    assert max(guards.CAPS.values()) >= 3001


@pytest.mark.parametrize("target", TARGETS)
def test_few_trips_after_the_cap_grew(target):
    f = sg.differentiate(long_loop, target=target)
    _grow_cap(f)
    args = (0.4, 10.5)
    _assert_close(f(*args), long_loop(*args), 1e-12)
    g = sg.grad(f)(*args)
    _assert_close(g, _fd_grad(long_loop, args, 0), 1e-6)
    value, tangent = sg.jvp(f)(*args, 1.0)
    _assert_close(value, long_loop(*args), 1e-12)
    _assert_close(tangent, g, 1e-9)
    grad = sg.grad(long_loop, target="python")
    fd = (grad(0.4 + 1e-5, 10.5) - grad(0.4 - 1e-5, 10.5)) / 2e-5
    _assert_close(sg.hvp(f)(0.4, 1.0, 10.5), fd, 1e-5)
    limits = np.array([2.5, 10.5, 40.5])               # a trip count per example
    _assert_close(sg.vmap(f, in_axes=(None, 0))(0.4, limits),
                  [long_loop(0.4, m) for m in limits], 1e-12)
    _assert_close(sg.vmap(sg.grad(f), in_axes=(None, 0))(0.4, limits),
                  [grad(0.4, m) for m in limits], 1e-10)


@pytest.mark.parametrize("target", TARGETS)
def test_jacobian_and_checkpoint_after_the_cap_grew(target):
    v = np.array([0.3, 0.7, 1.1])
    jac = sg.jacobian(_walk, target=target)
    jac(v, 3000.5)
    eps = 1e-6
    fd = np.array([(_walk(v + eps * e, 10.5) - _walk(v - eps * e, 10.5)) / (2 * eps)
                   for e in np.eye(3)]).T
    _assert_close(jac(v, 10.5), fd, 1e-6)
    f = sg.differentiate(_checkpointed_rnn, target=target)
    xs = np.linspace(1.0, 9.0, 5)
    f(0.5, xs * 1e30)                                  # ~50 trips: the inner cap grows
    assert max(guards.CAPS.values()) >= 128
    value, grad = sg.value_and_grad(f)(0.5, xs)
    _assert_close(value, _checkpointed_rnn(0.5, xs), 1e-12)
    _assert_close(grad, _fd_grad(_checkpointed_rnn, (0.5, xs), 0), 1e-6)


def _loops(graph):
    """Every loop node of ``graph``, in region bodies too."""
    from symgrad import regions
    from symgrad.ir import toposort
    out, seen, stack = [], set(), [list(graph.outputs)]
    while stack:
        for n in toposort(stack.pop()):
            if n in seen:
                continue
            seen.add(n)
            if n.op == "loop":
                out.append(n)
            for body in (a for a in n.attrs if isinstance(a, regions.Body)):
                stack.append(list(body.results))
    return out


def test_the_backward_loop_walks_the_trips_that_ran(monkeypatch):
    from symgrad import regions
    f = sg.differentiate(long_loop, target="python")
    _grow_cap(f)
    graph, _ = f.grad.graph_for((0.4, 10.5))
    loops = _loops(graph)
    forward = [n for n in loops if regions.loop_exit(n) and regions.loop_exit(n)[0] == "until"]
    backward = [n for n in loops if regions.loop_exit(n) == ("count",)]
    assert forward and backward
    counter = regions.loop_exit(forward[0])[2]
    assert any(regions.loop_count(b).op == "proj" and regions.loop_count(b).attrs[0] == counter
               for b in backward)
    # the reference evaluation runs the bodies of the trips that ran only (cap: 8192)
    calls = []
    real = regions.evaluate
    monkeypatch.setattr(regions, "evaluate", lambda *a: calls.append(1) or real(*a))
    env = dict(zip(graph.inputs, (np.float64(0.4), np.float64(10.5))))
    values = real(list(graph.outputs), env)
    assert len(calls) < 100
    _assert_close(values[0], _fd_grad(long_loop, (0.4, 10.5), 0), 1e-6)
    # the generated source: a while, and a backward loop over the trips that ran
    source = f.grad.source
    cap = max(guards.CAPS.values())
    assert f"while trips < {cap} and not done:" in source
    assert "in reversed(range(trips)):" in source
    namespace = {"np": np}
    exec(source, namespace)
    _assert_close(namespace["grad_long_loop"](0.4, 10.5), values[0], 1e-12)


def test_the_native_loop_branches_out_once_done():
    f = sg.differentiate(long_loop)
    _grow_cap(f)
    text = f.grad.llvm_ir(0.4, 10.5)
    assert "loop.going" in text and "trips.run" in text   # the exit, the backward's trip count


def _stop_early(X):
    acc = np.zeros(2)
    for v in X:
        acc = acc + v * v
        if np.sum(acc) > 3.0:
            break
    return np.sum(acc * np.array([1.0, 2.0]))


@pytest.mark.parametrize("target", TARGETS)
def test_a_for_with_a_break_exits_early_per_example(target):
    rng = np.random.default_rng(3)
    batch = np.abs(rng.normal(size=(3, 10, 2))) * np.array([0.3, 1.0, 3.0])[:, None, None]
    f = sg.differentiate(_stop_early, target=target)
    _assert_close(sg.vmap(f)(batch), [_stop_early(X) for X in batch], 1e-12)
    grads = sg.vmap(sg.grad(f))(batch)
    for X, g in zip(batch, grads):
        _assert_close(g, _fd_grad(_stop_early, (X,), 0), 1e-6)
        _assert_close(sg.grad(f)(X), g, 1e-12)


def test_the_source_of_a_for_with_a_break_breaks_and_runs_as_shown():
    X = np.abs(np.random.default_rng(4).normal(size=(10, 2)))
    f = sg.grad(_stop_early, target="python")
    want = f(X)
    source = f.source
    assert "        if done:\n            break\n" in source
    assert "in reversed(range(trips)):" in source
    namespace = {"np": np}
    exec(source, namespace)
    _assert_close(namespace["grad__stop_early"](X), want, 1e-12)


def accumulate_until(x, n):
    s = 0.0                       # a Python number: NumPy gives it x's float32 type in the body
    while s < n:
        s = s + np.exp(x) * 0.1
    return s * x


def accumulate_one_element(x, n):
    s = np.zeros(1)
    while s < n:                  # a one-element test: its element is the truth value
        s = s + np.exp(x) * 0.1
    return np.sum(s * x)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_a_python_number_carried_by_a_while_takes_the_body_s_float32(target):
    """``s = 0.0`` then ``s = s + float32``: NumPy makes s float32; the while's test branch
    refused it as 'float32 on one branch and float64 on the other'."""
    f = sg.differentiate(accumulate_until, target=target)
    x = np.float32(0.5)
    value, want = f(x, 3.0), accumulate_until(x, 3.0)
    assert np.asarray(value).dtype == np.float32 and value == want
    eps = 1e-3
    numeric = (accumulate_until(0.5 + eps, 3.0) - accumulate_until(0.5 - eps, 3.0)) / (2 * eps)
    assert f.grad(x, 3.0) == pytest.approx(numeric, rel=1e-4)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_a_while_on_a_one_element_array_and_a_carry_changing_shape(target):
    f = sg.differentiate(accumulate_one_element, target=target)
    x = np.array([0.5])
    assert f(x, 3.0) == accumulate_one_element(x, 3.0)
    eps = 1e-6
    numeric = (accumulate_one_element(x + eps, 3.0) - accumulate_one_element(x - eps, 3.0)) / (2 * eps)
    np.testing.assert_allclose(f.grad(x, 3.0), numeric, rtol=1e-6)
    # s = 0.0 becoming shape (1,) in the body: named as the carry it is, not as an if's branch
    with pytest.raises(sg.UnsupportedSyntaxError,
                       match=r"loop-carried variable 's' changes shape from \(\) to \(1,\)"):
        sg.differentiate(accumulate_until, target=target)(np.array([0.5]), 3.0)
