"""Simplification of region nodes (``symgrad.regions``): their bodies are simplified like any
graph, results nobody reads are dropped (a carry only when no needed result depends on it),
and every rebuilt loop body is closed again, which hoists work that became loop-invariant.
"""
from __future__ import annotations

from .elementwise import add
from .index_ops import getitem, setitem, take
from .op_base import arange
from .numpy_indexing import affine_parts
from .shape_ops import broadcast_to, reshape, transpose
from .ir import Node, Slice, make, substitute, toposort
from .regions import UNTIL, close, loop_consts, loop_exit, placeholder, rebuild_loop
from .grid_writes import grids_written, is_arange, read_position, readers_of, without_carries
from .row_carry import carried_rows


_COMPARE = {"lt": lambda lo, hi, c: (hi < c, lo >= c), "le": lambda lo, hi, c: (hi <= c, lo > c),
            "gt": lambda lo, hi, c: (lo > c, hi <= c), "ge": lambda lo, hi, c: (lo >= c, hi < c)}


def _index_facts(body, trips: int) -> dict:
    """Comparisons of the loop index (or ``i + c``, c a number) with a number decided by
    ``0 <= i < trips`` (the wrap-around and bounds checks of ``xs[i]``, ``out[i + 1] = v``):
    node -> its constant value."""
    index = body.params[0]
    facts = {}
    for m in toposort(body.results):
        if m.op not in _COMPARE or m.inputs[1].op != "const" or not trips:
            continue
        shift = _index_shift(m.inputs[0], index)
        if shift is not None:
            always, never = _COMPARE[m.op](shift, trips - 1 + shift, m.inputs[1].attrs[0])
            if always or never:
                facts[m] = make("const", (), (bool(always), "bool"))
    return facts


def _index_shift(at: Node, index: Node):
    """c when ``at`` is the loop index plus the integer number c (0 for the index; any sum of
    them, as ``(i + 1) - 1`` of ``out[i - 1]`` in ``range(1, n)``), else None."""
    if at is index:
        return 0
    if at.op not in ("add", "sub") or at.ndim or at.dtype != index.dtype:
        return None
    parts = affine_parts(at)
    if parts is None or len(parts[0]) != 1 or parts[0].get(index) != 1:
        return None
    return parts[1]


def _row_reads(body, trips: int, nc: int, nx: int, consts) -> dict:
    """Reads of a loop-invariant array c by positions affine in the loop index -> the array
    whose row i each iteration reads, which the loop can take as a per-iteration input instead
    (its derivative is then a stacked row, not a scatter into a zero array every iteration):
    ``take(c, i + k)`` (k >= 0 a number) is row i of ``c[k:k + trips]``; a window
    ``take(c, a * i + b + offsets, axis)`` (``c[a * i + b:...]``, symgrad.numpy_indexing) is row
    i of one gather of c by the table of every iteration's positions (im2col)."""
    index = body.params[0]
    const_params = dict(zip(body.params[1 + nc + nx:], consts))
    reads = {}
    for m in toposort(body.results):
        if m.op != "take" or m.inputs[0] not in const_params or not trips:
            continue
        offset = _index_shift(m.inputs[1], index)
        source = const_params[m.inputs[0]]
        if m.attrs[0] == 0 and offset is not None and 0 <= offset and \
                source.shape[0] >= trips + offset:
            reads[m] = source if (offset, source.shape[0]) == (0, trips) else \
                getitem(source, slice(offset, offset + trips))
            continue
        found = _position_table(m.inputs[1], index, trips, const_params)
        axis = m.attrs[0]
        if found is not None and 0 <= found[1] and found[2] < source.shape[axis] and \
                found[0].size * (source.size // source.shape[axis]) <= WINDOW_TABLE_MAX:
            rows = take(source, found[0], axis)
            order = (axis,) + tuple(a for a in range(rows.ndim) if a != axis)
            reads[m] = rows if axis == 0 else transpose(rows, order)
    return reads


# The most elements a loop's window reads are gathered into before it (the per-iteration
# input and its stacked derivative are that large): beyond, each iteration gathers its own.
WINDOW_TABLE_MAX = 1 << 22


def _position_table(at: Node, index: Node, trips: int, const_params: dict):
    """Every iteration's positions (rows: iterations) of an int64 index ``a * i + b`` or
    ``a * i + b + offsets`` (offsets a constant vector, maybe a loop constant: a window) with
    a != 0, as (the table's nodes: computed, not a table of constants whose size would grow with the
    trips, its lowest and highest value), else None."""
    offsets = None
    if at.op == "add" and at.ndim == 1 and at.inputs[0].ndim == 0:
        vector = const_params.get(at.inputs[1], at.inputs[1])
        if vector.op != "array":
            return None
        at, offsets = at.inputs[0], vector
    found = affine_parts(at)
    if found is None or set(found[0]) != {index}:   # (affine_parts drops zero coefficients)
        return None
    a, b = found[0][index], found[1]
    starts = (a * (trips - 1) + b, b)
    table = arange(b, b + a * trips, a, "int64")
    if offsets is None:
        return table, min(starts), max(starts)
    spread = offsets.attrs[0].value
    table = add(reshape(table, (trips, 1)), reshape(offsets, (1, offsets.shape[0])))
    return table, min(starts) + int(spread.min()), max(starts) + int(spread.max())


def _with_rows(loop: Node, reads: dict) -> Node:
    """``loop`` with each read of ``reads`` a per-iteration input (the array given)."""
    body, trips, nc, nx = loop.attrs[:4]
    new_rows, new_xs, mapping = [], [], {}
    for m, source in reads.items():
        row = placeholder(m.dtype, m.shape)
        mapping[m] = row
        new_rows.append(row)
        new_xs.append(source)
    explicit = list(body.params[:1 + nc + nx]) + new_rows
    return rebuild_loop(loop, explicit, substitute(body.results, mapping),
                        list(loop.inputs[:nc + nx]) + new_xs, nc)


def simplify_region(n: Node, simplify_nodes) -> Node:
    """``n`` with its bodies simplified (``simplify_nodes(outputs, forward)``: the top-level
    pass; select sinking applies inside derivative bodies only); in a loop body, what the
    index's range decides is folded, an inner loop that writes only row i of a matrix carries
    that row (symgrad.row_carry) and rows read by the index become sliced inputs."""
    if n.op == "loop" and any(c.op == "const" for c in loop_consts(n)):
        n = (_pruned(n, set(range(len(n.attrs[0].results)))) or (n,))[0]
    if n.op == "loop":
        n = _running(n)
    if n.op == "loop":
        body, trips, nc, nx = n.attrs[:4]
        facts = _index_facts(body, trips)
        if facts:
            body = type(body)(body.params, tuple(substitute(body.results, facts)), body.names,
                              body.derivative)
            n = make("loop", n.inputs, (body,) + n.attrs[1:])
    bodies = [a for a in n.attrs if hasattr(a, "results")]
    new = []
    for body in bodies:
        forward = frozenset() if body.derivative else frozenset(toposort(body.results))
        results = tuple(prune_loops(simplify_nodes(body.results, forward), _known_params(n, body)))
        new.append(body if results == body.results else
                   type(body)(body.params, results, body.names, body.derivative))
    if not all(a is b for a, b in zip(new, bodies)):
        it = iter(new)
        n = make(n.op, n.inputs, tuple(next(it) if hasattr(a, "results") else a for a in n.attrs))
    if n.op == "loop":
        n = carried_rows(n)
        body, trips, nc, nx = n.attrs[:4]
        reads = _row_reads(body, trips, nc, nx, loop_consts(n))
        if reads:
            n = _with_rows(n, reads)
    elif n.op == "cond":
        n = _cond_with(n, range(len(n.attrs[0].results)))
    elif n.op == "remat":
        n = _remat_with(n, range(len(n.attrs[0].results)))
    return n


def _running(loop: Node) -> Node:
    """A loop that stops once its done flag is set (``("until", k, c)``) runs its body only
    while the flag is false: the flag's param is False in the body (the branch that skipped
    the body of a finished loop is then decided and inlined)."""
    exit_ = loop_exit(loop)
    if exit_ is None or exit_[0] != UNTIL:
        return loop
    body = loop.attrs[0]
    flag = body.params[1 + exit_[1]]
    if flag not in set(toposort(body.results)):
        return loop
    results = tuple(substitute(body.results, {flag: make("const", (), (False, "bool"))}))
    return make("loop", loop.inputs, (type(body)(body.params, results, body.names,
                                                  body.derivative),) + loop.attrs[1:])


def _remat_with(n: Node, keep) -> Node:
    """A checkpoint (``remat``) with only the results ``keep`` and the operands its body still
    reads (numbers folded inside)."""
    body, role = n.attrs
    keep = list(keep)
    numbers = {p: c for p, c in zip(body.params, n.inputs) if c.op == "const"}
    results = substitute([body.results[k] for k in keep], numbers)
    reached = set(toposort(results))
    used = [k for k, p in enumerate(body.params) if p in reached]
    if len(used) == len(body.params) and len(keep) == len(body.results):
        return n
    new_body = close([body.params[k] for k in used], results, hoist=False,
                     derivative=body.derivative)[0]
    return make("remat", tuple(n.inputs[k] for k in used), (new_body, role))


def _cond_with(n: Node, keep) -> Node:
    """A branch node with only the results ``keep`` and the operands its sides still read."""
    then, other = n.attrs
    keep = list(keep)
    numbers = {p: c for p, c in zip(then.params, n.inputs[1:]) if c.op == "const"}
    results = ([then.results[k] for k in keep], [other.results[k] for k in keep])
    results = tuple(substitute(r, numbers) for r in results)   # numbers are folded inside
    reached = set(toposort(results[0] + results[1]))
    used = [k for k, p in enumerate(then.params) if p in reached]
    if len(used) == len(then.params) and len(keep) == len(then.results):
        return n
    explicit = [then.params[k] for k in used]
    bodies = [close(explicit, r, hoist=False, derivative=b.derivative)[0]
              for r, b in zip(results, (then, other))]
    return make("cond", (n.inputs[0], *(n.inputs[1 + k] for k in used)), tuple(bodies))


def prune_loops(outputs, known=None) -> list[Node]:
    """``outputs`` with each loop keeping only the results something reads (and the carries
    those depend on) and the inputs its body still reads, and the carries it only writes a row
    of (``out[i] = v``) stacked outputs (:func:`_stacked_writes`). Repeated until nothing
    changes: a pruned backward loop may stop reading a forward loop's stored values. ``known``:
    the values of params of the enclosing body that are fixed (its loop's consts), where
    ``outputs`` are a body's results."""
    outputs = list(outputs)
    while True:
        pruned = _stacked_writes(_prune_once(outputs), known or {})
        if all(a is b for a, b in zip(pruned, outputs)):
            return outputs
        outputs = pruned


def _prune_once(outputs) -> list[Node]:
    order = toposort(outputs)
    used: dict[Node, set] = {}
    for m in order:
        if m.op == "proj":
            used.setdefault(m.inputs[0], set()).add(m.attrs[0])
    mapping: dict[Node, Node] = {}
    for m in order:
        if m.op == "cond" and m in used and m.inputs[0].op == "const":   # decided: inline it
            body = m.attrs[0] if m.inputs[0].attrs[0] else m.attrs[1]
            operands = substitute(m.inputs[1:], mapping) if mapping else m.inputs[1:]
            values = substitute(body.results, dict(zip(body.params, operands)))
            for k in used[m]:
                mapping[make("proj", (m,), (k,))] = values[k]
            continue
        if m.op == "cond" and m in used and len(used[m]) < len(m.attrs[0].results):
            keep = sorted(used[m])
            current = make("cond", substitute(m.inputs, mapping), m.attrs) if mapping else m
            new_cond = _cond_with(current, keep)
            for new_k, old_k in enumerate(keep):
                mapping[make("proj", (m,), (old_k,))] = make("proj", (new_cond,), (new_k,))
        if m.op == "remat" and m in used and len(used[m]) < len(m.attrs[0].results):
            keep = sorted(used[m])
            current = make("remat", substitute(m.inputs, mapping), m.attrs) if mapping else m
            new_remat = _remat_with(current, keep)
            for new_k, old_k in enumerate(keep):
                mapping[make("proj", (m,), (old_k,))] = make("proj", (new_remat,), (new_k,))
        if m.op == "loop" and m in used:
            # from its inputs as already rewritten (a loop may read a pruned loop's results)
            current = make("loop", substitute(m.inputs, mapping), m.attrs) if mapping else m
            rebuilt = _pruned(current, used[m])
            if rebuilt is not None:
                new_loop, index_map = rebuilt
                for old_k, new_k in index_map.items():
                    mapping[make("proj", (m,), (old_k,))] = make("proj", (new_loop,), (new_k,))
    if not mapping:
        return list(outputs)
    # Loops fed by pruned loops are rebuilt by substitute (their inputs change).
    return substitute(list(outputs), mapping)


def _reached(roots) -> set:
    """The nodes ``roots`` depend on, through one result of a branch only on what that
    result reads (a branch's unread results do not keep their operands alive)."""
    seen: set = set()
    stack = list(roots)
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        if m.op == "proj" and m.inputs[0].op == "cond":
            c, k = m.inputs[0], m.attrs[0]
            then, other = c.attrs
            inner = set(toposort([then.results[k], other.results[k]]))
            stack.append(c.inputs[0])
            stack.extend(c.inputs[1 + j] for j, p in enumerate(then.params) if p in inner)
        else:
            stack.extend(m.inputs)
    return seen


def _pruned(loop: Node, used: set):
    body, _, nc, nx, _, exit_ = loop.attrs
    params, results = body.params, body.results
    needed = {k for k in used if k < nc}
    if exit_ is not None and exit_[0] == UNTIL:   # the exit reads the flag; the trips counter
        needed |= set(exit_[1:])                  # is cheap and a backward pass may need it
    while True:   # carries the needed results depend on
        reached = _reached([results[k] for k in needed] + [results[k] for k in used if k >= nc])
        more = {k for k in range(nc) if params[1 + k] in reached} - needed
        if not more:
            break
        needed |= more
    keep_c = sorted(needed)
    keep_y = sorted(k for k in used if k >= nc)
    new_results = [results[k] for k in keep_c] + [results[k] for k in keep_y]
    reached = _reached(new_results)
    keep_x = [k for k in range(nx) if params[1 + nc + k] in reached]
    const_params = params[1 + nc + nx:]
    numbers = {p: c for p, c in zip(const_params, loop_consts(loop)) if c.op == "const"}
    new_results = substitute(new_results, numbers)   # numbers are folded into the body
    explicit = [params[0]] + [params[1 + k] for k in keep_c] + [params[1 + nc + k] for k in keep_x]
    names = body.names and tuple(body.names[0:1]) + tuple(body.names[1 + k] for k in keep_c
                                                           if 1 + k < len(body.names))
    inputs = [loop.inputs[k] for k in keep_c] + [loop.inputs[nc + k] for k in keep_x]
    if exit_ is not None and exit_[0] == UNTIL:
        exit_ = (UNTIL, keep_c.index(exit_[1]), keep_c.index(exit_[2]))
    new_loop = rebuild_loop(loop, explicit, new_results, inputs, len(keep_c), names=names or (),
                            exit=exit_)
    if new_loop is loop:
        return None
    index_map = {old: new for new, old in enumerate(keep_c + keep_y)}
    return new_loop, index_map


# ---------------------------------------------------------------------------------------------
# Row writes as stacked outputs

def _known_params(region: Node, body) -> dict:
    """The params of ``body`` (one of ``region``'s) whose value is the same in every run of it
    -> that value: a loop's consts, a branch's or checkpoint's operands."""
    if region.op == "loop":
        nc, nx = region.attrs[2:4]
        return dict(zip(body.params[1 + nc + nx:], loop_consts(region)))
    operands = region.inputs[1:] if region.op == "cond" else region.inputs
    return dict(zip(body.params, operands))


def _stacked_writes(outputs, known: dict) -> list[Node]:
    """``outputs`` with each loop's carries that every iteration only writes row ``i + c`` of
    (``out[i] = v``: ``ops.row_update``, a select over the whole carry each iteration, forward
    and backward) a stacked output instead: the rows written are the per-iteration values, and
    the rows the loop never writes keep the initial array's (one static slice update after the
    loop). The select writes the same value, so the results are bit-identical; the derivative
    of a stacked output is a per-iteration input row, not a select over the carry's cotangent."""
    mapping: dict[Node, Node] = {}
    for m in toposort(outputs):
        if m.op != "loop":
            continue
        current = make("loop", substitute(m.inputs, mapping), m.attrs) if mapping else m
        finals = _with_stacked_rows(current, known)
        for k, value in (finals or {}).items():
            mapping[make("proj", (m,), (k,))] = value
    return substitute(list(outputs), mapping) if mapping else list(outputs)


def _row_written(body, k: int, trips: int, consts: dict, known: dict):
    """(the axis, the first row ``c`` along it, the value) when carry ``k``'s new value is
    ``where(rows == i + c, v, carry)`` with ``rows`` the carry's row numbers along the axis (a
    loop const: ``out[i] = v``, ``out[i, :] = v``, ``out[:, i] = v``; the position maybe read
    through the row numbers, ``index_writes._assign_one``'s bounds check) and ``0 <= c``,
    ``c + trips <= len``: every iteration writes one row the others do not, and reads the carry
    nowhere (that is checked by the caller); else None."""
    carry, new = body.params[1 + k], body.results[k]
    view = _written_view(carry, new)   # out[i, 1:] = v: the row written into a slice's view
    if view is not None:
        carry, new = view.inputs[2], view
    if new.op != "where" or new.inputs[2] is not carry or new.shape != carry.shape or \
            new.inputs[1].dtype != carry.dtype:
        return None
    test, value = new.inputs[:2]
    if test.op == "reshape":
        test = test.inputs[0]
    if test.op != "eq" or not 1 <= new.inputs[0].ndim <= carry.ndim:
        return None
    axis = carry.ndim - new.inputs[0].ndim   # the row numbers' axis, (size, 1, ...) aligned right
    size, maps = carry.shape[axis], (consts, known)   # (a nested loop: its consts are the body's
    rows, at = test.inputs                                  # params, fixed in the body's run)
    if new.inputs[0].shape != (size,) + (1,) * (carry.ndim - 1 - axis) or \
            not is_arange(rows, size, maps):
        return None
    position = read_position(at, size, maps)
    at = at if position is None else position
    first = _index_shift(at, body.params[0])
    if first is None or first < 0 or first + trips > size:
        return None
    # the value one row, broadcast along the other axes (1 or absent along the written one)
    lead = carry.ndim - value.ndim
    if axis >= lead:
        if value.shape[axis - lead] != 1:
            return None
        value = reshape(value, value.shape[:axis - lead] + value.shape[axis - lead + 1:])
    return axis, first, broadcast_to(value, carry.shape[:axis] + carry.shape[axis + 1:])


def _written_view(carry: Node, new: Node):
    """The select ``w`` when ``new`` is ``setitem(carry, w, key)`` with ``w`` a select over the
    view ``carry[key]`` (``key`` slices of step 1), else None."""
    if new.op != "setitem" or new.inputs[0] is not carry or new.inputs[1].op != "where":
        return None
    key, select = new.attrs[0], new.inputs[1]
    view = select.inputs[2]
    if view.op != "getitem" or view.inputs[0] is not carry or view.attrs[0] != key or \
            not all(isinstance(s, Slice) and s.step == 1 for s in key):
        return None
    return select


def _view_key(view_key, axis: int, first: int, trips: int, shape) -> tuple:
    """The slices of the carry (of ``shape``) where rows ``first .. first + trips`` along
    ``axis`` of its view ``carry[view_key]`` (``()``: the carry itself) lie."""
    key = tuple(view_key) + tuple(Slice(0, d, 1) for d in shape[len(view_key):])
    start = key[axis].start
    return key[:axis] + (Slice(start + first, start + first + trips, 1),) + key[axis + 1:]


def _with_stacked_rows(loop: Node, known: dict):
    """The final values (index -> node) of ``loop``'s results after stacking the row writes of
    its carries (:func:`_stacked_writes`) and the ``out[i, j] = v`` writes of a loop nested in
    it (:mod:`symgrad.grid_writes`), else None. Only a loop that runs all its iterations
    forward: a stopped loop's unrun rows would keep the initial array's."""
    body, trips, nc, nx, reverse, exit_ = loop.attrs
    if reverse or exit_ is not None or not trips:
        return None
    consts = dict(zip(body.params[1 + nc + nx:], loop_consts(loop)))
    readers = readers_of(body)
    written = {}   # carry -> (the placement key, the stacked value, the axis the stack is at)
    for k in range(nc):
        found = _row_written(body, k, trips, consts, known)
        view = _written_view(body.params[1 + k], body.results[k])
        # the carry read only by its write (and its view's), the write only the new carry
        if found is not None and readers.get(body.params[1 + k]) == (1 if view is None else 2) \
                and readers[body.results[k]] == 1 and \
                (view is None or readers[view] == readers[view.inputs[2]] == 1):
            axis, first, value = found
            key = () if view is None else body.results[k].attrs[0]
            written[k] = (_view_key(key, axis, first, trips, loop.inputs[k].shape), value, axis)
    grids = grids_written(body, trips, [k for k in range(nc) if k not in written], consts,
                          known, readers)
    moved = {}
    if grids is not None:
        moved, more = grids
        written.update(more)
    if not written:
        return None
    written = dict(sorted(written.items()))
    new_loop, order = without_carries(loop, {k: value for k, (_, value, _) in written.items()},
                                      moved)   # (moved: the rebuilt inner loops)
    kept = len(order) - len(written)
    finals = {old: make("proj", (new_loop,), (p,)) for p, old in enumerate(order[:kept])}
    for j, (k, (key, _, axis)) in enumerate(written.items()):
        stacked = make("proj", (new_loop,), (kept + j,))
        if axis:   # the iterations' axis moved to the written one (out[:, i] = v, out[j, i] = v)
            stacked = transpose(stacked, tuple(range(1, axis + 1)) + (0,) +
                                tuple(range(axis + 1, stacked.ndim)))
        init = loop.inputs[k]
        whole = all((s.start, s.stop) == (0, d) for s, d in zip(key, init.shape)) and \
            stacked.shape == init.shape
        finals[k] = stacked if whole else setitem(init, stacked, key)
    return finals
