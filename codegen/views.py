"""Strided views over buffers, all in concrete numbers: a :class:`View` is a buffer, an offset,
a shape and strides (a view op, a broadcast, a slice of an output are only that), plus the view
algebra the CPU back end needs: broadcasting to a loop shape (``View.align``), basic indexing
(:func:`index_view`) and merging loop axes every view walks as one (:func:`merge_axes`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from symgrad.ir import NewAxis, Slice

from .buffers import contiguous_strides


@dataclass(frozen=True)
class View:
    """Elements ``buf[offset + sum(i_k * strides_k)]`` for an index of ``shape``."""
    buf: int
    offset: int
    shape: tuple
    strides: tuple

    def align(self, loop_shape) -> "View":
        """The same elements seen from a loop over ``loop_shape`` (NumPy broadcasting)."""
        lead = len(loop_shape) - len(self.shape)
        strides = [0] * lead
        for d, s, e in zip(self.shape, self.strides, loop_shape[lead:]):
            strides.append(0 if d == 1 and e != 1 else s)
        return View(self.buf, self.offset, tuple(loop_shape), tuple(strides))

    def is_contiguous(self) -> bool:
        return all(s == c for d, s, c in zip(self.shape, self.strides,
                                             contiguous_strides(self.shape)) if d > 1)


def merge_axes(shape, views):
    """Collapse adjacent loop axes that every view walks as one axis (``s[j] == s[j+1] *
    n[j+1]`` for all of them, e.g. everything contiguous), and axes of extent 1. Fewer, longer
    loops vectorise better and compile faster; the result depends on sizes only through
    extent-1 axes, which are rare."""
    shape = list(shape)
    strides = [list(v.strides) for v in views]
    j = len(shape) - 2
    while j >= 0:
        outer, inner = shape[j], shape[j + 1]
        if inner == 1 or outer == 1 or all(s[j] == s[j + 1] * inner for s in strides):
            for s in strides:
                s[j] = s[j] if inner == 1 and outer != 1 else s[j + 1]
                del s[j + 1]
            shape[j] = outer * inner
            del shape[j + 1]
        j -= 1
    shape = tuple(shape)
    return shape, [View(v.buf, v.offset, shape, tuple(s)) for v, s in zip(views, strides)]


def keepdims_strides(shape, axes) -> tuple:
    return contiguous_strides(tuple(1 if i in axes else d for i, d in enumerate(shape)))


def index_view(v: View, index) -> View:
    """A basic-indexing view (the normalised index of ``symgrad.ops.getitem``)."""
    offset, shape, strides, axis = v.offset, [], [], 0
    for item in index:
        if isinstance(item, NewAxis):
            shape.append(1)
            strides.append(0)
            continue
        if isinstance(item, Slice):
            start, stop, step = item.start, item.stop, item.step
            shape.append(len(range(start, stop, step)))
            strides.append(v.strides[axis] * step)
            offset += start * v.strides[axis] if shape[-1] else 0
        else:
            offset += item * v.strides[axis]
        axis += 1
    shape.extend(v.shape[axis:])
    strides.extend(v.strides[axis:])
    return View(v.buf, offset, tuple(shape), tuple(strides))


# Work bound for NumPy's exact overlap test (a bounded Diophantine problem): views it cannot
# decide within it count as overlapping, which only costs a stage.
OVERLAP_WORK = 10_000


def views_overlap(a: View, b: View) -> bool:
    """Do two views of one buffer share an element? Exact (NumPy's ``shares_memory`` on
    stand-in arrays with one byte per element, never touched), conservative only where the
    test would need more than OVERLAP_WORK steps."""
    if a.buf != b.buf:
        return False
    spans = []
    for v in (a, b):
        if any(e == 0 for e in v.shape):
            return False
        lo = v.offset + sum(s * (e - 1) for s, e in zip(v.strides, v.shape) if s < 0)
        hi = v.offset + sum(s * (e - 1) for s, e in zip(v.strides, v.shape) if s > 0)
        spans.append((lo, hi))
    (alo, ahi), (blo, bhi) = spans
    if ahi < blo or bhi < alo:
        return False
    base = np.empty(max(ahi, bhi) + 1, dtype=np.uint8)   # uncommitted pages: never written

    def stand_in(v):
        return np.lib.stride_tricks.as_strided(base[v.offset:], v.shape, v.strides)
    try:
        return bool(np.shares_memory(stand_in(a), stand_in(b), max_work=OVERLAP_WORK))
    except np.exceptions.TooHardError:
        return True
