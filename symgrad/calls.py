"""Calls of the tracer (a mixin of :class:`symgrad.frontend.Tracer`, beside
:class:`symgrad.expressions.Expressions`): dispatch on the callee, a known math function
(``np.exp``, ``math.exp``, ``sg.exp``), a Python function (inlined: its source is read and
interpreted), a function defined while tracing, a symgrad ``Function`` (inlined, or its derived
graph spliced in), a method of a traced array, or a pure static computation; and where a
call's result may live (for the aliasing checks). Everything else is reported with its
location.
"""
from __future__ import annotations

import ast
import builtins
import functools
import numbers
import types

import numpy as np

from . import guards as guard_table
from . import ops
from .aliases import (NO_BUFFERS, ZIPPED_ITEMS, Buffer, foreign_buffers, fresh_buffers,
                      holds_array, holds_data, maybe_scalar_reasons, row_buffers,
                      shared_with_arguments, zero_d_buffers)
from .array_writes import is_ufunc_at
from .loop_plan import out_keyword
from .array_methods import (_NODE_METHODS, _VIEW_FUNCTIONS, _VIEW_METHODS, _BoundNodeMethod,
                            python_scalar)
from .expressions import (_PURE_MODULES, _STRUCTURAL_BUILTINS, LIBRARY_PACKAGES, MAX_CALL_DEPTH,
                          OPERATOR_FUNCTIONS, RANDOM_DRAW, RANDOM_HINT, draws_random_numbers)
from .checkpoint import Checkpoint, checkpoint, trace_call as trace_checkpoint
from .custom_gradient import CustomGradient, apply_rule
from .errors import UnsupportedSyntaxError
from .ir import Node, make, substitute
from .numpy_api import CALLABLES, DUALS, bind_scipy, check_call, numpy_name
from .padded_slices import call as padded_call, holds_padded
from .runtime import flat_plan, flat_values, replace_leaves, unflatten_tree, zero_standin
from .scope import MISSING, SAFE_BUILTINS, Frame, InterpFunction, closure_of, is_data, walk_nodes
from .source import function_source

# NumPy's kind of a 0-d result (checked against NumPy: type(np.where(True, 1.0, 2.0)) is
# ndarray, type(np.sin(1.0)) is np.float64). Functions that always return a 0-d ndarray:
_ZERO_D_ARRAY_FUNCTIONS = {"where", "select", "array", "asarray", "asanyarray", "copy", "zeros",
                           "ones", "full", "empty", "zeros_like", "ones_like", "full_like",
                           "empty_like", "expand_dims", "roll", "tile", "pad"}
_ZERO_D_VIEW_FUNCTIONS = {"asarray", "asanyarray", "expand_dims"}     # ... of their 0-d array operand
# ... a view of a 0-d ndarray operand, but a scalar for a NumPy scalar operand and a 0-d
# ndarray for a Python number (np.reshape(1.0, ()) vs np.reshape(np.float64(1), ())):
_ZERO_D_KIND_FOLLOWS_OPERAND = {"reshape", "transpose", "squeeze", "moveaxis", "real", "imag"}
# methods: a 0-d ndarray receiver gives a 0-d ndarray (a view or a copy), a scalar a scalar
_ZERO_D_METHODS = {_NODE_METHODS["reshape"]: "view", _NODE_METHODS["transpose"]: "view",
                   _NODE_METHODS["squeeze"]: "view", _NODE_METHODS["conj"]: "view",
                   _NODE_METHODS["conjugate"]: "view", _NODE_METHODS["copy"]: "copy",
                   _NODE_METHODS["astype"]: "copy"}
_ZERO_D_FUNCTION_NAMES = {DUALS[n]: n for n in _ZERO_D_ARRAY_FUNCTIONS | _ZERO_D_KIND_FOLLOWS_OPERAND}

def _callable_name(fn) -> str:
    """How the user spelled ``fn``: ``np.add.at`` for a method of a ufunc (not
    ``builtins.ufunc.at``), else ``module.qualname``."""
    owner = getattr(fn, "__self__", None)
    if isinstance(owner, np.ufunc):
        return f"np.{owner.__name__}.{fn.__name__}"
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    module = getattr(fn, "__module__", None) or type(fn).__module__
    return f"{module}.{name}"


_UNSAFE_CALLS = {builtins.print: "print() (I/O)", builtins.open: "open() (I/O)",
                 builtins.input: "input() (I/O)", builtins.exec: "exec()", builtins.eval: "eval()"}

# methods of lists and dicts that put values in; and all that change the container
_ADDING_METHODS = {"append", "extend", "insert", "setdefault", "update", "__setitem__"}
_MUTATING_METHODS = _ADDING_METHODS | {"pop", "popitem", "remove", "clear", "sort", "reverse"}


def _writes_out(fn, args, kwargs) -> bool:
    """A call that writes into an output array it is given, with traced data involved:
    ``np.copyto(dst, src)``, ``np.fill_diagonal(a, v)`` or a ufunc with ``out=``."""
    if fn not in (np.copyto, np.fill_diagonal) and not (isinstance(fn, np.ufunc) and (
            kwargs.get("out") is not None or len(args) > fn.nin)):
        return False
    return any(True for _ in walk_nodes(list(args) + list(kwargs.values())))


def _container_method(fn) -> bool:
    """A method of a list or dict object (they move values without looking at them)."""
    return isinstance(fn, types.BuiltinMethodType) and isinstance(getattr(fn, "__self__", None), (list, dict))


# Python builtins that make a Python number of Python numbers (``abs(t - 3)``).
_NUMBER_BUILTINS = (builtins.abs, builtins.min, builtins.max, builtins.pow)


def _weakly_typed(fn, args, value):
    """A call's result typed as NumPy types it where traced values standing for Python
    numbers (a loop index: symgrad.op_base.weak_scope) go in: the builtins above keep them
    Python numbers; NumPy's functions and scalar types make NumPy values of them, also where
    they return one as it is (``np.asarray(t)``: a cast node of the same dtype, strongly typed)."""
    if not isinstance(value, Node) or value.ndim:
        return value
    if any(fn is b for b in _NUMBER_BUILTINS):
        return ops.weak_result(value, *args)
    if ops.weak_kind(value) is not None and any(value is a for a in args) and (
            numpy_name(fn) is not None or isinstance(fn, type) and issubclass(fn, np.generic)):
        return make("cast", (value,), (value.dtype,))
    return value


def _python_call_method(obj):
    """The ``__call__`` function of an instance of a user's class (``self.layer(x)``), or
    None (a function, a class, or an object of a library, whose source symgrad does not read)."""
    if isinstance(obj, type):
        return None
    method = getattr(type(obj), "__call__", None)
    module = (getattr(type(obj), "__module__", None) or "").split(".")[0]
    return method if isinstance(method, types.FunctionType) and module not in LIBRARY_PACKAGES else None


def _may_inline(fn) -> bool:
    """Whether a call may run the callee's own source (its parameters then need to know
    where the arguments live)."""
    from .api import Function
    return isinstance(fn, (InterpFunction, types.FunctionType, types.MethodType, Function)) or \
        _python_call_method(fn) is not None


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


class Calls:
    """Evaluation of calls; the tracer supplies ``eval``, ``fail``, ``origin_of``,
    ``run_body``, ``captured`` and the rest of :class:`symgrad.expressions.Expressions`."""

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
        if is_ufunc_at(fn) and any(True for _ in walk_nodes(list(args) + list(kwargs.values()))):
            return self.ufunc_at(fn, node, args, kwargs, frame)   # np.add.at(y, idx, v): writes y
        if _writes_out(fn, args, kwargs):   # np.copyto(y, v), np.add(a, b, out=y)
            return self.call_writing_out(fn, node, args, kwargs, frame)
        if _container_method(fn) and fn.__name__ in _MUTATING_METHODS and isinstance(node.func, ast.Attribute):
            self.check_traced_state(node.func.value, frame, node, f"call to .{fn.__name__}() on")
        # an inlined callee's parameters live where these arguments live
        self.pending_arguments = self.argument_buffers(node, frame) if _may_inline(fn) else None
        self.call_buffers = None
        try:
            value = self.call(fn, args, kwargs, node)
        finally:
            self.pending_arguments = None
        self.origins[node] = self.call_origin(fn, node, args, value, frame)
        self.note_zipped_items(fn, node, args, frame)
        return _weakly_typed(fn, args, value)

    def call_writing_out(self, fn, node, args, kwargs, frame: Frame):
        """``np.copyto(dst, src, casting=, where=)`` and a ufunc's ``out=``: the result
        computed as a new array, then written into the output (``symgrad.array_writes``);
        the call's value is the output array, living where it lives."""
        if fn is np.copyto:
            if len(node.args) < 2 or len(args) > 4 or set(kwargs) - {"casting", "where"}:
                self.fail(node, "np.copyto with these arguments", "np.copyto(dst, src, casting=, where=)")
            casting = kwargs.get("casting", args[2] if len(args) > 2 else "same_kind")
            where = kwargs.get("where", args[3] if len(args) > 3 else True)
            target, value = node.args[0], args[1]
            if where is not True:
                value = ops.where(where, value, args[0])
            self.write_out(target, value, frame, node, "np.copyto", casting)
            self.origins[node] = NO_BUFFERS   # np.copyto returns None
            return None
        if fn is np.fill_diagonal:      # a.flat[::n + 1] = val (symgrad.array_writes)
            return self.fill_diagonal(node, args, kwargs, frame)
        name = f"np.{fn.__name__}"
        if len(args) > fn.nin:
            self.fail(node, f"{name} with its output given by position",
                      f"pass it by keyword: {name}(..., out=y) (symgrad reads it from the spelling)")
        out_expr = out_keyword(node)
        if isinstance(out_expr, (ast.Tuple, ast.List)):
            self.fail(node, f"{name}(..., out=) with several outputs")
        rest = {k: v for k, v in kwargs.items() if k != "out"}
        if rest:
            self.fail(node, f"{name}(..., out=...) with {', '.join(f'{k}=' for k in rest)}",
                      "compute the result, then write it: y[...] = np.where(mask, result, y)")
        value = self.call(fn, args, {}, node)
        written = self.write_out(out_expr, value, frame, node, f"{name}(..., out=)")
        self.origins[node] = (out_expr,)   # NumPy returns the output array itself
        return written

    def items_origin(self, expr, iterable, frame: Frame):
        """Where the items of ``iterable`` (the value ``expr`` just evaluated to) live, as an
        origin tree: the rows of an array are views of it (the items of a 1-d array are NumPy
        scalars); the items of enumerate/zip pair up their arguments' items."""
        recorded = self.item_origins.get(expr)
        if recorded is not None:
            return recorded
        return row_buffers(iterable, self.origin_of(expr, frame))

    def note_zipped_items(self, fn, node, args, frame: Frame):
        """Record where the items of ``enumerate(...)`` / ``zip(...)`` live, item by item
        (symgrad.aliases.ZIPPED_ITEMS): the rows of an array they pair up are views of it."""
        try:
            zipped = ZIPPED_ITEMS.get(fn)
        except TypeError:   # an unhashable callable
            return
        if zipped is None:
            return
        if any(isinstance(a, ast.Starred) for a in node.args):   # which is which: unknown
            self.item_origins[node] = self.origin_of(ast.Tuple(elts=list(node.args)), frame)
            return
        self.item_origins[node] = zipped([self.items_origin(a, v, frame)
                                          for a, v in zip(node.args, args)])

    def call_origin(self, fn, node, args, value, frame: Frame):
        """Where a call's result may live: an inlined function's return value where it
        lives; a view (reshape, .T, np.asarray, ...) where its base lives; a list method's or
        a structural builtin's result where the container or arguments live; else fresh."""
        receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
        owner = getattr(fn, "__self__", None)
        if _container_method(fn):
            if fn.__name__ in _ADDING_METHODS:
                added = frozenset().union(*(self.origin_of(a, frame) or fresh_buffers(v)
                                            for a, v in zip(node.args, args)))
                added |= self.origin_of(ast.Tuple(elts=[k.value for k in node.keywords]), frame)
                self.note_contents(owner, added, frame)
            return (receiver,)
        if self.call_buffers is not None and holds_data(value):
            return self.call_buffers
        if not holds_array(value):
            return self.zero_d_call_origin(fn, node, value, frame) if holds_data(value) else NO_BUFFERS
        if isinstance(fn, _BoundNodeMethod):
            return (receiver,) if fn.fn in _VIEW_METHODS else NO_BUFFERS
        try:
            handler = CALLABLES.get(fn)
        except TypeError:
            handler = None
        if handler in _VIEW_FUNCTIONS:
            return tuple(node.args[:1]) or tuple(k.value for k in node.keywords)
        if fn in _STRUCTURAL_BUILTINS:
            return tuple(node.args) + tuple(k.value for k in node.keywords)
        # an eager NumPy call on constants may return a view of one of them
        operands = ([owner] if receiver is not None and isinstance(owner, np.ndarray) else []) + list(args)
        exprs = ([receiver] if receiver is not None and isinstance(owner, np.ndarray) else []) + list(node.args)
        return tuple(exprs[i] for i in shared_with_arguments(value, operands) if i < len(exprs))

    def zero_d_call_origin(self, fn, node, value, frame: Frame):
        """Where a call's traced 0-d result lives: NumPy's kind for it (symgrad.aliases). A
        0-d ndarray from the functions that always make one, a view or copy of a 0-d ndarray
        from the methods and functions whose kind follows their operand; else a scalar."""
        receiver = node.func.value if isinstance(node.func, ast.Attribute) else None
        if fn in _STRUCTURAL_BUILTINS:       # tuple(...), list(...): where their items live
            return tuple(node.args) + tuple(k.value for k in node.keywords)
        if isinstance(fn, _BoundNodeMethod):
            kind = _ZERO_D_METHODS.get(fn.fn)
            operand = self.origin_of(receiver, frame) if kind else NO_BUFFERS
            if not operand:                  # a scalar's methods return scalars
                return NO_BUFFERS
            return (receiver,) if kind == "view" else zero_d_buffers(
                "; ".join(maybe_scalar_reasons(operand)) or None)
        try:
            handler = CALLABLES.get(fn)
        except TypeError:
            handler = None
        name = _ZERO_D_FUNCTION_NAMES.get(handler) if handler is not None else None
        if name in _ZERO_D_ARRAY_FUNCTIONS:
            view = tuple(node.args[:1]) if name in _ZERO_D_VIEW_FUNCTIONS else ()
            return view + (zero_d_buffers(),)
        if name in _ZERO_D_KIND_FOLLOWS_OPERAND:
            operand = self.origin_of(node.args[0], frame) if node.args else NO_BUFFERS
            if operand:
                return (node.args[0],)
            return zero_d_buffers(f"np.{name} of a scalar is a 0-d array for a Python number "
                                  "and a NumPy scalar for a NumPy scalar")
        return NO_BUFFERS

    def call(self, fn, args, kwargs, node):
        from .api import Function   # the decorated form inlines its Python function
        if isinstance(fn, Function):
            if fn.derived:   # f.grad, value_and_grad, hvp: fn.fn is the *primal*
                return self.call_derived(fn, args, kwargs)
            fn = fn.fn
        if isinstance(fn, Checkpoint):   # one region, recomputed by the backward pass
            return trace_checkpoint(self, fn, args, kwargs, node)
        if fn is checkpoint:             # sg.checkpoint(cell) inside the traced function
            return checkpoint(*args, **kwargs)
        if isinstance(fn, InterpFunction):
            return self.call_interpreted(fn, args, kwargs, node)
        if isinstance(fn, CustomGradient):   # its rule, traced, defines the derivative
            result = self.call_python(fn.fn, args, kwargs, node)
            return apply_rule(self, fn.__name__, result, list(args) + list(kwargs.values()), node)
        bind_scipy()   # scipy.special.gammaln, ... once the user's code has imported it
        try:
            handler = CALLABLES.get(fn)
        except TypeError:
            handler = None
        if handler is not None and holds_padded([args, kwargs]):   # x[:i] in a loop region
            return self.traced(node, padded_call, handler.__name__, args, kwargs)
        if handler is not None:
            try:
                check_call(handler, args, kwargs)
                with guard_table.reporting() as errors:   # e.g. inv of a singular matrix
                    value = handler(*args, **kwargs)
                self.add_error_guards(errors, node)
                return value
            except UnsupportedSyntaxError as e:
                if e.lineno:
                    raise
                self.fail(node, e.construct, e.hint)   # a builder's refusal, at this line
        library_name = numpy_name(fn)
        if library_name is not None and (holds_padded([args, kwargs])
                                         or any(True for _ in walk_nodes([args, kwargs]))):
            # recognised by what it is, never inlined (its source is NumPy's internals)
            self.fail(node, f"{library_name} is not supported",
                      "the supported NumPy functions are listed in README.md (symgrad.numpy_api.supported())")
        if fn in _UNSAFE_CALLS:
            self.fail(node, _UNSAFE_CALLS[fn])
        if draws_random_numbers(fn):
            self.fail(node, f"{_callable_name(fn)}() ({RANDOM_DRAW})", RANDOM_HINT)
        if fn is builtins.float and len(args) == 1 and not kwargs and is_data(args[0]):
            return python_scalar(ops.lift(args[0]), "float")   # a traced Python float
        if fn is builtins.int and len(args) == 1 and not kwargs and is_data(args[0]) and \
                not ops.lift(args[0]).dtype.startswith("float"):
            # int(i) of a traced integer (a loop index): the same number, a traced Python int
            # (where it must be a Python int, a shape or a range bound, that use says so)
            return python_scalar(ops.lift(args[0]), "int")
        if fn in (builtins.int, builtins.bool) and args and is_data(args[0]):
            self.fail(node, f"{fn.__name__}() of a traced value (its value is only known at run "
                      "time, so it cannot be a Python " + ("shape, index or range bound"
                                                          if fn is builtins.int else "condition") + ")",
                      "for integer arithmetic on data use np.floor(x) or x.astype(np.int64); a "
                      "shape or loop bound must come from static values (x.shape, len(x))"
                      if fn is builtins.int else "compare with np.where, or branch with if on the value")
        if isinstance(fn, functools.partial):   # a call with bound arguments
            return self.call(fn.func, list(fn.args) + list(args), {**fn.keywords, **kwargs}, node)
        if fn is functools.partial:             # binding arguments only stores them
            return functools.partial(*args, **kwargs)
        if isinstance(fn, types.FunctionType):
            if _is_pure(fn) and not any(True for _ in walk_nodes(list(args) + list(kwargs.values()))):
                return fn(*args, **kwargs)   # e.g. np.broadcast_shapes on shapes: just run it
            return self.call_python(fn, args, kwargs, node)
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
            return self.call_python(fn.__func__, [fn.__self__] + list(args), kwargs, node)
        if isinstance(fn, _BoundNodeMethod):
            return fn(*args, **kwargs)
        if fn in _STRUCTURAL_BUILTINS or _is_namedtuple_class(fn):   # they move values around
            return fn(*args, **kwargs)                                  # without looking at them
        if fn is builtins.range and any(is_data(a) for a in args):
            self.fail(node, "range() over a traced value (loop bounds must be static)")
        if _container_method(fn):
            return fn(*args, **kwargs)    # list.append, dict.get, ... move values, whatever they are
        if fn is builtins.map and len(args) >= 2 and not kwargs:   # each call traced like f(x)
            return iter([self.call(args[0], list(items), {}, node) for items in zip(*args[1:])])
        if fn in OPERATOR_FUNCTIONS and len(args) == 2 and not kwargs:   # operator.add(a, b)
            return self.binop(OPERATOR_FUNCTIONS[fn](), args[0], args[1], node)
        if fn is functools.reduce and 2 <= len(args) <= 3 and not kwargs:   # each step traced
            items = iter(args[1])
            acc = args[2] if len(args) == 3 else next(items, MISSING)
            if acc is MISSING:
                raise TypeError("reduce() of empty iterable with no initial value")
            return functools.reduce(lambda a, b: self.call(args[0], [a, b], {}, node), items, acc)
        call_method = _python_call_method(fn)
        if call_method is not None:       # a layer object, self.dense(x): its __call__, inlined
            return self.call_python(call_method, [fn] + list(args), kwargs, node)
        traced = any(True for _ in walk_nodes(list(args) + list(kwargs.values())))
        if traced:
            self.fail(node, f"call to {_callable_name(fn)} on traced values",
                      "supported functions are listed in DESIGN.md §2 (sg.*, np.*, math.*)")
        if _is_pure(fn) or fn in SAFE_BUILTINS.values():
            return fn(*args, **kwargs)
        self.fail(node, f"call to {getattr(fn, '__qualname__', repr(fn))}")

    def add_error_guards(self, errors, node):
        """The conditions under which a library call raises (``symgrad.guards.report``), as
        guards of this call's line."""
        if not errors:
            return
        loc = self.frame.source.loc(node)
        for kind, flag in errors:
            self.add_guard(guard_table.ErrorKey(loc.filename, loc.lineno, loc.col, loc.text, kind),
                           flag)

    def call_derived(self, fn, args, kwargs):
        """A derived Function (``f.grad``, ``value_and_grad``, ``hvp``) called while tracing:
        build its graph for these argument types and splice it in, its arguments replaced by
        ours (so an input gradient can feed, say, an adversarial perturbation)."""
        values = fn.bind(list(args), kwargs)
        examples = [replace_leaves(v, _example) for v in values]
        graph, captures = fn.graph_for(examples)
        for holder, name, value in captures:   # what its trace read, ours read too
            self.captured(getattr(holder, "cell", holder), name, value)
        if graph.in_tree is not None:   # pytree arguments: the graph's inputs are their leaves
            values = flat_values(values, flat_plan(graph.in_tree))
        mapping = {arg: ops.lift(v) for arg, v in zip(graph.inputs, values) if arg is not None}
        n_out = len(graph.outputs)
        both = substitute(list(graph.outputs) + list(graph.guards.values()), mapping)
        for key, guard in zip(graph.guards, both[n_out:]):   # its while loops' caps: ours too
            self.add_guard(key, guard)
        return unflatten_tree(graph.out_tree, both[:n_out])

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
        arguments, self.pending_arguments = self.pending_arguments, None
        _bind(tree.args, callee.env, args, kwargs, defaults, kw_defaults, getattr(tree, "name", "<lambda>"))
        self.bind_parameter_buffers(tree.args, callee, arguments, len(args) - len(node.args)
                                    if isinstance(node, ast.Call) else 0)
        self.depth += 1
        if self.depth > MAX_CALL_DEPTH:
            self.fail(node, f"recursion deeper than {MAX_CALL_DEPTH} calls (recursion on a data-dependent "
                      "condition cannot terminate while tracing)")
        caller, self.frame = self.frame, callee
        self.frames.append(callee)
        try:
            value = self.run_body(callee, tree)
        finally:
            self.frames.pop()
            self.depth -= 1
            self.frame = caller
        self.call_buffers = self.return_buffers
        return value

    def bind_parameter_buffers(self, arguments: ast.arguments, callee: Frame, buffers, shift: int):
        """A parameter lives where the caller's argument lives (``shift`` leading arguments,
        a bound method's self, have no expression); a default value is memory the function
        does not own (Python shares it between calls)."""
        if buffers is None:     # not called from a call expression: nothing known
            positional, keyword = None, {}
            every = frozenset((Buffer("an argument of unknown origin"),))
        else:
            positional, keyword = buffers
            every = frozenset().union(*(positional or ()), *keyword.values())
        params = [a.arg for a in arguments.posonlyargs + arguments.args]
        for i, p in enumerate(params + [a.arg for a in arguments.kwonlyargs]):
            if p not in callee.env:
                continue
            if positional is None:                       # f(*xs, **kw): any of them
                origin = every
            elif i < len(params) and shift <= i < shift + len(positional):
                origin = positional[i - shift]
            elif p in keyword:
                origin = keyword[p]
            elif i < shift:
                origin = NO_BUFFERS                      # a bound method's self
            else:
                origin = foreign_buffers(f"the default value of parameter '{p}'", callee.env[p])
            self.bind_buffers(callee, p, callee.env[p], origin)
        for extra in (arguments.vararg, arguments.kwarg):
            if extra is not None:
                self.bind_buffers(callee, extra.arg, callee.env[extra.arg], every)

    def make_closure(self, tree, frame):
        defaults = [self.eval(d, frame) for d in tree.args.defaults]
        kw_defaults = [MISSING if d is None else self.eval(d, frame) for d in tree.args.kw_defaults]
        return InterpFunction(tree, frame, defaults, kw_defaults)


def _example(value):
    """A zero-memory stand-in for a traced value (its shape and dtype), other values as they are."""
    return zero_standin(value.dtype, value.shape) if isinstance(value, Node) else value


def _is_namedtuple_class(fn) -> bool:
    """A namedtuple class: building one only packs values (a pytree node, DESIGN.md §2)."""
    return isinstance(fn, type) and issubclass(fn, tuple) and hasattr(fn, "_fields")
