"""Forward mode: push tangents through the DAG in topological order and build the graph of a
Jacobian-vector product, ``sg.jvp(fn, wrt)(*args, *tangents) -> (value, tangent)``.

Tangents are IR nodes; ``None`` is a structural zero, so nodes no tangent reaches (constants,
integer data, ``stop_gradient``, comparisons) add nothing to the generated code. Each op's rule
is its ``OpDef.jvp`` (``symgrad.ops``); a rule sees one tangent per input (each of that input's
shape) and its result is broadcast to the node's shape here, once, as the op broadcasts its
operands. No unbroadcasting: that belongs to reverse mode. The tangent of the output has the
output's structure (not summed, unlike the gradient).

Reverse mode (``symgrad.autodiff``) and this pass are independent: both read the op table, so
``sg.grad`` of a jvp and ``sg.jvp`` of a grad compose like any other program.
"""
from __future__ import annotations

import numpy as np

from .autodiff import _param_tree, _wrt_slots, through_jvp, tree_name
from .ir import FLOAT_DTYPES, OPS, Graph, Node, is_float, label_new, make
from .ops import broadcast_to, cast, zeros_like
from .ir import substitute
from .region_forward import cond_jvp, loop_jvp, remat_jvp

_REGION_JVPS = {"loop": loop_jvp, "cond": cond_jvp, "remat": remat_jvp}
from .runtime import flat_plan, is_node, map_tree, walk_tree


def missing_jvp_rules() -> list[str]:
    """The differentiable ops (those with a VJP) that have no JVP rule: the completeness
    check (a new op must give both)."""
    return sorted(name for name, op in OPS.items() if op.vjp is not None and op.jvp is None)


def push_tangents(graph: Graph, seeds: dict[Node, Node]) -> tuple[dict[Node, Node], dict]:
    """The tangent of every node of ``graph`` that a seed (``arg`` node -> its tangent)
    reaches, and the node each tangent term came from (for ``# grad of line ...`` comments).
    Tangents of the user's named values are named ``t_<name>``."""
    tangent: dict[Node, Node] = dict(seeds)
    origin: dict[Node, Node] = {}
    graph.stopped = {}     # what this pass's stop_gradients cut (not an inner derivative's)
    region_tangents: dict = {}   # (region, result index) -> tangent
    replaced = getattr(graph, "replaced_regions", None)
    for node in graph.nodes():
        if node in tangent or not node.inputs:
            continue
        if node.op == "proj":
            t = region_tangents.get((node.inputs[0], node.attrs[0]))
            if t is not None:
                tangent[node] = t
            continue
        inputs = [tangent.get(i) for i in node.inputs]
        if all(t is None for t in inputs):
            continue
        if node.op in _REGION_JVPS:   # the region carries its tangents (symgrad.region_forward)
            new, tangent_of, primal = _REGION_JVPS[node.op](node, inputs, push_tangents)
            region_tangents.update(((node, k), t) for k, t in tangent_of.items())
            if replaced is not None:
                replaced.update((make("proj", (node,), (k,)), p) for k, p in primal.items())
            continue
        if node.op == "stop_gradient":
            graph.stopped.setdefault(node, inputs[0])
        op = OPS[node.op]
        if op.vjp is None or not is_float(node.dtype):
            continue     # not differentiable: a structural zero
        if op.jvp is None:
            raise NotImplementedError(f"op '{node.op}' has a VJP but no JVP rule: forward mode "
                                      "needs both (symgrad.forward.missing_jvp_rules())")
        t = through_jvp(node, tangent)   # 1/(1 + exp(u)): finite where exp overflows
        t = op.jvp(inputs, node) if t is NotImplemented else t
        if t is None:
            continue
        t = cast(t, node.dtype)
        if t.shape != node.shape:
            t = broadcast_to(t, node.shape)
        label_new(t, origin, node, known=graph.locs)
        name = graph.names.get(node)
        if name and t not in graph.names and t.op not in ("const", "full", "arg"):
            graph.names[t] = f"t_{name}"
        tangent[node] = t
    return tangent, origin


def jvp_graph(graph: Graph, wrt: tuple, tangent_values: list, name: str) -> Graph:
    """The graph of ``(value, tangent)`` of ``graph`` along tangents for parameters ``wrt``
    (one per parameter, shaped like it; a pytree parameter's tangent is a pytree of the same
    structure). Its parameters are ``graph``'s followed by one tangent parameter per ``wrt``
    entry (``t_x``), so ``sg.grad`` can take derivatives with respect to either."""
    result = graph.derive(name, graph.outputs, graph.out_tree)
    taken = set(graph.params) | set(graph.top_params or ())
    params, inputs, seeds, trees, top_names = list(graph.params), list(graph.inputs), {}, [], []
    for i, value in zip(wrt, tangent_values):
        slots = _wrt_slots(graph, i)
        leaves = _tangent_leaves(graph, i, value)
        index = {}
        for k, leaf in zip(slots, leaves):
            primal = graph.inputs[k]
            dtype = _tangent_dtype(graph, i, leaf, primal)
            arg = make("arg", (), (len(inputs), _fresh(f"t_{graph.params[k]}", taken), dtype,
                                   primal.shape))
            index[k] = len(inputs)
            params.append(arg.attrs[1])
            inputs.append(arg)
            seeds[primal] = cast(arg, primal.dtype)
        trees.append(map_tree(_param_tree(graph, i), index.__getitem__))
        top_names.append(_fresh(f"t_{tree_name(graph, i)}", taken))
    result.replaced_regions = {}   # primal results of regions -> those of the tangent regions
    tangent, origin = push_tangents(result, seeds)
    outs = [tangent.get(o) for o in graph.outputs]
    outs = [zeros_like(o) if t is None else t for o, t in zip(graph.outputs, outs)]
    n_guards = len(graph.guards)
    if result.replaced_regions:   # one loop computes value and tangent (and guards)
        both = list(graph.outputs) + outs + list(graph.guards.values())
        for _ in range(len(result.replaced_regions) + 1):   # a tangent loop may feed another
            rewritten = substitute(both, result.replaced_regions)
            if all(a is b for a, b in zip(rewritten, both)):
                break
            both = rewritten
        if n_guards:
            result.guards = dict(zip(graph.guards, both[len(both) - n_guards:]))
            both = both[:len(both) - n_guards]
        graph_outputs, outs = both[:len(graph.outputs)], both[len(graph.outputs):]
    else:
        graph_outputs = list(graph.outputs)
    del result.replaced_regions
    for o, t in zip(graph.outputs, outs):
        oname = graph.names.get(o)
        if oname and t.op not in ("arg", "const", "full"):
            result.names.setdefault(t, f"t_{oname}")
    result.grad_origin.update((n, s) for n, s in origin.items() if n not in result.grad_origin)
    n_out = len(graph.outputs)
    result.outputs = tuple(graph_outputs) + tuple(outs)
    result.out_tree = (graph.out_tree, map_tree(graph.out_tree, lambda k: k + n_out))
    result.params, result.inputs = tuple(params), tuple(inputs)
    if graph.in_tree is not None or any(is_node(t) for t in trees):
        result.in_tree = tuple(graph.in_tree or range(len(graph.params))) + tuple(trees)
        result.top_params = tuple(graph.top_params or graph.params) + tuple(top_names)
    return result


def build_jvp(function, values) -> tuple[Graph, list]:
    """A jvp Function's graph for ``values`` (the primal arguments, then one tangent per
    ``wrt`` argument): the forward pass over its parent's (simplified) graph."""
    parent = function._parent
    n = len(parent.params)
    for i, tangent in zip(function.wrt, values[n:]):
        if isinstance(values[i], (tuple, list, dict)) and (
                not isinstance(tangent, (tuple, list, dict))
                or walk_tree(values[i])[0] != walk_tree(tangent)[0]):
            raise TypeError(f"{function.__name__}: the tangent of '{parent.params[i]}' must have "
                            f"the argument's structure (containers, dict keys), got {tangent!r:.80}")
    entry = parent._compiled(list(values[:n]))
    graph = jvp_graph(entry.derivable, function.wrt, list(values[n:]), function.__name__)
    return graph, entry.captures


def tangent_params(params: tuple, wrt: tuple) -> tuple:
    """The names of a jvp Function's extra parameters: one tangent per ``wrt`` parameter."""
    taken = set(params)
    return tuple(_fresh(f"t_{params[i]}", taken) for i in wrt)


def trial_arguments(function, values: list) -> list:
    """Example arguments for showing a Function's code before any call: ``values`` for the
    Python function's parameters, then each jvp's tangents (copies of their arguments'
    examples), innermost transform first; an hvp's ``(x, v, *rest)`` with ``v`` a copy of
    ``x``'s example."""
    chain = []
    while function is not None:
        if function._kind in ("jvp", "hvp"):
            chain.append((function._kind, function.wrt))
        function = function._parent
    for kind, wrt in reversed(chain):
        if kind == "jvp":
            values = values + [values[i] for i in wrt]
        else:
            i = wrt[0]
            values = [values[i], values[i]] + values[:i] + values[i + 1:]
    return values


def _fresh(name: str, taken: set) -> str:
    """``name``, or ``name_2``, ``name_3``, ... where a parameter already has it (a jvp of a
    jvp has two tangents of ``x``)."""
    candidate, k = name, 2
    while candidate in taken:
        candidate, k = f"{name}_{k}", k + 1
    taken.add(candidate)
    return candidate


def _tangent_leaves(graph: Graph, i: int, value) -> list:
    """The data leaves of parameter ``i``'s tangent, in tree order; a clear error when its
    structure is not the parameter's."""
    tree = _param_tree(graph, i)
    if not is_node(tree):
        if isinstance(value, (tuple, list, dict)):
            raise TypeError(f"jvp: the tangent of '{tree_name(graph, i)}' is a "
                            f"{type(value).__name__}; the argument is an array or a float")
        return [value]
    plan = flat_plan((tree,))[0]
    leaves = walk_tree(value)[1] if isinstance(value, (tuple, list, dict)) else [value]
    if len(leaves) != len(plan):
        raise TypeError(f"jvp: the tangent of '{tree_name(graph, i)}' must have the argument's "
                        f"structure (a {type(value).__name__} was given)")
    return [leaves[p] for p in plan]


def _tangent_dtype(graph: Graph, i: int, leaf, primal: Node) -> str:
    """The dtype of a tangent leaf as the back end will receive it; a clear error for a
    non-float tangent or one whose shape is not the argument's."""
    where = f"jvp: the tangent of '{tree_name(graph, i)}'"
    if isinstance(leaf, (bool, int)) or not isinstance(leaf, (float, np.ndarray, np.generic)):
        raise TypeError(f"{where} must be a float or a float array, got {type(leaf).__name__}")
    dtype = np.asarray(leaf).dtype.name
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"{where} must be a float array, got dtype {dtype}")
    if np.shape(leaf) != primal.shape:
        raise ValueError(f"{where} has shape {np.shape(leaf)}; the argument has shape {primal.shape}")
    return dtype
