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
  or a tuple/list with one int or None per argument; an int applies to every array leaf of a
  pytree argument; negative axes count from the end of the batched argument.
* ``out_axes``: an int or a tuple with one entry per top-level output; None for an output that
  does not depend on the batch.
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
from .runtime import arg_key, is_node, top_level, tree_leaves, value_leaves, replace_leaves, zero_standin


def _check_axis(axis, what: str):
    if axis is None or (isinstance(axis, numbers.Integral) and not isinstance(axis, bool)):
        return None if axis is None else int(axis)
    raise TypeError(f"vmap: {what} entries must be ints or None, got {axis!r}")


def _axes_spec(axes, what: str):
    if isinstance(axes, (tuple, list)):
        return tuple(_check_axis(a, what) for a in axes)
    return _check_axis(axes, what)


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
        size = batch_size(values, axes, parent.params)
        example = [v if a is None else replace_leaves(v, lambda leaf, a=a, p=p: _one_example(leaf, a, p))
                   for v, a, p in zip(values, axes, parent.params)]
        entry = parent._compiled(example)
        # The graph derivatives are taken of: a custom gradient rule must not be lost silently
        # (symgrad.batching refuses what it cannot batch, naming it).
        return batch_graph(entry.derivable, axes, self.out_axes, size, name), entry.captures

    def argument_axes(self, count: int, params, defaulted=None) -> tuple:
        """One entry per parameter. A parameter the call left to its default is not batched
        (JAX maps the arguments it is given): an int applies to the others, and a tuple may
        stop before trailing defaulted parameters."""
        defaulted = defaulted or (False,) * count
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


def _one_example(leaf, axis: int, param: str):
    """A stand-in for one example of a batched leaf (its shape without the batch axis)."""
    if not _is_data(leaf):
        return leaf   # a static leaf of a pytree (int, str, None): the same for every example
    shape = np.shape(leaf)
    a = _normalize(axis, len(shape), f"argument '{param}'")
    return zero_standin(np.asarray(leaf).dtype, shape[:a] + shape[a + 1:])


def _normalize(axis: int, ndim: int, what: str) -> int:
    if not -ndim <= axis < ndim:
        kind = "a scalar" if ndim == 0 else f"of rank {ndim}"
        raise ValueError(f"vmap: in_axes={axis} for {what}, which is {kind}: the batch axis "
                         "must be one of its axes (in_axes None broadcasts it)")
    return axis % ndim


def batch_size(values, axes, params) -> int:
    """The common length of the batch axes (a ValueError listing them where they differ)."""
    sizes = {}
    for value, axis, param in zip(values, axes, params):
        if axis is None:
            continue
        leaves = value_leaves(value) if isinstance(value, (tuple, list, dict)) else [value]
        data = [leaf for leaf in leaves if _is_data(leaf)]
        if not data:
            raise ValueError(f"vmap: in_axes={axis} for argument '{param}', which holds no array "
                             f"({type(value).__name__}); give it in_axes None")
        for leaf in data:
            shape = np.shape(leaf)
            sizes.setdefault(shape[_normalize(axis, len(shape), f"argument '{param}'")], []).append(param)
    if not sizes:
        raise ValueError("vmap: no argument is batched (every in_axes entry is None)")
    if len(sizes) > 1:
        listing = "; ".join(f"{n} for {', '.join(dict.fromkeys(p))}" for n, p in sizes.items())
        raise ValueError(f"vmap: the batched arguments have different batch sizes: {listing}")
    return next(iter(sizes))


def _input_axes(graph: Graph, axes) -> list:
    """The in_axes entry of each graph input (a pytree argument's applies to all its leaves)."""
    if graph.in_tree is None:
        return list(axes)
    per_input = [None] * len(graph.inputs)
    for tree, axis in zip(graph.in_tree, axes):
        for slot in (tree_leaves(tree) if is_node(tree) else [tree]):
            if type(slot) is int:
                per_input[slot] = axis
    return per_input


def _move_axis(x: Node, source: int, dest: int) -> Node:
    order = [a for a in range(x.ndim) if a != source]
    order.insert(dest, source)
    return ops.transpose(x, tuple(order))


def batch_graph(graph: Graph, axes, out_axes, size: int, name: str) -> Graph:
    """``graph`` (one example) rewritten for a batch of ``size`` examples."""
    inputs, batched_inputs = [], {}
    for arg, axis in zip(graph.inputs, _input_axes(graph, axes)):
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
    """The out_axes entry of each flat output (a top-level output's applies to its leaves)."""
    count = len(graph.outputs)
    if not isinstance(out_axes, tuple):
        return [out_axes] * count
    tops = top_level(graph.out_tree)
    if isinstance(graph.out_tree, int) or len(out_axes) != len(tops):
        raise ValueError(f"vmap: out_axes has {len(out_axes)} entries but the function returns "
                         f"{len(tops) if not isinstance(graph.out_tree, int) else 1} outputs")
    per_output = [None] * count
    for tree, axis in zip(tops, out_axes):
        for k in (tree_leaves(tree) if is_node(tree) else [tree]):
            per_output[k] = axis
    return per_output


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
