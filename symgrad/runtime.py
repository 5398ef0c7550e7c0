"""Run-time plumbing shared by the API and every back end (see ``symgrad.backends``).

* **output trees**: a graph returns its flat ``outputs`` shaped as ``out_tree`` (an int indexes
  ``outputs``, a tuple nests); :func:`build_tree` makes one from a returned value,
  :func:`flatten_tree` and :func:`unflatten_tree` convert, all without recursion;
* **argument keys**: :class:`ArgKey`, what a trace is specialised on for one argument (dtype and
  shape of an array, the value of a static int), and :func:`arg_key`;
* **stand-ins**: zero-memory values of a signature, for tracing and for showing code;
* **results**: :func:`finish` (Python floats for 0-d float64 results, never an argument's own
  memory) and :func:`write_out` (``out=``).
"""
from __future__ import annotations

import numbers
from typing import Any, NamedTuple

import numpy as np


# -- output trees ----------------------------------------------------------------------------------

class ListTree(tuple):
    """An out_tree node for a returned *list* (a plain tuple node is a returned tuple): a tuple,
    so every walk that nests through tuples works unchanged, that unflattens to a list."""
    __slots__ = ()

    def __repr__(self):
        return f"ListTree({tuple(self)!r})"


def build_tree(value, leaf):
    """The out_tree of a returned value (tuples and lists nest): ``leaf(v)`` is called on each
    leaf in order and returns its index. Iterative: deep nesting cannot exhaust the stack."""
    result: list = []
    stack = [(value, result)]   # (value, the list its tree goes into)
    while stack:
        v, into = stack.pop()
        if isinstance(v, (tuple, list)):
            children = _Children(isinstance(v, list))
            into.append(children)
            stack.extend((item, children) for item in reversed(v))
        else:
            into.append(leaf(v))
    return _freeze(result[0])


class _Children(list):
    """The items of one tuple or list while its tree is being built."""

    def __init__(self, is_list: bool):
        super().__init__()
        self.is_list = is_list


def _freeze(tree):
    """Nested _Children -> nested tuples (ListTree for lists), without recursion."""
    if not isinstance(tree, _Children):
        return tree
    order, stack = [], [tree]
    while stack:               # every node, parents before children
        t = stack.pop()
        order.append(t)
        stack.extend(c for c in t if isinstance(c, _Children))
    frozen: dict = {}
    for t in reversed(order):  # children before parents
        items = (frozen[id(c)] if isinstance(c, _Children) else c for c in t)
        frozen[id(t)] = ListTree(items) if t.is_list else tuple(items)
    return frozen[id(tree)]


def flatten_tree(value, tree) -> list:
    """The leaves of ``value``, a nesting of tuples shaped as ``tree``, in ``outputs`` order
    (a value shaped otherwise is a back-end bug: ``zip(strict=True)`` says so)."""
    if isinstance(tree, int):
        return [value]
    flat, stack = [], [(value, tree)]
    while stack:
        v, t = stack.pop()
        if isinstance(t, int):
            flat.append(v)
        else:
            stack.extend(reversed(list(zip(v, t, strict=True))))
    return flat


def unflatten_tree(tree, flat):
    """``tree`` with each int replaced by ``flat[int]`` (any indexable), tuples nesting (a
    :class:`ListTree` node gives a list)."""
    if isinstance(tree, int):
        return flat[tree]
    order, stack = [], [tree]
    while stack:                 # every tuple, parents before children
        t = stack.pop()
        order.append(t)
        stack.extend(c for c in t if not isinstance(c, int))
    built: dict = {}
    for t in reversed(order):    # children before parents
        items = (flat[c] if isinstance(c, int) else built[id(c)] for c in t)
        built[id(t)] = list(items) if type(t) is ListTree else tuple(items)
    return built[id(tree)]


def top_level(tree) -> list:
    """The returned value's top-level items (one for a single output): what ``out=`` matches."""
    return [tree] if isinstance(tree, int) else list(tree)


# -- argument keys ---------------------------------------------------------------------------------

class ArgKey(NamedTuple):
    """One argument's part of a signature: ``kind`` is ``"array"`` (``dtype``, ``shape``),
    ``"scalar"`` (a NumPy scalar: ``dtype``), ``"float"`` (a Python float), or ``"bool"``,
    ``"int"``, ``"static"`` (``value``: the trace is specialised on it)."""
    kind: str
    dtype: Any = None
    shape: tuple | None = None
    value: Any = None


FLOAT_KEY = ArgKey("float")
# ArgKey's own __new__ is a Python function; tuple.__new__ builds the same record without that
# call frame (half the cost, on every call with an array argument)
_new_key = tuple.__new__


def arg_key(value) -> ArgKey:
    """What a trace is specialised on: dtype and shape of arrays, values of static ints."""
    kind = type(value)
    if kind is float:
        return FLOAT_KEY
    if kind is np.ndarray or isinstance(value, np.ndarray):
        return _new_key(ArgKey, ("array", value.dtype, value.shape, None))
    if isinstance(value, np.generic):
        return ArgKey("scalar", value.dtype)
    if isinstance(value, bool):
        return ArgKey("bool", value=value)
    if isinstance(value, numbers.Integral):
        return ArgKey("int", value=int(value))
    if isinstance(value, numbers.Real):
        return FLOAT_KEY
    if value is None or isinstance(value, (str, tuple)):
        return ArgKey("static", value=value)
    raise TypeError(f"expected a float, int, bool or NumPy array argument, got {kind.__name__}")


# -- stand-ins -------------------------------------------------------------------------------------

def zero_standin(dtype, shape) -> np.ndarray:
    """A read-only array of this dtype and shape that takes no memory (one broadcast zero):
    tracing needs only shapes and dtypes."""
    return np.broadcast_to(np.zeros((), dtype=dtype), tuple(shape))


def standin(key: ArgKey):
    """A zero-memory value with the signature ``key``."""
    if key.kind == "array":
        return zero_standin(key.dtype, key.shape)
    if key.kind == "scalar":
        return key.dtype.type(0)
    if key.kind == "float":
        return 0.0
    return key.value


# -- results ---------------------------------------------------------------------------------------

def finish_flat(flat: list, graph, values):
    """The flat results of ``graph`` as the API returns them, shaped as its ``out_tree``:
    Python floats for 0-d float64 results; never an argument's own memory."""
    outputs = graph.outputs

    def fix(k: int):
        v = flat[k]
        if isinstance(v, np.ndarray) and v.ndim and (
                not v.flags.owndata or any(v is a for a in values)):
            return np.array(v)
        if np.ndim(v) == 0:   # generated code may return a Python number for a constant
            dtype = outputs[k].dtype
            if dtype == "float64":
                return float(v)
            return np.asarray(v, dtype=dtype)[()]
        return v

    tree = graph.out_tree
    if isinstance(tree, int):
        return fix(tree)
    return unflatten_tree(tree, [fix(k) for k in range(len(flat))])


def finish(result, graph, values):
    """:func:`finish_flat` of a result already shaped as ``graph.out_tree``."""
    return finish_flat(flatten_tree(result, graph.out_tree), graph, values)


def write_out(result, out):
    """Copy results into caller-provided arrays (shape and dtype must match exactly)."""
    results = result if isinstance(result, tuple) else (result,)
    outs = out if isinstance(out, tuple) else (out,)
    if len(outs) != len(results):
        raise ValueError(f"out= needs {len(results)} arrays, got {len(outs)}")
    for r, o in zip(results, outs):
        if not isinstance(o, np.ndarray) or o.shape != np.shape(r) or o.dtype != np.asarray(r).dtype:
            raise ValueError(f"out= array must have shape {np.shape(r)} and dtype "
                             f"{np.asarray(r).dtype}, got {getattr(o, 'shape', None)} "
                             f"{getattr(o, 'dtype', type(o).__name__)}")
        o[...] = r
    return out


def deliver(result, out):
    """``result``, or written into ``out=`` (returned) when given."""
    return result if out is None else write_out(result, out)
