"""The public API: ``differentiate``, ``grad``, ``value_and_grad``, ``jvp`` and ``Function``.

A :class:`Function` is a program family: for each argument signature (dtypes, shapes, static
values) it builds a graph (trace, or the derivative of its parent's graph), simplifies it and
compiles it for its target. Graphs are cached per signature, the most recently used
``SYMGRAD_TRACE_CACHE_SIZE`` (64) of them; ``f.grad`` is built once.

A trace records the globals, closure cells and module attributes it read (the objects, by
identity; ``symgrad.captures``); a call whose signature is cached first checks that each still
holds the same object and traces again if one was rebound, so a changed ``SCALE`` is seen on
the next call whatever the shape. Derived functions (``f.grad``, ...) share their parent's
record. Calls go to the target's back end through ``symgrad.backends``.
A signature with ``while`` loops on data checks their guards after each call and runs again
with a larger cap where one fired (``symgrad.guards``).

A Function pickles by reference to its Python function (module and qualified name) and is
rebuilt, with empty caches, where it is unpickled (multiprocessing, concurrent.futures, Dask).
"""
from __future__ import annotations

import copy
import functools
import inspect
import numbers
import os
import threading
import weakref
from collections import OrderedDict

import numpy as np

from . import backends, gc_pause, source as sources
from .autodiff import grad_graph, hvp_graph
from .binding import BINDERS
from .backends import MISS, check_target
from .captures import capture_holder, captures_current
from .source_contract import checked_source
from .frontend import trace
from . import settings
from .forward import build_jvp, tangent_params, trial_arguments
from .checkpoint import lowerable as inline_checkpoints
from .custom_gradient import lowerable
from .ir import Graph
from .pickling import _find, _importable_name, _rebuild, _unpickled
from . import guards
from .runtime import arg_key, deliver, flat_plan, flat_values, standin
from .simplify import simplify

DEFAULT_TRACE_CACHE_SIZE = settings.VARIABLES["SYMGRAD_TRACE_CACHE_SIZE"].default


def trace_cache_size() -> int:
    """Signatures each Function keeps (``SYMGRAD_TRACE_CACHE_SIZE``, a positive integer)."""
    return settings.read("SYMGRAD_TRACE_CACHE_SIZE")


class Compiled:
    """One signature's graph, what each back end prepared for it (``prepared``: target name
    -> the back end's object) and ``captures``: what the trace read from outside the
    function (see ``captures_current``). Back ends see it as the signature they prepare."""
    guard_flags = 0   # one with guards is prepared as its ``guarded``: its plan checks them

    def __init__(self, graph: Graph, captures: list):
        self.derivable = graph               # what derivatives are taken of (custom rules kept)
        # what back ends run and emitters print (checkpoints inlined: their recomputations
        # in backward passes stay regions)
        self.graph = inline_checkpoints(lowerable(graph))
        self.captures = captures
        # while loops on data: back ends run their guards as hidden outputs (symgrad.guards)
        self.guarded = guards.GuardedSignature(self.graph) if self.graph.guards else None
        # None: each argument is one graph input; else what each gives (runtime.flat_plan)
        self.flat_plan = None if graph.in_tree is None else flat_plan(graph.in_tree)
        self.prepared: dict = {}
        self.contract = None   # what its source checks (symgrad.source_contract), found once

    def prepare(self, backend):
        """What ``backend`` needs to run this signature, prepared once (also under threads)."""
        with _prepare_lock:
            prepared = self.prepared.get(backend.name)
            if prepared is None:
                with gc_pause.paused():
                    prepared = self.prepared[backend.name] = backend.prepare(self.guarded or self)
        return prepared


_prepare_lock = threading.Lock()


class Function:
    """A differentiable function: call it, take ``.grad``, inspect ``.source`` and ``.ir``."""
    keeps_signature = True   # whether its parent takes the same argument types (not vmap's)

    def __init__(self, fn=None, *, wrt=0, target="cpu", _parent=None, _kind="trace", name=None):
        self.fn = sources.readable_function(fn) if _parent is None else _parent.fn
        self.target = target
        self._parent = _parent
        self._kind = _kind
        self._signature = inspect.signature(self.fn)
        for p in self._signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.KEYWORD_ONLY):
                raise TypeError(f"{self.fn.__name__}: *args, **kwargs and keyword-only "
                                "parameters are not supported in a differentiated function")
        self.params = tuple(self._signature.parameters) if _parent is None else _parent.params
        self.wrt, self._single = self._normalize_wrt(wrt)
        if _kind == "jvp":   # jvp takes (*args, *tangents): one tangent per wrt argument
            self.params += tangent_params(self.params, self.wrt)
        self._arity = len(self.params) + (1 if _kind == "hvp" else 0)   # hvp takes (x, v, *rest)
        self._cache: OrderedDict = OrderedDict()   # signature -> Compiled, least recent first
        self._cache_size = trace_cache_size()
        self._lock = threading.Lock()
        _functions.add(self)
        self._last_key = None   # signature of the latest call, for .source/.ir
        self._hot = None   # (plan, captures, plan takes out=) of the latest signature: see __call__
        self.__name__ = name or self.fn.__name__
        self.__doc__ = self.fn.__doc__
        self.__wrapped__ = self.fn

    @property
    def target(self) -> str:
        return self._backend_name

    @target.setter
    def target(self, target: str):
        self._backend_name = check_target(target)
        self._backend = None   # imported on first call (symgrad never imports llvmlite itself)
        self._hot = None

    # -- construction helpers ------------------------------------------------------------------
    def _normalize_wrt(self, wrt):
        single = not isinstance(wrt, (tuple, list))
        items = [wrt] if single else list(wrt)
        out = []
        for w in items:
            if isinstance(w, str):
                if w not in self.params:
                    raise ValueError(f"wrt={w!r} is not a parameter of {self.fn.__name__}{self._signature}")
                out.append(self.params.index(w))
            elif isinstance(w, numbers.Integral) and not isinstance(w, bool):
                if not -len(self.params) <= w < len(self.params):
                    raise ValueError(f"wrt={w} is out of range for {len(self.params)} parameters")
                out.append(int(w) % len(self.params))
            else:
                raise TypeError(f"wrt must be a parameter index or name, or a tuple of them; got {w!r}")
        return tuple(out), single

    def _derived(self, kind: str, wrt=None) -> "Function":
        wrt = (self.wrt[0] if self._single else self.wrt) if wrt is None else wrt
        return Function(wrt=wrt, target=self.target, _parent=self, _kind=kind,
                        name=f"{kind}_{self.__name__}")

    @functools.cached_property
    def grad(self) -> "Function":
        """The gradient (of the sum of all outputs) with respect to ``wrt``."""
        return self._derived("grad")

    @functools.cached_property
    def value_and_grad(self) -> "Function":
        return self._derived("value_and_grad")

    # -- building --------------------------------------------------------------------------------
    def bind(self, args, kwargs) -> list:
        """The positional values of a call (defaults applied), or a clear TypeError."""
        if self._kind in BINDERS:   # hvp(f)(x, v, *rest), jvp(f)(*args, *tangents)
            return BINDERS[self._kind](self, args, kwargs)
        if not kwargs and len(args) == len(self.params):
            return list(args)   # the common case, without inspect's (slow) binding
        if len(self.params) != len(self._signature.parameters):   # a jvp's: no keywords
            raise TypeError(f"{self.__name__}() takes the {len(self.params)} positional "
                            f"arguments ({', '.join(self.params)})")
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__name__}(): {e}") from None
        bound.apply_defaults()
        return [bound.arguments[p] for p in self.params]

    def _build(self, values) -> tuple[Graph, list]:
        """This signature's graph, and the captures it depends on (a derived function's are
        its parent's: the same list)."""
        if self._kind == "trace":
            captures: dict = {}
            graph = trace(self.fn, values, self.__name__, captures)
            return graph, [(capture_holder(h), name, v) for h, name, v in captures.values()]
        if self._kind == "hvp":
            return self._build_hvp(values)
        if self._kind == "jvp":
            return build_jvp(self, values)
        parent = self._parent._compiled(values)
        return grad_graph(parent.derivable, self.wrt, self._single, self._kind == "value_and_grad"), \
            parent.captures

    def _build_hvp(self, values) -> tuple[Graph, list]:
        """Values are ``(x, v, *rest)``; the parent is the gradient with respect to x."""
        i = self.wrt[0]
        call_values = list(values[2:])
        call_values.insert(i, values[0])
        parent = self._parent._compiled(call_values)
        if parent.derivable.in_tree is None or not isinstance(values[0], (tuple, list, dict)):
            (b_x,) = parent.derivable.outputs
            if np.shape(values[1]) != b_x.shape:
                raise ValueError(f"hvp: v has shape {np.shape(values[1])}, x has shape {b_x.shape}")
        elif arg_key(values[1]).value[0] != arg_key(values[0]).value[0]:
            raise ValueError("hvp: v must have the structure of x (the same containers and keys)")
        return hvp_graph(parent.derivable, i, f"hvp_{self.fn.__name__}"), parent.captures

    # -- being called while another function is traced (symgrad.expressions) --------------------
    @property
    def derived(self) -> bool:
        """Whether this is a transform of another Function (``grad``, ``value_and_grad``,
        ``hvp``): ``fn`` is then the primal, not what a call computes, so a trace cannot
        inline ``fn`` and splices in :meth:`graph_for` instead."""
        return self._kind != "trace"

    def graph_for(self, values) -> tuple[Graph, list]:
        """The simplified graph of these values' signature and the captures ``(holder, name,
        value)`` its trace read (cached like a call's)."""
        entry = self._compiled(values)
        return entry.derivable, entry.captures

    def _graph(self, values) -> Graph:
        return self._compiled(values).graph

    def _compiled(self, values, key=None) -> Compiled:
        """The cached entry for these values' signature, traced (again) when missing or when
        a global it read was rebound; the least recently used beyond the bound are dropped."""
        if key is None:
            key = tuple([arg_key(v) for v in values])
        self._last_key = key
        with self._lock:
            entry = self._cache.get(key)
            if entry is None or not captures_current(entry.captures):
                with gc_pause.paused():
                    graph, captures = self._build(values)
                    entry = Compiled(simplify(graph), captures)
                self._cache[key] = entry
                while len(self._cache) > self._cache_size:
                    self._cache.popitem(last=False)
            self._cache.move_to_end(key)
        return entry

    # -- calling ---------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        """Evaluate on the function's target. ``out=`` (an array, or a tuple matching the
        outputs) receives the results in place, unless the function has a parameter ``out``."""
        hot = self._hot   # the plan checks what the key encodes: MISS unless it is its signature
        if hot is not None and (not hot[1] or captures_current(hot[1])):
            # positional calls, and calls with out= alone where the plan takes out= too
            result = hot[0](args) if not kwargs else hot[0](args, kwargs["out"]) if (
                hot[2] and len(kwargs) == 1 and kwargs.get("out") is not None) else MISS
            if result is not MISS:
                return result
        out = None
        if kwargs:
            if "out" in kwargs and "out" not in self.params:
                out = kwargs.pop("out")
            values = self.bind(args, kwargs)
        elif len(args) == self._arity:
            values = args        # the hot path: positional arguments, nothing to bind
        else:
            values = self.bind(args, kwargs)
        backend = self._backend or self._load_backend()
        if backend.signature_values is not None:   # e.g. device arrays traced by shape/dtype
            entry = self._compiled(backend.signature_values(list(values)))
        else:
            key = tuple([arg_key(v) for v in values])
            entry = self._compiled(values, key)
        if entry.guarded is not None:   # while loops on data: checked, maybe run again
            return self._call_guarded(entry, backend, values, out,
                                      key if backend.signature_values is None else None)
        prepared = entry.prepared.get(self._backend_name)
        if prepared is None:
            prepared = entry.prepare(backend)
        if entry.flat_plan is not None:   # pytree arguments: back ends see their leaves
            values = flat_values(values, entry.flat_plan)
        elif backend.signature_values is None:   # the next call's hot path
            plan = backend.call_plan(prepared, tuple([k.kind for k in key]))
            self._hot = None if plan is None else (plan, entry.captures, "out" not in self.params)
        return backend.run(prepared, values, out)

    def _call_guarded(self, entry: Compiled, backend, values, out, key):
        """A call of a signature with while loops on data: run it; while a guard says a loop
        ran out of its cap of trips, grow that cap (``symgrad.guards.grow``: every entry
        that read it traces again) and run again. ``out=`` is written once, when right."""
        entry, prepared, result = guards.run_guarded(entry, backend, values, lambda: self._compiled(
            values if backend.signature_values is None else backend.signature_values(list(values))))
        plan = None if key is None or entry.flat_plan is not None else \
            backend.call_plan(prepared, tuple([k.kind for k in key]))
        self._hot = None if plan is None else (plan, entry.captures, "out" not in self.params)
        return deliver(result, out)

    def _load_backend(self):
        self._backend = backends.backend(self._backend_name)
        return self._backend

    # -- inspection ------------------------------------------------------------------------------
    def _example_values(self, args, kwargs):
        """Arguments to show code for: the given ones, else stand-ins for the latest call of this
        function or of one it derives from (no reference to the caller's arrays is kept)."""
        if args or kwargs:
            return self.bind(args, kwargs)
        f = self
        while f is not None:
            if f._last_key is not None:
                return [standin(k) for k in f._last_key]
            f = f._parent if f.keeps_signature else None   # vmap's parent: other shapes
        return None

    def _inspect_entry(self, *args, **kwargs) -> Compiled:
        values = self._example_values(args, kwargs)
        if values is not None:
            return self._compiled(values)
        errors = []
        for trial in (np.linspace(0.1, 0.3, 3), 0.5):
            values = trial_arguments(self, [p.default if p.default is not p.empty else trial
                                            for p in self._signature.parameters.values()])
            try:
                return self._compiled(values)
            except Exception as e:  # noqa: BLE001 - report every attempt below
                errors.append(f"{type(e).__name__}: {e}")
        raise TypeError(f"{self.__name__}: cannot guess argument types to show its code; call it "
                        "once or use .source_for(*args). Tried 1-d float64 arrays and floats:\n  "
                        + "\n  ".join(errors))

    @property
    def source(self) -> str:
        """Generated Python/NumPy source for the last-used argument types (or, before any call,
        1-d float64 arrays, falling back to floats); it says which and checks them."""
        return checked_source(self, self._inspect_entry())

    def source_for(self, *args, **kwargs) -> str:
        return checked_source(self, self._inspect_entry(*args, **kwargs))

    def _run_signature(self, *args, **kwargs):
        """What the back ends compile for these argument types (with guards: symgrad.guards)."""
        entry = self._inspect_entry(*args, **kwargs)
        return entry.guarded or entry

    @property
    def ir(self) -> str:
        return self._inspect_entry().graph.listing()

    def ir_for(self, *args, **kwargs) -> str:
        return self._inspect_entry(*args, **kwargs).graph.listing()

    def llvm_ir(self, *args, optimized=False, **kwargs) -> str:
        """The CPU kernel's LLVM IR for these argument types, optionally after ``-O3``."""
        return backends.show("llvm_ir", self._run_signature(*args, **kwargs), optimized=optimized)

    def asm(self, *args, **kwargs) -> str:
        """The CPU kernel's machine code (assembly) for these argument types."""
        return backends.show("asm", self._run_signature(*args, **kwargs))

    def ptx(self, *args, arch=None, **kwargs) -> str:
        """PTX for these argument types (``arch``: e.g. ``"sm_80"``; default the GPU's)."""
        return backends.show("ptx", self._run_signature(*args, **kwargs), arch=arch)

    # -- mathematics, notebooks, audits (symgrad.sympy_form, symgrad.notebook, symgrad.audit) --
    def sympy(self, *args, **kwargs):
        """The function as sympy expression(s) for these argument types (a tuple for tuple
        outputs, e.g. a tuple ``wrt``): scalars are symbols named like the parameters, small
        arrays ``Matrix``/``Array`` of element expressions over ``x_0, x_1, ...``."""
        from .sympy_form import to_sympy
        return to_sympy(self._inspect_entry(*args, **kwargs).graph)

    def latex(self, *args, **kwargs) -> str:
        """LaTeX of :meth:`sympy`."""
        from .sympy_form import to_latex
        return to_latex(self._inspect_entry(*args, **kwargs).graph)

    def stopped(self, *args, **kwargs) -> str:
        """Each ``stop_gradient`` site (the user's line) and the derivative terms it removed:
        the cotangent that reached it and the expression whose derivative was cut."""
        from .audit import stopped_report
        return stopped_report(self._inspect_entry(*args, **kwargs).graph)

    def _repr_html_(self) -> str:
        """Jupyter: name, parameters, wrt, target, argument types and highlighted source."""
        from .notebook import to_html
        return to_html(self)

    def _repr_markdown_(self) -> str:
        from .notebook import to_markdown
        return to_markdown(self)

    def hessp(self, *args):
        """Hessian-vector product ``H(x) @ p`` (for scipy's ``hessp=``): ``hessp(x, p, *rest)``."""
        return self._hessp(*args)

    @functools.cached_property
    def _hessp(self) -> "Function":
        # built once: a fresh hvp Function per call would retrace and recompile every call.
        # x is this function's (single) wrt argument.
        if not self._single:
            raise ValueError(f"{self.__name__}.hessp needs a single wrt argument, not {self.wrt}")
        return hvp(self, wrt=self.wrt[0])

    def __get__(self, obj, objtype=None):
        """Decorating a method would make ``self`` an argument: its attributes would be baked
        into the compiled code as constants and go stale silently, so it is refused clearly."""
        if obj is None:
            return self
        raise TypeError(f"{self.__name__} is a symgrad.Function used as a method of "
                        f"{type(obj).__name__}: self cannot be an argument of a differentiated "
                        "function. Decorate a plain function and pass the arrays it needs.")

    def __repr__(self):
        return f"<symgrad.Function {self.__name__} wrt={self._wrt_spec()} target={self.target}>"

    # -- pickling and copying ----------------------------------------------------------------------
    def _wrt_spec(self):
        return self.wrt[0] if self._single else self.wrt

    def _is_cached_derivation(self) -> bool:
        """``f.grad`` / ``f.value_and_grad`` themselves (rebuilt as that attribute)."""
        return self._parent is not None and self._parent.__dict__.get(self._kind) is self

    def __reduce__(self):
        """Pickled by reference, so multiprocessing, concurrent.futures and Dask can ship it:
        the Python function by module and qualified name (symgrad reads its source, so it must
        be importable where it is unpickled; a copy by value, as cloudpickle makes of lambdas,
        would arrive without it), a derived function as its parent and the derivation. Caches
        (graphs, compiled code, locks) are not pickled: the receiving process traces again."""
        if self._is_cached_derivation():
            return getattr, (self._parent, self._kind)
        if self._parent is not None:
            return _derive, (self._parent, self._kind, self._wrt_spec(), self.target)
        module, qualname = _importable_name(self.fn)
        if _find(module, qualname) is self:   # the decorated function: the same object here
            return _unpickled, (module, qualname)
        return _rebuild, (module, qualname, self._wrt_spec(), self.target)

    def __deepcopy__(self, memo):
        """A twin sharing only the Python function (functions are immutable to copy); its
        caches start empty."""
        if self._parent is None:
            twin = Function(self.fn, wrt=self._wrt_spec(), target=self.target)
        else:
            parent = copy.deepcopy(self._parent, memo)
            twin = getattr(parent, self._kind) if self._is_cached_derivation() else \
                _derive(parent, self._kind, self._wrt_spec(), self.target)
        memo[id(self)] = twin
        return twin

    def __copy__(self):
        return self.__deepcopy__({})


_functions: "weakref.WeakSet[Function]" = weakref.WeakSet()   # for their locks after a fork


def _after_fork_in_child():
    """A forked child has only the thread that forked: a Function's lock that another thread
    held while tracing would never be released, and the child's next call would wait forever
    (multiprocessing's "fork" pools). The back ends reset their own locks likewise."""
    global _prepare_lock
    _prepare_lock = threading.Lock()
    for f in list(_functions):
        f._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _derive(parent: Function, kind: str, wrt, target: str) -> Function:
    derived = parent._derived(kind, wrt)
    derived.target = target
    return derived


def differentiate(fn=None, *, wrt=0, target="cpu"):
    """Decorator (``@differentiate`` or ``@differentiate(wrt=..., target=...)``) and plain call."""
    if fn is None:
        return lambda f: differentiate(f, wrt=wrt, target=target)
    return Function(fn.fn if isinstance(fn, Function) else fn, wrt=wrt, target=target)


def _base(fn, wrt, target) -> Function:
    if isinstance(fn, Function):
        return fn
    return Function(fn, wrt=wrt, target=target or "cpu")


def _retarget(f: Function, target) -> Function:
    if target is not None:
        f.target = check_target(target)
    return f


def grad(fn, wrt=0, target=None) -> Function:
    """The gradient of ``fn`` (a Python function or ``Function``) with respect to ``wrt``."""
    return _retarget(_base(fn, wrt, target)._derived("grad", wrt), target)


def value_and_grad(fn, wrt=0, target=None) -> Function:
    """``(value, gradient)`` of ``fn``, computed by one compiled function."""
    return _retarget(_base(fn, wrt, target)._derived("value_and_grad", wrt), target)


def jvp(fn, wrt=0, target=None) -> Function:
    """Forward mode: ``jvp(f)(*args, *tangents) -> (value, tangent)``, one tangent per ``wrt``
    argument (shaped like it); the tangent has the output's structure."""
    return _retarget(_base(fn, wrt, target)._derived("jvp", wrt), target)


def hvp(fn, wrt=0, target=None) -> Function:
    """``hvp(f)(x, v, *rest) = H(x) @ v``, the gradient of ``<grad f(x), v>`` with respect to
    ``x`` (the ``wrt`` argument), for scipy's ``hessp=``."""
    base = _base(fn, wrt, target)
    g = base._derived("grad", wrt)
    if not g._single:
        raise ValueError("hvp needs a single wrt argument")
    return _retarget(g._derived("hvp", wrt), target)
