"""The front end: a Python function's AST -> IR, by abstract interpretation.

The tracer walks the function's syntax tree with concrete values for static things (ints,
bools, shapes, Python lists) and IR nodes for data. So loops over static ranges unroll, ``if``
on static values is decided while tracing, ``if`` on data becomes a select between both
branches, helper functions are inlined (their own source is read and interpreted), and lists
built while tracing are ordinary Python lists of nodes. In-place writes (``a[i] = v``,
``a += v`` on an array) are functional updates of arrays the function owns alone; a write
that another live name, an argument or a global could see is refused (see symgrad.aliases).

Anything outside the supported subset raises :class:`UnsupportedSyntaxError` naming the file,
line, column, the source line and the construct.
"""
from __future__ import annotations

import ast
import numbers
import operator
import types

import numpy as np

from . import ops
from .aliases import (NO_BUFFERS, ArrayStandIn, Buffer, foreign_buffers, fresh_buffers,
                      holds_array, holds_data, in_place_result, is_array, kind_conflict,
                      maybe_scalar_reasons, rebound_next, row_buffers)
from .errors import UnsupportedSyntaxError
from .ir import Graph, Loc, Node, label_new
from .calls import Calls
from .control_flow import ControlFlow
from .loops import Loops
from .array_writes import ArrayWrites, MaskedUpdate, is_masked_update
from .comprehensions import Comprehensions
from .expressions import LIBRARY_PACKAGES, Expressions, describe
from .arguments import bind_argument
from .runtime import build_tree
from .scope import Break, Continue, Frame, Return, closure_of, walk_nodes
from .checkpoint import Checkpoint, checkpoint
from .custom_gradient import CustomGradient, apply_rule
from .source import function_source
from .captures import captured_arrays
from .spelling import ARRAY_LITERAL_LIMIT


class Tracer(Expressions, Comprehensions, Calls, Loops, ControlFlow, ArrayWrites):
    def __init__(self, captures: dict | None = None):
        # What the trace read from outside the function: (holder, name) -> (holder, name, value)
        # for globals (holder: the globals dict), closure cells and module attributes.
        self.captures = {} if captures is None else captures
        self.names: dict[Node, str] = {}
        self.locs: dict[Node, Loc] = {}
        self.depth = 0
        self.frame: Frame | None = None
        self.node: ast.AST | None = None
        self.frames: list[Frame] = []          # the frames executing now, outermost first
        self.origins: dict = {}                # expression -> where its value may live
        self.item_origins: dict = {}           # enumerate/zip call -> where its items live
        self.return_buffers = NO_BUFFERS       # buffers of the value the last body returned
        self.call_buffers = None               # ... of the last inlined call (None: not one)
        self.pending_arguments = None          # buffers of the arguments of the next call
        self.else_forms: dict = {}             # for/while ... else -> its statements (loop_else)

    # -- errors ------------------------------------------------------------------------------
    def fail(self, node: ast.AST, construct: str, hint: str = ""):
        loc = self.frame.source.loc(node)
        raise UnsupportedSyntaxError(construct, loc.filename, loc.lineno, loc.col, loc.text, hint)

    # -- entry -------------------------------------------------------------------------------
    def trace(self, fn, args: list, name: str | None = None) -> Graph:
        if isinstance(fn, Checkpoint):   # its own inputs are all it has: nothing to checkpoint
            fn = fn.fn
        custom, fn = (fn, fn.fn) if isinstance(fn, CustomGradient) else (None, fn)
        source = function_source(fn)
        frame = Frame(self, source, fn.__globals__, None, closure_of(fn), fn.__name__)
        self.frame = frame
        tree = source.tree
        params = [a.arg for a in tree.args.args]
        if tree.args.vararg or tree.args.kwarg or tree.args.kwonlyargs or tree.args.posonlyargs:
            self.fail(tree, "*args, **kwargs or keyword-only parameters in the differentiated function")
        if isinstance(fn, types.MethodType):   # sg.differentiate(model.loss): self is static
            frame.env[params[0]] = fn.__self__
            params = params[1:]
        inputs, names, in_tree = [], [], []
        for param, value in zip(params, args):
            frame.env[param], param_tree = bind_argument(param, value, inputs, names, params)
            in_tree.append(param_tree)
            self.bind_buffers(frame, param, frame.env[param],
                              foreign_buffers(f"argument '{param}'", frame.env[param]))
        self.frames, self.guard_scopes = [frame], [{}]   # guard_scopes: symgrad.while_loops
        try:
            with ops.weak_scope():   # float(x), x.item(): traced Python numbers (weakly typed)
                result = self.run_body(frame, tree)
        except RecursionError:
            self.fail(self.node or tree, "expression nesting or recursion too deep to trace")
        if custom is not None:     # a decorated @custom_gradient function differentiated itself
            result = apply_rule(self, fn.__name__, result, [frame.env[p] for p in params], tree)
            label_new(result, self.locs, source.loc(tree))
        outputs = []
        tree_shape = _flatten(result, outputs, self.frame.source.loc(tree))
        has_trees = any(isinstance(t, tuple) for t in in_tree)
        arrays = captured_arrays(self.captures, fn.__globals__, ARRAY_LITERAL_LIMIT)
        for node, (array_name, _) in arrays.items():
            self.names.setdefault(node, array_name)
        graph = Graph(name or fn.__name__, tuple(names), tuple(inputs),
                      tuple(ops.lift(o) for o in outputs), tree_shape, self.names, self.locs,
                      {}, source.filename, in_tree=tuple(in_tree) if has_trees else None,
                      top_params=tuple(params) if has_trees else None, guards=self.guard_scopes[0],
                      constants={node: where for node, (_, where) in arrays.items()})
        return graph

    def run_body(self, frame: Frame, tree):
        if isinstance(tree, ast.Lambda):   # an expression body: run it like a return statement
            value = self.located(frame, tree.body, lambda: self.eval(tree.body, frame))
            self.record(frame, tree.body, value)
            self.return_buffers = self.origin_of(tree.body, frame)
            return value
        try:
            self.exec_block(tree.body, frame, ())
        except Return as r:
            self.return_buffers = r.buffers
            return r.value
        self.return_buffers = NO_BUFFERS
        return None

    # -- bookkeeping: captured globals, names and locations ---------------------------------
    def captured(self, holder, name: str, value):
        """Record that the trace read ``name`` from ``holder`` (a dict or a cell) as ``value``,
        unless the holder is a library module's namespace (numpy, symgrad, ...) or the value
        a library module (``np``): nobody rebinds those, and each record is checked on every
        call."""
        key = (id(holder), name)
        if key in self.captures or _is_library(value) or (
                isinstance(holder, dict) and _in_library(holder.get("__name__"))):
            return
        self.captures[key] = (holder, name, value)

    def record(self, frame: Frame, node: ast.AST, value, name: str | None = None):
        """Give nodes first produced by this statement its location (and a variable name)."""
        loc = frame.source.loc(node)
        for root in walk_nodes(value):
            if name is not None and root.op not in ("arg", "const", "full", "array"):
                self.names.setdefault(root, name)
            label_new(root, self.locs, loc)

    # -- statements --------------------------------------------------------------------------
    def exec_block(self, stmts, frame: Frame, cont: tuple):
        for i, stmt in enumerate(stmts):
            self.node = frame.stmt = stmt
            frame.next_stmt = stmts[i + 1] if i + 1 < len(stmts) else None   # (rebound_next)
            rest = (stmts[i + 1:],) + cont
            if isinstance(stmt, ast.If):
                self.exec_if(stmt, frame, rest)
            else:
                self.exec_stmt(stmt, frame, rest)

    def exec_stmt(self, stmt, frame: Frame, cont):
        self.frame = frame
        method = getattr(self, "stmt_" + type(stmt).__name__, None)
        if method is None:
            self.fail(stmt, describe(stmt))
        self.located(frame, stmt, lambda: method(stmt, frame, cont))

    def located(self, frame: Frame, node: ast.AST, run):
        """Run ``run()``; a user-facing error it raises is re-raised citing ``node``'s line."""
        try:
            return run()
        except UnsupportedSyntaxError as e:
            if e.lineno:
                raise
            loc = frame.source.loc(node)   # a builder's refusal: cite the statement
            raise UnsupportedSyntaxError(e.construct, loc.filename, loc.lineno, loc.col, loc.text,
                                         e.hint) from None
        except (Return, Break, Continue):
            raise
        except (ValueError, TypeError, IndexError, ZeroDivisionError, NameError,
                KeyError, AttributeError) as e:
            if getattr(e, "_symgrad_located", False):
                raise
            raise _locate(e, frame.source.loc(node)) from e

    def stmt_Expr(self, stmt, frame, cont):
        if isinstance(stmt.value, ast.Constant):   # docstring
            return
        self.record(frame, stmt, self.eval(stmt.value, frame))

    def stmt_Pass(self, stmt, frame, cont):
        pass

    def stmt_Return(self, stmt, frame, cont):
        if stmt.value is None:
            raise Return(None)
        value = self.eval(stmt.value, frame)
        self.record(frame, stmt, value)
        raise Return(value, self.origin_of(stmt.value, frame))

    def stmt_Assign(self, stmt, frame, cont):
        value = self.eval(stmt.value, frame)
        origin = self.origin_tree(stmt.value, frame)
        for target in stmt.targets:
            self.assign(target, value, frame, stmt, origin=origin)

    def stmt_AnnAssign(self, stmt, frame, cont):
        if stmt.value is not None:
            value = self.eval(stmt.value, frame)
            self.assign(stmt.target, value, frame, stmt, origin=self.origin_tree(stmt.value, frame))

    def stmt_AugAssign(self, stmt, frame, cont):
        """``a += v`` updates an array in place (NumPy), extends a list in place (Python) and
        rebinds anything else (numbers, NumPy scalars)."""
        target = stmt.target
        if isinstance(target, ast.Name):
            if target.id not in frame.env:   # Python: the name is local, not yet bound
                raise UnboundLocalError(f"cannot access local variable '{target.id}' where it is "
                                        "not associated with a value")
            current = frame.lookup(target.id, target)
            operand = self.eval(stmt.value, frame)
            in_place = _CONTAINER_IN_PLACE.get((type(current), type(stmt.op)))
            if isinstance(current, ArrayStandIn):   # x[:i] in a loop region: NumPy writes into x
                self.fail(stmt, "augmented assignment to a slice whose length depends on a loop index")
            if in_place is not None:         # l += [...], l *= n, d |= {...}: the same object
                in_place(current, operand)
                added = self.origin_of(stmt.value, frame) or fresh_buffers(operand)
                if isinstance(stmt.op, ast.Mult) and (holds_array(current) or frame.buffers_of(target.id)):
                    added = frozenset((Buffer("an item repeated by a list * n"),))
                self.note_contents(current, added, frame)
            elif is_array(current) or self.zero_d_array(target.id, current, frame):
                view = self.check_write_into(target.id, frame, stmt, "augmented assignment to")
                value = self.binop(stmt.op, current, operand, stmt)
                self.check_kind_known(target.id, current, value, frame, stmt)
                value = in_place_result(current, value)
                self.written(target.id, value, view, frame, stmt)
            else:
                self.assign(target, self.binop(stmt.op, current, operand, stmt), frame, stmt)
        elif isinstance(target, ast.Subscript):
            container = self.eval(target.value, frame)
            key = self.eval(target.slice, frame)
            if is_masked_update(container, key):   # y[mask] += v, the mask from data: no y[mask]
                update = MaskedUpdate(stmt.op, self.eval(stmt.value, frame))
                self.assign(target, update, frame, stmt, key=key)
                return
            current = self.subscript(container, key, target)
            value = self.binop(stmt.op, current, self.eval(stmt.value, frame), stmt)
            element_array = is_array(current) or (   # a 0-d item of a list holding 0-d arrays
                isinstance(current, Node) and isinstance(container, (list, dict))
                and isinstance(target.value, ast.Name) and bool(frame.buffers_of(target.value.id)))
            if element_array:
                if isinstance(container, (list, dict)) and isinstance(target.value, ast.Name):
                    # the element array itself is updated in place: whoever shares it sees it
                    self.check_writable(target.value.id, frame, stmt,
                                        "augmented assignment to an element of")
                value = in_place_result(current, value)
            self.assign(target, value, frame, stmt, key=key)
        else:
            self.fail(stmt, "augmented assignment to an attribute")

    def assign(self, target, value, frame: Frame, stmt, key=None, origin=NO_BUFFERS):
        """Bind ``value`` to ``target``; ``origin`` is where the value may live: buffers, or
        a tuple of origins for the items of a tuple/list display (see origin_tree)."""
        if isinstance(target, ast.Name):
            self.bind_buffers(frame, target.id, value, _flat_buffers(origin))
            frame.env[target.id] = value
            frame.views.pop(target.id, None)
            self.record(frame, stmt, value, target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            self.unpack(target, value, frame, stmt, origin)
        elif isinstance(target, ast.Subscript):
            self.assign_item(target, value, frame, stmt, key, _flat_buffers(origin))
        elif isinstance(target, ast.Starred):
            self.assign(target.value, list(value), frame, stmt, origin=_flat_buffers(origin))
        else:
            self.fail(target, f"assignment to {describe(target)}")

    def bind_buffers(self, frame: Frame, name: str, value, buffers: frozenset):
        """``name`` now holds ``value``, living in ``buffers``. A traced 0-d value keeps the
        buffers it came with (a 0-d ndarray, or a list of them); with none it is a scalar."""
        if holds_array(value):
            frame.buffers[name] = buffers or fresh_buffers(value)
        elif buffers and holds_data(value):
            frame.buffers[name] = buffers
        else:
            frame.buffers.pop(name, None)

    def unpack(self, target, value, frame, stmt, origin=NO_BUFFERS):
        items = list(value)   # a traced array unpacks into its rows
        starred = [i for i, t in enumerate(target.elts) if isinstance(t, ast.Starred)]
        if starred:
            k = starred[0]
            n_after = len(target.elts) - k - 1
            items = items[:k] + [items[k:len(items) - n_after]] + items[len(items) - n_after:]
        if len(items) != len(target.elts):
            raise ValueError(f"cannot unpack {len(items)} values into {len(target.elts)} targets")
        if isinstance(origin, tuple) and len(origin) == len(items) and not starred:
            origins = origin                 # a, b = b, a: item by item
        else:   # (the items of a 1-d array are NumPy scalars)
            origins = [row_buffers(value, _flat_buffers(origin))] * len(items)
        for t, v, o in zip(target.elts, items, origins):
            self.assign(t, v, frame, stmt, origin=o)

    def assign_item(self, target, value, frame, stmt, key=None, origin=NO_BUFFERS):
        base_expr = target.value
        if key is None:
            key = self.eval(target.slice, frame)
        if not isinstance(base_expr, ast.Name):
            container = self.eval(base_expr, frame)
            if isinstance(container, (list, dict)):
                self.check_traced_state(base_expr, frame, target, "item assignment into")
                container[key] = value
                self.note_contents(container, origin or fresh_buffers(value), frame)
                return
            return self.element_written(target, key, value, frame)   # xs[t][k] = v
        name = base_expr.id
        container = frame.lookup(name, base_expr)
        if isinstance(container, (list, dict)):
            self.check_traced_state(base_expr, frame, target, "item assignment into")
            container[key] = value
            self.note_contents(container, origin or fresh_buffers(value), frame)
            return
        if not isinstance(container, (Node, np.ndarray)):
            self.fail(target, f"item assignment into {type(container).__name__}")
        if not is_array(container) and not self.zero_d_array(name, container, frame):
            raise TypeError(f"{frame.source.loc(target)}: '{name}' is a NumPy scalar (0-d values "
                            "from arithmetic, ufuncs, reductions and x[i] are immutable): it does "
                            "not support item assignment")
        for reason in maybe_scalar_reasons(frame.buffers.get(name, NO_BUFFERS)):
            self.fail(target, f"item assignment into '{name}', which may be an immutable NumPy "
                      f"scalar rather than a 0-d array ({reason})",
                      f"make it an array first: {name} = np.array({name})")
        view = self.check_write_into(name, frame, target, "item assignment into")
        self.written(name, self.item_written(container, key, value, target), view, frame, stmt)

    # -- aliasing: where an in-place write may be seen (symgrad.aliases) ---------------------
    def zero_d_array(self, name: str, value, frame: Frame) -> bool:
        """Whether ``name`` holds a traced 0-d ndarray (mutable), not a NumPy scalar: its
        binding holds buffers (symgrad.aliases)."""
        return isinstance(value, Node) and value.ndim == 0 and bool(frame.buffers_of(name))

    def check_kind_known(self, name: str, current, result, frame: Frame, node):
        """Refuse ``name <op>= v`` on a 0-d value that may be an array (updated in place,
        keeping its dtype) or a scalar (rebound to the result's dtype) where the two differ."""
        conflict = kind_conflict(current, result, frame.buffers_of(name))
        if conflict:
            self.fail(node, f"augmented assignment to '{name}', which may be {conflict}",
                      f"make it an array first: {name} = np.array({name}), or rebind: {name} = {name} op value")

    def check_writable(self, name: str, frame: Frame, node, what: str, besides=()):
        """Refuse an in-place write to ``name`` unless its array is private to this function
        and no other live name (but those ``besides``) may share its memory."""
        hint = f"copy it first: {name} = {name}.copy()"
        current = frame.env.get(name)
        if isinstance(current, Node) and current.ndim == 0:   # a 0-d array: rebinding works too
            hint += f", or rebind instead of updating in place: {name} = {name} op value"
        if name not in frame.env:
            owners = sorted(b.owner for b in frame.buffers_of(name) if b.owner)
            where = owners[0] if owners else f"'{name}' of an enclosing function"
            self.fail(node, f"{what} {where} (a function may only write into arrays it made "
                      "itself)", f"make a local copy first: local = {name}.copy()")
        buffers = frame.buffers.get(name, NO_BUFFERS)
        owners = sorted(b.owner for b in buffers if b.owner)
        if owners:
            if owners[0] == f"argument '{name}'":
                construct = f"{what} argument array '{name}' (it would modify the caller's array)"
            else:
                construct = (f"{what} '{name}', which may share memory with {owners[0]} "
                             "(writing would change it too, and symgrad updates arrays functionally)")
            self.fail(node, construct, hint)
        other = self.sharing_name(name, frame, buffers, tuple(besides) + rebound_next(frame))
        if other is not None:
            self.fail(node, f"{what} '{name}', which may share memory with {other} (a view or "
                      "alias of one array: NumPy would change both, symgrad's functional "
                      "update would change one)", hint)

    def check_traced_state(self, expr, frame: Frame, node, what: str):
        """Refuse to mutate a list or dict the trace did not make (a global, a closure cell):
        tracing would change the program's state, once per trace."""
        root = expr
        while isinstance(root, (ast.Attribute, ast.Subscript)):
            root = root.value
        if not isinstance(root, ast.Name):
            return
        f = frame
        while f is not None:
            if root.id in f.env:
                return
            f = f.parent
        self.fail(node, f"{what} '{root.id}', which is not a variable of the traced function "
                  "(it would change state outside the function while tracing)",
                  f"build a local copy: local = list({root.id}) or dict({root.id})")

    def live_frames(self, frame: Frame) -> list:
        """The scopes whose names are live now: the executing frames and the frames they
        close over, without the scopes a branch's frame is a copy of."""
        copied, order, seen = set(), [], set()
        for f in self.frames + [frame]:
            g = f.forked_from
            while g is not None:
                copied.add(id(g))
                g = g.forked_from
        for f in self.frames + [frame]:
            while f is not None and id(f) not in seen:
                seen.add(id(f))
                if id(f) not in copied:
                    order.append(f)
                f = f.parent
        return order

    def sharing_name(self, name: str, frame: Frame, buffers: frozenset, besides=()):
        if not buffers:
            return None
        for f in self.live_frames(frame):
            for other, held in f.buffers.items():
                if (f is frame and (other == name or other in besides)) or not held & buffers:
                    continue
                return f"'{other}'" if f is frame else f"'{other}' of {f.name}()"
        return None

    def note_contents(self, container, added: frozenset, frame: Frame):
        """A list or dict now also holds arrays in ``added``: every name bound to it may
        reach them."""
        if not added:
            return
        for f in self.live_frames(frame):
            for other, value in f.env.items():
                if value is container:
                    f.buffers[other] = f.buffers.get(other, NO_BUFFERS) | added

    def stmt_FunctionDef(self, stmt, frame, cont):
        wrappers = [self.eval(d, frame) for d in stmt.decorator_list]
        for d, wrapper in zip(stmt.decorator_list, wrappers):
            if wrapper is not checkpoint:   # the one decorator that needs nothing run
                self.fail(d, "decorators on a nested def", "only @sg.checkpoint is supported there")
        value = self.make_closure(stmt, frame)
        for _ in wrappers:
            value = checkpoint(value)
        frame.env[stmt.name] = value

    def stmt_Raise(self, stmt, frame, cont):
        exc = self.eval(stmt.exc, frame) if stmt.exc is not None else RuntimeError("re-raise")
        if isinstance(exc, type):
            exc = exc()
        raise exc

    def stmt_Assert(self, stmt, frame, cont):
        test = self.eval(stmt.test, frame)
        if isinstance(test, Node):
            self.fail(stmt, "assert on a data-dependent condition")
        if not test:
            msg = self.eval(stmt.msg, frame) if stmt.msg is not None else None
            raise AssertionError(msg) if msg is not None else AssertionError()

    def stmt_Import(self, stmt, frame, cont):
        for alias in stmt.names:
            if alias.name.split(".")[0] not in ("math", "numpy", "symgrad"):
                self.fail(stmt, f"import of {alias.name}")
            module = __import__(alias.name)
            if alias.asname:
                for part in alias.name.split(".")[1:]:
                    module = getattr(module, part)
            frame.env[alias.asname or alias.name.split(".")[0]] = module

    # -- unsupported statements with a clear name ---------------------------------------------
# Python's in-place operators on containers: they change the object, every name bound to it
# sees the change
_CONTAINER_IN_PLACE = {(list, ast.Add): operator.iadd, (list, ast.Mult): operator.imul,
                       (dict, ast.BitOr): operator.ior}


def _flatten(value, outputs: list, loc: Loc):
    """Append the leaves of a return value to ``outputs``; return its out_tree (ints index
    ``outputs``)."""
    def leaf(v) -> int:
        if v is None:
            raise TypeError(f"{loc}: the function returned None; "
                            "a differentiated function must return a number or an array")
        if not isinstance(v, (Node, numbers.Number, np.ndarray, np.generic)):
            raise TypeError(f"the function returned a {type(v).__name__}; expected numbers/arrays")
        outputs.append(v)
        return len(outputs) - 1
    return build_tree(value, leaf)


def _flat_buffers(origin) -> frozenset:
    """The union of an origin tree (buffers, or tuples of origin trees)."""
    if isinstance(origin, frozenset):
        return origin
    found, stack = set(), [origin]
    while stack:
        o = stack.pop()
        if isinstance(o, frozenset):
            found |= o
        else:
            stack.extend(o)
    return frozenset(found)


def _locate(e: Exception, loc: Loc) -> Exception:
    """The same exception type, its message prefixed with the user's file and line."""
    try:
        new = type(e)(f"{loc}: {e}\n    {loc.text}")
    except Exception:
        return e
    new._symgrad_located = True
    new._symgrad_at = (loc, str(e))   # where, and NumPy's own message (symgrad.guards.raised)
    return new



def _in_library(module_name) -> bool:
    return isinstance(module_name, str) and module_name.split(".")[0] in LIBRARY_PACKAGES


def _is_library(value) -> bool:
    return isinstance(value, types.ModuleType) and _in_library(value.__name__)


def trace(fn, args, name: str | None = None, captures: dict | None = None) -> Graph:
    """Trace ``fn`` for these arguments (values give shapes, dtypes and static values);
    ``captures`` receives what it read from globals, closure cells and module attributes."""
    return Tracer(captures).trace(fn, list(args), name)
