"""Programs as users write them: TensorFlow-style gradient clipping and hand-written optimizer
steps and learning-rate schedules, checked on target="cpu" and "python" against NumPy and
central differences, and through the CUDA emulation (tests/user_program_check.py)."""
import math
import os
import sys

import numpy as np
import pytest

import symgrad as sg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from user_program_check import check_program, central_difference  # noqa: E402

RNG = np.random.default_rng(7)
X = RNG.normal(size=(8, 3))
Y = RNG.normal(size=8)
W = RNG.normal(size=3)


def mse(w, x, y):
    r = x @ w - y
    return np.mean(r ** 2)


def clip_by_value_np(t, lo, hi):
    # TF's clip_by_value as a user writes it in NumPy
    return np.minimum(np.maximum(t, lo), hi)


def clip_by_norm_np(t, clip_norm):
    l2 = np.sqrt(np.sum(t * t))
    return t * clip_norm / np.maximum(l2, clip_norm)


def clip_by_global_norm_np(ts, clip_norm, use_norm=None):
    # TF: use_norm = global_norm(t_list); the scale is not differentiated
    if use_norm is None:
        use_norm = sg.stop_gradient(np.sqrt(sum([np.sum(t ** 2) for t in ts])))
    scale = clip_norm / np.maximum(use_norm, clip_norm)
    return [t * scale for t in ts], use_norm


def test_clip_by_value_of_predictions():
    def huberish(w, x, y):
        pred = clip_by_value_np(x @ w, -1.0, 1.0)
        return np.sum((pred - y) ** 2)
    check_program(huberish, [W, X, Y])


def test_clip_by_norm_written_and_sg_agree():
    def loss(w, x, y):
        a = clip_by_norm_np(x @ w, 1.5)
        b = sg.clip_by_norm(x @ w, 1.5)
        return np.sum(a * y) + 2.0 * np.sum(b * y)
    check_program(loss, [W, X, Y])


def test_clip_by_global_norm_with_generator_sum():
    # the usual spelling of TF's global norm: a generator expression inside sum()
    def loss(a, b):
        gn = np.sqrt(sum(np.sum(t ** 2) for t in (a, b)))
        return gn * np.sum(a) + np.sum(b)
    check_program(loss, [RNG.normal(size=3), RNG.normal(size=(2, 2))], wrt=(0, 1))


def test_clip_by_global_norm_stop_gradient_handwritten():
    """The norm behind stop_gradient: the gradient is that of the same loss with the norm a
    constant (central differences with use_norm passed in)."""
    def loss(a, b, use_norm=None):
        (ca, cb), gn = clip_by_global_norm_np([a * 3.0, b * 2.0], 1.0, use_norm)
        return np.sum(ca * ca) + np.sum(np.sin(cb)) + 0.0 * gn
    a, b = RNG.normal(size=3), RNG.normal(size=(2, 2))
    norm = float(np.sqrt(np.sum((3 * a) ** 2) + np.sum((2 * b) ** 2)))
    for target in ("cpu", "python"):
        f = sg.differentiate(loss, wrt=(0, 1), target=target)
        assert f(a, b) == pytest.approx(loss(a, b), rel=1e-12)
        ga, gb = f.grad(a, b)
        np.testing.assert_allclose(ga, central_difference(loss, [a, b, norm], 0), rtol=1e-6)
        np.testing.assert_allclose(gb, central_difference(loss, [a, b, norm], 1), rtol=1e-6)
    check_program(loss, [a, b, norm], wrt=(0, 1))


def test_unrolled_sgd_with_clipped_inner_gradient():
    # MAML-style: differentiate through three clipped gradient steps
    inner = sg.grad(mse, wrt=0, target="python")

    def outer(w, x, y):
        for _ in range(3):
            g = inner(w, x, y)
            g = sg.clip_by_norm(g, 0.5)
            w = w - 0.1 * g
        return mse(w, x, y)
    check_program(outer, [W, X, Y], fd_rtol=1e-5)


def adam_step(w, g, m, v, t, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-7):
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    m_hat = m / (1 - beta1 ** t)
    v_hat = v / (1 - beta2 ** t)
    return w - lr * m_hat / (np.sqrt(v_hat) + eps), m, v


def test_adam_step_by_hand():
    g, m, v = RNG.normal(size=3), RNG.normal(size=3) * 0.1, RNG.uniform(0.1, 1.0, 3)
    def step(w, g, m, v):
        return adam_step(w, g, m, v, 3, lr=0.01)
    check_program(step, [W, g, m, v], wrt=(0, 1, 2, 3))


def test_rmsprop_and_momentum_steps():
    def rmsprop(w, g, ms, rho=0.9, lr=1e-2, eps=1e-7):
        ms = rho * ms + (1.0 - rho) * np.square(g)
        return w - lr * g / np.sqrt(ms + eps), ms

    def momentum(w, g, vel, mu=0.9, lr=0.1, nesterov=True):
        vel = mu * vel - lr * g
        if nesterov:
            return w + mu * vel - lr * g, vel
        return w + vel, vel

    def both(w, g, ms, vel):
        w1, ms = rmsprop(w, g, ms)
        w2, vel = momentum(w1, g, vel, lr=0.05)
        return w2, ms, vel
    check_program(both, [W, RNG.normal(size=3), RNG.uniform(0.1, 1, 3), RNG.normal(size=3)],
                  wrt=(0, 1, 2, 3))


def test_learning_rate_schedules():
    def cosine_decay(step, total_steps, lr0=0.1, alpha=0.0):
        step = min(step, total_steps)
        cos = 0.5 * (1 + math.cos(math.pi * step / total_steps))
        return lr0 * ((1 - alpha) * cos + alpha)

    def warmup_exponential(step, warmup=100, lr0=0.1, rate=0.96, every=1000):
        if step < warmup:
            return lr0 * step / warmup
        return lr0 * rate ** (step / every)

    def train_step(w, x, y, step):
        g = 2.0 * x.T @ (x @ w - y) / x.shape[0]
        lr = cosine_decay(step, 500) + warmup_exponential(step)
        return mse(w - lr * g, x, y)
    for step in (0, 50, 250, 900):
        check_program(train_step, [W, X, Y, step])


def test_lr_schedule_on_a_traced_step():
    # the step as a float argument: math.cos of a traced value
    def lr_of(step, lr0):
        return lr0 * 0.5 * (1.0 + math.cos(math.pi * min(step, 100.0) / 100.0))
    check_program(lr_of, [37.5, 0.1], wrt=(0, 1))
    check_program(lr_of, [137.5, 0.1], wrt=(0, 1))


def test_keras_style_training_loop_with_sg_optim():
    """sg.optim.Adam with global_clipnorm agrees with the step written by hand."""
    w_sg, w_np = W.copy(), W.copy()
    opt = sg.optim.Adam(learning_rate=0.05, global_clipnorm=0.3)
    m, v = np.zeros(3), np.zeros(3)
    for t in range(1, 6):
        opt.minimize(mse, [w_sg], X, Y)
        g = central_difference(mse, [w_np, X, Y], 0)
        g = g * 0.3 / max(np.sqrt(np.sum(g * g)), 0.3)
        # Keras's form: epsilon added to sqrt(v), the bias corrections folded into the rate
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        w_np = w_np - 0.05 * math.sqrt(1 - 0.999 ** t) / (1 - 0.9 ** t) * m / (np.sqrt(v) + 1e-7)
    np.testing.assert_allclose(w_sg, w_np, rtol=1e-6, atol=1e-8)


def test_label_smoothing_with_np_full_of_a_traced_epsilon():
    """np.full with a float argument's value (a default float parameter is traced) and
    np.full_like with one: a broadcast, not a constant."""
    def loss(W, x, labels, eps=0.1):
        k = W.shape[1]
        y = np.full((x.shape[0], k), eps / k)
        y[np.arange(x.shape[0]), labels] += 1 - eps
        z = x @ W
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        return -(y * logp).sum(axis=1).mean() + np.sum(np.full_like(z, eps) * z)
    args = [RNG.normal(size=(3, 4)), RNG.normal(size=(6, 3)), RNG.integers(0, 4, 6), 0.1]
    check_program(loss, args, wrt=(0, 3))


def test_np_full_fill_values_and_dtypes_as_numpy():
    def filled(x, c):
        return (np.full((2, 3), c) * np.full((2, 3), x[:3]), np.full(3, [c, 2.0 * c, 1.0]),
                np.full((2,), 3), np.full(3, True), np.full(3, 2.7, dtype=int),
                np.full((2, 2), 1.5, dtype=np.float32), np.full_like(np.arange(3), c),
                np.full_like(x, 2))
    x, c = np.arange(1.0, 5.0), 2.5
    for target in ("cpu", "python"):
        got = sg.differentiate(filled, target=target)(x, c)
        for a, b in zip(got, filled(x, c)):
            assert np.asarray(a).dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    check_program(lambda x, c: np.sum(filled(x, c)[0]) + np.sum(filled(x, c)[1]), [x, c], wrt=(0, 1))


def test_gradient_descent_unrolled_inside_the_loss():
    """The inner loop of a meta-learning step: 50 gradient-descent steps written by hand,
    differentiated with respect to the start, the data and the learning rate."""
    def gd_inner(w0, x, y, lr=0.1, steps=50):
        w = w0
        for _ in range(steps):
            g = 2 * x.T @ (x @ w - y) / len(y)
            w = w - lr * g
        return np.sum((x @ w - y) ** 2)
    check_program(gd_inner, [np.zeros(3), X, Y, 0.1], wrt=(0, 1, 2, 3), fd_rtol=1e-5)


def test_adam_and_cosine_schedule_loops_with_clipping():
    def adam_loop(w, x, y):
        m, v = np.zeros_like(w), np.zeros_like(w)
        for t in range(1, 11):
            g = 2 * x.T @ (x @ w - y) / len(y)
            w, m, v = adam_step(w, g, m, v, t, lr=0.01)
        return np.sum(w ** 2)

    def cosine_clipped(w, x, y, lr0=0.1):
        for t in range(20):
            lr = lr0 * 0.5 * (1 + math.cos(math.pi * t / 20))
            g = 2 * x.T @ (x @ w - y) / len(y)
            g = g * np.minimum(1.0, 0.5 / np.sqrt(np.sum(g * g)))
            w = w - lr * g
        return np.sum((x @ w - y) ** 2)
    check_program(adam_loop, [W, X, Y], wrt=(0, 1), fd_rtol=1e-5)
    check_program(cosine_clipped, [W, X, Y, 0.1], wrt=(0, 3), fd_rtol=1e-5)
