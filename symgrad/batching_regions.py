"""Batching rules for regions (``sg.vmap`` of code with loops and branches).

A batched loop carries every carry batched (an unbatched initial value is broadcast: simpler
than finding which carries the batch reaches, and cheap), slices batched per-iteration inputs
along their iteration axis (moved in front of the batch axis) and stacks its outputs as
``(n, batch, ...)``, moved back to ``(batch, n, ...)`` by its ``proj``. A branch on an unbatched
condition stays a branch over batched bodies; on a batched condition each example may take
another side, so both sides run and a select chooses per example: as a branch on ``True`` whose
body is that select (simplification then inlines it). The select's derivative keeps the side
not taken out (select sinking), as for ``np.where``.
"""
from __future__ import annotations

from . import ops
from .batching import RULES, batch_nodes, with_batch
from .ir import make
from .regions import close, placeholder


def _batched_params(params, flags, size):
    """Placeholders for the batched params: (explicit param list, param -> placeholder)."""
    mapping = {p: placeholder(p.dtype, (size,) + p.shape) for p, f in zip(params, flags) if f}
    return [mapping.get(p, p) for p in params], mapping


def _batched_results(body, mapping, size):
    """``body``'s results over the batched params, every one batched."""
    new, batched = batch_nodes(body.results, mapping, size)
    return [new[r] if r in batched else with_batch(r, False, size) for r in body.results]


def _loop(node, inputs, batched, size):
    body, trips, nc, nx, reverse = node.attrs
    inits = [with_batch(x, b, size) for x, b in zip(inputs[:nc], batched[:nc])]
    xs = [ops.transpose(x, (1, 0) + tuple(range(2, x.ndim))) if b else x
          for x, b in zip(inputs[nc:nc + nx], batched[nc:nc + nx])]
    flags = [False] + [True] * nc + list(batched[nc:])
    explicit, mapping = _batched_params(body.params, flags, size)
    results = _batched_results(body, mapping, size)
    new_body, captures, _ = close(explicit, results, hoist=True, names=body.names,
                                  derivative=body.derivative)
    return make("loop", (*inits, *xs, *inputs[nc + nx:], *captures),
                (new_body, trips, nc, nx, reverse))


def _cond(node, inputs, batched, size):
    then, other = node.attrs
    pred, operands, flags = inputs[0], list(inputs[1:]), list(batched[1:])
    explicit, mapping = _batched_params(then.params, flags, size)   # the sides' params agree
    a, b = _batched_results(then, mapping, size), _batched_results(other, mapping, size)
    if not batched[0]:
        bodies = [close(explicit, r, hoist=False, derivative=body.derivative)[0]
                  for r, body in zip((a, b), (then, other))]
        return make("cond", (pred, *operands), tuple(bodies))
    choice = placeholder("bool", pred.shape)
    chosen = [ops.where(ops.reshape(choice, (size,) + (1,) * (x.ndim - 1)), x, y)
              for x, y in zip(a, b)]
    body = close([choice, *explicit], chosen, hoist=False, derivative=True)[0]
    return make("cond", (ops.full((), True, "bool"), pred, *operands), (body, body))


def _proj(node, inputs, batched, size):
    (region,) = inputs
    out = make("proj", (region,), node.attrs)
    if region.op == "loop" and node.attrs[0] >= region.attrs[2]:   # stacked: (n, batch, ...)
        return ops.transpose(out, (1, 0) + tuple(range(2, out.ndim)))
    return out


RULES.update({"loop": _loop, "cond": _cond, "proj": _proj})
