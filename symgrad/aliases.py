"""Which memory a traced array may share: the front end's alias tracking.

NumPy arrays are mutable and share memory through views (slices, ``reshape``, ``.T``,
``np.asarray``, iterating over rows) and through plain assignment (``b = a``). The tracer
builds a functional IR, so an in-place write (``a[i] = v``, ``a += v`` on an array) becomes a
new value bound to one name. That is NumPy's meaning only when no other live name, and no
memory the function does not own (an argument, a global, a closure cell, a default value),
can see the write. So every array-valued variable carries the set of :class:`Buffer` s it may
live in, and a write to memory that is shared or not ours is refused with the line.

The sets are *may* information: a view of a fresh array is in that array's buffer, a value
chosen by a data-dependent ``if`` is in the buffers of both sides, a list holds the buffers of
everything put in it.

A 0-d value is one of two kinds, and the kind belongs to the *binding*, not to the IR node
(hash-consing gives ``np.where(c, a, b)`` and ``np.minimum(a, b)``-like scalars one node kind
only by accident). A NumPy scalar (what ufuncs, arithmetic, reductions and ``x[0]`` of a 1-d
array return) and a Python number hold no buffer: they are immutable, and ``s += 1`` rebinds.
A 0-d *ndarray* (what ``np.where``, ``np.select``, ``np.array``, ``np.zeros(())``,
``a.copy()`` of a 0-d array, ``x[0, ...]`` return) is mutable: it holds a buffer like any
array, and ``v2 = v1; v2 += 1`` changes ``v1`` too. Where the kind is not known (a
data-dependent ``if`` choosing between both kinds, ``np.reshape`` of a traced scalar, which is a
0-d array for a Python number and a scalar for a NumPy scalar) the buffer says why
(:attr:`Buffer.maybe_scalar`), and an in-place write is allowed only where both readings give
the same numbers.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

import numpy as np

from .ir import Node

NO_BUFFERS: frozenset = frozenset()


class Buffer:
    """One block of memory as the traced program sees it.

    ``owner`` is None for memory the function allocated; else a phrase naming whose memory
    it is ("argument 'x'", "global 'TABLE'"), used in the error that refuses a write to it.
    Buffers compare by identity.
    ``maybe_scalar`` is None for memory of an array; for a 0-d value that may instead be an
    immutable scalar, a phrase saying why, used in the error that refuses an in-place write
    whose result would depend on which it is.
    """
    __slots__ = ("owner", "maybe_scalar")

    def __init__(self, owner: str | None = None, maybe_scalar: str | None = None):
        self.owner = owner
        self.maybe_scalar = maybe_scalar


class ArrayStandIn:
    """A tracer value that stands for an array without being a node (a zero-padded ``x[:i]``,
    ``symgrad.padded_slices``): it lives in buffers, a view of what it was sliced from."""
    __slots__ = ()


def holds_array(value) -> bool:
    """Whether ``value`` is, or contains, an array of at least one dimension or a constant 0-d
    ndarray (iterative). A traced 0-d value's kind is its binding's (see the module doc)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (np.ndarray, ArrayStandIn)) or (isinstance(v, Node) and v.ndim):
            return True
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return False


def holds_data(value) -> bool:
    """Whether ``value`` is, or contains, a traced value or a NumPy array (iterative)."""
    return any(isinstance(v, (Node, np.ndarray, ArrayStandIn)) for v in leaves(value))


def is_array(value) -> bool:
    """An array NumPy would update in place (``a += 1``), not a scalar it would rebind (a
    traced 0-d value is an array when its binding holds buffers: see the module doc)."""
    return isinstance(value, np.ndarray) or (isinstance(value, Node) and value.ndim > 0)


def row_buffers(iterable, buffers: frozenset) -> frozenset:
    """Where the items of ``iterable`` (living in ``buffers``) live when iterated or unpacked:
    rows of an array are views of it, but the items of a 1-d array are NumPy scalars."""
    return NO_BUFFERS if isinstance(iterable, Node) and iterable.ndim == 1 else buffers


# Where the items of ``enumerate(a)`` and ``zip(a, b, ...)`` live, from where the items of each
# argument live: a tuple per item, so that unpacking gives each target its own (the count of
# enumerate is a Python int).
ZIPPED_ITEMS = {enumerate: lambda parts: (NO_BUFFERS, parts[0]), zip: tuple}


@dataclass(frozen=True)
class RowView:
    """A loop variable bound to row ``index`` of the array named ``base`` (``for row in A``,
    ``for i, row in enumerate(A)``): NumPy's row is a view, so a write into it writes into
    ``A``. Valid while the variable still holds ``value`` and ``A`` still names the memory
    ``buffers`` (rebinding either ends it)."""
    base: str
    index: object        # a Python int (unrolled) or the loop index node (a loop region)
    value: object
    buffers: frozenset


def zero_d_buffers(maybe_scalar: str | None = None) -> frozenset:
    """The buffers of a 0-d ndarray just made (``np.where`` of scalars, ``a.copy()``)."""
    return frozenset((Buffer(None, maybe_scalar),))


def maybe_scalar_reasons(buffers: frozenset) -> list:
    """Why a 0-d value living in ``buffers`` may be a scalar instead (sorted; empty if not)."""
    return sorted({b.maybe_scalar for b in buffers if b.maybe_scalar})


def fresh_buffers(value) -> frozenset:
    """The buffers of a value just allocated by the function."""
    return frozenset((Buffer(),)) if holds_array(value) else NO_BUFFERS


def foreign_buffers(owner: str, value) -> frozenset:
    """The buffers of a value the function does not own (argument, global, closure)."""
    return frozenset((Buffer(owner),)) if holds_array(value) else NO_BUFFERS


def shared_with_arguments(result, args) -> list:
    """The indices of ``args`` whose NumPy memory ``result`` may share (an eager NumPy call
    on constants can return a view of one of them, e.g. ``np.ravel(TABLE)``)."""
    results = [v for v in leaves(result) if isinstance(v, np.ndarray)]
    if not results:
        return []
    out = []
    for i, arg in enumerate(args):
        arrays = [v for v in leaves(arg) if isinstance(v, np.ndarray)]
        if any(np.may_share_memory(r, a) for r in results for a in arrays):
            out.append(i)
    return out


def leaves(value):
    """The items of ``value`` below its lists, tuples and dicts (iterative)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        else:
            yield v


def kind_conflict(current, result, buffers: frozenset) -> str | None:
    """What NumPy's ``current <op>= value`` (giving ``result``) would do to a 0-d value
    living in ``buffers`` that may be a 0-d array or a scalar, where the two readings give
    different dtypes; None where they agree (or its kind is known)."""
    reasons = maybe_scalar_reasons(buffers)
    if not reasons or not isinstance(current, Node) or current.ndim:
        return None
    result_dtype = _dtype_of(result)
    if result_dtype == np.dtype(current.dtype):
        return None
    return (f"a 0-d array (NumPy keeps its dtype {current.dtype}) or a scalar (NumPy rebinds it "
            f"as {result_dtype}): {reasons[0]}")


def _dtype_of(value) -> np.dtype:
    if isinstance(value, (Node, np.ndarray, np.generic)):
        return np.dtype(value.dtype)
    return np.asarray(value).dtype


def in_place_result(current, result):
    """``result`` of ``current <op>= value`` given NumPy's in-place rules: the array keeps its
    shape and dtype (a result that would grow the array, or need an unsafe cast, is an error
    in NumPy too)."""
    from . import ops
    shape, dtype = tuple(current.shape), np.dtype(current.dtype)
    if tuple(np.shape(result)) != shape:
        raise ValueError(f"non-broadcastable output operand with shape {shape} doesn't match "
                         f"the broadcast shape {tuple(np.shape(result))}")
    result_dtype = _dtype_of(result)
    if result_dtype == dtype:
        return result
    if not np.can_cast(result_dtype, dtype, "same_kind"):
        raise TypeError(f"Cannot cast the in-place result from {result_dtype} to the array's "
                        f"dtype {dtype} with casting rule 'same_kind'")
    if isinstance(result, Node):
        return ops.cast(result, dtype.name)
    return np.asarray(result).astype(dtype)


def rebound_next(frame) -> tuple:
    """Names of ``frame`` that an in-place write in its running statement may leave stale:
    the statement after it in the same block rebinds them (``x2 = s2[i]``, ADBench's LSTM,
    after ``s2[i], s2[i + 1] = ...`` while ``x2`` is a view of another row of ``s2``), so no
    one reads them in between. Only when nothing in between can: the rebinding value calls
    nothing (a nested function reading the old name late) and mentions none of them, and
    the writing statement's own targets do not mention them either."""
    stmt, after = frame.stmt, frame.next_stmt
    if not isinstance(after, ast.Assign) or not isinstance(stmt, (ast.Assign, ast.AugAssign)):
        return ()
    names = {t.id for t in after.targets if isinstance(t, ast.Name)}
    value = list(ast.walk(after.value))
    if any(isinstance(n, (ast.Call, ast.Lambda, ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom))
           for n in value):
        return ()
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
    mentioned = {n.id for n in value + [m for t in targets for m in ast.walk(t)] if isinstance(n, ast.Name)}
    return tuple(sorted(names - mentioned))
