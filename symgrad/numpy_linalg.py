"""``np.linalg``'s factorisations as loop regions: ``det``, ``slogdet`` (LU with partial
pivoting), ``inv``, ``solve`` (Gauss-Jordan with partial pivoting), ``cholesky`` (column by
column). Each is one ``loop`` node (``symgrad.regions.scan``) over the pivot index k whose
carries are the matrix being reduced (for LU also the parity of the row exchanges and the
determinant so far); its body is a few whole-matrix array operations on the (..., n, n)
stack, vectorised over rows and columns and batched over the leading axes, so the IR, the
compile time and the generated source do not depend on n, while the work is NumPy's O(n^3).
Row k is picked by a select against the loop index and a sum (no data-dependent addressing
in any back end; a gather instead made more, not fewer, CPU kernels); derivatives of every
order come from differentiating the loop (``symgrad.region_autodiff`` stores each step's
matrix, n^3 values per matrix; the pivot choice is an integer: no derivative).

Pivoting as LAPACK: the first entry of largest magnitude in the column; a NaN wins (as in
``np.argmax``), so a NaN entry makes every result NaN (NumPy's OpenBLAS skips NaN pivots and
leaves some entries finite: a NaN here is never hidden where NumPy shows one). Rows are
exchanged by selects: a swapped row is copied bitwise.

``det`` is the signed product of the pivots, accumulated in the loop (so its derivative never
divides by a pivot). NumPy's is sign * exp(sum(log |pivot|)), a few ulps off that product
(det(diag(3, 3, 3, 3)) = 81.00000000000003): values agree to rounding, not bitwise. For a
1x1, 2x2 or 3x3 matrix ``det`` is the cofactor expansion instead: a handful of products, as
close to NumPy's as LAPACK's own product (on random 2x2 matrices ad - bc is NumPy's bitwise
48% of the time, LU's product 62%), and its derivative, the adjugate, is right at singular
matrices too. ``slogdet`` always factorises (its point is a range where det over/underflows).

Singular input: ``det`` is 0 and ``slogdet`` (0, -inf), as NumPy (a zero pivot is divided as
1, its column being zero already). det's derivative there is the adjugate for every n: for
n <= 3 by the closed forms; through LU, an exact zero pivot before the last step is deferred
(its all-zero column exchanged with the last one, :func:`_defer_zero_column`), so a matrix of
rank n - 1 has its zero pivot last, whose derivative is exact, and one of rank <= n - 2 two
zero pivots (derivative 0). ``inv`` / ``solve`` with an exactly zero pivot and ``cholesky``
of a matrix that is not positive definite raise NumPy's LinAlgError (with NumPy's message, at
the user's line): the loop carries the condition, reported as an error guard
(``symgrad.guards.report``) that the API checks after the call. As LAPACK, only an exact zero
pivot is singular, never a small one (NumPy accepts a Hilbert matrix of n = 11, so do these);
a NaN entry gives NaN rather than an error (as NumPy's cholesky; NumPy's inv may raise for a
NaN where its pivoting skipped it).
"""
from __future__ import annotations

import collections

import numpy as np

from . import guards, ops, regions
from .ir import Node
from .numpy_base import _as_array
from .numpy_layout import diagonal
from .numpy_sorting import argmax
from .op_base import _promote


def _square_stack(a, name: str) -> Node:
    x = ops.to_float(_as_array(a))
    if x.ndim < 2:
        raise np.linalg.LinAlgError(f"{x.ndim}-dimensional array given. Array must be at least "
                                    "two-dimensional")
    if x.shape[-1] != x.shape[-2]:
        raise np.linalg.LinAlgError("Last 2 dimensions of the array must be square")
    return x


# ----------------------------------------------------------------------------------------------
# Pieces of a pivot step. ``k`` is the loop index (an int64 node); a row or column is picked by
# a select against it and a sum over the axis (adding zeros is exact: the pick is bitwise).

def _last(x: Node) -> Node:
    """x[..., None]."""
    return ops.reshape(x, x.shape + (1,))


def _pick(x: Node, mask: Node) -> Node:
    """The entry of the last axis of ``x`` where ``mask`` (broadcast against it) is True."""
    return ops.reduce("sum", ops.where(mask, x, 0.0), -1)


def _pick_row(m: Node, mask: Node) -> Node:
    """Row of (..., n, c) ``m`` where the (..., n) ``mask`` is True: (..., c)."""
    return ops.reduce("sum", ops.where(_last(mask), m, 0.0), -2)


def _outer(u: Node, v: Node) -> Node:
    """(..., n) x (..., m) -> (..., n, m)."""
    return _last(u) * ops.reshape(v, v.shape[:-1] + (1, v.shape[-1]))


class _Pivot:
    """Step k's partial pivoting of the (..., n, n) matrix ``a``: p, the first row i >= k of
    largest |a[i, k]|; ``pivot`` = a[p, k]; ``column``: column k after rows k and p are
    exchanged; :meth:`exchange` swaps rows k and p of a matrix with n rows."""

    def __init__(self, a: Node, k: Node, column: Node | None = None):
        n = a.shape[-1]
        self.rows = ops.arange(n)
        self.at_k = ops.eq(self.rows, k)                                  # (n,)
        if column is None:
            column = _pick(a, self.at_k)                                  # a[..., :, k]
        score = ops.where(ops.ge(self.rows, k), ops.abs_(ops.stop_gradient(column)), -1.0)
        self.p = argmax(score, axis=-1)                                   # (...,)
        self.at_p = ops.eq(self.rows, _last(self.p))                      # (..., n)
        self.pivot = _pick(column, self.at_p)                             # a[..., p, k]
        entry_k = _pick(column, self.at_k)                                # a[..., k, k]
        self.column = ops.where(self.at_k, _last(self.pivot),
                                ops.where(self.at_p, _last(entry_k), column))

    def exchange(self, m: Node) -> tuple:
        """(m with rows k and p exchanged, its new row k)."""
        row_k, row_p = _pick_row(m, self.at_k), _pick_row(m, self.at_p)
        swapped = ops.where(_last(self.at_k), _last_row(row_p),
                            ops.where(_last(self.at_p), _last_row(row_k), m))
        return swapped, row_p

    def swapped(self, k: Node) -> Node:
        """Whether rows were exchanged (bool, (...,))."""
        return ops.ne(self.p, k)


def _last_row(row: Node) -> Node:
    """(..., c) -> (..., 1, c), to broadcast over rows."""
    return ops.reshape(row, row.shape[:-1] + (1, row.shape[-1]))


def _loop(n: int, carries: list, step, names: tuple) -> list:
    """The carries after ``step(k, *carries)`` for k = 0, ..., n-1, as one loop region."""
    index = regions.placeholder("int64")
    holders = [regions.placeholder(c.dtype, c.shape) for c in carries]
    new = step(index, *holders)
    finals, _ = regions.scan(n, index, holders, carries, [], [], new, [], names=("k",) + names)
    return finals


# ----------------------------------------------------------------------------------------------
# LU: det, slogdet

def _defer_zero_column(k, a):
    """Exchange columns k and n - 1 of ``a`` where column k is zero in rows >= k (an exact
    zero pivot before the last step). det is then 0, but its derivative, the adjugate, is
    not: det is linear in that column, so d det = det(a with the column replaced by its
    tangent), which needs the factorisation of the *other* columns. Deferred to the end, the
    zero pivot is the last one, whose derivative (a 1x1 Schur complement of nonzero pivots)
    is exact; at rank <= n - 2 two zero pivots make every term of the derivative 0, as the
    adjugate is. The exchange is a branch taken only when some matrix of the stack needs it:
    a nonsingular matrix pays for a test per step (exchanging by selects instead cost every
    matrix a pass over it: about 50% more time per call of the gradient at n = 32).
    Returns (a, its column k, whether the columns were exchanged (...,))."""
    n = a.shape[-1]
    cols = ops.arange(n)
    at_k = ops.eq(cols, k)
    column = _pick(a, at_k)                                               # a[..., :, k]
    below = ops.where(ops.ge(cols, k), ops.abs_(ops.stop_gradient(column)), 0.0)
    deferred = ops.logical_and(ops.eq(ops.reduce("max", below, -1), 0), ops.lt(k, n - 1))
    if n == 1:
        return a, column, deferred
    last = ops.getitem(a, (Ellipsis, slice(None), n - 1))                 # a[..., :, n - 1]
    to_k = ops.logical_and(_last(_last(deferred)), at_k)                  # (..., 1, n)
    to_last = ops.logical_and(_last(_last(deferred)), ops.eq(cols, n - 1))
    exchanged = [ops.where(to_k, _last(last), ops.where(to_last, _last(column), a)),
                 ops.where(_last(deferred), last, column)]
    any_deferred = deferred if deferred.ndim == 0 else ops.reduce("max", deferred)
    a, column = regions.cond(any_deferred, exchanged, [a, column], outer={column, deferred})
    return a, column, deferred


def _lu_step(k, a, odd, det):
    """Defer an all-zero column (:func:`_defer_zero_column`), exchange the pivot row in, then
    clear column k below the diagonal; ``det`` is the signed product of the pivots so far (a
    product in the loop: the derivative of a ``prod`` reduction divides by each factor, nan
    at a zero pivot)."""
    a, column, deferred = _defer_zero_column(k, a)
    piv = _Pivot(a, k, column)
    a, row_k = piv.exchange(a)
    safe = ops.where(ops.eq(piv.pivot, 0), 1.0, piv.pivot)   # a zero pivot: its column is zero
    factors = ops.where(ops.gt(piv.rows, k), piv.column, 0.0) / _last(safe)
    swapped = ops.ne(piv.swapped(k), deferred)               # each exchange flips det's sign
    return [a - _outer(factors, row_k), ops.ne(odd, swapped),
            ops.where(swapped, -det, det) * piv.pivot]


def _lu(a: Node) -> tuple:
    """LU with partial pivoting: U's diagonal (..., n) (the pivots: row k is final after step
    k), the parity of the row exchanges (a bool, True when odd) and the determinant."""
    batch = a.shape[:-2]
    u, odd, det = _loop(a.shape[-1], [a, ops.full(batch, False, "bool"), ops.full(batch, 1.0, a.dtype)],
                        _lu_step, ("lu", "odd", "det"))
    return diagonal(u, 0, -2, -1), odd, det


# det of up to this size is its cofactor expansion (3x3: 9 products, 5 sums)
CLOSED_FORM_MAX = 3


def _closed_form_det(x: Node) -> Node:
    """The cofactor expansion of a 1x1, 2x2 or 3x3 determinant (along the first row)."""
    n = x.shape[-1]

    def at(i, j):
        return ops.getitem(x, (Ellipsis, i, j))
    if n == 1:
        return at(0, 0)
    if n == 2:
        return at(0, 0) * at(1, 1) - at(0, 1) * at(1, 0)
    minors = [at(1, 1) * at(2, 2) - at(1, 2) * at(2, 1),
              at(1, 0) * at(2, 2) - at(1, 2) * at(2, 0),
              at(1, 0) * at(2, 1) - at(1, 1) * at(2, 0)]
    return at(0, 0) * minors[0] - at(0, 1) * minors[1] + at(0, 2) * minors[2]


def det(a):
    x = _square_stack(a, "det")
    if x.shape[-1] == 0:
        return ops.full(x.shape[:-2], 1.0, x.dtype)
    if x.shape[-1] <= CLOSED_FORM_MAX:
        return _closed_form_det(x)
    return _lu(x)[2]


# NumPy's result type: ``sign, logdet = slogdet(a)`` and ``slogdet(a).logabsdet`` both work
SlogdetResult = collections.namedtuple("SlogdetResult", ["sign", "logabsdet"])


def slogdet(a):
    """Always by LU (not the closed forms): the log of |det| stays finite where det itself
    would overflow or underflow."""
    x = _square_stack(a, "slogdet")
    if x.shape[-1] == 0:
        return SlogdetResult(ops.full(x.shape[:-2], 1.0, x.dtype), ops.full(x.shape[:-2], 0.0, x.dtype))
    pivots, odd, _ = _lu(x)
    pivots_sign = ops.stop_gradient(pivots)   # as NumPy: a NaN pivot counts as positive
    pivots_sign = ops.where(ops.lt(pivots_sign, 0), -1.0, ops.where(ops.eq(pivots_sign, 0), 0.0, 1.0))
    sign = ops.reduce("prod", ops.cast(pivots_sign, x.dtype), -1)
    sign = ops.where(odd, -sign, sign)
    return SlogdetResult(sign, ops.reduce("sum", ops.log(ops.abs_(pivots)), -1))


# ----------------------------------------------------------------------------------------------
# Gauss-Jordan: inv, solve

def _gauss_jordan_step(k, a, b, singular):
    """Exchange the pivot row in (of a and b alike), scale it to a unit pivot and clear
    column k in every other row; ``singular``: a pivot so far was exactly zero (LAPACK's
    getrf test: only an exact zero, never a small one, makes NumPy raise)."""
    piv = _Pivot(a, k)
    a, row_a = piv.exchange(a)
    b, row_b = piv.exchange(b)
    pivot = _last(piv.pivot)
    row_a, row_b = row_a / pivot, row_b / pivot
    factors = ops.where(ops.ne(piv.rows, k), piv.column, 0.0)
    on_k = _last(piv.at_k)
    return [ops.where(on_k, _last_row(row_a), a - _outer(factors, row_a)),
            ops.where(on_k, _last_row(row_b), b - _outer(factors, row_b)),
            ops.logical_or(singular, ops.eq(ops.stop_gradient(piv.pivot), 0))]


def _gauss_jordan(a: Node, b: Node) -> Node:
    """a^-1 b for a (..., n, n) and b (..., n, m); an exactly zero pivot makes the call raise
    NumPy's LinAlgError (an error guard, ``symgrad.guards``)."""
    if a.shape[-1] == 0:
        return b
    no = ops.full(a.shape[:-2], False, "bool")
    _, out, singular = _loop(a.shape[-1], [a, b, no], _gauss_jordan_step, ("a", "b", "singular"))
    guards.report("singular", singular)
    return out


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
        rhs = _last(rhs)
    if rhs.shape[-2] != x.shape[-1]:
        raise ValueError(f"solve: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {rhs.shape[-2]} is different from {x.shape[-1]})")
    batch = ops.broadcast_shapes(x.shape[:-2], rhs.shape[:-2])
    x = ops.broadcast_to(x, batch + x.shape[-2:])
    rhs = ops.broadcast_to(rhs, batch + rhs.shape[-2:])
    out = _gauss_jordan(x, rhs)
    return ops.reshape(out, out.shape[:-1]) if vector else out


# ----------------------------------------------------------------------------------------------
# Cholesky

def _cholesky_step(x: Node):
    """Column j of L (a = L L^T, from a's lower triangle as NumPy's default): with columns
    < j done (and the rest still zero), s = a[:, j] - L L[j, :]; L[j, j] = sqrt(s[j]) and
    L[i, j] = s[i] / L[j, j] below it. ``failed``: some s[j] so far was <= 0 (not positive
    definite; a NaN s[j] is not, as NumPy's OpenBLAS potrf: it gives NaN, not an error)."""
    rows = ops.arange(x.shape[-1])

    def step(j, lower, failed):
        at_j = ops.eq(rows, j)
        done = _pick_row(lower, at_j)                                       # L[j, :j], zeros on
        s = _pick(x, at_j) - ops.reduce("sum", lower * _last_row(done), -1)
        square = _pick(s, at_j)
        d = _last(ops.sqrt(square))
        column = ops.where(ops.gt(rows, j), s / d, ops.where(at_j, d, 0.0))
        return [ops.where(at_j, _last(column), lower),
                ops.logical_or(failed, ops.le(ops.stop_gradient(square), 0))]
    return step


def cholesky(a, upper=False):
    """A matrix that is not positive definite makes the call raise NumPy's LinAlgError (an
    error guard, ``symgrad.guards``)."""
    x = _square_stack(a, "cholesky")
    if x.shape[-1] == 0:
        return x
    lower, failed = _loop(x.shape[-1], [ops.zeros_like(x), ops.full(x.shape[:-2], False, "bool")],
                          _cholesky_step(x), ("L", "failed"))
    guards.report("not positive definite", failed)
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
