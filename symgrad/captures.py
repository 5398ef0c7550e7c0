"""What a trace read from outside the function, and whether it still holds.

A capture is ``(holder, name, value)``: ``holder.get(name, MISSING)`` is what the name holds
now. The holder is a globals dict, a module's or an object's ``__dict__`` (``self.scale`` of a
method; value ``MISSING`` for a builtin: a global not defined), or a :class:`CellView` of a
closure cell. ``Function`` checks its
captures on every call (``captures_current``, inlined in its hot path).
"""
from __future__ import annotations

import numpy as np

from .scope import MISSING

class CellView:
    """A closure cell read like a dict (so checking a capture is one ``get`` for every kind)."""
    __slots__ = ("cell",)

    def __init__(self, cell):
        self.cell = cell

    def get(self, name, default):
        try:
            return self.cell.cell_contents
        except ValueError:   # emptied (del)
            return default


def capture_holder(holder):
    """The object a capture reads through: dicts as they are, cells wrapped."""
    return holder if isinstance(holder, dict) else CellView(holder)


_IMMUTABLE_SCALARS = (bool, int, float, complex, str, bytes)


def _same_constant(a, b) -> bool:
    """Two equal immutable scalars (a global recomputed to the same number); repr tells -0.0
    from 0.0 and makes nan equal to itself."""
    return type(a) is type(b) and (type(a) in _IMMUTABLE_SCALARS or isinstance(a, np.generic)) \
        and repr(a) == repr(b)


def captures_current(captures: list) -> bool:
    """Whether every global, cell and module attribute a trace read still holds the object it
    read: identity comparisons, on every call (the hot path)."""
    for holder, name, value in captures:
        if holder.get(name, MISSING) is not value:
            return _only_equal_scalars_changed(captures)
    return True


def _only_equal_scalars_changed(captures: list) -> bool:
    """The slow path: a name holds another object. An equal immutable scalar still counts as
    current (and is remembered, so the next call takes the fast path again)."""
    for i, (holder, name, value) in enumerate(captures):
        current = holder.get(name, MISSING)
        if current is not value:
            if not _same_constant(current, value):
                return False
            captures[i] = (holder, name, current)
    return True


def captured_arrays(captures: dict, globals_: dict, smallest: int) -> dict:
    """The constant array node of each array of more than ``smallest`` elements the trace read
    from a global, a closure cell or a module attribute -> (its name, a phrase saying where it
    lives), for the generated source (which binds large constants by name)."""
    from .op_base import array_const   # the op table sits above this module
    out = {}
    for holder, name, value in captures.values():
        if not isinstance(value, np.ndarray) or value.ndim == 0 or value.size <= smallest:
            continue
        try:
            node = array_const(value)
        except TypeError:   # a dtype the IR has no constants of
            continue
        if isinstance(holder, dict):
            where = f"global '{name}'" if holder is globals_ else \
                f"'{holder['__name__']}.{name}'" if "__name__" in holder else \
                f"attribute '{name}' of an object"   # an instance's __dict__
        else:
            where = f"closure variable '{name}'"
        out.setdefault(node, (name, where))
    return out
