"""Expressions and calls of the tracer (a mixin of :class:`symgrad.frontend.Tracer`).

Operators on static values run in Python; on traced values they build IR. Calls dispatch on
the callee: a known math function (``np.exp``, ``math.exp``, ``sg.exp``), a Python function
(inlined: its source is read and interpreted), a function defined while tracing, a method of
a traced array, or a pure static computation. Everything else is reported with its location.
"""
from __future__ import annotations

import ast
import builtins
import numbers
import operator
import types

import numpy as np

from . import ops
from .ir import Node, substitute
from .numpy_api import CALLABLES, DUALS
from .scope import MISSING, SAFE_BUILTINS, Frame, InterpFunction, closure_of, is_data, walk_nodes
from .source import function_source

MAX_CALL_DEPTH = 40

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

_STRUCTURAL_BUILTINS = {builtins.len, builtins.zip, builtins.enumerate, builtins.list,
                        builtins.tuple, builtins.reversed, builtins.dict, builtins.isinstance,
                        builtins.sum, builtins.iter, builtins.next}

_UNSAFE_CALLS = {builtins.print: "print() (I/O)", builtins.open: "open() (I/O)",
                 builtins.input: "input() (I/O)", builtins.exec: "exec()", builtins.eval: "eval()"}

_PURE_MODULES = ("math", "numpy", "builtins", "operator", "functools", "itertools")
# Packages whose globals and attributes a trace does not record (nobody rebinds np.exp, and
# symgrad's own helpers read only their module's functions).
LIBRARY_PACKAGES = frozenset(_PURE_MODULES + ("symgrad", "scipy"))

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
        return self.binop(node.op, self.eval(node.left, frame), self.eval(node.right, frame), node)

    def binop(self, op, a, b, node):
        if is_data(a) or is_data(b):
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
            return ops.logical_not(v) if is_data(v) else not v
        if isinstance(node.op, ast.USub):
            return ops.neg(v) if is_data(v) else -v
        if isinstance(node.op, ast.UAdd):
            return v
        if is_data(v):
            self.fail(node, "operator '~' on traced arrays")
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
                result = getattr(value, node.attr)
            except AttributeError:
                raise AttributeError(f"{type(value).__name__} has no attribute '{node.attr}'") from None
            if isinstance(value, types.ModuleType):
                self.captured(vars(value), node.attr, result)   # config.SCALE may be rebound
            return result
        if hasattr(value, "__dict__") or isinstance(value, type):
            return getattr(value, node.attr)
        self.fail(node, f"attribute '{node.attr}' of {type(value).__name__}")

    def expr_Subscript(self, node, frame):
        container = self.eval(node.value, frame)
        key = self.eval(node.slice, frame)
        return self.subscript(container, key, node)

    def subscript(self, container, key, node):
        if isinstance(container, np.ndarray) and is_data(key):
            container = ops.lift(container)      # a constant table indexed by traced labels
        if isinstance(container, Node):
            gather = gather_axis(key)
            if gather is not None:
                return ops.take(container, gather[1], gather[0])
            check_static_key(self, key, node)
            return ops.getitem(container, key)
        if is_data(key) or (isinstance(key, tuple) and any(is_data(k) for k in key)):
            self.fail(node, "indexing a list with a traced value")
        return container[key]

    def expr_Slice(self, node, frame):
        parts = [None if p is None else self.eval(p, frame) for p in (node.lower, node.upper, node.step)]
        if any(is_data(p) for p in parts):
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
        for item in list(iterable):
            inner = Frame(self, frame.source, frame.globals, frame, {}, frame.name)
            dummy = ast.Assign(targets=[gen.target], value=None, lineno=gen.target.lineno,
                               col_offset=gen.target.col_offset)
            self.assign(gen.target, item, inner, dummy)
            ok = True
            for cond in gen.ifs:
                c = self.eval(cond, inner)
                if is_data(c):
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
                if is_data(value):
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
            if fn._kind != "trace":   # f.grad, value_and_grad, hvp: fn.fn is the *primal*
                return self.call_derived(fn, args, kwargs)
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
        if fn in (builtins.float, builtins.int, builtins.bool) and args and is_data(args[0]):
            self.fail(node, f"{fn.__name__}() of a traced value (its value is only known at run time)")
        if isinstance(fn, types.FunctionType):
            if _is_pure(fn) and not any(True for _ in walk_nodes(list(args) + list(kwargs.values()))):
                return fn(*args, **kwargs)   # e.g. np.broadcast_shapes on shapes: just run it
            return self.call_python(fn, args, kwargs, node)
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
            return self.call_python(fn.__func__, [fn.__self__] + list(args), kwargs, node)
        if isinstance(fn, _BoundNodeMethod):
            return fn(*args, **kwargs)
        if fn in _STRUCTURAL_BUILTINS:   # they move values around without looking at them
            return fn(*args, **kwargs)
        if fn is builtins.range and any(is_data(a) for a in args):
            self.fail(node, "range() over a traced value (loop bounds must be static)")
        traced = any(True for _ in walk_nodes(list(args) + list(kwargs.values())))
        if traced:
            if isinstance(fn, types.BuiltinMethodType) and isinstance(getattr(fn, "__self__", None), (list, dict)):
                return fn(*args, **kwargs)    # list.append(node), ...
            name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
            module = getattr(fn, "__module__", None) or type(fn).__module__
            self.fail(node, f"call to {module}.{name} on traced values",
                      "supported functions are listed in DESIGN.md §2 (sg.*, np.*, math.*)")
        if _is_pure(fn) or fn in SAFE_BUILTINS.values():
            return fn(*args, **kwargs)
        self.fail(node, f"call to {getattr(fn, '__qualname__', repr(fn))}")

    def call_derived(self, fn, args, kwargs):
        """A derived Function (``f.grad``, ``value_and_grad``, ``hvp``) called while tracing:
        build its graph for these argument types and splice it in, its arguments replaced by
        ours (so an input gradient can feed, say, an adversarial perturbation)."""
        from .api import zero_standin
        values = fn._bind(list(args), kwargs)
        examples = [zero_standin(v.dtype, v.shape) if isinstance(v, Node) else v for v in values]
        entry = fn._compiled(examples)
        for holder, name, value in entry.captures:   # what its trace read, ours read too
            self.captured(getattr(holder, "cell", holder), name, value)
        graph = entry.graph
        mapping = {arg: ops.lift(v) for arg, v in zip(graph.inputs, values) if arg is not None}
        flat = substitute(graph.outputs, mapping)

        def unflatten(tree):
            return flat[tree] if isinstance(tree, int) else tuple(unflatten(t) for t in tree)
        return unflatten(graph.out_tree)

    def call_python(self, fn, args, kwargs, node):
        source = function_source(fn)
        tree = source.tree
        callee = Frame(self, source, fn.__globals__, None, closure_of(fn), fn.__name__)
        defaults = list(fn.__defaults__ or ())
        kw_defaults = [(fn.__kwdefaults__ or {}).get(a.arg, MISSING) for a in tree.args.kwonlyargs]
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
        kw_defaults = [MISSING if d is None else self.eval(d, frame) for d in tree.args.kw_defaults]
        return InterpFunction(tree, frame, defaults, kw_defaults)


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
        elif d is not MISSING:
            env[a.arg] = d
        else:
            raise TypeError(f"{name}() missing required keyword argument '{a.arg}'")
    if arguments.kwarg is not None:
        env[arguments.kwarg.arg] = kwargs
    elif kwargs:
        raise TypeError(f"{name}() got an unexpected keyword argument '{next(iter(kwargs))}'")


def _is_index_array(k) -> bool:
    if isinstance(k, Node):
        return k.dtype != "bool" and k.ndim > 0 and not k.dtype.startswith("float")
    if isinstance(k, list):
        k = np.asarray(k)
    return isinstance(k, np.ndarray) and k.dtype.kind in "iu"


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
        if isinstance(k, Node) or (isinstance(k, (list, np.ndarray)) and not isinstance(k, Node)):
            tracer.fail(node, "advanced indexing with arrays of indices other than a single "
                        "integer index array along one axis (x[idx], x[:, idx])")


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



def describe(node) -> str:
    names = {"While": "while loop", "Try": "try statement", "TryStar": "try statement",
             "With": "with statement", "AsyncWith": "async with", "AsyncFor": "async for",
             "Global": "global statement", "Nonlocal": "nonlocal statement",
             "ClassDef": "class definition", "Delete": "del statement", "Yield": "yield (generator)",
             "YieldFrom": "yield from (generator)", "Await": "await", "NamedExpr": "walrus operator :=",
             "ImportFrom": "from ... import inside the function", "AsyncFunctionDef": "async def",
             "Match": "match statement", "Set": "set literal", "SetComp": "set comprehension"}
    return names.get(type(node).__name__, type(node).__name__)
