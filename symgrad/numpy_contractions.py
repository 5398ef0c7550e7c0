"""NumPy's contractions as matmuls: ``einsum``, ``tensordot``, ``inner``, ``vdot``, plus the
products that are broadcasts (``kron``, ``cross``), and 1-d ``correlate`` / ``convolve``.

Every pairwise contraction is written as transpose + reshape + one batched ``matmul`` (the
operands' shared kept axes as the batch, the summed axes as the inner dimension), the form
the back ends run near BLAS speed, instead of a broadcast-multiply-sum that would materialise
the whole product. ``einsum`` with more than two operands contracts them in the order
``np.einsum_path(optimize="greedy")`` picks for the shapes. The derivative is the matmul's and
the layout ops', so every order comes from the op table.
"""
from __future__ import annotations

import math
import numbers
import string

import numpy as np

from . import ops
from .ir import Node
from .numpy_base import _as_array, _axis, _slice_along, unsupported
from .numpy_layout import diagonal, flip, moveaxis

_LETTERS = set(string.ascii_letters)


# ----------------------------------------------------------------------------------------------
# The pairwise contraction every function here reduces to
def _sum_out(x: Node, labels: str, keep) -> tuple:
    """Sum over the axes whose label is not in ``keep``."""
    axes = tuple(i for i, c in enumerate(labels) if c not in keep)
    if not axes:
        return x, labels
    return ops.reduce("sum", x, axes), "".join(c for c in labels if c in keep)


def _order(x: Node, labels: str, want: str) -> Node:
    return ops.transpose(x, tuple(labels.index(c) for c in want))


def _sizes(x: Node, labels: str) -> dict:
    return dict(zip(labels, x.shape))


def contract_pair(a: Node, la: str, b: Node, lb: str, keep) -> tuple:
    """The product of ``a`` (axes labelled ``la``) and ``b`` summed over the labels they share
    that are not in ``keep``: (result, its labels). Shared kept labels are the matmul's batch,
    each operand's own labels its rows / columns, the summed ones its inner dimension."""
    a, la = _sum_out(a, la, set(keep) | set(lb))
    b, lb = _sum_out(b, lb, set(keep) | set(la))
    batch = "".join(c for c in la if c in lb and c in keep)
    inner = "".join(c for c in la if c in lb and c not in keep)
    rows = "".join(c for c in la if c not in lb)
    cols = "".join(c for c in lb if c not in la)
    size = {c: max(d, _sizes(b, lb).get(c, d)) for c, d in _sizes(a, la).items()}
    size.update({c: d for c, d in _sizes(b, lb).items() if c not in size})
    if not inner:   # nothing summed: a broadcast product
        out = batch + rows + cols
        ea = _placed(_order(a, la, batch + rows), batch + rows, out)
        eb = _placed(_order(b, lb, batch + cols), batch + cols, out)
        return ops.mul(ea, eb), out
    at = _broadcast_labels(_order(a, la, batch + rows + inner), batch + rows + inner, size)
    bt = _broadcast_labels(_order(b, lb, batch + inner + cols), batch + inner + cols, size)
    nb, nm = [math.prod(size[c] for c in s) for s in (batch, rows)]
    nk, nn = [math.prod(size[c] for c in s) for s in (inner, cols)]
    product = ops.matmul(ops.reshape(at, (nb, nm, nk)), ops.reshape(bt, (nb, nk, nn)))
    out = batch + rows + cols
    return ops.reshape(product, tuple(size[c] for c in out)), out


def _broadcast_labels(x: Node, labels: str, size: dict) -> Node:
    """Size-1 axes stretched to the label's size (einsum broadcasts an ellipsis' axes)."""
    return ops.broadcast_to(x, tuple(size[c] for c in labels))


def _placed(x: Node, order: str, out: str) -> Node:
    """``x`` (labels ``order``, already in that order) with length-1 axes for the labels of
    ``out`` it lacks, ready to broadcast."""
    shape = dict(zip(order, x.shape))
    return ops.reshape(x, tuple(shape.get(c, 1) for c in out))


# ----------------------------------------------------------------------------------------------
# einsum
def _parse(subscripts: str, operands) -> tuple:
    """(input label strings with the ellipsis spelled as letters, output labels)."""
    text = subscripts.replace(" ", "")
    if "->" in text:
        inputs_text, output = text.split("->")
        explicit = True
    else:
        inputs_text, output, explicit = text, "", False
    inputs = inputs_text.split(",")
    if len(inputs) != len(operands):
        raise ValueError(f"more operands ({len(operands)}) than subscripts, or fewer, in "
                         f"einsum({subscripts!r})")
    used = set(c for c in text if c in _LETTERS)
    spare = [c for c in string.ascii_uppercase[::-1] + string.ascii_lowercase[::-1] if c not in used]
    ell_ndim = max([x.ndim - (len(s) - 3) for s, x in zip(inputs, operands) if "..." in s], default=0)
    ell = "".join(spare[:ell_ndim])[::-1]
    labels = []
    for s, x in zip(inputs, operands):
        if any(c not in _LETTERS for c in s.replace("...", "")):
            raise ValueError(f"invalid subscript in einsum({subscripts!r})")
        if "..." in s:
            k = x.ndim - (len(s) - 3)
            if k < 0:
                raise ValueError(f"einstein sum subscripts string {s!r} has too many subscripts "
                                 f"for an operand of {x.ndim} dimensions")
            s = s.replace("...", ell[len(ell) - k:] if k else "")
        if len(s) != x.ndim:
            raise ValueError(f"operand has more dimensions than subscripts given in einstein sum "
                             f"({s!r} for an operand of {x.ndim} dimensions)")
        labels.append(s)
    if explicit:
        output = output.replace("...", ell)
        if any(c not in _LETTERS for c in output) or len(set(output)) != len(output):
            raise ValueError(f"invalid output subscripts in einsum({subscripts!r})")
        if any(c not in "".join(labels) for c in output):
            raise ValueError(f"einstein sum subscripts string included output subscript "
                             f"not in any input: {subscripts!r}")
    else:
        counts = "".join(labels)
        output = ell + "".join(sorted(c for c in set(counts) if counts.count(c) == 1 and c not in ell))
    return labels, output


def _distinct_labels(x: Node, labels: str) -> tuple:
    """A label repeated within one operand takes its diagonal (``'ii->i'``)."""
    while len(set(labels)) != len(labels):
        c = next(c for c in labels if labels.count(c) > 1)
        first = labels.index(c)
        second = labels.index(c, first + 1)
        if x.shape[first] != x.shape[second]:
            raise ValueError(f"dimensions in operand for collapsing index '{c}' don't match "
                             f"({x.shape[first]} != {x.shape[second]})")
        x = diagonal(x, 0, first, second)
        labels = "".join(l for i, l in enumerate(labels) if i not in (first, second)) + c
    return x, labels


def _contraction_order(labels, output, nodes) -> list:
    """The pairs to contract, as NumPy's greedy path for these shapes (on stand-in arrays
    that hold no data)."""
    if len(nodes) <= 2:
        return [tuple(range(len(nodes)))] if len(nodes) == 2 else []
    dummies = [np.broadcast_to(np.zeros((), x.dtype), x.shape) for x in nodes]
    path, _ = np.einsum_path(",".join(labels) + "->" + output, *dummies, optimize="greedy")
    return [tuple(p) for p in path[1:]]


def einsum(subscripts, *operands, out=None, dtype=None, order="K", casting="safe", optimize=True):
    if not isinstance(subscripts, str):
        raise unsupported("np.einsum(operand, sublist, ...)", "write the subscripts as a string")
    if out is not None:
        raise unsupported("np.einsum(..., out=...)", "symgrad returns new arrays")
    nodes = [_as_array(x) for x in operands]
    if not nodes:
        raise ValueError("No input operands")
    labels, output = _parse(subscripts, nodes)
    if dtype is not None:
        nodes = [ops.cast(x, np.dtype(dtype).name) for x in nodes]
    items = [_distinct_labels(x, l) for x, l in zip(nodes, labels)]
    for step in _contraction_order([l for _, l in items], output, [x for x, _ in items]):
        chosen = [items[k] for k in step]
        items = [it for k, it in enumerate(items) if k not in step]
        keep = set(output).union(*[set(l) for _, l in items])
        while len(chosen) > 1:
            (a, la), (b, lb) = chosen[0], chosen[1]
            rest = set().union(*[set(l) for _, l in chosen[2:]])
            chosen = [contract_pair(a, la, b, lb, keep | rest)] + chosen[2:]
        items.append(chosen[0])
    x, lx = _sum_out(*items[0], set(output))
    size = _sizes(x, lx)
    return _order(x, lx, output) if set(lx) == set(output) else \
        ops.broadcast_to(_order(x, lx, output), tuple(size[c] for c in output))


# ----------------------------------------------------------------------------------------------
# tensordot, inner, vdot, matrix_power
def _tensordot_axes(a: Node, b: Node, axes) -> tuple:
    if isinstance(axes, numbers.Integral):
        n = int(axes)
        if n < 0 or n > min(a.ndim, b.ndim):
            raise ValueError("shape-mismatch for sum")
        return list(range(a.ndim - n, a.ndim)), list(range(n))
    axes_a, axes_b = axes
    axes_a = [axes_a] if isinstance(axes_a, numbers.Integral) else list(axes_a)
    axes_b = [axes_b] if isinstance(axes_b, numbers.Integral) else list(axes_b)
    if len(axes_a) != len(axes_b):
        raise ValueError("shape-mismatch for sum")
    return [_axis(i, a.ndim) for i in axes_a], [_axis(i, b.ndim) for i in axes_b]


def tensordot(a, b, axes=2):
    a, b = _as_array(a), _as_array(b)
    axes_a, axes_b = _tensordot_axes(a, b, axes)
    letters = iter(string.ascii_letters)
    la = "".join(next(letters) for _ in range(a.ndim))
    lb = [next(letters) for _ in range(b.ndim)]
    for i, j in zip(axes_a, axes_b):
        if a.shape[i] != b.shape[j]:
            raise ValueError("shape-mismatch for sum")
        lb[j] = la[i]
    lb = "".join(lb)
    out = "".join(c for i, c in enumerate(la) if i not in axes_a) + \
        "".join(c for j, c in enumerate(lb) if j not in axes_b)
    product, labels = contract_pair(a, la, b, lb, set(out))
    return _order(product, labels, out)


def inner(a, b):
    a, b = _as_array(a), _as_array(b)
    if a.ndim == 0 or b.ndim == 0:
        return ops.mul(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(f"shapes {a.shape} and {b.shape} not aligned: {a.shape[-1]} (dim "
                         f"{a.ndim - 1}) != {b.shape[-1]} (dim {b.ndim - 1})")
    return tensordot(a, b, ([-1], [-1]))


def vdot(a, b):
    a, b = _as_array(a), _as_array(b)
    if a.size != b.size:
        raise ValueError("cannot reshape array: vectors have different lengths")
    return ops.dot(ops.reshape(a, (-1,)), ops.reshape(b, (-1,)))


def matrix_power(a, n):
    """Repeated squaring (NumPy's way); a negative power inverts first."""
    from .numpy_linalg import inv
    a = _as_array(a)
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ValueError("Last 2 dimensions of the array must be square")
    if not isinstance(n, numbers.Integral):
        raise TypeError("exponent must be an integer")
    if n == 0:
        eye = ops.array_const(np.eye(a.shape[-1], dtype=np.dtype(a.dtype)))
        return ops.broadcast_to(eye, a.shape)
    if n < 0:
        a, n = inv(a), -n
    result, square = None, a
    while n:
        if n & 1:
            result = square if result is None else ops.matmul(result, square)
        n >>= 1
        if n:
            square = ops.matmul(square, square)
    return result


# ----------------------------------------------------------------------------------------------
# kron, cross: broadcasts
def kron(a, b):
    """Every a[i] * b[j] at (i * b.shape + j): one broadcast product, axes interleaved."""
    a, b = _as_array(a), _as_array(b)
    nd = max(a.ndim, b.ndim)
    sa, sb = (1,) * (nd - a.ndim) + a.shape, (1,) * (nd - b.ndim) + b.shape
    ea = ops.reshape(a, tuple(d for pair in zip(sa, (1,) * nd) for d in pair))
    eb = ops.reshape(b, tuple(d for pair in zip((1,) * nd, sb) for d in pair))
    return ops.reshape(ops.mul(ea, eb), tuple(x * y for x, y in zip(sa, sb)))


def _components(x: Node) -> list:
    return [ops.getitem(x, (Ellipsis, i)) for i in range(x.shape[-1])]


def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    a, b = _as_array(a), _as_array(b)
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = moveaxis(a, _axis(axisa, a.ndim), -1), moveaxis(b, _axis(axisb, b.ndim), -1)
    if a.shape[-1] not in (2, 3) or b.shape[-1] not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n"
                         "(dimension must be 2 or 3)")
    ca, cb = _components(a), _components(b)
    if len(ca) == 2 and len(cb) == 2:
        return ca[0] * cb[1] - ca[1] * cb[0]
    zero = ops.full((), 0, ops.result_dtype(a, b))
    a0, a1, a2 = ca + [zero] * (3 - len(ca))
    b0, b1, b2 = cb + [zero] * (3 - len(cb))
    parts = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    shape = ops.broadcast_shapes(*(p.shape for p in parts))
    out = ops.stack([ops.broadcast_to(p, shape) for p in parts], -1)
    return moveaxis(out, -1, _axis(axisc, out.ndim))


# ----------------------------------------------------------------------------------------------
# correlate / convolve (1-d): one gather of the sliding windows (a constant index table) and one
# matrix-vector product, so the derivative is a scatter-add and a product too
def _full_correlation(a: Node, v: Node) -> Node:
    """c[k] = sum_i a[i + k - (m - 1)] v[i] for k = 0 .. n + m - 2 (zeros outside a)."""
    n, m = a.shape[0], v.shape[0]
    padded = ops.concatenate([ops.full((m - 1,), 0, a.dtype), a, ops.full((m - 1,), 0, a.dtype)], 0)
    windows = ops.take(padded, np.add.outer(np.arange(n + m - 1), np.arange(m)), 0)
    return ops.matmul(windows, v)


def _mode_slice(full: Node, n: int, m: int, mode: str) -> Node:
    """NumPy's part of the full result. With a shorter than v NumPy correlates v with a and
    reverses, so an even-length 'same' window starts one place later."""
    if mode == "full":
        return full
    short, long = min(n, m), max(n, m)
    if mode == "valid":
        start, length = short - 1, long - short + 1
    elif mode == "same":
        start, length = (short // 2 if n < m else (short - 1) // 2), long
    else:
        raise ValueError(f"mode must be one of 'valid', 'same', or 'full' (got {mode!r})")
    return _slice_along(full, 0, slice(start, start + length))


def _one_d_pair(a, v, name):
    x, y = (ops.to_float(_as_array(t)) for t in (a, v))
    if x.ndim != 1 or y.ndim != 1:
        raise ValueError(f"np.{name}: object too deep for desired array (1-d inputs only)")
    if x.shape[0] == 0 or y.shape[0] == 0:
        raise ValueError(f"{'v' if y.shape[0] == 0 else 'a'} cannot be empty")
    dtype = ops.result_dtype(x, y)
    return ops.cast(x, dtype), ops.cast(y, dtype)


def correlate(a, v, mode="valid"):
    x, y = _one_d_pair(a, v, "correlate")
    return _mode_slice(_full_correlation(x, y), x.shape[0], y.shape[0], mode)


def convolve(a, v, mode="full"):
    x, y = _one_d_pair(a, v, "convolve")
    if y.shape[0] > x.shape[0]:   # commutative; NumPy slices 'same' by the longer one
        x, y = y, x
    return _mode_slice(_full_correlation(x, flip(y)), x.shape[0], y.shape[0], mode)


FUNCTIONS = {
    "einsum": (np.einsum, einsum), "tensordot": (np.tensordot, tensordot),
    "inner": (np.inner, inner), "vdot": (np.vdot, vdot), "kron": (np.kron, kron),
    "cross": (np.cross, cross), "matrix_power": (np.linalg.matrix_power, matrix_power),
    "correlate": (np.correlate, correlate), "convolve": (np.convolve, convolve),
}
ALIASES: dict = {}
