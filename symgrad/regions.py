"""Regions: loops and branches as IR nodes whose bodies are sub-graphs.

A region node's body is a :class:`Body`: canonical ``param`` leaves (numbered by position) and
the result nodes computed from them. Bodies are *closed*: everything a body reads from outside
is an input of the region node, so a body is a pure function, interned like any node (the same
loop traced twice is one node), and every pass can treat it as a value in the node's attrs.

* ``loop`` (a scan) runs ``n`` iterations (``n`` is an attr: a trace is specialised on it; the
  CPU back end makes it a run-time parameter like every size). Its inputs are
  ``(*inits, *xs, *consts)``; the body's params are ``(i, *carries, *x_rows, *consts)`` and its
  results ``(*new_carries, *ys)``: carries thread through the iterations, ``xs[i]`` is row i of
  each per-iteration input, and each ``y`` is stacked into an ``(n, ...)`` output. With
  ``reverse`` the iterations run ``i = n-1, ..., 0`` (the backward pass of a loop).
  Its attrs are ``(body, n, n_carry, n_xs, reverse, exit)``; ``exit`` makes it stop early:

  - ``("until", k, c)`` (a ``while`` or a ``break`` on data): carry ``k`` is a bool scalar,
    the *done flag*; the loop stops before the first iteration that starts with it true, so
    the body only ever runs with it false (passes may fold it to False in the body). Carry
    ``c`` (int64; one per example in a batch) counts the iterations that ran (the body adds
    one): the trip count a backward pass walks. Stacked rows of iterations that did not run are unspecified.
  - ``("count",)`` (the backward pass of such a loop, and a loop over a range whose bounds
    are an enclosing loop's index, ``range(i + 1, n)``: ``n`` is then the longest such range):
    the last input is an int64 scalar ``m <= n``; only the first ``m`` iterations run
    (``i = m-1, ..., 0`` reversed; none where ``m <= 0``) and the stacked rows from ``m`` on
    are zeros.
  - ``None``: all ``n`` iterations run.
* ``cond`` runs one of two bodies on ``(pred, *operands)``: only the taken side is evaluated,
  so the side not taken never contributes to a value or a derivative (no ``0 * nan``).
* ``remat`` runs one body on its operands: a checkpoint (``sg.checkpoint``, the user's call,
  role ``"checkpoint"``) or the recomputation of one in a backward pass (role ``"recompute"``:
  the body recomputes the checkpointed values from its operands and applies their VJP, so
  those values live only inside the region; a closed body is never merged with the forward
  nodes by hash-consing). Back ends inline a checkpoint (``symgrad.checkpoint.lowerable``)
  and keep a recomputation a region of its own.
* ``proj`` is one result of a region node (``dtype`` ``"tuple"``): a loop's final carries and
  stacked outputs, or a branch's results.

While a body is being built it refers to *placeholders* (params with a string id, unique per
call of :func:`placeholder`) and to outer nodes freely; :func:`close` turns that into a closed,
canonical body and the list of outer values it needs (its captures), hoisting loop-invariant
work out of a loop body on the way.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from . import spelling as sp
from .ir import OPS, Node, OpDef, make, register, substitute, toposort

TUPLE = "tuple"
REGION_OPS = ("loop", "cond", "remat")
# What a back end without native regions never sees (``straight_line`` expands them first).
EXPANDED = {op: "expanded into straight-line code first (symgrad.regions.straight_line)"
            for op in ("loop", "cond", "remat", "proj", "param")}
# The roles of a ``remat`` node (its second attr).
CHECKPOINT, RECOMPUTE = "checkpoint", "recompute"
# Leaves a body keeps inside rather than receiving as an input (a number costs nothing).
_KEPT_LEAVES = ("const",)


@dataclass(frozen=True, eq=False)
class Body:
    """A closed sub-graph: ``params`` (canonical ``param`` leaves) -> ``results``. ``names``
    are the user's names of the params (for the generated source), ``derivative`` whether
    autodiff built it (select sinking applies inside, as for derivative nodes outside)."""
    params: tuple
    results: tuple
    names: tuple = ()
    derivative: bool = False

    def _key(self):
        return (self.params, self.results, self.names, self.derivative)

    def __eq__(self, other):
        return isinstance(other, Body) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return f"Body({len(self.params)} params -> {len(self.results)} results)"

    def nodes(self) -> list[Node]:
        return toposort(self.results)


# ----------------------------------------------------------------------------------------------
# Building bodies

_ids = itertools.count()


def placeholder(dtype: str, shape=()) -> Node:
    """A fresh body parameter while a body is being built (unique: never shared by hash-consing
    with another body's)."""
    return make("param", (), (f"t{next(_ids)}", dtype, tuple(shape)))


def param(k: int, like: Node) -> Node:
    return make("param", (), (k, like.dtype, like.shape))


def is_placeholder(n: Node) -> bool:
    return n.op == "param" and isinstance(n.attrs[0], str)


def close(params, results, hoist: bool = True, names=(), derivative=False, outer=frozenset()):
    """The closed body of ``results`` over ``params`` (placeholders or other nodes, in order),
    and its captures: the outer values it reads, which become further params after ``params``.
    ``hoist``: a loop body, whose work that depends on no param is computed once outside (the
    largest such expressions are captured). Without it (a branch) only outer leaves are
    captured and everything else stays inside, so that it runs only when the branch is taken,
    except the values in ``outer`` (computed before the branch), which are captured too.
    Returns ``(body, captures, memo)``; ``memo`` maps the built nodes to the body's."""
    params = list(params)
    results = list(results)
    captures: dict[Node, None] = {}
    if hoist:
        order = toposort(results)
        varying = set(params)
        for n in order:
            if n not in varying and any(i in varying for i in n.inputs):
                varying.add(n)
        for n in order:
            if n in varying:
                for i in n.inputs:
                    if i not in varying and i.op not in _KEPT_LEAVES:
                        captures.setdefault(i)
        for r in results:
            if r not in varying and r.op not in _KEPT_LEAVES:
                captures.setdefault(r)
    else:
        stop = set(params)
        order = toposort(results, known=stop | set(outer))
        read = [i for n in order for i in n.inputs] + results
        for i in read:
            if i not in stop and (i in outer or i.op in ("arg", "param")):
                captures.setdefault(i)
    all_params = params + list(captures)
    mapping = {p: param(k, p) for k, p in enumerate(all_params)}
    memo = dict(mapping)
    new_results = substitute(results, memo)
    body = Body(tuple(mapping[p] for p in all_params), tuple(new_results), tuple(names), derivative)
    return body, list(captures), memo


# ----------------------------------------------------------------------------------------------
# The ops


def _check_params(body: Body, values, what: str):
    if len(body.params) != len(values):
        raise ValueError(f"internal: {what} body takes {len(body.params)} values, got {len(values)}")
    for p, v in zip(body.params, values):
        if (p.dtype, p.shape) != (v.dtype, tuple(v.shape)):
            raise TypeError(f"internal: {what} body param {p.dtype}{list(p.shape)} given "
                            f"{v.dtype}{list(v.shape)}")


class _Row:
    """Stands for row i of a per-iteration input in a type check."""

    def __init__(self, x):
        self.dtype, self.shape = x.dtype, x.shape[1:]


UNTIL, COUNT = "until", "count"


def loop_exit(loop: Node):
    """A loop's ``exit`` attr (None, ``("until", k, c)`` or ``("count",)``)."""
    return loop.attrs[5]


def loop_consts(loop: Node) -> tuple:
    """A loop's loop-invariant inputs (its trip count input, if any, is not one)."""
    nc, nx = loop.attrs[2:4]
    end = len(loop.inputs) - (loop.attrs[5] == (COUNT,))
    return loop.inputs[nc + nx:end]


def loop_count(loop: Node):
    """The trip count input of a ``("count",)`` loop (None for the others)."""
    return loop.inputs[-1] if loop.attrs[5] == (COUNT,) else None


def _check_exit(exit_, inputs, body, n_carry):
    if exit_ is None:
        return inputs
    if exit_ == (COUNT,):
        count = inputs[-1]
        if (count.dtype, count.shape) != ("int64", ()):
            raise TypeError(f"internal: loop trip count {count.dtype}{list(count.shape)}")
        return inputs[:-1]
    kind, k, c = exit_
    carries = body.params[1:1 + n_carry]
    if kind != UNTIL or max(k, c) >= n_carry or (carries[k].dtype, carries[k].shape) != \
            ("bool", ()) or carries[c].dtype != "int64":
        raise TypeError(f"internal: loop exit {exit_!r} on carries that are not a bool flag "
                        "and an int64 counter")
    return inputs


def _loop_infer(inputs, attrs):
    body, n, n_carry, n_xs, _reverse, exit_ = attrs
    inputs = _check_exit(exit_, inputs, body, n_carry)
    inits, xs = inputs[:n_carry], inputs[n_carry:n_carry + n_xs]
    for x in xs:
        if not x.shape or x.shape[0] != n:
            raise ValueError(f"internal: loop of {n} iterations over an input of shape {x.shape}")
    index = make("const", (), (0, "int64"))
    _check_params(body, [index, *inits, *(_Row(x) for x in xs), *inputs[n_carry + n_xs:]], "loop")
    for p, r in zip(body.params[1:1 + n_carry], body.results[:n_carry]):
        if (p.dtype, p.shape) != (r.dtype, r.shape):
            raise TypeError(f"internal: loop carry {p.dtype}{list(p.shape)} becomes "
                            f"{r.dtype}{list(r.shape)}")
    return TUPLE, ()


def loop_result_type(loop: Node, k: int) -> tuple:
    """(dtype, shape) of a region node's result k."""
    if loop.op in ("cond", "remat"):
        r = loop.attrs[0].results[k]
        return r.dtype, r.shape
    body, n, n_carry = loop.attrs[:3]
    r = body.results[k]
    return r.dtype, (r.shape if k < n_carry else (n,) + r.shape)


def evaluate(outputs, env: dict) -> list:
    """The NumPy reference value of ``outputs`` with ``env`` binding the params (and any other
    nodes) to values."""
    values = dict(env)
    for n in toposort(outputs, known=values):
        opdef = OPS[n.op]
        if n.op in ("param", "arg"):
            raise KeyError(f"internal: unbound {n!r} while evaluating a body")
        args = [values[i] for i in n.inputs]
        values[n] = opdef.numpy(*args, n.attrs) if (args or opdef.kind != "leaf") else opdef.numpy(n.attrs)
    return [values[o] for o in outputs]


def _loop_numpy(*args):
    *values, attrs = args
    body, n, n_carry, n_xs, reverse, exit_ = attrs
    trips = n
    if exit_ == (COUNT,):
        trips, values = min(max(int(values[-1]), 0), n), values[:-1]
    carries = list(values[:n_carry])
    xs, consts = values[n_carry:n_carry + n_xs], values[n_carry + n_xs:]
    ys = [np.zeros((n,) + r.shape, r.dtype) for r in body.results[n_carry:]]
    for i in (reversed(range(trips)) if reverse else range(trips)):
        if exit_ is not None and exit_[0] == UNTIL and carries[exit_[1]]:
            break
        env = dict(zip(body.params, [np.int64(i), *carries, *(x[i] for x in xs), *consts]))
        out = evaluate(body.results, env)
        carries = [np.asarray(v, dtype=r.dtype)[()] for v, r in zip(out[:n_carry], body.results)]
        for y, v in zip(ys, out[n_carry:]):
            y[i] = v
    return tuple(carries) + tuple(ys)


def _cond_infer(inputs, attrs):
    then, other = attrs
    pred, operands = inputs[0], inputs[1:]
    if pred.shape != () or pred.dtype != "bool":
        raise TypeError(f"internal: cond on {pred.dtype}{list(pred.shape)}")
    _check_params(then, operands, "cond")
    _check_params(other, operands, "cond")
    if [(r.dtype, r.shape) for r in then.results] != [(r.dtype, r.shape) for r in other.results]:
        raise TypeError("internal: the branches of a cond give different types")
    return TUPLE, ()


def _cond_numpy(*args):
    pred, *operands, attrs = args
    body = attrs[0] if pred else attrs[1]
    return tuple(evaluate(body.results, dict(zip(body.params, operands))))


def _remat_infer(inputs, attrs):
    body, role = attrs
    if role not in (CHECKPOINT, RECOMPUTE):
        raise ValueError(f"internal: remat role {role!r}")
    _check_params(body, inputs, "remat")
    return TUPLE, ()


def _remat_numpy(*args):
    *operands, (body, _role) = args
    return tuple(evaluate(body.results, dict(zip(body.params, operands))))


def _proj_infer(inputs, attrs):
    (region,) = inputs
    if region.dtype != TUPLE:
        raise TypeError("internal: proj of a value that is not a region's")
    return loop_result_type(region, attrs[0])


def _region_rule(*_):
    raise AssertionError("region ops are differentiated by symgrad.region_autodiff")


register(OpDef("param", "leaf",          # (position or placeholder id, dtype, shape)
               infer=lambda inputs, attrs: (attrs[1], attrs[2]), numpy=None,
               python=lambda args, node: (f"p{node.attrs[0]}", sp.ATOM)))
register(OpDef("loop", "region", _loop_infer, _loop_numpy, None, vjp=_region_rule, jvp=_region_rule))
register(OpDef("cond", "region", _cond_infer, _cond_numpy, None, vjp=_region_rule, jvp=_region_rule))
register(OpDef("remat", "region", _remat_infer, _remat_numpy, None, vjp=_region_rule,
               jvp=_region_rule))
register(OpDef("proj", "region", _proj_infer, lambda t, attrs: t[attrs[0]], None,
               vjp=_region_rule, jvp=_region_rule))


# ----------------------------------------------------------------------------------------------
# Builders


def results_of(region: Node) -> list[Node]:
    """The ``proj`` nodes of every result of a region node."""
    count = len(region.attrs[0].results)
    return [make("proj", (region,), (k,)) for k in range(count)]


def scan(n: int, index: Node, carries, inits, rows, xs, new_carries, ys, *, reverse=False,
         names=(), derivative=False, memo=None, exit=None, count=None) -> tuple[list[Node], list[Node]]:
    """A loop from a body built over placeholders: ``index`` (int64), ``carries`` (started at
    ``inits``) and ``rows`` (row i of ``xs``) give ``new_carries`` and per-iteration ``ys``.
    ``count`` (an int64 scalar, with ``exit`` ``("count",)``): the iterations that run, of
    ``n``. Returns the final carries and the stacked ys (``memo``: filled with the built nodes'
    counterparts in the body)."""
    params = [index, *carries, *rows]
    body, consts, built = close(params, [*new_carries, *ys], hoist=True, names=names,
                                derivative=derivative)
    if memo is not None:
        memo.update(built)
    tail = (count,) if exit == (COUNT,) else ()
    node = make("loop", (*inits, *xs, *consts, *tail),
                (body, n, len(carries), len(rows), reverse, exit))
    outs = results_of(node)
    return outs[:len(carries)], outs[len(carries):]


_KEEP_EXIT = object()


def rebuild_loop(loop: Node, explicit, results, inputs, n_carry: int, *, consts=None, outer=None,
                 names=None, derivative=None, exit=_KEEP_EXIT, count=None) -> Node:
    """A loop of ``loop``'s trip count and direction with a new body: ``results`` computed
    from the ``explicit`` params (the index, ``n_carry`` carries, then the rows: the old body's
    params or placeholders), whose values are ``inputs`` (the inits, then the per-iteration
    inputs), and from ``loop``'s consts (or ``consts``: their new values), which ``results``
    read as the old body's const params. The consts become captures again (re-hoisted) through
    stand-in placeholders, as the outer values may be an enclosing body's params, the same
    nodes as some of this body's; ``outer`` maps other placeholders in ``results`` to the outer
    values they stand for (tangents, batched consts). ``names`` / ``derivative`` default to the
    old body's; ``exit`` (its carry indices in the new body) and ``count`` (the trip count
    input) default to the old loop's."""
    body, trips, nc, nx, reverse, old_exit = loop.attrs
    exit_ = old_exit if exit is _KEEP_EXIT else exit
    if exit_ == (COUNT,):
        count = loop_count(loop) if count is None else count
    if len(inputs) != len(explicit) - 1:
        raise ValueError(f"internal: a loop body of {len(explicit)} explicit params given "
                         f"{len(inputs)} inputs")
    stand_ins = {p: placeholder(p.dtype, p.shape) for p in body.params[1 + nc + nx:]}
    values = dict(zip(stand_ins.values(), loop_consts(loop) if consts is None else consts))
    values.update(outer or {})
    new_body, captures, _ = close(explicit, substitute(list(results), stand_ins), hoist=True,
                                  names=body.names if names is None else names,
                                  derivative=body.derivative if derivative is None else derivative)
    tail = (count,) if exit_ == (COUNT,) else ()
    return make("loop", (*inputs, *substitute(captures, values), *tail),
                (new_body, trips, n_carry, len(explicit) - 1 - n_carry, reverse, exit_))


def cond(pred: Node, then_results, else_results, *, outer=frozenset(), derivative=False,
         operands=None) -> list[Node]:
    """A branch: ``then_results`` if ``pred`` else ``else_results`` (lists of nodes of the same
    types; each side becomes a body that runs only when taken). The bodies read ``operands``
    (default: the outer leaves and the ``outer`` values either side reads)."""
    if operands is None:   # one operand list for both bodies: what either side reads
        _, then_caps, _ = close([], then_results, hoist=False, outer=outer)
        _, else_caps, _ = close([], else_results, hoist=False, outer=outer)
        operands = list(dict.fromkeys(then_caps + else_caps))
    then, extra, _ = close(operands, then_results, hoist=False, derivative=derivative)
    other, extra2, _ = close(operands, else_results, hoist=False, derivative=derivative)
    assert not extra and not extra2, "internal: a branch reads a value not among its operands"
    node = make("cond", (pred, *operands), (then, other))
    return results_of(node)


def checkpointed(params, operands, results, memo=None) -> list[Node]:
    """A checkpoint: ``results`` built over the placeholders ``params`` (given ``operands``)
    as a ``remat`` node's body; work that depends on no param is done outside, once, and
    passed in (the backward pass then recomputes only what depends on the params). ``memo``:
    filled with the built nodes' counterparts in the body."""
    body, captures, built = close(params, results, hoist=True)
    if memo is not None:
        memo.update(built)
    node = make("remat", (*operands, *captures), (body, CHECKPOINT))
    return results_of(node)


def inlined(region: Node) -> list[Node]:
    """A ``remat`` node's results as nodes of the graph it is in (its body on its operands)."""
    body = region.attrs[0]
    return substitute(body.results, dict(zip(body.params, region.inputs)))


# ----------------------------------------------------------------------------------------------
# Expansion: for back ends without native regions


def has_regions(outputs) -> bool:
    return any(n.op in REGION_OPS for n in toposort(outputs))


def expand_regions(outputs) -> list[Node]:
    """``outputs`` with every region expanded into straight-line nodes: a loop unrolled, a
    branch a select between its two sides (computed after autodiff, the select only chooses
    values: the side not taken reaches no derivative). The back ends that lower regions
    natively do not need it; compile time then grows with the trip count."""
    from .ops import cast, full, getitem, stack, where   # the op table sits above this module
    outputs = list(outputs)
    while True:
        order = toposort(outputs)
        region = next((n for n in order if n.op in REGION_OPS), None)
        if region is None:
            return outputs
        if region.op == "remat":
            values = inlined(region)
        elif region.op == "cond":
            then, other = region.attrs
            pred, operands = region.inputs[0], region.inputs[1:]
            a = substitute(then.results, dict(zip(then.params, operands)))
            b = substitute(other.results, dict(zip(other.params, operands)))
            values = [cast(where(pred, x, y), x.dtype) for x, y in zip(a, b)]
        elif loop_exit(region) is not None:
            from .loop_exits import plain_loop   # (built on this module)
            values = results_of(plain_loop(region))
        else:
            body, trips, nc, nx, reverse, _ = region.attrs
            carries = list(region.inputs[:nc])
            xs, consts = region.inputs[nc:nc + nx], region.inputs[nc + nx:]
            rows: list[list] = [[None] * trips for _ in body.results[nc:]]
            for i in (reversed(range(trips)) if reverse else range(trips)):
                env = [make("const", (), (i, "int64")), *carries, *(getitem(x, i) for x in xs),
                       *consts]
                out = substitute(body.results, dict(zip(body.params, env)))
                carries = out[:nc]
                for k, y in enumerate(out[nc:]):
                    rows[k][i] = y
            stacks = [stack(r, 0) if trips else full((0,) + y.shape, 0, y.dtype)
                      for r, y in zip(rows, body.results[nc:])]
            values = carries + stacks
        mapping = {make("proj", (region,), (k,)): v for k, v in enumerate(values)}
        outputs = substitute(outputs, mapping)


def straight_line(graph):
    """``graph`` itself, or (when it has regions) a copy with them expanded."""
    if not has_regions(graph.outputs):
        return graph
    return graph.derive(graph.name, expand_regions(graph.outputs), graph.out_tree)

