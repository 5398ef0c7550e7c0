"""``sg.vmap``: a function mapped over a batch axis of its arguments, as a transform of the IR.

``vmap(fn, in_axes, out_axes)(*args)`` (JAX's semantics) takes the graph of ``fn`` for one
example (each batched argument's shape without its batch axis), then rewrites every node that
depends on a batched argument by the op's batching rule (``symgrad.batching``). The batch axis
sits in front inside the graph; ``in_axes`` and ``out_axes`` move it at the boundary (a
transpose the compiler folds into its loads and stores). The result is an ordinary graph, so a
vmapped function compiles on every target, shows its source, and composes: ``vmap(grad(f))``
(per-example gradients), ``grad(vmap(f))`` (the gradient of the sum of the outputs), nested
``vmap``.

* ``in_axes``: an int (every argument), None (not batched: the same value for every example)
  or a tuple/list with one entry per argument, each a pytree prefix of its argument (JAX): an
  int or None applies to every array leaf below it, a dict (the same keys), tuple or list
  (the same length) goes on into the argument's containers, so
  ``in_axes=({"w": None, "b": 0}, 0)`` batches ``params["b"]`` and shares ``params["w"]``;
  negative axes count from the end of the batched leaf.
* ``out_axes``: an int, or a pytree prefix of the returned value (a tuple with one entry per
  top-level output, a dict for a returned dict, ...); None for an output that does not depend
  on the batch.

A prefix that does not match (a dict's keys, a tuple's length, a container where the value
has an array) is a ValueError naming the argument and the path to the mismatch.
"""
from __future__ import annotations

import copy
import inspect
import numbers
from dataclasses import dataclass

import numpy as np

from . import ops
from .api import Function, _base, _retarget
from .batching import batch_nodes
from .ir import Graph, Node, make
from .runtime import (DictTree, ListTree, NamedTupleTree, arg_key, build_tree, children, is_namedtuple,
                      is_node, replace_leaves, top_level, tree_leaves, tree_paths, value_leaves,
                      zero_standin)


def _check_axis(axis, what: str, path: str = ""):
    if axis is None or (isinstance(axis, numbers.Integral) and not isinstance(axis, bool)):
        return None if axis is None else int(axis)
    at = f" at {what}{path}" if path else ""
    raise TypeError(f"vmap: {what} entries must be ints or None (or dicts, tuples or lists of "
                    f"them, a prefix of a pytree), got {axis!r}{at}")


def _axes_spec(axes, what: str):
    """A checked copy of an in_axes/out_axes value: ints and None, nested in dicts, tuples and
    lists (a top-level list becomes a tuple)."""
    top = tuple(axes) if isinstance(axes, list) else axes
    built, stack = {}, [(top, "")]
    order = []
    while stack:                      # every container, parents before children (iterative)
        spec, path = stack.pop()
        if isinstance(spec, dict):
            order.append((spec, path))
            stack.extend((v, f"{path}[{k!r}]") for k, v in spec.items())
        elif isinstance(spec, (tuple, list)):
            order.append((spec, path))
            stack.extend((v, f"{path}[{i}]") for i, v in enumerate(spec))
        else:
            built[id(spec), path] = _check_axis(spec, what, path)
    for spec, path in reversed(order):   # children before parents
        if isinstance(spec, dict):
            built[id(spec), path] = {k: built[id(v), f"{path}[{k!r}]"] for k, v in spec.items()}
        else:
            items = [built[id(v), f"{path}[{i}]"] for i, v in enumerate(spec)]
            built[id(spec), path] = type(spec)(*items) if is_namedtuple(spec) else type(spec)(items)
    return built[id(top), ""]


def _is_axis(spec) -> bool:
    return spec is None or isinstance(spec, int)


def _prefix_children(spec, items: list, kind, labels: list, what: str, path: str) -> list:
    """The entries of a container prefix ``spec`` for the container at ``path`` holding
    ``items`` (its kind: dict keys, or tuple/list), or a ValueError naming the mismatch."""
    if isinstance(spec, dict):
        if not isinstance(kind, tuple) or kind[0] != "dict":
            raise ValueError(f"vmap: {what} for {path} is a dict, but {path} is a {kind}")
        keys = kind[1]
        missing = [k for k in keys if k not in spec]
        extra = sorted((k for k in spec if k not in keys), key=repr)
        if missing or extra:
            parts = ([f"no entry for key {', '.join(map(repr, missing))}"] if missing else []) + \
                    ([f"key {', '.join(map(repr, extra))} not in {path}"] if extra else [])
            raise ValueError(f"vmap: {what} for {path} does not match its keys: {'; '.join(parts)} "
                             f"({path} has keys {', '.join(map(repr, keys))})")
        return [spec[k] for k in keys]
    if isinstance(kind, tuple) or (isinstance(spec, list)) != (kind == "list"):
        shown = "dict" if isinstance(kind, tuple) else kind
        raise ValueError(f"vmap: {what} for {path} is a {type(spec).__name__}, but {path} is a {shown}")
    if len(spec) != len(items):
        raise ValueError(f"vmap: {what} for {path} has {len(spec)} entries, but {path} has "
                         f"{len(items)} items")
    return list(spec)


def _container(value):
    """(items in tree order, kind, labels) of a pytree container, None for a leaf; kind is
    ("dict", keys), "list" or "tuple"."""
    found = children(value)
    if found is None:
        return None
    items = list(found[0])
    if isinstance(value, dict):
        keys = sorted(value)
        return items, ("dict", tuple(keys)), [f"[{k!r}]" for k in keys]
    if is_namedtuple(value):
        return items, "tuple", [f".{f}" for f in type(value)._fields]
    return items, "list" if isinstance(value, list) else "tuple", [f"[{i}]" for i in range(len(items))]


def leaf_axes(value, spec, path: str) -> list:
    """``(axis, path, explicit)`` for each leaf of ``value`` in tree order (as value_leaves), by
    the pytree prefix ``spec``; ``explicit``: the spec names this leaf itself (not a container
    above it)."""
    out, stack = [], [(value, spec, path)]
    while stack:
        v, s, at = stack.pop()
        found = _container(v)
        if _is_axis(s):
            if found is None:
                out.append((s, at, True))
            else:
                out.extend((s, leaf_path, False) for leaf_path in tree_paths(
                    build_tree(v, lambda leaf: 0), at))
            continue
        if found is None:
            raise ValueError(f"vmap: in_axes for {at} is a {type(s).__name__}, but {at} is "
                             f"{_describe(v)}: give it an int or None")
        items, kind, labels = found
        entries = _prefix_children(s, items, kind, labels, "in_axes", at)
        stack.extend(reversed([(item, e, at + label) for item, e, label in zip(items, entries, labels)]))
    return out


def _describe(v) -> str:
    if isinstance(v, np.ndarray):
        return f"an array of shape {v.shape}"
    return f"a {type(v).__name__}"


@dataclass(frozen=True)
class Vmap:
    """A vmap transform (picklable: the Function it belongs to is rebuilt around it)."""
    in_axes: object = 0
    out_axes: object = 0

    def __post_init__(self):
        object.__setattr__(self, "in_axes", _axes_spec(self.in_axes, "in_axes"))
        object.__setattr__(self, "out_axes", _axes_spec(self.out_axes, "out_axes"))

    def build(self, parent, values, name: str):
        """The batched graph for these values, and the captures of the parent's trace."""
        axes = self.argument_axes(len(values), parent.params, defaulted(parent, values))
        leaves = [leaf_axes(v, a, f"argument '{p}'") for v, a, p in zip(values, axes, parent.params)]
        size = batch_size(values, leaves, parent.params)
        example = [_one_example(v, spec) for v, spec in zip(values, leaves)]
        entry = parent._compiled(example)
        # The graph derivatives are taken of: a custom gradient rule must not be lost silently
        # (symgrad.batching refuses what it cannot batch, naming it).
        return batch_graph(entry.derivable, leaves, self.out_axes, size, name), entry.captures

    def argument_axes(self, count: int, params, defaulted=None) -> tuple:
        """One entry per parameter. A parameter the call left to its default is not batched
        (JAX maps the arguments it is given): an int applies to the others, and a tuple may
        stop before trailing defaulted parameters."""
        defaulted = defaulted or (False,) * count
        if isinstance(self.in_axes, dict):
            raise ValueError("vmap: in_axes is a dict; it takes an int, None or a tuple with one "
                             f"entry per argument ({', '.join(params)}), each entry a prefix of "
                             "its argument (a dict for a dict argument)")
        if not isinstance(self.in_axes, tuple):
            return tuple(None if d else self.in_axes for d in defaulted)
        given = len(self.in_axes)
        if given < count and all(defaulted[given:]):
            return self.in_axes + (None,) * (count - given)
        if len(self.in_axes) != count:
            raise ValueError(f"vmap: in_axes has {len(self.in_axes)} entries but the function "
                             f"takes {count} arguments ({', '.join(params)})")
        return self.in_axes


def defaulted(parent: Function, values) -> tuple:
    """Whether each argument is its parameter's default object (the call left it out)."""
    signature = parent._signature.parameters
    return tuple(p in signature and signature[p].default is not inspect.Parameter.empty
                 and v is signature[p].default for p, v in zip(parent.params, values))


def _is_data(leaf) -> bool:
    return isinstance(leaf, (float, np.ndarray, np.generic)) and not isinstance(leaf, bool)


def _one_example(value, leaves: list):
    """A stand-in for one example of an argument (each batched leaf without its batch axis;
    ``leaves``: leaf_axes of the argument)."""
    spec = iter(leaves)

    def example(leaf):
        axis, path, _ = next(spec)
        if axis is None or not _is_data(leaf):
            return leaf   # not batched, or a static leaf (int, str, None): the same for all
        shape = np.shape(leaf)
        a = _normalize(axis, len(shape), path)
        return zero_standin(np.asarray(leaf).dtype, shape[:a] + shape[a + 1:])
    return replace_leaves(value, example)


def _normalize(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        kind = "a scalar" if ndim == 0 else f"of rank {ndim}"
        raise ValueError(f"vmap: in_axes={axis} for {what}, which is {kind}: the batch axis "
                         "must be one of its axes (in_axes None broadcasts it)")
    return axis % ndim


def batch_size(values, leaves, params) -> int:
    """The common length of the batch axes (a ValueError listing them where they differ);
    ``leaves``: leaf_axes of each argument."""
    sizes = {}
    for value, spec, param in zip(values, leaves, params):
        root = f"argument '{param}'"
        batched = [(axis, path, explicit, leaf) for (axis, path, explicit), leaf
                   in zip(spec, value_leaves(value)) if axis is not None]
        for axis, path, explicit, leaf in batched:
            if explicit and path != root and not _is_data(leaf):
                raise ValueError(f"vmap: in_axes={axis} for {path}, which is a static "
                                 f"{type(leaf).__name__}, not an array; give it in_axes None")
        data = [b for b in batched if _is_data(b[3])]
        if batched and not data:
            raise ValueError(f"vmap: in_axes={batched[0][0]} for {root}, which holds no array "
                             f"({type(value).__name__}); give it in_axes None")
        for axis, path, _, leaf in data:
            shape = np.shape(leaf)
            sizes.setdefault(shape[_normalize(axis, len(shape), path)], []).append(path)
    if not sizes:
        raise ValueError("vmap: no argument is batched (every in_axes entry is None)")
    if len(sizes) > 1:
        listing = "; ".join(f"{n} for {', '.join(dict.fromkeys(p))}" for n, p in sizes.items())
        raise ValueError(f"vmap: the batched arguments have different batch sizes: {listing}")
    return next(iter(sizes))


def _input_axes(graph: Graph, leaves) -> list:
    """The in_axes entry of each graph input (``leaves``: leaf_axes of each argument)."""
    if graph.in_tree is None:
        return [spec[0][0] for spec in leaves]
    per_input = [None] * len(graph.inputs)
    for tree, spec in zip(graph.in_tree, leaves):
        for slot, (axis, _, _) in zip(tree_leaves(tree) if is_node(tree) else [tree], spec):
            if type(slot) is int:
                per_input[slot] = axis
    return per_input


def _move_axis(x: Node, source: int, dest: int) -> Node:
    order = [a for a in range(x.ndim) if a != source]
    order.insert(dest, source)
    return ops.transpose(x, tuple(order))


def batch_graph(graph: Graph, leaves, out_axes, size: int, name: str) -> Graph:
    """``graph`` (one example) rewritten for a batch of ``size`` examples (``leaves``: the
    in_axes entry of each argument's leaves, leaf_axes)."""
    inputs, batched_inputs = [], {}
    for arg, axis in zip(graph.inputs, _input_axes(graph, leaves)):
        if arg is None or axis is None:
            inputs.append(arg)
            continue
        index, param, dtype, shape = arg.attrs
        axis = axis % (len(shape) + 1)
        new = make("arg", (), (index, param, dtype, shape[:axis] + (size,) + shape[axis:]))
        inputs.append(new)
        batched_inputs[arg] = _move_axis(new, axis, 0)
    new, batched = batch_nodes(list(graph.outputs) + list(graph.guards.values()),
                               batched_inputs, size)
    outputs = [_place_output(new[o], o in batched, axis, size)
               for o, axis in zip(graph.outputs, _output_axes(graph, out_axes))]
    # a while loop's cap was too small if it was for any example
    guards = {key: ops.reduce("max", new[g], 0) if g in batched else new[g]
              for key, g in graph.guards.items()}
    out = Graph(name, graph.params, tuple(inputs), tuple(outputs), graph.out_tree,
                _carried(graph.names, new), _carried(graph.locs, new), {}, graph.filename,
                in_tree=graph.in_tree, top_params=graph.top_params, guards=guards)
    return out


def _output_axes(graph: Graph, out_axes) -> list:
    """The out_axes entry of each flat output, ``out_axes`` a pytree prefix of the returned
    value (a top-level tuple: one entry per top-level output)."""
    count = len(graph.outputs)
    if _is_axis(out_axes):
        return [out_axes] * count
    tops = top_level(graph.out_tree)
    if isinstance(graph.out_tree, int) or (isinstance(out_axes, tuple) and type(graph.out_tree) is tuple
                                           and len(out_axes) != len(tops)):
        raise ValueError(f"vmap: out_axes has {len(out_axes)} entries but the function returns "
                         f"{len(tops) if not isinstance(graph.out_tree, int) else 1} outputs")
    per_output = [None] * count
    stack = [(graph.out_tree, out_axes, "the output")]
    while stack:
        tree, spec, at = stack.pop()
        if _is_axis(spec):
            for k in tree_leaves(tree):
                per_output[k] = spec
            continue
        if not is_node(tree):
            raise ValueError(f"vmap: out_axes for {at} is a {type(spec).__name__}, but {at} is "
                             "one array: give it an int or None")
        kind, labels = _tree_kind(tree)
        entries = _prefix_children(spec, list(tree), kind, labels, "out_axes", at)
        stack.extend((t, e, at + label) for t, e, label in zip(tree, entries, labels))
    return per_output


def _tree_kind(tree):
    """(kind, labels) of an out_tree node, as _container gives them for values."""
    if type(tree) is DictTree:
        return ("dict", tree.keys), [f"[{k!r}]" for k in tree.keys]
    if type(tree) is NamedTupleTree:
        return "tuple", [f".{f}" for f in tree.kind._fields]
    return "list" if type(tree) is ListTree else "tuple", [f"[{i}]" for i in range(len(tree))]


def _place_output(x: Node, is_batched: bool, axis, size: int) -> Node:
    if axis is None:
        if is_batched:
            raise ValueError("vmap: out_axes None for an output that depends on the batch "
                             "(None is only for outputs that are the same for every example)")
        return x
    if not is_batched:   # the same for every example: repeated, as JAX does
        x = ops.broadcast_to(x, (size,) + x.shape)
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"vmap: out_axes={axis} is out of range for an output of rank "
                         f"{x.ndim - 1} (batched: {x.ndim})")
    return _move_axis(x, 0, axis % x.ndim)


def _carried(table: dict, new: dict) -> dict:
    """A side table (variable names, source locations) moved to the batched nodes, so the
    generated source keeps the user's names."""
    out = dict(table)
    for old, value in table.items():
        rewritten = new.get(old)
        if rewritten is not None and rewritten is not old and rewritten not in out:
            out[rewritten] = value
    return out


class VmapFunction(Function):
    """An ``sg.Function`` whose graphs are its parent's, batched (``symgrad.vmap.Vmap``)."""
    keeps_signature = False   # its parent sees one example's argument types

    def __init__(self, parent: Function, transform: "Vmap", target: str):
        super().__init__(wrt=parent._wrt_spec(), target=target, _parent=parent, _kind="vmap",
                         name=f"vmap_{parent.__name__}")
        self.transform = transform

    def _build(self, values):
        return self.transform.build(self._parent, values, self.__name__)

    def _compiled(self, values, key=None):
        # which arguments are defaults (not batched) is part of the signature
        key = tuple([arg_key(v) for v in values]) if key is None else key
        entry = super()._compiled(values, key + (defaulted(self._parent, values),))
        self._last_key = key   # (.source and .ir rebuild arguments from it, one per parameter)
        return entry

    def __call__(self, *args, **kwargs):
        result = super().__call__(*args, **kwargs)
        given = len(args) + sum(1 for k in kwargs if k != "out" or "out" in self.params)
        if given < len(self.params):   # a default took part: the hot path's plan, which checks
            self._hot = None           # argument kinds only, must not serve explicit calls
        return result

    def __reduce__(self):
        return VmapFunction, (self._parent, self.transform, self.target)

    def __deepcopy__(self, memo):
        twin = memo[id(self)] = VmapFunction(copy.deepcopy(self._parent, memo), self.transform,
                                             self.target)
        return twin


def vmap(fn, in_axes=0, out_axes=0, target=None) -> Function:
    """``fn`` mapped over a batch axis of its arguments (JAX's ``vmap``), as an ``sg.Function``:
    ``fn`` is a Python function or an ``sg.Function`` (``sg.grad(f)``, another vmap, ...)."""
    parent = _base(fn, 0, target)
    if parent._kind == "hvp":
        raise TypeError("vmap of an hvp Function is not supported: vmap the function and take "
                        "its hvp, or vmap sg.grad of <grad f, v>")
    return _retarget(VmapFunction(parent, Vmap(in_axes, out_axes), parent.target), target)
