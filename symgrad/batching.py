"""Batching rules: how each op of the table runs on a batch of examples (``sg.vmap``).

A rule is ``rule(node, inputs, batched, size) -> Node``: ``node`` is the unbatched node,
``inputs`` its operands rewritten so far (a batched one has the batch axis, of length ``size``,
in front of its unbatched shape; an unbatched one is the original operand) and ``batched`` says
which is which (at least one is). It returns the batched node, batch axis in front, built from
the same primitives, so a batched graph is differentiated, simplified and compiled like any
other. The batch axis stays at position 0 inside a transform; ``symgrad.vmap`` moves it where
``in_axes``/``out_axes`` say at the boundary.

Rules prefer the form a person writes for a batch: a matrix-vector product of a batch of
vectors becomes one matrix-matrix product, a batch of dot products a row sum, a batch of outer
products a broadcast multiply, so the generated source reads as batched NumPy, not a loop.

Elementwise ops share one rule (NumPy broadcasting does the work once the batched operands'
ranks are aligned), keyed by ``OpDef.kind``; every other op has an entry in ``RULES`` keyed by
name, or in ``NOT_BATCHABLE`` with the reason. Leaves have no operands and are never batched.
``tests/test_vmap.py`` checks that every op of the table is covered.
"""
from __future__ import annotations

from . import ops
from .index_ops import _index_shape
from .ir import OPS, Node, Slice, make, toposort
from .regions import UNTIL, close, loop_count, placeholder, rebuild_loop


def pad_rank(x: Node, rank: int) -> Node:
    """A batched operand (batch axis first) with length-1 axes after the batch axis, so that
    its example part has ``rank`` axes: how an operand of lower rank broadcasts per example."""
    missing = rank - (x.ndim - 1)
    if missing <= 0:
        return x
    return ops.reshape(x, x.shape[:1] + (1,) * missing + x.shape[1:])


def with_batch(x: Node, is_batched: bool, size: int) -> Node:
    """An operand as a batch: an unbatched one repeated ``size`` times (a broadcast view)."""
    return x if is_batched else broadcast(x, (size,) + x.shape)


def broadcast(x: Node, shape: tuple) -> Node:
    """``broadcast_to(x, shape)``, from the source of ``x`` when ``x`` is itself a broadcast
    (one view, not a chain of them)."""
    return ops.broadcast_to(x.inputs[0] if x.op == "broadcast_to" else x, shape)


def batch_slice(size: int) -> Slice:
    return Slice(0, size, 1)


# ----------------------------------------------------------------------------------------------
# Elementwise: align ranks, broadcast the rest.

def _elementwise(node, inputs, batched, size):
    aligned = [pad_rank(x, node.ndim) if b else x for x, b in zip(inputs, batched)]
    return make(node.op, aligned, node.attrs)


# ----------------------------------------------------------------------------------------------
# Axis ops: every axis attribute moves one place right.

def _reduction(node, inputs, batched, size):
    axes, keepdims = node.attrs
    return make(node.op, inputs, (tuple(a + 1 for a in axes), keepdims))


def _reshape(node, inputs, batched, size):
    return ops.reshape(inputs[0], (size,) + node.shape)


def _transpose(node, inputs, batched, size):
    (x,), (perm,) = inputs, node.attrs
    perm = (0,) + tuple(p + 1 for p in perm)
    moved = [p for p in perm if x.shape[p] != 1]
    if moved == sorted(moved):   # only length-1 axes move: a reshape, no copy
        return ops.reshape(x, tuple(x.shape[p] for p in perm))
    return ops.transpose(x, perm)


def _broadcast_to(node, inputs, batched, size):
    (x,), (shape,) = inputs, node.attrs
    return broadcast(pad_rank(x, len(shape)), (size,) + shape)


def _joined(node, inputs, batched, size):
    """concatenate / stack: all operands as batches, the axis one place right."""
    (axis,) = node.attrs
    return make(node.op, [with_batch(x, b, size) for x, b in zip(inputs, batched)], (axis + 1,))


# ----------------------------------------------------------------------------------------------
# Linear algebra

def _matmul(node, inputs, batched, size):
    a, b = inputs
    batched_a, batched_b = batched
    left, right = node.inputs
    if left.ndim == 2 and right.ndim == 2:
        special = _matrix_product(a, b, batched_a, batched_b, left.shape, right.shape, size)
        if special is not None:
            return special
    rank = max(left.ndim, right.ndim)   # NumPy's batch broadcasting, batch axis in front
    return ops.matmul(pad_rank(a, rank) if batched_a else a, pad_rank(b, rank) if batched_b else b)


def _matrix_product(a, b, batched_a, batched_b, a_shape, b_shape, size):
    """The batched product of (m, k) @ (k, n) matrices as one GEMM, a broadcast multiply or a
    row sum where the shapes allow; None for the general batched matmul."""
    (m, k), (_, n) = a_shape, b_shape
    if k == 1:   # outer products: a broadcast multiply
        if n == 1:   # a column times one number per example: x * c[:, None], no length-1 axes
            column = ops.reshape(a, (size, m) if batched_a else (m,))
            scale = ops.reshape(b, (size, 1) if batched_b else (1,))
            return ops.reshape(ops.mul(column, scale), (size, m, 1))
        return ops.mul(a, b)
    if batched_a and not batched_b:   # every example's rows against one matrix: one GEMM
        return ops.reshape(ops.matmul(ops.reshape(a, (size * m, k)), b), (size, m, n))
    if batched_b and not batched_a and n == 1:   # one matrix times a batch of vectors
        return ops.reshape(ops.matmul(ops.reshape(b, (size, k)), ops.transpose(a)), (size, m, 1))
    if batched_a and batched_b and m == 1 and n == 1:   # a batch of dot products: a row sum
        rows = ops.mul(ops.reshape(a, (size, k)), ops.reshape(b, (size, k)))
        return ops.reshape(ops.reduce("sum", rows, 1), (size, 1, 1))
    return None


# ----------------------------------------------------------------------------------------------
# Indexing

def _getitem(node, inputs, batched, size):
    (index,) = node.attrs
    return ops.getitem(inputs[0], (batch_slice(size),) + index)


def _update(node, inputs, batched, size):
    """setitem / index_add: the base as a batch, the index keeping the batch axis."""
    (base, value), (batched_base, batched_value) = inputs, batched
    (index,) = node.attrs
    target = _index_shape(node.inputs[0].shape, index)
    value = pad_rank(value, len(target)) if batched_value else value
    return make(node.op, (with_batch(base, batched_base, size), value),
                ((batch_slice(size),) + index,))


def _flat_indices(idx: Node, length: int, size: int) -> Node:
    """Per-example indices into an axis of ``length`` -> indices into the batch axis and that
    axis flattened together (example ``i``'s entry ``j`` is ``i * length + j``). A negative
    entry counts from the end of its example's axis first (``-1``: its last element, not the
    previous example's), and one out of that axis's range becomes one out of the flattened
    axis (``size * length``), so the gather's bounds check raises NumPy's IndexError instead of
    reading another example's element."""
    j = ops.cast(idx, "int64")
    j = ops.where(ops.lt(j, 0), ops.add(j, length), j)
    outside = ops.logical_or(ops.lt(j, 0), ops.ge(j, length))
    offsets = ops.arange(0, size * length, length, dtype="int64")
    flat = ops.add(j, ops.reshape(offsets, (size,) + (1,) * (idx.ndim - 1)))
    return ops.where(outside, size * length, flat)


def _take(node, inputs, batched, size):
    (x, idx), (batched_x, batched_idx) = inputs, batched
    (axis,) = node.attrs
    if not batched_idx:   # one index array for every example
        return make("take", (x, idx), (axis + 1,))
    if not batched_x:     # a batch of index arrays into one array: gather, batch axis in front
        out = make("take", (x, idx), (axis,))
        return _move_axis(out, axis, 0)
    # both batched: gather from the batch and the axis flattened together
    length = x.shape[axis + 1]
    front = _move_axis(x, axis + 1, 1)           # (B, N, other axes...)
    flat = ops.reshape(front, (size * length,) + front.shape[2:])
    out = make("take", (flat, _flat_indices(idx, length, size)), (0,))   # (B, *idx, others...)
    # the axes before the gathered one go back in front of the index axes
    return _move_block(out, 1, idx.ndim - 1, axis)


def _scatter_add(node, inputs, batched, size):
    (g, idx), (batched_g, batched_idx) = inputs, batched
    axis, length = node.attrs
    if not batched_idx:
        return make("scatter_add", (g, idx), (axis + 1, length))
    g = with_batch(g, batched_g, size)           # (B, pre..., *idx, rest...)
    index_axes = idx.ndim - 1
    front = _move_block(g, 1, axis, index_axes)   # (B, *idx, pre..., rest...)
    out = make("scatter_add", (front, _flat_indices(idx, length, size)), (0, size * length))
    out = ops.reshape(out, (size, length) + out.shape[1:])           # (B, N, pre..., rest...)
    return _move_axis(out, 1, 1 + axis)


def _move_axis(x: Node, source: int, dest: int) -> Node:
    order = [a for a in range(x.ndim) if a != source]
    order.insert(dest, source)
    return ops.transpose(x, tuple(order))


def _move_block(x: Node, start: int, count: int, shift: int) -> Node:
    """Move the ``count`` axes from ``start`` on so that ``shift`` axes that followed them come
    first: (B, block..., next...) with ``shift`` of next -> (B, next[:shift]..., block...)."""
    axes = list(range(x.ndim))
    block = axes[start:start + count]
    following = axes[start + count:start + count + shift]
    order = axes[:start] + following + block + axes[start + count + shift:]
    return ops.transpose(x, tuple(order))


# ----------------------------------------------------------------------------------------------
# The tables

# ----------------------------------------------------------------------------------------------
# Regions.
# Batching rules for regions (``sg.vmap`` of code with loops and branches).
# 
# A batched loop carries every carry batched (an unbatched initial value is broadcast: simpler
# than finding which carries the batch reaches, and cheap), slices batched per-iteration inputs
# along their iteration axis (moved in front of the batch axis) and stacks its outputs as
# ``(n, batch, ...)``, moved back to ``(batch, n, ...)`` by its ``proj``. A branch on an unbatched
# condition stays a branch over batched bodies; on a batched condition each example may take
# another side, so both sides run and a select chooses per example: as a branch on ``True`` whose
# body is that select (simplification then inlines it). The select's derivative keeps the side
# not taken out (select sinking), as for ``np.where``.

def _batched_params(params, flags, size):
    """Placeholders for the batched params: (explicit param list, param -> placeholder)."""
    mapping = {p: placeholder(p.dtype, (size,) + p.shape) for p, f in zip(params, flags) if f}
    return [mapping.get(p, p) for p in params], mapping


def _batched_results(body, mapping, size):
    """``body``'s results over the batched params, every one batched."""
    new, batched = batch_nodes(body.results, mapping, size)
    return [new[r] if r in batched else with_batch(r, False, size) for r in body.results]


def _loop(node, inputs, batched, size):
    body, trips, nc, nx, _, exit_ = node.attrs
    count = loop_count(node)
    end = len(inputs) - (count is not None)
    inits = [with_batch(x, b, size) for x, b in zip(inputs[:nc], batched[:nc])]
    xs = [ops.transpose(x, (1, 0) + tuple(range(2, x.ndim))) if b else x
          for x, b in zip(inputs[nc:nc + nx], batched[nc:nc + nx])]
    flags = [False] + [True] * nc + list(batched[nc:end])
    params, mapping = _batched_params(body.params, flags, size)
    results = _batched_results(body, mapping, size)
    consts = inputs[nc + nx:end]   # the batched ones are read through their placeholders
    batched_consts = {mapping[p]: x for p, x in zip(body.params[1 + nc + nx:], consts)
                      if p in mapping}
    explicit = params[:1 + nc + nx]
    if exit_ is not None and exit_[0] == UNTIL:   # each example stops at its own exit
        explicit, results, inits, exit_ = _until_batched(explicit, results, inits, exit_, nc)
    elif count is not None and batched[-1]:   # each example walks its own trips
        bound = placeholder("int64", (size,))
        live = ops.logical_not(ops.lt(params[0], bound))
        results = _kept(live, results, explicit[1:1 + nc], nc)
        batched_consts[bound] = inputs[-1]
        count = ops.reduce("max", inputs[-1])
    return rebuild_loop(node, explicit, results, inits + xs, len(inits), consts=consts,
                        outer=batched_consts, exit=exit_, count=count)


def _kept(stopped, results, carries, nc, zero_rows=True):
    """``results`` where an example has not ``stopped`` (a (size,) bool), else its carries
    unchanged and zero rows (``zero_rows``; else its rows as computed: those of an early-exit
    loop's finished iterations are never read, and values computed from the carries it kept
    stay finite where zeros might not)."""
    def choose(new, old):
        flag = ops.reshape(stopped, stopped.shape + (1,) * (new.ndim - 1))
        return ops.cast(ops.where(flag, old, new), new.dtype)
    return [choose(r, c) for r, c in zip(results[:nc], carries)] + \
        [choose(y, ops.zeros_like(y)) if zero_rows else y for y in results[nc:]]


def _until_batched(explicit, results, inits, exit_, nc):
    """A batch of loops that stop early: a finished example keeps its carries (its trips
    counter stops too), and the loop runs until every example is done (a scalar flag carried
    after the others: what the loop's exit reads)."""
    flags = explicit[1 + exit_[1]]
    results = _kept(flags, results, explicit[1:1 + nc], nc, zero_rows=False)
    every = placeholder("bool", ())
    explicit = explicit[:1 + nc] + [every] + explicit[1 + nc:]
    results = results[:nc] + [_all(results[exit_[1]])] + results[nc:]
    return explicit, results, inits + [_all(inits[exit_[1]])], (UNTIL, nc, exit_[2])


def _all(flags):
    return ops.logical_not(ops.reduce("max", ops.logical_not(flags)))


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


def _remat(node, inputs, batched, size):
    """A checkpoint (or its recomputation) per example: one region over the batched body."""
    body, role = node.attrs
    explicit, mapping = _batched_params(body.params, batched, size)
    results = _batched_results(body, mapping, size)
    new_body = close(explicit, results, hoist=False, names=body.names,
                     derivative=body.derivative)[0]
    return make("remat", tuple(inputs), (new_body, role))


def _custom_gradient(node, inputs, batched, size):
    """A custom gradient rule per example: the value batched, the rule's graph batched over a
    batched upstream (and the captured values batched where they are); an unbatched float
    argument's gradient is the sum over the examples."""
    from .custom_gradient import Rule, fresh_hole   # custom_gradient sits beside this module
    rule = node.attrs[0]
    k = len(rule.gradients)
    value, args, captured = inputs[0], inputs[1:1 + k], inputs[1 + k:]
    upstream = fresh_hole("upstream", rule.upstream.dtype, (size,) + rule.upstream.shape)
    mapping = {rule.upstream: upstream}
    holes = []
    for hole, b in zip(rule.captured, batched[1 + k:]):
        if b:
            mapping[hole] = fresh_hole(hole.attrs[1], hole.dtype, (size,) + hole.shape)
        holes.append(mapping.get(hole, hole))
    present = [g for g in rule.gradients if g is not None]
    new, done = batch_nodes(present, mapping, size)
    grads, it = [], iter(present)
    for g, b in zip(rule.gradients, batched[1:1 + k]):
        if g is None:
            grads.append(None)
            continue
        g = next(it)
        out = new[g] if g in done else with_batch(g, False, size)
        grads.append(out if b else ops.reduce("sum", out, (0,)))
    new_rule = Rule(rule.name, upstream, tuple(holes), tuple(grads))
    return make(node.op, (with_batch(value, batched[0], size), *args, *captured), (new_rule,))


def _proj(node, inputs, batched, size):
    (region,) = inputs
    out = make("proj", (region,), node.attrs)
    old_nc = node.inputs[0].attrs[2] if region.op == "loop" else 0
    if region.op == "loop" and node.attrs[0] >= old_nc:   # stacked: (n, batch, ...)
        # (after the carries: a batch of early-exit loops carries one more, its done flag)
        out = make("proj", (region,), (node.attrs[0] + region.attrs[2] - old_nc,))
        return ops.transpose(out, (1, 0) + tuple(range(2, out.ndim)))
    return out




KIND_RULES: dict = {"elementwise": _elementwise}

RULES: dict = {
    "sum": _reduction, "prod": _reduction, "max": _reduction, "min": _reduction,
    "reshape": _reshape, "transpose": _transpose, "broadcast_to": _broadcast_to,
    "concatenate": _joined, "stack": _joined,
    "matmul": _matmul,
    "getitem": _getitem, "setitem": _update, "index_add": _update,
    "take": _take, "scatter_add": _scatter_add,
    "loop": _loop, "cond": _cond, "remat": _remat, "proj": _proj, "custom_gradient": _custom_gradient,
}

# op name -> why it cannot run batched (yet); vmap raises a TypeError naming the op and reason.
NOT_BATCHABLE: dict = {}


def rule_for(op: str):
    """The batching rule of ``op``, or a TypeError naming it (never a wrong result)."""
    rule = RULES.get(op)
    if rule is not None:
        return rule
    if op in NOT_BATCHABLE:
        raise TypeError(f"vmap: the op {op!r} cannot be batched: {NOT_BATCHABLE[op]}")
    opdef = OPS.get(op)
    if opdef is not None and opdef.kind in KIND_RULES:
        return KIND_RULES[opdef.kind]
    raise TypeError(f"vmap: the op {op!r} has no batching rule (symgrad.batching.RULES)")


def covered(op: str) -> bool:
    """Whether ``op`` has a rule, is a leaf (never batched) or is listed as not batchable."""
    kind = OPS[op].kind
    return op in RULES or op in NOT_BATCHABLE or kind in KIND_RULES or kind == "leaf"


def batch_nodes(outputs, batched_inputs: dict, size: int):
    """Rewrite the graph below ``outputs`` for a batch: ``batched_inputs`` maps argument nodes
    to their batched replacements (batch axis first). Returns ``(new, batched)``: each node's
    rewrite (unbatched nodes map to themselves) and the set of nodes that became batched."""
    new: dict = {}
    batched: set = set()
    for node in toposort(outputs):
        if node in batched_inputs:
            new[node] = batched_inputs[node]
            batched.add(node)
            continue
        flags = tuple(x in batched for x in node.inputs)
        if not any(flags):
            new[node] = node
            continue
        out = rule_for(node.op)(node, [new[x] for x in node.inputs], flags, size)
        if node.dtype != "tuple" and (out.shape != (size,) + node.shape or out.dtype != node.dtype):
            raise AssertionError(f"internal: batching rule of {node.op!r} gave {out.dtype}"
                                 f"{list(out.shape)} for {node.dtype}{[size, *node.shape]}")
        new[node] = out
        batched.add(node)
    return new, batched
