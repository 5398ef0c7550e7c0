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

What a loop region cannot express falls back to unrolling, which is also kept as the
optimisation for short loops: ``break``/``continue``/``return`` in the body, a list indexed by
the loop index, a static value the body needs (``range(i)``), containers rebound in the body.

A ``while`` on data (``symgrad.while_loops``) is traced through :meth:`Loops.loop_region` too
(``force``: it cannot unroll); the guards of while loops in a body are carried, one bool per
while statement, or-accumulated over the iterations.
"""
from __future__ import annotations

import ast
import builtins

from . import guards as guards_table
from . import ops, regions
from .aliases import ZIPPED_ITEMS, row_buffers
from .errors import UnsupportedSyntaxError
from .ir import Node, toposort
from .loop_plan import (BodyDone, StackedList, _Counter, _Fallback, _Guarded, _PeelFirst,
                        _Reshaped, _Static)
from .loop_plan import (_Plan, _body_facts, _carry_type, _int_range, _length, _part,
                        _target_names, row_view_pairs, written_in_place)
from .loop_plan import (carry_buffers, check_carried_memory, container_carries, drop_leaves,
                        leaves_after_body, rebuild_carry, shown_carry)
from .scope import MISSING, Break, Continue, Return, Undefined, fork, walk_nodes

# Loops of at most this many iterations are unrolled (cheaper than a loop for LLVM and as
# readable); longer ones become loop regions.
UNROLL_MAX = 4


# The hidden variable of a loop with a break on data: whether the loop has stopped (not an
# identifier, so no user variable can be called that).
DONE = "<break>"
# ... and the number of its iterations that ran (the trips its backward pass walks).
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


def _where(frame, node):
    loc = frame.source.loc(node)
    return loc.filename, loc.lineno, loc.col, loc.text


class Loops:
    """The tracer's loop regions; ``stmt_For`` tries :meth:`loop_region` before unrolling."""

    def in_bounds(self, key: Node, array: Node) -> bool:
        """Whether ``key`` is an integer made from a loop region's index whose every value
        indexes ``array``'s first axis (so ``array[key] = v`` needs no run-time check)."""
        bounds = _int_range(key, getattr(self, "index_ranges", {}))
        return bounds is not None and array.ndim >= 1 and \
            -array.shape[0] <= bounds[0] and bounds[1] < array.shape[0]

    def exec_exit_if(self, stmt, frame, cont, cond):
        """A data-dependent ``if`` whose branches break or continue the loop region being
        traced: each side runs with the rest of the loop body (up to its break/continue; a
        break sets the loop's done flag), and one branch node chooses what they bound."""
        rest = [s for block in cont for s in block]
        sides, scopes = [], []
        for body in (stmt.body, stmt.orelse):
            child = fork(frame)
            self.frames.append(child)
            self.open_guards()
            try:
                try:
                    self.exec_block(body + rest, child, ())
                except Break:
                    child.env[DONE] = True
                except (Continue, BodyDone):
                    pass
            finally:
                self.frames.pop()
                scopes.append(self.close_guards())
                self.frame = frame
            sides.append(child)
        keys = self.guards_into_sides(sides, scopes)
        self.join_branches(cond, sides[0], sides[1], stmt, frame)
        self.guards_out_of(frame, keys)
        raise BodyDone()

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
        part = _part(self.eval(it, frame), stmt.body)
        return None if part is None else _Plan(_length(part), [part], False)

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
        if not force and (jumps or (plan.trips <= UNROLL_MAX and not exits) or (exits and appended)):
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
                # (a while whose static trips already broke on data cannot run one unguarded)
                if peeled or plan.trips <= UNROLL_MAX + 1 or isinstance(frame.env.get(DONE), Node):
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
                    continue
                if peeled or plan.trips <= UNROLL_MAX + 1 or isinstance(frame.env.get(DONE), Node):
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

    def _left(self, frame, plan, peeled):
        """What remains to unroll when the region is given up (after a peeled iteration:
        the rest, as long as it did not break on data)."""
        if not peeled:
            return False
        done = frame.env.pop(DONE, False)
        if done is not False:
            raise UnsupportedSyntaxError("a break on data in a loop that cannot be traced as a "
                                         "loop region", *_where(frame, self.node))
        return plan

    def plan_items(self, plan) -> list:
        """The items of the iterations ``plan`` describes (for unrolling them)."""
        columns = [[self._item(plan, p, i) for i in range(plan.trips)] for p in plan.parts]
        return list(zip(*columns)) if plan.tupled else columns[0]

    def _peel(self, stmt, frame, plan, exits):
        """Run the first iteration unrolled (a break or continue on data in it handled as in
        the region: the done flag it sets starts the rest); the plan for the rest."""
        items = [self._item(plan, p, 0) for p in plan.parts]
        self.assign(stmt.target, tuple(items) if plan.tupled else items[0], frame, stmt,
                    origin=self._items_origin(stmt, frame, plan))
        self.bind_row_views(stmt, frame, plan.first)
        if self.run_iteration(stmt, frame, exits):
            frame.env[DONE] = True
        rest = []
        for p in plan.parts:
            if p[0] == "range":
                rest.append(("range", p[1][1:]))
            else:
                rest.append(("rows", ops.getitem(p[1], slice(1, None))))
        return _Plan(plan.trips - 1, rest, plan.tupled, plan.first + 1)

    def run_iteration(self, stmt, frame, exits) -> bool:
        """Run the loop body once as written; whether it ended in a static break. With a
        break/continue in the body (``exits``), one on data (an ``if`` on data) runs the rest
        of the body under the branch and leaves the done flag that starts a loop region."""
        depth, saved_exits = frame.loop_depth, frame.exits
        frame.loop_depth += 1
        if exits:
            frame.exits = frame.loop_depth
            frame.env[DONE] = False
        try:
            self.exec_block(stmt.body, frame, ())
        except (BodyDone, Continue):
            pass
        except Break:
            return True
        finally:
            frame.loop_depth, frame.exits = depth, saved_exits
        return False

    def _items_origin(self, stmt, frame, plan):
        """Where the loop's items live, as the unrolled loop binds them (rows of an array are
        views of it, item by item for enumerate/zip): a write into a row writes into its array
        or is refused, in a region too, never silently dropped."""
        if not plan.tupled:
            return row_buffers(plan.parts[0][1], self.origin_of(stmt.iter, frame))
        it = stmt.iter   # enumerate(a) or zip(a, b, ...) of arrays and ranges (plan_of)
        zipped = ZIPPED_ITEMS[getattr(builtins, it.func.id)]
        iterated = plan.parts[1:] if it.func.id == "enumerate" else plan.parts
        return zipped([row_buffers(p[1], self.origin_of(a, frame))
                       for a, p in zip(it.args, iterated)])

    @staticmethod
    def _item(plan, part, i):
        return part[1][i] if part[0] == "range" else ops.getitem(part[1], i)

    def _region(self, stmt, frame, plan, assigned, appended, targets, overrides, peeled, exits):
        # The index, counters and Python numbers carried stand for Python numbers in the body:
        # they promote weakly, as NumPy promotes them (a float32 loop stays float32).
        containers, assigned = container_carries(stmt, frame, assigned, appended, targets)
        try:
            with ops.weak_scope():
                self._traced_region(stmt, frame, plan, assigned, appended, targets, overrides,
                                    peeled, exits, containers)
        finally:
            drop_leaves(frame, containers)

    def _traced_region(self, stmt, frame, plan, assigned, appended, targets, overrides, peeled,
                       exits, containers):
        n = plan.trips
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
            if step is not None and done is None:
                counters[name] = value
                child.env[name] = ops.mark_weak(index * step + value)
                continue
            if isinstance(value, Undefined) or name in appended:
                raise _Fallback()
            kind = overrides.get(name) or _carry_type(value)
            if kind is None:
                raise _Fallback()
            ph = regions.placeholder(kind[0], kind[1])
            if kind[2]:
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
            if part[0] == "range":
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
            if name in weak and kind[0] == "int64" and done is None and isinstance(value, Node) \
                    and value.op == "add" and ph in value.inputs:
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
                raise _Reshaped(name, kind, (after[0], after[1], kind[2]))
            new.append(ops.lift(value) if isinstance(value, Node) else
                       ops.full((), value, kind[0]))
        # Variables first bound in the body: their last value, carried from zeros.
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
        ys = []
        for name, recorder in lists.items():
            for item in list.__iter__(recorder):
                item = ops.lift(item)
                ys.append(item)
        index_name = targets[0] if targets and plan.parts[0][0] == "range" else "i"
        memo: dict = {}
        finals, stacks = regions.scan(n, index, phs, inits, rows, xs, new, ys,
                                      names=(_shown(index_name), *(_shown(c[0]) for c in carried)),
                                      memo=memo, exit=exit_)
        for old, new_node in memo.items():
            if old in self.locs:
                self.locs.setdefault(new_node, self.locs[old])
        loc_node = stmt
        for name, start in counters.items():   # a Python int again, as in NumPy
            frame.env[name] = start + n * overrides[("counter", name)]
        for (name, _), final in zip(carried, finals):
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
        if n and done is None:   # the loop variables keep their last values, as in Python
            last = [self._item(plan, p, n - 1) for p in plan.parts]
            self.assign(stmt.target, tuple(last) if plan.tupled else last[0], frame, stmt,
                        origin=self._items_origin(stmt, frame, plan))
            for name, base in row_view_pairs(stmt):   # rows written through: as they are now
                if base in written:
                    frame.env[name] = ops.getitem(frame.env[base], plan.first + n - 1)
            self.bind_row_views(stmt, frame, plan.first + n - 1)
