"""Back ends: one small interface, and a registry keyed by target name.

A back end is an object with

* ``name``: its target name (``Function(target=name)``);
* ``prepare(signature) -> prepared``: once per argument signature, whatever a call needs
  (compiled code, a plan). ``signature`` is the API's record of one signature: its
  ``.graph`` (simplified), ``.guard_flags`` (how many bool guard flags end the graph's
  outputs, ``symgrad.guards``: its ``out_tree`` is then ``(result tree, (flag, ...))``),
  and an identity a back end may key its own caches on (weakly);
* ``run(prepared, values, out) -> result``: one call, the results as the API returns them
  (``symgrad.runtime.finish``), written into ``out=`` when it is given;
* ``signature_values(values)``: the values the tracer sees for these arguments, or
  ``None`` (the class attribute) when they are the arguments themselves (CUDA traces device
  arrays by shape and dtype through host stand-ins);
* ``call_plan(prepared, kinds)``: optionally, a callable ``plan(args, out=None)`` for the hot
  path of positional calls (no keywords but ``out=``) of this signature, whose arguments' key
  kinds (``runtime.ArgKey.kind``: ``"array"``, ``"float"``, ...) are ``kinds``: it runs the
  call (with ``out``, written there and returned as ``run`` would), or returns :data:`MISS`,
  with no effect the caller can see, when the arguments (or ``out``) are not exactly of that
  signature (type, dtype, shape, layout) or anything else would make ``run`` do other than
  the plan does, and the API takes the full path; ``None`` (the default): no plan. For a
  signature with guard flags the plan returns the result without them, and ``MISS`` (with
  nothing written into ``out``) when one is true: the full path then raises the guard's
  error or grows the loop's cap and runs again;
* ``views``: the texts it can show, ``{view name: fn(signature, **options) -> str}``
  (``Function.llvm_ir``, ``.asm``, ``.ptx``).

The registry maps each target to the module that implements it, imported on first use:
``import symgrad`` never imports llvmlite, and the API never names a back end. A text view
is shown by the back end registered for it, whatever the function's own target (a
``target="python"`` function can show the CPU back end's LLVM IR).
"""
from __future__ import annotations

import importlib
import threading

from .emit_python import compile_python
from .runtime import deliver, finish


# What a call plan returns when it declines a call (see ``call_plan`` above).
MISS = object()


class Backend:
    """Defaults for the optional parts of the interface."""
    name = ""
    signature_values = None
    views: dict = {}

    def call_plan(self, prepared, kinds: tuple):
        return None


class PythonProgram:
    """One signature's generated NumPy function and its source."""
    __slots__ = ("graph", "fn", "source")

    def __init__(self, graph):
        self.graph = graph
        self.fn, self.source = compile_python(graph)


class PythonBackend(Backend):
    """``target="python"``: the generated NumPy source, compiled and run (the reference)."""
    name = "python"

    def prepare(self, signature) -> PythonProgram:
        return PythonProgram(signature.graph)

    def run(self, prepared: PythonProgram, values, out):
        return deliver(finish(prepared.fn(*values), prepared.graph, values), out)


PYTHON = PythonBackend()


# target name -> (module, attribute), imported on first use
REGISTRY = {
    "cpu": ("symgrad.codegen.llvm", "BACKEND"),
    "python": ("symgrad.backends", "PYTHON"),
    "cuda": ("symgrad.codegen.cuda", "BACKEND"),
}
TARGETS = tuple(REGISTRY)
# text view -> the target whose back end shows it
VIEWS = {"llvm_ir": "cpu", "asm": "cpu", "ptx": "cuda"}

_loaded: dict = {}
_lock = threading.Lock()


def check_target(target) -> str:
    if target not in REGISTRY:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    return target


def backend(target: str):
    """The back end of ``target``, imported once."""
    found = _loaded.get(target)
    if found is None:
        module, attribute = REGISTRY[check_target(target)]
        with _lock:
            found = _loaded[target] = getattr(importlib.import_module(module), attribute)
    return found


def show(view: str, signature, **options) -> str:
    """The text ``view`` (``"llvm_ir"``, ``"asm"``, ``"ptx"``) of one signature."""
    target = VIEWS.get(view)
    shown = backend(target).views.get(view) if target is not None else None
    if shown is None:
        raise ValueError(f"no back end shows {view!r} (registered views: {sorted(VIEWS)})")
    return shown(signature, **options)
