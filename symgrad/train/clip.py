"""Gradient clipping with TensorFlow's semantics: ``clip_by_value``, ``clip_by_norm``,
``global_norm`` and ``clip_by_global_norm``.

Each function is plain NumPy code in the subset the front end understands, so the same source
runs eagerly on NumPy arrays and, when called inside a differentiated function, is inlined by
the tracer and differentiated like any other code. The formulas follow TensorFlow's
``tensorflow/python/ops/clip_ops.py`` operation for operation, with two deliberate departures
that leave every *value* unchanged:

* norms are computed through a "safe" square root (``where(s > 0, sqrt(where(s > 0, s, 1)), s)``,
  the trick TF itself uses in ``clip_by_norm``) so that derivatives at a zero norm are finite
  instead of ``0 * inf = nan``;
* ``clip_by_global_norm`` turns an infinite or NaN norm into NaN values with a select instead
  of TF's ``scale + (use_norm - use_norm)``, which gives the same NaNs without NumPy's
  "invalid value" warning.

Where TF takes a ``maximum``/``minimum`` whose derivative matters at a tie (``clip_by_norm`` at
``norm == clip_norm``, the global-norm scale), ``_tf_maximum``/``_tf_minimum`` give TF's tie rule
(all to the first operand) instead of symgrad's even split, so gradients match TF there too.
"""
from __future__ import annotations

import numpy as np


def clip_by_value(t, clip_value_min, clip_value_max):
    """``tf.clip_by_value``: ``maximum(minimum(t, clip_value_max), clip_value_min)``.

    The bounds broadcast against ``t`` but may not enlarge it (TF raises ``ValueError`` then).
    NaNs in ``t`` pass through. Derivative (TF's ``_ClipByValueGrad``): ``t`` receives the
    incoming gradient where ``clip_value_min <= t <= clip_value_max`` and zero elsewhere;
    each bound receives the gradient of the elements clipped to it.
    """
    t = np.asarray(t)
    # Selects rather than minimum/maximum: ties pass the gradient to t exactly as TF's rule.
    t_min = np.where(t > clip_value_max, clip_value_max, t)
    clipped = np.where(t_min < clip_value_min, clip_value_min, t_min)
    if clipped.shape != t.shape:
        raise ValueError(f"clip_by_value: bounds of shapes {np.asarray(clip_value_min).shape} and "
                         f"{np.asarray(clip_value_max).shape} would enlarge t of shape {t.shape}")
    return clipped


def _tf_maximum(x, y):
    """``np.maximum(x, y)`` whose derivative at a tie goes all to ``x``, as TF's ``_MaximumGrad``
    (it selects ``x`` where ``x >= y``); symgrad's own maximum shares a tie evenly (JAX)."""
    return np.where(x >= y, x, np.maximum(x, y))   # (the inner maximum keeps NaNs as NumPy)


def _tf_minimum(x, y):
    """``np.minimum(x, y)`` whose derivative at a tie goes all to ``x`` (TF's ``_MinimumGrad``)."""
    return np.where(x <= y, x, np.minimum(x, y))


def _safe_norm(sum_of_squares):
    """``sqrt(s)`` whose derivative is 0, not inf, where ``s == 0`` (same values)."""
    positive = sum_of_squares > 0
    safe = np.where(positive, sum_of_squares, np.ones_like(sum_of_squares))
    return np.where(positive, np.sqrt(safe), sum_of_squares)


def clip_by_norm(t, clip_norm, axes=None):
    """``tf.clip_by_norm``: rescale ``t`` so that its L2 norm (over ``axes``, default all) is at
    most ``clip_norm``: ``t * clip_norm / maximum(l2norm(t), clip_norm)``.

    A zero norm leaves ``t`` unchanged; an infinite entry makes its own entry NaN and the
    others zero (``inf / inf``), as in TF. ``axes`` is an int or a tuple of ints; with axes the
    norm is taken per slice along them (``keepdims`` broadcasting).
    """
    t = np.asarray(t)
    if isinstance(axes, list):
        axes = tuple(axes)
    l2norm = _safe_norm(np.sum(t * t, axis=axes, keepdims=True))
    intermediate = t * clip_norm
    if intermediate.shape != t.shape:
        raise ValueError(f"clip_by_norm: clip_norm of shape {np.asarray(clip_norm).shape} "
                         f"would enlarge t of shape {t.shape}")
    return intermediate / _tf_maximum(l2norm, clip_norm)


def global_norm(t_list):
    """``tf.linalg.global_norm``: ``sqrt(sum of the squared entries of every tensor)``;
    ``None`` entries are ignored."""
    if not isinstance(t_list, (list, tuple)):
        raise TypeError("global_norm: t_list should be a list or tuple of arrays")
    squares = [np.sum(np.asarray(v) * v) for v in t_list if v is not None]
    norm = _safe_norm(np.sum(np.stack(squares)) if squares else np.asarray(0.0))
    if isinstance(norm, np.ndarray):   # eagerly: a NumPy scalar, as np.sum gives (static test)
        norm = norm[()]
    return norm


def clip_by_global_norm(t_list, clip_norm, use_norm=None):
    """``tf.clip_by_global_norm``: scale every tensor by
    ``clip_norm / maximum(global_norm, clip_norm)`` and return ``(clipped_list, global_norm)``.

    ``None`` entries pass through as ``None``. ``use_norm`` replaces the computed global norm.
    The scale is computed as TF does, ``clip_norm * minimum(1 / norm, 1 / clip_norm)``; a zero
    norm leaves the (all-zero) inputs unchanged, and an infinite or NaN norm makes every
    returned entry NaN (TF's documented behaviour) while the returned norm is the inf/NaN.
    """
    if not isinstance(t_list, (list, tuple)):
        raise TypeError("clip_by_global_norm: t_list should be a list or tuple of arrays")
    if use_norm is None:
        use_norm = global_norm(t_list)
    scale = global_norm_scale(use_norm, clip_norm)
    clipped = [None if v is None else np.asarray(v) * np.asarray(scale, np.asarray(v).dtype)
               for v in t_list]
    return clipped, use_norm


def global_norm_scale(use_norm, clip_norm):
    """The factor ``clip_by_global_norm`` multiplies every tensor by, as TF computes it:
    ``clip_norm * minimum(1 / use_norm, 1 / clip_norm)``, NaN for an inf/NaN norm, 1 for a
    zero norm (``1 / 0`` is taken as ``inf`` without dividing by zero)."""
    nonzero = use_norm != 0
    inverse = np.where(nonzero, 1.0 / np.where(nonzero, use_norm, 1.0), np.inf)
    scale_for_finite = clip_norm * _tf_minimum(inverse, 1.0 / clip_norm)
    return np.where(np.abs(use_norm) < np.inf, scale_for_finite, np.nan)
