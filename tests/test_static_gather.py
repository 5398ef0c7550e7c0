"""Arrays assembled by a static loop from many pieces of one array (np.stack / np.concatenate
of basic-index slices and zeros, e.g. ADBench GMM's lower triangle) become one gather with a
constant index table (symgrad.index_ops._static_gather): same values and gradients as the
pieces, on every target."""
import numpy as np
import pytest

import symgrad as sg
from adbench_models import lower_triangles
from symgrad.index_ops import GATHER_MIN_PIECES


def gmm_like(icf, x):
    d = x.shape[1]
    ls = lower_triangles(icf, d)                            # (k, d, d)
    y = x[None, :, :] @ np.transpose(ls, (0, 2, 1))         # (k, n, d)
    return np.sum(np.sin(y) * y) + np.sum(ls * ls * 0.5)


def scattered(v):
    # pieces of v in a shuffled order, with zeros, steps and a reversed slice: 1-D, no rows
    parts = [v[3:5], np.zeros(2), v[0:1], v[::-2], v[7:8], np.zeros(1), v[1:6:2], v[5:7], v[2:3]]
    return np.concatenate(parts)


def uses_scattered(v):
    return np.sum(np.exp(scattered(v)) * np.arange(17.0))


def rows_with_ints(m):
    return np.stack([m[i, 1:4] for i in range(8)], axis=1)


def uses_rows_with_ints(m):
    return np.sum(np.tanh(rows_with_ints(m)) * np.linspace(0.0, 1.0, 24).reshape(3, 8))


def two_arrays(a, b):
    return np.sum(np.concatenate([a[i:i + 1] if i % 2 else b[i:i + 1] for i in range(10)]) ** 2)


def few_pieces(v):
    return np.sum(np.concatenate([v[:2], v[2:]]) ** 2)


def _check(fn, args, wrt):
    cpu = sg.differentiate(fn, wrt=wrt)
    ref = sg.differentiate(fn, wrt=wrt, target="python")
    assert cpu(*args) == pytest.approx(fn(*args), rel=1e-13)
    assert ref(*args) == pytest.approx(fn(*args), rel=1e-13)
    got, want = cpu.grad(*args), ref.grad(*args)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-13)
    return cpu, ref


def _numeric_grad(fn, args, i, eps=1e-6):
    x = args[i]
    out = np.zeros_like(x)
    for j in np.ndindex(x.shape):
        up = [a.copy() if k == i else a for k, a in enumerate(args)]
        dn = [a.copy() if k == i else a for k, a in enumerate(args)]
        up[i][j] += eps
        dn[i][j] -= eps
        out[j] = (fn(*up) - fn(*dn)) / (2 * eps)
    return out


@pytest.mark.parametrize("d", [4, 6])
def test_gmm_triangle_is_one_gather(d):
    rng = np.random.default_rng(0)
    k = 3
    icf = rng.uniform(-1, 1, (k, d + d * (d - 1) // 2))
    x = rng.uniform(-1, 1, (5, d))
    np.testing.assert_array_equal(sg.differentiate(lambda c: lower_triangles(c, d))(icf),
                                  lower_triangles(icf, d))
    cpu, ref = _check(gmm_like, (icf, x), (0, 1))
    text = cpu.ir_for(icf, x)
    assert "take(" in text and "stack(" not in text
    np.testing.assert_allclose(cpu.grad(icf, x)[0], _numeric_grad(gmm_like, [icf, x], 0),
                               rtol=1e-6, atol=1e-7)


def test_scattered_pieces_without_rows():
    v = np.linspace(-1.0, 1.0, 8)
    np.testing.assert_array_equal(sg.differentiate(scattered)(v), scattered(v))
    cpu, _ = _check(uses_scattered, (v,), 0)
    assert "take(" in cpu.ir_for(v)
    np.testing.assert_allclose(cpu.grad(v), _numeric_grad(uses_scattered, [v], 0), rtol=1e-6)


def test_pieces_that_drop_an_axis():
    m = np.arange(40.0).reshape(8, 5) / 40
    np.testing.assert_array_equal(sg.differentiate(rows_with_ints)(m), rows_with_ints(m))
    cpu, _ = _check(uses_rows_with_ints, (m,), 0)
    assert "take(" in cpu.ir_for(m)


def test_pieces_of_two_arrays_stay_joins():
    a, b = np.arange(10.0), -np.arange(10.0)
    cpu, _ = _check(two_arrays, (a, b), (0, 1))
    assert "take(" not in cpu.ir_for(a, b)


def test_few_pieces_stay_a_concatenate():
    assert GATHER_MIN_PIECES > 2
    v = np.arange(5.0)
    cpu, _ = _check(few_pieces, (v,), 0)
    assert "take(" not in cpu.ir_for(v) and "concatenate(" in cpu.ir_for(v)


def test_gather_on_the_cuda_plan():
    """The CUDA back end runs the gather and its scatter-add (PTX built; run by the CPU
    emulation of codegen.ptx_emulate)."""
    from symgrad.codegen import ptx, ptx_emulate
    rng = np.random.default_rng(3)
    d, k = 4, 2
    icf = rng.uniform(-1, 1, (k, d + d * (d - 1) // 2))
    x = rng.uniform(-1, 1, (3, d))
    f = sg.grad(gmm_like, wrt=(0, 1))
    graph = f._inspect_entry(icf, x).graph
    assert "ptx_kernel" in ptx.build_module(ptx.plan(graph))
    want = sg.grad(gmm_like, wrt=(0, 1), target="python")(icf, x)
    for got, w in zip(ptx_emulate.run(graph, [icf, x]), want):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-13)


def test_a_join_grown_step_by_step_stops_the_walk():
    """``acc = np.concatenate([acc, piece])`` in a long static loop: each step's walk over the
    nested joins stops at GATHER_MAX_NODES (linear in the steps, not quadratic), and a join
    past the bound is left a join."""
    from symgrad import index_ops
    from symgrad.ir import Slice, make
    a = make("arg", (), (0, "a", "float64", (8,)))
    acc = make("exp", (a,), ())            # not a piece: no step's join ever qualifies
    visits = []
    real = index_ops._pieces

    def counted(x):
        found = real(x)
        visits.append(len(found[2]) if found else 0)
        return found
    index_ops._pieces = counted
    try:
        for i in range(1, 2 * index_ops.GATHER_MAX_NODES):
            acc = index_ops.concatenate([acc, index_ops.getitem(a, (Slice(i % 7, i % 7 + 1, 1),))])
    finally:
        index_ops._pieces = real
    assert acc.op == "concatenate" and acc.shape == (8 + 2 * index_ops.GATHER_MAX_NODES - 1,)
    assert visits == [0] * len(visits)     # every walk gave up


def test_repeated_pieces_count_as_pieces():
    """The same slice used many times (interned: one node) still makes many pieces."""
    v = np.linspace(-1.0, 1.0, 8)
    cpu, _ = _check(repeated, (v,), 0)
    assert "take(" in cpu.ir_for(v)


def repeated(v):
    return np.sum(np.exp(np.concatenate([v[0:2], v[1:3]] * 5)))



def some_rows(m):
    return np.concatenate([m[:2, j:j + 1] for j in range(9)] + [m[2:, j:j + 1] for j in range(9)],
                          0)


def along_rows(m):
    return np.concatenate([m[:, j:j + 1] for j in range(9)], 0)


def triangle(m):
    return lower_triangles(m, 5)


@pytest.mark.parametrize("build", [triangle, some_rows, along_rows])
def test_one_row_table_is_the_whole_tables_row(build, monkeypatch):
    """_row_map reads the one-row table off the pieces' structure where every piece takes all
    rows and no join is along them (the GMM triangle), without the whole table; elsewhere it
    declines and _rows_table checks the whole table. Both ways the gather is the same."""
    from symgrad import index_ops
    seen = []
    row_map = index_ops._row_map

    def recorded(order, src):
        one = row_map(order, src)
        seen.append((one, index_ops._rows_table(index_ops._piece_map(order, src), src)))
        return one
    monkeypatch.setattr(index_ops, "_row_map", recorded)
    icf = np.arange(4 * 15.0).reshape(4, 15)
    np.testing.assert_array_equal(sg.differentiate(build)(icf), build(icf))
    ((one, whole),) = seen
    if build in (some_rows, along_rows):
        assert one is None
    else:
        assert one is not None
        np.testing.assert_array_equal(one, whole)
