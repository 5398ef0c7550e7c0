"""Loops and branches lowered natively by the CPU back end (codegen.regions): table-driven loop
programs on target="cpu" against target="python" and finite differences, the trip count as a
run-time parameter (no recompilation, IR independent of n), zero trips, reverse loops, nested
loops and real branches (through the front end's data-dependent ``if`` and built directly in
the IR), and the CUDA launch sequence of loops through the PTX emulation."""
from __future__ import annotations

import numpy as np
import pytest

import symgrad as sg
from symgrad import ops, regions
from symgrad.autodiff import grad_graph
from symgrad.codegen import llvm
from symgrad.ir import Graph, make

RNG = np.random.default_rng(7)


# ----------------------------------------------------------------------------------------------
# Programs through the front end (loops of more than 4 iterations become one loop node)

def tanh_rnn(W, h0):
    h = h0
    for _ in range(30):
        h = np.tanh(W @ h + 0.1)
    return np.sum(h * h)


def gru(Wz, Wh, xs):
    h = np.zeros(4)
    for x in xs:
        z = 1.0 / (1.0 + np.exp(-(Wz @ h + x)))
        c = np.tanh(Wh @ (h * z) + x)
        h = (1.0 - z) * h + z * c
    return np.sum(h)


def rows_enumerate(y):
    acc = np.zeros(3)
    for k, r in enumerate(y):
        acc = acc * 0.9 + k * np.cos(r)
    return np.sum(acc * acc)


def zipped(a, b):
    s = 0.0
    for u, v in zip(a, b):
        s = s + np.sum(u * v) * 0.5 + np.exp(-s * s)
    return s


def nested(x):
    h = x
    for _ in range(6):
        g = h
        for _ in range(5):
            g = g * 0.9 + 0.1 * np.sin(h)
        h = np.tanh(g + h)
    return np.sum(h)


def euler(y):
    a, b, c = y[0], y[1], y[2]
    for _ in range(40):
        a, b, c = a + 0.01 * b, b - 0.01 * a * c, c + 0.01 * np.sin(a)
    return a * b + c


def heat(u):
    for _ in range(25):
        inner = u[1:-1] + 0.2 * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        u = np.concatenate([u[:1], inner, u[-1:]])
    return np.sum(u * u)


def clipped(x):
    h = x
    for _ in range(9):
        h = np.where(h > 0.5, h * 0.5, h + 0.3)   # a select in the body
    return np.sum(h * h)


def setitem_carry(x, c):
    h = x.copy()
    for _ in range(6):
        h[0] = h[0] * 0.5 + c[1]     # an update of the carry: never of the argument's memory
        h = np.sin(h) + c
    return np.sum(h)


def branch_in_loop(x):
    h = x
    for _ in range(8):
        if np.sum(h) > 1.0:        # a branch node in the loop body
            h = h * 0.5
        else:
            h = h + np.sin(h) * 0.3
    return np.sum(h * h)


def break_on_data(x):
    h = x
    for _ in range(20):
        h = h * 1.3 + 0.1
        if np.sum(h) > 10.0:
            break
    return np.sum(h * h)


def safe_norm(x):
    s = np.sum(x * x)
    if s > 0:
        r = np.sqrt(s)
    else:
        r = s * 0.0
    return r


PROGRAMS = {
    "tanh_rnn": (tanh_rnn, lambda: (RNG.normal(size=(5, 5)) * 0.4, RNG.normal(size=5))),
    "gru": (gru, lambda: (RNG.normal(size=(4, 4)) * 0.5, RNG.normal(size=(4, 4)) * 0.5,
                          RNG.normal(size=(7, 4)))),
    "rows_enumerate": (rows_enumerate, lambda: (RNG.normal(size=(9, 3)),)),
    "zipped": (zipped, lambda: (RNG.normal(size=(6, 2)), RNG.normal(size=(6, 2)))),
    "nested": (nested, lambda: (RNG.normal(size=4),)),
    "euler": (euler, lambda: (np.array([0.3, 0.2, 0.1]),)),
    "heat": (heat, lambda: (RNG.uniform(size=10),)),
    "clipped": (clipped, lambda: (RNG.normal(size=6),)),
    "setitem_carry": (setitem_carry, lambda: (RNG.normal(size=3), RNG.normal(size=3))),
    "branch_in_loop": (branch_in_loop, lambda: (RNG.uniform(0, 0.5, size=3),)),
    "break_on_data": (break_on_data, lambda: (RNG.uniform(0, 0.5, size=3),)),
    "safe_norm": (safe_norm, lambda: (RNG.normal(size=3),)),
}


def _has_loop(f, args) -> bool:
    return any(n.op in ("loop", "cond") for n in f.grad.graph_for(args)[0].nodes())


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_loop_program_value_and_gradient(name):
    fn, make_args = PROGRAMS[name]
    args = make_args()
    before = [a.copy() for a in args]
    cpu, py = sg.differentiate(fn, target="cpu"), sg.differentiate(fn, target="python")
    assert _has_loop(cpu, args), "the program must exercise a loop region"
    assert cpu(*args) == pytest.approx(fn(*args), rel=1e-11, abs=1e-13)
    g_cpu, g_py = cpu.grad(*args), py.grad(*args)
    np.testing.assert_allclose(g_cpu, g_py, rtol=1e-10, atol=1e-13)
    for a, b in zip(args, before):
        np.testing.assert_array_equal(a, b)   # no argument is written
    # finite differences along a random direction of the first argument
    d = RNG.normal(size=np.shape(args[0]))
    eps = 1e-6
    plus = fn(*((args[0] + eps * d,) + args[1:]))
    minus = fn(*((args[0] - eps * d,) + args[1:]))
    assert np.sum(g_cpu * d) == pytest.approx((plus - minus) / (2 * eps), rel=1e-5, abs=1e-8)


@pytest.mark.parametrize("name", ["tanh_rnn", "euler", "nested"])
def test_second_derivatives_through_loops(name):
    fn, make_args = PROGRAMS[name]
    args = make_args()
    v = RNG.normal(size=np.shape(args[0]))
    cpu, py = sg.differentiate(fn, target="cpu"), sg.differentiate(fn, target="python")
    hv = cpu.hessp(args[0], v, *args[1:])
    np.testing.assert_allclose(hv, py.hessp(args[0], v, *args[1:]), rtol=1e-9, atol=1e-12)
    eps = 1e-5   # against finite differences of the gradient
    fd = (py.grad(*((args[0] + eps * v,) + args[1:])) - py.grad(*((args[0] - eps * v,) + args[1:]))) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)


def _rnn_of(steps):
    def rnn(W, h):
        for _ in range(steps):
            h = np.tanh(W @ h)
        return np.sum(h)
    return rnn


def test_a_new_trip_count_reuses_the_machine_code():
    W, h = RNG.normal(size=(6, 6)) * 0.3, RNG.normal(size=6)
    short = sg.differentiate(_rnn_of(100)).grad
    long = sg.differentiate(_rnn_of(250)).grad
    short(W, h)
    compiles = llvm.stats()["compiles"]
    g = long(W, h)
    assert llvm.stats()["compiles"] == compiles
    np.testing.assert_allclose(g, sg.differentiate(_rnn_of(250), target="python").grad(W, h),
                               rtol=1e-10, atol=1e-14)


def test_llvm_ir_does_not_grow_with_the_trip_count():
    W, h = RNG.normal(size=(6, 6)) * 0.3, RNG.normal(size=6)
    texts = [sg.differentiate(_rnn_of(n)).grad.llvm_ir(W, h) for n in (10, 1000)]
    assert texts[0] == texts[1]
    assert "loop.head" in texts[0]   # a real loop, not unrolled iterations


# ----------------------------------------------------------------------------------------------
# Regions built directly in the IR: zero trips, reverse, branches, branches in loops

def _arg(i, name, shape, dtype="float64"):
    return make("arg", (), (i, name, dtype, tuple(shape)))


def _scan_graph(n, reverse):
    """carry c (3,) over rows of xs (n, 3): c' = c * sin(row) + i; y = c * row (stacked)."""
    x, xs = _arg(0, "x", (3,)), _arg(1, "xs", (n, 3))
    i = regions.placeholder("int64")
    c = regions.placeholder("float64", (3,))
    row = regions.placeholder("float64", (3,))
    new_c = ops.add(ops.mul(c, ops.sin(row)), ops.cast(i, "float64"))
    finals, stacks = regions.scan(n, i, [c], [x], [row], [xs], [new_c], [ops.mul(c, row)],
                                  reverse=reverse)
    return Graph("scan", ("x", "xs"), (x, xs), (finals[0], stacks[0]), (0, 1))


def _run_both(graph, values):
    native = llvm.Native(graph)(values)
    reference = regions.evaluate(list(graph.outputs), dict(zip(graph.inputs, values)))
    return native, reference


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", [0, 1, 5, 13])
def test_scan_trips_and_direction(n, reverse):
    values = (RNG.normal(size=3), RNG.normal(size=(n, 3)))
    (carry, ys), (c_ref, ys_ref) = _run_both(_scan_graph(n, reverse), values)
    np.testing.assert_allclose(carry, c_ref, rtol=1e-13)
    assert ys.shape == (n, 3)
    np.testing.assert_allclose(ys, ys_ref, rtol=1e-13)
    if n == 0:
        np.testing.assert_array_equal(carry, values[0])   # the init, not its buffer
        assert carry is not values[0]


def _cond_graph():
    """log(x) * w if sum(x) > 0 else x * x * w: the side not taken may be nan."""
    x, w = _arg(0, "x", (4,)), _arg(1, "w", (4,))
    pred = ops.gt(ops.reduce("sum", x), ops.const(0.0, "float64"))
    (value,) = regions.cond(pred, [ops.reduce("sum", ops.mul(ops.log(x), w))],
                            [ops.reduce("sum", ops.mul(ops.mul(x, x), w))])
    return Graph("branch", ("x", "w"), (x, w), (value,), 0)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_branch_value_and_gradient(sign):
    x = sign * RNG.uniform(0.5, 2.0, size=4)
    w = RNG.normal(size=4)
    graph = _cond_graph()
    assert any(n.op == "cond" for n in graph.nodes())
    value, ref = _run_both(graph, (x, w))
    assert value == pytest.approx(ref[0], rel=1e-13)
    with np.errstate(invalid="ignore", divide="ignore"):
        grad = grad_graph(graph, (0,), single=True, with_value=False)
        g, g_ref = _run_both(grad, (x, w))
    assert np.all(np.isfinite(g))
    np.testing.assert_allclose(g, g_ref[0], rtol=1e-12)
    np.testing.assert_allclose(g, w / x if sign > 0 else 2 * x * w, rtol=1e-12)


def _loop_with_branch(n):
    """c' = c * 0.5 if sum(c) > 1 else c + row (a branch in a loop body), over rows of xs."""
    x, xs = _arg(0, "x", (2,)), _arg(1, "xs", (n, 2))
    i = regions.placeholder("int64")
    c = regions.placeholder("float64", (2,))
    row = regions.placeholder("float64", (2,))
    pred = ops.gt(ops.reduce("sum", c), ops.const(1.0, "float64"))
    (new_c,) = regions.cond(pred, [ops.mul(c, ops.const(0.5, "float64"))], [ops.add(c, ops.sin(row))])
    finals, _ = regions.scan(n, i, [c], [x], [row], [xs], [new_c], [])
    loss = ops.reduce("sum", ops.mul(finals[0], finals[0]))
    return Graph("branchy", ("x", "xs"), (x, xs), (loss,), 0)


def test_branch_inside_a_loop_and_its_gradient():
    n = 20
    values = (RNG.normal(size=2), RNG.uniform(0, 1.5, size=(n, 2)))
    graph = _loop_with_branch(n)
    value, ref = _run_both(graph, values)
    assert value == pytest.approx(ref[0], rel=1e-13)
    grad = grad_graph(graph, (0,), single=True, with_value=False)
    assert any(n.op == "loop" and n.attrs[4] for n in grad.nodes())   # a reverse loop
    g, g_ref = _run_both(grad, values)
    np.testing.assert_allclose(g, g_ref[0], rtol=1e-12)


def test_loop_inputs_that_are_views_and_constants_are_not_written():
    def f(W, xs):
        h = np.ones(3)
        for x in xs.T:          # rows of a transpose: a strided view, copied for the body
            h = np.tanh(W.T @ h + x)
        return np.sum(h)
    W, xs = RNG.normal(size=(3, 3)), RNG.normal(size=(3, 8))
    W.setflags(write=False)
    xs.setflags(write=False)
    cpu, py = sg.differentiate(f), sg.differentiate(f, target="python")
    assert cpu(W, xs) == pytest.approx(py(W, xs), rel=1e-12)
    np.testing.assert_allclose(cpu.grad(W, xs), py.grad(W, xs), rtol=1e-10)


# ----------------------------------------------------------------------------------------------
# CUDA: loops as a host-driven launch sequence, checked through the CPU emulation of the PTX
# kernels (codegen.ptx_emulate; ptxas assembly of a loop is in tests/test_ptx.py)

from symgrad.codegen import ptx, ptx_emulate  # noqa: E402
from symgrad.codegen.ptx_regions import LoopStep, all_kernels  # noqa: E402


@pytest.mark.parametrize("name", ["tanh_rnn", "gru", "nested", "heat", "clipped"])
def test_cuda_plan_of_loop_gradients(name):
    fn, make_args = PROGRAMS[name]
    args = make_args()
    py = sg.differentiate(fn, target="python")
    graph = py.grad.graph_for(args)[0]
    assert any(isinstance(k, LoopStep) for k in ptx.plan(graph).kernels)
    np.testing.assert_allclose(ptx_emulate.run(graph, list(args)), py.grad(*args),
                               rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("n", [0, 1, 13])
def test_cuda_scan_trips_and_direction(n, reverse):
    graph = _scan_graph(n, reverse)
    values = [RNG.normal(size=3), RNG.normal(size=(n, 3))]
    carry, ys = ptx_emulate.run(graph, values)
    c_ref, ys_ref = regions.evaluate(list(graph.outputs), dict(zip(graph.inputs, values)))
    np.testing.assert_allclose(carry, c_ref, rtol=1e-13)
    np.testing.assert_allclose(ys, ys_ref, rtol=1e-13)


def test_cuda_kernels_do_not_grow_with_the_trip_count():
    W, h = RNG.normal(size=(6, 6)) * 0.3, RNG.normal(size=6)
    counts = [len(all_kernels(ptx.plan(sg.differentiate(_rnn_of(n), target="python")
                                       .grad.graph_for((W, h))[0]))) for n in (10, 1000)]
    assert counts[0] == counts[1]


def test_cuda_branches_are_selects_and_branches_in_loops_work():
    values = (RNG.normal(size=2), RNG.uniform(0, 1.5, size=(20, 2)))
    graph = _loop_with_branch(20)
    grad = grad_graph(graph, (0,), single=True, with_value=False)
    for g in (graph, grad):
        want = regions.evaluate(list(g.outputs), dict(zip(g.inputs, values)))
        np.testing.assert_allclose(ptx_emulate.run(g, list(values)), want[0], rtol=1e-12)


def gather_rows(x, idx):
    h = np.zeros(3)
    for r in x:
        h = h + r[idx] * 2.0
    return np.sum(h)


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_an_index_out_of_bounds_in_a_loop_body_is_an_index_error(target):
    x = np.ones((6, 3))
    f = sg.differentiate(gather_rows, target=target)
    assert f(x, np.array([0, 2, 1])) == pytest.approx(36.0)
    with pytest.raises(IndexError):
        f(x, np.array([0, 5, 1]))


def test_llvm_ir_names_the_loop_body_lines():
    text = sg.differentiate(_rnn_of(40)).grad.llvm_ir(RNG.normal(size=(4, 4)), RNG.normal(size=4))
    header = text[text.index("(a loop) computes:"):]
    assert "h = np.tanh(W @ h)" in header.split("\ndefine")[0]


def test_a_nested_loop_is_a_loop_inside_the_body():
    fn, make_args = PROGRAMS["nested"]
    text = sg.differentiate(fn).llvm_ir(*make_args())
    assert text.count("loop.head:") >= 2 and "sg_r0_r" in text   # a region in a body's schedule


def test_concurrent_calls_of_a_loop_kernel():
    """The loop points the body's slots of the call's own pointer table: concurrent calls
    (each with private memory) do not see each other's iterations."""
    from concurrent.futures import ThreadPoolExecutor
    W = RNG.normal(size=(5, 5)) * 0.4
    starts = [RNG.normal(size=5) for _ in range(8)]
    f = sg.differentiate(tanh_rnn).grad
    want = [sg.differentiate(tanh_rnn, target="python").grad(W, h) for h in starts]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(5):
            got = list(pool.map(lambda h: f(W, h), starts))
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-10)


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_a_branch_runs_only_the_taken_side(target):
    """The safe norm at 0: the sqrt side is not taken, so its infinite derivative never
    reaches the gradient (a select would give 0 * inf = nan)."""
    f = sg.differentiate(safe_norm, target=target)
    np.testing.assert_array_equal(f.grad(np.zeros(3)), np.zeros(3))
    x = RNG.normal(size=3)
    np.testing.assert_allclose(f.grad(x), x / np.linalg.norm(x), rtol=1e-13)
    if target == "cpu":
        text = f.grad.llvm_ir(x)
        assert "(a branch) computes:" in text and "br i1 %\"taken\"" in text
