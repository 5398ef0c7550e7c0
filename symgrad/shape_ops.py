"""The op table, structure: reductions, reshape/transpose/broadcasting and linear algebra.

These share a module because their derivative rules call each other (a reduction's VJP
broadcasts; broadcasting's VJP, ``unbroadcast``, reduces). Same conventions as the other op
modules: one ``register(OpDef(...))`` per primitive, builders that apply NumPy's rules.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from . import spelling as sp
from .ir import INT_DTYPES, Node, OpDef, make, register
from .op_base import _promote, _same_dtype, broadcast_shapes, cast, lift, normalize_axes, to_float
from .elementwise import eq, mul, where

def _reduce_infer(inputs, attrs):
    (x,) = inputs
    axes, keepdims = attrs
    shape = [1 if i in axes else d for i, d in enumerate(x.shape)] if keepdims else \
        [d for i, d in enumerate(x.shape) if i not in axes]
    return x.dtype, tuple(shape)


# ----------------------------------------------------------------------------------------------
# Reductions: attrs (axes, keepdims) with axes sorted and non-negative.
def _keepdims_shape(x: Node, axes) -> tuple:
    return tuple(1 if i in axes else d for i, d in enumerate(x.shape))


def _expand(g: Node, n: Node) -> Node:
    """A reduction's cotangent broadcast back to the input's shape."""
    x = n.inputs[0]
    axes, keepdims = n.attrs
    return broadcast_to(reshape(g, _keepdims_shape(x, axes)), x.shape)


def _extremum_vjp(g, n):
    x = n.inputs[0]
    axes, _ = n.attrs
    m = broadcast_to(reshape(n, _keepdims_shape(x, axes)), x.shape)
    hit = eq(x, m)
    count = reduce("sum", cast(hit, x.dtype), axes, True)  # ties share the cotangent evenly
    return (where(hit, _expand(g, n) / count, 0),)


def _extremum_jvp(tangents, n):
    """The tangent of max/min: the mean of the tangents of the elements that attain it (ties
    share it evenly, as the VJP shares the cotangent)."""
    (t,) = tangents
    if t is None:
        return None
    x = n.inputs[0]
    axes, keepdims = n.attrs
    hit = eq(x, broadcast_to(reshape(n, _keepdims_shape(x, axes)), x.shape))
    count = reduce("sum", cast(hit, x.dtype), axes, keepdims)
    return reduce("sum", where(hit, t, 0), axes, keepdims) / count


def _linear_jvp(build):
    """The JVP of an op linear in its one operand: the op applied to the tangent."""
    def jvp(tangents, n):
        (t,) = tangents
        return None if t is None else build(t, n)
    return jvp


def _reduce_spell(fn):
    def spell(args, node):
        x = node.inputs[0]
        axes, keepdims = node.attrs
        parts = [args[0][0]]
        if axes != tuple(range(x.ndim)):
            parts.append(f"axis={axes[0] if len(axes) == 1 else axes}")
        if keepdims:
            parts.append("keepdims=True")
        return f"np.{fn}({', '.join(parts)})", sp.ATOM
    return spell


def _reduce_numpy(fn):
    return lambda x, attrs: fn(x, axis=attrs[0], keepdims=attrs[1])


def _check_nonempty(fn):
    def infer(inputs, attrs):
        x = inputs[0]
        if any(x.shape[a] == 0 for a in attrs[0]):
            raise ValueError(f"zero-size array to reduction operation {fn} which has no identity")
        return _reduce_infer(inputs, attrs)
    return infer


register(OpDef("sum", "reduction", _reduce_infer, _reduce_numpy(np.sum),
               _reduce_spell("sum"), lambda g, n: (_expand(g, n),),
               jvp=_linear_jvp(lambda t, n: reduce("sum", t, *n.attrs))))
def _others(n: Node) -> Node:
    """d prod(x) / d x[i], the product of the other entries (not prod / x: 0 / 0 at a zero)."""
    from .scans import products_of_others   # (built from indexing ops, which import this module)
    return products_of_others(n.inputs[0], n.attrs[0])


register(OpDef("prod", "reduction", _reduce_infer, _reduce_numpy(np.prod),
               _reduce_spell("prod"),
               lambda g, n: (_expand(g, n) * _others(n),),
               jvp=_linear_jvp(lambda t, n: reduce("sum", t * _others(n), *n.attrs))))
register(OpDef("max", "reduction", _check_nonempty("maximum"), _reduce_numpy(np.max),
               _reduce_spell("max"), _extremum_vjp, jvp=_extremum_jvp))
register(OpDef("min", "reduction", _check_nonempty("minimum"), _reduce_numpy(np.min),
               _reduce_spell("min"), _extremum_vjp, jvp=_extremum_jvp))


def reduce(op: str, x, axis=None, keepdims=False) -> Node:
    x = lift(x)
    if op in ("sum", "prod") and (x.dtype == "bool" or x.dtype in INT_DTYPES):
        # NumPy accumulates small integers (and bools) in the platform's 64-bit integer
        x = cast(x, "uint64" if x.dtype.startswith("uint") else "int64")
    axes = normalize_axes(axis, x.ndim)
    if not axes and not keepdims:
        return x
    return make(op, (x,), (axes, bool(keepdims)))


def mean(x, axis=None, keepdims=False) -> Node:
    x = to_float(x)
    axes = normalize_axes(axis, x.ndim)
    count = math.prod(x.shape[a] for a in axes)
    return reduce("sum", x, axes, keepdims) / count


# ----------------------------------------------------------------------------------------------
# Shape ops


def _reshape_infer(inputs, attrs):
    (x,), (shape,) = inputs, attrs
    if math.prod(shape) != x.size:
        raise ValueError(f"cannot reshape array of size {x.size} into shape {shape}")
    return x.dtype, shape


def _reshape_spell(args, node):
    x = node.inputs[0]
    if x.ndim == 0:   # the operand may be a Python float, which has no .reshape
        return f"np.reshape({args[0][0]}, {sp.shape_text(node.shape)})", sp.ATOM
    a = sp.paren(args[0], args[0][1] < sp.ATOM)
    if node.shape == ():
        return f"{a}.reshape(())", sp.ATOM
    return f"{a}.reshape({', '.join(map(str, node.shape))})", sp.ATOM


register(OpDef("reshape", "shape", _reshape_infer, lambda x, attrs: np.reshape(x, attrs[0]),
               _reshape_spell, lambda g, n: (reshape(g, n.inputs[0].shape),),
               jvp=_linear_jvp(lambda t, n: reshape(t, n.shape))))


def reshape(x, shape) -> Node:
    x = lift(x)
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    shape = [int(d) for d in shape]
    if shape.count(-1) > 1:
        raise ValueError("can only specify one unknown dimension")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or x.size % known:
            raise ValueError(f"cannot reshape array of size {x.size} into shape {tuple(shape)}")
        shape[shape.index(-1)] = x.size // known
    shape = tuple(shape)
    if shape == x.shape:
        return x
    if x.op == "reshape":  # reshape(reshape(y)) -> reshape(y)
        return reshape(x.inputs[0], shape)
    return make("reshape", (x,), (shape,))


def _transpose_spell(args, node):
    a = sp.paren(args[0], args[0][1] < sp.ATOM)
    (perm,) = node.attrs
    if perm == tuple(reversed(range(len(perm)))):
        return f"{a}.T", sp.ATOM
    return f"np.transpose({args[0][0]}, {perm})", sp.ATOM


register(OpDef("transpose", "shape",
               lambda inputs, attrs: (inputs[0].dtype, tuple(inputs[0].shape[p] for p in attrs[0])),
               lambda x, attrs: np.transpose(x, attrs[0]), _transpose_spell,
               lambda g, n: (transpose(g, tuple(np.argsort(n.attrs[0]).tolist())),),
               jvp=_linear_jvp(lambda t, n: transpose(t, n.attrs[0]))))


def transpose(x, axes=None) -> Node:
    x = lift(x)
    perm = tuple(reversed(range(x.ndim))) if axes is None else tuple(a % x.ndim for a in axes)
    if sorted(perm) != list(range(x.ndim)):
        raise ValueError("axes don't match array")
    if perm == tuple(range(x.ndim)):
        return x
    if x.op == "transpose":  # compose permutations
        return transpose(x.inputs[0], tuple(x.attrs[0][p] for p in perm))
    return make("transpose", (x,), (perm,))


def _broadcast_infer(inputs, attrs):
    (x,), (shape,) = inputs, attrs
    if broadcast_shapes(x.shape, shape) != shape:
        raise ValueError(f"cannot broadcast shape {x.shape} to {shape}")
    return x.dtype, shape


register(OpDef("broadcast_to", "shape", _broadcast_infer,
               lambda x, attrs: np.broadcast_to(x, attrs[0]),
               lambda args, node: (f"np.broadcast_to({args[0][0]}, {sp.shape_text(node.shape)})", sp.ATOM),
               lambda g, n: (unbroadcast(g, n.inputs[0].shape),),
               jvp=_linear_jvp(lambda t, n: broadcast_to(t, n.shape))))


def broadcast_to(x, shape) -> Node:
    x = lift(x)
    shape = tuple(shape)
    return x if x.shape == shape else make("broadcast_to", (x,), (shape,))


def unbroadcast(g: Node, shape: tuple) -> Node:
    """Sum a cotangent over the axes that broadcasting added or stretched (the one place)."""
    if g.shape == tuple(shape):
        return g
    lead = g.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                      if d == 1 and g.shape[lead + i] != 1)
    return reshape(reduce("sum", g, axes), shape)


# ----------------------------------------------------------------------------------------------
# Linear algebra: matmul on operands of rank >= 2 with NumPy's batch broadcasting. 1-D operands
# are promoted by the builder (as NumPy does), so the primitive and its VJP stay simple.


def _matmul_infer(inputs, attrs):
    a, b = inputs
    dtype = _same_dtype(inputs)
    if a.ndim < 2 or b.ndim < 2:
        raise TypeError("internal: matmul primitive needs rank >= 2")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0 "
                         f"(size {b.shape[-2]} is different from {a.shape[-1]}); shapes "
                         f"{a.shape} and {b.shape}")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return dtype, batch + (a.shape[-2], b.shape[-1])


def _swap_last(x: Node) -> Node:
    perm = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return transpose(x, perm)


def _rows(x: Node) -> Node:
    """(..., r, c) -> (r, batch * c): the batch folded into the columns."""
    perm = (x.ndim - 2,) + tuple(range(x.ndim - 2)) + (x.ndim - 1,)
    return reshape(transpose(x, perm), (x.shape[-2], -1))


def _matmul_vjp(g, n):
    """d(a @ b): g @ b.T and a.T @ g, summed over broadcast batch axes. When one operand is a
    plain matrix shared by the whole batch, the batch sum is folded into a single matmul
    (sum_i g_i @ b_i.T == rows(g) @ rows(b).T) instead of materialising every product."""
    a, b = n.inputs
    if a.ndim == 2 and g.ndim > 2:
        ga = matmul(_rows(g), transpose(_rows(b)))
    else:
        ga = unbroadcast(matmul(g, _swap_last(b)), a.shape)
    if b.ndim == 2 and g.ndim > 2:
        gb = matmul(transpose(reshape(broadcast_to(a, g.shape[:-2] + a.shape[-2:]), (-1, a.shape[-1]))),
                    reshape(g, (-1, g.shape[-1])))
    else:
        gb = unbroadcast(matmul(_swap_last(a), g), b.shape)
    return ga, gb


def _matmul_jvp(tangents, n):
    """d(a @ b) = t_a @ b + a @ t_b (a zero tangent's product left out)."""
    (a, b), (t_a, t_b) = n.inputs, tangents
    terms = [matmul(t_a, b)] if t_a is not None else []
    terms += [matmul(a, t_b)] if t_b is not None else []
    return None if not terms else terms[0] if len(terms) == 1 else terms[0] + terms[1]


register(OpDef("matmul", "linalg", _matmul_infer, lambda a, b, attrs: np.matmul(a, b),
               sp.infix("@", sp.MUL), _matmul_vjp, jvp=_matmul_jvp))


def matmul(a, b) -> Node:
    a, b = _promote((a, b))
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    a2 = reshape(a, (1,) + a.shape) if a.ndim == 1 else a
    b2 = reshape(b, b.shape + (1,)) if b.ndim == 1 else b
    out = make("matmul", (a2, b2))
    if a.ndim == 1 or b.ndim == 1:
        shape = out.shape[:-2] + (() if a.ndim == 1 else out.shape[-2:-1]) + (
            () if b.ndim == 1 else out.shape[-1:])
        out = reshape(out, shape)
    return out


def dot(a, b) -> Node:
    a, b = lift(a), lift(b)
    if a.ndim == 0 or b.ndim == 0:
        return mul(a, b)
    if a.ndim > 2 or b.ndim > 2:
        if b.ndim == 1:
            return matmul(a, b)
        raise ValueError("dot of arrays with more than 2 dimensions is not supported; use matmul")
    return matmul(a, b)
