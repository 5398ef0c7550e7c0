"""Reverse mode through regions (``symgrad.regions``).

A loop's backward pass is a reversed loop over values the forward loop stored (no run-time
tape: each stored value is a stacked output, preallocated from the trip count):

1. the body is differentiated symbolically (cotangents of its results are placeholders);
2. the forward-body values that derivative reads (its *residuals*: carries at the start of an
   iteration, activations, ...) become extra stacked outputs of an *augmented* forward loop,
   which replaces the original everywhere (one forward loop computes both);
3. the backward loop runs ``i = n-1, ..., 0`` with the cotangents of the carries as its carries,
   the cotangents of loop-invariant inputs accumulated as further carries, and the residual
   rows, the ys' cotangent rows and the xs' rows as its per-iteration inputs; the xs'
   cotangents are its stacked outputs. A gather's cotangent (``x[j]`` of a loop-invariant
   ``x``: a scatter of one row) is no accumulated carry, whose update would pass over all of
   ``x`` every iteration: its values and indices are stacked outputs too, scattered once
   after the loop. The backward loop of a loop that exits early (a
   ``while`` or ``break`` on data) runs only as many iterations as the forward loop counted
   (its ``("count",)`` exit), so the stored rows of iterations that never ran are never read.

A branch differentiates only the taken side: its backward is a branch on the same condition
whose bodies are the two sides' derivatives (each recomputing its side's forward values).
A checkpoint (``remat``, ``sg.checkpoint``) stores nothing: its backward is a second
``remat`` over the checkpoint's operands and the cotangents of its results, whose body
recomputes the checkpointed values and applies their VJP (those values live only inside it).
Higher derivatives need nothing more: the backward loop is a loop like any other.
"""
from __future__ import annotations

from .ir import Node, is_float, make, substitute, toposort
from .ops import add, scatter_add, transpose, zeros_like
from .regions import COUNT, RECOMPUTE, UNTIL, close, loop_consts, loop_count, placeholder, results_of

_KEEP = ("const", "full", "array", "arange")


def apply_replacements(nodes, replaced: dict) -> list[Node]:
    """``nodes`` with each primal loop replaced by its augmented loop, the augmented loops'
    own inputs replaced too (a loop may feed another)."""
    if not replaced:
        return list(nodes)
    final: dict = {}
    primal_of = {aug: primal for primal, aug in replaced.items()}
    for n in toposort(list(replaced.values()) + list(nodes)):
        primal = n if n in replaced else primal_of.get(n)
        if primal is not None and primal not in final:
            aug = replaced[primal]
            node = make(aug.op, substitute(aug.inputs, final), aug.attrs)
            final[primal] = final[aug] = node
    return substitute(list(nodes), final)


def _body_vjp(reverse_pass, params, results, seeds):
    """Cotangents of ``params`` (None: zero) given ``seeds`` (result -> cotangent node), and the
    results with inner loops replaced by their augmented forms."""
    wrt = [p for p in params if is_float(p.dtype)]
    cotangent, replaced = reverse_pass(list(results), list(seeds.items()), wrt)
    grads = [cotangent.get(p) if is_float(p.dtype) else None for p in params]
    fwd = apply_replacements(results, replaced)
    grads = [None if g is None else apply_replacements([g], replaced)[0] for g in grads]
    return grads, fwd


def loop_vjp(node: Node, cts: dict, reverse_pass):
    """Cotangents of a loop's inputs from those of its results (``cts``: result index -> node),
    and the augmented forward loop that replaces ``node``."""
    body, n, nc, nx, reverse, exit_ = node.attrs
    params, results = body.params, body.results
    index, carries = params[0], params[1:1 + nc]
    rows, consts = params[1 + nc:1 + nc + nx], params[1 + nc + nx:]
    inits, xs = node.inputs[:nc], node.inputs[nc:nc + nx]
    outer_consts = loop_consts(node)
    float_carry = [is_float(c.dtype) for c in carries]
    # 1. the body's derivative over placeholders for its results' cotangents
    g_next = [placeholder(c.dtype, c.shape) if f else None for c, f in zip(carries, float_carry)]
    y_rows = results[nc:]
    g_y = [placeholder(y.dtype, y.shape) if (nc + k) in cts and is_float(y.dtype) else None
           for k, y in enumerate(y_rows)]
    grads, fwd = _body_vjp(reverse_pass, params, results, _accumulated(results, g_next + g_y))
    g_carry, g_rows, g_consts = grads[1:1 + nc], grads[1 + nc:1 + nc + nx], grads[1 + nc + nx:]
    # 2. residuals: forward values the derivative reads
    bwd_outputs = [g for g in grads if g is not None]
    residuals = _residuals(bwd_outputs, set(toposort(fwd)), {index, *rows, *consts},
                           set(carries) | set(rows))
    aug_body = type(body)(params, tuple(fwd) + tuple(residuals), body.names, body.derivative)
    aug = make("loop", node.inputs, (aug_body, n, nc, nx, reverse, exit_))
    aug_outs = results_of(aug)
    stacks = aug_outs[len(results):]
    # 3. the backward loop
    b_index = placeholder("int64")
    res_rows = [placeholder(r.dtype, r.shape) for r in residuals]
    x_rows = [placeholder(r.dtype, r.shape) for r in rows]
    mapping = {index: b_index, **dict(zip(residuals, res_rows)), **dict(zip(rows, x_rows)),
               **dict(zip(consts, outer_consts))}

    def rebuilt(g, like):
        return substitute([g], mapping)[0] if g is not None else zeros_like(like)

    gy_used = [(ph, cts[nc + k]) for k, ph in enumerate(g_y) if ph is not None]
    b_rows = [ph for ph, _ in gy_used] + res_rows + x_rows
    # A loop-invariant input's cotangent: its scattered terms (a gather's, x[j]) stacked per
    # iteration and scattered once after the loop, the rest accumulated in a carry.
    varying = {b_index, *(g for g in g_next if g is not None), *b_rows}
    split = [_scattered_terms(rebuilt(g, k), varying, n) if g is not None else (None, [])
             for g, k in zip(g_consts, consts)]
    acc = [placeholder(k.dtype, k.shape) if rest is not None else None
           for k, (rest, _) in zip(consts, split)]
    b_carries = [g for g in g_next if g is not None] + [a for a in acc if a is not None]
    b_new = [rebuilt(g, c) for g, c, f in zip(g_carry, carries, float_carry) if f]
    b_new += [add(a, rest) for a, (rest, _) in zip(acc, split) if a is not None]
    b_inits = [cts.get(k) if cts.get(k) is not None else zeros_like(inits[k])
               for k in range(nc) if float_carry[k]]
    b_inits += [zeros_like(k) for a, k in zip(acc, outer_consts) if a is not None]
    b_xs = [g for _, g in gy_used] + stacks + list(xs)
    b_ys = [rebuilt(g, r) for g, r in zip(g_rows, rows)]
    b_ys += [v for _, terms in split for t in terms for v in t.inputs]
    carry_names = list(body.names[1:1 + nc]) + [None] * nc
    names = ["i"] + [f"b_{nm}" if nm else None for nm, f in zip(carry_names, float_carry) if f]
    names += [f"b_{k.attrs[1]}" if k.op == "arg" else None
              for a, k in zip(acc, outer_consts) if a is not None]
    body_b, b_consts, _ = close([b_index, *b_carries, *b_rows], [*b_new, *b_ys], hoist=True,
                                derivative=True, names=tuple(names))
    # The backward loop walks the iterations that ran: as many as the forward loop counted
    # (an early exit) or was given (the backward loop of a backward loop).
    count = make("proj", (aug,), (exit_[2],)) if exit_ is not None and exit_[0] == UNTIL \
        else loop_count(node)
    back = make("loop", (*b_inits, *b_xs, *b_consts, *(() if count is None else (count,))),
                (body_b, n, len(b_carries), len(b_rows), not reverse,
                 None if count is None else (COUNT,)))
    outs = results_of(back)
    carry_out, ys_out = outs[:len(b_carries)], outs[len(b_carries):]
    grads_in = []
    it = iter(carry_out)
    for k in range(nc):
        grads_in.append(next(it) if float_carry[k] else None)
    g_xs = [y if g is not None else None for y, g in zip(ys_out, g_rows)]
    stacked = iter(ys_out[len(rows):])
    g_k = []
    for a, (_, terms) in zip(acc, split):
        parts = [next(it)] if a is not None else []
        parts += [_scatter_rows(t, next(stacked), next(stacked)) for t in terms]
        g_k.append(None if not parts else parts[0] if len(parts) == 1 else sum_of(parts))
    return grads_in + g_xs + g_k + ([None] if exit_ == (COUNT,) else []), aug


# Forward values the backward body recomputes from their operand rather than storing: a
# reshaped, broadcast or negated copy costs nothing to rebuild and as much to store.
_RECOMPUTED = ("reshape", "broadcast_to", "transpose", "neg", "cast", "getitem")


def _residuals(bwd_outputs, forward_set: set, given: set, state: set) -> list[Node]:
    """The forward-body values the backward body reads that it must be given per iteration
    (the params given anyway, numbers, cheap copies of other values and values computed from
    the index and loop-invariant inputs alone (``state``: the carries and rows) excepted)."""
    # The stored values of an inner loop's augmented form are forward values too (the
    # forward body runs that loop; only its primal results were reachable from the results).
    forward_set = forward_set | {m for m in toposort(bwd_outputs)
                                 if m.op == "proj" and m.inputs[0] in forward_set}
    stateful: set = set()
    for m in toposort(list(forward_set)):
        if m in state or any(i in stateful for i in m.inputs):
            stateful.add(m)
    wanted: dict[Node, None] = {}
    pending = [i for m in toposort(bwd_outputs) if m not in forward_set
               for i in m.inputs if i in forward_set]
    pending += [g for g in bwd_outputs if g in forward_set]
    while pending:
        m = pending.pop(0)
        if m in given or m.op in _KEEP or m in wanted or m not in stateful:
            continue
        if m.op in _RECOMPUTED and len(m.inputs) == 1:
            pending.append(m.inputs[0])
            continue
        wanted.setdefault(m)
    return list(wanted)


def _accumulated(results, phs) -> dict:
    """Seeds for results that appear twice (a carry returned unchanged as a y too) add up."""
    out: dict = {}
    for r, g in zip(results, phs):
        if g is not None:
            out[r] = g if r not in out else add(out[r], g)
    return out


def cond_vjp(node: Node, cts: dict, reverse_pass):
    """A branch's cotangents: a branch on the same condition over the two sides' derivatives."""
    then, other = node.attrs
    pred, operands = node.inputs[0], node.inputs[1:]
    sides = []
    g_phs = [placeholder(r.dtype, r.shape) if k in cts and is_float(r.dtype) else None
             for k, r in enumerate(then.results)]
    floats = [k for k, p in enumerate(then.params) if is_float(p.dtype)]
    for body in (then, other):
        seeds = _accumulated(body.results, g_phs)
        grads, _ = _body_vjp(reverse_pass, body.params, body.results, seeds)
        sides.append([grads[k] if grads[k] is not None else zeros_like(body.params[k])
                      for k in floats])
    used = [ph for ph in g_phs if ph is not None]
    # Each side's derivative reads the side's params (the operands) and the cotangents.
    ops_then = list(then.params) + used
    ops_else = list(other.params) + used
    b_then, e1, _ = close(ops_then, sides[0], hoist=False, derivative=True)
    b_else, e2, _ = close(ops_else, sides[1], hoist=False, derivative=True)
    assert not e1 and not e2
    ct_values = [cts[k] for k, ph in enumerate(g_phs) if ph is not None]
    back = make("cond", (pred, *operands, *ct_values), (b_then, b_else))
    grads = dict(zip(floats, results_of(back)))
    return [None] + [grads.get(k) for k in range(len(operands))], None


def remat_vjp(node: Node, cts: dict, reverse_pass):
    """A checkpoint's cotangents: a ``remat`` (role ``recompute``) on the checkpoint's
    operands and the cotangents of its results whose body is the derivative of the
    checkpoint's body (recomputing the forward values it reads). The body is closed without
    hoisting: the recomputation stays inside, never shared with the forward pass's nodes."""
    body = node.attrs[0]
    g_phs = [placeholder(r.dtype, r.shape) if k in cts and is_float(r.dtype) else None
             for k, r in enumerate(body.results)]
    grads, _ = _body_vjp(reverse_pass, body.params, body.results, _accumulated(body.results, g_phs))
    reached = [k for k, g in enumerate(grads) if g is not None]
    if not reached:
        return [None] * len(node.inputs), None
    used = [ph for ph in g_phs if ph is not None]
    back_body, extra, _ = close(list(body.params) + used, [grads[k] for k in reached],
                                hoist=False, derivative=True, names=body.names)
    assert not extra, "internal: a checkpoint's derivative reads a value not among its operands"
    ct_values = [cts[k] for k, ph in enumerate(g_phs) if ph is not None]
    back = make("remat", (*node.inputs, *ct_values), (back_body, RECOMPUTE))
    grads_in = dict(zip(reached, results_of(back)))
    return [grads_in.get(k) for k in range(len(node.inputs))], None


# The most values (of all iterations) a loop's stacked scatter terms may hold, beyond the
# size of the array they scatter into (``_scattered_terms``).
STACKED_SCATTER_MAX = 1 << 24


def _scattered_terms(g: Node, varying: set, trips: int):
    """(the rest of ``g``, or None; its terms that scatter at most a quarter of the values
    ``g`` holds and vary with the iteration): a gather's cotangent, ``scatter_add(v, j)``,
    costs a pass over the whole array per iteration as a carry's update, and ``v`` and ``j``
    per iteration as stacked outputs (scattered once after the loop; at most
    ``STACKED_SCATTER_MAX`` values over the ``trips`` iterations, or the array's size)."""
    depends = set(varying)
    for m in toposort([g]):
        if m not in depends and any(i in depends for i in m.inputs):
            depends.add(m)
    terms, rest, pending = [], [], [g]
    while pending:
        t = pending.pop()
        if t.op == "add" and all(i.shape == t.shape and i.dtype == t.dtype for i in t.inputs):
            pending.extend(t.inputs)
        elif t.op == "scatter_add" and t in depends and 4 * t.inputs[0].size <= t.size and \
                trips * t.inputs[0].size <= max(STACKED_SCATTER_MAX, t.size):
            terms.append(t)
        else:
            rest.append(t)
    if not terms:
        return g, []
    return (sum_of(rest) if rest else None), terms


def _scatter_rows(term: Node, values: Node, indices: Node) -> Node:
    """``term`` (a ``scatter_add`` in a loop body) summed over the iterations: one scatter of
    its stacked values at its stacked indices (the iteration axis moved where the indices'
    axes go). Rows of iterations that did not run are zeros (at index 0: they add nothing)."""
    axis, size = term.attrs
    order = tuple(range(1, axis + 1)) + (0,) + tuple(range(axis + 1, values.ndim))
    return scatter_add(transpose(values, order) if axis else values, indices, axis, size)


def sum_of(nodes):
    total = nodes[0]
    for m in nodes[1:]:
        total = add(total, m)
    return total
