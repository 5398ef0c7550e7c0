"""Gradient checking against central finite differences."""
from __future__ import annotations

import numbers

import numpy as np


def _total(value) -> float:
    """The sum of all outputs (the quantity symgrad differentiates)."""
    if isinstance(value, (tuple, list)):
        return float(sum(_total(v) for v in value))
    return float(np.sum(value))


def _as_float64(value):
    if isinstance(value, np.ndarray) and value.dtype.kind == "f":
        return value.astype(np.float64)
    if isinstance(value, np.floating):
        return float(value)
    return value


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
    for idx, a_grad in zip(wrt_idx, analytic):
        x = np.asarray(base[idx], dtype=np.float64)
        a_grad = np.asarray(a_grad, dtype=np.float64)
        h = eps if eps is not None else 6e-6 * max(1.0, float(np.max(np.abs(x))) if x.size else 1.0)

        def objective(point):
            call = list(base)
            call[idx] = float(point) if isinstance(base[idx], numbers.Real) and np.ndim(point) == 0 \
                and not isinstance(base[idx], np.ndarray) else point
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
