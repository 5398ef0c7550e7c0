"""Expressions of the tracer (a mixin of :class:`symgrad.frontend.Tracer`; calls are the
other mixin, :class:`symgrad.calls.Calls`).

Operators on static values run in Python; on traced values they build IR. Attributes and
methods of traced arrays, subscripts, and where a value may live (the aliasing checks of
``symgrad.aliases``) are here too; comprehensions and ``:=`` are :mod:`symgrad.comprehensions`.
"""
from __future__ import annotations

import ast
import builtins
import numbers
import operator
import types

import numpy as np

from . import numpy_extra, ops
from .aliases import NO_BUFFERS, Buffer, holds_array, zero_d_buffers
from .ir import INT_DTYPES, Node
from .loop_plan import _int_range, stackable
from .array_methods import node_attribute
from .numpy_api import DUALS
from .scope import MISSING, Frame, is_data

MAX_CALL_DEPTH = 40

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv, ast.Pow: operator.pow, ast.MatMult: operator.matmul,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
           ast.BitAnd: operator.and_, ast.BitOr: operator.or_, ast.BitXor: operator.xor,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift}

# operator.add(a, b) (functools.reduce(operator.mul, xs)) is a + b: the same operator node
OPERATOR_FUNCTIONS = {fn: op for op, fn in _BINOPS.items()}

_NODE_BINOPS = {ast.Add: ops.add, ast.Sub: ops.sub, ast.Mult: ops.mul, ast.Div: ops.div,
                ast.Pow: ops.pow_, ast.MatMult: ops.matmul,
                ast.FloorDiv: numpy_extra.floor_divide, ast.Mod: numpy_extra.remainder}

# & | ^ ~ on booleans are NumPy's logical operators (masks: (x > 0) & (x < 1)); on integers
# they are bitwise, which symgrad does not have.
_BOOL_BINOPS = {ast.BitAnd: ops.logical_and, ast.BitOr: ops.logical_or, ast.BitXor: ops.ne}

_CMPOPS = {ast.Lt: (operator.lt, ops.lt), ast.LtE: (operator.le, ops.le),
           ast.Gt: (operator.gt, ops.gt), ast.GtE: (operator.ge, ops.ge),
           ast.Eq: (operator.eq, ops.eq), ast.NotEq: (operator.ne, ops.ne)}

_STATIC_CMPOPS = {ast.Is: operator.is_, ast.IsNot: operator.is_not,
                  ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}

_STRUCTURAL_BUILTINS = {builtins.len, builtins.zip, builtins.enumerate, builtins.list,
                        builtins.tuple, builtins.reversed, builtins.dict, builtins.isinstance,
                        builtins.sum, builtins.iter, builtins.next}

_PURE_MODULES = ("math", "numpy", "builtins", "operator", "functools", "itertools")
# Packages whose globals and attributes a trace does not record (nobody rebinds np.exp, and
# symgrad's own helpers read only their module's functions).
LIBRARY_PACKAGES = frozenset(_PURE_MODULES + ("symgrad", "scipy"))

# Random number generators: NumPy draws new numbers on every call (and advances the
# generator's state), but a call on static arguments would run once, while tracing, and its
# draw become a constant of the compiled function: the same "random" numbers forever.
_RANDOM_MODULES = ("numpy.random", "random")


def draws_random_numbers(fn) -> bool:
    """A function or method of numpy.random (its module functions, RandomState's and
    Generator's methods) or of Python's random module."""
    owner = getattr(fn, "__self__", None)   # a generator's method: its class's module
    modules = (getattr(fn, "__module__", None) or "", type(owner).__module__ if owner is not None else "")
    return any(m == r or m.startswith(r + ".") for m in modules for r in _RANDOM_MODULES)


RANDOM_DRAW = "a random draw: traced once, it would be the same numbers on every call"
RANDOM_HINT = "draw the random numbers outside the function and pass them as an argument"


_OP_SYMBOLS = {ast.FloorDiv: "//", ast.Mod: "%", ast.BitAnd: "&", ast.BitOr: "|",
               ast.BitXor: "^", ast.LShift: "<<", ast.RShift: ">>"}


class Expressions:
    """Evaluation of expressions and calls; the tracer supplies ``fail``, ``assign``,
    ``merge``, ``record``, ``run_body`` and ``frame``."""

    # -- expressions -------------------------------------------------------------------------
    def eval(self, node, frame: Frame):
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            self.fail(node, describe(node))
        return method(node, frame)

    def expr_Constant(self, node, frame):
        if isinstance(node.value, (bytes, complex)):
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
        # A long sum or product (a + b + c + ...) nests to the left: walk down that spine
        # without recursion, then apply the operators on the way back up (Python's order).
        spine = []
        while isinstance(node, ast.BinOp):
            spine.append(node)
            node = node.left
        value = self.eval(node, frame)
        for op_node in reversed(spine):
            right = self.eval(op_node.right, frame)
            value = self.binop(op_node.op, value, right, op_node)
            self.origins[op_node] = _binop_origin(
                op_node, value, self.origin_of(ast.Tuple(elts=[op_node.left, op_node.right]), frame)
                if isinstance(value, (list, tuple)) else NO_BUFFERS)
        return value

    def binop(self, op, a, b, node):
        if is_data(a) or is_data(b):
            build = _NODE_BINOPS.get(type(op))
            if build is None and type(op) in _BOOL_BINOPS and _boolean(a) and _boolean(b):
                return _BOOL_BINOPS[type(op)](a, b)
            if build is None:
                symbol = _OP_SYMBOLS.get(type(op), type(op).__name__)
                self.fail(node, f"operator '{symbol}' on traced arrays",
                          "on booleans it is the logical operator; bitwise operations on "
                          "numbers are not supported" if type(op) in _BOOL_BINOPS else "")
            if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
                a, b = (DUALS["array"](v) if isinstance(v, (list, tuple)) else v for v in (a, b))
            return ops.weak_result(build(a, b), a, b)
        return _BINOPS[type(op)](a, b)

    def expr_UnaryOp(self, node, frame):
        v = self.eval(node.operand, frame)
        if isinstance(node.op, ast.Not):
            return ops.logical_not(v) if is_data(v) else not v
        if isinstance(node.op, ast.USub):
            return ops.weak_result(ops.neg(v), v) if is_data(v) else -v
        if isinstance(node.op, ast.UAdd):
            return v
        if is_data(v) and _boolean(v):
            return ops.logical_not(v)   # NumPy's ~ of a boolean array (~np.isfinite(y))
        if is_data(v):
            self.fail(node, "operator '~' on traced numbers",
                      "on booleans it is logical not; bitwise not is not supported")
        return ~v

    def expr_BoolOp(self, node, frame):
        values = []
        for expr in node.values:
            v = self.eval(expr, frame)
            if not is_data(v) and not values:
                # Python's short circuit for a static first operand
                if isinstance(node.op, ast.And) and not v:
                    return v
                if isinstance(node.op, ast.Or) and v:
                    return v
                if expr is node.values[-1]:
                    return v
                continue
            values.append(v)
            self.refuse_conditional_walrus(node.values[node.values.index(expr) + 1:],
                                           "an and/or")
        combine = ops.logical_and if isinstance(node.op, ast.And) else ops.logical_or
        out = values[0]
        for v in values[1:]:
            if not is_data(v):
                if isinstance(node.op, ast.And) and not v:
                    return v if len(values) == 1 else ops.logical_and(out, False)
                if isinstance(node.op, ast.Or) and v:
                    return v
                continue
            out = combine(out, v)
        return out if not is_data(out) or out.dtype == "bool" else ops.ne(out, 0)

    def expr_Compare(self, node, frame):
        left = self.eval(node.left, frame)
        result = None
        for op, right_expr in zip(node.ops, node.comparators):
            right = self.eval(right_expr, frame)
            if type(op) in _STATIC_CMPOPS:
                if is_data(left) or is_data(right):
                    if isinstance(op, (ast.Is, ast.IsNot)):
                        value = _STATIC_CMPOPS[type(op)](left, right)
                    else:
                        self.fail(node, "'in' on traced arrays")
                else:
                    value = _STATIC_CMPOPS[type(op)](left, right)
            else:
                static_fn, build = _CMPOPS[type(op)]
                if is_data(left) or is_data(right):
                    value = build(left, right)
                else:
                    value = static_fn(left, right)
            if result is None:
                result = value
            elif is_data(result) or is_data(value):
                result = ops.logical_and(result, value)
            else:
                result = result and value
                if not result:
                    return result
            left = right
        return result

    def expr_IfExp(self, node, frame):
        cond = self.eval(node.test, frame)
        if not is_data(cond):
            taken = node.body if cond else node.orelse
            self.origins[node] = (taken,)
            return self.eval(taken, frame)
        self.origins[node] = (node.body, node.orelse)   # Python's value is one of the two
        self.refuse_conditional_walrus((node.body, node.orelse), "a conditional expression")
        stmt = self.node
        what = "conditional expression"
        if isinstance(stmt, ast.Assign) and stmt.value is node and len(stmt.targets) == 1 \
                and isinstance(stmt.targets[0], ast.Name):
            what += f" assigned to '{stmt.targets[0].id}'"
        value = self.merge(cond, self.eval(node.body, frame), self.eval(node.orelse, frame),
                           node, what, frame)
        if isinstance(value, Node) and value.ndim == 0 and \
                bool(self.origin_of(node.body, frame)) != bool(self.origin_of(node.orelse, frame)):
            self.origins[node] = (node.body, node.orelse, zero_d_buffers(   # symgrad.aliases
                f"the conditional expression at line {frame.source.loc(node).lineno} gives a 0-d "
                "array on one side and a scalar on the other"))
        return value

    def expr_Attribute(self, node, frame):
        value = self.eval(node.value, frame)
        if isinstance(value, Node):
            return node_attribute(value, node.attr, self, node)
        if isinstance(value, types.ModuleType) or isinstance(value, (list, tuple, dict, str,
                                                                        numbers.Number, np.ndarray, np.dtype)):
            try:
                result = getattr(value, node.attr)
            except AttributeError:
                raise AttributeError(f"{type(value).__name__} has no attribute '{node.attr}'") from None
            if isinstance(value, types.ModuleType):
                self.captured(vars(value), node.attr, result)   # config.SCALE may be rebound
            return result
        if hasattr(value, "__dict__") or isinstance(value, type):
            result = getattr(value, node.attr)
            own = getattr(value, "__dict__", None)
            if type(own) is dict and own.get(node.attr, MISSING) is result:
                self.captured(own, node.attr, result)   # model.scale = 3.0 is seen, like a global
            return result
        if draws_random_numbers(getattr(value, node.attr, None)):   # rng.normal of a Generator
            self.fail(node, f"{type(value).__name__}.{node.attr} ({RANDOM_DRAW})", RANDOM_HINT)
        self.fail(node, f"attribute '{node.attr}' of {type(value).__name__}")

    def expr_Subscript(self, node, frame):
        container = self.eval(node.value, frame)
        key = self.eval(node.slice, frame)
        value = self.subscript(container, key, node)
        if isinstance(container, np.ndarray):   # NumPy itself says whether it is a view
            copied = not (isinstance(value, np.ndarray) and np.may_share_memory(value, container))
        else:
            copied = isinstance(container, Node) and (gather_axis(key) is not None
                                                     or numpy_extra.is_advanced(key))
        if copied:
            self.origins[node] = NO_BUFFERS
        elif not (isinstance(container, Node) and isinstance(value, Node) and value.ndim == 0):
            self.origins[node] = (node.value,)  # basic indexing: a view; a list's item
        elif _has_ellipsis(key):                # x[0, ...], a[...]: a 0-d ndarray view
            self.origins[node] = (node.value, zero_d_buffers())
        else:                                   # x[i] of a 1-d array, a[()]: a NumPy scalar
            self.origins[node] = NO_BUFFERS
        return value

    def subscript(self, container, key, node):
        if isinstance(container, np.ndarray) and is_data(key):
            container = ops.lift(container)      # a constant table indexed by traced labels
        if numpy_extra.indexing.has_window(key):
            if isinstance(container, np.ndarray):
                container = ops.lift(container)   # a constant table read by a window
            if not isinstance(container, Node):
                self.fail(node, f"a slice with traced bounds of a {type(container).__name__}")
            return self.traced(node, numpy_extra.indexing.window_read, container, key,
                               getattr(self, "index_ranges", {}))
        if isinstance(container, Node):
            gather = gather_axis(key)
            if gather is not None:
                return ops.take(container, gather[1], gather[0])
            ranges = getattr(self, "index_ranges", {})   # (a loop index's: no wrap, no check)
            advanced = numpy_extra.advanced_index(container, key, ranges)
            if advanced is not None:
                return advanced
            check_static_key(self, key, node)
            return ops.getitem(container, key)
        if is_data(key) or (isinstance(key, tuple) and any(is_data(k) for k in key)):
            if container is np.r_ or container is np.c_:
                return numpy_extra.index_trick(container is np.c_, key)
            for name in ("s_", "index_exp"):
                if container is getattr(np, name, None):
                    self.fail(node, f"np.{name}[...] is not supported",
                              "use np.concatenate / np.stack / np.arange")
            if isinstance(container, (list, tuple)) and isinstance(key, Node) and key.ndim == 0 \
                    and key.dtype in INT_DTYPES:
                if not container:   # no index is in range: Python's error (a side of a data-
                    raise IndexError(f"{type(container).__name__} index out of range")   # dependent if
                if stackable(container, least=1):                        # may never run it)
                    return ops.take(ops.stack(list(container)), key, 0)   # xs[t], parts[parent[i]]
            self.fail(node, f"indexing a {type(container).__name__} with a traced value")
        return container[key]

    def expr_Slice(self, node, frame):
        parts = [None if p is None else self.eval(p, frame) for p in (node.lower, node.upper, node.step)]
        if any(is_data(p) for p in parts):
            window = self.window_of(parts)
            if window is None:
                self.fail(node, "slice bounds that depend on data (bounds must be static)")
            return window
        return slice(*parts)

    def window_of(self, parts):
        """``i:i + k`` with integers made from loop indices (a window, read or written as a
        gather by symgrad.numpy_indexing), or None for other traced bounds."""
        start, stop, step = parts
        step = 1 if step is None else step
        if not isinstance(step, numbers.Integral) or isinstance(step, bool) or \
                start is None or stop is None:
            return None
        ranges = getattr(self, "index_ranges", {})
        if any(_int_range(p, ranges) is None for p in (start, stop) if is_data(p)):
            return None
        return numpy_extra.indexing.Window(start, stop, int(step))

    def expr_Index(self, node, frame):  # Python < 3.9 compatibility
        return self.eval(node.value, frame)

    def expr_Lambda(self, node, frame):
        return self.make_closure(node, frame)

    def expr_Starred(self, node, frame):
        self.fail(node, "starred expression here")

    def expr_JoinedStr(self, node, frame):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                value = self.eval(v.value, frame)
                if is_data(value):
                    self.fail(v, "formatting a traced value into a string")
                parts.append(format(value, self.eval(v.format_spec, frame) if v.format_spec else ""))
        return "".join(parts)

    def expr_FormattedValue(self, node, frame):
        return self.eval(node.value, frame)

    # -- aliasing: where a value may live (symgrad.aliases) ----------------------------------
    def origin_of(self, expr, frame: Frame) -> frozenset:
        """The buffers the value ``expr`` just evaluated to may live in: a name's buffers,
        what a container display, attribute or basic subscript holds, or what evaluating a
        call, a choice or an operator recorded in ``self.origins``. Iterative."""
        found, stack = set(), [expr]
        while stack:
            e = stack.pop()
            if isinstance(e, frozenset):
                found |= e
            elif isinstance(e, ast.Name):
                found |= frame.buffers_of(e.id)
            elif e in self.origins:
                record = self.origins[e]
                if isinstance(record, frozenset):
                    found |= record
                else:
                    stack.extend(r for r in record if r is not None)
            elif not isinstance(e, _FRESH_EXPRESSIONS):
                stack.extend(ast.iter_child_nodes(e))   # displays, attributes: their parts
        return frozenset(found)

    def origin_tree(self, expr, frame: Frame):
        """Like origin_of, but item by item for a tuple or list display (for unpacking)."""
        if isinstance(expr, (ast.Tuple, ast.List)) and not any(isinstance(e, ast.Starred) for e in expr.elts):
            return tuple(self.origin_tree(e, frame) for e in expr.elts)
        return self.origin_of(expr, frame)

    def argument_buffers(self, node, frame: Frame):
        """(positional, keyword) buffers of a call's arguments, for an inlined callee."""
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            every = self.origin_of(ast.Tuple(elts=list(node.args) + [k.value for k in node.keywords]), frame)
            return None, {"*": every}
        return ([self.origin_of(a, frame) for a in node.args],
                {k.arg: self.origin_of(k.value, frame) for k in node.keywords})

# expressions whose value is always newly made (or a scalar): they hold no buffer of their parts
_FRESH_EXPRESSIONS = (ast.Constant, ast.UnaryOp, ast.Compare, ast.JoinedStr, ast.Lambda,
                      ast.Slice, ast.BinOp)

def _binop_origin(node, value, items: frozenset):
    """``a + b`` on arrays makes a new array; on lists it holds both sides' items, and
    ``[a] * n`` holds one array n times (a write to one item shows in all; ``items``: where
    the items of the operands live, which says whether 0-d ones are arrays)."""
    if not isinstance(value, (list, tuple)):
        return NO_BUFFERS
    if isinstance(node.op, ast.Mult) and (holds_array(value) or items):
        return (node.left, node.right, frozenset((Buffer("an item repeated by a list * n"),)))
    return (node.left, node.right)


def _has_ellipsis(key) -> bool:
    return key is Ellipsis or (isinstance(key, tuple) and any(k is Ellipsis for k in key))


def _is_index_array(k) -> bool:
    if isinstance(k, Node):
        return k.dtype != "bool" and k.ndim > 0 and not k.dtype.startswith("float")
    if isinstance(k, list):
        k = np.asarray(k)
    return isinstance(k, np.ndarray) and k.dtype.kind in "iu"


def _boolean(v) -> bool:
    """A boolean operand: a bool node, a Python or NumPy bool, a bool array."""
    if isinstance(v, Node):
        return v.dtype == "bool"
    return isinstance(v, (bool, np.bool_)) or (isinstance(v, np.ndarray) and v.dtype == bool)


def gather_axis(key):
    """``(axis, indices)`` when ``key`` is full slices then one integer index array then
    full slices (``x[idx]``, ``x[:, idx]``): a gather along that axis. Else None."""
    items = key if isinstance(key, tuple) else (key,)
    arrays = [i for i, k in enumerate(items) if _is_index_array(k)]
    if len(arrays) != 1:
        return None
    (axis,) = arrays
    if not all(isinstance(k, slice) and k == slice(None) for i, k in enumerate(items) if i != axis):
        return None
    indices = items[axis]
    return axis, (np.asarray(indices) if isinstance(indices, list) else indices)


def check_static_key(tracer, key, node):
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if (isinstance(k, Node) and k.ndim and k.dtype.startswith("float")) or \
                (isinstance(k, np.ndarray) and k.dtype.kind in "fc"):
            raise IndexError("arrays used as indices must be of integer (or boolean) type")
        if isinstance(k, Node) or (isinstance(k, (list, np.ndarray)) and not isinstance(k, Node)):
            tracer.fail(node, "advanced indexing with arrays of indices other than a single "
                        "integer index array along one axis (x[idx], x[:, idx])")


def describe(node) -> str:
    names = {"While": "while loop", "Try": "try statement", "TryStar": "try statement",
             "With": "with statement", "AsyncWith": "async with", "AsyncFor": "async for",
             "Global": "global statement", "Nonlocal": "nonlocal statement",
             "ClassDef": "class definition", "Delete": "del statement", "Yield": "yield (generator)",
             "YieldFrom": "yield from (generator)", "Await": "await",
             "ImportFrom": "from ... import inside the function", "AsyncFunctionDef": "async def",
             "Match": "match statement", "Set": "set literal", "SetComp": "set comprehension"}
    return names.get(type(node).__name__, type(node).__name__)
