"""Writes ``out[i, j] = v`` of two nested loops (i the outer index, j the inner one) as stacked
outputs (a helper of ``region_passes._stacked_writes``, which stacks ``out[i] = v``).

A write by two traced indices goes through ``index_writes._assign_one``: every inner iteration
selects over the whole flattened carry,

    reshape(where(eq(P, reshape(take(P, reshape(e, (1,))), ())), v, reshape(out, (N * M,))),
            (N, M))                                   # P = arange(N * M), e the flat position

(``eq(P, e)`` where the loop indices' ranges decide the bounds check: no gather is built),

so a call costs O(N^2 M^2) forward and backward. When ``e`` is ``M * i + j + b`` (or
``i + M * j + b``: ``out[j, i] = v``) with the written block inside the array (``0 <= c``,
``c + tj <= M`` for ``r, c = divmod(b, M)``, no wrap into the next row), every (i, j) writes a
position no other one does, and ``take(P, e)`` is ``e`` (in bounds: the write's IndexError
cannot fire). Where the carry is read by nothing but that write, in the outer body by nothing
but the inner loop, and both loops run all their iterations forward, the inner loop's carry
becomes a stacked ``(tj,)`` output (its values ``v``) and the outer one's a stacked ``(ti, tj)``
output, placed into the initial array by one static slice update (the positions never written
keep the initial values: the same bits as the select). The loops' own conditions (no early
exit, not reversed, not under a branch, static trips) are the caller's and checked here for
the inner loop.
"""
from __future__ import annotations

from dataclasses import dataclass

from .ir import Node, Slice, make, substitute, toposort
from .numpy_indexing import affine_parts
from .regions import rebuild_loop
from .shape_ops import broadcast_to, reshape


def readers_of(body) -> dict:
    """node -> how many times a node of ``body`` (or its results list) reads it."""
    readers: dict[Node, int] = {}
    for m in toposort(body.results):
        for x in m.inputs:
            readers[x] = readers.get(x, 0) + 1
    for r in body.results:
        readers[r] = readers.get(r, 0) + 1
    return readers


def grids_written(body, trips: int, candidates, consts: dict, known: dict, readers: dict):
    """For the outer loop's body ``body`` (``trips`` iterations; ``consts``: its const params ->
    their values; ``known``: the enclosing body's fixed params): (the old projections of the
    inner loops -> those of the rebuilt ones, {carry k: (the placement key, the stacked row's
    value in the new body, the axis the outer iterations land on: 1 for ``out[j, i] = v``)})
    for the carries ``candidates`` written by ``out[i, j] = v`` in an inner loop; None when
    none is."""
    index = body.params[0]
    found: dict[Node, dict] = {}     # inner loop -> {its carry kk: (outer carry k, write)}
    for k in candidates:
        param, new = body.params[1 + k], body.results[k]
        if new.op != "proj" or new.inputs[0].op != "loop" or readers.get(param) != 1 or \
                readers.get(new) != 1:
            continue
        inner, kk = new.inputs[0], new.attrs[0]
        if kk >= inner.attrs[2] or inner.inputs[kk] is not param or not _runs_all(inner):
            continue
        write = _flat_write(inner, kk, index, trips, (consts, known))
        if write is not None:
            found.setdefault(inner, {})[kk] = (k, write)
    if not found:
        return None
    mapping, written = {}, {}
    for inner, writes in found.items():
        new_inner, moved = _without_carries(inner, {kk: w.value for kk, (_, w) in writes.items()})
        mapping.update(moved)
        for kk, (k, w) in writes.items():
            written[k] = (w.key, mapping[make("proj", (inner,), (kk,))], int(w.transposed))
    return mapping, written


def _runs_all(loop: Node) -> bool:
    _, trips, _, _, reverse, exit_ = loop.attrs
    return not reverse and exit_ is None and isinstance(trips, int) and trips > 0


@dataclass(frozen=True)
class _Write:
    """One matched write: the slice key placing the stacked block into the initial array, the
    value per inner iteration (the row's element), whether the block lands transposed."""
    key: tuple
    value: Node
    transposed: bool


def _flat_write(inner: Node, kk: int, outer_index: Node, ti: int, outer_maps):
    """The write of ``inner``'s carry ``kk`` when it is ``out[i, j] = v`` as described in the
    module docstring (``outer_index``: i; ``ti``: the outer trips), else None."""
    body, tj, nc, nx = inner.attrs[:4]
    iconsts = dict(zip(body.params[1 + nc + nx:], inner.inputs[nc + nx:]))
    carry, new = body.params[1 + kk], body.results[kk]
    if new.op != "reshape" or new.inputs[0].op != "where" or carry.ndim < 2:
        return None
    select = new.inputs[0]
    test, value, flat = select.inputs
    if value.ndim == flat.ndim and value.shape[0] == 1:   # (the one position's slice)
        value = reshape(value, value.shape[1:])
    size, rest = carry.shape[0] * carry.shape[1], carry.shape[2:]
    if flat.op != "reshape" or flat.inputs[0] is not carry or flat.shape != (size,) + rest or \
            select.shape != flat.shape or value.dtype != carry.dtype or \
            not 0 <= value.ndim < flat.ndim or test.shape != (size,) + (1,) * len(rest):
        return None
    test = test.inputs[0] if test.op == "reshape" else test   # (size, 1, ...): v a vector
    if test.op != "eq":
        return None
    readers = readers_of(body)
    if any(readers.get(m) != 1 for m in (carry, flat, select, new)):
        return None
    maps = (iconsts,) + tuple(outer_maps)
    positions, at = test.inputs
    if not is_arange(positions, size, maps):
        return None
    e = read_position(at, size, maps)   # (no gather where the indices' ranges decide it)
    e = at if e is None and at.ndim == 0 else e
    parts = None if e is None else _affine_in(e, body.params[0], outer_index, iconsts)
    if parts is None:
        return None
    (ci, cj), b = parts
    n, m = carry.shape[:2]
    row, col = divmod(b, m)
    if (ci, cj) == (m, 1):
        rows, cols, transposed = ti, tj, False
    elif (ci, cj) == (1, m) and m != 1:
        rows, cols, transposed = tj, ti, True
    else:
        return None
    if row < 0 or row + rows > n or col + cols > m:
        return None
    key = (Slice(row, row + rows, 1), Slice(col, col + cols, 1)) + \
        tuple(Slice(0, d, 1) for d in rest)
    return _Write(key, broadcast_to(value, rest), transposed)


def _resolved(node: Node, maps):
    """``node``'s value through the const maps (an inner loop's consts -> the outer body's
    nodes, the outer loop's consts -> its enclosing body's, ...), and the maps left for the
    inputs of that value: a node that is no const of its level is that level's own."""
    for level, values in enumerate(maps):
        if node not in values:
            return node, maps[level:]
        node = values[node]
    return node, ()


def is_arange(node: Node, size: int, maps) -> bool:
    """Whether ``node`` is ``arange(size)`` (maybe reshaped), through the const maps."""
    node, maps = _resolved(node, maps)
    if node.op == "reshape":
        node, _ = _resolved(node.inputs[0], maps)
    return node.op == "arange" and tuple(node.attrs[:2]) == (0, 1) and node.attrs[3] == size


def read_position(at: Node, size: int, maps):
    """e where ``at`` is ``reshape(take(arange(size), reshape(e, (1,))), ())`` (the position
    read through the positions, whose take is the bounds check), else None."""
    if at.op != "reshape" or at.inputs[0].op != "take":
        return None
    take = at.inputs[0]
    if take.attrs[0] != 0 or not is_arange(take.inputs[0], size, maps):
        return None
    wrapped = take.inputs[1]
    if wrapped.op != "reshape" or wrapped.shape != (1,) or wrapped.inputs[0].ndim != 0:
        return None
    return wrapped.inputs[0]


def _affine_in(e: Node, inner_index: Node, outer_index: Node, iconsts: dict):
    """((coefficient of i, coefficient of j), constant) of ``e`` (in the inner body) built from
    j, numbers and inner consts whose outer values are affine in i alone, else None."""
    parts = affine_parts(e)
    if parts is None:
        return None
    terms, b = parts
    ci, cj = 0, 0
    for leaf, coef in terms.items():
        if leaf is inner_index:
            cj += coef
            continue
        outer = iconsts.get(leaf)
        found = None if outer is None else affine_parts(outer)
        if found is None or any(x is not outer_index for x in found[0]):
            return None
        ci += coef * found[0].get(outer_index, 0)
        b += coef * found[1]
    return (ci, cj), b


def _without_carries(inner: Node, values: dict):
    """``inner`` rebuilt without the carries ``values`` (kk -> the per-iteration value), each
    a stacked output instead, and the old loop's projections -> the new loop's."""
    new, order = without_carries(inner, values)
    return new, {make("proj", (inner,), (old,)): make("proj", (new,), (pos,))
                 for pos, old in enumerate(order)}


def without_carries(loop: Node, values: dict, moved=None):
    """``loop`` rebuilt without the carries ``values`` (k -> its per-iteration value, a stacked
    output after the loop's other outputs; ``moved``: replacements inside the body), and for
    each new output the old one it stands for (a dropped carry's index for its stack)."""
    body, _, nc, nx = loop.attrs[:4]
    keep = [q for q in range(nc) if q not in values]
    ny = len(body.results) - nc
    results = [body.results[q] for q in keep] + list(body.results[nc:]) + list(values.values())
    results = substitute(results, moved) if moved else results
    explicit = [body.params[0]] + [body.params[1 + q] for q in keep] + \
        list(body.params[1 + nc:1 + nc + nx])
    names = body.names and tuple(body.names[0:1]) + tuple(body.names[1 + q] for q in keep
                                                           if 1 + q < len(body.names))
    inputs = [loop.inputs[q] for q in keep] + list(loop.inputs[nc:nc + nx])
    new = rebuild_loop(loop, explicit, results, inputs, len(keep), names=names or ())
    return new, keep + list(range(nc, nc + ny)) + list(values)
