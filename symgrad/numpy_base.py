"""Shared helpers of the NumPy-coverage modules (``symgrad.numpy_extra`` and the
``numpy_*`` modules it gathers): array arguments as nodes, axis and slice helpers, and the
location-free UnsupportedSyntaxError a builder raises (the front end cites the user's line)."""
from __future__ import annotations

import numpy as np

from . import ops
from .op_base import _promote
from .errors import UnsupportedSyntaxError
from .ir import Node


def _nodes(xs):
    return [ops.lift(x if isinstance(x, Node) else np.asarray(x)) for x in xs]


def _as_array(x) -> Node:
    """A node for an array argument: Python lists (of nodes or numbers) are stacked, as
    ``np.asarray`` does."""
    if isinstance(x, (list, tuple)):
        items = [_as_array(v) for v in x]
        return ops.stack(items) if items else ops.lift(np.asarray(x, dtype=float))
    return ops.lift(x if isinstance(x, Node) else np.asarray(x))


def unsupported(what: str, why: str):
    """An UnsupportedSyntaxError without a location: the front end re-raises it at the
    user's line (symgrad.expressions)."""
    return UnsupportedSyntaxError(what, "", 0, 0, "", why)


def _axis(axis, ndim) -> int:
    return ops.normalize_axes(axis, ndim)[0]


def _full_slices(ndim):
    return [slice(None)] * ndim


def _slice_along(x: Node, axis: int, s: slice) -> Node:
    key = _full_slices(x.ndim)
    key[axis] = s
    return ops.getitem(x, tuple(key))


def _float_pair(a, b):
    return _promote((a, b), float_only=True)
