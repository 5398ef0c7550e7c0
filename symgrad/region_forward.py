"""Forward mode through regions (``symgrad.regions``): the tangents of a loop are carried by
the loop itself, beside the values they belong to.

A loop's tangent loop carries ``(*carries, *their tangents)``, reads ``(*rows, *their
tangents)`` per iteration and returns ``(*new carries, *their tangents, *ys, *their tangents)``;
its body is the primal body with the tangents pushed through it (``symgrad.forward``). It
replaces the primal loop (one loop computes both). Which carries have a tangent is a fixed
point: a carry whose update reads a value with a tangent gets one too. A branch's tangent
branch returns each side's results and their tangents, so the side not taken contributes
nothing, to the tangent either. A checkpoint's (``remat``) tangent checkpoint returns its
results and their tangents (forward mode stores nothing: it keeps its role).
"""
from __future__ import annotations

from .ir import Graph, Node, is_float, make
from .ops import zeros_like
from .regions import close, placeholder, rebuild_loop, results_of


def _push(push_tangents, body_results, seeds: dict) -> dict:
    """Tangents over a body's nodes (``push_tangents`` is ``symgrad.forward``'s pass)."""
    graph = Graph("body", (), (), tuple(body_results), 0)
    tangent, _ = push_tangents(graph, seeds)
    return tangent


def loop_jvp(node: Node, tangents: list, push_tangents):
    """(the tangent loop, {result index: tangent node}, {result index: primal node})."""
    body, n, nc, nx = node.attrs[:4]
    params, results = body.params, body.results
    carries, rows, consts = params[1:1 + nc], params[1 + nc:1 + nc + nx], params[1 + nc + nx:]
    t_init, t_xs = tangents[:nc], tangents[nc:nc + nx]
    t_k = tangents[nc + nx:nc + nx + len(consts)]   # (a trip count input has none)
    with_t = {k for k in range(nc) if t_init[k] is not None and is_float(carries[k].dtype)}
    seeds_fixed = {p: placeholder(p.dtype, p.shape) for p, t in zip(rows, t_xs) if t is not None}
    seeds_fixed.update({p: placeholder(p.dtype, p.shape) for p, t in zip(consts, t_k) if t is not None})
    carry_ph = {}
    while True:   # the carries a tangent reaches
        for k in with_t:
            carry_ph.setdefault(k, placeholder(carries[k].dtype, carries[k].shape))
        seeds = dict(seeds_fixed)
        seeds.update({carries[k]: carry_ph[k] for k in with_t})
        tangent = _push(push_tangents, results, seeds)
        more = {k for k in range(nc) if tangent.get(results[k]) is not None
                and is_float(carries[k].dtype)} - with_t
        if not more:
            break
        with_t |= more
    order_t = sorted(with_t)
    ys = results[nc:]
    y_t = [j for j, y in enumerate(ys) if tangent.get(y) is not None]

    def t_of(r):
        t = tangent.get(r)
        return t if t is not None else zeros_like(r)

    new_results = list(results[:nc]) + [t_of(results[k]) for k in order_t] + list(ys) + \
        [t_of(ys[j]) for j in y_t]
    # Params: the primal's, the carries' tangents after the carries, the rows' after the rows;
    # consts (and their tangents) come back as captures.
    row_t = [(p, seeds_fixed[p]) for p, t in zip(rows, t_xs) if t is not None]
    explicit = [params[0], *carries, *(carry_ph[k] for k in order_t), *rows, *(ph for _, ph in row_t)]
    names = tuple(body.names) + ("",) * (1 + nc - len(body.names)) if body.names else ()
    if names:
        names = names[:1 + nc] + tuple(f"t_{names[1 + k]}" if names[1 + k] else "" for k in order_t)
    inputs = [*node.inputs[:nc], *(t_init[k] if t_init[k] is not None else zeros_like(node.inputs[k])
                                   for k in order_t),
              *node.inputs[nc:nc + nx], *(t for t in t_xs if t is not None)]
    new = rebuild_loop(node, explicit, new_results, inputs, nc + len(order_t), names=names,
                       outer={seeds_fixed[p]: t for p, t in zip(consts, t_k) if t is not None})
    outs = results_of(new)
    nt = len(order_t)
    primal = {k: outs[k] for k in range(nc)}
    primal.update({nc + j: outs[nc + nt + j] for j in range(len(ys))})
    tangent_of = {k: outs[nc + i] for i, k in enumerate(order_t)}
    tangent_of.update({nc + j: outs[nc + nt + len(ys) + i] for i, j in enumerate(y_t)})
    return new, tangent_of, primal


def cond_jvp(node: Node, tangents: list, push_tangents):
    """(the tangent branch, {result index: tangent}, {result index: primal})."""
    then, other = node.attrs
    operands = node.inputs[1:]
    t_ops = tangents[1:]
    phs = {p: placeholder(p.dtype, p.shape) for p, t in zip(then.params, t_ops) if t is not None}
    sides = []
    for body in (then, other):
        tangent = _push(push_tangents, body.results, dict(phs))
        sides.append([tangent.get(r) for r in body.results])
    floats = [k for k, r in enumerate(then.results) if is_float(r.dtype) and
              (sides[0][k] is not None or sides[1][k] is not None)]
    explicit = list(then.params) + list(phs.values())
    bodies = []
    for body, t in zip((then, other), sides):
        results = list(body.results) + [t[k] if t[k] is not None else zeros_like(body.results[k])
                                        for k in floats]
        bodies.append(close(explicit, results, hoist=False, derivative=body.derivative)[0])
    new = make("cond", (node.inputs[0], *operands, *(t for t in t_ops if t is not None)),
               tuple(bodies))
    outs = results_of(new)
    count = len(then.results)
    primal = {k: outs[k] for k in range(count)}
    tangent_of = {k: outs[count + i] for i, k in enumerate(floats)}
    return new, tangent_of, primal


def remat_jvp(node: Node, tangents: list, push_tangents):
    """(the tangent checkpoint, {result index: tangent}, {result index: primal})."""
    body, role = node.attrs
    phs = {p: placeholder(p.dtype, p.shape) for p, t in zip(body.params, tangents) if t is not None}
    tangent = _push(push_tangents, body.results, dict(phs))
    floats = [k for k, r in enumerate(body.results) if is_float(r.dtype) and
              tangent.get(r) is not None]
    results = list(body.results) + [tangent[body.results[k]] for k in floats]
    new_body = close(list(body.params) + list(phs.values()), results, hoist=False,
                     names=body.names, derivative=body.derivative)[0]
    new = make("remat", (*node.inputs, *(t for t in tangents if t is not None)), (new_body, role))
    outs = results_of(new)
    count = len(body.results)
    primal = {k: outs[k] for k in range(count)}
    tangent_of = {k: outs[count + i] for i, k in enumerate(floats)}
    return new, tangent_of, primal
