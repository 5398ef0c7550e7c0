"""Loop iterations run as written (a mixin of :class:`symgrad.loops.Loops`): a first iteration
peeled off a loop region (its carries start as Python numbers, whose weak type NumPy resolves
in that iteration), what is left to unroll when a region is given up, the items of unrolled
iterations, and a data-dependent ``if`` whose branches break or continue the loop region
being traced (each side runs the rest of the body; a break sets the loop's done flag).
"""
from __future__ import annotations

import builtins

from . import ops
from .aliases import ZIPPED_ITEMS, row_buffers
from .errors import UnsupportedSyntaxError
from .loop_plan import BodyDone, _Plan
from .scope import Break, Continue, fork

# The hidden variable of a loop with a break on data: whether the loop has stopped (not an
# identifier, so no user variable can be called that).
DONE = "<break>"


def _where(frame, node):
    loc = frame.source.loc(node)
    return loc.filename, loc.lineno, loc.col, loc.text


class LoopSteps:
    """The iterations of a loop the tracer runs as written, beside its loop regions."""

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
