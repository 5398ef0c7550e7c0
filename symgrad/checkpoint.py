"""``sg.checkpoint(fn)``: recompute instead of store (``jax.checkpoint`` / ``tf.recompute_grad``).

Called while tracing, a checkpointed function becomes one ``remat`` region
(``symgrad.regions``) whose body is ``fn`` traced over placeholders for its array arguments;
work that reads none of them (a closed-over weight's transpose, say) is done outside and
passed in. Its value is ``fn``'s. Reverse mode keeps none of ``fn``'s intermediates: the
backward pass is a second ``remat`` that recomputes them from ``fn``'s inputs
(``symgrad.region_autodiff.remat_vjp``); inside a loop the forward loop then stores only the
checkpoint's inputs per iteration, not every intermediate of the cell. Forward mode, vmap and
higher derivatives go through it like any region.

Back ends run the checkpoint itself inlined (:func:`lowerable`: the forward values are
ordinary nodes there, shared and fused like any) and each recomputation as a region of its own
(its body is closed, so hash-consing never merges it with the forward pass's nodes).
Called eagerly (outside a trace) a checkpointed function just calls ``fn``.
"""
from __future__ import annotations

import functools

from .ir import Graph, Node, make, substitute, toposort
from .regions import CHECKPOINT, Body, checkpointed, placeholder
from .runtime import replace_leaves
from .scope import InterpFunction, walk_nodes


class Checkpoint:
    """What ``sg.checkpoint`` makes of a function: the same function, recomputed (not
    stored) by reverse mode when it is called while tracing."""

    def __init__(self, fn):
        if isinstance(fn, Checkpoint):   # checkpointing twice is checkpointing once
            fn = fn.fn
        if not (callable(fn) or isinstance(fn, InterpFunction)):
            raise TypeError(f"sg.checkpoint: expected a function, got {type(fn).__name__} "
                            f"({fn!r})")
        if isinstance(fn, InterpFunction):
            self.__name__ = fn.__name__
        else:
            functools.update_wrapper(self, fn)
        self.fn = fn

    def __call__(self, *args, **kwargs):
        if isinstance(self.fn, InterpFunction):   # made while tracing, called outside of one
            raise TypeError(f"sg.checkpoint: {self.__name__} was defined inside a traced "
                            "function and can only be called there")
        return self.fn(*args, **kwargs)

    def __repr__(self):
        return f"<symgrad.checkpoint {self.__name__}>"


def checkpoint(fn=None, **options) -> Checkpoint:
    """``fn`` whose intermediates reverse mode recomputes from its inputs instead of storing
    them (``jax.checkpoint``, ``tf.recompute_grad``): memory for time. Use it on the cell of a
    long loop, ``h = sg.checkpoint(cell)(h, xs[t])``, so the forward loop stores only ``h``
    per step; or as a decorator (``@sg.checkpoint``). Values and derivatives (reverse, forward,
    any order, under vmap) are those of ``fn``. ``fn`` must be pure: it communicates through
    its arguments and its return value."""
    if options:
        raise TypeError(f"sg.checkpoint takes only the function; unsupported option(s): "
                        f"{', '.join(sorted(options))} (symgrad recomputes every intermediate "
                        "of the checkpointed function; there is no policy to choose)")
    if fn is None:
        raise TypeError("sg.checkpoint needs the function to checkpoint: write @sg.checkpoint "
                        "or sg.checkpoint(fn), not @sg.checkpoint()")
    return Checkpoint(fn)


def trace_call(tracer, cp: Checkpoint, args, kwargs, node):
    """The traced value of ``cp(*args, **kwargs)``: ``fn`` traced over placeholders for the
    traced leaves of its arguments, as a ``remat`` region on those leaves."""
    operands: list[Node] = []
    params: list[Node] = []

    def stand_in(value):
        if not isinstance(value, Node):
            return value
        ph = placeholder(value.dtype, value.shape)
        operands.append(value)
        params.append(ph)
        return ph

    inner_args = [replace_leaves(a, stand_in) for a in args]
    inner_kwargs = {k: replace_leaves(v, stand_in) for k, v in kwargs.items()}
    if not operands:   # nothing traced goes in: nothing to recompute from
        return tracer.call(cp.fn, list(args), dict(kwargs), node)
    tracer.open_guards()   # while loops inside: their guards are results of the region too
    try:
        result = tracer.call(cp.fn, inner_args, inner_kwargs, node)
    finally:
        guards = tracer.close_guards()
    leaves = list(dict.fromkeys(walk_nodes(result)))
    if not leaves and not guards:
        return result
    memo: dict = {}
    results = list(dict.fromkeys(leaves + list(guards.values())))
    outs = dict(zip(results, checkpointed(params, operands, results, memo)))
    for key, guard in guards.items():
        tracer.add_guard(key, outs[guard])
    for old, new in memo.items():   # the body's nodes cite the user's lines too
        if old in tracer.locs:
            tracer.locs.setdefault(new, tracer.locs[old])
    return replace_leaves(result, lambda v: outs[v] if isinstance(v, Node) else v)


# ----------------------------------------------------------------------------------------------
# What back ends run


def lowerable(graph: Graph) -> Graph:
    """``graph`` with each checkpoint (a ``remat`` of role ``checkpoint``) replaced by its body
    on its operands, in loop and branch bodies too; the recomputations of backward passes stay
    regions. ``graph`` itself when it has no checkpoint."""
    return graph.rewritten(_inline)


def _inline(outputs, memo: dict) -> list:
    """``outputs`` rebuilt with checkpoints inlined; bodies are rebuilt the same way (nesting
    depth is the source's)."""
    expanded: dict[Node, list] = {}
    for n in toposort(outputs):
        if n in memo:
            continue
        if n.op == "proj" and n.inputs[0] in expanded:
            memo[n] = expanded[n.inputs[0]][n.attrs[0]]
            continue
        inputs = tuple(memo[i] for i in n.inputs)
        attrs = tuple(Body(a.params, tuple(_inline(a.results, {})), a.names, a.derivative)
                      if isinstance(a, Body) else a for a in n.attrs)
        if n.op == "remat" and attrs[1] == CHECKPOINT:
            body = attrs[0]
            expanded[n] = substitute(body.results, dict(zip(body.params, inputs)))
            memo[n] = n   # read only through its projections
            continue
        same = all(x is y for x, y in zip(inputs, n.inputs)) and all(
            x is y or (isinstance(x, Body) and x == y) for x, y in zip(attrs, n.attrs))
        memo[n] = n if same else make(n.op, inputs, attrs)
    return [memo[o] for o in outputs]
