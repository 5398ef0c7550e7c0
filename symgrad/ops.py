"""The op table: every primitive's shape/dtype rule, NumPy reference, VJP and Python spelling,
with the builders the front end and the derivative rules call. Callers import from here.

The table is written in four modules that only look down (each imports the ones above it):

* ``symgrad.op_base``: shape/dtype rules shared by elementwise ops, the leaves (``arg``,
  ``const``, ``full``, ``array``, ``arange``), lifting Python values, NumPy's dtype promotion by
  explicit ``cast`` nodes, axis normalisation;
* ``symgrad.elementwise``: unary and binary elementwise ops, comparisons, ``where``,
  ``stop_gradient``;
* ``symgrad.shape_ops``: reductions, reshape/transpose/broadcasting, matmul;
* ``symgrad.index_ops``: basic indexing, concatenate/stack, gather/scatter.

Each primitive is one ``register(OpDef(...))`` entry. Derivative rules are written with the same
builders users' code is traced into (``mul``, ``cos``, ...), so they return IR nodes, higher
derivatives come for free, and ``None`` is a structural zero that autodiff skips. This module
also fills ``symgrad.ir.OPERATORS``, the builders behind ``Node``'s operators (``g * cos(x)``).
"""
from __future__ import annotations

from . import ir
from .ir import Node
from .op_base import (  # noqa: F401 - re-exported
    Operand, arange, array_const, broadcast_shapes, cast, const, full, lift, normalize_axes,
    result_dtype, to_float, zeros_like)
from .elementwise import (  # noqa: F401 - re-exported
    abs_, add, arccos, arcsin, arctan, arctan2, cos, cosh, div, eq, exp, expm1, ge, gt, le, log,
    log1p, logical_and, logical_not, logical_or, lt, maximum, minimum, mul, ne, neg, pow_, power,
    sign, sin, sinh, sqrt, stop_gradient, sub, tan, tanh, where)
from .shape_ops import (  # noqa: F401 - re-exported
    broadcast_to, dot, matmul, mean, reduce, reshape, transpose, unbroadcast)
from .index_ops import (  # noqa: F401 - re-exported
    _index_shape, _index_text, concatenate, getitem, index_add, normalize_index, scatter_add,
    setitem, stack, take)


def _iter_rows(x: Node):
    """Iterating a traced array gives its rows (so for loops, zip, enumerate, sum work)."""
    if x.ndim == 0:
        raise TypeError("iteration over a 0-d array")
    return iter([getitem(x, i) for i in range(x.shape[0])])


def _length(x: Node) -> int:
    if x.ndim == 0:
        raise TypeError("len() of unsized object")
    return x.shape[0]


# ``==`` stays identity (nodes are dict keys); use ``eq``/``ne`` for elementwise comparison.
ir.OPERATORS.update(add=add, sub=sub, mul=mul, truediv=div, pow=pow_, matmul=matmul, neg=neg,
                    abs=abs_, lt=lt, le=le, gt=gt, ge=ge, iter=_iter_rows, len=_length)
_missing = set(ir.OPERATOR_NAMES) - set(ir.OPERATORS)
if _missing:   # a Node operator without a builder would fail only when first used
    raise ImportError(f"symgrad.ops: no builder for Node operators {sorted(_missing)}")
