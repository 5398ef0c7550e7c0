"""Loop-level rewrites of symgrad.region_passes. Here: a carry that every iteration only writes
row ``i`` (or ``i + c``) of (``out[i] = v``, ``hs[t] = h``) becomes a stacked per-iteration
output (``_stacked_writes``), the rows never written keeping the initial array's; a carry also
read in the body, written twice per iteration, written at a data-dependent row or under a
branch stays a carry. Each program is checked for values and gradients on target="python" and
target="cpu" (against NumPy and central differences), float64 and float32, through the CUDA
plan under the emulation (codegen.ptx_emulate), and by its graph: whether the loop still has
the carry, and whether a stacked output exists.
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad.ir import toposort

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from user_program_check import check_cuda, check_float32, check_program  # noqa: E402
from test_window_slices import conv1d  # noqa: E402  (out[i] = np.dot(x[i:i + k], w))

TARGETS = ("python", "cpu")


# ---------------------------------------------------------------------------------------------
# Accepted: the carry is only written at the loop's row

def elman(x, W, u):            # hs[t] = h: a 2-d carry
    T, H = x.shape[0], W.shape[0]
    hs = np.zeros((T, H))
    h = np.zeros(H)
    for t in range(T):
        h = np.tanh(W @ h + u * x[t])
        hs[t] = h
    return np.sum(hs ** 2) + np.sum(hs[:, 0])


def elman_shifted(x, W, u):    # hs[t + 1] = h in a 2-d initial array computed from u
    T, H = x.shape[0], W.shape[0]
    hs = np.ones((T + 2, H)) * u
    h = np.zeros(H)
    for t in range(T):
        h = np.tanh(W @ h + u * x[t])
        hs[t + 1] = h
    return np.sum(hs ** 2)


def shifted(x, w):             # rows 1..n-2 of an initial array computed from x: rows 0, n-1 kept
    n = x.shape[0]
    out = x ** 2
    for i in range(n - 2):
        out[i + 1] = np.sin(x[i]) * w[0]
    return np.sum(out * out)


def two_rows_arrays(x, w):     # two carries written at the row, one of them shifted by one
    n = x.shape[0]
    a = np.zeros(n)
    b = np.ones(n + 1)
    for i in range(n):
        a[i] = x[i] * w[0]
        b[i + 1] = np.cos(x[i])
    return np.sum(a * a) + np.sum(b * a[0])


def nested(x, w):              # row[j] = v in a loop nested in one writing out[i] = row
    n, m = x.shape[0], w.shape[0]
    out = np.zeros((n, m))
    for i in range(n):
        row = np.zeros(m)
        for j in range(m):
            row[j] = np.sin(x[i] * w[j])
        out[i] = row * x[i]
    return np.sum(out ** 2)


# ---------------------------------------------------------------------------------------------
# Refused: each stays a carry

def reads_previous_row(x, w):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n - 1):
        out[i + 1] = out[i] * w[0] + x[i]
    return np.sum(out ** 2)


def reads_whole_carry(x, w):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[i] = np.sum(out) * w[0] + x[i]
    return np.sum(out ** 2)


def writes_two_rows(x, w):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n - 1):
        out[i] = x[i] * w[0]
        out[i + 1] = np.sin(x[i])
    return np.sum(out ** 2)


def writes_on_a_branch(x, w):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        if x[i] > 0:
            out[i] = x[i] * w[0]
    return np.sum(out ** 2)


def writes_data_row(x, w, rows):   # the row read from an array
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[rows[i]] = np.sin(x[i]) * w[0]
    return np.sum(out * x)


def writes_reversed_row(x, w):   # row n - 1 - i: not the loop's row
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[n - 1 - i] = np.sin(x[i]) * w[0]
    return np.sum(out * x)


ACCEPTED = {"conv1d": conv1d, "elman": elman, "elman_shifted": elman_shifted, "shifted": shifted,
            "two_rows_arrays": two_rows_arrays, "nested": nested}
REFUSED = {"reads_previous_row": reads_previous_row, "reads_whole_carry": reads_whole_carry,
           "writes_two_rows": writes_two_rows, "writes_on_a_branch": writes_on_a_branch,
           "writes_reversed_row": writes_reversed_row, "writes_data_row": writes_data_row}
PROGRAMS = {**ACCEPTED, **REFUSED}


def _args(name, dtype=np.float64):
    rng = np.random.default_rng(7)
    if name == "nested":
        args = (rng.standard_normal(11), rng.standard_normal(9))
    elif name.startswith("elman"):
        args = (rng.standard_normal(9), 0.4 * rng.standard_normal((4, 4)), rng.standard_normal(4))
    else:
        args = (rng.standard_normal(11), rng.standard_normal(3))
    args = tuple(a.astype(dtype) for a in args)
    return args + (rng.permutation(11),) if name == "writes_data_row" else args


def _wrt(args):
    return tuple(k for k, a in enumerate(args) if a.dtype.kind == "f")


def _loops(fn, args):
    """The loops of ``fn``'s simplified forward graph for ``args``."""
    f = sg.differentiate(fn, wrt=_wrt(args), target="python")
    graph = f._graph(f.bind(list(args), {}))
    return [m for m in toposort(list(graph.outputs)) if m.op == "loop"]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_values_and_gradients(name):
    args = _args(name)
    check_program(PROGRAMS[name], args, wrt=_wrt(args))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_float32(name, target):
    args32 = _args(name, np.float32)
    f, got = check_float32(PROGRAMS[name], args32, _args(name), _wrt(args32), target, name)
    if target == "python":
        check_cuda(f.grad, args32, got, 1e-5)


# name -> (the carries left, the stacked outputs' row shapes) of the loop after the pass;
# before it the written arrays were carries and the loop had no stacked output (elman: h only)
STACKED = {"conv1d": ([], [()]), "elman": ([(4,)], [(4,)]), "elman_shifted": ([(4,)], [(4,)]),
           "shifted": ([], [()]),
           "two_rows_arrays": ([], [(), ()]), "nested": ([], [(9,)])}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_row_writes_become_stacked_outputs(name):
    (loop,) = _loops(ACCEPTED[name], _args(name))
    body, _, n_carry = loop.attrs[:3]
    carries = [loop.inputs[k].shape for k in range(n_carry)]
    assert (carries, [r.shape for r in body.results[n_carry:]]) == STACKED[name]


def test_a_nested_loops_row_write_is_a_stacked_output():
    (outer,) = _loops(nested, _args("nested"))
    (inner,) = [m for m in toposort(list(outer.attrs[0].results)) if m.op == "loop"]
    assert inner.attrs[2] == 0 and [r.shape for r in inner.attrs[0].results] == [()]


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_writes_stay_carries(name):
    args = _args(name)
    (loop,) = _loops(REFUSED[name], args)
    body, _, n_carry = loop.attrs[:3]
    assert [loop.inputs[k].shape for k in range(n_carry)] == [args[0].shape], name
    assert len(body.results) == n_carry, name   # no stacked output


def rows_returned(x, w):   # the written array itself: the same bits as NumPy's
    n = x.shape[0]
    out = np.full(n + 2, 0.5)
    for i in range(n):
        out[i + 1] = np.sin(x[i]) * w[0] + x[i]
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("target", TARGETS)
def test_values_are_bit_identical(target, dtype):
    x, w = _args("conv1d", dtype)
    got = sg.differentiate(rows_returned, target=target)(x, w)
    np.testing.assert_array_equal(got, rows_returned(x, w))
    assert got.dtype == rows_returned(x, w).dtype


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_of_a_stacked_write(target):
    xs = np.random.default_rng(3).standard_normal((4, 11))
    w = np.random.default_rng(4).standard_normal(3)
    f = sg.vmap(sg.grad(conv1d, target=target), in_axes=(0, None))
    want = np.stack([sg.grad(conv1d, target="python")(x, w) for x in xs])
    np.testing.assert_allclose(f(xs, w), want, rtol=1e-12, atol=1e-12)
