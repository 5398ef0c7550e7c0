"""Attributes and methods of a traced array (``x.shape``, ``x.T``, ``x.sum(axis=0)``,
``x.astype(np.float32)``, ...): each method is the NumPy function of the same name, bound to
its receiver; which of them return views of it (the aliasing checks of ``symgrad.calls``)."""
from __future__ import annotations

import numpy as np

from . import numpy_extra, ops
from .ir import Node, make
from .numpy_api import DUALS, _reduce   # (x.sum(...) takes what np.sum(x, ...) takes)


class _BoundNodeMethod:
    def __init__(self, fn, node):
        self.fn, self.node = fn, node

    def __call__(self, *args, **kwargs):
        return self.fn(self.node, *args, **kwargs)


def python_scalar(x: Node, kind: str | None = None) -> Node:
    """``x.item()`` / ``float(x)`` of a traced one-element array: the Python number it holds,
    traced (its value is known only at run time) and weakly typed as a Python number is, so
    ``float(np.sum(x32)) * y32`` stays float32 as in NumPy. ``kind`` forces "float"
    (``float(x)``) or "int" (``int(i)`` of an integer); else the receiver's kind decides: a
    float, an int or a bool."""
    if x.size != 1:
        raise TypeError("only length-1 arrays can be converted to Python scalars" if kind else
                        "can only convert an array of size 1 to a Python scalar")
    dtype = "float64" if kind == "float" or kind is None and x.dtype.startswith("float") else \
        "bool" if kind is None and x.dtype == "bool" else "int64"
    if x.ndim == 0 and x.dtype == dtype and ops.weak_kind(x) is not None:
        return x    # already a Python number (a loop index): itself, known to be in bounds
    # a node of its own (a cast, even to the same dtype): the strong value stays strong
    number = make("cast", (ops.reshape(x, ()),), (dtype,))
    return ops.mark_weak(number) if ops.in_weak_scope() else number


def _item(x, *index):
    """``x.item()``, ``x.item(k)`` (flat index), ``x.item(i, j)``."""
    if index:
        x = ops.getitem(x, index if len(index) > 1 else
                        (index[0] if x.ndim == 1 else np.unravel_index(index[0], x.shape)))
    return python_scalar(x)


def _shape_args(args):
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


# (keepdims is keyword-only: NumPy's second positional after axis is dtype or out)
_NODE_METHODS = {
    "sum": _reduce("sum"),
    "prod": _reduce("prod"),
    "max": _reduce("max"),
    "min": _reduce("min"),
    "mean": lambda x, axis=None, *, keepdims=False, where=True:
        numpy_extra.reductions.mean(x, axis, keepdims=keepdims, where=where),
    "reshape": lambda x, *shape: ops.reshape(x, _shape_args(shape)),
    "transpose": lambda x, *axes: ops.transpose(x, _shape_args(axes) or None),
    "astype": lambda x, dtype: ops.cast(x, np.dtype(dtype).name),
    "copy": lambda x: x,
    "flatten": lambda x: ops.reshape(x, (-1,)),
    "ravel": lambda x: ops.reshape(x, (-1,)),
    "dot": lambda x, y: ops.dot(x, y),
    "clip": lambda x, min=None, max=None: numpy_extra.clip(x, min, max),
    "squeeze": lambda x, axis=None: DUALS["squeeze"](x, axis),
    "item": _item,
    # NumPy coverage (symgrad.numpy_extra): the methods of the functions of the same name
    "var": lambda x, axis=None, dtype=None, out=None, ddof=0, keepdims=False:
        numpy_extra.var(x, axis, dtype, out, ddof, keepdims),
    "std": lambda x, axis=None, dtype=None, out=None, ddof=0, keepdims=False:
        numpy_extra.std(x, axis, dtype, out, ddof, keepdims),
    "round": lambda x, decimals=0: numpy_extra.round_(x, decimals),
    "swapaxes": lambda x, axis1, axis2: numpy_extra.swapaxes(x, axis1, axis2),
    "diagonal": lambda x, offset=0, axis1=0, axis2=1: numpy_extra.diagonal(x, offset, axis1, axis2),
    "trace": lambda x, offset=0, axis1=0, axis2=1: numpy_extra.trace(x, offset, axis1, axis2),
    "repeat": lambda x, repeats, axis=None: numpy_extra.repeat(x, repeats, axis),
    "conj": lambda x: x, "conjugate": lambda x: x,
    "argmax": lambda x, axis=None, out=None, *, keepdims=False: DUALS["argmax"](x, axis, out, keepdims=keepdims),
    "argmin": lambda x, axis=None, out=None, *, keepdims=False: DUALS["argmin"](x, axis, out, keepdims=keepdims),
    "cumsum": lambda x, axis=None, dtype=None, out=None: DUALS["cumsum"](x, axis, dtype, out),
    "cumprod": lambda x, axis=None, dtype=None, out=None: DUALS["cumprod"](x, axis, dtype, out),
    "take": lambda x, indices, axis=None: DUALS["take"](x, indices, axis),
    "any": lambda x, axis=None, out=None, keepdims=False: DUALS["any"](x, axis, out, keepdims),
    "all": lambda x, axis=None, out=None, keepdims=False: DUALS["all"](x, axis, out, keepdims),
}


_VIEW_METHODS = {_NODE_METHODS[m] for m in ("reshape", "transpose", "ravel", "squeeze")}
# (stop_gradient is the argument itself when run eagerly)
_VIEW_FUNCTIONS = {DUALS[f] for f in ("reshape", "transpose", "asarray", "asanyarray",
                                      "ascontiguousarray", "asfortranarray", "squeeze",
                                      "expand_dims", "stop_gradient")}


def node_attribute(x: Node, attr: str, tracer, node):
    if attr == "shape":
        return x.shape
    if attr == "ndim":
        return x.ndim
    if attr == "size":
        return x.size
    if attr == "dtype":
        return np.dtype(x.dtype)
    if attr == "T":
        return ops.transpose(x)
    if attr == "real":          # real data: the value itself, and no imaginary part
        return x
    if attr == "imag":
        return numpy_extra.imag(x)
    method = _NODE_METHODS.get(attr)
    if method is None:
        tracer.fail(node, f"array attribute or method '.{attr}'")
    return _BoundNodeMethod(method, x)
