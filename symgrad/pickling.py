"""Pickling a :class:`symgrad.api.Function` by reference: its Python function by module and
qualified name (symgrad reads its source where it runs, so a copy by value would arrive
without it), looked up again where it is unpickled.
"""
from __future__ import annotations

import importlib
import pickle


def _find(module, qualname):
    """The object importable as ``module.qualname``, or None."""
    try:
        return _lookup(module, qualname)
    except (ImportError, AttributeError, TypeError, ValueError):
        return None


def _importable_name(fn) -> tuple[str, str]:
    """Module and qualified name under which ``fn`` (or the Function decorating it) can be
    imported; a clear PicklingError where it cannot (lambdas, nested functions)."""
    module, qualname = getattr(fn, "__module__", None), fn.__qualname__
    found = _find(module, qualname)
    from .api import Function
    if found is not fn and not (isinstance(found, Function) and found.fn is fn):
        raise pickle.PicklingError(
            f"cannot pickle the symgrad.Function of {module}.{qualname}: its Python function is "
            "pickled by reference (symgrad reads its source where it runs), so it must be "
            "defined at the top level of an importable module, not as a lambda, a nested "
            "function or by exec")
    return module, qualname


def _lookup(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _unpickled(module: str, qualname: str):
    found = _find(module, qualname)
    if found is None:
        raise pickle.UnpicklingError(
            f"a pickled symgrad.Function refers to {module}.{qualname}, which this process cannot "
            "import (functions are pickled by reference: define it in a module the workers can "
            "import, not in __main__ of a notebook or a script they do not run)")
    return found


def _rebuild(module: str, qualname: str, wrt, target: str) -> Function:
    from .api import Function
    found = _unpickled(module, qualname)
    return Function(found.fn if isinstance(found, Function) else found, wrt=wrt, target=target)
