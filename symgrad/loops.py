"""``for`` loops as loop regions (a mixin of :class:`symgrad.frontend.Tracer`).

A ``for`` over ``range(...)``, the rows of an array, ``enumerate`` or ``zip`` of those is
traced *once*, with placeholders for the loop index, each row and every variable the body
rebinds (its carries), and becomes one ``loop`` node (``symgrad.regions``): the IR, the compile
time and the generated source do not grow with the trip count. Lists the body appends to
become stacked outputs (after the loop the list holds their rows). A carry keeps its dtype and
shape: a carry whose first iteration changes it (``h = 0.0`` then ``h = np.tanh(W @ h)``) has
that iteration peeled off; one that changes again is refused, naming it and its two shapes.
The index, counters and Python numbers carried stand for Python numbers and promote weakly, as
NumPy promotes them (``symgrad.op_base.weak_scope``): ``x * t`` of a float32 ``x`` stays float32.
An array whose rows the body writes into through the loop variable (``row[j] = v``: NumPy's row
is a view, ``symgrad.array_writes``) is carried, its row i updated in iteration i.

A ``range`` whose bounds are integers made from enclosing loop regions' indices (a triangular
loop: ``for j in range(i + 1, n)``, ``range(i)``, ``range(n - 1, i, -1)``) is a region too,
sized by its longest range, that runs only its own iterations (``symgrad.loop_plan.Span``):
such a loop never unrolls, so neither does the loop around it.

What a loop region cannot express falls back to unrolling, which is also kept as the
optimisation for short loops: ``return`` in the body, a list indexed by the loop index, a
static value the body needs (``len(x[:i])``; ``x[:i]`` read only by sums and dots is zero-padded
instead, ``symgrad.padded_slices``), containers rebound in the body.

A ``while`` on data (``symgrad.while_loops``) is traced through :meth:`Loops.loop_region` too
(``force``: it cannot unroll); the guards of while loops in a body are carried, one bool per
while statement, or-accumulated over the iterations.
"""
from __future__ import annotations

import ast
import builtins

from . import guards as guards_table
from . import ops, regions
from .errors import UnsupportedSyntaxError
from .ir import Node, toposort
from .loop_plan import (BodyDone, StackedList, _Counter, _Fallback, _Guarded, _PeelFirst,
                        _Reshaped, _Static)
from .loop_plan import (_Plan, _body_facts, _carry_type, _int_range, _length, _part,
                        _target_names, row_view_pairs, span_of, written_in_place)
from .loop_plan import (carry_buffers, check_carried_memory, container_carries, drop_leaves,
                        leaves_after_body, rebuild_carry, shown_carry)
from .loop_steps import DONE, LoopSteps
from .padded_slices import holds_padded, read_outside
from .scope import MISSING, Break, Continue, Return, Undefined, fork, walk_nodes

# Loops of at most this many iterations are unrolled (cheaper than a loop for LLVM and as
# readable); longer ones become loop regions.
UNROLL_MAX = 4


# The number of iterations that ran of a loop with a break on data (the trips its backward
# pass walks; its done flag is ``symgrad.loop_steps.DONE``).
TRIPS = "<trips>"


def _mixes_narrow(frame) -> bool:
    """Whether any value the body leaves bound is of a narrower type than float64 / int64
    (where a weak Python number and a 64-bit value would promote differently)."""
    roots = [n for v in frame.env.values() for n in walk_nodes(v)]
    return any(n.dtype not in ("float64", "int64", "bool", "tuple") for n in toposort(roots))


def _shown(name: str) -> str:
    """The name a loop variable gets in generated code (hidden ones: a plain word)."""
    if name == DONE:
        return "done"
    return name if name.isidentifier() else name.strip("<>").split()[0]


def guard_name(key) -> str:
    """The hidden variable carrying the guard of the while at ``key`` through a loop."""
    return f"<guard {key[0]}:{key[1]}:{key[2]}>"


def _stays_weak(value, kind) -> bool:
    """Whether a carry of ``kind`` that started as a Python number is one again after the body
    (a node standing for a Python number of the same type)."""
    return isinstance(value, Node) and ops.weak_kind(value) is not None and \
        value.dtype == kind[0]


def _read_as(ph: Node, dtype: str, values) -> bool:
    """Whether ``values`` read ``ph`` only cast to ``dtype``: a Python number carried through
    a loop whose first iteration, promoting it weakly, computes what every later one does on
    it cast to ``dtype`` first (``s = 0.0`` then ``s += x[j]`` of a float32 ``x``)."""
    roots = [v for v in values if isinstance(v, Node)]
    return all(m.op == "cast" and m.dtype == dtype for m in toposort(roots) if ph in m.inputs) \
        and ph not in roots


def _strong_from_start(carried, phs, weak, child):
    """Carry as a NumPy value from the start (its dtype after the first iteration) the first
    Python number the body makes one of and reads only cast to that dtype (``_read_as``):
    raises ``_Reshaped`` for it (else ``_Fallback``: the first iteration must run as written,
    and a span's may not run at all)."""
    values = [child.env.get(c) for c, _ in carried]
    for (name, kind), ph, value in zip(carried, phs, values):
        if name in weak and not _stays_weak(value, kind) and isinstance(value, Node) and \
                value.shape == kind[1] and _read_as(ph, value.dtype, values):
            raise _Reshaped(name, kind, (value.dtype, value.shape, True), True)
    raise _Fallback()


class Loops(LoopSteps):
    """The tracer's loop regions; ``stmt_For`` tries :meth:`loop_region` before unrolling."""

    def in_bounds(self, key: Node, array: Node):
        """(lowest, highest) of ``key`` when it is an integer made from a loop region's index
        whose every value indexes ``array``'s first axis (so ``array[key] = v`` needs no
        run-time check), else None."""
        bounds = _int_range(key, getattr(self, "index_ranges", {}))
        if bounds is not None and array.ndim >= 1 and \
                -array.shape[0] <= bounds[0] and bounds[1] < array.shape[0]:
            return bounds
        return None

    def plan_of(self, stmt, frame):
        """The loop's :class:`_Plan`, or None when it is not one a region can express."""
        it = stmt.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords and \
                it.func.id in ("enumerate", "zip") and \
                frame.lookup(it.func.id, it) is getattr(builtins, it.func.id):
            values = [self.eval(a, frame) for a in it.args]
            if it.func.id == "enumerate":
                if len(values) != 1:
                    return None
                inner = _part(values[0], stmt.body)
                if inner is None:
                    return None
                parts = [("range", range(_length(inner))), inner]
            else:
                parts = [_part(v, stmt.body) for v in values]
                if not parts or any(p is None for p in parts):
                    return None
            trips = min(_length(p) for p in parts)
            return _Plan(trips, parts, True)
        span = self._span(it, frame)
        if span is not None:
            return _Plan(span.cap, [("span", span)], False)
        part = _part(self.eval(it, frame), stmt.body)
        return None if part is None else _Plan(_length(part), [part], False)

    def _span(self, it, frame):
        """The :class:`~symgrad.loop_plan.Span` of ``range(...)`` over integers made from
        enclosing loop regions' indices (``range(i + 1, n)``), else None."""
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and not it.keywords
                and not any(isinstance(a, ast.Starred) for a in it.args) and
                frame.lookup(it.func.id, it) is builtins.range):
            return None
        args = [self.eval(a, frame) for a in it.args]
        return span_of(args, getattr(self, "index_ranges", {}))

    def loop_region(self, stmt, frame, plan: _Plan, force: bool = False):
        """Trace the loop as a region: True when done; else what is left to unroll (False:
        all of it; a plan: the iterations after a first one already run, peeled). ``force``
        (a while loop, which cannot unroll): a region however short, and the user's errors
        raised rather than left for unrolling to reproduce (and a done flag in ``frame``
        is its own: set by the iterations the while ran while tracing)."""
        # an enclosing loop region's done flag is not this loop's: set aside meanwhile
        enclosing = MISSING if force else frame.env.pop(DONE, MISSING)
        try:
            return self._loop_region(stmt, frame, plan, force)
        finally:
            if enclosing is not MISSING:
                frame.env[DONE] = enclosing

    def _loop_region(self, stmt, frame, plan: _Plan, force: bool):
        assigned, appended, jumps, exits = _body_facts(stmt.body)
        # (a short loop unrolls unless it may break or continue: on data, only a region can)
        spanned = plan.parts[0][0] == "span"   # its bounds are traced: it cannot unroll
        if not force and (jumps or (plan.trips <= UNROLL_MAX and not exits and not spanned) or
                          (exits and appended)):
            return False
        targets = _target_names(stmt.target)
        overrides: dict = {}
        peeled = False
        for _attempt in range(8):
            try:
                self._region(stmt, frame, plan, assigned, appended, targets, overrides, peeled,
                             exits)
                return True
            except _Fallback:
                return self._left(frame, plan, peeled)
            except _Guarded as g:
                overrides["guards"] = g.keys
                continue
            except _Static as st:
                overrides[("static", st.name)] = True
                continue
            except _Counter as c:
                overrides[("counter", c.name)] = c.step
                continue
            except _PeelFirst:
                # (a while whose static trips already broke on data cannot run one unguarded;
                # a span's first iteration may not run at all)
                if peeled or spanned or plan.trips <= UNROLL_MAX + 1 or isinstance(frame.env.get(DONE), Node):
                    return self._left(frame, plan, peeled)
                peeled = True
                plan = self._peel(stmt, frame, plan, exits)
                continue
            except _Reshaped as r:
                if r.name in overrides or peeled and r.before[1] != r.after[1]:
                    if r.before[1] != r.after[1]:
                        self.fail(stmt, f"loop-carried variable '{shown_carry(r.name)}' changes shape from "
                                  f"{r.before[1]} to {r.after[1]} between iterations",
                                  "give it its final shape before the loop")
                    return self._left(frame, plan, peeled)
                if r.before[2] and r.before[1] == r.after[1]:   # a Python number: its dtype is the loop's
                    overrides[r.name] = r.after
                    if spanned and r.cast_first:   # (a span cannot peel its first iteration)
                        overrides[("strong", r.name)] = True
                    continue
                if peeled or spanned or plan.trips <= UNROLL_MAX + 1 or \
                        isinstance(frame.env.get(DONE), Node):
                    return self._left(frame, plan, peeled)
                peeled = True
                plan = self._peel(stmt, frame, plan, exits)
            except UnsupportedSyntaxError:
                if force:
                    raise
                return self._left(frame, plan, peeled)
            except (ValueError, TypeError, IndexError, KeyError, NameError, AttributeError,
                    ZeroDivisionError, RecursionError):
                if force:
                    raise
                return self._left(frame, plan, peeled)   # unrolling reproduces a genuine error at the user's line
        return self._left(frame, plan, peeled)

    def _region(self, stmt, frame, plan, assigned, appended, targets, overrides, peeled, exits):
        # The index, counters and Python numbers carried stand for Python numbers in the body:
        # they promote weakly, as NumPy promotes them (a float32 loop stays float32).
        containers, assigned = container_carries(stmt, frame, assigned, appended, targets)
        try:
            with ops.weak_scope():
                weak_after = self._traced_region(stmt, frame, plan, assigned, appended, targets,
                                                 overrides, peeled, exits, containers)
            for name in weak_after:   # (the body's scope, and its marks, have ended)
                frame.env[name] = ops.mark_weak(frame.env[name])
            if plan.parts[0][0] == "span" and "break" not in exits:   # (a break carries it)
                self._bind_last_item(stmt, frame, plan.parts[0][1])
        finally:
            drop_leaves(frame, containers)

    def _traced_region(self, stmt, frame, plan, assigned, appended, targets, overrides, peeled,
                       exits, containers):
        n = plan.trips
        span = plan.parts[0][1] if plan.parts[0][0] == "span" else None
        if span is not None and appended:   # (a list's length would depend on the index)
            raise _Fallback()
        # An array whose rows the body writes into (through the loop variable) is carried: the
        # row written in iteration i is read from the input rows (no earlier iteration wrote
        # it) and written into the carried array.
        written = [base for name, base in row_view_pairs(stmt) if name in assigned and
                   base in frame.env and base not in assigned and base not in targets]
        assigned = list(assigned) + written
        child = fork(frame)
        child.loop_depth += 1
        index = regions.placeholder("int64")
        if not hasattr(self, "index_ranges"):
            self.index_ranges = {}
        self.index_ranges[index] = (0, max(n - 1, 0))
        carried, inits, phs, weak = [], [], [], []
        done = None
        if exits:
            # break/continue on data: the rest of the body runs under a branch node; after a
            # break a flag carried along skips the body (its carries keep their values).
            child.exits = child.loop_depth
            if "break" in exits:
                done = regions.placeholder("bool")
                carried.append((DONE, ("bool", (), False)))
                started = frame.env.pop(DONE, False)   # set by a peeled first iteration
                inits.append(ops.cast(ops.lift(started), "bool"))
                phs.append(done)
                child.env[DONE] = done
        counters = {}
        for name in assigned:
            if name in targets or name not in frame.env:
                continue
            value = frame.env[name]
            if ("static", name) in overrides:   # the same Python value every iteration
                child.env[name] = value
                continue
            step = overrides.get(("counter", name))
            if step is not None and done is None and span is None:
                counters[name] = value
                child.env[name] = ops.mark_weak(index * step + value)
                continue
            if isinstance(value, Undefined) or name in appended:
                raise _Fallback()
            kind = overrides.get(name) or _carry_type(value)
            if kind is None:
                raise _Fallback()
            ph = regions.placeholder(kind[0], kind[1])
            if kind[2] and ("strong", name) not in overrides:
                weak.append(name)
                if kind == _carry_type(value):   # still the Python number's own type
                    ops.mark_weak(ph)
            carried.append((name, kind))
            inits.append(ops.cast(ops.lift(value), kind[0]) if kind[0] != getattr(value, "dtype", None) else ops.lift(value))
            phs.append(ph)
            child.env[name] = ph   # in the memory it was in (a write into it may be refused)
        for name, (structure, leaves) in containers.items():   # around its leaves' carries
            child.env[name] = rebuild_carry(structure, [child.env[leaf] for leaf in leaves])
        guard_carries = {}   # hidden name -> (while key, placeholder): guards of inner whiles
        for key in overrides.get("guards", ()):
            name = guard_name(key)
            ph = regions.placeholder("bool")
            carried.append((name, ("bool", (), False)))
            inits.append(ops.full((), False, "bool"))
            phs.append(ph)
            child.env[name] = ph
            guard_carries[name] = (key, ph)
        lists = {}
        for name in appended:
            value = frame.env.get(name, MISSING)
            if not isinstance(value, list) or type(value) is not list:
                raise _Fallback()
            lists[name] = child.env[name] = StackedList()
        rows, xs, items = [], [], []
        for part in plan.parts:
            if part[0] == "span":
                item = index if (span.start, span.step) == (0, 1) else \
                    ops.add(ops.mul(index, span.step), span.start)
                self.index_ranges[item] = span.bounds
                items.append(ops.mark_weak(item))
            elif part[0] == "range":
                r = part[1]
                item = index if (r.start, r.step) == (0, 1) else index * r.step + r.start
                items.append(ops.mark_weak(item))
            else:
                x = part[1] if part[1].shape[0] == n else ops.getitem(part[1], slice(0, n))
                row = regions.placeholder(x.dtype, x.shape[1:])
                rows.append(row)
                xs.append(x)
                items.append(row)
        self.frames.append(child)
        self.open_guards()
        try:
            self.assign(stmt.target, tuple(items) if plan.tupled else items[0], child, stmt,
                        origin=self._items_origin(stmt, frame, plan))
            self.bind_row_views(stmt, child, index + plan.first if plan.first else index)
            try:
                self.exec_block(stmt.body, child, ())
            except BodyDone:
                pass
        except (Break, Continue, Return):
            raise _Fallback() from None
        finally:
            self.frames.pop()
            body_guards = self.close_guards()
            self.frame = frame
        if any(guard_name(key) not in guard_carries for key in body_guards):
            raise _Guarded(tuple(dict.fromkeys([*overrides.get("guards", ()), *body_guards])))
        for name, (key, ph) in guard_carries.items():   # or-accumulated over the iterations
            child.env[name] = guards_table.any_of(ph, body_guards.get(key))
        in_place = written_in_place(stmt.body)
        leaves_after_body(containers, child, in_place)
        check_carried_memory([name for name, _ in carried if name in in_place], frame, child,
                                   assigned)
        for (name, kind), ph in zip(carried, phs):
            value = child.env.get(name)
            if name in weak and not isinstance(value, Node) and _carry_type(value) is not None:
                # a Python number the body sets to one value (an inner loop's variable):
                # not carried once the loop's value before an iteration is that one
                if frame.env.get(name) == value and type(frame.env.get(name)) is type(value):
                    raise _Static(name)
                raise _PeelFirst()
            if name in weak and kind[0] == "int64" and done is None and span is None and \
                    isinstance(value, Node) and value.op == "add" and ph in value.inputs:
                other = value.inputs[1] if value.inputs[0] is ph else value.inputs[0]
                if other.op == "const" and isinstance(other.attrs[0], int):
                    raise _Counter(name, other.attrs[0])
        # A Python number carried through the loop stays weak in NumPy (a float32 array times
        # it stays float32) as long as the body makes a Python number of it again (``k * 2``);
        # one the body makes a NumPy value of is strong from the second iteration on. Where
        # nothing narrower than 64 bits is involved the two agree; otherwise the first
        # iteration runs as written (it gives the carry its NumPy type) and the rest must not
        # mix either.
        # (a bool promotes alike either way: a flag set on data, for ... else, needs no peel)
        turned = [kind for (name, kind) in carried if name in weak and kind[0] != "bool" and
                  not _stays_weak(child.env.get(name), kind)]
        if turned:
            kinds = {kind[0] for kind in turned}
            if not kinds <= {"float64", "int64", "bool"} or _mixes_narrow(child):
                if span is not None:   # (its first iteration may not run: it cannot peel)
                    _strong_from_start(carried, phs, weak, child)
                if not peeled:
                    raise _PeelFirst()
                raise _Fallback()
        new = []
        for (name, kind), ph in zip(carried, phs):
            value = child.env.get(name, MISSING)
            after = _carry_type(value) if value is not MISSING else None
            if after is None:
                raise _Fallback()
            if after[:2] != kind[:2]:
                if after[0] != kind[0] and after[1] == kind[1] and kind[2] is False and \
                        isinstance(value, Node):
                    raise _Reshaped(name, kind, (after[0], after[1], False))
                raise _Reshaped(name, kind, (after[0], after[1], kind[2]),
                                _read_as(ph, after[0], [child.env.get(c) for c, _ in carried]))
            new.append(ops.lift(value) if isinstance(value, Node) else
                       ops.full((), value, kind[0]))
        # Variables first bound in the body: their last value, carried from zeros. (One holding
        # a zero-padded x[:i] cannot be, nor read after the loop: unrolled.)
        padded = [name for name in assigned if name not in frame.env and
                  holds_padded(child.env.get(name))]
        if padded and read_outside(frame.source.tree, stmt, padded):
            raise _Fallback()
        fresh = [name for name in assigned if name not in frame.env and name not in targets
                 and isinstance(child.env.get(name), Node)]
        for name in fresh:
            v = child.env[name]
            carried.append((name, (v.dtype, v.shape, False)))
            inits.append(ops.full(v.shape, 0, v.dtype))
            ph = regions.placeholder(v.dtype, v.shape)
            phs.append(ph)
            new.append(v)   # reads of it inside the body come after its assignment
        exit_ = None
        if span is not None and done is None:   # only the iterations of the range run
            exit_ = regions.COUNT,
        if done is not None and not lists:   # the loop stops once done, counting its trips
            trips = regions.placeholder("int64")
            exit_ = (regions.UNTIL, 0, len(carried))
            carried.append((TRIPS, ("int64", (), False)))
            inits.append(ops.full((), 0, "int64"))
            phs.append(trips)
            new.append(trips + 1)
        if done is not None:
            for name in targets:   # after a break, the loop variable keeps its value then
                v = child.env.get(name)
                if isinstance(v, Node):
                    carried.append((name, (v.dtype, v.shape, False)))
                    inits.append(ops.full(v.shape, 0, v.dtype))
                    phs.append(regions.placeholder(v.dtype, v.shape))
                    new.append(v)
            # once done, an iteration changes nothing (and computes nothing: a branch node)
            outer = {m for v in frame.env.values() for m in walk_nodes(v)}
            new = regions.cond(done, list(phs), new, outer=outer | set(phs) | set(rows) | {index})
            if span is not None:   # ... and once the range's iterations have run
                new[0] = ops.logical_or(new[0], ops.ge(index + 1, span.count))
                inits[0] = ops.logical_or(inits[0], ops.le(span.count, 0))
        ys = []
        for name, recorder in lists.items():
            for item in list.__iter__(recorder):
                if holds_padded(item):
                    raise _Fallback()
                item = ops.lift(item)
                ys.append(item)
        index_name = targets[0] if targets and plan.parts[0][0] in ("range", "span") else "i"
        memo: dict = {}
        finals, stacks = regions.scan(n, index, phs, inits, rows, xs, new, ys,
                                      names=(_shown(index_name), *(_shown(c[0]) for c in carried)),
                                      memo=memo, exit=exit_,
                                      count=None if span is None else span.count)
        for old, new_node in memo.items():
            if old in self.locs:
                self.locs.setdefault(new_node, self.locs[old])
        loc_node, weak_after = stmt, []
        for name, start in counters.items():   # a Python int again, as in NumPy
            frame.env[name] = start + n * overrides[("counter", name)]
        for (name, kind), final in zip(carried, finals):
            if name in weak and _stays_weak(child.env.get(name), kind):
                weak_after.append(name)   # a Python number after the loop too (marked by _region)
            if name == DONE:
                self.exit_flag = final   # whether the loop broke (a while's guard reads it)
            if name in (DONE, TRIPS):
                continue
            if name in guard_carries:
                self.add_guard(guard_carries[name][0], final)
                continue
            frame.env[name] = final
            carry_buffers(name, frame, child)
            self.record(frame, loc_node, final, name if name.isidentifier() else None)
        for name, (structure, leaves) in containers.items():   # rebuilt around the finals
            frame.env[name] = rebuild_carry(structure, [frame.env[leaf] for leaf in leaves])
            carry_buffers(name, frame, child)
        k = 0
        for name, recorder in lists.items():
            count = len(list(list.__iter__(recorder)))
            mine = stacks[k:k + count]
            k += count
            for t in range(n):
                frame.env[name].extend(ops.getitem(s, t) for s in mine)
        if n and done is None and span is None:   # the loop variables keep their last values, as in Python
            last = [self._item(plan, p, n - 1) for p in plan.parts]
            self.assign(stmt.target, tuple(last) if plan.tupled else last[0], frame, stmt,
                        origin=self._items_origin(stmt, frame, plan))
            for name, base in row_view_pairs(stmt):   # rows written through: as they are now
                if base in written:
                    frame.env[name] = ops.getitem(frame.env[base], plan.first + n - 1)
            self.bind_row_views(stmt, frame, plan.first + n - 1)
        return weak_after

    def _bind_last_item(self, stmt, frame, span):
        """After a loop over a span, its variable holds the last item, as in Python; where the
        span may be empty, its value before the loop (if it had one: otherwise it is unbound
        where the span is empty, and reading it after the loop is refused)."""
        name = stmt.target.id if isinstance(stmt.target, ast.Name) else None
        if name is None:
            return
        last = ops.add(ops.mul(ops.sub(span.count, 1), span.step), span.start)
        before = frame.env.get(name, MISSING)
        if isinstance(before, (Node, int)) and not isinstance(before, bool) and \
                getattr(before, "dtype", "int64") == "int64":
            last = ops.where(ops.gt(span.count, 0), last, before)
        elif (_int_range(span.count, self.index_ranges) or (0, 0))[0] <= 0:
            last = Undefined(name, frame.source.loc(stmt))
        frame.env[name] = ops.mark_weak(last) if isinstance(last, Node) and \
            ops.weak_kind(span.count) is not None else last
