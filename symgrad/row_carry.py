"""An inner loop that writes only row ``i`` of a carried matrix (``i`` the outer loop's index,
the same in every inner iteration) carries that row instead of the matrix (a helper of
``region_passes.simplify_region``).

Cholesky-Banachiewicz, Doolittle LU and DP tables write ``L[i, j] = v`` inside ``for j``. Two
traced indices go through ``index_writes._assign_one``: every inner iteration selects over the
whole flattened carry,

    reshape(where(eq(arange(N * M), M * i + j), v, reshape(L, (N * M,))), (N, M))

so each write costs O(N M) forward and backward, and the inner loop also reads ``L`` (other
rows ``L[j]``, elements ``L[j, j]``, its own row ``L[i]``), so ``grid_writes`` cannot stack it.
When every write of the carry is at row ``i`` (position ``M * i + c`` with ``0 <= c < M`` from
the index ranges), the inner loop changes no other row, so it may carry ``r = L[i]`` (one row)
and read every other row from the matrix it started with, ``L0``:

    take(L, x)          -> r if x is i, else where(x == i, r, take(L0, x))   (0 <= x < N)
    take(flat L, M a + c) -> take(r, c) if a is i, else
                           where(a == i, take(r, c), take(flat L0, M a + c))
    take(L, x, 1)       -> where(arange(N) == i, take(r, x), take(L0, x, 1))   (0 <= x < M)
    the write above     -> where(eq(arange(M), c), v, r)

(``x``, ``a``, ``c`` affine in i and j, their ranges checked over every iteration that runs,
:func:`_iterations`; a row ``i + t`` other than the one written reads ``L0`` with no select, as
does a column read whose readers keep only the rows above i, ``U[:i, k]``), and after the loop
the matrix is ``L0`` with row ``i`` replaced by the final ``r`` (one select per outer
iteration). The row written may also be ``i + 1`` (``D[i, j]`` of a DP table with ``i`` from 1).
Every value read and written is the same as before (the same bits); the derivative of a read of
``L0`` inside the loop is a per-iteration row scattered once after it (``region_autodiff``'s
loop-invariant gathers), so the gradient may differ in the last places where those terms are
summed in another order. Reads through branches (``if i == j``) are rewritten inside the branch
bodies. Anything else that reads the carry (a sum of it, a nested loop, a result other than the
carry's, an index not affine in i and j) leaves the loop as it was, and so does a carry the
inner loop only writes, off any branch (``grid_writes`` stacks those).
"""
from __future__ import annotations

from .elementwise import add, eq, where
from .grid_writes import is_arange, read_position
from .index_ops import row_update, take
from .ir import Node, make, substitute, toposort
from .numpy_indexing import affine_parts
from .op_base import arange
from .regions import COUNT, close, cond, loop_consts, loop_count, placeholder, rebuild_loop
from .shape_ops import reshape


class _Keep(Exception):
    """The loop does not fit: leave it as it was."""


def carried_rows(loop: Node) -> Node:
    """``loop`` (an outer loop) with each inner loop of its body that writes only row ``i`` of
    a 2-d carry (``i``: ``loop``'s index) carrying that row (the module docstring)."""
    body, trips, nc, nx, reverse = loop.attrs[:5]
    if reverse or not isinstance(trips, int) or trips <= 0:   # (its index: 0 <= i < trips)
        return loop
    index = body.params[0]
    outer_consts = dict(zip(body.params[1 + nc + nx:], loop_consts(loop)))
    mapping = {}
    for m in toposort(body.results):
        if m.op != "loop":
            continue
        for k in (k for k in range(m.attrs[2]) if m.inputs[k].ndim == 2):
            finals = _row_carried(m, k, index, trips, outer_consts)
            if finals is not None:
                mapping.update(finals)
                break
    if not mapping:
        return loop
    results = substitute(list(body.results), mapping)
    return rebuild_loop(loop, list(body.params[:1 + nc + nx]), results,
                        list(loop.inputs[:nc + nx]), nc)


def _row_carried(inner: Node, k: int, outer_index: Node, outer_trips: int, outer_consts: dict):
    """{old projection of ``inner``: its value} with carry ``k`` a row carry, else None."""
    body, tj, nc, nx, reverse, exit_ = inner.attrs
    init = inner.inputs[k]
    n, m = init.shape
    if reverse or not isinstance(tj, int) or tj <= 0 or exit_ not in (None, (COUNT,)) or \
            init.dtype not in ("float32", "float64") or outer_index.dtype != "int64":
        return None
    # every inner index value j that runs, with the outer index i: 0 <= i < outer_trips,
    # 0 <= j < min(tj, count) where a counted loop's count is affine in i
    count = (0, tj) if exit_ is None else _affine_outer(loop_count(inner), outer_index)
    if count is None:
        return None
    space = _iterations(outer_trips, tj, count)
    leaves = {body.params[0]: (0, 1, 0)}
    for p, c in zip(body.params[1 + nc + nx:], loop_consts(inner)):
        found = _affine_outer(c, outer_index)
        if found is not None:
            leaves[p] = (found[0], 0, found[1])
    r = placeholder(init.dtype, (m,))
    l0 = placeholder(init.dtype, (n, m))
    i = placeholder(outer_index.dtype)
    for shift in (0, 1):   # the row written: i, or i + 1 (D[i + 1, j + 1] of a DP table)
        if outer_trips - 1 + shift >= n:
            continue
        rewrite = _Rewrite(body.params[1 + k], r, l0, i, body.params[0], leaves, space, (n, m))
        rewrite.row = (1, 0, shift)
        rewrite.maps = (dict(zip(body.params[1 + nc + nx:], loop_consts(inner))), outer_consts)
        rewrite.outer_index = outer_index
        rewrite.body_readers = {}   # node of the inner body -> the body's nodes that read it
        for x in toposort(body.results):
            for u in x.inputs:
                rewrite.body_readers.setdefault(u, []).append(x)
        try:
            results = [rewrite.row_of(x) if q == k else rewrite.plain(x)
                       for q, x in enumerate(body.results)]
            break
        except _Keep:
            continue
    else:
        return None
    if not rewrite.reads:   # only written, not on a branch: grid_writes stacks it, if anything
        return None
    row = outer_index if not shift else add(outer_index, _int(shift))
    explicit = list(body.params[:1 + nc + nx])
    explicit[1 + k] = r
    inputs = list(inner.inputs[:nc + nx])
    inputs[k] = take(init, row, 0)
    new = rebuild_loop(inner, explicit, results, inputs, nc, outer={l0: init, i: outer_index})
    finals = {make("proj", (inner,), (q,)): make("proj", (new,), (q,))
              for q in range(len(body.results))}
    finals[make("proj", (inner,), (k,))] = row_update(init, row, make("proj", (new,), (k,)),
                                                      False)
    return finals


def _iterations(ti: int, tj: int, count) -> list:
    """(i, the last j that runs at i) for the outer index values i where an affine form
    ``a i + b j + c`` can take its least and greatest values over the iterations that run
    (0 <= i < ti, 0 <= j <= last(i) = min(tj, p i + q) - 1 for ``count`` = (p, q)): last(i) is
    linear between the breakpoints p i + q = tj and p i + q = 1 (below which nothing runs), so
    the extremes lie at 0, ti - 1 and the integers beside the breakpoints."""
    p, q = count
    candidates = {0, ti - 1}
    if p:
        for edge in (tj, 1):
            at = (edge - q) // p
            candidates.update(range(at - 1, at + 3))
    return [(i, min(tj, p * i + q) - 1) for i in sorted(candidates) if 0 <= i < ti]


def _affine_outer(value: Node, outer_index: Node):
    """(a, b) when ``value`` is ``a * i + b`` (i the outer index, a and b numbers), else None."""
    parts = affine_parts(value)
    if parts is None or any(leaf is not outer_index for leaf in parts[0]):
        return None
    return parts[0].get(outer_index, 0), parts[1]


class _Rewrite:
    """The inner body's nodes rebuilt over the row carry ``r``: ``roles`` holds the nodes that
    stand for the whole matrix (``carry``: its row i is ``r`` now, ``flat``: its flattening,
    ``written``: a flattened write before its reshape), ``done`` every other rebuilt node."""

    def __init__(self, carry, r, l0, i, j, leaves, space, shape):
        self.roles = {carry: ("carry", r)}
        self.done: dict[Node, Node] = {}
        self.reads = 0   # the matrix's reads and branches rewritten
        self.l0, self.i, self.j, self.leaves, self.space = l0, i, j, leaves, space
        self.n, self.m = shape

    def row_of(self, x: Node) -> Node:
        """The row i that ``x``, a value of the whole matrix, holds."""
        self._walk(x)
        role = self.roles.get(x)
        if role is None or role[0] != "carry":
            raise _Keep
        return role[1]

    def plain(self, x: Node) -> Node:
        """``x`` (no value of the matrix) rebuilt over the row carry."""
        self._walk(x)
        if x in self.roles:
            raise _Keep
        return self.done[x]

    def _walk(self, root: Node):
        for x in toposort([root]):
            if x not in self.done and x not in self.roles:
                self._one(x)

    def _one(self, x: Node):
        ins = x.inputs
        if not any(i in self.roles for i in ins):
            self.done[x] = x if not any(self.done.get(i, i) is not i for i in ins) else \
                make(x.op, tuple(self.done[i] for i in ins), x.attrs)
            return
        if x.op == "cond":
            self._cond(x)
            return
        kinds = [self.roles[i][0] if i in self.roles else None for i in ins]
        if x.op == "take" and kinds == ["carry", None] and x.attrs[0] == 0 and ins[1].ndim == 0:
            self.done[x] = self._row_read(ins[1], self.roles[ins[0]][1])
        elif x.op == "take" and kinds == ["carry", None] and x.attrs[0] == 1 and ins[1].ndim == 0:
            self.done[x] = self._column_read(ins[1], self.roles[ins[0]][1], x)
        elif x.op == "reshape" and kinds == ["carry"] and x.shape == (self.n * self.m,):
            self.roles[x] = ("flat", self.roles[ins[0]][1])
        elif x.op == "take" and kinds == ["flat", None] and x.attrs[0] == 0 and ins[1].ndim == 0:
            self.done[x] = self._element_read(ins[1], self.roles[ins[0]][1])
        elif x.op == "where" and kinds == [None, None, "flat"]:
            self.roles[x] = ("written", self._write(x, self.roles[ins[2]][1]))
        elif x.op == "reshape" and kinds == ["written"] and x.shape == (self.n, self.m):
            self.roles[x] = ("carry", self.roles[ins[0]][1])
        else:
            raise _Keep

    def _row_read(self, at: Node, r: Node) -> Node:
        """Row ``at`` of the matrix (``take(L, at)``)."""
        self.reads += 1
        form = self._affine(at)
        self._within(form, self.n)
        if form == self.row:
            return r
        at = self.done[at]
        if form[:2] == (1, 0):   # i + t, t != the row's shift: another row
            return take(self.l0, at, 0)
        return where(eq(at, self._node(self.row)), r, take(self.l0, at, 0))

    def _column_read(self, at: Node, r: Node, read: Node) -> Node:
        """Column ``at`` of the matrix (``take(L, at, 1)``): row i's element from ``r``; the
        initial matrix's column alone where only its rows above i are kept (``U[:i, k]``: every
        reader is ``where(arange(N) < i, read, z)``)."""
        self.reads += 1
        self._within(self._affine(at), self.m)
        at = self.done[at]
        column = take(self.l0, at, 1)
        if self.body_readers.get(read) and all(
                u.op == "where" and u.inputs[1] is read and u.inputs[0] is not read and
                self._rows_above_i(u.inputs[0]) for u in self.body_readers[read]):
            return column
        rows = arange(0, self.n, 1, self.i.dtype)
        return where(eq(rows, self._node(self.row)), take(r, at, 0), column)

    def _rows_above_i(self, mask: Node) -> bool:
        """Whether ``mask`` is ``arange(N) < i`` (in the inner body, or an inner const whose
        value in the outer body is that): rows above the one written, i + shift."""
        level = self.maps
        if mask in level[0]:
            mask, level = level[0][mask], level[1:]
            below = mask.op == "lt" and mask.inputs[1] is self.outer_index
        else:
            below = mask.op == "lt" and self.leaves.get(mask.inputs[1]) == (1, 0, 0)
        return below and mask.shape == (self.n,) and is_arange(mask.inputs[0], self.n, level)

    def _element_read(self, at: Node, r: Node) -> Node:
        """Element ``at`` of the flattened matrix: ``M a + c`` with the row a affine in i and j
        (tried: the row written, j, ``at`` // M termwise, i + t for small t)."""
        self.reads += 1
        checked = read_position(at, self.n * self.m, self.maps)
        at = checked if checked is not None else at
        form = self._affine(at)
        shift = self.row[2]
        quotient = tuple(f // self.m for f in form)   # (M + 1) (i + j) of L[k, k]: row i + j
        for row in (self.row, (0, 1, 0), quotient,
                    *((1, 0, t) for t in range(shift - 2, shift + 3))):
            column = tuple(f - self.m * g for f, g in zip(form, row))
            try:
                self._within(row, self.n)
                self._within(column, self.m)
            except _Keep:
                continue
            flat0 = reshape(self.l0, (self.n * self.m,))
            if row == self.row:
                return take(r, self._node(column), 0)
            if row[:2] == (1, 0):   # another row
                return take(flat0, self.done[at], 0)
            return where(eq(self._node(row), self._node(self.row)),
                         take(r, self._node(column), 0), take(flat0, self.done[at], 0))
        raise _Keep

    def _write(self, select: Node, r: Node) -> Node:
        """Row i after ``where(eq(arange(N M), M i + c), v, flat L)``."""
        test, value, flat = select.inputs
        if select.shape != flat.shape or value.ndim or value.dtype != flat.dtype:
            raise _Keep
        if test.op != "eq" or test.shape != flat.shape or \
                not is_arange(test.inputs[0], self.n * self.m, self.maps):
            raise _Keep
        at = test.inputs[1]
        checked = read_position(at, self.n * self.m, self.maps)
        form = self._affine(checked if checked is not None else at)
        column = tuple(f - self.m * g for f, g in zip(form, self.row))
        self._within(column, self.m)
        c = self._node(column)
        return where(eq(arange(0, self.m, 1, c.dtype), c), self.done[value], r)

    def _affine(self, at: Node):
        """(a, b, c) when ``at`` is ``a i + b j + c`` in every iteration, else _Keep."""
        parts = affine_parts(at)
        if parts is None:
            raise _Keep
        terms, c = parts
        a = b = 0
        for leaf, coef in terms.items():
            form = self.leaves.get(leaf)
            if form is None:
                raise _Keep
            a, b, c = a + coef * form[0], b + coef * form[1], c + coef * form[2]
        return a, b, c

    def _within(self, form, size: int):
        """_Keep unless ``a i + b j + c`` lies in ``[0, size)`` for every (i, j) that runs
        (its extremes over ``space``, :func:`_iterations`)."""
        a, b, c = form
        for i, last in self.space:
            if last < 0:
                continue
            ends = (a * i + c, a * i + b * last + c)
            if min(ends) < 0 or max(ends) >= size:
                raise _Keep

    def _node(self, form) -> Node:
        """The integer ``a i + b j + c`` in the inner body."""
        value = None
        for coef, leaf in zip(form, (self.i, self.j)):
            if coef:
                term = leaf if coef == 1 else make("mul", (leaf, _int(coef)), ())
                value = term if value is None else add(value, term)
        if value is None:
            return _int(form[2])
        return add(value, _int(form[2])) if form[2] else value

    def _cond(self, x: Node):
        """A branch reading the matrix: both sides inlined, rewritten and rebuilt."""
        self.reads += 1
        then, other = x.attrs
        operands = x.inputs[1:]
        if x.inputs[0] in self.roles:
            raise _Keep
        sides = []
        for side in (then, other):
            values = substitute(list(side.results), dict(zip(side.params, operands)))
            rows_out = []
            for v in values:
                self._walk(v)
                rows_out.append(self.roles.get(v))
            sides.append((values, rows_out))
        (then_vals, then_roles), (else_vals, else_roles) = sides
        results_then, results_else, carried = [], [], []
        for q, (a, b) in enumerate(zip(then_roles, else_roles)):
            if (a is None) != (b is None):
                raise _Keep
            if a is not None:
                if a[0] != "carry" or b[0] != "carry":
                    raise _Keep
                results_then.append(a[1])
                results_else.append(b[1])
                carried.append(q)
            else:
                results_then.append(self.done[then_vals[q]])
                results_else.append(self.done[else_vals[q]])
        base = list(dict.fromkeys(self.done[i] if i not in self.roles else self.roles[i][1]
                                  for i in operands))
        _, extra, _ = close(base, results_then, hoist=False)
        _, extra2, _ = close(base, results_else, hoist=False)
        projections = cond(self.done[x.inputs[0]], results_then, results_else,
                           operands=list(dict.fromkeys(base + extra + extra2)),
                           derivative=then.derivative)
        new = projections[0].inputs[0] if projections else x
        self.done[x] = new
        for q in carried:
            self.roles[make("proj", (x,), (q,))] = ("carry", make("proj", (new,), (q,)))


def _int(value: int) -> Node:
    return make("const", (), (int(value), "int64"))
