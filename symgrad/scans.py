"""Prefix scans built from existing primitives: the inclusive scan behind ``cumsum`` /
``cumprod`` / the ufunc ``accumulate`` methods, and ``products_of_others``, the derivative of
``prod``.

A Hillis-Steele scan is ceil(log2 n) elementwise passes of ``y[i] = y[i] (op) y[i - s]``: only
concatenate, slicing and the combining op, so every back end lowers it and every derivative
order comes from the op table. For products that means multiplications only: the derivative of
a product is right with zeros in the input, where a ``prod / x`` rule divides 0 by 0.
"""
from __future__ import annotations

import math

from .elementwise import mul
from .index_ops import concatenate, getitem
from .ir import Node
from .op_base import full
from .shape_ops import reshape, transpose


def _along(ndim: int, axis: int, s: slice) -> tuple:
    return tuple(s if i == axis else slice(None) for i in range(ndim))


def _shifted(y: Node, axis: int, s: int, identity) -> Node:
    """y moved s places along ``axis``, the first s entries ``identity``."""
    pad_shape = tuple(s if i == axis else d for i, d in enumerate(y.shape))
    head = full(pad_shape, identity, y.dtype)
    return concatenate([head, getitem(y, _along(y.ndim, axis, slice(0, y.shape[axis] - s)))], axis)


def sum_identity(dtype: str):
    """The additive identity: -0.0 for floats (-0 + x is x for every x; +0 would turn a
    leading -0 into +0), 0 for integers."""
    return -0.0 if dtype.startswith("float") else 0


def inclusive_scan(y: Node, ax: int, combine, identity) -> Node:
    """y[i] = y[0] (combine) ... (combine) y[i] along ``ax``: ceil(log2 n) passes of
    y[i] = y[i] (combine) y[i - s], the first s entries combined with ``identity``."""
    n = y.shape[ax] if y.ndim else 1
    for step in range(math.ceil(math.log2(n)) if n > 1 else 0):
        y = combine(y, _shifted(y, ax, 1 << step, identity))
    return y


def _exclusive_products(y: Node, axis: int) -> Node:
    """out[i] = y[0] * ... * y[i - 1] along ``axis`` (1 for i = 0)."""
    return inclusive_scan(_shifted(y, axis, 1, 1), axis, mul, 1)


def products_of_others(x: Node, axes: tuple) -> Node:
    """out[i] = the product of the entries of ``x`` along ``axes`` (sorted) but x[i]: the
    derivative of ``prod(x, axes)``. The reduced axes are moved last and flattened into one;
    along it the product of the entries before i times the product of those after i."""
    if x.size == 0:
        return full(x.shape, 1, x.dtype)
    kept = tuple(a for a in range(x.ndim) if a not in axes)
    order = kept + tuple(axes)
    moved = transpose(x, order)
    n = math.prod(x.shape[a] for a in axes)
    rows = reshape(moved, moved.shape[:len(kept)] + (n,))
    last = rows.ndim - 1
    reverse = _along(rows.ndim, last, slice(None, None, -1))
    before = _exclusive_products(rows, last)
    after = getitem(_exclusive_products(getitem(rows, reverse), last), reverse)
    others = reshape(mul(before, after), moved.shape)
    return transpose(others, tuple(order.index(a) for a in range(x.ndim)))
