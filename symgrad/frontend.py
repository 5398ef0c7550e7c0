"""The front end: a Python function's AST -> IR, by abstract interpretation.

The tracer walks the function's syntax tree with concrete values for static things (ints,
bools, shapes, Python lists) and IR nodes for data. So loops over static ranges unroll, ``if``
on static values is decided while tracing, ``if`` on data becomes a select between both
branches, helper functions are inlined (their own source is read and interpreted), and lists
built while tracing are ordinary Python lists of nodes.

Anything outside the supported subset raises :class:`UnsupportedSyntaxError` naming the file,
line, column, the source line and the construct.
"""
from __future__ import annotations

import ast
import numbers
import types

import numpy as np

from . import ops
from .errors import UnsupportedSyntaxError
from .ir import Graph, Loc, Node, label_new, make
from .expressions import LIBRARY_PACKAGES, Expressions, check_static_key, describe
from .scope import (MISSING, Break, Continue, Frame, Return, Undefined, closure_of, first_seen,
                    fork, is_data, walk_nodes)
from .source import function_source


def _contains(stmts, kinds) -> bool:
    for stmt in stmts:
        for node in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.Lambda)) else ():
            if isinstance(node, kinds):
                return True
    return False


class Tracer(Expressions):
    def __init__(self, captures: dict | None = None):
        # What the trace read from outside the function: (holder, name) -> (holder, name, value)
        # for globals (holder: the globals dict), closure cells and module attributes.
        self.captures = {} if captures is None else captures
        self.names: dict[Node, str] = {}
        self.locs: dict[Node, Loc] = {}
        self.depth = 0
        self.frame: Frame | None = None
        self.node: ast.AST | None = None

    # -- errors ------------------------------------------------------------------------------
    def fail(self, node: ast.AST, construct: str, hint: str = ""):
        loc = self.frame.source.loc(node)
        raise UnsupportedSyntaxError(construct, loc.filename, loc.lineno, loc.col, loc.text, hint)

    # -- entry -------------------------------------------------------------------------------
    def trace(self, fn, args: list, name: str | None = None) -> Graph:
        source = function_source(fn)
        frame = Frame(self, source, fn.__globals__, None, closure_of(fn), fn.__name__)
        self.frame = frame
        tree = source.tree
        params = [a.arg for a in tree.args.args]
        if tree.args.vararg or tree.args.kwarg or tree.args.kwonlyargs or tree.args.posonlyargs:
            self.fail(tree, "*args, **kwargs or keyword-only parameters in the differentiated function")
        inputs = []
        for i, (param, value) in enumerate(zip(params, args)):
            node = _arg_node(i, param, value)
            inputs.append(node)
            frame.env[param] = value if node is None else node
            if node is not None and node.ndim:
                frame.owned_by_caller.add(param)
        try:
            result = self.run_body(frame, tree)
        except RecursionError:
            self.fail(self.node or tree, "expression nesting or recursion too deep to trace")
        outputs = []
        tree_shape = _flatten(result, outputs, self, tree)
        graph = Graph(name or fn.__name__, tuple(params), tuple(inputs),
                      tuple(ops.lift(o) for o in outputs), tree_shape, self.names, self.locs,
                      {}, source.filename)
        return graph

    def run_body(self, frame: Frame, tree):
        if isinstance(tree, ast.Lambda):   # an expression body: run it like a return statement
            value = self.located(frame, tree.body, lambda: self.eval(tree.body, frame))
            self.record(frame, tree.body, value)
            return value
        try:
            self.exec_block(tree.body, frame, ())
        except Return as r:
            return r.value
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
            self.node = stmt
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
        except (Return, Break, Continue, UnsupportedSyntaxError):
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
        value = None if stmt.value is None else self.eval(stmt.value, frame)
        self.record(frame, stmt, value)
        raise Return(value)

    def stmt_Assign(self, stmt, frame, cont):
        value = self.eval(stmt.value, frame)
        for target in stmt.targets:
            self.assign(target, value, frame, stmt)

    def stmt_AnnAssign(self, stmt, frame, cont):
        if stmt.value is not None:
            self.assign(stmt.target, self.eval(stmt.value, frame), frame, stmt)

    def stmt_AugAssign(self, stmt, frame, cont):
        target = stmt.target
        if isinstance(target, ast.Name):
            current = frame.lookup(target.id, target)
            if target.id in frame.owned_by_caller:
                self.fail(stmt, f"augmented assignment to argument array '{target.id}' (it would "
                          "modify the caller's array in place)",
                          f"copy it first: {target.id} = {target.id}.copy()")
            value = self.binop(stmt.op, current, self.eval(stmt.value, frame), stmt)
            self.assign(target, value, frame, stmt)
        elif isinstance(target, ast.Subscript):
            container = self.eval(target.value, frame)
            key = self.eval(target.slice, frame)
            current = self.subscript(container, key, target)
            value = self.binop(stmt.op, current, self.eval(stmt.value, frame), stmt)
            self.assign(target, value, frame, stmt, key=key)
        else:
            self.fail(stmt, "augmented assignment to an attribute")

    def assign(self, target, value, frame: Frame, stmt, key=None):
        if isinstance(target, ast.Name):
            if isinstance(stmt.value if hasattr(stmt, "value") else None, ast.Name) and \
                    stmt.value.id in frame.owned_by_caller:
                frame.owned_by_caller.add(target.id)
            else:
                frame.owned_by_caller.discard(target.id)
            frame.env[target.id] = value
            self.record(frame, stmt, value, target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            self.unpack(target, value, frame, stmt)
        elif isinstance(target, ast.Subscript):
            self.assign_item(target, value, frame, stmt, key)
        elif isinstance(target, ast.Starred):
            self.assign(target.value, list(value), frame, stmt)
        else:
            self.fail(target, f"assignment to {describe(target)}")

    def unpack(self, target, value, frame, stmt):
        items = list(value)   # a traced array unpacks into its rows
        starred = [i for i, t in enumerate(target.elts) if isinstance(t, ast.Starred)]
        if starred:
            k = starred[0]
            n_after = len(target.elts) - k - 1
            items = items[:k] + [items[k:len(items) - n_after]] + items[len(items) - n_after:]
        if len(items) != len(target.elts):
            raise ValueError(f"cannot unpack {len(items)} values into {len(target.elts)} targets")
        for t, v in zip(target.elts, items):
            self.assign(t, v, frame, stmt)

    def assign_item(self, target, value, frame, stmt, key=None):
        base_expr = target.value
        if key is None:
            key = self.eval(target.slice, frame)
        if not isinstance(base_expr, ast.Name):
            container = self.eval(base_expr, frame)
            if isinstance(container, (list, dict)):
                container[key] = value
                return
            self.fail(target, "item assignment into an expression (only 'name[index] = value')")
        name = base_expr.id
        container = frame.lookup(name, base_expr)
        if isinstance(container, (list, dict)):
            container[key] = value
            return
        if not isinstance(container, Node):
            self.fail(target, f"item assignment into {type(container).__name__}")
        if name in frame.owned_by_caller:
            self.fail(target, f"item assignment into argument array '{name}' (it would modify the "
                      "caller's array)", f"copy it first: {name} = {name}.copy()")
        check_static_key(self, key, target)
        updated = ops.setitem(container, value, key)
        frame.env[name] = updated
        self.record(frame, stmt, updated, name)

    def stmt_If(self, stmt, frame, cont):  # only reached through exec_if
        self.exec_if(stmt, frame, cont)

    def exec_if(self, stmt, frame: Frame, cont):
        self.frame = frame
        cond = self.located(frame, stmt, lambda: self.eval(stmt.test, frame))
        if not isinstance(cond, Node):
            self.exec_block(stmt.body if cond else stmt.orelse, frame, cont)
            return
        if _contains(stmt.body + stmt.orelse, (ast.Break, ast.Continue)):
            self.fail(stmt, "break/continue inside an if on a data-dependent condition")
        has_return = _contains(stmt.body + stmt.orelse, (ast.Return,))
        if has_return and frame.loop_depth:
            self.fail(stmt, "return inside a data-dependent if within a loop")
        branches = []
        for body in (stmt.body, stmt.orelse):
            child = fork(frame)
            if has_return:   # run each branch with everything after it, then select
                rest = [s for block in cont for s in block]
                try:
                    self.exec_block(body + rest, child, ())
                    value = None
                except Return as r:
                    value = r.value
                branches.append(value)
            else:
                self.exec_block(body, child, ())
                branches.append(child)
        if has_return:
            raise Return(self.merge(cond, branches[0], branches[1], stmt, "return value"))
        then, other = branches
        loc = frame.source.loc(stmt)
        for name in sorted(set(then.env) | set(other.env), key=first_seen(then.env, other.env)):
            a, b = then.env.get(name, MISSING), other.env.get(name, MISSING)
            if a is MISSING or b is MISSING:
                frame.env[name] = Undefined(name, loc)
                continue
            frame.env[name] = self.merge(cond, a, b, stmt, f"variable '{name}'")
            if frame.env[name] is not a:
                self.record(frame, stmt, frame.env[name], name)
        frame.owned_by_caller = then.owned_by_caller & other.owned_by_caller

    def merge(self, cond, a, b, stmt, what):
        if a is b:
            return a
        if isinstance(a, Undefined) or isinstance(b, Undefined):
            return a if isinstance(a, Undefined) else b
        if is_data(a) or is_data(b):
            if all(isinstance(v, (Node, numbers.Number, np.ndarray)) for v in (a, b)):
                return ops.where(cond, a, b)
        elif isinstance(a, (numbers.Number, np.ndarray)) and isinstance(b, (numbers.Number, np.ndarray)):
            if np.array_equal(a, b):
                return a
            return ops.where(cond, a, b)
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) \
                and type(a) is type(b):
            return type(a)(self.merge(cond, x, y, stmt, what) for x, y in zip(a, b))
        try:
            if a == b:
                return a
        except Exception:
            pass
        if a is None or b is None:
            self.fail(stmt, f"{what} is None on one branch of a data-dependent if")
        self.fail(stmt, f"{what} differs between the branches of a data-dependent if in a way "
                  "that cannot be selected elementwise")

    def stmt_For(self, stmt, frame, cont):
        if stmt.orelse:
            self.fail(stmt, "for ... else")
        iterable = self.eval(stmt.iter, frame)   # a traced array iterates over its rows
        try:
            items = iter(iterable)
        except TypeError:
            self.fail(stmt.iter, f"iteration over {type(iterable).__name__}")
        frame.loop_depth += 1
        try:
            for item in items:
                self.assign(stmt.target, item, frame, stmt)
                try:
                    self.exec_block(stmt.body, frame, ())
                except Continue:
                    continue
                except Break:
                    break
        finally:
            frame.loop_depth -= 1

    def stmt_Break(self, stmt, frame, cont):
        raise Break()

    def stmt_Continue(self, stmt, frame, cont):
        raise Continue()

    def stmt_FunctionDef(self, stmt, frame, cont):
        if stmt.decorator_list:
            self.fail(stmt, "decorators on a nested def")
        frame.env[stmt.name] = self.make_closure(stmt, frame)

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
    def stmt_While(self, stmt, frame, cont):
        self.fail(stmt, "while loop", "use a for loop over a static range()")


def _arg_node(i: int, name: str, value):
    if isinstance(value, bool) or isinstance(value, numbers.Integral) and not isinstance(value, np.generic):
        return None   # static: the trace is specialised on it
    if isinstance(value, float):
        return make("arg", (), (i, name, "float64", ()))
    if isinstance(value, (np.ndarray, np.generic)):
        dtype = value.dtype.name
        if dtype not in ("float32", "float64", "bool") and value.dtype.kind not in "iu":
            raise TypeError(f"argument '{name}': unsupported dtype {value.dtype} "
                            "(use float32, float64, integer or bool arrays)")
        return make("arg", (), (i, name, dtype, tuple(value.shape)))
    if value is None or isinstance(value, (str, tuple)):
        return None
    raise TypeError(f"argument '{name}': expected a float, int, bool or NumPy array, "
                    f"got {type(value).__name__}")


def _flatten(value, outputs: list, tracer, tree):
    """Append the leaves of a return value to ``outputs``; return its out_tree (ints index
    ``outputs``)."""
    if isinstance(value, (tuple, list)):
        return tuple(_flatten(v, outputs, tracer, tree) for v in value)
    if value is None:
        raise TypeError(f"{tracer.frame.source.loc(tree)}: the function returned None; "
                        "a differentiated function must return a number or an array")
    if not isinstance(value, (Node, numbers.Number, np.ndarray, np.generic)):
        raise TypeError(f"the function returned a {type(value).__name__}; expected numbers/arrays")
    outputs.append(value)
    return len(outputs) - 1


def _locate(e: Exception, loc: Loc) -> Exception:
    """The same exception type, its message prefixed with the user's file and line."""
    try:
        new = type(e)(f"{loc}: {e}\n    {loc.text}")
    except Exception:
        return e
    new._symgrad_located = True
    return new



def _in_library(module_name) -> bool:
    return isinstance(module_name, str) and module_name.split(".")[0] in LIBRARY_PACKAGES


def _is_library(value) -> bool:
    return isinstance(value, types.ModuleType) and _in_library(value.__name__)


def trace(fn, args, name: str | None = None, captures: dict | None = None) -> Graph:
    """Trace ``fn`` for these arguments (values give shapes, dtypes and static values);
    ``captures`` receives what it read from globals, closure cells and module attributes."""
    return Tracer(captures).trace(fn, list(args), name)
