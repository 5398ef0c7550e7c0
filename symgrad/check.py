"""Gradient checking against central finite differences."""
from __future__ import annotations

import numbers

import numpy as np

from .runtime import replace_leaves, value_leaves


def _total(value) -> float:
    """The sum of all outputs (the quantity symgrad differentiates; pytree outputs too)."""
    return float(sum(float(np.sum(v)) for v in value_leaves(value)
                     if isinstance(v, (numbers.Number, np.ndarray, np.generic))))


def _with_leaf(tree, k: int, value):
    """``tree`` (a pytree argument, or a leaf) with its k-th leaf replaced by ``value``."""
    position = iter(range(len(value_leaves(tree))))
    return replace_leaves(tree, lambda leaf: value if next(position) == k else leaf)


def _as_float64(value):
    """Float leaves in float64 (the differences are taken there), a pytree's too."""
    def leaf(v):
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            return v.astype(np.float64)
        if isinstance(v, np.floating):
            return float(v)
        return v
    return replace_leaves(value, leaf)


def check_grad(fn, *args, wrt=0, eps=None, directions=8, seed=0) -> float:
    """Max relative error of symgrad's gradient against central differences.

    ``error = |analytic - numeric| / max(1, |analytic|, |numeric|)`` over every element, or,
    for arguments with more than 64 elements, over ``directions`` random directional
    derivatives (as autograd's ``check_grads``). Differences are taken in float64.
    """
    from .api import Function, grad

    f = fn if isinstance(fn, Function) else Function(fn, wrt=wrt, target="python")
    g = grad(f, wrt)
    analytic = g(*args)
    wrt_idx, single = g.wrt, g._single
    if single:
        analytic = (analytic,)
    base = [_as_float64(a) for a in args]
    rng = np.random.default_rng(seed)
    worst = 0.0
    # one check per float leaf of each wrt argument (a pytree argument's gradient has its
    # structure, so the leaves pair up in tree order)
    checks = [(idx, k, leaf, leaf_grad) for idx, a_grad in zip(wrt_idx, analytic)
              for k, (leaf, leaf_grad) in enumerate(zip(value_leaves(base[idx]), value_leaves(a_grad)))]
    for idx, k, leaf, a_grad in checks:
        x = np.asarray(leaf, dtype=np.float64)
        a_grad = np.asarray(a_grad, dtype=np.float64)
        h = eps if eps is not None else 6e-6 * max(1.0, float(np.max(np.abs(x))) if x.size else 1.0)

        def objective(point, idx=idx, k=k, leaf=leaf):
            call = list(base)
            point = float(point) if isinstance(leaf, numbers.Real) and np.ndim(point) == 0 \
                and not isinstance(leaf, np.ndarray) else point
            call[idx] = _with_leaf(base[idx], k, point)
            return _total(f(*call))

        if x.size <= 64:
            numeric = np.zeros_like(x)
            for k in np.ndindex(x.shape):
                step = np.zeros_like(x)
                step[k] = h
                numeric[k] = (objective(x + step) - objective(x - step)) / (2 * h)
            pairs = zip(a_grad.ravel(), numeric.ravel())
        else:
            pairs = []
            for _ in range(directions):
                d = rng.standard_normal(x.shape)
                d /= np.linalg.norm(d)
                numeric = (objective(x + h * d) - objective(x - h * d)) / (2 * h)
                pairs.append((float(np.sum(a_grad * d)), numeric))
        for a, n in pairs:
            err = abs(a - n) / max(1.0, abs(a), abs(n))
            worst = max(worst, err if np.isfinite(err) else np.inf)
    return float(worst)
