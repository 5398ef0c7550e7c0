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
everything put in it. A scalar (a 0-d value, a Python number) holds no buffer: NumPy scalars
are immutable, and ``s += 1`` on one rebinds.
"""
from __future__ import annotations

import numpy as np

from .ir import Node

NO_BUFFERS: frozenset = frozenset()


class Buffer:
    """One block of memory as the traced program sees it.

    ``owner`` is None for memory the function allocated; else a phrase naming whose memory
    it is ("argument 'x'", "global 'TABLE'"), used in the error that refuses a write to it.
    Buffers compare by identity.
    """
    __slots__ = ("owner",)

    def __init__(self, owner: str | None = None):
        self.owner = owner


def holds_array(value) -> bool:
    """Whether ``value`` is, or contains, an array of at least one dimension (iterative)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (Node, np.ndarray)):
            if v.ndim:
                return True
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
    return False


def is_array(value) -> bool:
    """An array NumPy would update in place (``a += 1``), not a scalar it would rebind."""
    return isinstance(value, (Node, np.ndarray)) and value.ndim > 0


def fresh_buffers(value) -> frozenset:
    """The buffers of a value just allocated by the function."""
    return frozenset((Buffer(),)) if holds_array(value) else NO_BUFFERS


def foreign_buffers(owner: str, value) -> frozenset:
    """The buffers of a value the function does not own (argument, global, closure)."""
    return frozenset((Buffer(owner),)) if holds_array(value) else NO_BUFFERS


def shared_with_arguments(result, args) -> list:
    """The indices of ``args`` whose NumPy memory ``result`` may share (an eager NumPy call
    on constants can return a view of one of them, e.g. ``np.ravel(TABLE)``)."""
    results = [v for v in _leaves(result) if isinstance(v, np.ndarray)]
    if not results:
        return []
    out = []
    for i, arg in enumerate(args):
        arrays = [v for v in _leaves(arg) if isinstance(v, np.ndarray)]
        if any(np.may_share_memory(r, a) for r in results for a in arrays):
            out.append(i)
    return out


def _leaves(value):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, dict):
            stack.extend(v.values())
        else:
            yield v


def in_place_result(current, result):
    """``result`` of ``current <op>= value`` given NumPy's in-place rules: the array keeps its
    shape and dtype (a result that would grow the array, or need an unsafe cast, is an error
    in NumPy too)."""
    from . import ops
    shape, dtype = tuple(current.shape), np.dtype(current.dtype)
    if tuple(np.shape(result)) != shape:
        raise ValueError(f"non-broadcastable output operand with shape {shape} doesn't match "
                         f"the broadcast shape {tuple(np.shape(result))}")
    result_dtype = np.dtype(result.dtype) if isinstance(result, (Node, np.ndarray, np.generic)) \
        else np.asarray(result).dtype
    if result_dtype == dtype:
        return result
    if not np.can_cast(result_dtype, dtype, "same_kind"):
        raise TypeError(f"Cannot cast the in-place result from {result_dtype} to the array's "
                        f"dtype {dtype} with casting rule 'same_kind'")
    if isinstance(result, Node):
        return ops.cast(result, dtype.name)
    return np.asarray(result).astype(dtype)
