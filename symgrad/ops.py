"""The op table: every primitive's shape/dtype rule, NumPy reference, VJP and Python spelling,
with the builders the front end and the derivative rules call. Callers import from here.

The table is written in four modules that only look down (each imports the ones above it):

* ``symgrad.op_base``: shape/dtype rules shared by elementwise ops, the leaves (``arg``,
  ``const``, ``full``, ``array``, ``arange``), lifting Python values, NumPy's dtype promotion by
  explicit ``cast`` nodes, axis normalisation;
* ``symgrad.elementwise``: unary and binary elementwise ops, comparisons, ``where``,
  ``stop_gradient``;
* ``symgrad.shape_ops``: reductions, reshape/transpose/broadcasting, matmul;
* ``symgrad.index_ops``: basic indexing, concatenate/stack, gather/scatter;
* ``symgrad.ops_extra``: elementwise ops that are one C math function or rounding instruction
  (inverse hyperbolics, exp2/log2/log10, cbrt, erf/erfc, hypot, fmod, floor/ceil/rint/trunc);
* ``symgrad.custom_gradient``: the node of a ``@sg.custom_gradient`` call, its rule a sub-graph.

Each primitive is one ``register(OpDef(...))`` entry. Derivative rules are written with the same
builders users' code is traced into (``mul``, ``cos``, ...), so they return IR nodes, higher
derivatives come for free, and ``None`` is a structural zero that autodiff skips. This module
also fills ``symgrad.ir.OPERATORS``, the builders behind ``Node``'s operators (``g * cos(x)``).
"""
from __future__ import annotations

from . import (custom_gradient, elementwise, index_ops, ir, op_base, ops_extra,  # noqa: F401
               regions, shape_ops)
from .elementwise import NUMPY_FUNCTIONS  # noqa: F401 - re-exported
from .elementwise import abs_, add, div, ge, gt, le, lt, mul, neg, pow_, sub
from .index_ops import _index_shape, _index_text  # noqa: F401 - re-exported (back ends)
from .index_ops import getitem
from .ir import Node
from .shape_ops import matmul


def _builders(module) -> dict:
    """The public functions a module defines (its builders): re-exported here, so a new op's
    builder needs no line in this file. A module whose builders are made by another's factory
    (``ops_extra``'s, by ``elementwise._u``) names them in ``__all__``."""
    if hasattr(module, "__all__"):
        return {name: getattr(module, name) for name in module.__all__}
    return {name: value for name, value in vars(module).items()
            if not name.startswith("_") and callable(value) and not isinstance(value, type)
            and getattr(value, "__module__", None) == module.__name__}


for _module in (op_base, elementwise, shape_ops, index_ops, ops_extra):
    globals().update(_builders(_module))


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
