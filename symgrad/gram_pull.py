"""Row-scaled linear images reduced through a Gram product (derivative nodes only): reassociation.

A quadratic form's backward scales a forward value row by row: ADBench GMM's
``sqsum = sum_d(lx * lx)`` with ``lx = q * x + x @ C`` (``x`` the ``(K, n, d)`` centred points,
``q`` ``(K, 1, d)``, ``C`` ``(K, d, d)``) has the cotangent ``E = s * lx`` with ``s`` ``(K, n, 1)``.
Every use of ``E`` reduces over the row axis n: the triangle's ``x^T @ E``, the means'
``sum_n E`` and the diagonal's ``sum_n(E * x)``. ``lx = R(x)`` is right-linear in ``x`` (each
term ``x @ C``, ``q * x`` or ``x`` acts on a row alone, with factors that do not vary along n),
so a row scale commutes with it, ``s * R(x) = R(s * x)``, and with ``W = s * x``:

    A @ (s * R(x))            = R(A @ W)                              # e.g. x^T @ E = R(x^T @ W)
    sum_n (s * R(x))          = R(sum_n W)
    sum_n ((s * R(x)) * y)    = sum_i ((W^T @ y) * C)[i]  for a term x @ C   (needs y^T @ W)
                              = q * sum_n (W * y)           for a term q * x
                              = q * diag(y^T @ W)           when there is y^T @ W

so the backward needs ``W`` and one ``(d, n) @ (n, d)`` product ``x^T @ W`` (the Gram matrix
``x^T diag(s) x``) per component, not ``E``: the forward's ``(K, n, d)`` product ``lx`` is no
longer read after the logsumexp over K (it was stored whole across it, then read back), and
the pass forming ``E`` goes. The ``(d, d)`` products with ``C`` that come instead cost d/n of
the Gram product.

These are identities of real numbers, not of floating point (products and sums taken in another
order), so, as in ``symgrad.sum_pull``, they apply to derivative nodes only: the user's own
computation keeps NumPy's value exactly. The rewrite is all or nothing per ``E``: every use of
``E`` must be one of the three forms (``E`` as the right operand of a matmul, a sum over the
row axis, or a sum over the row axis of ``E * y`` whose product has no other use), else ``E`` is
computed anyway and nothing is gained; the third form with a term ``x @ C`` applies only where
the matmul form gives ``y^T @ W`` (the same node, hash-consed), else it would add a product.
The matmul form applies only where the contracted extent n is at least ``4 d`` (the added
``(d, d)`` products then cost at most a quarter of the Gram product).
"""
from __future__ import annotations

from dataclasses import dataclass

from .ir import FLOAT_DTYPES, Node, Slice, make, toposort
from .shape_ops import reshape, transpose


@dataclass(frozen=True)
class _Image:
    """``E = scales * R(x)``: ``scales`` the row scales in the order applied (each (index of
    the scaled operand, factor), (None, None) for a negation), ``root`` R (add/sub/neg nodes
    above its terms), ``x`` R's argument."""
    scales: tuple
    root: Node
    x: Node


def pull_grams(outputs: list, forward) -> tuple[list, dict]:
    """``outputs`` with every row-scaled right-linear cotangent reduced through its Gram
    product where the rules apply, and the map from each rebuilt node to its replacement."""
    order = toposort(outputs)
    candidates = [n for n in order if n.op in ("mul", "neg") and n.ndim >= 2
                  and n.shape[-1] >= 2 and n not in forward and n.dtype in FLOAT_DTYPES]
    if not candidates or not any(n.op == "matmul" for n in order):
        return list(outputs), {}    # the common case: one walk of the graph, nothing else
    users: dict[Node, list] = {}
    for node in order:
        for child in node.inputs:
            users.setdefault(child, []).append(node)
    counts = {n: len(u) for n, u in users.items()}
    for out in outputs:
        counts[out] = counts.get(out, 0) + 1
    replacements: dict[Node, Node] = {}
    for node in candidates:
        plan = _plan(node, users, counts)
        if not replacements.keys() & plan.keys():    # a use two images claim: the first
            replacements.update(plan)
    if not replacements:
        return list(outputs), {}
    memo: dict[Node, Node] = {}
    for node in order:
        if node in replacements:
            memo[node] = _substitute(replacements[node], memo)
            continue
        inputs = tuple(memo[i] for i in node.inputs)
        memo[node] = node if all(a is b for a, b in zip(inputs, node.inputs)) else \
            make(node.op, inputs, node.attrs)
    return [memo[o] for o in outputs], {k: v for k, v in memo.items() if k is not v}


def _substitute(node: Node, memo: dict) -> Node:
    """``node`` (built over original nodes, all before it in the walk) with its inputs replaced
    as the walk replaced them."""
    for sub_node in toposort([node], known=memo):
        inputs = tuple(memo.get(i, i) for i in sub_node.inputs)
        memo[sub_node] = sub_node if all(a is b for a, b in zip(inputs, sub_node.inputs)) \
            else make(sub_node.op, inputs, sub_node.attrs)
    return memo[node]


def _plan(e: Node, users: dict, counts: dict) -> dict:
    """{user of ``e``: its replacement} when every use of ``e`` has a rule, else {}."""
    e_users = users.get(e, [])
    if counts.get(e, 0) != len(e_users) or not e_users or e.ndim < 2 or e.shape[-1] < 2:
        return {}    # an output (or unused): e is needed as it is
    image = _image(e, counts)
    if image is None:
        return {}
    scaled = _scaled(image)
    rows = e.ndim - 2
    grams = {}       # the Gram products the matmul uses give, by the matrix they multiply
    plan = {}
    for user in e_users:       # the matmuls first: the moments below reuse their products
        if _gram_use(user, e):
            gram = make("matmul", (user.inputs[0], scaled))
            grams[user.inputs[0]] = gram
            plan[user] = _map_terms(image, lambda term: _gram_term(term, gram))
    for user in e_users:
        if user in plan:
            continue
        if _row_sum(user, rows):
            total = make("sum", (scaled,), ((rows,), True))
            plan[user] = _finish(user, _map_terms(image, lambda term: _gram_term(term, total)))
            continue
        y = _moment_factor(user, e, counts)
        summing = users[user][0] if y is not None and users.get(user) else None
        moment = _moment(image, scaled, y, grams) \
            if summing is not None and _row_sum(summing, rows) else None
        if moment is None:
            return {}
        plan[summing] = _finish(summing, moment)
    return plan


def _gram_use(user: Node, e: Node) -> bool:
    """``A @ e`` with n >= 4 d (see the module's docstring)."""
    return (user.op == "matmul" and user.inputs[1] is e and user.inputs[0] is not e
            and e.shape[-2] >= 4 * e.shape[-1])


def _row_sum(node: Node, rows: int) -> bool:
    """A sum over the row axis alone."""
    return node.op == "sum" and tuple(node.attrs[0]) == (rows,)


def _moment_factor(user: Node, e: Node, counts: dict):
    """``y`` of a product ``e * y`` (or ``y * e``) used once (by a sum, checked by the caller),
    of ``e``'s shape; else None."""
    if user.op != "mul" or counts.get(user) != 1:
        return None
    a, b = user.inputs
    y = b if a is e else a
    return y if y is not e and y.shape == e.shape else None


def _is_row_scale(s: Node, e: Node) -> bool:
    """``s`` broadcasts along the last axis of ``e`` (one factor per row)."""
    return s.ndim <= e.ndim and (s.ndim == 0 or s.shape[-1] == 1)


def _image(e: Node, counts: dict):
    """``e`` as row scales (and negations) of a right-linear image of one ``x`` (an _Image),
    or None."""
    scales = []
    node = e
    while node is e or counts.get(node) == 1:
        if node.op == "neg":
            scales.append((None, None))
            node = node.inputs[0]
            continue
        if node.op != "mul":
            break
        a, b = node.inputs
        if _is_row_scale(a, e) and b.shape == e.shape:
            scales.append((0, a))
            node = b
        elif _is_row_scale(b, e) and a.shape == e.shape:
            scales.append((1, b))
            node = a
        else:
            break
    if not any(index is not None for index, _ in scales):
        return None
    x = _linear_argument(node)
    return None if x is None else _Image(tuple(reversed(scales)), node, x)


_TREE = ("add", "sub", "neg")


# The most nodes of R's add/sub/neg tree walked: a linear image of a few terms is what the
# rule is for; a longer sum (a 2-d elementwise program's chain under a scalar factor) is not
# walked through, so the pass stays linear in the graph.
MAX_TREE = 32


def _terms(root: Node) -> list:
    """R's terms below its add/sub/neg nodes of R's shape (walked without recursion); a
    tree of more than MAX_TREE nodes gives [root] (no image: root is no term)."""
    terms, todo, seen = [], [root], set()
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if len(seen) > MAX_TREE:
            return [root]
        if node.op in _TREE and all(i.shape == root.shape for i in node.inputs):
            todo += node.inputs
        else:
            terms.append(node)
    return terms


def _term_kind(term: Node):
    """(kind, x, factor) of a right-linear term: ("matmul", x, C) for ``x @ C``, ("scale",
    x, q) for ``q * x`` / ``x * q`` with q constant along the rows, else None."""
    if term.op == "matmul" and term.inputs[0].shape == term.shape:
        return "matmul", term.inputs[0], term.inputs[1]
    if term.op == "mul":
        for i in (0, 1):
            x, q = term.inputs[i], term.inputs[1 - i]
            if x.shape == term.shape and q.ndim <= term.ndim and \
                    (q.ndim < 2 or q.shape[-2] == 1):
                return "scale", x, q
    return None


def _linear_argument(root: Node):
    """The one ``x`` that every term of ``root`` is a right-linear map of, with at least one
    matmul among them (what the rewrite saves); None otherwise. A bare ``x`` is a term too."""
    kinds = [_term_kind(t) for t in _terms(root)]
    xs = {k[1] for k in kinds if k is not None}
    if len(xs) != 1 or not any(k is not None and k[0] == "matmul" for k in kinds):
        return None
    (x,) = xs
    bare = [t for t, k in zip(_terms(root), kinds) if k is None]
    return x if all(t is x for t in bare) else None


def _scaled(image: _Image) -> Node:
    """W: the row scales (and negations) applied to ``x`` in their order (innermost first)."""
    w = image.x
    for index, factor in image.scales:
        w = make("neg", (w,)) if index is None else \
            make("mul", (w, factor) if index == 1 else (factor, w))
    return w


def _map_terms(image: _Image, rebuild) -> Node:
    """R's add/sub/neg tree with each term replaced by ``rebuild(term)`` (children first, by
    an explicit stack)."""
    terms = set(_terms(image.root))
    done: dict = {}
    stack = [image.root]
    while stack:
        node = stack[-1]
        if node in done:
            stack.pop()
        elif node in terms:
            done[node] = rebuild(node)
            stack.pop()
        elif all(i in done for i in node.inputs):
            done[node] = make(node.op, tuple(done[i] for i in node.inputs), node.attrs)
            stack.pop()
        else:
            stack += [i for i in node.inputs if i not in done]
    return done[image.root]


def _gram_term(term: Node, z: Node) -> Node:
    """The term of R applied to ``z`` in place of ``x`` (z = A @ W or sum_n W: R's factors do
    not vary along the rows, so they act on z's rows as on x's)."""
    kind = _term_kind(term)
    if kind is None:
        return z
    op, x, factor = kind
    if op == "matmul":
        return make("matmul", (z, factor))
    return make("mul", (z, factor) if term.inputs[0] is x else (factor, z))


def _moment(image: _Image, scaled: Node, y: Node, grams: dict):
    """sum_n(E * y), rows kept: per term ``x @ C`` the sum over i of ``(W^T y) * C`` from the
    Gram product ``y^T @ W`` (None when the matmul uses do not give it), per term ``q * x``
    ``q * sum_n(W * y)``, which is the Gram product's diagonal where there is one (the same
    sums: (y^T W)_jj = sum_n y_nj W_nj)."""
    rows = y.ndim - 2
    gram = grams.get(transpose(y, tuple(range(rows)) + (rows + 1, rows)))
    kinds = [_term_kind(t) for t in _terms(image.root)]
    if gram is None and any(k is not None and k[0] == "matmul" for k in kinds):
        return None
    if gram is None:
        moment = make("sum", (make("mul", (scaled, y)),), ((rows,), True))
        cross = None
    else:
        moment = _diagonal(gram)
        cross = transpose(gram, tuple(range(rows)) + (rows + 1, rows))

    def rebuild(term):
        kind = _term_kind(term)
        if kind is None:
            return moment
        op, x, factor = kind
        if op == "matmul":
            return make("sum", (make("mul", (cross, factor)),), ((rows,), True))
        return make("mul", (moment, factor) if term.inputs[0] is x else (factor, moment))
    return _map_terms(image, rebuild)


def _diagonal(square: Node) -> Node:
    """The diagonal of the last two (equal) axes of ``square``, as one row: (..., 1, d)."""
    lead, d = square.shape[:-2], square.shape[-1]
    flat = reshape(square, lead + (d * d,))
    index = tuple(Slice(0, e, 1) for e in lead) + (Slice(0, d * d, d + 1),)
    return reshape(make("getitem", (flat,), (index,)), lead + (1, d))


def _finish(s: Node, inner: Node) -> Node:
    """``inner`` (rows kept) in the shape of the sum ``s`` it replaces."""
    return inner if inner.shape == s.shape else reshape(inner, s.shape)


def symmetric_gram(node: Node) -> bool:
    """Whether ``node`` is a Gram product ``x^T @ W`` with ``W`` row scales (and negations)
    of ``x`` itself, ``x^T diag(s) x``: symmetric in exact arithmetic, so a kernel may compute
    one triangle and mirror it (codegen.matmul_kernel). In floating point entry (i, j) is
    ``sum_n x_ni (s_n x_nj)`` and (j, i) ``sum_n x_nj (s_n x_ni)``: the same terms, each
    rounded alike up to the order of one product, so the mirror is as accurate as computing
    it."""
    if node.op != "matmul" or node.ndim < 2:
        return False
    a, w = node.inputs
    rows = a.ndim - 2
    if a.op != "transpose" or rows < 0 or \
            a.attrs[0] != tuple(range(rows)) + (rows + 1, rows):
        return False
    x = a.inputs[0]
    while w is not x:
        if w.op == "neg":
            w = w.inputs[0]
        elif w.op == "mul":
            u, v = w.inputs
            if _is_row_scale(v, w) and u.shape == w.shape:
                w = u
            elif _is_row_scale(u, w) and v.shape == w.shape:
                w = v
            else:
                return False
        else:
            return False
    return True
