"""Branches (``cond``) on target="cuda": only the taken side runs. A branch whose sides are
computed in place (elementwise ops, views, gathers) is a real branch inside the kernel that
reads its results (``Plan.fused``: a conditional branch per element to the taken side); one
whose sides need kernels of their own (reductions, matmuls, loops) is a step whose side
kernels are guarded by the predicate (a conditional branch at their entry,
``codegen.ptx_regions.CondStep``). Checked without a GPU: through the CPU emulation of the
same kernels (``codegen.ptx_emulate``) against target="python", by the memory the side not
taken leaves untouched, and by ``ptxas`` on the PTX (in a child process: LLVM may abort).

Also here: 0-d arguments (Python and NumPy scalars, 0-d arrays, bools) read by a loop or a
branch body, which takes its inputs through pointers (they are stored into device memory
first, ``codegen.ptx_plan``), and the launch-argument packing of ``codegen.cuda`` that the
emulator shares.
"""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad import ops, regions
from symgrad.autodiff import grad_graph
from symgrad.ir import Graph, make
from symgrad.codegen import cuda, ptx, ptx_emulate
from symgrad.codegen.ptx_regions import CondStep, all_kernels

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_native_loops import PROGRAMS, safe_norm  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(7)


def _arg(i, name, shape, dtype="float64"):
    return make("arg", (), (i, name, dtype, shape))


def _log_or_square_graph():
    """sum(log(x) * w) if sum(x) > 0 else sum(x * x * w): a reduction on each side; the log
    side is NaN for the negative x that take the other side."""
    x, w = _arg(0, "x", (4,)), _arg(1, "w", (4,))
    pred = ops.gt(ops.reduce("sum", x), ops.const(0.0, "float64"))
    (value,) = regions.cond(pred, [ops.sqrt(ops.reduce("sum", ops.mul(ops.log(x), w)) ** 2)],
                            [ops.sqrt(ops.reduce("sum", ops.mul(ops.mul(x, x), w)) ** 2)])
    return Graph("branch", ("x", "w"), (x, w), (value,), 0)


def _log_or_square_in_place_graph():
    """log(x) * w if sum(x) > 0 else x * x * w: elementwise sides, computed in place."""
    x, w = _arg(0, "x", (4,)), _arg(1, "w", (4,))
    pred = ops.gt(ops.reduce("sum", x), ops.const(0.0, "float64"))
    (value,) = regions.cond(pred, [ops.mul(ops.log(x), w)], [ops.mul(ops.mul(x, x), w)])
    return Graph("fused_branch", ("x", "w"), (x, w), (value,), 0)


def _nested_steps_graph():
    """A branch in a side of a branch, both with reductions in their sides (steps)."""
    x, w = _arg(0, "x", (4,)), _arg(1, "w", (4,))
    (inner,) = regions.cond(ops.gt(ops.reduce("sum", w), ops.const(0.0, "float64")),
                            [ops.reduce("sum", ops.exp(x))], [ops.reduce("max", ops.sin(x))])
    (value,) = regions.cond(ops.gt(ops.reduce("sum", x), ops.const(0.0, "float64")),
                            [inner], [ops.reduce("sum", ops.mul(x, w))])
    return Graph("nested_branch", ("x", "w"), (x, w), (value,), 0)


def _reference(graph, values):
    return regions.evaluate(list(graph.outputs), dict(zip(graph.inputs, values)))


def _cond_steps(plan):
    """Every CondStep of a plan (those in loop bodies too), outermost first."""
    steps, pending = [], [plan]
    while pending:
        p = pending.pop()
        for step in p.kernels:
            if isinstance(step, CondStep):
                steps.append(step)
                pending.extend(side.plan for side in step.sides)
            elif hasattr(step, "body"):
                pending.append(step.body.plan)
    return steps


# ----------------------------------------------------------------------------------------------
# The plan: every kernel of a side is guarded


def test_every_kernel_of_a_side_is_guarded():
    plan = ptx.plan(_log_or_square_graph())
    (step,) = _cond_steps(plan)
    for side, taken in zip(step.sides, (True, False)):
        kernels = [k for _, k in all_kernels(side.plan)]
        assert kernels and all(k.guards == ((step.pred, taken),) for k in kernels)
    outside = [k for k in plan.kernels if not isinstance(k, CondStep)]
    assert outside and all(not k.guards for k in outside)


def test_a_nested_branch_guards_with_both_predicates():
    outer, inner = _cond_steps(ptx.plan(_nested_steps_graph()))
    for side, taken in zip(inner.sides, (True, False)):
        for _, k in all_kernels(side.plan):
            assert k.guards == ((outer.pred, True), (inner.pred, taken))


@pytest.mark.parametrize("sign", [1.0, -1.0, 0.0])
def test_a_nested_branch_value(sign):
    graph = _nested_steps_graph()
    for w_sign in (1.0, -1.0):
        values = [sign * RNG.uniform(0.5, 2.0, size=4) + (sign == 0) * RNG.normal(size=4),
                  w_sign * RNG.uniform(0.5, 2.0, size=4)]
        np.testing.assert_allclose(ptx_emulate.run(graph, values), _reference(graph, values)[0],
                                   rtol=1e-13)


def _nested_in_place_graph():
    """Elementwise branches nested in a side (the inner predicate computed in the side)."""
    x, w = _arg(0, "x", (4,)), _arg(1, "w", (4,))
    (inner,) = regions.cond(ops.gt(ops.getitem(x, (0,)), ops.const(0.0, "float64")),
                            [ops.log(x)], [ops.mul(x, x)])
    (value,) = regions.cond(ops.gt(ops.getitem(w, (0,)), ops.const(0.0, "float64")),
                            [ops.mul(inner, w)], [ops.exp(w)])
    return Graph("nested_in_place", ("x", "w"), (x, w), (value,), 0)


@pytest.mark.parametrize("signs", [(1, 1), (1, -1), (-1, 1), (-1, -1)])
def test_nested_branches_inside_the_kernel(signs):
    graph = _nested_in_place_graph()
    plan = ptx.plan(graph)
    assert len(plan.fused) == 2 and not _cond_steps(plan)
    values = [signs[0] * RNG.uniform(0.5, 2.0, size=4), signs[1] * RNG.uniform(0.5, 2.0, size=4)]
    got = ptx_emulate.run(graph, values)
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, _reference(graph, values)[0], rtol=1e-13)


def test_elementwise_sides_branch_inside_the_kernel():
    graph = _log_or_square_in_place_graph()
    plan = ptx.plan(graph)
    assert list(plan.fused) and not _cond_steps(plan)
    text = ptx.build_module(plan)
    (reader,) = [k.name for k in plan.kernels if k.kind == "map"]
    body = text.split(f'@"{reader}"')[1].split("\ndefine ")[0]
    assert "choose.case0" in body and "__nv_log" in body.split("choose.case0:")[1]
    for sign in (1.0, -1.0):
        values = [sign * RNG.uniform(0.5, 2.0, size=4), RNG.normal(size=4)]
        got = ptx_emulate.run(graph, values)
        assert np.all(np.isfinite(got))
        np.testing.assert_allclose(got, _reference(graph, values)[0], rtol=1e-13)
        grad = grad_graph(graph, (0, 1), False, False)
        for g, w in zip(ptx_emulate.run(grad, values), _reference(grad, values)):
            assert np.all(np.isfinite(g))
            np.testing.assert_allclose(g, w, rtol=1e-12)


# ----------------------------------------------------------------------------------------------
# Values and gradients against target="python", each side taken


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_each_side_value_and_gradient(sign):
    graph = _log_or_square_graph()
    values = [sign * RNG.uniform(0.5, 2.0, size=4), RNG.normal(size=4)]
    np.testing.assert_allclose(ptx_emulate.run(graph, values), _reference(graph, values)[0],
                               rtol=1e-13)
    with np.errstate(invalid="ignore", divide="ignore"):
        grad = grad_graph(graph, (0, 1), False, False)
    got = ptx_emulate.run(grad, values)
    want = _reference(grad, values)
    for g, w in zip(got, want):
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("case", ["branch", "branch_in_loop", "loop_in_branch"])
@pytest.mark.parametrize("scale", [0.2, 1.0, 3.0])   # the predicates go both ways
def test_branch_cases_of_the_op_table(case, scale):
    import test_ptx
    import test_ptx_emulate
    for dtype in ("float32", "float64"):
        graph = dict(test_ptx._graphs(dtype))[f"{case}-{dtype}"]
        values = [v * np.asarray(scale, v.dtype) if np.asarray(v).dtype.kind == "f" else v
                  for v in test_ptx_emulate._values(graph, seed=3)]
        test_ptx_emulate._check(case, graph, values)


@pytest.mark.parametrize("name", ["branch_in_loop", "break_on_data", "safe_norm"])
def test_programs_with_data_if(name):
    """The programs of tests/test_native_loops whose ``if`` on data is a branch: value and
    gradient on the emulated kernels equal target="python"'s."""
    fn, make_args = PROGRAMS[name]
    args = make_args()
    py = sg.differentiate(fn, target="python")
    for f in (py, py.grad):
        graph = f.graph_for(args)[0]
        assert any(n.op == "cond" for n in graph.nodes()) or any(
            n.op == "loop" for n in graph.nodes())
        np.testing.assert_allclose(ptx_emulate.run(graph, list(args)), f(*args),
                                   rtol=1e-12, atol=1e-14)


def test_the_safe_norm_gradient_at_zero_is_zero():
    """The sqrt side is not taken at 0: its infinite derivative never runs (a select would
    give 0 * inf = nan)."""
    py = sg.differentiate(safe_norm, target="python")
    zero = np.zeros(3)
    graph = py.grad.graph_for((zero,))[0]
    plan = ptx.plan(graph)
    assert plan.fused or _cond_steps(plan)   # a branch, not a select
    np.testing.assert_array_equal(ptx_emulate.run(graph, [zero]), np.zeros(3))


def test_per_example_conditions_under_vmap():
    """A batched condition: each example takes its own side (a select per example)."""
    py = sg.vmap(sg.grad(safe_norm, target="python"))
    xs = RNG.normal(size=(5, 3))
    xs[[1, 3]] = 0.0
    graph = py.graph_for((xs,))[0]
    got = ptx_emulate.run(graph, [xs])
    np.testing.assert_array_equal(got[[1, 3]], 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):   # NumPy's select computes both
        np.testing.assert_allclose(got, py(xs), rtol=1e-13)


# ----------------------------------------------------------------------------------------------
# The side not taken computes nothing


def _garbage(buf):
    """The bytes ptx_emulate fills a scratch buffer with (as if uninitialised)."""
    return 0x5A if np.dtype(buf.dtype if buf.dtype != "bool" else np.uint8).itemsize == 1 else 0x7F


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_side_not_taken_leaves_its_memory_untouched(sign):
    """The log side's reduction would be NaN for negative x: when that side is not taken its
    scratch buffer still holds the garbage it started with (never computed), while the taken
    side's was written."""
    graph = _log_or_square_graph()
    p, fns = ptx_emulate.compile_plan(graph)
    (step,) = _cond_steps(p)
    memory = {}
    values = [sign * RNG.uniform(0.5, 2.0, size=4), RNG.normal(size=4)]
    value = ptx_emulate.run(graph, values, (p, fns), memory=memory)
    assert np.isfinite(value)
    taken, skipped = step.sides if sign > 0 else step.sides[::-1]

    def scratch(side):
        return [job.dest for _, k in all_kernels(side.plan) for job in k.jobs
                if p.buffers[job.dest].kind == "tmp"]
    assert scratch(taken) and scratch(skipped)
    for b in scratch(skipped):
        assert np.all(memory[b].view(np.uint8) == _garbage(p.buffers[b])), b
    for b in scratch(taken):
        assert not np.all(memory[b].view(np.uint8) == _garbage(p.buffers[b])), b


# ----------------------------------------------------------------------------------------------
# PTX: the branch is there and assembles

_EMIT = """
import sys, numpy as np
sys.path.insert(0, {tests!r})
import symgrad as sg
from test_native_loops import safe_norm, branch_in_loop, break_on_data
from symgrad.codegen import ptx
from symgrad.codegen.ptx_regions import all_kernels
from test_ptx_branches import _nested_steps_graph, _log_or_square_in_place_graph
class Entry:
    def __init__(self, graph):
        self.graph = graph
entries = [Entry(_nested_steps_graph()), Entry(_log_or_square_in_place_graph())]
for fn, x in [(safe_norm, np.ones(3)), (branch_in_loop, np.full(3, 0.2)),
              (break_on_data, np.full(3, 0.2))]:   # break: a capped loop
    entries.append(sg.differentiate(fn, target="cuda").grad._compiled([x]))
for k, entry in enumerate(entries):
    for arch in ("sm_80", "sm_90"):
        open(sys.argv[1] + f"/{{k}}.{{arch}}.ptx", "w").write(ptx.ptx(entry, arch=arch))
    plan = ptx.plan(entry.graph)
    print(" ".join(kn.name for _, kn in all_kernels(plan) if kn.guards) or "-")
"""


def _entry_bodies(text):
    """kernel name -> its PTX body (from ``.entry name(`` to the next ``.entry``)."""
    parts = re.split(r"\.visible \.entry (\w+)\(", text)
    return dict(zip(parts[1::2], parts[2::2]))


def test_ptx_has_a_branch_per_guarded_kernel_and_assembles(tmp_path):
    r = subprocess.run([sys.executable, "-c", _EMIT.format(tests=os.path.join(ROOT, "tests")),
                        str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    guarded = [line.split() for line in r.stdout.splitlines()]
    assert guarded[0] and guarded[1] == ["-"]   # steps; a branch inside one kernel
    fused = (tmp_path / "1.sm_80.ptx").read_text()
    assert re.search(r"@!?%p\d+ bra", _entry_bodies(fused)["fused_branch_k1"])
    for k, names in enumerate(guarded):
        names = [n for n in names if n != "-"]
        for arch in ("sm_80", "sm_90"):
            text = (tmp_path / f"{k}.{arch}.ptx").read_text()
            bodies = _entry_bodies(text)
            for name in names:   # a predicated branch (or return) at the guard
                assert re.search(r"@!?%p\d+ (bra|ret)", bodies[name]), (name, bodies[name][:800])
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not found")
    for p in sorted(tmp_path.glob("*.ptx")):
        arch = p.name.split(".")[1]
        done = subprocess.run([ptxas, f"-arch={arch}", str(p), "-o", os.devnull],
                              capture_output=True, text=True)
        assert done.returncode == 0, (p.name, done.stderr[-2000:])


# ----------------------------------------------------------------------------------------------
# 0-d arguments read by a region body (by value on the GPU, the body takes pointers)

SCALARS = {"float": 0.5, "int": 3, "numpy_float": np.float64(0.5), "numpy_int": np.int64(3),
           "zero_d_array": np.array(0.5), "bool": True, "numpy_bool": np.bool_(False),
           "float32": np.float32(0.25)}


def tanh_recurrence(x, a):
    h = x
    for _ in range(12):        # a loop region: `a` is a loop-invariant input of the body
        h = np.tanh(h * a + 0.1)
    return np.sum(h)


def scalar_carry(x, a):
    s = a
    for _ in range(12):        # `a` starts a carry: copied into the carry's buffer
        s = s * 0.9 + np.sum(x)
    return s


def scalar_in_branch(x, a):
    h = x
    for _ in range(12):
        if np.sum(h) > 1.0:    # a branch in the body reads `a` as an operand
            h = h * a
        else:
            h = h + 0.3
    return np.sum(h * h)


@pytest.mark.parametrize("kind", sorted(SCALARS))
@pytest.mark.parametrize("fn", [tanh_recurrence, scalar_carry, scalar_in_branch],
                         ids=lambda f: f.__name__)
def test_a_scalar_argument_read_in_a_region_body(fn, kind):
    a = SCALARS[kind]
    args = (np.linspace(0.1, 0.9, 3), a)
    py = sg.differentiate(fn, target="python")
    for f in (py, py.grad):
        graph = f.graph_for(args)[0]
        np.testing.assert_allclose(ptx_emulate.run(graph, list(args)), f(*args), rtol=1e-12)
    cpu = sg.differentiate(fn)
    np.testing.assert_allclose(cpu(*args), py(*args), rtol=1e-12)


@pytest.mark.parametrize("kind", sorted(SCALARS))
def test_scalar_argument_packing(kind):
    """The by-value packing the GPU launcher uses (and the emulator with it)."""
    value = SCALARS[kind]
    for dtype in ("float64", "float32", "int64", "bool"):
        packed = cuda.scalar_argument(dtype, value)
        assert isinstance(packed, ctypes._SimpleCData)
        assert packed.value == np.asarray(value).astype(dtype).item()


def test_kernel_arguments_refuse_a_value_for_a_pointer():
    """A by-value scalar where a kernel takes a pointer (the old failure of a 0-d argument
    in a loop body) is a clear internal error, not a wild pointer on the GPU."""
    graph = sg.differentiate(tanh_recurrence, target="python").graph_for(
        (np.ones(3), 0.5))[0]
    p, _ = ptx_emulate.compile_plan(graph)   # kernel parameter lists are set as it builds
    plan, kernel = next((sub, k) for sub, k in all_kernels(p) if any(
        sub.buffers[b].kind == "slot" for b in k.params))
    slot = next(b for b in kernel.params if plan.buffers[b].kind == "slot")
    addr = {b: 4096 for b in kernel.params}
    for b in kernel.params:
        if plan.buffers[b].kind in ("scalar", "index"):
            addr[b] = ctypes.c_int64(0)
    assert len(cuda.kernel_arguments(plan, kernel, addr)) == len(kernel.params)
    addr[slot] = ctypes.c_double(0.5)
    with pytest.raises(TypeError, match="as a pointer"):
        cuda.kernel_arguments(plan, kernel, addr)
