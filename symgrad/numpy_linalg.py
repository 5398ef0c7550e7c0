"""``np.linalg``'s factorisations as compositions: ``det``, ``slogdet`` (LU with partial
pivoting), ``inv``, ``solve`` (Gauss-Jordan with partial pivoting), ``cholesky`` (column by
column). Each is unrolled over the n pivot steps of its (static) matrix size, every step a
few whole-matrix array operations on the (..., n, n) stack, so batches come free and every
back end runs it with the ops it already lowers; derivatives of every order come from
differentiating the elimination itself (the pivot choice is an integer: no derivative).

Pivoting as LAPACK: the first entry of largest magnitude in the column, rows swapped by a
rank-one update (no data-dependent indexing). Meant for small and moderate matrices (the
trace grows with n; n of a few dozen compiles in well under a second).

Singular input: ``det`` is 0 and ``slogdet`` (0, -inf), as NumPy (a zero pivot is divided as
1, its column being zero already); derivatives there are not defined in general and may be
nan. ``inv`` / ``solve`` of a singular matrix, and ``cholesky`` of one that is not positive
definite, give inf / nan where NumPy raises LinAlgError (a run-time value cannot raise).
"""
from __future__ import annotations

import collections

import numpy as np

from . import ops
from .ir import Node
from .numpy_base import _as_array
from .op_base import _promote
from .numpy_sorting import argmax


def _square_stack(a, name: str) -> Node:
    x = ops.to_float(_as_array(a))
    if x.ndim < 2:
        raise np.linalg.LinAlgError(f"{x.ndim}-dimensional array given. Array must be at least "
                                    "two-dimensional")
    if x.shape[-1] != x.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    return x


def _column(x: Node, k: int) -> Node:
    return ops.getitem(x, (Ellipsis, slice(None), k))


def _row(x: Node, k: int) -> Node:
    return ops.getitem(x, (Ellipsis, k, slice(None)))


def _outer(u: Node, v: Node) -> Node:
    """(..., n) x (..., m) -> (..., n, m)."""
    return ops.reshape(u, u.shape + (1,)) * ops.reshape(v, v.shape[:-1] + (1, v.shape[-1]))


def _unit(n: int, k: int, dtype: str) -> Node:
    return ops.array_const(np.eye(n, dtype=np.dtype(dtype))[k])


def _pivot_swap(a: Node, k: int, others: list) -> tuple:
    """Rows k and p (the first largest |a[i, k]|, i >= k) exchanged in ``a`` and in each of
    ``others``, as one rank-one update each: (a, others, whether a swap happened)."""
    n = a.shape[-1]
    rows = ops.arange(n)
    score = ops.where(ops.ge(rows, k), ops.abs_(ops.stop_gradient(_column(a, k))), -1.0)
    p = argmax(score, axis=-1)
    hit = ops.cast(ops.eq(rows, ops.reshape(p, p.shape + (1,))), a.dtype)     # (..., n)
    move = _unit(n, k, a.dtype) - hit                                         # e_k - e_p

    def swap(m: Node) -> Node:
        picked = ops.reduce("sum", ops.reshape(hit, hit.shape + (1,)) * m, -2)   # row p
        return m + _outer(move, picked - _row(m, k))
    return swap(a), [swap(m) for m in others], ops.ne(p, k)


def _lu_pivots(a: Node) -> tuple:
    """The pivots (..., n) of LU with partial pivoting, and the parity of its row swaps (a
    bool, True when odd)."""
    n = a.shape[-1]
    pivots, odd = [], ops.full(a.shape[:-2], False, "bool")
    rows = ops.arange(n)
    for k in range(n):
        a, _, swapped = _pivot_swap(a, k, [])
        odd = ops.ne(odd, swapped)   # (xor)
        pivot = ops.getitem(a, (Ellipsis, k, k))
        pivots.append(pivot)
        if k == n - 1:
            break
        safe = ops.where(ops.eq(pivot, 0), 1.0, pivot)   # a zero pivot: its column is zero
        below = ops.where(ops.gt(rows, k), _column(a, k), 0.0)
        factors = below / ops.reshape(safe, safe.shape + (1,))
        a = a - _outer(factors, _row(a, k))
    return ops.stack(pivots, -1), odd


def det(a):
    x = _square_stack(a, "det")
    if x.shape[-1] == 0:
        return ops.full(x.shape[:-2], 1.0, x.dtype)
    pivots, odd = _lu_pivots(x)
    value = ops.reduce("prod", pivots, -1)
    return ops.where(odd, -value, value)


# NumPy's result type: ``sign, logdet = slogdet(a)`` and ``slogdet(a).logabsdet`` both work
SlogdetResult = collections.namedtuple("SlogdetResult", ["sign", "logabsdet"])


def slogdet(a):
    x = _square_stack(a, "slogdet")
    if x.shape[-1] == 0:
        return SlogdetResult(ops.full(x.shape[:-2], 1.0, x.dtype), ops.full(x.shape[:-2], 0.0, x.dtype))
    pivots, odd = _lu_pivots(x)
    sign = ops.reduce("prod", ops.sign(ops.stop_gradient(pivots)), -1)
    sign = ops.where(odd, -sign, sign)
    return SlogdetResult(sign, ops.reduce("sum", ops.log(ops.abs_(pivots)), -1))


def _gauss_jordan(a: Node, b: Node) -> Node:
    """a^-1 b for a (..., n, n) and b (..., n, m): each step swaps the pivot row in, scales
    it to a unit pivot and clears the pivot column in every other row, of a and b alike."""
    n = a.shape[-1]
    rows = ops.arange(n)
    for k in range(n):
        a, (b,), _ = _pivot_swap(a, k, [b])
        pivot = ops.getitem(a, (Ellipsis, k, k))
        scale = 1.0 / ops.reshape(pivot, pivot.shape + (1,))
        row_a, row_b = _row(a, k) * scale, _row(b, k) * scale
        factors = ops.where(ops.ne(rows, k), _column(a, k), 0.0)
        e_k = _unit(n, k, a.dtype)
        a = a - _outer(factors, row_a) + _outer(e_k, row_a - _row(a, k))
        b = b - _outer(factors, row_b) + _outer(e_k, row_b - _row(b, k))
    return b


def inv(a):
    x = _square_stack(a, "inv")
    eye = ops.array_const(np.eye(x.shape[-1], dtype=np.dtype(x.dtype)))
    return _gauss_jordan(x, ops.broadcast_to(eye, x.shape))


def solve(a, b):
    """NumPy 2's rule: ``b`` is one vector when it is 1-D, else a stack of matrices."""
    x = _square_stack(a, "solve")
    rhs = _as_array(b)
    x, rhs = _promote((x, rhs), float_only=True)
    vector = rhs.ndim == 1
    if vector:
        rhs = ops.reshape(rhs, rhs.shape + (1,))
    if rhs.shape[-2] != x.shape[-1]:
        raise ValueError(f"solve: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {rhs.shape[-2]} is different from {x.shape[-1]})")
    batch = ops.broadcast_shapes(x.shape[:-2], rhs.shape[:-2])
    x = ops.broadcast_to(x, batch + x.shape[-2:])
    rhs = ops.broadcast_to(rhs, batch + rhs.shape[-2:])
    out = _gauss_jordan(x, rhs)
    return ops.reshape(out, out.shape[:-1]) if vector else out


def cholesky(a, upper=False):
    """L with a = L L^T from the lower triangle (as NumPy's default): column j is
    (a[:, j] - L[:, :j] L[j, :j]) / L[j, j] below the diagonal, sqrt of it on it."""
    x = _square_stack(a, "cholesky")
    n = x.shape[-1]
    rows = ops.arange(n)
    columns = []
    for j in range(n):
        s = _column(x, j)
        if columns:
            done = ops.stack(columns, -1)                        # (..., n, j)
            s = s - ops.reshape(ops.matmul(done, ops.reshape(_row(done, j), done.shape[:-2] + (j, 1))),
                                s.shape)
        d = ops.sqrt(ops.getitem(s, (Ellipsis, j)))
        below = ops.where(ops.gt(rows, j), s / ops.reshape(d, d.shape + (1,)), 0.0)
        columns.append(below + ops.reshape(d, d.shape + (1,)) * _unit(n, j, x.dtype))
    lower = ops.stack(columns, -1) if columns else x
    if upper:   # U = L^T
        return ops.transpose(lower, tuple(range(lower.ndim - 2)) + (lower.ndim - 1, lower.ndim - 2))
    return lower


FUNCTIONS = {
    "det": (np.linalg.det, det), "slogdet": (np.linalg.slogdet, slogdet),
    "inv": (np.linalg.inv, inv), "solve": (np.linalg.solve, solve),
    "cholesky": (np.linalg.cholesky, cholesky),
}
ALIASES: dict = {}
# the np.linalg functions symgrad.numpy_api recognises by these names
LINALG_NAMES = ("det", "slogdet", "inv", "solve", "cholesky", "matrix_power", "norm")
