"""Derivative sums pulled inside the linear maps they reduce (symgrad.sum_pull): where a rule
applies the full-size product is gone from the gradient, where it must not (the factor varies
along the summed axis, the product has another use, the user's own sum) the graph keeps it;
values and gradients agree with target="python", central differences and the CUDA kernels
(run by codegen.ptx_emulate), in float32 and float64."""
import numpy as np
import pytest

import symgrad as sg
from adbench_models import gmm_adbench
from symgrad.codegen import ptx_emulate
from symgrad.emit_python import compile_python
from symgrad.ir import toposort
from symgrad.runtime import finish
from symgrad import simplify as simplify_module
from symgrad.simplify import simplify


# -- functions whose gradient has a sum of a product over an axis its factor lacks ------------

def means_like(means, q, ls, x):
    """ADBench GMM's shape: b_means = -sum_n(g @ L + g * q), L and q constant along n."""
    xc = x[None, :, :] - means[:, None, :]                          # (k, n, d)
    y = q[:, None, :] * xc + xc @ np.transpose(ls, (0, 2, 1))
    return np.sum(np.tanh(y) * y)


def row_axis(u, w, v):
    """b_u = sum_rows(g @ v.T) -> (sum_rows g) @ v.T."""
    return np.sum(np.tanh((u[None, :] + w) @ v))


def column_axis(u, w, v):
    """b_u = sum_cols(w.T @ g) -> w.T @ (sum_cols g)."""
    return np.sum(np.sin(w @ (v + u[:, None])))


def batch_axis_shared_factor(u, a, b):
    """b_u = sum_batch(a.T @ g_b) with a 2-D (one matrix for the batch) -> a.T @ sum_b g_b."""
    return np.sum(np.tanh(a @ (b + u[None])))


def scaled(u, s, x):
    """b_u = sum_0(g * s), s constant along axis 0 -> sum_0(g) * s."""
    return np.sum(np.sin(s[None, :] * (x + u[None, :])))


def divided(u, s, x):
    """b_u = sum_0(g / s) -> sum_0(g) / s."""
    return np.sum(np.sin((x + u[None, :]) / s[None, :]))


def logsumexp_columns(x):
    """The max's cotangent 1 - sum_k(e_k / S) is (1 / S) * S with S = sum_k e_k, the node
    the softmax already has: the product e / S is used elsewhere too, the pass over it goes."""
    mx = np.max(x, axis=0)
    return np.sum(np.log(np.sum(np.exp(x - mx[None, :]), axis=0)) + mx)


# -- where no rule may apply -----------------------------------------------------------------

def batch_axis_varying_factor(u, a, b):
    """b_u = sum_batch(a_b.T @ g_b): a varies along the batch, the sum stays outside."""
    return np.sum(np.tanh(a @ (b + u[None])))


def scale_varies(u, s, x):
    """b_u = sum_0(g * s) with s varying along axis 0: no rule."""
    return np.sum(np.sin(s[:, None] * (x + u[None, :])))


def user_sum_of_matmul(x, a):
    """The user's own sum of a product: NumPy's value, bit for bit (forward nodes)."""
    return np.sum(np.sum(x @ a, axis=0) ** 2)


def _args(fn, rng):
    k, n, d = 3, 7, 4
    shapes = {
        means_like: [(k, d), (k, d), (k, d, d), (n, d)],
        row_axis: [(4,), (5, 4), (4, 3)],
        column_axis: [(4,), (3, 4), (4, 5)],
        batch_axis_shared_factor: [(4, 3), (5, 4), (2, 4, 3)],
        batch_axis_varying_factor: [(4, 3), (2, 5, 4), (2, 4, 3)],
        scaled: [(4,), (4,), (5, 4)],
        divided: [(4,), (4,), (5, 4)],
        scale_varies: [(4,), (5,), (5, 4)],
        user_sum_of_matmul: [(5, 4), (4, 3)],
        logsumexp_columns: [(5, 6)],
    }[fn]
    args = [rng.uniform(-1, 1, s) for s in shapes]
    if fn is divided:
        args[1] = rng.uniform(0.5, 1.5, shapes[1])
    return args


PULLED = [means_like, row_axis, column_axis, batch_axis_shared_factor, scaled, divided,
          logsumexp_columns]
KEPT = [batch_axis_varying_factor, scale_varies]


def _graph(fn, args, wrt=0):
    return sg.grad(fn, wrt=wrt)._graph(list(args))


def _sums_of(graph, ops) -> list:
    """The sums in the graph whose operand is one of ``ops`` (full-size products summed)."""
    return [n for n in toposort(graph.outputs) if n.op == "sum" and n.inputs[0].op in ops]


def _work(graph, ops) -> int:
    """Multiply-adds of the ``ops`` nodes in the graph (a matmul's: output size times its
    contraction length)."""
    return sum(n.size * n.inputs[0].shape[-1] if n.op == "matmul" else
               n.inputs[0].size if n.op == "sum" else n.size
               for n in toposort(graph.outputs) if n.op in ops)


def _without_pass(monkeypatch, fn, args, wrt=0):
    with monkeypatch.context() as m:
        m.setattr(simplify_module, "pull_sums", lambda outputs, forward: (list(outputs), {}))
        return _graph(fn, args, wrt)


@pytest.mark.parametrize("fn", PULLED, ids=lambda f: f.__name__)
def test_rule_applies(fn, monkeypatch):
    """Fewer multiplications than without the pass: the product is taken of the sum."""
    args = _args(fn, np.random.default_rng(0))
    ops = {scaled: ("mul", "div"), divided: ("mul", "div"), logsumexp_columns: ("sum",)}.get(
        fn, ("matmul",))
    before = _work(_without_pass(monkeypatch, fn, args), ops)
    after = _work(_graph(fn, args), ops)
    assert after < before, _graph(fn, args).listing()


def test_means_gradient_has_one_full_size_matmul_fewer():
    """GMM's means: of the three (k, n, d) matmuls (forward, the means' and the triangle's
    cotangents) two are left: the forward one and the (d, n) @ (n, d) of the triangle's."""
    args = _args(means_like, np.random.default_rng(1))
    k, n, d = 3, 7, 4
    graph = _graph(means_like, args, wrt=(0, 1, 2))
    big = [m for m in toposort(graph.outputs) if m.op == "matmul" and
           m.inputs[0].size * m.inputs[1].shape[-1] >= k * n * d * d]
    assert len(big) == 2, graph.listing()


@pytest.mark.parametrize("fn", KEPT, ids=lambda f: f.__name__)
def test_rule_does_not_apply_when_the_factor_varies(fn, monkeypatch):
    args = _args(fn, np.random.default_rng(0))
    graph = _graph(fn, args)
    assert _sums_of(graph, ("matmul", "mul")), graph.listing()
    assert graph.outputs == _without_pass(monkeypatch, fn, args).outputs


def test_rule_does_not_apply_when_the_product_has_another_use():
    """wrt (u, w): w's cotangent is g @ v.T itself, so the matmul is computed anyway and u's
    sum over it stays (the same value in both places)."""
    args = _args(row_axis, np.random.default_rng(0))
    graph = _graph(row_axis, args, wrt=(0, 1))
    (s,) = _sums_of(graph, ("matmul",))
    assert s.inputs[0] in toposort([graph.outputs[1]])


def test_product_with_another_use_stays_without_the_operands_sum():
    """wrt (u, x): x's cotangent is g * s itself; sum_0(g) is not in the graph, so u's sum
    of the product stays (pulling it would add a pass, not remove one)."""
    args = _args(scaled, np.random.default_rng(0))
    graph = _graph(scaled, args, wrt=(0, 2))
    (s,) = _sums_of(graph, ("mul",))
    assert s.inputs[0] in toposort([graph.outputs[1]])


def test_users_own_sum_keeps_numpys_value():
    """The value's sum of x @ a is a forward node: left as written in the value-and-gradient
    graph, so the reference back end computes NumPy's very expression."""
    args = _args(user_sum_of_matmul, np.random.default_rng(0))
    both = sg.value_and_grad(user_sum_of_matmul, wrt=(0, 1), target="python")
    assert _sums_of(both._graph(list(args)), ("matmul",))
    assert both(*args)[0] == user_sum_of_matmul(*args)
    cpu = sg.value_and_grad(user_sum_of_matmul, wrt=(0, 1))(*args)
    np.testing.assert_allclose(cpu[0], user_sum_of_matmul(*args), rtol=1e-14)


@pytest.mark.parametrize("fn", PULLED + KEPT + [user_sum_of_matmul], ids=lambda f: f.__name__)
def test_simplify_is_idempotent(fn):
    graph = _graph(fn, _args(fn, np.random.default_rng(2)))
    again = simplify(graph)
    assert all(a is b for a, b in zip(again.outputs, graph.outputs))


def _numeric_grad(fn, args, wrt, h=1e-6):
    args = [np.array(a, dtype=np.float64) for a in args]
    out = np.zeros_like(args[wrt])
    for i in np.ndindex(out.shape):
        up = [a.copy() for a in args]
        down = [a.copy() for a in args]
        up[wrt][i] += h
        down[wrt][i] -= h
        out[i] = (fn(*up) - fn(*down)) / (2 * h)
    return out


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fn", PULLED + KEPT, ids=lambda f: f.__name__)
def test_gradients_agree(fn, dtype):
    """Every target, against central differences in float64 (the rewrite reassociates: a
    few ulps, never more)."""
    exact = _args(fn, np.random.default_rng(3))
    args = [a.astype(dtype) for a in exact]
    # the argument whose cotangent the rule rewrites (all three of GMM's: the means' product
    # has no other use there; the others' would, with every argument differentiated)
    wrt = (0, 1, 2) if fn is means_like else (0,)
    ref = sg.grad(fn, wrt=wrt, target="python")(*args)
    cpu = sg.grad(fn, wrt=wrt, target="cpu")(*args)
    tol = 2e-5 if dtype == "float32" else 1e-12
    for i, (a, b) in enumerate(zip(cpu, ref)):
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
        fd_tol = 1e-6 if dtype == "float64" else 1e-3
        np.testing.assert_allclose(a, _numeric_grad(fn, exact, i), rtol=fd_tol, atol=fd_tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fn", PULLED, ids=lambda f: f.__name__)
def test_cuda_kernels_agree(fn, dtype):
    """The rewritten graph is every target's: the CUDA plan, run by the emulator, agrees
    with the reference back end."""
    args = [a.astype(dtype) for a in _args(fn, np.random.default_rng(4))]
    assert_emulator_agrees(_graph(fn, args), args, dtype)


def assert_emulator_agrees(graph, args, dtype):
    """The CUDA plan of ``graph``, run by the emulator, gives the reference back end's
    results (each output of a tuple)."""
    got = ptx_emulate.run(graph, args)
    ref_fn, _ = compile_python(graph)
    want = finish(ref_fn(*args), graph, args)
    got, want = (w if isinstance(w, tuple) else (w,) for w in (got, want))
    assert len(got) == len(want)
    tol = 3e-5 if dtype == "float32" else 1e-11
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def test_adbench_gmm_gradient():
    """ADBench's GMM: the means' cotangent is one small product, and the gradient matches
    central differences and the reference back end."""
    rng = np.random.default_rng(5)
    k, n, d = 3, 20, 4
    args = [rng.standard_normal(k), rng.uniform(0, 1, (k, d)),
            rng.uniform(0, 1, (k, d + d * (d - 1) // 2)) * 0.1, rng.standard_normal((n, d))]
    graph = _graph(gmm_adbench, args, wrt=(0, 1, 2))
    big = [m for m in toposort(graph.outputs) if m.op == "matmul" and
           m.inputs[0].size * m.inputs[1].shape[-1] >= k * n * d * d]
    assert len(big) == 2, graph.listing()
    f = sg.differentiate(gmm_adbench, wrt=(0, 1, 2))
    assert sg.check_grad(f, *args, wrt=(0, 1, 2)) < 1e-6
    ref = sg.grad(gmm_adbench, wrt=(0, 1, 2), target="python")(*args)
    for a, b in zip(f.grad(*args), ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
