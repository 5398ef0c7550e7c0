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

    # a list is not the tuple it is built as: a list argument and a tuple argument are
    # different signatures (their gradients come back as a list and a tuple)
    def __eq__(self, other):
        return type(other) is ListTree and tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((ListTree, tuple(self)))

    @staticmethod
    def rebuild(items):
        return list(items)


class DictTree(tuple):
    """A tree node for a dict: its values in ``keys`` order (sorted, as JAX does, so two dicts
    with the same keys share a signature whatever their insertion order)."""

    def __new__(cls, items, keys):
        node = super().__new__(cls, items)
        node.keys = tuple(keys)
        return node

    def __eq__(self, other):
        return type(other) is DictTree and self.keys == other.keys and tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((DictTree, self.keys, tuple(self)))

    def __repr__(self):
        return f"DictTree({dict(zip(self.keys, self))!r})"

    def rebuild(self, items):
        return dict(zip(self.keys, items))


class NamedTupleTree(tuple):
    """A tree node for a namedtuple: its fields in order; it rebuilds as the same class."""

    def __new__(cls, items, kind):
        node = super().__new__(cls, items)
        node.kind = kind
        return node

    def __eq__(self, other):
        return type(other) is NamedTupleTree and self.kind is other.kind and tuple.__eq__(self, other)

    def __ne__(self, other):
        return not self == other

    def __hash__(self):
        return hash((NamedTupleTree, id(self.kind), tuple(self)))

    def __repr__(self):
        return f"NamedTupleTree({self.kind.__name__}{tuple(self)!r})"

    def rebuild(self, items):
        return self.kind(*items)


def is_namedtuple(value) -> bool:
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def children(value):
    """``(items, make)`` for a container that nests in a tree (tuple, list, dict, namedtuple):
    its items in tree order and ``make(frozen_items)``, its tree node; None for a leaf."""
    kind = type(value)
    if kind is tuple:
        return value, tuple
    if kind is list:
        return value, ListTree
    if isinstance(value, dict):
        try:
            keys = sorted(value)
        except TypeError:
            raise TypeError("a dict in a pytree needs sortable keys (they are sorted, as JAX "
                            f"does), got {sorted(map(repr, value))}") from None
        return [value[k] for k in keys], lambda items: DictTree(items, keys)
    if is_namedtuple(value):
        return value, lambda items: NamedTupleTree(items, kind)
    if isinstance(value, list):
        return value, ListTree
    if isinstance(value, tuple):
        return value, tuple
    return None


def rebuild(node, items):
    """The container a tree node stands for, holding ``items``."""
    return tuple(items) if type(node) is tuple else node.rebuild(items)


def build_tree(value, leaf):
    """The tree of a value (tuples, lists, dicts and namedtuples nest): ``leaf(v)`` is called
    on each leaf in order and returns what stands for it (for an out_tree, its index).
    Iterative: deep nesting cannot exhaust the stack."""
    result: list = []
    stack = [(value, result)]   # (value, the list its tree goes into)
    while stack:
        v, into = stack.pop()
        found = children(v)
        if found is not None:
            items, make = found
            node = _Children(make)
            into.append(node)
            stack.extend((item, node) for item in reversed(items))
        else:
            into.append(leaf(v))
    return _freeze(result[0])


class _Children(list):
    """The items of one container while its tree is being built."""

    def __init__(self, make):
        super().__init__()
        self.make = make


def _freeze(tree):
    """Nested _Children -> nested tree nodes, without recursion."""
    if not isinstance(tree, _Children):
        return tree
    order, stack = [], [tree]
    while stack:               # every node, parents before children
        t = stack.pop()
        order.append(t)
        stack.extend(c for c in t if isinstance(c, _Children))
    frozen: dict = {}
    for t in reversed(order):  # children before parents
        frozen[id(t)] = t.make([frozen[id(c)] if isinstance(c, _Children) else c for c in t])
    return frozen[id(tree)]


def is_node(tree) -> bool:
    """Whether a tree item is a container node (an int, or another leaf marker, is not)."""
    return isinstance(tree, tuple)


def map_tree(tree, fn):
    """``tree`` with each leaf (non-node item) replaced by ``fn(leaf)``, nodes kept."""
    if not is_node(tree):
        return fn(tree)
    order, stack = [], [tree]
    while stack:
        t = stack.pop()
        order.append(t)
        stack.extend(c for c in t if is_node(c))
    built: dict = {}
    for t in reversed(order):
        items = [built[id(c)] if is_node(c) else fn(c) for c in t]
        built[id(t)] = type(t)(items) if type(t) in (tuple, ListTree) else \
            DictTree(items, t.keys) if type(t) is DictTree else NamedTupleTree(items, t.kind)
    return built[id(tree)]


def tree_leaves(tree) -> list:
    """The leaves (non-node items) of a tree, in order."""
    if not is_node(tree):
        return [tree]
    flat, stack = [], [tree]
    while stack:
        t = stack.pop()
        if is_node(t):
            stack.extend(reversed(t))
        else:
            flat.append(t)
    return flat


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
            items = [v[k] for k in t.keys] if type(t) is DictTree and isinstance(v, dict) else v
            stack.extend(reversed(list(zip(items, t, strict=True))))
    return flat


def unflatten_tree(tree, flat):
    """``tree`` with each int replaced by ``flat[int]`` (any indexable), tuples nesting (a
    :class:`ListTree` node gives a list, :class:`DictTree` a dict, :class:`NamedTupleTree` its
    namedtuple)."""
    if isinstance(tree, int):
        return flat[tree]
    order, stack = [], [tree]
    while stack:                 # every tuple, parents before children
        t = stack.pop()
        order.append(t)
        stack.extend(c for c in t if not isinstance(c, int))
    built: dict = {}
    for t in reversed(order):    # children before parents
        built[id(t)] = rebuild(t, [flat[c] if isinstance(c, int) else built[id(c)] for c in t])
    return built[id(tree)]


def tree_paths(tree, root: str) -> list[str]:
    """Each leaf's path as Python reads it (``params['W']``, ``state.h``, ``xs[0]``), in order."""
    paths, stack = [], [(tree, root)]
    while stack:
        t, path = stack.pop()
        if not is_node(t):
            paths.append(path)
            continue
        if type(t) is DictTree:
            labels = [f"[{k!r}]" for k in t.keys]
        elif type(t) is NamedTupleTree:
            labels = [f".{f}" for f in t.kind._fields]
        else:
            labels = [f"[{k}]" for k in range(len(t))]
        stack.extend((c, path + label) for c, label in reversed(list(zip(t, labels))))
    return paths


def walk_tree(value):
    """``(shape, leaves)`` of a pytree in one iterative pass: ``shape`` lists its containers
    in pre-order (``(kind, dict keys or namedtuple class, item count)``, None for a leaf),
    ``leaves`` its leaves in tree order. The hot path of a call with pytree arguments."""
    shape, leaves, stack = [], [], [value]
    while stack:
        v = stack.pop()
        kind = type(v)
        if kind is tuple:
            shape.append((tuple, None, len(v)))
            stack.extend(reversed(v))
        elif kind is list:
            shape.append((list, None, len(v)))
            stack.extend(reversed(v))
        elif kind is dict and all(type(k) is str for k in v):   # the common case, inline
            keys = tuple(sorted(v))
            shape.append((dict, keys, len(keys)))
            stack.extend([v[k] for k in reversed(keys)])
        elif isinstance(v, (tuple, list, dict)):
            items, make = children(v)
            if isinstance(v, dict):
                shape.append((dict, tuple(sorted(v)), len(items)))   # (children() sorted them)
            elif is_namedtuple(v):
                shape.append((kind, kind, len(items)))
            else:
                shape.append((list if isinstance(v, list) else tuple, None, len(items)))
            stack.extend(reversed(items))
        else:
            shape.append(None)
            leaves.append(v)
    return tuple(shape), leaves


def unwalk_tree(shape, leaves):
    """The pytree that :func:`walk_tree` took apart into ``shape`` and ``leaves``."""
    it = iter(leaves)
    frames = [[(None, None, 1), []]]    # (the container's shape entry, its items so far)
    for entry in shape:
        if entry is None:
            frames[-1][1].append(next(it))
        else:
            frames.append([entry, []])
        while len(frames) > 1 and len(frames[-1][1]) == frames[-1][0][2]:
            (kind, aux, _), items = frames.pop()
            frames[-1][1].append(tuple(items) if kind is tuple else items if kind is list else
                                 dict(zip(aux, items)) if kind is dict else aux(*items))
    return frames[0][1][0]


def replace_leaves(value, fn):
    """``value`` (a pytree, or a leaf) with each leaf ``v`` replaced by ``fn(v)``: the same
    containers, dicts' keys in sorted order."""
    leaves: list = []
    tree = build_tree(value, lambda v: leaves.append(v) or len(leaves) - 1)
    return unflatten_tree(tree, [fn(v) for v in leaves])


def value_leaves(value) -> list:
    """The leaves of a pytree value in tree order (dicts by sorted key)."""
    return walk_tree(value)[1]


class StaticLeaf(str):
    """An ``in_tree`` leaf for a static leaf of a pytree argument (an int, bool, str or None:
    part of the signature, not a graph input); the text is its path, e.g. ``params['n']``."""
    __slots__ = ()


def flat_plan(in_tree) -> tuple:
    """What :func:`flat_values` takes from each argument of a graph with this ``in_tree``:
    None (the argument itself) or the positions of a pytree's data leaves among its leaves."""
    return tuple(tuple(k for k, slot in enumerate(tree_leaves(t)) if type(slot) is int)
                 if is_node(t) else None for t in in_tree)


def flat_values(values, plan) -> list:
    """The graph inputs' values of a call: a pytree argument's data leaves (in tree order) in
    place of the argument, as ``plan`` (:func:`flat_plan`) says."""
    flat = []
    for v, take in zip(values, plan):
        if take is None:
            flat.append(v)
        else:
            leaves = walk_tree(v)[1]
            flat.extend([leaves[k] for k in take])
    return flat


def top_level(tree) -> list:
    """The returned value's top-level items (one for a single output): what ``out=`` matches."""
    return [tree] if isinstance(tree, int) else list(tree)


# -- argument keys ---------------------------------------------------------------------------------

class ArgKey(NamedTuple):
    """One argument's part of a signature: ``kind`` is ``"array"`` (``dtype``, ``shape``),
    ``"scalar"`` (a NumPy scalar: ``dtype``), ``"float"`` (a Python float), or ``"bool"``,
    ``"int"``, ``"static"`` (``value``: the trace is specialised on it), or ``"tree"`` (a pytree:
    ``value`` is its shape (:func:`walk_tree`) and the tuple of its leaves' keys)."""
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
    if isinstance(value, (tuple, list, dict)):
        return tree_key(value)
    if value is None or isinstance(value, str) or callable(value):
        return ArgKey("static", value=value)   # a function (act=np.tanh): by identity
    raise TypeError(f"expected a float, int, bool, NumPy array or function argument, or a "
                    f"tuple/list/dict/namedtuple of them, got {kind.__name__}")


def tree_key(value) -> ArgKey:
    """A pytree argument's key: its structure (container types, dict keys, namedtuple classes)
    and each leaf's key (so an int leaf's value is part of the signature)."""
    shape, leaves = walk_tree(value)
    return _new_key(ArgKey, ("tree", None, None, (shape, tuple([arg_key(v) for v in leaves]))))


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
    if key.kind == "tree":
        shape, leaves = key.value
        return unwalk_tree(shape, [standin(k) for k in leaves])
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
    """Copy results into caller-provided arrays (shape and dtype must match exactly): ``out``
    is an array for an array result, else a container of the result's structure (a tuple for
    a tuple, a dict with the same keys for a dict, nested alike)."""
    if isinstance(result, (tuple, list, dict)):
        shape, results = walk_tree(result)
        out_shape, outs = walk_tree(out) if isinstance(out, (tuple, list, dict)) else (None, [out])
        if len(outs) != len(results):
            raise ValueError(f"out= needs {len(results)} arrays, got {len(outs)}")
        if out_shape != shape:
            raise ValueError("out= must have the structure of the result (the same containers "
                             f"and keys): the result is a {type(result).__name__}")
    else:
        results, outs = (result,), (out if isinstance(out, tuple) else (out,))
        if len(outs) != 1:
            raise ValueError(f"out= needs 1 arrays, got {len(outs)}")
    for r, o in zip(results, outs):   # every entry checked before any is written
        if not isinstance(o, np.ndarray) or o.shape != np.shape(r) or o.dtype != np.asarray(r).dtype:
            raise ValueError(f"out= array must have shape {np.shape(r)} and dtype "
                             f"{np.asarray(r).dtype}, got {getattr(o, 'shape', None)} "
                             f"{getattr(o, 'dtype', type(o).__name__)}")
    for r, o in zip(results, outs):
        o[...] = r
    return out


def deliver(result, out):
    """``result``, or written into ``out=`` (returned) when given."""
    return result if out is None else write_out(result, out)
