"""Sums pulled inside the linear maps they reduce (derivative nodes only): reassociation.

Reverse mode ends many cotangents with a sum over a broadcast axis (``unbroadcast``): ADBench
GMM's ``x[None] - means[:, None]`` gives the means' cotangent
``-sum_n(g @ L + g * q)``, where ``g`` is ``(K, n, d)`` and neither ``L`` ``(K, d, d)`` nor
``q`` ``(K, 1, d)`` varies along ``n``. A sum over an axis of a linear map whose matrix does not
vary along it is the map of the sum:

    sum_i (B @ A)[..., i, :]  = (sum_i B[..., i, :]) @ A        # the row axis: A has none
    sum_j (B @ A)[..., :, j]  = B @ (sum_j A[..., :, j])        # the column axis: B has none
    sum_b (B @ A)[b]          = (sum_b B[b]) @ A  when A is broadcast along batch axis b
    sum_i (B * q)[i]          = (sum_i B[i]) * q  when q is broadcast along i (likewise B / q)
    sum_i (a + b)[i]          = sum_i a[i] + sum_i b[i]   (and -), when either side pulls

so the means' cotangent becomes one ``(K, 1, d) @ (K, d, d)`` product of ``sum_n g`` instead
of a ``(K, n, d)`` batched matmul: one full-size matmul fewer in the gradient.

These are identities of real numbers, not of floating point: the terms are added in another
order, so the last bits change (as any blocked or threaded sum changes them). That is why they
apply only to derivative nodes (the user's own computation keeps NumPy's value exactly), and
why the tests compare against central differences and the reference back end with tolerances.
A rule applies only when the node it pulls through (the product, the sum of terms) is used by
this sum alone: then the full-size product is no longer computed at all. If the product is
also used elsewhere it is computed anyway, and the rewrite would save nothing, so it is left
alone (that also keeps a value shared by two consumers the same value in both). Division
pulls only when the divisor is the invariant side (``sum(q / B)`` is not ``q / sum(B)``).

The pass runs after the local rules (``symgrad.simplify``) on the whole graph, since whether
a node has one user is a property of the graph, not of the node.
"""
from __future__ import annotations

from .ir import FLOAT_DTYPES, Node, make, toposort, use_counts
from .shape_ops import reshape


def pull_sums(outputs: list, forward) -> tuple[list, dict]:
    """``outputs`` with every derivative sum pulled inside what it reduces where a rule
    applies, and the map from each rebuilt node to its replacement (for the side tables)."""
    order = toposort(outputs)
    candidates = [n for n in order if n.op == "sum" and n.inputs[0].op in _RULES]
    if not candidates:      # the common case: one walk of the graph, nothing else
        return list(outputs), {}
    plans = _Plans(use_counts(outputs, order), forward)
    rewrite = {n for n in candidates if plans.plan(n) is not None}
    if not rewrite:
        return list(outputs), {}
    memo: dict[Node, Node] = {}
    for node in order:
        inputs = tuple(memo[i] for i in node.inputs)
        new = node if all(a is b for a, b in zip(inputs, node.inputs)) else \
            make(node.op, inputs, node.attrs)
        if node is new and node in rewrite:
            new = plans.rewrite(node)
        memo[node] = new
    return [memo[o] for o in outputs], {k: v for k, v in memo.items() if k is not v}


class _Plans:
    """The rewrite of each sum (a plan: the sums it needs of its operands and how to combine
    them), found once per sum; rewriting walks the plans with an explicit stack, so a long
    chain of added terms (a cotangent accumulated over many uses) needs no recursion."""

    def __init__(self, counts: dict, forward):
        self.counts = counts
        self.forward = forward
        self.plans: dict = {}
        self.pulls: dict = {}    # add/sub node -> whether some term under it pulls

    def _single(self, x: Node) -> bool:
        """Used by the sum being rewritten alone (one use in the original graph; a node the
        rewrite built is new, so its operand's only user is the new sum)."""
        return self.counts.get(x, 0) == 1

    def plan(self, s: Node):
        if s not in self.plans:
            self.plans[s] = self._plan(s)
        return self.plans[s]

    def _plan(self, s: Node):
        """(operand sums, build) for sum ``s``, or None when no rule applies."""
        if s in self.forward or s.dtype not in FLOAT_DTYPES:
            return None
        (x,) = s.inputs
        if x.op not in _RULES:
            return None
        if self._single(x):
            return _RULES[x.op](self, s, x)
        if x.op not in _SCALES:
            return None
        # a product used elsewhere too is computed anyway; its sum is still worth pulling
        # when the sum it needs of the varying operand is in the graph already (a softmax's
        # backward: sum_k(e_k / S) with S = sum_k e_k): the pass over the product is gone
        plan = _RULES[x.op](self, s, x)
        return plan if plan is not None and all(o in self.counts for o in plan[0]) else None

    def rewrite(self, root: Node) -> Node:
        """The replacement of sum ``root``: its plan built from its operand sums' own
        replacements (children first, by an explicit stack)."""
        done: dict = {}
        stack = [root]
        while stack:
            s = stack[-1]
            if s in done:
                stack.pop()
                continue
            plan = self.plan(s)
            if plan is None:
                done[s] = s
                stack.pop()
                continue
            operands, build = plan
            pending = [o for o in operands if o not in done]
            if pending:
                stack.extend(pending)
                continue
            done[s] = build([done[o] for o in operands])
            stack.pop()
        return done[root]

    def terms_pull(self, x: Node, axes: tuple) -> bool:
        """Whether a product or matmul below the single-use add/sub tree ``x`` pulls a sum
        over ``axes`` (what makes splitting the sum over the terms worth it), walked without
        recursion."""
        order, todo = [], [x]
        while todo:
            y = todo.pop()
            if (y, axes) in self.pulls:
                continue
            order.append(y)
            todo += [t for t in y.inputs if self._is_term(t, y)]
        for y in reversed(order):     # (a term is walked after the node using it)
            self.pulls[(y, axes)] = any(
                self.pulls[(t, axes)] if self._is_term(t, y)
                else self._single(t) and t.op in _FACTORS and t.shape == y.shape
                and _factor_pulls(t, axes)   # (a broadcast term's axes are not the sum's)
                for t in y.inputs)
        return self.pulls[(x, axes)]

    def _is_term(self, t: Node, y: Node) -> bool:
        """A term of ``y`` that is itself a single-use add/sub of ``y``'s shape."""
        return t.op in _TERMS and t.shape == y.shape and self._single(t)


def _aligned(shape: tuple, ndim: int) -> tuple:
    return (1,) * (ndim - len(shape)) + tuple(shape)


def _operand_sum(y: Node, axes, ndim: int) -> Node:
    """``sum(y)`` over ``axes`` (of the ``ndim``-dimensional result ``y`` broadcasts into),
    dimensions kept, so it broadcasts where ``y`` did."""
    lead = ndim - y.ndim
    return make("sum", (y,), (tuple(a - lead for a in sorted(axes)), True))


def _finish(s: Node, inner: Node, pulled) -> Node:
    """``inner`` (the map of the pulled sums, extent 1 along ``pulled``) summed over the
    axes of ``s`` not pulled yet, in ``s``'s shape."""
    rest = tuple(a for a in s.attrs[0] if a not in pulled)
    out = make("sum", (inner,), (rest, True)) if rest else inner
    return out if out.shape == s.shape else make("reshape", (out,), (s.shape,))


def _matmul_rule(plans, s, x):
    """sum over the row axis of B @ A -> (sum of B's rows) @ A; over the column axis ->
    B @ (sum of A's columns); over a batch axis along which one operand is broadcast -> that
    batch sum of the other operand."""
    b, a = x.inputs
    nd = x.ndim
    bs, as_ = _aligned(b.shape, nd), _aligned(a.shape, nd)
    b_axes, a_axes = [], []
    for ax in s.attrs[0]:
        if ax == nd - 2:
            b_axes.append(ax)
        elif ax == nd - 1:
            a_axes.append(ax)
        elif as_[ax] == 1 and bs[ax] != 1:
            b_axes.append(ax)
        elif bs[ax] == 1 and as_[ax] != 1:
            a_axes.append(ax)
    if not b_axes and not a_axes:
        return None
    operands = ([_operand_sum(b, b_axes, nd)] if b_axes else []) + \
        ([_operand_sum(a, a_axes, nd)] if a_axes else [])
    pulled = set(b_axes) | set(a_axes)

    def build(done):
        it = iter(done)
        b2 = next(it) if b_axes else b
        a2 = next(it) if a_axes else a
        return _finish(s, make("matmul", (b2, a2)), pulled)
    return operands, build


def _factor_axes(x: Node, axes) -> tuple:
    """For a product ``x = u * v`` (or ``u / v``): (index of the varying operand, the summed
    axes along which the other is broadcast and the varying one is not), the first operand
    that has any; (None, ()) when neither."""
    u, v = x.inputs
    nd = x.ndim
    candidates = ((0, 1), (1, 0)) if x.op == "mul" else ((0, 1),)   # B / q only
    for i, j in candidates:
        vs, qs = _aligned(x.inputs[i].shape, nd), _aligned(x.inputs[j].shape, nd)
        axes_here = tuple(a for a in axes if qs[a] == 1 and vs[a] != 1)
        if axes_here:
            return i, axes_here
    return None, ()


def _factor_pulls(x: Node, axes) -> bool:
    if x.op == "matmul":
        nd = x.ndim
        bs, as_ = _aligned(x.inputs[0].shape, nd), _aligned(x.inputs[1].shape, nd)
        return any(ax >= nd - 2 or (as_[ax] == 1) != (bs[ax] == 1) for ax in axes)
    return _factor_axes(x, axes)[0] is not None


def _scale_rule(plans, s, x):
    """sum(B * q) -> sum(B) * q (and sum(B / q) -> sum(B) / q) over the axes along which q
    is broadcast: the product is taken on the reduced array. When that is every axis of the
    sum, it is s's own sum of B (the node a softmax's backward has already: its sum of the
    exponentials), and q is reshaped to s's axes."""
    i, axes = _factor_axes(x, s.attrs[0])
    if i is None:
        return None
    varying, other = x.inputs[i], x.inputs[1 - i]
    whole = len(axes) == len(s.attrs[0]) and varying.shape == x.shape
    if whole:
        operands = [make("sum", (varying,), s.attrs)]
        kept = _aligned(other.shape, x.ndim)
        if not s.attrs[1]:
            other = reshape(other, tuple(e for a, e in enumerate(kept) if a not in axes))
    else:
        operands = [_operand_sum(varying, axes, x.ndim)]

    def build(done):
        pair = (done[0], other) if i == 0 else (other, done[0])
        return make(x.op, pair) if whole else _finish(s, make(x.op, pair), set(axes))
    return operands, build


def _terms_rule(plans, s, x):
    """sum(a + b) -> sum(a) + sum(b) (likewise -), when the terms have the sum's input shape
    and a rule pulls the sum into some term below (else two sums cost what one did)."""
    a, b = x.inputs
    if a.shape != x.shape or b.shape != x.shape or not plans.terms_pull(x, s.attrs[0]):
        return None
    kept = (s.attrs[0], True)    # the terms' sums added first, reshaped once
    operands = [make("sum", (a,), kept), make("sum", (b,), kept)]

    def build(done):
        return _finish(s, make(x.op, tuple(done)), set(s.attrs[0]))
    return operands, build


_SCALES = ("mul", "div")
_FACTORS = ("matmul",) + _SCALES
_TERMS = ("add", "sub")
_RULES = {"matmul": _matmul_rule, "mul": _scale_rule, "div": _scale_rule,
          "add": _terms_rule, "sub": _terms_rule}
