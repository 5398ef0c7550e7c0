"""Loop-level rewrites of symgrad.region_passes. Here: a carry that every iteration only writes
row ``i`` (or ``i + c``) of (``out[i] = v``, ``hs[t] = h``, ``out[i, :] = v``, ``out[:, i] = v``,
``out[i, 1:] = v``) becomes a stacked per-iteration output (``_stacked_writes``), the rows never
written keeping the initial array's, and so does one that two nested loops write
``out[i, j] = v`` into (symgrad.grid_writes: distance matrices, conv2d, ``out[j, i] = v``); a
carry also read in the body, written twice per iteration, written at a data-dependent row, under
a branch or by a triangular inner loop stays a carry. Each program is checked for values and
gradients on target="python" and target="cpu" (against NumPy and central differences), float64
and float32, through the CUDA plan under the emulation (codegen.ptx_emulate), and by its graph:
whether the loop still has the carry, and whether a stacked output exists.
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
from test_window_slices import conv1d, conv2d  # noqa: E402  (out[i] = np.dot(x[i:i + k], w))

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


def row_slice(x, w):           # out[i, :] = v: the position read through the row numbers
    n, m = x.shape[0], w.shape[0]
    out = np.zeros((n, m))
    for i in range(n):
        out[i, :] = np.sin(x[i] * w)
    return np.sum(out ** 2)


def column_slice(x, w):        # out[:, j] = v: a stacked output, transposed
    n, m = x.shape[0], w.shape[0]
    out = np.ones((n, m + 2)) * x[0]
    for j in range(m):
        out[:, j + 1] = np.sin(x * w[j])
    return np.sum(out ** 2)


def behind(x, w):              # out[i - 1] in range(1, n): (i + 1) - 1, its checks decided
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(1, n):
        out[i - 1] = np.sin(x[i]) * w[0]
    return np.sum(out * x)


def row_tail(x, w):            # out[i, 1:] = v: the row written into a slice's view
    n, m = x.shape[0], w.shape[0]
    out = np.ones((n, m + 2)) * w[1]
    for i in range(n):
        out[i, 1:m + 1] = np.sin(x[i] * w)
    return np.sum(out ** 2)


def column_tail(x, w):         # out[1:, j] = v in range(1, m): the column j - 1
    n, m = x.shape[0], w.shape[0]
    out = np.zeros((n + 1, m))
    for j in range(1, m):
        out[1:, j - 1] = np.sin(x * w[j])
    return np.sum(out ** 2)


# ---------------------------------------------------------------------------------------------
# Accepted: out[i, j] = v in two nested loops (symgrad.grid_writes)

def grid(x, w):                # a pairwise table
    n, m = x.shape[0], w.shape[0]
    out = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            out[i, j] = np.sin(x[i] * w[j])
    return np.sum(out ** 2)


def distances(X, w):           # a distance matrix
    n = X.shape[0]
    D = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            D[i, j] = np.sqrt(np.sum((X[i] - X[j]) ** 2) + w[0] ** 2)
    return np.sum(np.exp(-D))


def grid_shifted(x, w):        # a block inside an initial array computed from w
    n, m = x.shape[0], w.shape[0]
    out = np.ones((n + 2, m + 3)) * w[0]
    for i in range(n):
        for j in range(m):
            out[i + 1, j + 2] = np.cos(x[i] - w[j])
    return np.sum(out ** 3)


def grid_transposed(x, w):     # out[j, i] = v
    n, m = x.shape[0], w.shape[0]
    out = np.zeros((m + 1, n))
    for i in range(n):
        for j in range(m):
            out[j + 1, i] = x[i] * np.tanh(w[j])
    return np.sum(out ** 2) + np.sum(out[0])


def grid_behind(x, w):         # out[i - 1, j - 1] in range(1, n), range(1, m): the index
    n, m = x.shape[0], w.shape[0]   # checks, decided by the ranges
    out = np.zeros((n, m))
    for i in range(1, n):
        for j in range(1, m):
            out[i - 1, j - 1] = np.sin(x[i] * w[j])
    return np.sum(out ** 2)


def grid_vectors(x, w):        # out[i, j + 1] = a vector, beside a sum both loops carry
    n, m = x.shape[0], w.shape[0]
    out = np.ones((n, m + 1, 2)) * x[0]
    total = 0.0
    for i in range(n):
        for j in range(m):
            v = np.sin(x[i] * w[j])
            out[i, j + 1] = v * w[:2]
            total = total + v
    return np.sum(out ** 2) + total ** 2


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


def selects_on_equality(x, w):   # where(x[i] == w[0], ...) into a scalar carry and a row
    n = x.shape[0]
    c, out = 0.0, np.zeros(n)
    for i in range(n):
        c = np.where(np.round(x[i]) == w[0], x[i] * w[1], c)
        out = np.where(np.arange(n) == n - 1 - i, x[i] * w[2], out)
    return c + np.sum(out)


def writes_reversed_row(x, w):   # row n - 1 - i: not the loop's row
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[n - 1 - i] = np.sin(x[i]) * w[0]
    return np.sum(out * x)


def grid_reads_carry(x, w):    # out[i, j] reads out[i, j - 1]
    n, m = x.shape[0], w.shape[0]
    out = np.zeros((n, m))
    for i in range(n):
        for j in range(1, m):
            out[i, j] = out[i, j - 1] * 0.5 + np.sin(x[i] * w[j])
    return np.sum(out ** 2)


def grid_on_a_branch(x, w):
    n, m = x.shape[0], w.shape[0]
    out = np.zeros((n, m))
    for i in range(n):
        for j in range(m):
            if x[i] * w[j] > 0:
                out[i, j] = np.sin(x[i] * w[j])
    return np.sum(out ** 2)


def grid_triangular(x, w):     # the inner trips depend on i
    n = x.shape[0]
    out = np.zeros((n, n))
    for i in range(n):
        for j in range(i):
            out[i, j] = np.sin(x[i] * x[j]) * w[0]
    return np.sum(out ** 2)


def grid_twice(x, w):          # two writes per inner iteration
    n, m = x.shape[0], w.shape[0]
    out = np.zeros((n, m + 1))
    for i in range(n):
        for j in range(m):
            out[i, j] = np.sin(x[i] * w[j])
            out[i, j + 1] = x[i]
    return np.sum(out ** 2)


ACCEPTED = {"conv1d": conv1d, "elman": elman, "elman_shifted": elman_shifted, "shifted": shifted,
            "two_rows_arrays": two_rows_arrays, "nested": nested, "row_slice": row_slice,
            "column_slice": column_slice, "row_tail": row_tail, "column_tail": column_tail,
            "behind": behind}
GRIDS = {"grid": grid, "conv2d": conv2d, "distances": distances, "grid_shifted": grid_shifted,
         "grid_transposed": grid_transposed, "grid_vectors": grid_vectors,
         "grid_behind": grid_behind}
GRIDS_REFUSED = {"grid_reads_carry": grid_reads_carry, "grid_on_a_branch": grid_on_a_branch,
                 "grid_triangular": grid_triangular, "grid_twice": grid_twice}
REFUSED = {"reads_previous_row": reads_previous_row, "reads_whole_carry": reads_whole_carry,
           "writes_two_rows": writes_two_rows, "writes_on_a_branch": writes_on_a_branch,
           "writes_reversed_row": writes_reversed_row, "writes_data_row": writes_data_row}
PROGRAMS = {**ACCEPTED, **REFUSED, **GRIDS, **GRIDS_REFUSED,
            "selects_on_equality": selects_on_equality}


def _args(name, dtype=np.float64):
    rng = np.random.default_rng(7)
    if name == "conv2d":
        args = (rng.standard_normal((10, 12)), rng.standard_normal((3, 3)))
    elif name == "distances":
        args = (rng.standard_normal((12, 3)), rng.standard_normal(2))
    elif name == "nested" or name.startswith("grid") or name.endswith(("_slice", "_tail")):
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
           "two_rows_arrays": ([], [(), ()]), "nested": ([], [(9,)]), "row_slice": ([], [(9,)]),
           "column_slice": ([], [(11,)]), "row_tail": ([], [(9,)]), "column_tail": ([], [(11,)]),
           "behind": ([], [()])}


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


def _carries_and_stacked(loop):
    body, _, n_carry = loop.attrs[:3]
    return [loop.inputs[k].shape for k in range(n_carry)], [r.shape for r in body.results[n_carry:]]


# name -> (carries, stacked rows) of the outer loop and of the inner loop after the pass; before
# it the table was a carry of both loops, selected over whole in every inner iteration
GRID_STACKED = {"grid": (([], [(9,)]), ([], [()])), "conv2d": (([], [(10,)]), ([], [()])),
                "distances": (([], [(12,)]), ([], [()])),
                "grid_shifted": (([], [(9,)]), ([], [()])),
                "grid_transposed": (([], [(9,)]), ([], [()])),
                "grid_vectors": (([()], [(9, 2)]), ([()], [(2,)])),
                "grid_behind": (([], [(8,)]), ([], [()]))}


@pytest.mark.parametrize("name", sorted(GRIDS))
def test_grid_writes_become_stacked_outputs(name):
    (outer,) = _loops(GRIDS[name], _args(name))
    (inner,) = [m for m in toposort(list(outer.attrs[0].results)) if m.op == "loop"]
    assert (_carries_and_stacked(outer), _carries_and_stacked(inner)) == GRID_STACKED[name]


@pytest.mark.parametrize("name", sorted(GRIDS_REFUSED))
def test_refused_grid_writes_stay_carries(name):
    args = _args(name)
    table = GRIDS_REFUSED[name](*args) is not None and \
        {"grid_triangular": (11, 11), "grid_twice": (11, 10)}.get(name, (11, 9))
    (outer,) = _loops(GRIDS_REFUSED[name], args)
    assert table in _carries_and_stacked(outer)[0], name


def test_selects_on_equality_stay_carries():   # a scalar carry's select, a reversed row
    (loop,) = _loops(selects_on_equality, _args("selects_on_equality"))
    assert _carries_and_stacked(loop) == ([(), (11,)], [])


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


def grid_returned(x, w):   # a block of a table and its transpose, the rest the initial values
    n, m = x.shape[0], w.shape[0]   # (rounded operations only: the back ends' sin and cos
    out = np.full((n + 3, m + 1), 0.5)   # may differ from NumPy's by an ulp, with or without
    out_t = np.full((m, n + 1), -0.25)   # the pass)
    for i in range(n):
        for j in range(m):
            out[i + 2, j] = x[i] * w[j] + x[i]
            out_t[j, i + 1] = x[i] - w[j] * w[j]
    return out, out_t


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [rows_returned, grid_returned])
def test_values_are_bit_identical(fn, target, dtype):
    x, w = _args("conv1d" if fn is rows_returned else "grid", dtype)
    got, want = sg.differentiate(fn, target=target)(x, w), fn(x, w)
    for a, b in zip(*((got, want) if isinstance(want, tuple) else ((got,), (want,)))):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


def test_a_returned_grid_is_stacked():
    (outer,) = _loops(grid_returned, _args("grid"))
    assert _carries_and_stacked(outer) == ([], [(9,), (9,)])


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_of_a_stacked_write(target):
    xs = np.random.default_rng(3).standard_normal((4, 11))
    w = np.random.default_rng(4).standard_normal(3)
    f = sg.vmap(sg.grad(conv1d, target=target), in_axes=(0, None))
    want = np.stack([sg.grad(conv1d, target="python")(x, w) for x in xs])
    np.testing.assert_allclose(f(xs, w), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_of_a_grid_write(target):
    xs = np.random.default_rng(3).standard_normal((3, 11))
    w = np.random.default_rng(4).standard_normal(9)
    f = sg.vmap(sg.grad(grid, wrt=(0, 1), target=target), in_axes=(0, None))
    want = [sg.grad(grid, wrt=(0, 1), target="python")(x, w) for x in xs]
    for k, got in enumerate(f(xs, w)):
        np.testing.assert_allclose(got, np.stack([g[k] for g in want]), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["grid", "distances", "grid_transposed"])
def test_forward_mode_and_hvp_of_a_grid_write(name, target):
    fn, (x, w) = GRIDS[name], _args(name)
    rng = np.random.default_rng(5)
    tx, tw = rng.standard_normal(x.shape), rng.standard_normal(w.shape)
    eps = 1e-6
    value, tangent = sg.jvp(fn, wrt=(0, 1), target=target)(x, w, tx, tw)
    np.testing.assert_allclose(value, fn(x, w), rtol=1e-12)
    want = (fn(x + eps * tx, w + eps * tw) - fn(x - eps * tx, w - eps * tw)) / (2 * eps)
    np.testing.assert_allclose(tangent, want, rtol=1e-6, atol=1e-7)
    grad = sg.grad(fn, wrt=0, target="python")
    want = (grad(x + eps * tx, w) - grad(x - eps * tx, w)) / (2 * eps)
    np.testing.assert_allclose(sg.hvp(fn, wrt=0, target=target)(x, tx, w), want, rtol=1e-5,
                               atol=1e-6)
