"""Slices whose length changes with a loop index (``x[:i]``, ``L[i, :j]``, ``y[i + 1:]``) inside a
loop region, as full-length arrays padded with zeros.

The loop region traces its body once, so a value's shape must be the same in every iteration:
``x[:i]`` has none. Where it flows only into consumers for which zeros past the slice change
nothing (a sum over that axis, a dot or matmul contracting it, its 2-norm, elementwise
products and sums of slices with the same bounds, scaling by a value that does not span that
axis; a mean divides the sum by the slice's length), it is the whole axis with every element
outside the slice replaced by zero: ``where(lo <= arange(n) < hi, x, 0)``.
The select (never a product with a 0/1 mask) makes the cotangent of an element outside the
slice a structural zero, whatever the values there (inf, nan).

The value is a :class:`Padded`: every use the padding is not exact for (``len``, ``.shape``,
``max``, ``exp``, indexing, comparisons, carrying it out of the iteration, ...) refuses
(``UnsupportedSyntaxError``, or an error of Python's for its protocols), and the loop region
falls back to unrolling (``symgrad.loops``), where each iteration's slice is static, NumPy's
own. Invariant: ``Padded.value`` is exactly zero outside the slice."""
from __future__ import annotations

import ast
import functools
import numbers
from dataclasses import dataclass

from . import ops
from .aliases import ArrayStandIn, leaves
from .ir import Node
from .numpy_base import unsupported
from .numpy_indexing import affine_parts

WHY = "the slice's length changes with the loop index, and zeros in its place past its end " \
      "are exact only for sums, dots and products of such slices"


@dataclass(frozen=True, eq=False)
class TracedSlice:
    """A key item ``lo:hi`` (step 1) with a bound made from loop indices and a length that is
    not a number (else it is a ``numpy_indexing.Window``); ``None`` for an omitted bound."""
    start: object
    stop: object


def has_traced_slice(key) -> bool:
    return any(isinstance(k, TracedSlice) for k in (key if isinstance(key, tuple) else (key,)))


class Padded(ArrayStandIn):
    """A slice with a traced length along ``axis``: ``value`` holds the whole axis (``keep``,
    a bool vector, says where the slice is; zeros elsewhere); ``bounds`` is what two of them
    must share to line up element by element (the axis' length and the two bounds)."""
    __slots__ = ("value", "axis", "keep", "bounds")

    def __init__(self, value: Node, axis: int, keep: Node, bounds):
        for name, v in (("value", value), ("axis", axis), ("keep", keep), ("bounds", bounds)):
            object.__setattr__(self, name, v)

    @property
    def tail(self) -> int:   # the axis counted from the end (how broadcasting lines it up)
        return self.value.ndim - self.axis

    def remade(self, value: Node, axis: int | None = None, mask: bool = False) -> "Padded":
        """The same slice over a new ``value`` (masked again where it may not be zero)."""
        axis = value.ndim - self.tail if axis is None else axis
        if mask:
            value = ops.where(_along(self.keep, axis, value.ndim), value,
                              ops.full((), 0, value.dtype))
        return Padded(value, axis, self.keep, self.bounds)

    def _refuse(self, *args, **kwargs):
        raise unsupported("this use of a slice whose length depends on a loop index", WHY)

    __len__ = __iter__ = __bool__ = __getitem__ = __setitem__ = __contains__ = _refuse
    __array__ = __float__ = __int__ = __index__ = __round__ = __abs__ = __invert__ = _refuse
    __lt__ = __le__ = __gt__ = __ge__ = __eq__ = __ne__ = _refuse
    __hash__ = object.__hash__
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _refuse
    __rtruediv__ = __matmul__ = __rmatmul__ = __pow__ = __rpow__ = __neg__ = __pos__ = _refuse
    __setattr__ = _refuse
    __array_ufunc__ = None    # NumPy's operators on it defer (and then refuse)


def holds_padded(value) -> bool:
    return any(isinstance(v, Padded) for v in leaves(value))


def _along(vector: Node, axis: int, ndim: int) -> Node:
    return ops.reshape(vector, tuple(-1 if a == axis else 1 for a in range(ndim)))


def _bound_key(bound):
    if isinstance(bound, numbers.Integral):
        return int(bound)
    parts = affine_parts(bound)
    return ("node", bound) if parts is None else (frozenset(parts[0].items()), parts[1])


def sliced_axis(x: Node, key) -> int:
    """The axis of ``x[key]`` (the traced slice made a full slice) the traced slice gives."""
    items = list(key) if isinstance(key, tuple) else [key]
    consumed = sum(1 for k in items if k is not None and k is not Ellipsis)
    axis = 0
    for k in items:
        if isinstance(k, TracedSlice):
            return axis
        if k is Ellipsis:
            axis += x.ndim - consumed
        elif not (isinstance(k, numbers.Integral) or isinstance(k, Node) and k.ndim == 0):
            axis += 1
    raise AssertionError("no traced slice in the key")


def padded(full: Node, axis: int, item: TracedSlice, ranges) -> Padded:
    """``full`` (the key's view with the traced slice a full slice) as the slice along ``axis``."""
    from .numpy_indexing import _value_range   # (its ranges come from symgrad.loop_plan)
    n = full.shape[axis]
    bounds = []
    for bound, default in ((item.start, 0), (item.stop, n)):
        if bound is None:
            bound = default
        elif isinstance(bound, numbers.Integral):
            bound = max(int(bound) + n, 0) if bound < 0 else int(bound)   # Python's reading
        else:
            span = _value_range(bound, ranges)
            if span is None or span[0] < 0:   # read from the end in some iteration
                raise unsupported("a slice bound that may be negative in some iteration", WHY)
        bounds.append(bound)
    lo, hi = bounds
    k = ops.arange(0, n, 1, "int64")
    keep = None
    if not (isinstance(lo, int) and lo == 0):
        keep = ops.ge(k, lo)
    if not (isinstance(hi, int) and hi >= n):
        keep = ops.lt(k, hi) if keep is None else ops.logical_and(keep, ops.lt(k, hi))
    if keep is None:
        keep = ops.full((n,), True, "bool")
    value = ops.where(_along(keep, axis, full.ndim), full, ops.full((), 0, full.dtype))
    return Padded(value, axis, keep, (n, _bound_key(lo), _bound_key(hi)))


def _value(v):
    return v.value if isinstance(v, Padded) else v


def _scales(p: Padded, other) -> bool:
    """Whether ``other`` (not a Padded) broadcasts onto ``p`` without spanning its axis."""
    if isinstance(other, Padded) or not isinstance(other, (Node, numbers.Number)) or \
            isinstance(other, bool):
        return False
    shape = getattr(other, "shape", ())
    return len(shape) < p.tail or shape[len(shape) - p.tail] == 1


def _lined_up(a, b) -> bool:
    return isinstance(a, Padded) and isinstance(b, Padded) and a.bounds == b.bounds and \
        a.tail == b.tail


def binop(op: type, a, b):
    """``a <op> b`` with a Padded operand: an elementwise product or sum of two slices with
    the same bounds, or a slice scaled (``*``, ``/`` by it, ``**`` a positive number)."""
    if op is ast.MatMult:
        return matmul(a, b)
    if op in (ast.Add, ast.Sub, ast.Mult) and _lined_up(a, b):
        build = {ast.Add: ops.add, ast.Sub: ops.sub, ast.Mult: ops.mul}[op]
        return a.remade(build(a.value, b.value))       # 0 <op> 0 is 0
    p = a if isinstance(a, Padded) else b
    other = b if p is a else a
    if op is ast.Mult and _scales(p, other) or op is ast.Div and p is a and _scales(p, other):
        build = ops.mul if op is ast.Mult else ops.div
        return p.remade(build(_value(a), _value(b)), mask=True)   # (other may be inf or nan)
    if op is ast.Pow and p is a and isinstance(b, numbers.Real) and not isinstance(b, bool) \
            and b > 0:
        return p.remade(ops.pow_(a.value, b), mask=True)
    raise unsupported(f"operator {op.__name__} on a slice whose length depends on a loop index",
                      WHY)


def negative(p: Padded) -> Padded:
    return p.remade(ops.neg(p.value), mask=True)   # (+0 past the slice, as NumPy's empty sum)


def contract(a, b):
    """``a @ b`` / ``np.dot`` for operands of one or two dimensions: the contracted axis either
    padded on both sides with the same bounds (zeros past the slice add nothing), or on
    neither, a padded free axis then the result's (masked again: zeros times inf)."""
    av, bv = ops.lift(_value(a)), ops.lift(_value(b))
    if av.ndim == 0 or bv.ndim == 0:
        return binop(ast.Mult, a, b)
    if av.ndim > 2 or bv.ndim > 2:
        raise unsupported("a product of arrays of more than two dimensions with a slice whose "
                          "length depends on a loop index", WHY)
    ka, kb = av.ndim - 1, 0
    on_a = isinstance(a, Padded) and a.axis == ka
    on_b = isinstance(b, Padded) and b.axis == kb
    if on_a and on_b and a.bounds == b.bounds:
        return ops.matmul(av, bv)
    if on_a or on_b or isinstance(a, Padded) and isinstance(b, Padded):
        raise unsupported("a product contracting a slice whose length depends on a loop index "
                          "with an axis of another length", WHY)
    out = ops.matmul(av, bv)
    p = a if isinstance(a, Padded) else b
    return p.remade(out, 0 if p is a else out.ndim - 1, mask=True)


def matmul(a, b):
    """``@`` / ``np.matmul``: a 0-d operand is NumPy's error (unrolled, NumPy raises it)."""
    if ops.lift(_value(a)).ndim == 0 or ops.lift(_value(b)).ndim == 0:
        raise unsupported("matmul of a 0-d operand and a slice whose length depends on a loop "
                          "index", WHY)
    return contract(a, b)


def _axes(p: Padded, axis):
    return ops.normalize_axes(axis, p.value.ndim)


def reduce_sum(p: Padded, axis=None, *, keepdims=False, initial=None, where=True):
    """``np.sum``: over the padded axis, the sum of the slice (0 for an empty one); over
    others, a padded slice again (sums of zeros are zero)."""
    if initial is not None or where is not True:
        raise unsupported("np.sum with initial= or where= of a slice whose length depends on a "
                          "loop index", WHY)
    axes = _axes(p, axis)
    out = ops.reduce("sum", p.value, axes, keepdims)
    if p.axis in axes:
        return out
    return p.remade(out, p.axis if keepdims else p.axis - sum(a < p.axis for a in axes))


def mean(p: Padded, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    """``np.mean`` over axes including the padded one: the sum over the slice's length."""
    axes = _axes(p, axis)
    if dtype is not None or out is not None or where is not True or p.axis not in axes:
        raise unsupported("this np.mean of a slice whose length depends on a loop index", WHY)
    total = ops.reduce("sum", ops.to_float(p.value), axes, keepdims)
    others = 1
    for a in axes:
        others *= p.value.shape[a] if a != p.axis else 1
    count = ops.reduce("sum", ops.cast(p.keep, total.dtype))
    return ops.div(total, count * others if others != 1 else count)


def norm(p: Padded, ord=None, axis=None, keepdims=False):
    """``np.linalg.norm`` of the 2-norm / Frobenius kind over every axis: zeros add nothing
    to the sum of squares (another order or axis: unrolled)."""
    if ord is not None or axis is not None and not (p.value.ndim == 1 and axis in (0, -1)):
        raise unsupported("this np.linalg.norm of a slice whose length depends on a loop index",
                          WHY)
    from .numpy_reductions import norm as whole
    return whole(p.value, None, axis, keepdims)


def _tf(reduction):
    def build(input_tensor, axis=None, keepdims=False, name=None):
        return reduction(input_tensor, tuple(axis) if isinstance(axis, list) else axis,
                         keepdims=keepdims)
    return build


def _vector_product(a, b):
    if ops.lift(_value(a)).ndim != 1 or ops.lift(_value(b)).ndim != 1:
        raise unsupported("np.inner / np.vdot of a slice with more than one dimension", WHY)
    return contract(a, b)


_CALLS = {
    "sum": reduce_sum, "reduce_sum": _tf(reduce_sum), "mean": mean, "reduce_mean": _tf(mean),
    "norm": norm, "dot": contract, "matmul": matmul, "inner": _vector_product, "vdot": _vector_product,
    "multiply": functools.partial(binop, ast.Mult), "add": functools.partial(binop, ast.Add),
    "subtract": functools.partial(binop, ast.Sub), "divide": functools.partial(binop, ast.Div),
    "true_divide": functools.partial(binop, ast.Div), "negative": negative,
}


def call(name: str, args, kwargs):
    """The NumPy function ``name`` (a ``symgrad.numpy_api`` dual's name) called with a Padded
    among its arguments."""
    build = _CALLS.get(name)
    if build is None or any(isinstance(v, Padded) for v in kwargs.values()) or \
            any(holds_padded(v) and not isinstance(v, Padded) for v in args):
        raise unsupported(f"np.{name} of a slice whose length depends on a loop index", WHY)
    return build(*args, **kwargs)


def attribute(p: Padded, name: str):
    """``p.T`` (two dimensions) and the methods ``sum``, ``mean``, ``dot``."""
    if name == "T" and p.value.ndim <= 2:
        return Padded(ops.transpose(p.value), p.value.ndim - 1 - p.axis, p.keep, p.bounds)
    if name in ("sum", "mean", "dot"):   # (called through the tracer's call of np.<name>)
        from .numpy_api import DUALS
        return functools.partial(DUALS[name], p)
    raise unsupported(f"attribute '{name}' of a slice whose length depends on a loop index", WHY)


def read_outside(tree: ast.AST, stmt: ast.AST, names) -> bool:
    """Whether any of ``names`` is read in ``tree`` outside the statement ``stmt``."""
    inside = {id(n) for n in ast.walk(stmt)}
    return any(isinstance(n, ast.Name) and n.id in names and id(n) not in inside
               for n in ast.walk(tree))
