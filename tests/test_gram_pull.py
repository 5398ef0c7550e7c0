"""Row-scaled linear images reduced through a Gram product (symgrad.gram_pull): where the rule
applies the backward no longer reads the forward's image ``lx = R(x)`` (it reads ``x`` and the
row scales), where it must not (a use of the cotangent with no rule, a scale that varies along
the last axis, too few rows, a diagonal moment with no Gram product to read) the graph is what
it is without the pass; values and gradients agree with target="python", central differences
and the CUDA kernels (run by codegen.ptx_emulate), in float32 and float64."""
import numpy as np
import pytest

import symgrad as sg
from adbench_models import gmm_adbench
from test_sum_pull import _numeric_grad, assert_emulator_agrees   # (float64 central differences)
from symgrad import simplify as simplify_module
from symgrad.ir import toposort
from symgrad.simplify import simplify


# -- where the rule applies: every use of the cotangent s * lx reduces over the rows ---------

def gmm_like(means, q, ls, x):
    """ADBench GMM's quadratic form: lx = q * xc + xc @ L^T, cotangent s * lx with s (k, n, 1);
    wrt (means, q, ls) its uses are sum_n (means), sum_n(. * xc) (q) and xc^T @ . (ls)."""
    xc = x[None, :, :] - means[:, None, :]                          # (k, n, d)
    lx = q[:, None, :] * xc + xc @ np.transpose(ls, (0, 2, 1))
    return np.sum(np.exp(-0.5 * np.sum(lx * lx, axis=2)))


def plain_matrix(c, x):
    """No batch axis, a bare x among the terms and a subtracted one: lx = x - x @ c."""
    lx = x - x @ c
    return np.sum(np.tanh(np.sum(lx * lx, axis=1)))


def means_only(means, q, ls, x):
    """wrt means alone: the cotangent's one use is sum_n, R(sum_n W) instead."""
    return gmm_like(means, q, ls, x)


# -- where it must not ------------------------------------------------------------------------

def left_operand_use(c, x):
    """wrt (c, x): x's cotangent is E @ c^T (E the left operand): E is needed, no rule."""
    return plain_matrix(c, x)


def full_scale(c, x):
    """The cotangent cos(lx) varies along the last axis: not a row scale."""
    lx = x @ c
    return np.sum(np.sin(lx))


def few_rows(c, x):
    """n < 4 d: the (d, d) products the rule adds would cost as much as it saves."""
    return plain_matrix(c, x)


def moment_without_gram(means, q, ls, x):
    """wrt (means, q): no x^T @ E use gives the Gram product the q moment's x @ L^T term
    would read, so E stays (and so do the moments over it)."""
    return gmm_like(means, q, ls, x)


def long_image(c, x):
    """An image of more terms than gram_pull.MAX_TREE walks: left as it is."""
    lx = (x @ c + x * 0.1 + x * 0.2 + x * 0.3 + x * 0.4 + x * 0.5 + x * 0.6 + x * 0.7 + x * 0.8
          + x * 0.9 + x * 1.1 + x * 1.2 + x * 1.3 + x * 1.4 + x * 1.5 + x * 1.6 + x * 1.7
          + x * 1.8 + x * 1.9 + x * 2.1 - x)
    return np.sum(np.tanh(np.sum(lx * lx, axis=1)))


def users_own_gram(c, x, s):
    """The user's own x^T @ (s * (x @ c)): forward nodes keep NumPy's expression."""
    return np.sum(np.transpose(x) @ (s[:, None] * (x @ c)))


def _args(fn, rng):
    k, n, d = 3, 20, 4
    gmm = [(k, d), (k, d), (k, d, d), (n, d)]
    shapes = {gmm_like: gmm, means_only: gmm, moment_without_gram: gmm,
              gmm_adbench: [(k,), (k, d), (k, d + d * (d - 1) // 2), (n, d)],
              plain_matrix: [(d, d), (n, d)], left_operand_use: [(d, d), (n, d)],
              full_scale: [(d, d), (n, d)], few_rows: [(d, d), (6, d)],
              long_image: [(d, d), (n, d)],
              users_own_gram: [(d, d), (n, d), (n,)]}[fn]
    args = [rng.uniform(-1, 1, s) for s in shapes]
    if fn in (plain_matrix, left_operand_use, few_rows, long_image):
        args[0] = args[0] * 0.3
    if fn is gmm_adbench:
        args[2] = args[2] * 0.1
    return args


WRT = {gmm_like: (0, 1, 2), means_only: (0,), gmm_adbench: (0, 1, 2), plain_matrix: (0,),
       left_operand_use: (0, 1), full_scale: (0,), few_rows: (0,),
       moment_without_gram: (0, 1), users_own_gram: (0, 2), long_image: (0,)}
APPLIES = [gmm_like, plain_matrix, means_only, gmm_adbench]
KEPT = [left_operand_use, full_scale, few_rows, moment_without_gram, long_image]


def _graph(fn, args):
    return sg.grad(fn, wrt=WRT[fn])._graph(list(args))


def _without_pass(monkeypatch, fn, args):
    with monkeypatch.context() as m:
        m.setattr(simplify_module, "pull_grams", lambda outputs, forward: (list(outputs), {}))
        return _graph(fn, args)


def _image_users(graph) -> list:
    """The users of the forward's image (the node named ``lx``) other than its square."""
    nodes = toposort(graph.outputs)
    (image,) = [n for n in nodes if graph.names.get(n) == "lx"]
    return [u for u in nodes if image in u.inputs and u.inputs != (image,) * 2]


@pytest.mark.parametrize("fn", APPLIES, ids=lambda f: f.__name__)
def test_backward_no_longer_reads_the_image(fn, monkeypatch):
    args = _args(fn, np.random.default_rng(0))
    assert _image_users(_without_pass(monkeypatch, fn, args))
    graph = _graph(fn, args)
    assert not _image_users(graph), graph.listing()


def test_gmm_gradient_keeps_two_full_size_matmuls():
    """The forward x @ L^T and the Gram product x^T @ W: the rule adds (d, d) products only."""
    args = _args(gmm_like, np.random.default_rng(1))
    k, n, d = 3, 20, 4
    graph = _graph(gmm_like, args)
    matmuls = [m for m in toposort(graph.outputs) if m.op == "matmul"]
    big = [m for m in matmuls if m.inputs[0].size * m.inputs[1].shape[-1] >= k * n * d * d]
    assert len(big) == 2, graph.listing()
    assert all(m.inputs[0].shape[-1] == d for m in matmuls if m not in big)


@pytest.mark.parametrize("fn", KEPT, ids=lambda f: f.__name__)
def test_rule_does_not_apply(fn, monkeypatch):
    args = _args(fn, np.random.default_rng(0))
    graph = _graph(fn, args)
    assert graph.outputs == _without_pass(monkeypatch, fn, args).outputs


def test_users_own_gram_keeps_numpys_value():
    """x^T @ (s * (x @ c)) in the user's code is forward: not rewritten, NumPy's value."""
    args = _args(users_own_gram, np.random.default_rng(0))
    both = sg.value_and_grad(users_own_gram, wrt=(0, 2), target="python")
    graph = both._graph(list(args))
    assert any(n.op == "matmul" and n.inputs[1].op == "mul" for n in toposort(graph.outputs))
    assert both(*args)[0] == users_own_gram(*args)


@pytest.mark.parametrize("fn", APPLIES + KEPT, ids=lambda f: f.__name__)
def test_simplify_is_idempotent(fn):
    graph = _graph(fn, _args(fn, np.random.default_rng(2)))
    again = simplify(graph)
    assert all(a is b for a, b in zip(again.outputs, graph.outputs))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fn", APPLIES + KEPT, ids=lambda f: f.__name__)
def test_gradients_agree(fn, dtype):
    """cpu against target="python" (the same rewritten graph, a few ulps apart) and both
    against central differences in float64 (the rewrite reassociates exact sums)."""
    exact = _args(fn, np.random.default_rng(3))
    args = [a.astype(dtype) for a in exact]
    wrt = WRT[fn]
    ref = sg.grad(fn, wrt=wrt, target="python")(*args)
    cpu = sg.grad(fn, wrt=wrt, target="cpu")(*args)
    ref, cpu = (r if isinstance(r, tuple) else (r,) for r in (ref, cpu))
    tol = 3e-5 if dtype == "float32" else 1e-12
    for i, a, b in zip(wrt, cpu, ref):
        assert a.dtype == b.dtype == np.dtype(dtype)
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
        fd_tol = 1e-6 if dtype == "float64" else 1e-3
        want = _numeric_grad(fn, exact, i)
        np.testing.assert_allclose(a, want, rtol=fd_tol, atol=fd_tol)
        np.testing.assert_allclose(b, want, rtol=fd_tol, atol=fd_tol)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("fn", APPLIES, ids=lambda f: f.__name__)
def test_cuda_kernels_agree(fn, dtype):
    """The rewritten graph is every target's: the CUDA plan, run by the emulator, agrees
    with the reference back end."""
    args = [a.astype(dtype) for a in _args(fn, np.random.default_rng(4))]
    assert_emulator_agrees(_graph(fn, args), args, dtype)


def test_adbench_gmm_gradient_against_main_form():
    """ADBench's GMM: cpu, the reference back end and central differences (check_grad)."""
    args = _args(gmm_adbench, np.random.default_rng(5))
    f = sg.differentiate(gmm_adbench, wrt=(0, 1, 2))
    assert sg.check_grad(f, *args, wrt=(0, 1, 2)) < 1e-6
    ref = sg.grad(gmm_adbench, wrt=(0, 1, 2), target="python")(*args)
    for a, b in zip(f.grad(*args), ref):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_the_gram_product_runs_the_lower_kernel():
    """The Gram product x^T diag(s) x the rule forms is symmetric: codegen.matmul_kernel
    computes its lower triangle and mirrors it."""
    import re
    args = _args(gmm_adbench, np.random.default_rng(6))
    text = sg.differentiate(gmm_adbench, wrt=(0, 1, 2)).grad.llvm_ir(*args)
    assert re.search(r'call void @"symgrad_mm_float64_\d+"\([^)]*i64 1\)', text)
