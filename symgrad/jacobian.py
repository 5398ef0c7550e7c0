"""``sg.jacobian`` and ``sg.hessian``: dense derivative matrices as one batched program.

``jacobian(fn, wrt, mode)(*args)`` has shape ``out.shape + arg.shape`` (JAX's convention) for
each float output of ``fn`` and each ``wrt`` argument: a tuple of Jacobians for a tuple
``wrt``; an output pytree (tuple, list, dict, namedtuple) keeps its structure, each leaf
replaced by its Jacobian (or by the tuple of them). Built at the IR level from the transforms
already there, so the result is an ordinary graph that simplifies, compiles on every target,
shows its source and composes (``jacobian(grad(f))``, ``vmap(jacobian(f))``):

* ``"fwd"``: the JVP graph (``symgrad.forward``) batched over the basis of each ``wrt``
  argument (``symgrad.batching``): one forward pass carries every column at once;
* ``"rev"``: the VJP graph (``symgrad.autodiff.backward`` seeded by a cotangent instead of
  ones) batched over the basis of each output: one backward pass carries every row;
* ``"auto"``: ``"fwd"`` when the ``wrt`` arguments together have fewer elements than the
  float outputs together, else ``"rev"`` (a pass per input element against one per output
  element).

The basis is the identity written as a comparison of two ``arange``s, never a constant
matrix in memory, and the batching rules turn ``tangent @ W`` into one matrix product, so the
generated source reads as batched NumPy, not a loop over basis vectors.

``hessian(fn, wrt)`` is forward-over-reverse: the ``"fwd"`` Jacobian of ``grad(fn, wrt)``,
shape ``arg.shape + arg.shape`` (the Hessian of the sum of the outputs, the gradient's
convention); a tuple ``wrt`` gives the tuple of rows of blocks, ``H[i][j]``.
"""
from __future__ import annotations

import copy

import numpy as np

from . import ops
from .api import Function, _base, _retarget
from .autodiff import _param_tree, _wrt_slots, backward, tree_name
from .batching import batch_nodes
from .forward import jvp_graph
from .ir import Graph, Node, is_float, make, substitute, toposort
from .runtime import is_node, map_tree, zero_standin
from .vmap import _carried

MODES = ("fwd", "rev", "auto")


def identity_basis(n: int, shape: tuple, dtype: str) -> Node:
    """The ``n`` unit vectors of a space of ``shape`` (``n`` elements), as a batch: row ``r``
    is 1 at flat position ``r``. Written ``arange(n)[:, None] == arange(n)`` so that no n-by-n
    constant is stored and the source says what it is."""
    if n == 1:
        return ops.full((1,) + shape, 1, dtype)
    rows = ops.reshape(ops.arange(n), (n, 1))
    cols = ops.reshape(ops.arange(n), (1, n))
    return ops.reshape(ops.cast(ops.eq(rows, cols), dtype), (n,) + shape)


def without_identity_products(nodes: list, basis: Node) -> list:
    """``nodes`` with each matrix product by the (n, n) ``basis`` replaced by the other
    factor: a linear map applied to every unit vector is the map's matrix (``W @ x`` has the
    Jacobian ``W``, read off rather than multiplied out)."""
    if basis.ndim != 2:
        return list(nodes)
    mapping = {}
    for node in toposort(nodes):
        if node.op != "matmul" or node.ndim != 2:
            continue
        a, b = node.inputs
        if a is basis and b.ndim == 2:
            mapping[node] = b
        elif b is basis and a.ndim == 2:
            mapping[node] = a
    return substitute(nodes, mapping) if mapping else list(nodes)


def choose_mode(mode: str, inputs: list[Node], outputs: list[Node]) -> str:
    """``mode``, or for ``"auto"`` the cheaper one by sizes (see the module docstring)."""
    if mode != "auto":
        return mode
    n_in = sum(x.size for x in inputs)
    n_out = sum(o.size for o in outputs)
    return "fwd" if n_in < n_out else "rev"


def _wrt_inputs(graph: Graph, wrt: tuple, name: str) -> list[Node]:
    """The ``arg`` node of each ``wrt`` parameter; a clear TypeError for a pytree one (its
    Jacobian would be a tree of trees) or one that is not float data."""
    nodes = []
    for i in wrt:
        if is_node(_param_tree(graph, i)):
            raise TypeError(f"{name}: a Jacobian with respect to the pytree argument "
                            f"'{tree_name(graph, i)}' is not supported; pass its arrays as "
                            "separate arguments and give a tuple wrt")
        (slot,) = _wrt_slots(graph, i)
        nodes.append(graph.inputs[slot])
    return nodes


def _check_outputs(graph: Graph, name: str):
    for k, o in enumerate(graph.outputs):
        if not is_float(o.dtype):
            raise TypeError(f"{name}: output {k} is {o.dtype} data; a Jacobian needs float "
                            "outputs (return the integer result from another function)")


def _move_input_axes_last(t: Node, x: Node, o: Node) -> Node:
    """A batch of tangents ``(x.size,) + o.shape`` as the block ``o.shape + x.shape``."""
    block = ops.reshape(t, x.shape + o.shape)
    if x.ndim == 0 or o.ndim == 0:
        return ops.reshape(block, o.shape + x.shape)
    return ops.transpose(block, tuple(range(x.ndim, x.ndim + o.ndim)) + tuple(range(x.ndim)))


def _forward_columns(graph: Graph, result: Graph, i: int, x: Node) -> list:
    """The Jacobian of every output with respect to parameter ``i`` (``arg`` node ``x``): the
    JVP batched over the unit tangents of ``x``; None where an output does not depend on it."""
    jvp = jvp_graph(graph, (i,), [zero_standin(x.dtype, x.shape)], result.name)
    tangent_arg = jvp.inputs[-1]
    tangents = jvp.outputs[len(graph.outputs):]
    basis = identity_basis(x.size, x.shape, x.dtype)
    new, batched = batch_nodes(tangents, {tangent_arg: basis}, x.size)
    _keep_tables(result, jvp, new)
    columns = without_identity_products([new[t] for t in tangents if t in batched], basis)
    columns = dict(zip([t for t in tangents if t in batched], columns))
    return [_move_input_axes_last(columns[t], x, o) if t in batched else None
            for t, o in zip(tangents, graph.outputs)]


def _reverse_row(graph: Graph, result: Graph, k: int, xs: list[Node]) -> list:
    """The Jacobian of output ``k`` with respect to every ``wrt`` input: the VJP (reverse
    mode seeded by a cotangent placeholder) batched over the unit cotangents of the output."""
    o = graph.outputs[k]
    cotangent = make("arg", (), (len(graph.inputs) + k, f"ct_{k}", o.dtype, o.shape))
    vjp = graph.derive(result.name, graph.outputs, graph.out_tree)
    vjp.stopped = {}
    grads, origin = backward(vjp, xs, seeds=[(o, cotangent)])
    vjp.grad_origin.update((n, s) for n, s in origin.items() if n not in vjp.grad_origin)
    basis = identity_basis(o.size, o.shape, o.dtype)
    new, batched = batch_nodes(grads, {cotangent: basis}, o.size)
    _keep_tables(result, vjp, new)
    rows = without_identity_products([new[g] for g in grads if g in batched], basis)
    rows = dict(zip([g for g in grads if g in batched], rows))
    return [ops.reshape(rows[g], o.shape + x.shape) if g in batched else None
            for g, x in zip(grads, xs)]


def _keep_tables(result: Graph, derived: Graph, new: dict):
    """The user's names, source lines and derivative origins, moved to the batched nodes."""
    for table in ("names", "locs", "grad_origin"):
        getattr(result, table).update(_carried(getattr(derived, table), new))
    result.stopped.update(derived.stopped)


def jacobian_graph(graph: Graph, wrt: tuple, single: bool, mode: str, name: str) -> Graph:
    """The graph of the Jacobians of ``graph``'s outputs with respect to parameters ``wrt``."""
    _check_outputs(graph, name)
    xs = _wrt_inputs(graph, wrt, name)
    result = graph.derive(name, (), 0)
    result.stopped = {}
    outputs = list(graph.outputs)
    if choose_mode(mode, xs, outputs) == "fwd":
        columns = [_forward_columns(graph, result, i, x) for i, x in zip(wrt, xs)]
        blocks = [[column[k] for column in columns] for k in range(len(outputs))]
    else:
        blocks = [_reverse_row(graph, result, k, xs) for k in range(len(outputs))]
    flat = []
    for k, (o, row) in enumerate(zip(outputs, blocks)):
        for j, (x, block) in enumerate(zip(xs, row)):
            dtype = np.result_type(o.dtype, x.dtype).name
            block = ops.full(o.shape + x.shape, 0, dtype) if block is None else ops.cast(block, dtype)
            if block.op not in ("full", "const"):
                result.names[block] = _block_name(graph, k, wrt[j], len(outputs))
            flat.append(block)
    width = len(xs)
    result.outputs = tuple(flat)
    result.out_tree = map_tree(graph.out_tree, lambda k: k * width if single else
                               tuple(k * width + j for j in range(width)))
    return result


def _block_name(graph: Graph, k: int, i: int, n_outputs: int) -> str:
    """``jac_x`` (one output), ``jac_<output name or k>_x`` (several)."""
    param = tree_name(graph, i)
    if n_outputs == 1:
        return f"jac_{param}"
    return f"jac_{graph.names.get(graph.outputs[k], k)}_{param}"


class JacobianFunction(Function):
    """An ``sg.Function`` computing the Jacobians of its parent (``symgrad.jacobian``); it
    takes its parent's arguments."""

    def __init__(self, parent: Function, wrt, mode: str, target: str, name: str | None = None):
        if mode not in MODES:
            raise ValueError(f"jacobian: mode must be one of {', '.join(map(repr, MODES))}, "
                             f"got {mode!r}")
        super().__init__(wrt=wrt, target=target, _parent=parent, _kind="jacobian",
                         name=name or f"jacobian_{parent.__name__}")
        self.mode = mode

    def _build(self, values):
        entry = self._parent._compiled(values)
        graph = jacobian_graph(entry.derivable, self.wrt, self._single, self.mode, self.__name__)
        return graph, entry.captures

    def __reduce__(self):
        return JacobianFunction, (self._parent, self._wrt_spec(), self.mode, self.target,
                                  self.__name__)

    def __deepcopy__(self, memo):
        twin = memo[id(self)] = JacobianFunction(copy.deepcopy(self._parent, memo),
                                                 self._wrt_spec(), self.mode, self.target,
                                                 self.__name__)
        return twin


def _jacobian_parent(fn, wrt, target, what: str) -> Function:
    parent = _base(fn, wrt, target)
    if parent._kind == "hvp":
        raise TypeError(f"{what} of an hvp Function is not supported: its arguments are "
                        "(x, v, *rest); take the Hessian with sg.hessian instead")
    return parent


def jacobian(fn, wrt=0, mode="auto", target=None) -> Function:
    """The Jacobian of ``fn`` (a Python function or ``sg.Function``) with respect to ``wrt``:
    ``jacobian(f)(*args)`` has shape ``out.shape + arg.shape``, a tuple for a tuple ``wrt``.
    ``mode``: ``"fwd"`` (vmap of the JVP over the input basis), ``"rev"`` (vmap of the VJP
    over the output basis) or ``"auto"`` (``"fwd"`` when the inputs have fewer elements than
    the outputs, else ``"rev"``)."""
    parent = _jacobian_parent(fn, wrt, target, "jacobian")
    return _retarget(JacobianFunction(parent, wrt, mode, parent.target), target)


def hessian(fn, wrt=0, target=None) -> Function:
    """The Hessian of ``fn`` (of the sum of its outputs) with respect to ``wrt``, shape
    ``arg.shape + arg.shape``: forward-over-reverse, the ``"fwd"`` Jacobian of ``grad``. A
    tuple ``wrt`` gives ``H[i][j]``, the block of arguments i and j, as a tuple of tuples."""
    parent = _jacobian_parent(fn, wrt, target, "hessian")
    gradient = parent._derived("grad", wrt)
    return _retarget(JacobianFunction(gradient, wrt, "fwd", gradient.target,
                                      name=f"hessian_{parent.__name__}"), target)
