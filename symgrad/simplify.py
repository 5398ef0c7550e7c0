"""Simplification: constant folding and algebraic identities that are exact in IEEE arithmetic.

Rules are (op -> rewrite) functions, each with its identity as a comment. A rewrite returns a
new node or the node itself; the pass applies rules bottom-up until nothing changes, so
``simplify(simplify(g))`` returns the very same nodes. Common subexpressions need no pass:
hash-consing already shares them. Dead code is whatever the outputs no longer reach.

No ``x * 0 -> 0``: it is wrong for inf and nan, and reverse mode never creates numeric zeros.

Some identities hold except for the sign of a zero result (``x + 0.0 -> x`` at x = -0,
``-x + -y -> -(x + y)`` at x = -y, ``sum(-x) -> -sum(x)``): they apply to derivative nodes only,
so the user's own computation keeps NumPy's signed zeros.

Select sinking (derivative nodes only): the cotangent of a select is ``where(c, g, 0)``, and the
rules of the ops below it would multiply that zero into their own factors, so the side not
selected leaked in as ``0 * nan`` (``where(x > 0, sqrt(x), 0)`` at 0, Tangent's safe sqrt).
The sink rules move the select outwards instead (``where(c, g, 0) / y -> where(c, g / y, 0)``),
so a side not selected is never combined with anything. They change what a NaN becomes where
the select picks the zero, which is the point for derivatives but not NumPy's semantics: the
user's own forward computation (nodes with a source location) is left as written.
"""
from __future__ import annotations

import math
import warnings

import numpy as np

from .ir import OPS, Graph, Node, label_new, make, toposort
from .region_passes import prune_loops, simplify_region
from .gram_pull import pull_grams
from .sum_pull import pull_sums
from .ops import (broadcast_to, reshape, const, full, index_add, neg, sub, add, mul, div, where,
                  cast)

FOLDABLE = ("elementwise",)


def _scalar_value(n: Node):
    """The value of a constant (scalar ``const`` or ``full``), else None."""
    if n.op == "const":
        return n.attrs[0]
    if n.op == "full":
        return n.attrs[0]
    return None


def _is(n: Node, value) -> bool:
    v = _scalar_value(n)
    return v is not None and not isinstance(v, bool) and v == value


def _negative_zero_or_int(zero: Node) -> bool:
    """Whether ``zero - x`` is exactly ``-x``: for integers, and for the float -0.0."""
    return not zero.dtype.startswith("float") or math.copysign(1.0, _scalar_value(zero)) < 0


def _same_type(a: Node, n: Node) -> bool:
    """Replacing n by a keeps shape and dtype."""
    return a.shape == n.shape and a.dtype == n.dtype


def _same_dtype(a: Node, n: Node) -> bool:
    """Replacing n by a (broadcast to n's shape, made implicit later) keeps the dtype."""
    return a.dtype == n.dtype


def _widen(a: Node, n: Node) -> Node:
    return a if a.shape == n.shape else broadcast_to(a, n.shape)


def _fold(n: Node) -> Node:
    """All operands constant -> a constant (evaluated by the NumPy reference)."""
    if OPS[n.op].kind not in FOLDABLE or not n.inputs:
        return n
    values = [_scalar_value(i) for i in n.inputs]
    if any(v is None for v in values):
        return n
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        scalars = [np.array(v, dtype=i.dtype)[()] for v, i in zip(values, n.inputs)]
        value = np.asarray(OPS[n.op].numpy(*scalars, n.attrs)).astype(n.dtype)[()].item()
    return full(n.shape, value, n.dtype)


def _drop_broadcasts(n: Node) -> Node:
    """Broadcasting commutes with elementwise ops, and NumPy broadcasts implicitly:
    op(bcast(x), y) -> op(x, y) when the output shape stays the same (a ``full`` is a
    broadcast scalar: x * full(2.0) -> x * 2.0), else
    bcast(op(x, y)) (computed on fewer elements; the consumer usually drops the bcast)."""
    if OPS[n.op].kind != "elementwise" or n.op == "stop_gradient":
        return n
    inputs = [i.inputs[0] if i.op == "broadcast_to" or (i.op == "reshape" and _adds_leading_ones(i))
              else const(i.attrs[0], i.dtype) if i.op == "full" else i for i in n.inputs]
    if all(a is b for a, b in zip(inputs, n.inputs)):
        return n
    inner = make(n.op, inputs, n.attrs)
    return inner if inner.shape == n.shape else broadcast_to(inner, n.shape)


def _sum_of_negations(n):
    (a,) = n.inputs
    if a.op == "neg":                           # sum(-x) -> -sum(x) (a zero sum's sign flips)
        return neg(make("sum", (a.inputs[0],), n.attrs))
    return n


def _adds_leading_ones(r: Node) -> bool:
    """reshape(y) to (1, ..., 1) + y.shape: NumPy broadcasting adds those axes implicitly."""
    y = r.inputs[0]
    k = r.ndim - y.ndim
    return k > 0 and r.shape == (1,) * k + y.shape


def _add(n):
    a, b = n.inputs
    if _is(b, 0) and _same_dtype(a, n) and _negative_zero_or_int(b):   # x + -0 -> x
        return _widen(a, n)                     # (x + +0.0 is not: at x = -0 it is +0)
    if _is(a, 0) and _same_dtype(b, n) and _negative_zero_or_int(a):   # -0 + x -> x
        return _widen(b, n)
    if b.op == "neg":                           # x + -y -> x - y
        return sub(a, b.inputs[0])
    if a.op == "neg":                           # -x + y -> y - x
        return sub(b, a.inputs[0])
    if a is b:                                  # x + x -> 2 * x (exact)
        return mul(2, a)
    return n


def _add_up_to_zero_sign(n):
    """Rules exact except for the sign of a zero result (derivative nodes only): at x = -0,
    x + 0.0 is +0 but x is -0; at x = -y, -x + -y is +0 but -(x + y) is -0."""
    a, b = n.inputs
    if _is(b, 0) and _same_dtype(a, n):         # x + 0 -> x
        return _widen(a, n)
    if _is(a, 0) and _same_dtype(b, n):         # 0 + x -> x
        return _widen(b, n)
    if a.op == "neg" and b.op == "neg":         # -x + -y -> -(x + y)
        return neg(add(a.inputs[0], b.inputs[0]))
    for z, other in ((a, b), (b, a)):           # g + scatter(0, h, i) -> g with h added at i
        if z.op == "index_add" and _is(z.inputs[0], 0) and _same_type(other, n) and _same_type(z, n):
            return index_add(other, z.inputs[1], z.attrs[0])
    return n


def _sub(n):
    a, b = n.inputs
    if _is(b, 0) and _same_dtype(a, n):         # x - 0 -> x
        return _widen(a, n)
    if _is(a, 0) and _same_dtype(b, n) and _negative_zero_or_int(a):   # -0 - x -> -x
        return neg(_widen(b, n))   # (+0.0 - x is not: at x = +0 it is +0, -x is -0)
    if b.op == "neg":                           # x - -y -> x + y
        return add(a, b.inputs[0])
    return n


def _sub_up_to_zero_sign(n):
    a, b = n.inputs
    if a.op == "neg":                           # -x - y -> -(x + y) (at x = -y: -0, not +0)
        return neg(add(a.inputs[0], b))
    return n


def _product(n, build, unit_right: bool):
    """Shared rules of * and /: units vanish, signs move to the top (-x * y -> -(x * y))."""
    a, b = n.inputs
    if _is(b, 1) and _same_dtype(a, n):         # x * 1 -> x, x / 1 -> x
        return _widen(a, n)
    if _is(b, -1) and _same_dtype(a, n):        # x * -1 -> -x, x / -1 -> -x
        return neg(_widen(a, n))
    if unit_right and _is(a, 1) and _same_dtype(b, n):   # 1 * x -> x
        return _widen(b, n)
    if unit_right and _is(a, -1) and _same_dtype(b, n):  # -1 * x -> -x
        return neg(_widen(b, n))
    if a.op == "neg" and b.op == "neg":         # -x * -y -> x * y
        return build(a.inputs[0], b.inputs[0])
    if a.op == "neg":                           # -x * y -> -(x * y)
        return neg(build(a.inputs[0], b))
    if b.op == "neg":                           # x * -y -> -(x * y)
        return neg(build(a, b.inputs[0]))
    return n


def _mul(n):
    return _product(n, mul, unit_right=True)


def _div(n):
    return _product(n, div, unit_right=False)


def _neg(n):
    (a,) = n.inputs
    if a.op == "neg":                           # --x -> x
        return a.inputs[0]
    return n


def _fold_shape(n):
    """A shape op applied to a constant is a constant: reshape(full(v)) -> full(v)."""
    v = _scalar_value(n.inputs[0])
    return n if v is None else full(n.shape, v, n.dtype)


def _reshape(n):
    a = n.inputs[0]
    if a.op == "broadcast_to" and a.inputs[0].size == 1:   # reshape(bcast(s)) -> bcast(s)
        return broadcast_to(reshape(a.inputs[0], ()), n.shape)
    return _fold_shape(n)


def _pow(n):
    a, b = n.inputs
    if _is(b, 1) and _same_type(a, n):          # x ** 1 -> x
        return a
    if _is(b, 0):                               # x ** 0 -> 1 (IEEE pow(x, 0) is 1, nan too)
        return full(n.shape, 1, n.dtype)
    return n


def _where(n):
    c, a, b = n.inputs
    if a is b and _same_dtype(a, n):            # where(c, x, x) -> x (broadcast to c's shape)
        return _widen(a, n)
    v = _scalar_value(c)
    if v is not None:                           # where(True, x, y) -> x
        chosen = a if v else b
        return chosen if _same_type(chosen, n) else n
    merged = _merged_selects(c, a, b)
    # the operand that gave n its shape may be the one dropped: keep n's shape
    return n if merged is None else _widen(merged, n)


def _merged_selects(c, a, b):
    """A select nested in ``where(c, a, b)`` folded into it (each one select fewer: no
    swapping back), or None."""
    if a.op == "where" and a.inputs[0] is c:    # where(c, where(c, x, y), z) -> where(c, x, z)
        return where(c, a.inputs[1], b)
    if b.op == "where" and b.inputs[0] is c:    # where(c, x, where(c, y, z)) -> where(c, x, z)
        return where(c, a, b.inputs[2])
    if a.op == "where" and b.op == "where" and a.inputs[0] is b.inputs[0]:
        d, (_, x, y), (_, u, w) = a.inputs[0], a.inputs, b.inputs
        if x is u:                              # where(c, where(d, x, y), where(d, x, w))
            return where(d, x, where(c, y, w))  # -> where(d, x, where(c, y, w))
        if y is w:                              # where(c, where(d, x, y), where(d, u, y))
            return where(d, where(c, x, u), y)  # -> where(d, where(c, x, u), y)
    return None


# -- select sinking (derivative nodes only; see the module docstring) --------------------------

def _masked(n: Node) -> bool:
    """A select with one zero side: ``where(c, t, 0)`` or ``where(c, 0, f)``."""
    return n.op == "where" and _is(n.inputs[1], 0) != _is(n.inputs[2], 0)


def _map_sides(w: Node, fn, dtype: str) -> Node:
    """``where(c, fn(t), fn(f))`` for ``w = where(c, t, f)``, a zero side staying a zero (never
    ``fn(0)``: that is where ``0 * nan`` came from)."""
    c, t, f = w.inputs
    zero = const(0, dtype)
    return where(c, zero if _is(t, 0) else fn(t), zero if _is(f, 0) else fn(f))


def _sink_product(n):
    a, b = n.inputs
    build = mul if n.op == "mul" else div
    if _masked(a):                              # where(c, t, 0) * y -> where(c, t * y, 0)
        return _map_sides(a, lambda t: build(t, b), n.dtype)
    if n.op == "mul" and _masked(b):            # y * where(c, t, 0) -> where(c, y * t, 0)
        return _map_sides(b, lambda t: mul(a, t), n.dtype)
    return n


def _sink_sum_of_selects(n):
    """where(c, a, b) + where(c, d, e) -> where(c, a + d, b + e) (likewise -): each element
    takes both terms from the same side, so zeros of the two sides never meet a value."""
    a, b = n.inputs
    build = add if n.op == "add" else sub
    if a.op == "where" and b.op == "where" and a.inputs[0] is b.inputs[0]:
        c = a.inputs[0]
        return where(c, build(a.inputs[1], b.inputs[1]), build(a.inputs[2], b.inputs[2]))
    return n


def _sink_neg(n):
    (a,) = n.inputs
    return _map_sides(a, neg, n.dtype) if _masked(a) else n    # -where(c, t, 0) -> where(c, -t, 0)


def _sink_cast(n):
    (a,) = n.inputs                             # cast(where(c, t, 0)) -> where(c, cast(t), 0)
    return _map_sides(a, lambda t: cast(t, n.dtype), n.dtype) if _masked(a) else n


def _aligned(shape: tuple, ndim: int) -> tuple:
    return (1,) * (ndim - len(shape)) + tuple(shape)


def _sink_sum(n):
    """sum(where(c, t, 0), axes) -> where(c', sum(t, axes), 0) when c does not vary along the
    summed axes (c' is c with them dropped); otherwise the select must stay inside the sum."""
    (w,) = n.inputs
    if not _masked(w):
        return n
    axes, keepdims = n.attrs
    c = w.inputs[0]
    c_full = _aligned(c.shape, w.ndim)
    if any(c_full[a] != 1 for a in axes):
        return n
    kept = tuple(1 if i in axes else d for i, d in enumerate(c_full)) if keepdims else \
        tuple(d for i, d in enumerate(c_full) if i not in axes)
    c2 = reshape(c, kept)
    return where(c2, *(const(0, n.dtype) if _is(x, 0) else make("sum", (_widen(x, w),), n.attrs)
                       for x in w.inputs[1:]))


def _sink_reshape(n):
    """reshape(where(c, t, 0)) -> where(reshape(c), reshape(t), 0) when c has the select's
    shape or is a scalar (a broadcast c would not reshape alongside)."""
    (w,) = n.inputs
    if not _masked(w):
        return n
    c = w.inputs[0]
    if c.shape == w.shape:
        c2 = reshape(c, n.shape)
    elif c.ndim == 0:
        c2 = c
    else:
        return n
    return where(c2, *(const(0, n.dtype) if _is(x, 0) else reshape(_widen(x, w), n.shape)
                       for x in w.inputs[1:]))


def _first(*rules):
    """The rule that tries ``rules`` in turn and returns the first rewrite."""
    def rule(n):
        for r in rules:
            m = r(n)
            if m is not n:
                return m
        return n
    return rule


# Derivative nodes only: select sinking, and the rules exact up to the sign of a zero result
# (a derivative's zero has no sign to keep: reverse mode adds cotangents in any order).
DERIVATIVE_RULES = {"mul": _sink_product, "div": _sink_product,
                    "add": _first(_add_up_to_zero_sign, _sink_sum_of_selects),
                    "sub": _first(_sub_up_to_zero_sign, _sink_sum_of_selects),
                    "neg": _sink_neg, "cast": _sink_cast,
                    "sum": _first(_sum_of_negations, _sink_sum), "reshape": _sink_reshape}


def _region(n):
    """Loop and branch bodies are simplified like the graph (symgrad.region_passes)."""
    return simplify_region(n, lambda outputs, forward: simplify_nodes(outputs, None, forward))


RULES = {"loop": _region, "cond": _region, "remat": _region, "add": _add, "sub": _sub, "mul": _mul, "div": _div, "neg": _neg, "pow": _pow,
         "where": _where, "reshape": _reshape, "broadcast_to": _fold_shape,
         "transpose": _fold_shape, "getitem": _fold_shape}


def _rewrite(n: Node, memo: dict, forward, sink: bool) -> Node:
    """Apply rules to ``n`` (whose inputs are already simplified) until it stops changing;
    ``sink``: ``n`` belongs to a derivative, so the select-sinking rules apply too."""
    while True:
        m = _fold(n)
        if m is n:
            m = _drop_broadcasts(n)
        if m is n and n.op in RULES:
            m = RULES[n.op](n)
        if m is n and sink and n.op in DERIVATIVE_RULES:
            m = DERIVATIVE_RULES[n.op](n)
        if m is n:
            return n
        # A rule may build new nodes above simplified ones; simplify those too (they belong to
        # what n belonged to: forward code rewritten stays forward).
        n = _simplify_node(m, memo, forward, sink)


def _simplify_node(n: Node, memo: dict, forward, inherited: bool | None = None) -> Node:
    if n in memo:
        return memo[n]
    for sub_node in toposort([n], known=memo):   # only the part not simplified yet
        inputs = tuple(memo[i] for i in sub_node.inputs)
        rebuilt = sub_node if all(x is y for x, y in zip(inputs, sub_node.inputs)) else \
            make(sub_node.op, inputs, sub_node.attrs)
        sink = sub_node not in forward if inherited is None else inherited
        result = memo[rebuilt] if rebuilt in memo else _rewrite(rebuilt, memo, forward, sink)
        memo[sub_node] = memo[rebuilt] = memo[result] = result
    return memo[n]


def simplify_nodes(outputs, memo: dict | None = None, forward=frozenset()) -> list[Node]:
    """Simplified ``outputs``; nodes in ``forward`` (the user's own computation) keep NumPy's
    semantics exactly, the others are derivative nodes and get select sinking too."""
    memo = {} if memo is None else memo
    return [_simplify_node(o, memo, forward) for o in outputs]


def forward_nodes(graph: Graph) -> set[Node]:
    """The nodes of the user's computation: traced from a source line (or leaves) and computed
    from such nodes only. What autodiff built is not among them."""
    forward: set[Node] = set()
    for n in toposort(list(graph.outputs) + list(graph.guards.values())):
        if (n in graph.locs or not n.inputs) and all(i in forward for i in n.inputs):
            forward.add(n)
    return forward


def _pulled_sums(outputs: list, memo: dict, forward) -> list:
    """Derivative sums pulled inside the linear maps they reduce (symgrad.sum_pull), and
    row-scaled linear images reduced through their Gram products (symgrad.gram_pull) once no
    sum pulls, the new nodes simplified, until no rule applies; ``memo`` follows the
    replacements (so names and locations reach the new nodes). It ends: every sum rewrite
    moves a sum below the node it reduced (onto that node's operands), no local rule moves one
    back up, and a Gram rewrite removes the image it reduced (the products it builds are no
    row-scaled images of a matmul)."""
    while True:
        pulled, replaced = pull_sums(outputs, forward)
        if not replaced:
            pulled, replaced = pull_grams(outputs, forward)
        if not replaced:
            return outputs
        for old, new in list(memo.items()):
            memo[old] = replaced.get(new, new)
        outputs = simplify_nodes(pulled, memo, forward)


def simplify(graph: Graph) -> Graph:
    """A simplified copy of ``graph``; names and locations follow the nodes they describe."""
    memo: dict[Node, Node] = {}
    forward = forward_nodes(graph)
    # the guards of while loops (symgrad.guards) are simplified with the outputs: one loop
    # computes both
    outputs = simplify_nodes(list(graph.outputs) + list(graph.guards.values()), memo, forward)
    outputs = _pulled_sums(outputs, memo, forward)
    for _ in range(8):   # pruning a region's results may let its body simplify further
        pruned = prune_loops(outputs)
        if all(a is b for a, b in zip(pruned, outputs)):
            break
        outputs = simplify_nodes(pruned, memo, forward)
    n_out = len(graph.outputs)
    result = graph.derive(graph.name, outputs[:n_out], graph.out_tree)
    result.guards = dict(zip(graph.guards, outputs[n_out:]))
    for table in (result.locs, result.grad_origin):
        for old, value in list(table.items()):
            new = memo.get(old)
            if new is not None and new is not old:
                label_new(new, table, value)
    for old, value in list(result.names.items()):
        new = memo.get(old)
        if new is not None and new is not old:
            result.names.setdefault(new, value)
    return result
