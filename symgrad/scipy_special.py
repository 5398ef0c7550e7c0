"""scipy.special's everyday functions on traced values: logsumexp, expit, logit, softmax,
log_softmax, xlogy, xlog1py, ndtr, log_ndtr, betaln, entr, rel_entr, kl_div, huber and
pseudo_huber, each a composition of the NumPy surface (no new op, no new lowering: every back
end has them and autodiff gives their derivatives of every order).

Each follows scipy's own formula where that formula is what makes it accurate (logsumexp's
log1p form, logit's log1p pair near 1/2, expit's two tails, log_ndtr's asymptotic series),
and scipy's values at the special points. Selects (``where``) choose between the formulas:
the side not selected never reaches a derivative, and its operands are made safe so that it
computes no inf or NaN of its own. symgrad never imports scipy; ``numpy_api.bind_scipy`` binds
these by identity once the user's code has (a static call keeps scipy's own result).
"""
from __future__ import annotations

import functools
import math
from types import SimpleNamespace

from .numpy_api import DUALS
from .op_base import lift, to_float

np_ = SimpleNamespace(**DUALS)   # NumPy's names, tracing: np_.exp(node) builds IR
# (a Node's == is identity, as hash-consing wants: elementwise equality is np_.equal)
INF, NAN = math.inf, math.nan
SQRT1_2 = math.sqrt(0.5)
LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _float(x):
    """A traced float array of any argument: a node, a number, an array, a (nested) list of
    them (promoted as NumPy does: an integer array is float64)."""
    return to_float(lift(np_.asarray(x)))


def _and(*cs):
    return functools.reduce(np_.logical_and, cs)


def _or(*cs):
    return functools.reduce(np_.logical_or, cs)


def _not(c):
    return np_.logical_not(c)


def _axes(axis, ndim: int):
    return tuple(range(ndim)) if axis is None else axis


# ---- logsumexp, softmax, log_softmax -----------------------------------------------------

_EXP_FINITE_BELOW = {"float64": 700.0, "float32": 80.0}


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """scipy 1.15+'s form (Blanchard, Higham & Higham): the max's own terms are counted as
    ``m`` (their weights' sum) and kept out of the sum, so ``log1p(s / m) + log(m) + max`` is
    accurate when one term dominates; where that is not finite (a slice of -inf, an inf, a
    NaN) it is the plain ``log(sum(b * exp(a)))``, as scipy's. The shift is stop_gradient'ed
    and each max term is ``b * exp(a - max)`` (exactly ``b``), so the derivative is the
    softmax weight of every element, ties included."""
    a = _float(a)
    if b is not None:
        a, b = np_.broadcast_arrays(a, _float(b))
    if a.ndim == 0:
        a, b = np_.reshape(a, (1,)), None if b is None else np_.reshape(b, (1,))
    axes = _axes(axis, a.ndim)
    weighted = a if b is None else np_.where(np_.equal(b, 0), -INF, a)   # b == 0: no term
    top = np_.stop_gradient(np_.max(weighted, axis=axes, keepdims=True))
    at_top = np_.equal(weighted, top)
    if b is None:
        terms = np_.exp(a - top)
    else:   # a zero weight's term is 0 * exp(a - top), so that its b-derivative is exp(a - top),
        # unless exp(a - top) would not be finite (its value is then 0, as scipy's)
        big = _not(a - top < _EXP_FINITE_BELOW.get(a.dtype, 700.0))
        terms = b * np_.exp(np_.where(_and(np_.equal(b, 0), big), -INF, a) - top)
    m = np_.sum(np_.where(at_top, terms, 0.0), axis=axes, keepdims=True)
    s = np_.sum(np_.where(at_top, 0.0, terms), axis=axes, keepdims=True)
    m_is_0 = np_.equal(m, 0)
    s = np_.where(np_.equal(s, 0), s, s / np_.where(m_is_0, 1.0, m))
    sign = np_.sign(s + 1) * np_.sign(m)
    s = np_.where(s < -1, -s - 2, s)
    out = np_.log1p(s) + np_.log(np_.where(m_is_0, 1.0, np_.abs(m))) + top
    if not return_sign:
        out = np_.where(sign < 0, NAN, out)
    # where that is not finite (or m == 0: b's top weights cancel), the plain form. Without b
    # that is only at a max of -inf (the sum is 0), inf or NaN: the max itself is the answer.
    careful = _and(np_.isfinite(out), _not(m_is_0))
    if b is None:
        plain, plain_sign = top, np_.sign(np_.exp(top))
    else:
        shift = np_.where(np_.isfinite(top), top, 0.0)
        total = np_.sum(b * np_.exp(a - shift), axis=axes, keepdims=True)
        plain_sign = np_.sign(total)
        plain = np_.log(np_.abs(total) if return_sign else total) + shift
    out = np_.where(careful, out, plain)
    sign = np_.where(careful, sign, plain_sign)
    if not keepdims:
        out, sign = np_.squeeze(out, axis=axes), np_.squeeze(sign, axis=axes)
    return (out, sign) if return_sign else out


def softmax(x, axis=None):
    """scipy's: ``exp(x - max) / sum``, over the whole array by default (axis=None)."""
    x = _float(x)
    axes = _axes(axis, x.ndim)
    shifted = np_.exp(x - np_.stop_gradient(np_.max(x, axis=axes, keepdims=True)))
    return shifted / np_.sum(shifted, axis=axes, keepdims=True)


def log_softmax(x, axis=None):
    """scipy's: ``x - max - log(sum(exp(x - max)))``, a non-finite max replaced by 0."""
    x = _float(x)
    axes = _axes(axis, x.ndim)
    top = np_.max(x, axis=axes, keepdims=True)
    shifted = x - np_.stop_gradient(np_.where(np_.isfinite(top), top, 0.0))
    return shifted - np_.log(np_.sum(np_.exp(shifted), axis=axes, keepdims=True))


# ---- the logistic pair -------------------------------------------------------------------

def expit(x, /):
    """1 / (1 + exp(-x)) from exp(-|x|) alone: nothing overflows on either tail, exactly 0.5
    at 0. (-|x| is spelled as a select so its derivative at 0 is the x >= 0 side's, not
    abs's 0.)"""
    x = _float(x)
    up = x >= 0
    e = np_.exp(np_.where(up, -x, x))
    # 1 + |e|, not 1 + e: autodiff's rule for 1 / (1 + exp(u)) (finite where exp overflows,
    # which here it never does) keeps only absolute accuracy, s (1 - s): expit'(50) would be
    # 0. The plain chain rule keeps e / (1 + e)^2 relative on both tails.
    den = 1 + np_.abs(e)
    return np_.where(up, 1 / den, e / den)


def logit(x, /):
    """scipy's: log(x / (1 - x)), and log1p(2(x - 1/2)) - log1p(-2(x - 1/2)) on [0.3, 0.65],
    where the ratio loses digits."""
    x = _float(x)
    near_half = _and(x >= 0.3, x <= 0.65)
    s = 2 * (np_.where(near_half, x, 0.5) - 0.5)
    far = np_.where(near_half, 0.25, x)
    return np_.where(near_half, np_.log1p(s) - np_.log1p(-s), np_.log(far / (1 - far)))


# ---- x log y -----------------------------------------------------------------------------

def _times_log(x, y, log, lo, safe):
    """``x * log(y)``, 0 where x == 0 and y is not NaN (scipy's), by making y safe there
    (``safe``, where y is outside (lo, inf)) rather than selecting a constant: the x-derivative
    at x == 0 is still log(y) (JAX's), never 0 * inf = NaN, and the y-derivative there is 0."""
    x, y = np_.broadcast_arrays(_float(x), _float(y))
    replace = _and(np_.equal(x, 0), _not(np_.isnan(y)), _not(_and(y > lo, y < INF)))
    return x * log(np_.where(replace, safe, y))


def xlogy(x, y, /):
    return _times_log(x, y, np_.log, 0.0, 1.0)


def xlog1py(x, y, /):
    return _times_log(x, y, np_.log1p, -1.0, 0.0)


# ---- the normal distribution -------------------------------------------------------------

def ndtr(x, /):
    """The standard normal CDF, erfc(-x / sqrt 2) / 2: relative accuracy in the left tail,
    where 1 + erf would round to 0."""
    return 0.5 * np_.erfc(-_float(x) * SQRT1_2)


# log_ndtr's left tail: log Phi(a) = -a^2/2 - log(-a) - log sqrt(2 pi) + log(sum_i c_i / a^(2i)),
# c_i = (-1)^i (2i - 1)!!, the asymptotic series cephes sums (scipy before its erfcx form). Ten
# terms are below an ulp from the threshold on: 6e-18 at a = -20 (float64), 7e-12 at -10
# (float32, where erfc underflows near -13 already).
_SERIES = [(-1) ** i * math.prod(range(1, 2 * i, 2)) for i in range(1, 11)]
_TAIL_BELOW = {"float64": -20.0, "float32": -10.0}


def log_ndtr(x, /):
    """log Phi(x): log1p(-Phi(-x)) above -1 (no log of a number near 1), log(Phi(x)) down to
    the threshold, the asymptotic series below it (Phi underflows: at -40 it is 1e-350)."""
    a = _float(x)
    below = _TAIL_BELOW.get(a.dtype, -20.0)
    left, upper = a < below, a > -1
    t = np_.where(left, a, below)                # each formula on its own side only: the
    mid = np_.where(_or(left, upper), -1.0, a)   # others' operands stay finite
    up = np_.where(a <= -1, 0.0, a)              # (NaN reaches this one, and the result)
    z = 1 / (t * t)
    series = _SERIES[-1]
    for c in reversed(_SERIES[:-1]):
        series = series * z + c
    tail = -0.5 * t * t - np_.log(-t) - LOG_SQRT_2PI + np_.log1p(z * series)
    return np_.where(left, tail, np_.where(upper, np_.log1p(-ndtr(-up)), np_.log(ndtr(mid))))


# ---- beta --------------------------------------------------------------------------------

_ASYMP = 1e6   # cephes' lbeta: past this ratio lgamma(a + b) - lgamma(a) cancels


def betaln(a, b, /):
    """log|B(a, b)| = lgamma(a) + lgamma(b) - lgamma(a + b); where the larger argument is
    over 1e6 and over 1e6 times the smaller, cephes' asymptotic form (the difference of the two
    big lgammas would cancel): lgamma(b) - b log a + b(1-b)/(2a) + b(1-b)(1-2b)/(12a^2)
    - b^2(1-b)^2/(12a^3), with a the larger."""
    a, b = np_.broadcast_arrays(_float(a), _float(b))
    swap = np_.abs(a) < np_.abs(b)
    big, small = np_.where(swap, b, a), np_.where(swap, a, b)
    asym = _and(np_.abs(big) > _ASYMP * np_.abs(small), big > _ASYMP)
    u = np_.where(asym, big, 2 * _ASYMP)   # safe operands off the asymptotic side
    v = np_.where(asym, small, 1.0)
    w = v * (1 - v)
    asymptotic = (np_.lgamma(v) - v * np_.log(u) + w / (2 * u) + w * (1 - 2 * v) / (12 * u * u)
                  - w * w / (12 * u * u * u))
    return np_.where(asym, asymptotic, np_.lgamma(a) + np_.lgamma(b) - np_.lgamma(a + b))


# ---- entropies ---------------------------------------------------------------------------

def _zero_of_infinite_slope(x, at):
    """0 where ``at``, whose x-derivative there is +inf (as x log x's is -inf at 0: -log x - 1
    from the right, JAX's and PyTorch's entr' at 0): sqrt(x) - stop_gradient(sqrt(x)), of x
    where ``at`` and of 0 elsewhere (that side is never selected)."""
    root = np_.sqrt(np_.where(at, x, 0.0))
    return root - np_.stop_gradient(root)


def entr(x, /):
    """-x log x for x > 0, 0 at 0 (its derivative +inf there, the right-hand one), -inf below;
    NaN stays NaN."""
    x = _float(x)
    zero = np_.equal(x, 0)
    safe = np_.where(x > 0, x, 1.0)
    return np_.where(x < 0, -INF, np_.where(zero, _zero_of_infinite_slope(x, zero),
                                             -x * np_.log(safe)))


def _relative(x, y, inside, at_zero):
    """scipy's rel_entr / kl_div case split: NaN if either is, ``inside`` where both are
    positive, ``at_zero`` where x == 0 <= y, inf elsewhere."""
    x, y = np_.broadcast_arrays(_float(x), _float(y))
    both = _and(x > 0, y > 0)
    xs, ys = np_.where(both, x, 1.0), np_.where(both, y, 1.0)
    inside = inside(xs, ys)
    zero = _and(np_.equal(x, 0), y >= 0)    # x log(x / y)'s x-derivative there is -inf
    outside = np_.where(zero, at_zero(y) - _zero_of_infinite_slope(x, zero), INF)
    return np_.where(_or(np_.isnan(x), np_.isnan(y)), NAN, np_.where(both, inside, outside))


def rel_entr(x, y, /):
    return _relative(x, y, lambda x, y: x * np_.log(x / y), np_.zeros_like)


def kl_div(x, y, /):
    return _relative(x, y, lambda x, y: x * np_.log(x / y) - x + y, lambda y: y)


# ---- robust losses -----------------------------------------------------------------------

def huber(delta, r, /):
    """r^2 / 2 for |r| <= delta, delta (|r| - delta / 2) beyond; inf for delta < 0."""
    delta, r = np_.broadcast_arrays(_float(delta), _float(r))
    quadratic = np_.abs(r) <= delta
    return np_.where(delta < 0, INF,
                     np_.where(quadratic, 0.5 * r * r, delta * (np_.abs(r) - 0.5 * delta)))


def pseudo_huber(delta, r, /):
    """delta^2 (sqrt(1 + (r/delta)^2) - 1) as scipy's delta^2 expm1(log1p((r/delta)^2) / 2),
    exact for small r / delta; 0 for delta == 0, inf for delta < 0."""
    delta, r = np_.broadcast_arrays(_float(delta), _float(r))
    d = np_.where(delta <= 0, 1.0, delta)    # NaN passes through
    v = r / d
    smooth = d * d * np_.expm1(0.5 * np_.log1p(v * v))
    # scipy's 0 at delta == 0 and at r == 0; the latter selected only where the formula would
    # give inf * 0 (an infinite or NaN delta), so the r-derivatives at r == 0 stay the formula's
    zero = _or(np_.equal(delta, 0), _and(np_.equal(r, 0), _not(np_.isfinite(delta))))
    return np_.where(delta < 0, INF, np_.where(zero, 0.0, smooth))


# scipy.special's name -> the builder (numpy_api.bind_scipy binds them)
BUILDERS = {"logsumexp": logsumexp, "softmax": softmax, "log_softmax": log_softmax,
            "expit": expit, "logit": logit, "xlogy": xlogy, "xlog1py": xlog1py, "ndtr": ndtr,
            "log_ndtr": log_ndtr, "betaln": betaln, "entr": entr, "rel_entr": rel_entr,
            "kl_div": kl_div, "huber": huber, "pseudo_huber": pseudo_huber}
