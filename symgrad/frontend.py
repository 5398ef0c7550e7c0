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
import builtins
import copy
import inspect
import linecache
import math
import numbers
import operator
import textwrap
import types
from dataclasses import dataclass

import numpy as np

from . import ops
from .errors import UnsupportedSyntaxError
from .ir import Graph, Loc, Node, make
from .numpy_api import CALLABLES, DUALS

MAX_CALL_DEPTH = 40


# ----------------------------------------------------------------------------------------------
# Reading source


@dataclass
class Source:
    filename: str
    tree: ast.AST            # FunctionDef or Lambda
    line_offset: int         # add to tree line numbers to get file line numbers
    col_offset: int

    def loc(self, node: ast.AST) -> Loc:
        lineno = getattr(node, "lineno", 1) + self.line_offset
        col = getattr(node, "col_offset", 0) + self.col_offset
        text = linecache.getline(self.filename, lineno).strip()
        return Loc(self.filename, lineno, col, text)


_source_cache: dict = {}


def function_source(fn) -> Source:
    code = fn.__code__
    if code in _source_cache:
        return _source_cache[code]
    filename = inspect.getsourcefile(fn) or code.co_filename
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise UnsupportedSyntaxError(
            f"cannot read the source of {fn.__qualname__} ({e}); symgrad needs the function's "
            "source code (functions defined in a file, not in exec or an interactive prompt "
            "without source)", filename, code.co_firstlineno) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    indent = len(lines[0]) - len(lines[0].lstrip()) if dedented != text else 0
    try:
        module = ast.parse(dedented)
    except SyntaxError:  # e.g. a lambda in the middle of a larger expression spanning lines
        module = ast.parse("(" + dedented.strip().rstrip(",") + ")") if fn.__name__ == "<lambda>" else None
        if module is None:
            raise
    if fn.__name__ == "<lambda>":
        lambdas = [n for n in ast.walk(module) if isinstance(n, ast.Lambda)]
        params = list(code.co_varnames[:code.co_argcount])
        lambdas = [n for n in lambdas if [a.arg for a in n.args.args] == params] or lambdas
        if len(lambdas) != 1:
            raise UnsupportedSyntaxError("a lambda that shares its line with another lambda",
                                         filename, start, 0, lines[0])
        tree = lambdas[0]
    else:
        tree = next(n for n in ast.walk(module)
                    if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == fn.__name__)
        if isinstance(tree, ast.AsyncFunctionDef):
            raise UnsupportedSyntaxError("async def", filename, start + tree.lineno - 1, 0, lines[0])
    source = Source(filename, tree, start - 1, indent)
    _source_cache[code] = source
    return source


# ----------------------------------------------------------------------------------------------
# Values


class Undefined:
    """A variable assigned in only one branch of a data-dependent ``if``."""

    def __init__(self, name: str, loc: Loc):
        self.name, self.loc = name, loc


class InterpFunction:
    """A lambda or nested def created while tracing: interpreted, closing over its frame."""

    def __init__(self, tree, frame: "Frame", defaults: list, kw_defaults: list):
        self.tree, self.frame = tree, frame
        self.defaults, self.kw_defaults = defaults, kw_defaults
        self.__name__ = getattr(tree, "name", "<lambda>")


class _Return(Exception):
    def __init__(self, value):
        self.value = value


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow, ast.MatMult: operator.matmul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift}
_NODE_BINOPS = {ast.Add: ops.add, ast.Sub: ops.sub, ast.Mult: ops.mul, ast.Div: ops.div,
                ast.Pow: ops.pow_, ast.MatMult: ops.matmul}
_CMPOPS = {ast.Lt: (operator.lt, ops.lt), ast.LtE: (operator.le, ops.le),
           ast.Gt: (operator.gt, ops.gt), ast.GtE: (operator.ge, ops.ge),
           ast.Eq: (operator.eq, ops.eq), ast.NotEq: (operator.ne, ops.ne)}
_STATIC_CMPOPS = {ast.Is: operator.is_, ast.IsNot: operator.is_not,
                  ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}

_SAFE_BUILTINS = {
    name: getattr(builtins, name) for name in (
        "range", "len", "abs", "min", "max", "sum", "float", "int", "bool", "enumerate", "zip",
        "list", "tuple", "dict", "reversed", "isinstance", "round", "sorted", "any", "all",
        "ValueError", "TypeError", "IndexError", "KeyError", "AssertionError",
        "NotImplementedError", "RuntimeError", "ZeroDivisionError", "Exception", "True",
        "False", "None", "slice", "map", "divmod", "pow", "str", "repr", "type", "hasattr",
        "getattr", "callable", "iter", "next", "set", "frozenset")
    if hasattr(builtins, name)}
_STRUCTURAL_BUILTINS = {builtins.zip, builtins.enumerate, builtins.list, builtins.tuple,
                        builtins.reversed, builtins.dict, builtins.isinstance, builtins.sum,
                        builtins.iter, builtins.next}
_UNSAFE_CALLS = {builtins.print: "print() (I/O)", builtins.open: "open() (I/O)",
                 builtins.input: "input() (I/O)", builtins.exec: "exec()", builtins.eval: "eval()"}
_PURE_MODULES = ("math", "numpy", "builtins", "operator", "functools", "itertools")


def _is_data(v) -> bool:
    return isinstance(v, Node)


def _walk_nodes(value):
    if isinstance(value, Node):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _walk_nodes(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _walk_nodes(v)


def _copy_value(v):
    """Branches of a data-dependent if work on private copies of mutable containers."""
    if isinstance(v, list):
        return [_copy_value(x) for x in v]
    if isinstance(v, dict):
        return {k: _copy_value(x) for k, x in v.items()}
    return v


def _contains(stmts, kinds) -> bool:
    for stmt in stmts:
        for node in ast.walk(stmt) if not isinstance(stmt, (ast.FunctionDef, ast.Lambda)) else ():
            if isinstance(node, kinds):
                return True
    return False


# ----------------------------------------------------------------------------------------------
# Frames


class Frame:
    def __init__(self, tracer: "Tracer", source: Source, globals_: dict, parent: "Frame | None",
                 closure: dict, name: str):
        self.tracer, self.source, self.globals, self.parent = tracer, source, globals_, parent
        self.closure = closure
        self.env: dict = {}
        self.owned_by_caller: set[str] = set()
        self.loop_depth = 0
        self.name = name

    def lookup(self, name: str, node: ast.AST):
        frame = self
        while frame is not None:
            if name in frame.env:
                value = frame.env[name]
                if isinstance(value, Undefined):
                    self.tracer.fail(node, f"variable '{name}' is assigned in only one branch of "
                                     f"a data-dependent if (line {value.loc.lineno})")
                return value
            if name in frame.closure:
                return frame.closure[name]
            frame = frame.parent
        root = self
        while root.parent is not None:
            root = root.parent
        if name in root.globals:
            return root.globals[name]
        if name in _SAFE_BUILTINS:
            return _SAFE_BUILTINS[name]
        if hasattr(builtins, name):   # calls are vetted in Tracer.call
            return getattr(builtins, name)
        raise NameError(f"{self.source.loc(node)}: name '{name}' is not defined")


# ----------------------------------------------------------------------------------------------
# The tracer


class Tracer:
    def __init__(self):
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
        frame = Frame(self, source, fn.__globals__, None, _closure_of(fn), fn.__name__)
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
        outputs, tree_shape = [], _flatten(result, [], self, tree)
        _flatten_into(result, outputs)
        graph = Graph(name or fn.__name__, tuple(params), tuple(inputs),
                      tuple(ops.lift(o) for o in outputs), tree_shape, self.names, self.locs,
                      {}, source.filename)
        return graph

    def run_body(self, frame: Frame, tree):
        if isinstance(tree, ast.Lambda):
            value = self.eval(tree.body, frame)
            self.record(frame, tree.body, value)
            return value
        try:
            self.exec_block(tree.body, frame, ())
        except _Return as r:
            return r.value
        return None

    # -- bookkeeping: names and locations ----------------------------------------------------
    def record(self, frame: Frame, node: ast.AST, value, name: str | None = None):
        """Give nodes first produced by this statement its location (and a variable name)."""
        loc = frame.source.loc(node)
        for root in _walk_nodes(value):
            if name is not None and root.op not in ("arg", "const", "full", "array"):
                self.names.setdefault(root, name)
            stack = [root]
            while stack:
                n = stack.pop()
                if n in self.locs or n.op in ("arg", "const"):
                    continue
                self.locs[n] = loc
                stack.extend(n.inputs)

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
            self.fail(stmt, _describe(stmt))
        try:
            method(stmt, frame, cont)
        except (_Return, _Break, _Continue, UnsupportedSyntaxError):
            raise
        except (ValueError, TypeError, IndexError, ZeroDivisionError, NameError,
                KeyError, AttributeError) as e:
            if getattr(e, "_symgrad_located", False):
                raise
            raise _locate(e, frame.source.loc(stmt)) from e

    def stmt_Expr(self, stmt, frame, cont):
        if isinstance(stmt.value, ast.Constant):   # docstring
            return
        self.record(frame, stmt, self.eval(stmt.value, frame))

    def stmt_Pass(self, stmt, frame, cont):
        pass

    def stmt_Return(self, stmt, frame, cont):
        value = None if stmt.value is None else self.eval(stmt.value, frame)
        self.record(frame, stmt, value)
        raise _Return(value)

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
            self.fail(target, f"assignment to {_describe(target)}")

    def unpack(self, target, value, frame, stmt):
        if isinstance(value, Node):
            if value.ndim == 0:
                raise TypeError("cannot unpack a scalar")
            value = [ops.getitem(value, i) for i in range(value.shape[0])]
        items = list(value)
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
        _check_static_key(self, key, target)
        updated = ops.setitem(container, value, key)
        frame.env[name] = updated
        self.record(frame, stmt, updated, name)

    def stmt_If(self, stmt, frame, cont):  # only reached through exec_if
        self.exec_if(stmt, frame, cont)

    def exec_if(self, stmt, frame: Frame, cont):
        self.frame = frame
        try:
            cond = self.eval(stmt.test, frame)
        except (ValueError, TypeError, IndexError) as e:
            raise _locate(e, frame.source.loc(stmt)) from e
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
            child = _fork(frame)
            if has_return:   # run each branch with everything after it, then select
                rest = [s for block in cont for s in block]
                try:
                    self.exec_block(body + rest, child, ())
                    value = None
                except _Return as r:
                    value = r.value
                branches.append(value)
            else:
                self.exec_block(body, child, ())
                branches.append(child)
        if has_return:
            raise _Return(self.merge(cond, branches[0], branches[1], stmt, "return value"))
        then, other = branches
        loc = frame.source.loc(stmt)
        for name in sorted(set(then.env) | set(other.env), key=_first_seen(then.env, other.env)):
            a, b = then.env.get(name, _MISSING), other.env.get(name, _MISSING)
            if a is _MISSING or b is _MISSING:
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
        if _is_data(a) or _is_data(b):
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
        iterable = self.eval(stmt.iter, frame)
        if isinstance(iterable, Node):
            if iterable.ndim == 0:
                raise TypeError("iteration over a 0-d array")
            iterable = [ops.getitem(iterable, i) for i in range(iterable.shape[0])]
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
                except _Continue:
                    continue
                except _Break:
                    break
        finally:
            frame.loop_depth -= 1

    def stmt_Break(self, stmt, frame, cont):
        raise _Break()

    def stmt_Continue(self, stmt, frame, cont):
        raise _Continue()

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

    # -- expressions -------------------------------------------------------------------------
    def eval(self, node, frame: Frame):
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            self.fail(node, _describe(node))
        return method(node, frame)

    def expr_Constant(self, node, frame):
        if isinstance(node.value, (bytes, complex)) or node.value is Ellipsis and False:
            self.fail(node, f"{type(node.value).__name__} literal")
        return node.value

    def expr_Name(self, node, frame):
        return frame.lookup(node.id, node)

    def expr_Tuple(self, node, frame):
        return tuple(self.eval_items(node.elts, frame))

    def expr_List(self, node, frame):
        return list(self.eval_items(node.elts, frame))

    def expr_Dict(self, node, frame):
        if any(k is None for k in node.keys):
            self.fail(node, "dict unpacking (**)")
        return {self.eval(k, frame): self.eval(v, frame) for k, v in zip(node.keys, node.values)}

    def eval_items(self, elts, frame):
        out = []
        for e in elts:
            if isinstance(e, ast.Starred):
                out.extend(self.eval(e.value, frame))
            else:
                out.append(self.eval(e, frame))
        return out

    def expr_BinOp(self, node, frame):
        return self.binop(node.op, self.eval(node.left, frame), self.eval(node.right, frame), node)

    def binop(self, op, a, b, node):
        if _is_data(a) or _is_data(b):
            build = _NODE_BINOPS.get(type(op))
            if build is None:
                self.fail(node, f"operator '{_OP_SYMBOLS.get(type(op), type(op).__name__)}' on traced arrays")
            if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
                a, b = (DUALS["array"](v) if isinstance(v, (list, tuple)) else v for v in (a, b))
            return build(a, b)
        return _BINOPS[type(op)](a, b)

    def expr_UnaryOp(self, node, frame):
        v = self.eval(node.operand, frame)
        if isinstance(node.op, ast.Not):
            return ops.logical_not(v) if _is_data(v) else not v
        if isinstance(node.op, ast.USub):
            return ops.neg(v) if _is_data(v) else -v
        if isinstance(node.op, ast.UAdd):
            return v
        if _is_data(v):
            self.fail(node, "operator '~' on traced arrays")
        return ~v

    def expr_BoolOp(self, node, frame):
        values = []
        for expr in node.values:
            v = self.eval(expr, frame)
            if not _is_data(v) and not values:
                # Python's short circuit for a static first operand
                if isinstance(node.op, ast.And) and not v:
                    return v
                if isinstance(node.op, ast.Or) and v:
                    return v
                if expr is node.values[-1]:
                    return v
                continue
            values.append(v)
        combine = ops.logical_and if isinstance(node.op, ast.And) else ops.logical_or
        out = values[0]
        for v in values[1:]:
            if not _is_data(v):
                if isinstance(node.op, ast.And) and not v:
                    return v if len(values) == 1 else ops.logical_and(out, False)
                if isinstance(node.op, ast.Or) and v:
                    return v
                continue
            out = combine(out, v)
        return out if not _is_data(out) or out.dtype == "bool" else ops.ne(out, 0)

    def expr_Compare(self, node, frame):
        left = self.eval(node.left, frame)
        result = None
        for op, right_expr in zip(node.ops, node.comparators):
            right = self.eval(right_expr, frame)
            if type(op) in _STATIC_CMPOPS:
                if _is_data(left) or _is_data(right):
                    if isinstance(op, (ast.Is, ast.IsNot)):
                        value = _STATIC_CMPOPS[type(op)](left, right)
                    else:
                        self.fail(node, "'in' on traced arrays")
                else:
                    value = _STATIC_CMPOPS[type(op)](left, right)
            else:
                static_fn, build = _CMPOPS[type(op)]
                if _is_data(left) or _is_data(right):
                    value = build(left, right)
                else:
                    value = static_fn(left, right)
            if result is None:
                result = value
            elif _is_data(result) or _is_data(value):
                result = ops.logical_and(result, value)
            else:
                result = result and value
                if not result:
                    return result
            left = right
        return result

    def expr_IfExp(self, node, frame):
        cond = self.eval(node.test, frame)
        if not _is_data(cond):
            return self.eval(node.body if cond else node.orelse, frame)
        return self.merge(cond, self.eval(node.body, frame), self.eval(node.orelse, frame),
                          node, "conditional expression")

    def expr_Attribute(self, node, frame):
        value = self.eval(node.value, frame)
        if isinstance(value, Node):
            return node_attribute(value, node.attr, self, node)
        if isinstance(value, types.ModuleType) or isinstance(value, (list, tuple, dict, str,
                                                                        numbers.Number, np.ndarray, np.dtype)):
            try:
                return getattr(value, node.attr)
            except AttributeError:
                raise AttributeError(f"{type(value).__name__} has no attribute '{node.attr}'") from None
        if hasattr(value, "__dict__") or isinstance(value, type):
            return getattr(value, node.attr)
        self.fail(node, f"attribute '{node.attr}' of {type(value).__name__}")

    def expr_Subscript(self, node, frame):
        container = self.eval(node.value, frame)
        key = self.eval(node.slice, frame)
        return self.subscript(container, key, node)

    def subscript(self, container, key, node):
        if isinstance(container, Node):
            _check_static_key(self, key, node)
            return ops.getitem(container, key)
        if _is_data(key) or (isinstance(key, tuple) and any(_is_data(k) for k in key)):
            self.fail(node, "indexing a list with a traced value")
        if isinstance(container, np.ndarray):
            return container[key]
        return container[key]

    def expr_Slice(self, node, frame):
        parts = [None if p is None else self.eval(p, frame) for p in (node.lower, node.upper, node.step)]
        if any(_is_data(p) for p in parts):
            self.fail(node, "slice bounds that depend on data (bounds must be static)")
        return slice(*parts)

    def expr_Index(self, node, frame):  # Python < 3.9 compatibility
        return self.eval(node.value, frame)

    def expr_Lambda(self, node, frame):
        return self.make_closure(node, frame)

    def expr_ListComp(self, node, frame):
        return self.comprehension(node, frame, list)

    def expr_GeneratorExp(self, node, frame):
        return self.comprehension(node, frame, list)

    def expr_SetComp(self, node, frame):
        self.fail(node, "set comprehension")

    def expr_DictComp(self, node, frame):
        out = {}
        for env in self.comprehension_envs(node.generators, frame):
            out[self.eval(node.key, env)] = self.eval(node.value, env)
        return out

    def comprehension(self, node, frame, kind):
        return kind(self.eval(node.elt, env) for env in self.comprehension_envs(node.generators, frame))

    def comprehension_envs(self, generators, frame):
        if not generators:
            yield frame
            return
        gen, rest = generators[0], generators[1:]
        if gen.is_async:
            self.fail(gen, "async comprehension")
        iterable = self.eval(gen.iter, frame)
        if isinstance(iterable, Node):
            iterable = [ops.getitem(iterable, i) for i in range(iterable.shape[0])]
        for item in list(iterable):
            inner = Frame(self, frame.source, frame.globals, frame, {}, frame.name)
            dummy = ast.Assign(targets=[gen.target], value=None, lineno=gen.target.lineno,
                               col_offset=gen.target.col_offset)
            self.assign(gen.target, item, inner, dummy)
            ok = True
            for cond in gen.ifs:
                c = self.eval(cond, inner)
                if _is_data(c):
                    self.fail(cond, "comprehension filter on a data-dependent condition")
                if not c:
                    ok = False
                    break
            if ok:
                yield from self.comprehension_envs(rest, inner)

    def expr_Starred(self, node, frame):
        self.fail(node, "starred expression here")

    def expr_JoinedStr(self, node, frame):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                value = self.eval(v.value, frame)
                if _is_data(value):
                    self.fail(v, "formatting a traced value into a string")
                parts.append(format(value, self.eval(v.format_spec, frame) if v.format_spec else ""))
        return "".join(parts)

    def expr_FormattedValue(self, node, frame):
        return self.eval(node.value, frame)

    # -- calls -------------------------------------------------------------------------------
    def expr_Call(self, node, frame):
        fn = self.eval(node.func, frame)
        args = self.eval_items(node.args, frame)
        kwargs = {}
        for kw in node.keywords:
            if kw.arg is None:
                kwargs.update(self.eval(kw.value, frame))
            else:
                kwargs[kw.arg] = self.eval(kw.value, frame)
        return self.call(fn, args, kwargs, node)

    def call(self, fn, args, kwargs, node):
        from .api import Function   # the decorated form inlines its Python function
        if isinstance(fn, Function):
            fn = fn.fn
        if isinstance(fn, InterpFunction):
            return self.call_interpreted(fn, args, kwargs, node)
        try:
            handler = CALLABLES.get(fn)
        except TypeError:
            handler = None
        if handler is not None:
            return handler(*args, **kwargs)
        if fn in _UNSAFE_CALLS:
            self.fail(node, _UNSAFE_CALLS[fn])
        if fn is builtins.len and args and isinstance(args[0], Node):
            if args[0].ndim == 0:
                raise TypeError("len() of unsized object")
            return args[0].shape[0]
        if fn in (builtins.float, builtins.int, builtins.bool) and args and _is_data(args[0]):
            self.fail(node, f"{fn.__name__}() of a traced value (its value is only known at run time)")
        if isinstance(fn, types.FunctionType):
            return self.call_python(fn, args, kwargs, node)
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
            return self.call_python(fn.__func__, [fn.__self__] + list(args), kwargs, node)
        if isinstance(fn, _BoundNodeMethod):
            return fn(*args, **kwargs)
        if fn in _STRUCTURAL_BUILTINS:   # they move values around without looking at them
            return fn(*args, **kwargs)
        if fn is builtins.range and any(_is_data(a) for a in args):
            self.fail(node, "range() over a traced value (loop bounds must be static)")
        traced = any(True for _ in _walk_nodes(list(args) + list(kwargs.values())))
        if traced:
            if isinstance(fn, types.BuiltinMethodType) and isinstance(getattr(fn, "__self__", None), (list, dict)):
                return fn(*args, **kwargs)    # list.append(node), ...
            name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
            module = getattr(fn, "__module__", None) or type(fn).__module__
            self.fail(node, f"call to {module}.{name} on traced values",
                      "supported functions are listed in DESIGN.md §2 (sg.*, np.*, math.*)")
        if _is_pure(fn) or fn in _SAFE_BUILTINS.values():
            return fn(*args, **kwargs)
        self.fail(node, f"call to {getattr(fn, '__qualname__', repr(fn))}")

    def call_python(self, fn, args, kwargs, node):
        source = function_source(fn)
        tree = source.tree
        callee = Frame(self, source, fn.__globals__, None, _closure_of(fn), fn.__name__)
        defaults = list(fn.__defaults__ or ())
        kw_defaults = [(fn.__kwdefaults__ or {}).get(a.arg, _MISSING) for a in tree.args.kwonlyargs]
        return self.invoke(tree, callee, args, kwargs, defaults, kw_defaults, node)

    def call_interpreted(self, fn: InterpFunction, args, kwargs, node):
        callee = Frame(self, fn.frame.source, fn.frame.globals, fn.frame, {}, fn.__name__)
        return self.invoke(fn.tree, callee, args, kwargs, fn.defaults, fn.kw_defaults, node)

    def invoke(self, tree, callee: Frame, args, kwargs, defaults, kw_defaults, node):
        _bind(tree.args, callee.env, args, kwargs, defaults, kw_defaults, getattr(tree, "name", "<lambda>"))
        self.depth += 1
        if self.depth > MAX_CALL_DEPTH:
            self.fail(node, f"recursion deeper than {MAX_CALL_DEPTH} calls (recursion on a data-dependent "
                      "condition cannot terminate while tracing)")
        caller, self.frame = self.frame, callee
        try:
            return self.run_body(callee, tree)
        finally:
            self.depth -= 1
            self.frame = caller

    def make_closure(self, tree, frame):
        defaults = [self.eval(d, frame) for d in tree.args.defaults]
        kw_defaults = [_MISSING if d is None else self.eval(d, frame) for d in tree.args.kw_defaults]
        return InterpFunction(tree, frame, defaults, kw_defaults)

    # -- unsupported statements with a clear name ---------------------------------------------
    def stmt_While(self, stmt, frame, cont):
        self.fail(stmt, "while loop", "use a for loop over a static range()")


_MISSING = object()
_OP_SYMBOLS = {ast.FloorDiv: "//", ast.Mod: "%", ast.BitAnd: "&", ast.BitOr: "|",
               ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}


def _first_seen(*envs):
    order = {}
    for env in envs:
        for k in env:
            order.setdefault(k, len(order))
    return lambda k: order[k]


def _fork(frame: Frame) -> Frame:
    child = Frame(frame.tracer, frame.source, frame.globals, frame.parent, frame.closure, frame.name)
    child.env = {k: _copy_value(v) for k, v in frame.env.items()}
    child.owned_by_caller = set(frame.owned_by_caller)
    child.loop_depth = frame.loop_depth
    return child


def _closure_of(fn) -> dict:
    if not fn.__closure__:
        return {}
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out


def _is_pure(fn) -> bool:
    if isinstance(getattr(fn, "__self__", None), (np.ndarray, np.generic)):
        return True   # a method of a constant array, e.g. np.arange(6.0).reshape(2, 3)
    module = getattr(fn, "__module__", None) or ""
    if isinstance(fn, np.ufunc) or isinstance(fn, type) and issubclass(fn, (numbers.Number, np.generic)):
        return True
    return module.split(".")[0] in _PURE_MODULES


def _bind(arguments: ast.arguments, env: dict, args, kwargs, defaults, kw_defaults, name):
    params = [a.arg for a in arguments.posonlyargs + arguments.args]
    if len(args) > len(params) and arguments.vararg is None:
        raise TypeError(f"{name}() takes {len(params)} positional arguments but {len(args)} were given")
    for p, v in zip(params, args):
        env[p] = v
    if arguments.vararg is not None:
        env[arguments.vararg.arg] = tuple(args[len(params):])
    kwargs = dict(kwargs)
    for p in params[len(args):]:
        if p in kwargs:
            env[p] = kwargs.pop(p)
    first_default = len(params) - len(defaults)
    for i, p in enumerate(params):
        if p not in env:
            if i >= first_default:
                env[p] = defaults[i - first_default]
            else:
                raise TypeError(f"{name}() missing required argument '{p}'")
    for a, d in zip(arguments.kwonlyargs, kw_defaults):
        if a.arg in kwargs:
            env[a.arg] = kwargs.pop(a.arg)
        elif d is not _MISSING:
            env[a.arg] = d
        else:
            raise TypeError(f"{name}() missing required keyword argument '{a.arg}'")
    if arguments.kwarg is not None:
        env[arguments.kwarg.arg] = kwargs
    elif kwargs:
        raise TypeError(f"{name}() got an unexpected keyword argument '{next(iter(kwargs))}'")


def _check_static_key(tracer, key, node):
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if isinstance(k, Node) or (isinstance(k, (list, np.ndarray)) and not isinstance(k, Node)):
            tracer.fail(node, "advanced indexing with an array or list of indices "
                        "(only ints, slices, None and ... are supported)")


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


def _flatten_into(value, out: list):
    if isinstance(value, (tuple, list)):
        for v in value:
            _flatten_into(v, out)
    else:
        out.append(value)


def _flatten(value, counter: list, tracer, tree):
    """The out_tree of a return value (ints index the flattened outputs)."""
    if isinstance(value, (tuple, list)):
        return tuple(_flatten(v, counter, tracer, tree) for v in value)
    if value is None:
        raise TypeError(f"{tracer.frame.source.loc(tree)}: the function returned None; "
                        "a differentiated function must return a number or an array")
    if not isinstance(value, (Node, numbers.Number, np.ndarray, np.generic)):
        raise TypeError(f"the function returned a {type(value).__name__}; expected numbers/arrays")
    counter.append(None)
    return len(counter) - 1


def _locate(e: Exception, loc: Loc) -> Exception:
    """The same exception type, its message prefixed with the user's file and line."""
    try:
        new = type(e)(f"{loc}: {e}\n    {loc.text}")
    except Exception:
        return e
    new._symgrad_located = True
    return new


def _describe(node) -> str:
    names = {"While": "while loop", "Try": "try statement", "TryStar": "try statement",
             "With": "with statement", "AsyncWith": "async with", "AsyncFor": "async for",
             "Global": "global statement", "Nonlocal": "nonlocal statement",
             "ClassDef": "class definition", "Delete": "del statement", "Yield": "yield (generator)",
             "YieldFrom": "yield from (generator)", "Await": "await", "NamedExpr": "walrus operator :=",
             "ImportFrom": "from ... import inside the function", "AsyncFunctionDef": "async def",
             "Match": "match statement", "Set": "set literal", "SetComp": "set comprehension"}
    return names.get(type(node).__name__, type(node).__name__)


# ----------------------------------------------------------------------------------------------
# Attributes and methods of traced arrays


class _BoundNodeMethod:
    def __init__(self, fn, node):
        self.fn, self.node = fn, node

    def __call__(self, *args, **kwargs):
        return self.fn(self.node, *args, **kwargs)


def _shape_args(args):
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


_NODE_METHODS = {
    "sum": lambda x, axis=None, keepdims=False: ops.reduce("sum", x, axis, keepdims),
    "prod": lambda x, axis=None, keepdims=False: ops.reduce("prod", x, axis, keepdims),
    "max": lambda x, axis=None, keepdims=False: ops.reduce("max", x, axis, keepdims),
    "min": lambda x, axis=None, keepdims=False: ops.reduce("min", x, axis, keepdims),
    "mean": lambda x, axis=None, keepdims=False: ops.mean(x, axis, keepdims),
    "reshape": lambda x, *shape: ops.reshape(x, _shape_args(shape)),
    "transpose": lambda x, *axes: ops.transpose(x, _shape_args(axes) or None),
    "astype": lambda x, dtype: ops.cast(x, np.dtype(dtype).name),
    "copy": lambda x: x,
    "flatten": lambda x: ops.reshape(x, (-1,)),
    "ravel": lambda x: ops.reshape(x, (-1,)),
    "dot": lambda x, y: ops.dot(x, y),
    "clip": lambda x, lo=None, hi=None: DUALS["clip"](x, lo, hi),
    "squeeze": lambda x, axis=None: DUALS["squeeze"](x, axis),
    "item": None,
}


def node_attribute(x: Node, attr: str, tracer, node):
    if attr == "shape":
        return x.shape
    if attr == "ndim":
        return x.ndim
    if attr == "size":
        return x.size
    if attr == "dtype":
        return np.dtype(x.dtype)
    if attr == "T":
        return ops.transpose(x)
    method = _NODE_METHODS.get(attr)
    if method is None:
        tracer.fail(node, f"array attribute or method '.{attr}'")
    return _BoundNodeMethod(method, x)


def trace(fn, args, name: str | None = None) -> Graph:
    """Trace ``fn`` for these arguments (values give shapes, dtypes and static values)."""
    return Tracer().trace(fn, list(args), name)
