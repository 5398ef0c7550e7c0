"""An inner loop that writes only row i of a matrix (i the outer index: ``L[i, j] = v`` inside
``for j``) carries that row instead of the matrix (symgrad.row_carry): each write is a select
over one row, not over the whole flattened matrix, and reads of other rows come from the matrix
the inner loop started with.

Each program goes through ``user_program_check.check_program``: values against NumPy, the
gradient against central differences on target="cpu" and target="python", and the gradient's
CUDA plan under the PTX emulation; float32 through ``check_float32``; the graph says whether the
pass applied (no select over the flattened matrix is left in the forward loop) or kept the loop
as it was; and the numbers are the same bits as the graph built without the pass.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest

import symgrad as sg
from symgrad import region_passes

sys.path.insert(0, os.path.dirname(__file__))
from textbook_programs import cholesky_banachiewicz  # noqa: E402
from user_program_check import central_difference, check_float32, check_program  # noqa: E402


# ---------------------------------------------------------------------------------------------
# The programs: the row-carried ones, then two where the condition fails

def cholesky_crout_rows(A):
    """Cholesky-Crout as the rows of U = L.T: the inner loop writes row j of U, reading its
    columns ``U[:j, i]`` and its own row's diagonal, written before it."""
    n = A.shape[0]
    U = np.zeros_like(A)
    for j in range(n):
        U[j, j] = np.sqrt(A[j, j] - np.dot(U[:j, j], U[:j, j]))
        for i in range(j + 1, n):
            U[j, i] = (A[j, i] - np.dot(U[:j, j], U[:j, i])) / U[j, j]
    return U


def lu_doolittle(A):
    """Row i of U (row-carried), then column i of L (a column write: kept as it was)."""
    n = A.shape[0]
    L = np.zeros_like(A)
    U = np.zeros_like(A)
    for i in range(n):
        for k in range(i, n):
            U[i, k] = A[i, k] - np.dot(L[i, :i], U[:i, k])
        L[i, i] = 1.0
        for k in range(i + 1, n):
            L[k, i] = (A[k, i] - np.dot(L[k, :i], U[:i, i])) / U[i, i]
    return L, U


def reads_its_row(A):
    """The inner loop reads row i after writing part of it (L[i, :j], L[i, 0]) and L[j, i]:
    row j, which is row i itself at j == i."""
    n = A.shape[0]
    L = np.zeros_like(A)
    for i in range(n):
        for j in range(n):
            if j == 0:
                L[i, j] = A[i, j]
            else:
                L[i, j] = np.sin(np.sum(L[i, :j])) + A[i, j] * L[i, 0] + 0.5 * L[j, i]
    return L


def dp_table(C):
    """A soft edit-distance table: row i + 1 written (the outer index runs from 0), read from
    rows i (another row) and i + 1 (its own, behind the write)."""
    n, m = C.shape
    D = np.full((n + 1, m + 1), 5.0)
    D[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            a, b, c = D[i - 1, j], D[i, j - 1], D[i - 1, j - 1]
            D[i, j] = C[i - 1, j - 1] - np.log(np.exp(-a) + np.exp(-b) + np.exp(-c))
    return D


def reads_rows_from_i(A):
    """``range(i, n)``: reads L[k, i], L[k, k] (row k >= i, row i itself at k == i), a whole
    column and its own diagonal."""
    n = A.shape[0]
    L = np.ones_like(A)
    for i in range(n):
        for k in range(i, n):
            L[i, k] = np.cos(L[k, i]) + A[i, k] * L[i, i] + L[k, k] * 0.3 + np.sum(L[:, k]) * 0.1
    return L


def reads_the_next_row(A):
    n = A.shape[0]
    L = A.copy()
    for i in range(n - 1):
        for j in range(n):
            L[i, j] = L[i + 1, j] * 0.5 + np.tanh(L[i, j])
    return L


def wraps_to_the_last_row(A):
    """L[i - 1] at i = 0 and L[i, j - 1] at j = 0 are NumPy's last row and column (an index
    that is not affine: kept as it was)."""
    n = A.shape[0]
    L = np.zeros_like(A)
    for i in range(n):
        for j in range(n):
            L[i, j] = np.sin(A[i, j] + L[i - 1, j]) + 0.1 * L[i, j - 1]
    return L


def reads_the_whole_matrix(A):
    n = A.shape[0]
    L = np.ones_like(A)
    for i in range(n):
        for j in range(n):
            L[i, j] = 0.01 * np.sum(L) + A[i, j]
    return L


def cholesky_crout_columns(A):
    """Column j written by the inner loop over i: not one row, kept as it was."""
    n = A.shape[0]
    L = np.zeros_like(A)
    for j in range(n):
        L[j, j] = np.sqrt(A[j, j] - np.dot(L[j, :j], L[j, :j]))
        for i in range(j + 1, n):
            L[i, j] = (A[i, j] - np.dot(L[i, :j], L[j, :j])) / L[j, j]
    return L


def symmetric_fill(A):
    """Writes row i and row j: kept as it was."""
    n = A.shape[0]
    L = np.zeros_like(A)
    for i in range(n):
        for j in range(i + 1):
            v = A[i, j] * 2.0 + np.sin(L[j, i])
            L[i, j] = v
            L[j, i] = v
    return np.sum(L ** 2)


def _spd(n, dtype=np.float64):
    m = np.random.default_rng(n).normal(size=(n, n))   # the same matrix whatever ran before
    return (m @ m.T + n * np.eye(n)).astype(dtype)


CARRIED = {"cholesky_banachiewicz": cholesky_banachiewicz,
           "cholesky_crout_rows": cholesky_crout_rows,
           "lu_doolittle": lu_doolittle, "reads_its_row": reads_its_row, "dp_table": dp_table,
           "reads_rows_from_i": reads_rows_from_i, "reads_the_next_row": reads_the_next_row}
KEPT = {"cholesky_crout_columns": cholesky_crout_columns, "symmetric_fill": symmetric_fill,
        "wraps_to_the_last_row": wraps_to_the_last_row,
        "reads_the_whole_matrix": reads_the_whole_matrix}
PROGRAMS = {**CARRIED, **KEPT}


def _flat_selects(text: str, n: int) -> int:
    """Selects over the whole flattened n x n matrix in the listing's inner loops (bodies two
    regions deep: the outer loop's own writes, once per outer iteration, are not counted)."""
    return len(re.findall(rf"(?m)^ {{18,}}%\d+ = where\(.*: float(32|64)\[{n * n}\]", text))


# ---------------------------------------------------------------------------------------------
# Values and gradients on cpu, python and the PTX emulation; float32

@pytest.mark.parametrize("name", list(PROGRAMS))
def test_values_and_gradients(name):
    check_program(PROGRAMS[name], [_spd(7)])


@pytest.mark.parametrize("target", ["cpu", "python"])
@pytest.mark.parametrize("name", list(CARRIED))
def test_float32(name, target):
    A = _spd(8)
    check_float32(PROGRAMS[name], [A.astype(np.float32)], [A], (0,), target, name)


# ---------------------------------------------------------------------------------------------
# Whether the pass applied, and the same bits as without it

@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_row_is_carried_where_only_row_i_is_written(name):
    n = 9
    f = sg.differentiate(PROGRAMS[name], target="python")
    text = f.ir_for(_spd(n))
    assert "= loop(" in text
    # lu_doolittle's second inner loop writes a column and keeps its flat select
    want = {"lu_doolittle": 1}.get(name, 0) if name in CARRIED else None
    if want is None:
        assert _flat_selects(text, n) > 0, text
    else:
        assert _flat_selects(text, n) == want, text


# The gradients whose other rows' cotangents are summed in another order (a column read, a DP
# table's previous row); on cpu, a sum over a column read the select now feeds is vectorised
# differently (values within 3 ulp)
GRADIENT_ORDER = {"cholesky_crout_rows", "dp_table", "reads_rows_from_i"}
CPU_SUM_ORDER = {"reads_rows_from_i"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("target", ["cpu", "python"])
@pytest.mark.parametrize("name", list(CARRIED))
def test_the_same_bits_as_without_the_pass(name, target, dtype, monkeypatch):
    """The rewritten loop reads and writes the same values: the same bits as the graph built
    without the pass, but for the summation orders above (then within 16 ulp)."""
    A = _spd(8, dtype)
    fn = PROGRAMS[name]
    new = sg.differentiate(fn, target=target)
    value, grad = new(A), new.grad(A)
    monkeypatch.setattr(region_passes, "carried_rows", lambda loop: loop)
    old = sg.differentiate(fn, target=target)
    want_value, want_grad = old(A), old.grad(A)
    eps = np.finfo(dtype).eps
    for got, want in zip(value if isinstance(value, tuple) else (value,),
                         want_value if isinstance(want_value, tuple) else (want_value,)):
        if target == "cpu" and name in CPU_SUM_ORDER:
            np.testing.assert_allclose(got, want, rtol=16 * eps, atol=0)
        else:
            assert np.array_equal(got, want)
    if name in GRADIENT_ORDER:
        np.testing.assert_allclose(grad, want_grad, rtol=16 * eps,
                                   atol=16 * eps * np.max(np.abs(want_grad)))
    else:
        assert np.array_equal(grad, want_grad)


# ---------------------------------------------------------------------------------------------
# Second order, and a new n

@pytest.mark.parametrize("target", ["cpu", "python"])
def test_cholesky_hessian(target):
    A = _spd(6)
    h = sg.hessian(lambda A: np.sum(cholesky_banachiewicz(A) ** 2), target=target)(A)
    g = sg.differentiate(lambda A: np.sum(cholesky_banachiewicz(A) ** 2), target="python").grad
    eps = 1e-5
    for a, b in [(0, 0), (3, 1), (5, 5), (2, 4)]:
        d = np.zeros_like(A)
        d[a, b] = eps
        numeric = (g(A + d) - g(A - d)) / (2 * eps)
        np.testing.assert_allclose(h[:, :, a, b], numeric, rtol=1e-5, atol=1e-6)


def test_a_new_n_gives_the_right_numbers_on_cpu():
    f = sg.differentiate(lambda A: np.sum(np.sin(cholesky_banachiewicz(A))))
    for n in (10, 23, 6):
        A = _spd(n)
        np.testing.assert_allclose(cholesky_banachiewicz(A), np.linalg.cholesky(A), rtol=1e-10)
        np.testing.assert_allclose(f(A), np.sum(np.sin(np.linalg.cholesky(A))), rtol=1e-10)
        want = central_difference(lambda A: np.sum(np.sin(cholesky_banachiewicz(A))), [A], 0)
        np.testing.assert_allclose(f.grad(A), want, rtol=1e-6, atol=1e-7)


def test_the_iteration_space_extremes_are_those_of_every_iteration():
    """row_carry._iterations: the outer index values checked for a form's least and greatest
    values give the same extremes as every (i, j) that runs (a counted inner loop)."""
    from symgrad.row_carry import _iterations
    rng = np.random.default_rng(5)
    for _ in range(3000):
        ti, tj = (int(v) for v in rng.integers(1, 25, 2))
        p, q = int(rng.integers(-4, 5)), int(rng.integers(-30, 31))
        a, b, c = (int(v) for v in rng.integers(-5, 6, 3))

        def extremes(space):
            values = [v for i, last in space if last >= 0
                      for v in (a * i + c, a * i + b * last + c)]
            return (min(values), max(values)) if values else None
        every = [(i, min(tj, p * i + q) - 1) for i in range(ti)]
        assert extremes(_iterations(ti, tj, (p, q))) == extremes(every), (ti, tj, p, q, a, b, c)
