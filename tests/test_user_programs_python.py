"""Programs with the usual Python: helper functions with default and keyword arguments,
tuples unpacked, while loops with a tolerance, early returns, list comprehensions, ``math``
and ``numpy`` mixed, float32 inputs, each checked on target="cpu" and "python" against NumPy
and central differences, and through the CUDA emulation (tests/user_program_check.py); and the
constructs that are not supported, which must raise sg.UnsupportedSyntaxError at their line."""
import math
import os
import random
import sys

import numpy as np
import pytest

import symgrad as sg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from user_program_check import check_program  # noqa: E402

RNG = np.random.default_rng(3)


def relu(x):
    return np.maximum(x, 0.0)


def dense(x, W, b=None, act=np.tanh):
    z = x @ W
    if b is not None:
        z = z + b
    return act(z)


def mlp(W1, b1, W2, x, y):
    h = dense(x, W1, b=b1)
    h2 = dense(h, W2, act=relu)
    out = dense(h2, np.ones((W2.shape[1], 1)), act=lambda z: z)
    return np.mean((out[:, 0] - y) ** 2)


def test_helpers_with_defaults_keywords_and_lambda_activation():
    args = [RNG.normal(size=(3, 5)), RNG.normal(size=5), RNG.normal(size=(5, 4)), RNG.normal(size=(7, 3)),
            RNG.normal(size=7)]
    check_program(mlp, args, wrt=(0, 1, 2))


def encoder(x, W):
    h = np.tanh(W @ x)
    half = h.shape[0] // 2
    return h[:half], h[half:]


def test_vae_style_tuple_unpacking_and_star_rest():
    def elbo(x, W, eps):
        mu, logvar = encoder(x, W)
        z = mu + np.exp(0.5 * logvar) * eps
        first, *rest = z
        kl = -0.5 * np.sum(1 + logvar - mu ** 2 - np.exp(logvar))
        return kl + first ** 2 + sum(rest)
    check_program(elbo, [RNG.normal(size=3), RNG.normal(size=(6, 3)), RNG.normal(size=3)], wrt=(0, 1))


def test_early_return_on_a_static_argument():
    def loss(x, mode="l2"):
        if mode == "l1":
            return np.sum(np.abs(x))
        if mode == "huber":
            a = np.abs(x)
            return np.sum(np.where(a < 1.0, 0.5 * x ** 2, a - 0.5))
        return np.sum(x ** 2)
    x = np.array([0.3, -1.7, 2.2, -0.1])
    for mode in ("l1", "huber", "l2"):
        check_program(loss, [x, mode])


def test_early_return_on_data():
    def safe_log_ratio(a, b):
        if b <= 0.0:
            return 0.0 * a
        return math.log(a / b) if a > 0.0 else -a
    check_program(safe_log_ratio, [2.0, 0.5], wrt=(0, 1))
    check_program(safe_log_ratio, [-2.0, 0.5], wrt=(0, 1))
    check_program(safe_log_ratio, [2.0, -0.5], wrt=(0, 1))


def test_list_comprehensions_and_builtin_sum():
    def loss(ws, x):
        outs = [np.tanh(w @ x) for w in ws]
        sq = [np.sum(o ** 2) for o in outs if o.shape[0] > 1]
        return sum(sq) + sum([o[0] for o in outs])
    ws = [RNG.normal(size=(3, 4)), RNG.normal(size=(1, 4)), RNG.normal(size=(2, 4))]
    check_program(loss, [ws, RNG.normal(size=4)], wrt=1)


def test_newton_while_loop_with_tolerance():
    def cube_root(a, tol=1e-12):
        x = a
        err = 1.0
        while err > tol:
            x_new = x - (x ** 3 - a) / (3 * x ** 2)
            err = abs(x_new - x)
            x = x_new
        return x
    check_program(cube_root, [5.0], fd_rtol=1e-6)
    check_program(cube_root, [0.3], fd_rtol=1e-6)


def test_fixed_point_iteration_on_an_array():
    def solve(c, tol=1e-13, max_iter=500):
        x = np.zeros_like(c)
        for _ in range(max_iter):
            x_new = 0.5 * np.cos(x) + c
            if np.max(np.abs(x_new - x)) < tol:
                break
            x = x_new
        return np.sum(x_new)
    check_program(solve, [np.array([0.1, 0.5, -0.3])], fd_rtol=1e-6)


def test_math_and_numpy_mixed_on_scalars():
    def f(x, y):
        r = math.sqrt(x * x + y * y)
        theta = math.atan2(y, x)
        return math.exp(-r) * np.cos(theta) + math.log1p(r) + np.hypot(x, y) * math.pi
    check_program(f, [0.7, -1.3], wrt=(0, 1))


def test_float32_inputs():
    def loss(w, x, y):
        logits = x @ w
        p = 1.0 / (1.0 + np.exp(-logits))
        eps = 1e-7
        return -np.mean(y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))
    w = RNG.normal(size=3).astype(np.float32)
    x = RNG.normal(size=(10, 3)).astype(np.float32)
    y = (RNG.random(10) < 0.5).astype(np.float32)
    for target in ("cpu", "python"):
        f = sg.differentiate(loss, target=target)
        v = f(w, x, y)
        assert np.asarray(v).dtype == np.float32
        np.testing.assert_allclose(v, loss(w, x, y), rtol=1e-6)
        g = f.grad(w, x, y)
        assert g.dtype == np.float32
        want = sg.differentiate(loss, target="python").grad(w.astype(np.float64), x.astype(np.float64),
                                                            y.astype(np.float64))
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)


def test_enumerate_zip_and_dict_params():
    def loss(params, xs, ys):
        total = 0.0
        for i, (x, y) in enumerate(zip(xs, ys)):
            pred = params["w"] @ x + params["b"]
            total = total + (i + 1) * (pred - y) ** 2
        return total / len(xs)
    params = {"w": RNG.normal(size=3), "b": 0.3}
    xs, ys = RNG.normal(size=(5, 3)), RNG.normal(size=5)
    for target in ("cpu", "python"):
        g = sg.grad(loss, target=target)(params, xs, ys)
        eps = 1e-6
        for k in range(3):
            e = np.zeros(3)
            e[k] = eps
            up = loss({"w": params["w"] + e, "b": 0.3}, xs, ys)
            down = loss({"w": params["w"] - e, "b": 0.3}, xs, ys)
            assert g["w"][k] == pytest.approx((up - down) / (2 * eps), rel=1e-6)
        up, down = loss({"w": params["w"], "b": 0.3 + eps}, xs, ys), loss({"w": params["w"], "b": 0.3 - eps}, xs, ys)
        assert g["b"] == pytest.approx((up - down) / (2 * eps), rel=1e-6)


def test_array_methods_and_inplace_updates():
    def f(x, W):
        h = np.zeros_like(x)
        h += x
        h *= 2.0
        z = (h.T @ W).sum(axis=1, keepdims=True)
        z = z.reshape(-1) - z.mean()
        return (z ** 2).sum() + x.max() - x.min() + x.std()
    check_program(f, [RNG.normal(size=(4, 3)), RNG.normal(size=(4, 2))], wrt=(0, 1))


def test_builtin_min_max_abs_on_traced_scalars():
    def f(a, b):
        return max(a, b) * min(a, 2.0) + abs(a - b) + max(a * a, b, 0.5)
    check_program(f, [0.7, -0.4], wrt=(0, 1))
    check_program(f, [-1.7, 0.4], wrt=(0, 1))


def test_vmap_of_a_per_example_loss_and_its_gradient():
    def per_example(w, x, y):
        return (np.dot(w, x) - y) ** 2
    w, xs, ys = RNG.normal(size=3), RNG.normal(size=(6, 3)), RNG.normal(size=6)
    for target in ("cpu", "python"):
        losses = sg.vmap(sg.differentiate(per_example, target=target), in_axes=(None, 0, 0))(w, xs, ys)
        np.testing.assert_allclose(losses, (xs @ w - ys) ** 2, rtol=1e-12)
        grads = sg.vmap(sg.grad(per_example, target=target), in_axes=(None, 0, 0))(w, xs, ys)
        np.testing.assert_allclose(grads, 2 * (xs @ w - ys)[:, None] * xs, rtol=1e-12)


def test_tuple_of_outputs_and_namedtuple_like_returns():
    def stats(x):
        m = np.mean(x)
        v = np.mean((x - m) ** 2)
        return m, v, {"skew": np.mean((x - m) ** 3) / v ** 1.5}
    check_program(stats, [RNG.normal(size=9)])


def test_unsupported_constructs_name_their_line():
    def uses_try(x):
        try:
            return np.sum(x)
        except ValueError:
            return 0.0

    def uses_print(x):
        print(x)
        return np.sum(x)

    def uses_svd(x):
        return np.sum(np.linalg.svd(x)[1])
    x = np.ones((2, 2))
    for fn, line_offset, word in ((uses_try, 1, "try"), (uses_print, 1, "print"), (uses_svd, 1, "svd")):
        with pytest.raises(sg.UnsupportedSyntaxError, match=word) as info:
            sg.grad(fn, target="python")(x)
        assert info.value.lineno == fn.__code__.co_firstlineno + line_offset
        assert info.value.filename == __file__


RNG_GLOBAL = np.random.default_rng(0)


def test_random_draws_inside_a_traced_function_are_refused():
    """NumPy draws new numbers on every call; a trace would run the draw once and bake it in
    (the same "noise" forever): refused at the line, with the way out."""
    def dropout_np(x):
        mask = np.random.rand(*x.shape) > 0.5
        return np.sum(x * mask)

    def noisy_generator(x):
        return np.sum(x + 0.1 * RNG_GLOBAL.normal(size=x.shape))

    def python_random(x):
        return np.sum(x) * random.random()
    x = np.ones(3)
    for fn in (dropout_np, noisy_generator, python_random):
        for target in ("cpu", "python"):
            with pytest.raises(sg.UnsupportedSyntaxError, match="random draw") as info:
                sg.differentiate(fn, target=target)(x)
            assert info.value.lineno == fn.__code__.co_firstlineno + 1
            assert "pass them as an argument" in str(info.value)

    def noise_as_argument(x, noise):
        return np.sum(x * noise)
    check_program(noise_as_argument, [x, RNG.normal(size=3)], wrt=(0, 1))


def test_a_misspelled_name_is_reported_once_at_its_line():
    """A NameError cites the user's file and line once (the lookup gave its own location and
    the statement added it again)."""
    def helper(y):
        return y * learning_rte   # noqa: F821 (the misspelling under test)

    def loss(x):
        return np.sum(helper(x))
    for target in ("cpu", "python"):
        with pytest.raises(NameError) as info:
            sg.grad(loss, target=target)(np.ones(2))
        message = str(info.value)
        assert message.startswith(f"{__file__}:{helper.__code__.co_firstlineno + 1}: name 'learning_rte'")
        assert message.count(__file__) == 1


def test_builtin_pow_on_traced_values():
    """pow(a, b) is a ** b (it was refused as an unknown call on traced values)."""
    def f(a, x):
        return pow(a, 3) + pow(2.0, a) + np.sum(pow(x, 2)) + pow(a, 0.5) * np.sum(pow(x, a)) + pow(3, 2)
    check_program(f, [1.3, np.array([0.5, 1.5])], wrt=(0, 1))
    x32 = np.array([1.5, 0.5], dtype=np.float32)
    for target in ("cpu", "python"):
        assert sg.differentiate(lambda x: pow(x, 2), target=target)(x32).dtype == np.float32
        with pytest.raises(TypeError, match="modulus"):
            sg.differentiate(lambda a: pow(a, 2, 3), target=target)(1.5)


def test_generated_source_never_prints_a_double_minus():
    """The negation of a product that starts with a negative factor (the gradient of
    1 / (1 + exp(-x)) is -(-1.0 / t**2 * t1)) drops that sign rather than printing '--1.0';
    the source still computes the same numbers."""
    def sigmoid_sum(x):
        return np.sum(1.0 / (1.0 + np.exp(-x)))

    def negated_products(x, y):
        return -(-2.0 * x * y) + -(-x / y) - (-(np.array([1.0, -2.0]) @ np.stack([x, y])) * 3.0).sum()
    x, y = np.array([0.3, -1.2]), np.array([1.5, 0.7])
    for fn, args in ((sigmoid_sum, [x]), (negated_products, [x, y])):
        g = sg.grad(fn, wrt=0, target="python")
        g(*args)
        code = [line for line in g.source.splitlines() if not line.lstrip().startswith("#")]
        assert not any("--" in line for line in code), g.source
        check_program(fn, args, wrt=0)


def test_empty_and_empty_like_filled_in_a_loop():
    """np.empty_like(x) of a traced x (refused before), np.empty of a static shape: filled
    element by element, as NumPy code does (their unspecified contents are zeros here)."""
    def squares(x):
        y = np.empty_like(x)
        for i in range(x.shape[0]):
            y[i] = x[i] ** 2
        z = np.empty((2, x.shape[0]))
        z[0] = y
        z[1] = np.sin(x)
        return np.sum(z * y)
    check_program(squares, [RNG.normal(size=6)])
    check_program(squares, [RNG.normal(size=3)])
    for target in ("cpu", "python"):
        got = sg.differentiate(lambda x: (np.empty_like(x), np.empty(3, dtype=np.int32)), target=target)(np.ones(2))
        assert got[0].dtype == np.float64 and got[0].shape == (2,)
        assert got[1].dtype == np.int32 and got[1].shape == (3,)


class Dense:
    """A layer object as Keras/PyTorch users write one: configuration in __init__, the
    computation in __call__."""

    def __init__(self, act=np.tanh):
        self.act = act

    def __call__(self, W, x):
        return self.act(x @ W)


class TwoLayerModel:
    def __init__(self):
        self.hidden = Dense()
        self.output = Dense(act=lambda z: z)
        self.reg = 1e-3

    def loss(self, W1, W2, x, y):
        out = self.output(W2, self.hidden(W1, x))[:, 0]
        return np.mean((out - y) ** 2) + self.reg * (np.sum(W1 ** 2) + np.sum(W2 ** 2))


def test_callable_layer_objects_inside_a_bound_method():
    """self.hidden(W1, x) calls an instance's __call__ (refused before as a call to
    '<Dense object at 0x...>'): inlined like a bound method, its attributes read like
    globals (rebinding one is seen by the next call)."""
    model = TwoLayerModel()
    args = [RNG.normal(size=(3, 4)), RNG.normal(size=(4, 1)), RNG.normal(size=(5, 3)), RNG.normal(size=5)]
    check_program(model.loss, args, wrt=(0, 1))

    def uses_model(W1, W2, x, y):
        return model.loss(W1, W2, x, y)
    check_program(uses_model, args, wrt=(0, 1))
    f = sg.differentiate(model.loss, target="cpu")
    before = f(*args)
    model.hidden.act = np.sin
    assert f(*args) == pytest.approx(model.loss(*args), rel=1e-12) and f(*args) != before

    def writes_its_argument(self, W, x):
        x[0] = 0.0   # NumPy would change the caller's array
        return W

    class Bad:
        __call__ = writes_its_argument
    bad = Bad()

    def calls_bad(W, x):
        return np.sum(bad(W, x))
    with pytest.raises(sg.UnsupportedSyntaxError, match="item assignment into argument array 'x'"):
        sg.differentiate(calls_bad, target="python")(np.ones(2), np.ones(2))


def test_builtin_map_over_traced_values():
    """map(f, ...) calls f on each item as f(x) would be traced (it was refused as a call to
    builtins.map on traced values), for lambdas, NumPy functions, helpers and builtins."""
    def helper(v, w):
        return v * w

    def uses_map(x):
        a = sum(map(lambda v: v ** 2, [x[0], x[1]]))
        b = np.sum(np.array(list(map(np.tanh, x))))
        c = np.sum(np.stack(list(map(helper, [x, x ** 2], [x, 2.0]))))
        d = sum(map(np.sum, (x, x * 3)))
        return a + b + c + d + sum(map(abs, [1, -2]))
    check_program(uses_map, [np.array([0.3, -0.5, 1.2])])
