"""Reverse mode: walk the DAG backwards, accumulate cotangents, emit derivative IR.

Cotangents are IR nodes; ``None`` is a structural zero, so terms through ``stop_gradient``,
comparisons, ``sign`` and integer data never appear in the generated code. The gradient is
that of the sum of all outputs (TensorFlow's ``tf.gradients`` convention): every float output
is seeded with ones of its shape. Broadcasting is undone in one place (``unbroadcast``).
"""
from __future__ import annotations

from .ir import OPS, Graph, Node, is_float, label_new, make, substitute, toposort
from .ops import add, cast, div, full, reduce, unbroadcast, zeros_like
from .region_autodiff import apply_replacements, cond_vjp, loop_vjp, remat_vjp
from .regions import TUPLE
from .runtime import StaticLeaf, is_node, map_tree, tree_leaves, tree_paths


def active_nodes(order: list[Node], wrt: set[Node]) -> set[Node]:
    """Nodes whose value depends differentiably on a ``wrt`` node (a region node's results
    count as one value)."""
    active: set[Node] = set()
    for node in order:
        if node in wrt or (OPS[node.op].vjp is not None and
                           (is_float(node.dtype) or node.dtype == TUPLE)
                           and any(i in active for i in node.inputs)):
            active.add(node)
    return active


_REGION_VJPS = {"loop": loop_vjp, "cond": cond_vjp, "remat": remat_vjp}


def reverse_pass(outputs, seeds, wrt, graph: Graph | None = None, origin: dict | None = None):
    """The core of reverse mode over the DAG of ``outputs``: ``seeds`` are (node, cotangent)
    pairs; returns the cotangent of every node reached and the primal loops to be replaced by
    their augmented forms (``symgrad.region_autodiff``). With ``graph``, the user's names
    become ``b_<name>`` and the cut terms of ``stop_gradient`` are recorded."""
    order = toposort(outputs)
    active = active_nodes(order, set(wrt))
    cotangent: dict[Node, Node] = {}
    region_cts: dict[Node, dict] = {}
    replaced: dict[Node, Node] = {}
    origin = {} if origin is None else origin
    known = graph.locs if graph is not None else {}

    def accumulate(node: Node, g: Node, source: Node):
        g = cast(unbroadcast(g, node.shape), node.dtype)
        label_new(g, origin, source, known=known)
        cotangent[node] = g if node not in cotangent else add(cotangent[node], g)
        origin.setdefault(cotangent[node], source)

    for out, g in seeds:
        if out in active and g is not None:
            accumulate(out, g, out)
    for node in reversed(order):
        if node.op in _REGION_VJPS:
            cts = region_cts.get(node)
            if not cts:
                continue
            grads, aug = _REGION_VJPS[node.op](node, cts, reverse_pass)
            if aug is not None:
                replaced[node] = aug
        else:
            g = cotangent.get(node)
            if graph is not None and node.op == "stop_gradient":   # for f.grad.stopped()
                graph.stopped.setdefault(node, g)
            if g is None or node.op in ("arg", "param"):
                continue
            if node.op == "proj":
                region_cts.setdefault(node.inputs[0], {})[node.attrs[0]] = g
                continue
            name = graph.names.get(node) if graph is not None else None
            if name and g not in graph.names and g.op not in ("const", "full", "arg"):
                graph.names[g] = f"b_{name}"
            through = _THROUGH_VJPS.get(node.op)
            found = through(g, node, active) if through is not None else None
            if found is None:
                grads = OPS[node.op].vjp(g, node)
            else:                        # terms that skip an overflowing intermediate
                grads, further = found
                for inp, gi in further:
                    accumulate(inp, gi, node)
        for inp, gi in zip(node.inputs, grads):
            if gi is not None and inp in active:
                accumulate(inp, gi, node)
    return cotangent, replaced


# -- 1 / (c + exp(u)): the logistic function and its spellings ------------------------------
# The chain rule through the denominator b = c + exp(u) multiplies d n/d b = -a/b**2, which
# underflows to 0 where exp(u) overflows, by d exp(u)/du = exp(u) = inf: 0 * inf = nan (the
# naive sigmoid 1/(1 + np.exp(-x)) at x <= -710). The path's product has the finite closed form
#     d n/du = k * n * exp(u) / b = k * n * (1 - c / b)
# (k = -1 for a / b, the exponent for b ** k): for the sigmoid s = 1 / (1 + exp(-x)) that is
# -s * (1 - s) * du, JAX's logistic rule, from values the forward pass has (1 / b is s itself:
# no new exp). c / b is of the same shape, so its own derivative takes this path again (second
# order stays finite too). The term goes to u directly; b and exp(u) get nothing from this node
# (their other uses still count). Where exp(u) is far below c, 1 - c / b keeps absolute, not
# relative, accuracy (s'(40) is 0 rather than 4e-18), as JAX's rule does.

def _exp_denominator(b: Node):
    """``(c, u)`` where ``b`` is ``c + exp(u)`` (either order) with ``c`` a positive scalar
    constant, else None."""
    if b.op != "add":
        return None
    for c, e in (b.inputs, b.inputs[::-1]):
        if e.op == "exp" and c.op in ("const", "full") and isinstance(c.attrs[0], (int, float)) \
                and c.attrs[0] > 0:
            return c, e.inputs[0]
    return None


def _logistic_factor(c: Node, b: Node) -> Node:
    """exp(u) / (c + exp(u)) = 1 - c / b, finite everywhere (1 where exp(u) overflows)."""
    return 1 - div(c, b)


def _logistic_parts(n: Node):
    """``(c, u, b, k, a)`` where ``n`` is ``a / b`` (k None: -1) or ``b ** k`` (k a negative
    scalar constant, a None) with ``b = c + exp(u)``, else None."""
    if n.op == "div":
        (a, b), k = n.inputs, None
    elif n.op == "pow":
        (b, k), a = n.inputs, None
        if k.op not in ("const", "full") or not isinstance(k.attrs[0], (int, float)) or \
                k.attrs[0] >= 0:
            return None
    else:
        return None
    found = _exp_denominator(b)
    return None if found is None else (*found, b, k, a)


def _logistic_vjp(g: Node, n: Node, active):
    parts = _logistic_parts(n)
    if parts is None or parts[1] not in active:
        return None
    c, u, b, k, a = parts
    if k is None:
        return (g / b if a in active else None, None), [(u, -g * n * _logistic_factor(c, b))]
    return (None, None), [(u, g * k * n * _logistic_factor(c, b))]


_THROUGH_VJPS = {"div": _logistic_vjp, "pow": _logistic_vjp}


def through_jvp(node: Node, tangents: dict):
    """Forward mode's form of the same rule (``symgrad.forward``): the tangent of
    ``a / (c + exp(u))`` or ``(c + exp(u)) ** k`` from the tangents of ``a`` and ``u`` (that of
    the denominator is ``exp(u) * t_u``, nothing else, ``c`` being constant); NotImplemented
    for any other node."""
    parts = _logistic_parts(node)
    if parts is None:
        return NotImplemented
    c, u, base, k, a = parts
    scale = -1 if k is None else k
    terms = []
    if tangents.get(u) is not None:
        terms.append(scale * node * _logistic_factor(c, base) * tangents[u])
    if a is not None and tangents.get(a) is not None:
        terms.append(tangents[a] / base)
    return None if not terms else terms[0] if len(terms) == 1 else add(terms[0], terms[1])


def backward(graph: Graph, wrt: list[Node], seeds=None) -> tuple[list[Node], dict[Node, Node]]:
    """Cotangents of ``sum(outputs)`` for each ``wrt`` node, and the node each derivative term
    came from (for the generated code's ``# grad of line ...`` comments). Primal loops in
    ``graph.outputs`` are replaced by their augmented forms (they store what the backward
    loops read). ``seeds``, (output, cotangent) pairs, replace the ones of the sum: a
    vector-Jacobian product (``symgrad.jacobian``)."""
    origin: dict[Node, Node] = {}
    if seeds is None:
        seeds = [(out, full(out.shape, 1, out.dtype)) for out in graph.outputs]
    cotangent, replaced = reverse_pass(graph.outputs, seeds, wrt, graph, origin)
    grads = [cotangent.get(x) if cotangent.get(x) is not None else zeros_like(x) for x in wrt]
    if replaced:
        n_out, n_grads = len(graph.outputs), len(grads)
        # the guards of while loops read the augmented loops too (one loop runs, not two)
        both = apply_replacements(list(graph.outputs) + grads + list(graph.guards.values()),
                                  replaced)
        graph.outputs, grads = tuple(both[:n_out]), both[n_out:n_out + n_grads]
        graph.guards = dict(zip(graph.guards, both[n_out + n_grads:]))
        # an augmented loop is the user's loop (its comment cites their line, not "grad of")
        where = {aug.attrs[0]: graph.locs[p] for p, aug in replaced.items() if p in graph.locs}
        for n in toposort(both):
            if n.op == "loop" and n.attrs[0] in where:
                graph.locs[n] = where[n.attrs[0]]
                graph.grad_origin.pop(n, None)
    return grads, origin


def grad_graph(graph: Graph, wrt: tuple, single: bool, with_value: bool) -> Graph:
    """The graph of the gradient of ``graph`` with respect to parameter indices ``wrt``;
    ``single`` returns one gradient rather than a tuple; ``with_value`` prepends the value."""
    slots = [k for i in wrt for k in _wrt_slots(graph, i)]
    nodes = [graph.inputs[k] for k in slots]
    prefix = "value_and_grad_" if with_value else "grad_"
    result = graph.derive(prefix + graph.name, graph.outputs, graph.out_tree)
    result.stopped = {}   # what this pass's stop_gradients remove (not an inner derivative's)
    grads, origin = backward(result, nodes)
    for k, g in zip(slots, grads):
        if g.op not in ("arg", "const", "full"):
            result.names[g] = f"b_{graph.params[k]}"
    result.grad_origin.update((n, s) for n, s in origin.items() if n not in result.grad_origin)
    k = len(graph.outputs) if with_value else 0
    position = {slot: k + j for j, slot in enumerate(slots)}
    trees = [map_tree(_param_tree(graph, i), position.__getitem__) for i in wrt]
    grad_tree = trees[0] if single else tuple(trees)
    result.outputs = (tuple(result.outputs) if with_value else ()) + tuple(grads)
    result.out_tree = (graph.out_tree, grad_tree) if with_value else grad_tree
    return result


def _param_tree(graph: Graph, i: int):
    """Parameter ``i``'s input index, or its pytree of input indices and static leaves."""
    return i if graph.in_tree is None else graph.in_tree[i]


def _wrt_slots(graph: Graph, i: int) -> list[int]:
    """The inputs the gradient with respect to parameter ``i`` is taken for, in tree order;
    a clear TypeError where one is static or not a float (the gradient of a pytree has
    the pytree's structure, so none may be left out)."""
    tree = _param_tree(graph, i)
    slots = tree_leaves(tree)
    for k in slots:
        x = None if isinstance(k, StaticLeaf) else graph.inputs[k]
        if x is not None and is_float(x.dtype):
            continue
        kind = "static (int/bool/str/None)" if x is None else f"{x.dtype} data"
        if is_node(tree):
            name = tree_name(graph, i)
            leaf = k if isinstance(k, StaticLeaf) else _leaf_path(graph, i, k)
            raise TypeError(f"cannot differentiate with respect to argument '{name}': its leaf "
                            f"{leaf} is {kind}, not a float")
        raise TypeError(f"cannot differentiate with respect to argument "
                        f"'{graph.params[k]}': it is {kind}, not a float")
    return slots


def tree_name(graph: Graph, i: int) -> str:
    """The Python name of parameter ``i`` (``graph.params`` names the flat leaves)."""
    return graph.top_params[i] if graph.top_params is not None else graph.params[i]


def _leaf_path(graph: Graph, i: int, slot: int) -> str:
    tree = graph.in_tree[i]
    return dict(zip(tree_leaves(tree), tree_paths(tree, tree_name(graph, i))))[slot]


def hvp_graph(grad: Graph, wrt: int, name: str) -> Graph:
    """The Hessian-vector product ``H(x) @ v`` from ``grad``, the graph of the gradient with
    respect to parameter ``wrt`` (x): the gradient of ``<grad(x), v>`` with respect to x, its
    parameters reordered to ``(x, v, *rest)``."""
    if grad.in_tree is not None:
        return _hvp_tree_graph(grad, wrt, name)
    (b_x,) = grad.outputs
    v = make("arg", (), (len(grad.params), "v", b_x.dtype, b_x.shape))
    inner = grad.derive(grad.name, (reduce("sum", b_x * v),), 0)
    inner.params, inner.inputs = grad.params + ("v",), grad.inputs + (v,)
    out = grad_graph(inner, (wrt,), True, False)
    # Reorder the parameters to (x, v, *rest): new arg nodes whose index is their position.
    order = [wrt, len(grad.params)] + [k for k in range(len(grad.params)) if k != wrt]
    mapping, inputs = {}, []
    for position, k in enumerate(order):
        old = inner.inputs[k]
        new = None if old is None else make("arg", (), (position,) + old.attrs[1:])
        if old is not None:
            mapping[old] = new
        inputs.append(new)
    _substitute_all(out, mapping)
    out.params = tuple(inner.params[k] for k in order)
    out.inputs = tuple(inputs)
    out.names = {mapping.get(n, n): v for n, v in out.names.items()}
    out.name = name
    return out


def _hvp_tree_graph(grad: Graph, wrt: int, name: str) -> Graph:
    """``hvp_graph`` where the arguments are pytrees: ``v`` has the structure of x (one
    tangent leaf per data leaf of x), the parameters become ``(x, v, *rest)``."""
    slots = _wrt_slots(grad, wrt)
    x_tree = grad.in_tree[wrt]
    paths = dict(zip(tree_leaves(x_tree), tree_paths(x_tree, "v")))
    vs = {}
    for k, b in zip(slots, grad.outputs):
        vs[k] = make("arg", (), (len(grad.params) + len(vs), paths[k].replace("[", "_").replace(
            "]", "").replace("'", "").replace(".", "_"), b.dtype, b.shape))
    objective = None
    for k, b in zip(slots, grad.outputs):
        term = reduce("sum", b * vs[k])
        objective = term if objective is None else add(objective, term)
    inner = grad.derive(grad.name, (objective,), 0)
    inner.params = grad.params + tuple(v.attrs[1] for v in vs.values())
    inner.inputs = grad.inputs + tuple(vs.values())
    v_tree = map_tree(x_tree, lambda k: vs[k].attrs[0] if k in vs else k)
    inner.in_tree = tuple(grad.in_tree) + (v_tree,)
    inner.top_params = tuple(grad.top_params) + ("v",)
    out = grad_graph(inner, (wrt,), True, False)
    # Reorder to (x, v, *rest): every flat input renumbered by its new position.
    n_top = len(inner.in_tree)
    order = [wrt, n_top - 1] + [t for t in range(n_top - 1) if t != wrt]
    position, mapping, inputs, params = {}, {}, [], []
    for t in order:
        for k in tree_leaves(inner.in_tree[t]) if is_node(inner.in_tree[t]) else [inner.in_tree[t]]:
            if isinstance(k, StaticLeaf):
                continue
            old = inner.inputs[k]
            position[k] = len(inputs)
            new = None if old is None else make("arg", (), (len(inputs),) + old.attrs[1:])
            if old is not None:
                mapping[old] = new
            inputs.append(new)
            params.append(inner.params[k])
    _substitute_all(out, mapping)
    out.inputs, out.params = tuple(inputs), tuple(params)
    out.in_tree = tuple(map_tree(inner.in_tree[t], lambda k: k if isinstance(k, StaticLeaf)
                                 else position[k]) for t in order)
    out.top_params = tuple(inner.top_params[t] for t in order)
    out.names = {mapping.get(n, n): v for n, v in out.names.items()}
    out.name = name
    return out


def _substitute_all(graph: Graph, mapping: dict) -> None:
    """Replace nodes in ``graph``'s outputs and in its guards (``symgrad.guards``)."""
    n_out = len(graph.outputs)
    both = substitute(list(graph.outputs) + list(graph.guards.values()), mapping)
    graph.outputs, graph.guards = tuple(both[:n_out]), dict(zip(graph.guards, both[n_out:]))
