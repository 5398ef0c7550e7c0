"""TensorFlow-semantics clipping: eager values against independent NumPy implementations
(edge cases: zero norm, None, inf/NaN, axes, broadcasting bounds), and derivatives when the
clip functions are used inside differentiated functions."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import symgrad as sg
from symgrad.train.clip import clip_by_global_norm, clip_by_norm, clip_by_value  # (sg.clip is np.clip)


# -- independent references (straight from the TF docstrings) ------------------------------------
def ref_clip_by_norm(t, c, axes=None):
    t = np.asarray(t, dtype=float)
    norm = np.sqrt(np.sum(np.square(t), axis=axes, keepdims=True))
    with np.errstate(invalid="ignore"):
        return t * c / np.maximum(norm, c)


def ref_clip_by_global_norm(ts, c, use_norm=None):
    if use_norm is None:
        use_norm = np.sqrt(sum(float(np.sum(np.square(t))) for t in ts if t is not None))
    if not np.isfinite(use_norm):
        return [None if t is None else np.full(np.shape(t), np.nan) for t in ts], use_norm
    factor = 1.0 if use_norm <= c else c / use_norm
    return [None if t is None else np.asarray(t) * factor for t in ts], use_norm


RNG = np.random.default_rng(1234)


# -- clip_by_value ------------------------------------------------------------------------------
def test_clip_by_value_matches_np_clip():
    t = RNG.normal(size=(4, 5)) * 3
    np.testing.assert_array_equal(sg.clip_by_value(t, -1.0, 2.0), np.clip(t, -1.0, 2.0))


def test_clip_by_value_broadcast_bounds_and_nan():
    t = np.array([[-3.0, 0.5, np.nan], [4.0, -0.2, 1.0]])
    lo = np.array([-1.0, 0.0, -1.0])
    hi = np.array([[1.0], [0.5]])
    out = sg.clip_by_value(t, lo, hi)
    np.testing.assert_array_equal(out, [[-1.0, 0.5, np.nan], [0.5, 0.0, 0.5]])


def test_clip_by_value_rejects_enlarging_bounds():
    with pytest.raises(ValueError, match="enlarge"):
        sg.clip_by_value(np.zeros(3), np.zeros((2, 3)), 1.0)


def test_clip_by_value_min_above_max_gives_min_like_tf():
    # TF computes maximum(minimum(t, hi), lo): with lo > hi every element becomes lo
    np.testing.assert_array_equal(sg.clip_by_value(np.array([-5.0, 0.0, 5.0]), 2.0, 1.0), [2.0] * 3)


# -- clip_by_norm -------------------------------------------------------------------------------
@pytest.mark.parametrize("axes", [None, 0, 1, -1, (0, 1), [1], (0, 2)])
def test_clip_by_norm_against_reference(axes):
    t = RNG.normal(size=(3, 4, 5))
    np.testing.assert_allclose(sg.clip_by_norm(t, 1.5, axes=axes),
                               ref_clip_by_norm(t, 1.5, tuple(axes) if isinstance(axes, list) else axes),
                               rtol=1e-14)


def test_clip_by_norm_small_norm_and_zero_norm_unchanged():
    t = np.array([0.3, -0.4])                    # norm 0.5 < 1
    np.testing.assert_allclose(sg.clip_by_norm(t, 1.0), t, rtol=1e-15)
    z = np.zeros((2, 3))
    out = sg.clip_by_norm(z, 1.0)
    np.testing.assert_array_equal(out, z)
    # a zero row with axes: that row stays zero, the other is clipped
    t = np.array([[0.0, 0.0], [3.0, 4.0]])
    np.testing.assert_allclose(sg.clip_by_norm(t, 1.0, axes=1), [[0.0, 0.0], [0.6, 0.8]], rtol=1e-15)


def test_clip_by_norm_inf_entry_follows_tf():
    # l2norm = inf: the inf entry becomes inf/inf = NaN, finite entries 0 (as in TF)
    with np.errstate(invalid="ignore"):     # NumPy warns about inf / inf, as it should
        out = sg.clip_by_norm(np.array([np.inf, 1.0, -2.0]), 1.0)
    assert np.isnan(out[0]) and out[1] == 0.0 and out[2] == 0.0


def test_clip_by_norm_keeps_dtype_and_norm_bound():
    t = RNG.normal(size=50).astype(np.float32)
    out = sg.clip_by_norm(t, np.float32(0.5))
    assert out.dtype == np.float32
    assert np.linalg.norm(out) <= 0.5 * (1 + 1e-6)


def test_clip_by_norm_rejects_enlarging_clip_norm():
    with pytest.raises(ValueError, match="enlarge"):
        sg.clip_by_norm(np.ones(3), np.ones((2, 3)))


# -- global_norm / clip_by_global_norm -------------------------------------------------------------
def test_global_norm_ignores_none():
    ts = [np.array([3.0]), None, np.array([[4.0, 0.0]])]
    assert float(sg.global_norm(ts)) == 5.0
    with pytest.raises(TypeError):
        sg.global_norm(np.ones(3))


@pytest.mark.parametrize("c", [0.1, 1.0, 49.0, 1e3])
def test_clip_by_global_norm_against_reference(c):
    ts = [RNG.normal(size=(3, 4)), None, RNG.normal(size=7), np.array(2.0)]
    out, norm = sg.clip_by_global_norm(ts, c)
    ref, ref_norm = ref_clip_by_global_norm(ts, c)
    np.testing.assert_allclose(norm, ref_norm, rtol=1e-14)
    assert out[1] is None
    for o, r in zip(out, ref):
        if r is not None:
            np.testing.assert_allclose(o, r, rtol=1e-14)


def test_clip_by_global_norm_use_norm():
    ts = [np.array([1.0, 1.0])]
    out, norm = sg.clip_by_global_norm(ts, 1.0, use_norm=4.0)
    assert norm == 4.0
    np.testing.assert_allclose(out[0], [0.25, 0.25], rtol=1e-15)


def test_clip_by_global_norm_zero_norm_returns_inputs():
    ts = [np.zeros(3), None, np.zeros((2, 2))]
    out, norm = sg.clip_by_global_norm(ts, 1.0)
    assert float(norm) == 0.0 and out[1] is None
    np.testing.assert_array_equal(out[0], ts[0])
    np.testing.assert_array_equal(out[2], ts[2])


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_clip_by_global_norm_nonfinite_makes_everything_nan(bad):
    ts = [np.array([1.0, bad]), None, np.array([0.5])]
    with np.errstate(all="raise"):        # and without a floating-point warning
        out, norm = sg.clip_by_global_norm(ts, 1.0)
    assert out[1] is None
    assert np.all(np.isnan(out[0])) and np.all(np.isnan(out[2]))
    assert np.isinf(norm) if np.isinf(bad) else np.isnan(norm)
    # a non-finite use_norm does the same even when the tensors are finite
    out, _ = sg.clip_by_global_norm([np.ones(2)], 1.0, use_norm=np.inf)
    assert np.all(np.isnan(out[0]))


def test_clip_by_global_norm_requires_a_sequence():
    with pytest.raises(TypeError):
        sg.clip_by_global_norm(np.ones(3), 1.0)


def test_clip_by_global_norm_preserves_float32():
    ts = [np.ones(4, dtype=np.float32) * 3]
    out, _ = sg.clip_by_global_norm(ts, 1.0)
    assert out[0].dtype == np.float32
    np.testing.assert_allclose(out[0], 0.5, rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 6), elements=st.floats(-1e3, 1e3)),
       st.floats(1e-3, 1e3))
def test_clip_by_norm_property(t, c):
    out = sg.clip_by_norm(t, c)
    norm = np.linalg.norm(t)
    assert np.linalg.norm(out) <= c * (1 + 1e-12) + 1e-300
    if norm <= c:
        np.testing.assert_allclose(out, t, rtol=1e-14, atol=1e-300)   # t * c may be subnormal
    np.testing.assert_allclose(out, ref_clip_by_norm(t, c), rtol=1e-14, atol=1e-300)


# -- inside differentiated functions ----------------------------------------------------------
def by_norm(x):
    return np.sum(sg.clip_by_norm(x, 2.0) ** 3)


def by_norm_axes(x):
    return np.sum(np.sin(sg.clip_by_norm(x, 1.0, axes=1)) * x)


def by_value(x):
    return np.sum(sg.clip_by_value(x, -1.0, 1.0) * x)


def by_global_norm(x, y):
    clipped, norm = sg.clip_by_global_norm([x, None, y], 1.5)
    return np.sum(clipped[0] ** 3) * np.sum(np.sin(clipped[2])) + norm


def by_global_norm_use_norm(x, n):
    clipped, _ = sg.clip_by_global_norm([x], 0.5, use_norm=n)
    return np.sum(clipped[0] * np.arange(3.0))


CASES = [
    (by_norm, (np.array([3.0, -4.0, 0.5]),), 0),
    (by_norm, (np.array([0.3, -0.4, 0.5]),), 0),               # below the clip norm
    (by_norm_axes, (np.array([[1.0, 2.0], [0.1, 0.2]]),), 0),
    (by_value, (np.array([3.0, -0.4, 0.5, -2.0]),), 0),
    (by_global_norm, (np.array([3.0, -4.0, 0.5]), np.array([0.3, 0.7])), 0),
    (by_global_norm, (np.array([3.0, -4.0, 0.5]), np.array([0.3, 0.7])), 1),
    (by_global_norm_use_norm, (np.array([1.0, 2.0, 3.0]), 2.0), 1),
    (by_global_norm_use_norm, (np.array([1.0, 2.0, 3.0]), 2.0), 0),
]


@pytest.mark.parametrize("target", ["cpu", "python"])
@pytest.mark.parametrize("fn,args,wrt", CASES, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_clip_derivatives_match_finite_differences(fn, args, wrt, target):
    f = sg.differentiate(fn, wrt=wrt, target=target)
    assert np.allclose(f(*args), fn(*args), rtol=1e-13)   # traced value == eager value
    assert sg.check_grad(f, *args, wrt=wrt) < 1e-6


def test_clip_by_value_gradient_is_tf_rule_at_ties():
    # TF's _ClipByValueGrad passes the gradient where lo <= t <= hi, boundaries included
    f = sg.differentiate(lambda_free_sum_clip)
    np.testing.assert_array_equal(f.grad(np.array([-2.0, -1.0, 0.0, 1.0, 2.0])), [0, 1, 1, 1, 0])


def lambda_free_sum_clip(x):
    return np.sum(sg.clip_by_value(x, -1.0, 1.0))


def test_clip_by_value_gradient_wrt_bounds():
    def f(x, lo, hi):
        return np.sum(sg.clip_by_value(x, lo, hi))
    g = sg.grad(f, wrt=(1, 2))
    glo, ghi = g(np.array([-3.0, -2.0, 0.0, 5.0]), -1.0, 1.0)
    assert (glo, ghi) == (2.0, 1.0)


def test_gradients_finite_at_zero_norm():
    f = sg.differentiate(by_norm)
    assert np.all(np.isfinite(f.grad(np.zeros(3))))
    g = sg.grad(by_global_norm, wrt=(0, 1))
    gx, gy = g(np.zeros(3), np.zeros(2))
    assert np.all(np.isfinite(gx)) and np.all(np.isfinite(gy))


def test_gradient_of_clip_by_norm_is_identity_below_threshold():
    def f(x):
        return np.sum(sg.clip_by_norm(x, 10.0) * np.array([1.0, 2.0, 3.0]))
    # d/dx (x * c / c) = 1 elementwise, times the weights; no derivative through the norm
    np.testing.assert_allclose(sg.grad(f)(np.array([1.0, 1.0, 1.0])), [1.0, 2.0, 3.0], rtol=1e-15)


def test_exports():
    assert sg.clip_by_norm is clip_by_norm
    assert sg.clip_by_global_norm is clip_by_global_norm
    assert sg.clip_by_value is clip_by_value
    assert "clip_by_global_norm" in sg.__all__
