"""Chains of setitem/index_add updates of one buffer (codegen.schedule.Schedule._region_update):
an update whose region shares no element with the chain's earlier updates may run in the same
loop as they do (or earlier), one that overlaps runs after them. The gradient of slicing is
such a chain (an index_add per slice into a zeros array: ADBench BA's Jacobian blocks), so its
slices accumulate in the loops that compute them instead of one loop each.

Checked: values and gradients equal target="python" (float32 and float64, odd sizes,
broadcast values, reductions over every axis, disjoint, overlapping and repeated regions),
and the schedule of a disjoint chain (its updates share one stage)."""
import numpy as np
import pytest

import symgrad as sg
from symgrad.codegen.schedule import Schedule
from symgrad.codegen.views import View, views_overlap


def disjoint_columns(x):
    return np.sum(np.sin(x[:, 0]) * 2.0) + np.sum(x[:, 1] * x[:, 1]) + np.sum(np.exp(x[:, 5]))


def overlapping_slices(x):
    return np.sum(np.sin(x[:, :3])) + np.sum(x[:, 2:5] ** 2) + np.sum(np.tanh(x[:, 1:4])) \
        + np.sum(x[:, 2] * x[:, 4])


def strided_slices(x):
    return np.sum(np.cos(x[:, 0::3])) + np.sum(x[:, 1::3] ** 3) + np.sum(x[:, 2::3] * x[:, 0::3])


def repeated_region(x):
    return np.sum(x[:, 1] * 3.0) + np.sum(np.sin(x[:, 1])) + np.sum(x[1:, 1] * x[:-1, 0])


def writes_then_reductions(x):
    v = np.zeros((x.shape[0], 3 * x.shape[1]), dtype=x.dtype)
    v[:, 0::3] = np.sin(x)
    v[:, 1::3] = x * 2.0
    v[:, 2::3] = x[:, :1] * 0.5                      # a broadcast value
    v[:, 1::3] = v[:, 1::3] + x                       # reads what an earlier write put there
    return np.sum(np.sum(v, axis=0) ** 2) + np.sum(np.sum(v * v, axis=1)) + np.sum(v[0] * v[-1])


def three_d_every_axis(x):
    y = np.reshape(x, (x.shape[0], 5, 3))
    parts = np.sum(np.sin(y[:, :2]), axis=0) * np.sum(y[:, 2:, 1], axis=1)[0] \
        + np.sum(y[:, 1:3, :], axis=2)[0, 1]
    return np.sum(parts) + np.sum(np.exp(y[:, 4, :]) * y[:, 0, :])


FUNCTIONS = [disjoint_columns, overlapping_slices, strided_slices, repeated_region,
             writes_then_reductions, three_d_every_axis]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("rows", [1, 7, 33])
@pytest.mark.parametrize("fn", FUNCTIONS, ids=lambda f: f.__name__)
def test_value_and_gradient_equal_target_python(fn, rows, dtype):
    rng = np.random.default_rng(rows)
    x = rng.uniform(-1, 1, size=(rows, 15)).astype(dtype)
    cpu, py = sg.differentiate(fn, target="cpu"), sg.differentiate(fn, target="python")
    rtol = 1e-12 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(cpu(x), py(x), rtol=rtol, atol=rtol)
    g_cpu, g_py = cpu.grad(x), py.grad(x)
    assert g_cpu.dtype == g_py.dtype == np.dtype(dtype)
    np.testing.assert_allclose(g_cpu, g_py, rtol=rtol, atol=rtol)


def _accumulating_stages(fn, x):
    graph = sg.differentiate(fn).grad._inspect_entry(x).graph
    sched = Schedule(graph)
    out = sched.outputs[0]
    return [st for st in sched.stages
            if any(sk.kind in ("accum", "store") and sk.dest.buf == out for sk in st.sinks)], sched


def test_disjoint_slices_of_a_gradient_accumulate_in_one_loop():
    """The gradient of disjoint_columns is zeros(n, 15) with three index_adds (columns 0, 1
    and 5): the zeros fill is one stage, the three disjoint updates share another (they took
    one stage each before)."""
    stages, _ = _accumulating_stages(disjoint_columns, np.ones((9, 15)))
    writes = [sk for st in stages for sk in st.sinks]
    assert len(writes) == 4, writes                     # the fill and three updates
    assert len(stages) == 2, [st.index for st in stages]


def test_overlapping_updates_stay_in_program_order():
    """Every update of overlapping_slices' gradient that shares an element with an earlier
    one runs in a later stage than it."""
    stages, sched = _accumulating_stages(overlapping_slices, np.ones((9, 15)))
    out = sched.outputs[0]
    placed = [(st.index, sk.dest) for st in stages for sk in st.sinks if sk.kind == "accum"
              and sk.dest.buf == out]
    assert len(placed) >= 4
    for i, (k, dest) in enumerate(placed):
        for k0, earlier in placed[:i]:
            if k0 >= k:
                assert not views_overlap(earlier, dest), (k0, k)


def test_views_overlap_is_exact_on_strided_views():
    a = View(0, 0, (10, 2), (15, 1))
    assert not views_overlap(a, View(0, 2, (10, 2), (15, 1)))      # next columns
    assert views_overlap(a, View(0, 1, (10, 2), (15, 1)))          # one column shared
    assert not views_overlap(View(0, 0, (5,), (3,)), View(0, 1, (5,), (3,)))   # interleaved
    assert views_overlap(View(0, 0, (5,), (3,)), View(0, 3, (5,), (3,)))
    assert not views_overlap(View(0, 0, (4,), (1,)), View(1, 0, (4,), (1,)))   # other buffer
    assert not views_overlap(View(0, 0, (0, 4), (4, 1)), View(0, 0, (2, 4), (4, 1)))  # empty
    assert views_overlap(View(0, 9, (4,), (-3,)), View(0, 0, (1,), (1,)))  # negative stride


def empty_slices(x):
    y = np.concatenate([x[:, :0] * 2.0, np.sin(x[:, 1:])], axis=1)
    return np.sum(y * y) + np.sum(x[:, :0]) + np.sum(x[:, 2:2] ** 2)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_empty_slices_run_no_loop_and_match_python(dtype):
    """A loop over no element that only stores (an empty slice's piece, its gradient's
    update) is dropped; a sum over no element still gives 0."""
    x = np.linspace(-1, 1, 21).reshape(7, 3).astype(dtype)
    cpu, py = sg.differentiate(empty_slices), sg.differentiate(empty_slices, target="python")
    rtol = 1e-12 if dtype == "float64" else 2e-5
    np.testing.assert_allclose(cpu(x), py(x), rtol=rtol)
    np.testing.assert_allclose(cpu.grad(x), py.grad(x), rtol=rtol, atol=rtol)
    for graph in (cpu._inspect_entry(x).graph, cpu.grad._inspect_entry(x).graph):
        for st in Schedule(graph).stages:
            assert st.size or any(sk.kind not in ("store", "accum") for sk in st.sinks), st


def test_no_stage_is_left_without_a_sink():
    """A value recomputed in every loop that uses it leaves its first loop with nothing to
    write: that loop is dropped."""
    def f(g, L, q):
        return np.sum(q[:, None, :] * g + g @ L, axis=1)
    args = np.ones((3, 7, 4)), np.ones((3, 4, 4)), np.ones((3, 4))
    for graph in (sg.differentiate(f)._inspect_entry(*args).graph,):
        stages = Schedule(graph).stages
        assert all(st.sinks or st.region is not None for st in stages)
        assert [st.index for st in stages] == list(range(len(stages)))
