"""Optimizers: first steps against hand-computed Keras updates, multi-step agreement with an
independent NumPy reference, every clip option, in-place updates (0-d, float32, strided
views), the API contract (compute_gradients / apply_gradients / minimize) and convergence."""
import math

import numpy as np
import pytest

import symgrad as sg
from symgrad import api, optim
from symgrad.train.clip import clip_by_global_norm, clip_by_norm

EPS = 1e-7


def scalar_step(opt, w, g):
    var = np.array(w)
    opt.apply_gradients([(g, var)])
    return float(var)


# -- first steps, by hand (scalar variable, gradient 0.5 then -1.0) --------------------------------
def test_sgd_by_hand():
    opt, w = sg.optim.SGD(0.1), np.array(1.0)
    opt.apply_gradients([(0.5, w)])
    assert float(w) == pytest.approx(0.95, abs=1e-15)
    opt.apply_gradients([(-1.0, w)])
    assert float(w) == pytest.approx(1.05, abs=1e-15)
    assert opt.iterations == 2


def test_sgd_momentum_by_hand():
    opt, w = sg.optim.SGD(0.1, momentum=0.9), np.array(1.0)
    opt.apply_gradients([(0.5, w)])            # v = -0.05
    assert float(w) == pytest.approx(0.95, abs=1e-15)
    opt.apply_gradients([(-1.0, w)])           # v = 0.9 * -0.05 + 0.1 = 0.055
    assert float(w) == pytest.approx(1.005, abs=1e-15)
    assert float(opt.get_slot(w, "momentum")) == pytest.approx(0.055, abs=1e-15)


def test_sgd_nesterov_by_hand():
    opt, w = sg.optim.SGD(0.1, momentum=0.9, nesterov=True), np.array(1.0)
    opt.apply_gradients([(0.5, w)])            # v = -0.05; w += 0.9 * v - 0.05
    assert float(w) == pytest.approx(1.0 - 0.045 - 0.05, abs=1e-15)
    opt.apply_gradients([(-1.0, w)])           # v = 0.055; w += 0.9 * 0.055 + 0.1
    assert float(w) == pytest.approx(0.905 + 0.0495 + 0.1, abs=1e-15)


def test_adam_by_hand():
    opt, w = sg.optim.Adam(0.1), np.array(1.0)
    assert (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.999, 1e-7)   # TF defaults
    opt.apply_gradients([(0.5, w)])
    # m = 0.05, v = 0.00025, alpha = 0.1 * sqrt(0.001) / 0.1
    w1 = 1.0 - 0.05 * math.sqrt(0.001) / (math.sqrt(0.00025) + EPS)
    assert float(w) == pytest.approx(w1, abs=1e-15)
    opt.apply_gradients([(-1.0, w)])
    # m = 0.05 + (-1 - 0.05) * 0.1 = -0.055, v = 0.00025 + (1 - 0.00025) * 0.001
    m, v = -0.055, 0.00025 + 0.99975 * 0.001
    alpha = 0.1 * math.sqrt(1 - 0.999 ** 2) / (1 - 0.9 ** 2)
    assert float(w) == pytest.approx(w1 - m * alpha / (math.sqrt(v) + EPS), abs=1e-15)
    assert float(opt.get_slot(w, "m")) == pytest.approx(m, abs=1e-15)
    assert float(opt.get_slot(w, "v")) == pytest.approx(v, abs=1e-15)


def test_adam_amsgrad_by_hand():
    opt, w = sg.optim.Adam(0.1, beta_2=0.5, amsgrad=True), np.array(1.0)
    opt.apply_gradients([(2.0, w)])    # m = 0.2, v = 2, v_hat = 2
    w1 = 1.0 - 0.2 * (0.1 * math.sqrt(0.5) / 0.1) / (math.sqrt(2.0) + EPS)
    assert float(w) == pytest.approx(w1, abs=1e-15)
    opt.apply_gradients([(0.0, w)])    # m = 0.18, v = 1 but v_hat stays 2
    alpha = 0.1 * math.sqrt(1 - 0.25) / (1 - 0.81)
    assert float(w) == pytest.approx(w1 - 0.18 * alpha / (math.sqrt(2.0) + EPS), abs=1e-15)
    assert float(opt.get_slot(w, "v")) == 1.0 and float(opt.get_slot(w, "v_hat")) == 2.0


def test_rmsprop_by_hand():
    opt, w = sg.optim.RMSProp(0.01), np.array(1.0)
    opt.apply_gradients([(0.5, w)])    # velocity = 0.1 * 0.25
    w1 = 1.0 - 0.01 * 0.5 / math.sqrt(0.025 + EPS)
    assert float(w) == pytest.approx(w1, abs=1e-15)
    opt.apply_gradients([(-1.0, w)])   # velocity = 0.9 * 0.025 + 0.1
    assert float(w) == pytest.approx(w1 + 0.01 / math.sqrt(0.1225 + EPS), abs=1e-15)


def test_rmsprop_centered_momentum_by_hand():
    opt, w = sg.optim.RMSProp(0.01, momentum=0.5, centered=True), np.array(1.0)
    opt.apply_gradients([(0.5, w)])    # velocity 0.025, average 0.05
    inc1 = 0.01 * 0.5 / math.sqrt(0.025 - 0.05 ** 2 + EPS)
    assert float(w) == pytest.approx(1.0 - inc1, abs=1e-15)
    opt.apply_gradients([(-1.0, w)])   # velocity 0.1225, average 0.045 - 0.1 = -0.055
    inc2 = -0.01 / math.sqrt(0.1225 - 0.055 ** 2 + EPS)
    assert float(w) == pytest.approx(1.0 - inc1 - (0.5 * inc1 + inc2), abs=1e-15)


def test_adagrad_by_hand():
    opt, w = sg.optim.Adagrad(0.1), np.array(1.0)
    assert opt.initial_accumulator_value == 0.1
    opt.apply_gradients([(0.5, w)])    # accumulator 0.1 + 0.25
    w1 = 1.0 - 0.1 * 0.5 / math.sqrt(0.35 + EPS)
    assert float(w) == pytest.approx(w1, abs=1e-15)
    opt.apply_gradients([(-1.0, w)])   # accumulator 1.35
    assert float(w) == pytest.approx(w1 + 0.1 / math.sqrt(1.35 + EPS), abs=1e-15)


# -- an independent NumPy reference, many steps on arrays ---------------------------------------
class Reference:
    """The Keras formulas, written out with NumPy temporaries."""

    def __init__(self, kind, **hp):
        self.kind, self.hp, self.state, self.t = kind, hp, {}, 0

    def step(self, w, g):
        hp, s = self.hp, self.state
        lr = hp["learning_rate"]
        self.t += 1
        if self.kind == "sgd":
            mom = hp.get("momentum", 0.0)
            if mom == 0:
                return w - lr * g
            s["v"] = mom * s.get("v", 0 * w) - lr * g
            if hp.get("nesterov"):
                return w + mom * s["v"] - lr * g
            return w + s["v"]
        if self.kind == "adam":
            b1, b2 = hp.get("beta_1", 0.9), hp.get("beta_2", 0.999)
            s["m"] = b1 * s.get("m", 0 * w) + (1 - b1) * g
            s["v"] = b2 * s.get("v", 0 * w) + (1 - b2) * g * g
            v = s["v"]
            if hp.get("amsgrad"):
                s["vh"] = np.maximum(s.get("vh", 0 * w), v)
                v = s["vh"]
            m_hat, v_hat_sqrt = s["m"] / (1 - b1 ** self.t), np.sqrt(v) / math.sqrt(1 - b2 ** self.t)
            return w - lr * m_hat / (v_hat_sqrt + EPS / math.sqrt(1 - b2 ** self.t))
        if self.kind == "rmsprop":
            rho, mom = hp.get("rho", 0.9), hp.get("momentum", 0.0)
            s["ms"] = rho * s.get("ms", 0 * w) + (1 - rho) * g ** 2
            denom = s["ms"] + EPS
            if hp.get("centered"):
                s["mg"] = rho * s.get("mg", 0 * w) + (1 - rho) * g
                denom = denom - s["mg"] ** 2
            inc = lr * g / np.sqrt(denom)
            if mom > 0:
                s["mom"] = mom * s.get("mom", 0 * w) + inc
                return w - s["mom"]
            return w - inc
        if self.kind == "adagrad":
            s["acc"] = s.get("acc", np.full_like(w, hp.get("initial_accumulator_value", 0.1))) + g * g
            return w - lr * g / np.sqrt(s["acc"] + EPS)
        raise ValueError(self.kind)


CONFIGS = [
    ("sgd", sg.optim.SGD, dict(learning_rate=0.05)),
    ("sgd", sg.optim.SGD, dict(learning_rate=0.05, momentum=0.8)),
    ("sgd", sg.optim.SGD, dict(learning_rate=0.05, momentum=0.8, nesterov=True)),
    ("adam", sg.optim.Adam, dict(learning_rate=0.05)),
    ("adam", sg.optim.Adam, dict(learning_rate=0.05, beta_1=0.5, beta_2=0.9, amsgrad=True)),
    ("rmsprop", sg.optim.RMSProp, dict(learning_rate=0.01)),
    ("rmsprop", sg.optim.RMSProp, dict(learning_rate=0.01, centered=True)),
    ("rmsprop", sg.optim.RMSProp, dict(learning_rate=0.01, momentum=0.7)),
    ("rmsprop", sg.optim.RMSProp, dict(learning_rate=0.01, momentum=0.7, centered=True)),
    ("adagrad", sg.optim.Adagrad, dict(learning_rate=0.1)),
    ("adagrad", sg.optim.Adagrad, dict(learning_rate=0.1, initial_accumulator_value=1.0)),
]
IDS = [f"{k}-{i}" for i, (k, _, _) in enumerate(CONFIGS)]


@pytest.mark.parametrize("kind,cls,hp", CONFIGS, ids=IDS)
def test_steps_match_reference(kind, cls, hp):
    rng = np.random.default_rng(7)
    opt, ref = cls(**hp), Reference(kind, **hp)
    w = rng.normal(size=(3, 4))
    b = np.array(0.3)
    w_ref, b_ref = w.copy(), 0.3
    ref_b = Reference(kind, **hp)
    for _ in range(5):
        gw, gb = rng.normal(size=(3, 4)), float(rng.normal())
        opt.apply_gradients([(gw, w), (gb, b)])
        w_ref, b_ref = ref.step(w_ref, gw), ref_b.step(np.array(b_ref), gb)
        np.testing.assert_allclose(w, w_ref, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(b, b_ref, rtol=1e-12, atol=1e-14)
    assert b.shape == () and w.shape == (3, 4)


@pytest.mark.parametrize("kind,cls,hp", CONFIGS[::2], ids=IDS[::2])
def test_float32_variables_stay_float32(kind, cls, hp):
    opt = cls(**hp)
    w = np.linspace(-1, 1, 6).astype(np.float32)
    w_ref = w.astype(np.float64)
    ref = Reference(kind, **hp)
    for k in range(3):
        g = np.cos(np.arange(6.0) + k)
        opt.apply_gradients([(g.astype(np.float32), w)])
        w_ref = ref.step(w_ref, g.astype(np.float32).astype(np.float64))
    assert w.dtype == np.float32
    np.testing.assert_allclose(w, w_ref, rtol=2e-5, atol=2e-6)


# -- clip options ---------------------------------------------------------------------------------
GRADS = [np.array([3.0, -4.0]), np.array([[0.5, 1.0], [2.0, -0.1]]), np.array(-7.0)]


def run_with(cls, grads_list, **kw):
    opt = cls(learning_rate=0.1, **kw)
    vars_ = [np.ones_like(g) for g in grads_list[0]]
    for grads in grads_list:
        opt.apply_gradients(zip(grads, vars_))
    return vars_


@pytest.mark.parametrize("cls", [sg.optim.SGD, sg.optim.Adam, sg.optim.RMSProp, sg.optim.Adagrad])
@pytest.mark.parametrize("option", ["clipnorm", "global_clipnorm", "clipvalue"])
def test_clip_options_equal_clipping_first(cls, option):
    grads_list = [GRADS, [g * -0.1 for g in GRADS]]
    c = 1.5
    if option == "clipnorm":
        clipped = [[clip_by_norm(g, c) for g in grads] for grads in grads_list]
    elif option == "global_clipnorm":
        clipped = [clip_by_global_norm(grads, c)[0] for grads in grads_list]
    else:
        clipped = [[np.clip(g, -c, c) for g in grads] for grads in grads_list]
    got = run_with(cls, grads_list, **{option: c})
    want = run_with(cls, clipped)
    unclipped = run_with(cls, grads_list)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-15)
    assert any(not np.allclose(a, b) for a, b in zip(got, unclipped))   # clipping did something


def test_clip_option_precedence_and_validation():
    with pytest.raises(ValueError, match="Only one"):
        sg.optim.SGD(0.1, clipnorm=1.0, global_clipnorm=1.0)
    # Keras applies clipnorm and ignores clipvalue when both are set
    a = run_with(sg.optim.SGD, [GRADS], clipnorm=1.0, clipvalue=0.01)
    b = run_with(sg.optim.SGD, [GRADS], clipnorm=1.0)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    # options <= 0 are off, as in Keras
    c = run_with(sg.optim.SGD, [GRADS], clipvalue=0.0)
    d = run_with(sg.optim.SGD, [GRADS])
    for x, y in zip(c, d):
        np.testing.assert_array_equal(x, y)


def test_global_clipnorm_with_inf_gradient_makes_nan_like_tf():
    w, v = np.ones(2), np.ones(3)
    sg.optim.SGD(0.1, global_clipnorm=1.0).apply_gradients([(np.array([np.inf, 0.0]), w),
                                                            (np.zeros(3), v)])
    assert np.all(np.isnan(w)) and np.all(np.isnan(v))


def test_clipnorm_zero_gradient_unchanged():
    w = np.ones(3)
    sg.optim.SGD(0.1, clipnorm=1.0).apply_gradients([(np.zeros(3), w)])
    np.testing.assert_array_equal(w, np.ones(3))


# -- API contract ---------------------------------------------------------------------------------
def least_squares(w, b, x, y):
    r = x @ w + b - y
    return np.mean(r * r)


def make_data(n=64, d=4, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    y = x @ np.arange(1.0, d + 1) - 0.5 + 0.01 * rng.normal(size=n)
    return x, y


def test_compute_gradients_pairs_and_values():
    x, y = make_data()
    w, b = np.zeros(4), np.array(0.0)
    opt = sg.optim.SGD(0.1)
    pairs = opt.compute_gradients(least_squares, [w, b], x, y)
    assert pairs[0][1] is w and pairs[1][1] is b
    r = x @ w + 0.0 - y
    np.testing.assert_allclose(pairs[0][0], 2 * x.T @ r / len(y), rtol=1e-12)
    np.testing.assert_allclose(pairs[1][0], 2 * np.mean(r), rtol=1e-12)
    assert opt.last_loss == pytest.approx(np.mean(r * r), rel=1e-14)


def test_minimize_returns_loss_and_uses_one_compiled_call(monkeypatch):
    x, y = make_data()
    w, b = np.zeros(4), np.array(0.0)
    kinds = []
    original = api.Function.__call__

    def counting(self, *args, **kwargs):
        kinds.append((self._kind, self.fn.__name__))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(api.Function, "__call__", counting)
    before = least_squares(w, b, x, y)
    value = sg.optim.Adam(0.1).minimize(least_squares, [w, b], x, y)
    assert value == pytest.approx(before, rel=1e-14)
    # the loss is evaluated once, by value_and_grad; the rest are the two update kernels
    assert kinds == [("value_and_grad", "least_squares"), ("trace", "_adam_kernel"),
                     ("trace", "_adam_kernel")]
    assert np.all(w != 0) and float(b) != 0.0


def test_minimize_accepts_a_symgrad_function():
    x, y = make_data()
    loss = sg.differentiate(least_squares)
    w, b = np.zeros(4), np.array(0.0)
    opt = sg.optim.SGD(0.1)
    first = opt.minimize(loss, [w, b], x, y)
    second = opt.minimize(loss, [w, b], x, y)
    assert second < first


def test_apply_gradients_in_place_on_views_and_scalars():
    big = np.zeros(10)
    view = big[::2]
    scalar = np.array(2.0)
    opt = sg.optim.Adam(0.1)
    opt.apply_gradients([(np.ones(5), view), (1.0, scalar)])
    assert np.all(big[::2] < 0) and np.all(big[1::2] == 0)
    assert scalar.shape == () and float(scalar) < 2.0
    opt.apply_gradients([(np.ones(5), view), (1.0, scalar)])   # slots found again for the view
    assert opt.iterations == 2


def test_none_gradients_are_skipped_with_a_warning():
    w, v = np.ones(2), np.ones(2)
    opt = sg.optim.SGD(0.5)
    with pytest.warns(UserWarning, match="do not exist"):
        opt.apply_gradients([(np.ones(2), w), (None, v)])
    np.testing.assert_array_equal(w, 0.5)
    np.testing.assert_array_equal(v, 1.0)
    with pytest.raises(ValueError, match="No gradients"):
        opt.apply_gradients([(None, v)])


def test_bad_variables_are_rejected():
    opt = sg.optim.SGD(0.1)
    with pytest.raises(TypeError, match="float NumPy arrays"):
        opt.apply_gradients([(1.0, 1.0)])
    with pytest.raises(TypeError, match="float NumPy arrays"):
        opt.apply_gradients([(np.ones(2), np.ones(2, dtype=int))])
    with pytest.raises(ValueError, match="shape"):
        opt.apply_gradients([(np.ones(3), np.ones(2))])
    with pytest.raises(ValueError, match="momentum"):
        sg.optim.SGD(0.1, momentum=1.5)


def test_learning_rate_schedule_is_called_with_iterations():
    seen = []

    def schedule(step):
        seen.append(step)
        return 0.1 / (1 + step)

    w = np.array(0.0)
    opt = sg.optim.SGD(schedule)
    for _ in range(3):
        opt.apply_gradients([(1.0, w)])
    assert seen == [0, 1, 2]
    assert float(w) == pytest.approx(-(0.1 + 0.05 + 0.1 / 3), abs=1e-15)


@pytest.mark.parametrize("make", [
    lambda: sg.optim.SGD(0.1),
    lambda: sg.optim.SGD(0.05, momentum=0.9, nesterov=True),
    lambda: sg.optim.Adam(0.1),
    lambda: sg.optim.RMSProp(0.02, momentum=0.5),
    lambda: sg.optim.Adagrad(0.5),
    lambda: sg.optim.Adam(0.1, global_clipnorm=1.0),
], ids=["sgd", "nesterov", "adam", "rmsprop", "adagrad", "adam-globalclip"])
def test_convergence_on_least_squares(make):
    x, y = make_data(n=128, d=4, seed=3)
    a = np.c_[x, np.ones(len(y))]
    exact = np.linalg.lstsq(a, y, rcond=None)[0]
    w, b = np.zeros(4), np.array(0.0)
    opt = make()
    losses = [opt.minimize(least_squares, [w, b], x, y) for _ in range(400)]
    assert losses[-1] < 1e-3 * losses[0]
    np.testing.assert_allclose(np.r_[w, b], exact, atol=2e-2)


def test_update_kernels_are_compiled_symgrad_functions():
    opt = sg.optim.Adam(0.1)
    w = np.ones(3)
    opt.apply_gradients([(np.ones(3), w)])
    kernel = optim._kernel(optim._adam_kernel, opt.target)
    assert isinstance(kernel, sg.Function)
    src = kernel.source
    assert "def _adam_kernel(" in src and "np.sqrt" in src


@pytest.mark.parametrize("kind,cls,hp", CONFIGS, ids=IDS)
def test_python_target_matches_cpu_target(kind, cls, hp):
    results = []
    for target in ("python", "cpu"):
        opt = cls(**hp, clipnorm=0.5, target=target)
        w, b = np.linspace(-1.0, 1.0, 7), np.array(0.25)
        for k in range(3):
            opt.apply_gradients([(np.sin(w * (k + 1)), w), (np.cos(k), b)])
        results.append((w, b))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-13, atol=1e-15)


def test_update_kernels_never_write_over_their_inputs(monkeypatch):
    """Outputs aliasing inputs would make the CPU back end fall back to fresh arrays plus a
    copy per output; the optimizer double-buffers its slots instead."""
    original = api.Function.__call__
    checked = []

    def checking(self, *args, **kwargs):
        out = kwargs.get("out")
        if out is not None:
            outs = out if isinstance(out, tuple) else (out,)
            for o in outs:
                assert not any(isinstance(a, np.ndarray) and np.may_share_memory(o, a) for a in args)
            checked.append(self.fn.__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(api.Function, "__call__", checking)
    for opt in (sg.optim.SGD(0.1), sg.optim.SGD(0.1, momentum=0.5), sg.optim.Adam(amsgrad=True),
                sg.optim.RMSProp(momentum=0.5, centered=True), sg.optim.Adagrad()):
        w = np.ones(4)
        for _ in range(3):
            opt.apply_gradients([(np.full(4, 0.5), w)])
    assert len(checked) == 15


# -- weight decay -----------------------------------------------------------------------------
def test_weight_decay_by_hand():
    w = np.array(1.0)
    sg.optim.SGD(0.1, weight_decay=0.5).apply_gradients([(0.5, w)])
    # Keras: w = w - w * wd * lr first (0.95), then the update (- 0.1 * 0.5)
    assert float(w) == pytest.approx(0.95 - 0.05, abs=1e-15)


@pytest.mark.parametrize("kind,cls,hp", CONFIGS[::2], ids=IDS[::2])
def test_weight_decay_matches_reference(kind, cls, hp):
    rng = np.random.default_rng(5)
    opt, ref = cls(**hp, weight_decay=0.1), Reference(kind, **hp)
    w = rng.normal(size=6)
    w_ref = w.copy()
    for _ in range(4):
        g = rng.normal(size=6)
        opt.apply_gradients([(g, w)])
        w_ref = ref.step(w_ref - w_ref * 0.1 * hp["learning_rate"], g)
    np.testing.assert_allclose(w, w_ref, rtol=1e-12, atol=1e-14)


def test_adamw_and_exclusions():
    opt = sg.optim.AdamW(0.1)
    assert opt.weight_decay == 0.004 and (opt.beta_1, opt.beta_2, opt.epsilon) == (0.9, 0.999, 1e-7)
    w, b = np.ones(3), np.ones(3)
    opt.exclude_from_weight_decay([b])
    opt.apply_gradients([(np.full(3, 0.5), w), (np.full(3, 0.5), b)])
    step = 0.05 * math.sqrt(0.001) / (math.sqrt(0.00025) + EPS)
    np.testing.assert_allclose(b, 1.0 - step, rtol=1e-15)
    np.testing.assert_allclose(w, 1.0 - 0.004 * 0.1 - step, rtol=1e-15)
    with pytest.raises(ValueError):
        sg.optim.AdamW(weight_decay=None)


def test_global_clipnorm_with_overflowing_finite_norm():
    # the squared norms overflow although every entry is finite: the norm is inf, so TF and
    # Keras make every clipped value NaN
    w = np.ones(2)
    sg.optim.SGD(0.1, global_clipnorm=1.0).apply_gradients([(np.array([1e200, 1e200]), w)])
    assert np.all(np.isnan(w))


def test_large_variable_takes_the_threaded_path(monkeypatch):
    """2e5 elements: above the CPU back end's parallel threshold, the kernel is split across
    threads (two even on a one-core machine); the update must still equal the reference."""
    monkeypatch.setenv("SYMGRAD_NUM_THREADS", "2")
    rng = np.random.default_rng(3)
    w = rng.normal(size=200_000)
    w_ref = w.copy()
    opt, ref = sg.optim.Adam(0.01, global_clipnorm=50.0), Reference("adam", learning_rate=0.01)
    for _ in range(2):
        g = rng.normal(size=w.size)
        opt.apply_gradients([(g, w)])
        w_ref = ref.step(w_ref, clip_by_global_norm([g], 50.0)[0][0])
    np.testing.assert_allclose(w, w_ref, rtol=1e-10, atol=1e-13)
