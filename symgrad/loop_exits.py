"""Loops without an early exit, for back ends that run every iteration (the PTX launch
sequence, the straight-line expansion): a loop that stops once its done flag is set
(``("until", k, c)``, ``symgrad.regions``) or runs only its first ``m`` iterations
(``("count",)``) becomes a loop of the same results over all its iterations, each iteration
the exit would skip keeping the carries (and stacking zeros), by a branch that does not run
the body there.
"""
from __future__ import annotations

from .ir import Graph, Node, make, substitute, toposort
from .ops import logical_not, lt, zeros_like
from .regions import COUNT, REGION_OPS, Body, cond, loop_count, loop_exit, placeholder, rebuild_loop


def plain_loop(loop: Node) -> Node:
    """A loop of the same results that runs all its iterations (for a back end without early
    exits): an iteration that the exit would skip keeps the carries (and stacks zeros), by a
    branch that does not run the body. (Past a triangular loop's count,
    ``symgrad.loop_plan.Span``, its index is outside the range: the body would index past the
    end of the arrays, or divide by a zero distance; past a done flag, the loop's own test
    said stop.)"""
    body, _trips, nc, nx, _reverse, exit_ = loop.attrs
    params = body.params
    if exit_ == (COUNT,):
        bound = placeholder("int64", ())
        live, outer = lt(params[0], bound), {bound: loop_count(loop)}
    else:
        live, outer = logical_not(params[1 + exit_[1]]), {}
    kept = [*params[1:1 + nc], *(zeros_like(y) for y in body.results[nc:])]
    results = cond(live, list(body.results), kept, outer=set(params) | set(outer))
    return rebuild_loop(loop, list(params[:1 + nc + nx]), results, list(loop.inputs[:nc + nx]),
                        nc, outer=outer, exit=None)


def without_exits(graph):
    """``graph`` itself, or (when a loop of it exits early) a copy whose loops run every
    iteration (``plain_loop``; in loop and branch bodies too)."""
    outputs = list(graph.outputs)
    changed = False
    while True:
        order = toposort(outputs)
        region = next((n for n in order if n.op == "loop" and loop_exit(n) is not None), None)
        if region is None:
            region = next((n for n in order if n.op in REGION_OPS and _body_exits(n)), None)
            if region is None:
                break
            new = _bodies_without_exits(region)
        else:
            new = plain_loop(region)
        changed = True
        count = len(region.attrs[0].results)
        outputs = substitute(outputs, {make("proj", (region,), (k,)): make("proj", (new,), (k,))
                                       for k in range(count)})
    return graph.derive(graph.name, outputs, graph.out_tree) if changed else graph


def _body_exits(region: Node) -> bool:
    """Whether a loop inside ``region``'s bodies (at any depth: a branch's bodies in a loop
    body too) exits early."""
    stack = [region]
    while stack:
        node = stack.pop()
        for body in node.attrs:
            if isinstance(body, Body):
                for m in toposort(body.results):
                    if m.op == "loop" and loop_exit(m) is not None:
                        return True
                    if m.op in REGION_OPS:
                        stack.append(m)
    return False


def _bodies_without_exits(region: Node) -> Node:
    attrs = []
    for a in region.attrs:
        if isinstance(a, Body):
            inner = without_exits(Graph("body", (), (), tuple(a.results), 0))
            a = Body(a.params, tuple(inner.outputs), a.names, a.derivative)
        attrs.append(a)
    return make(region.op, region.inputs, tuple(attrs))
