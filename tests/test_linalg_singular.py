"""Singular and not-positive-definite input to np.linalg (symgrad.numpy_linalg, symgrad.guards):
inv / solve of a matrix with an exactly zero pivot and cholesky of a matrix that is not
positive definite raise NumPy's LinAlgError with NumPy's message, at the user's line, through
every transform (grad, jvp, jacobian, vmap, checkpoint, a loop region, the exported module);
det / slogdet never raise; ill-conditioned matrices NumPy accepts are accepted (values as
NumPy's); det's gradient at a singular matrix is the adjugate for every n. And ``t // 2`` of a
loop index does not divide by zero (a RuntimeWarning) to find the sign of a zero."""
import inspect
import warnings

import numpy as np
import pytest

import symgrad as sg
from ptx_child import assemble_in_child

TARGETS = ("python", "cpu")
DTYPES = (np.float64, np.float32)


def inv_sum(a):
    return np.sum(np.linalg.inv(a) * np.arange(a.shape[-1]))


def solve_sum(a):
    return np.sum(np.linalg.solve(a, np.ones(a.shape[-1])))


def cholesky_sum(a):
    return np.sum(np.linalg.cholesky(a))


def _message(fn, text: str) -> str:
    """What our error says for the np.linalg call of ``fn``: NumPy's message at its line."""
    lines, first = inspect.getsourcelines(fn)
    at = next(i for i, line in enumerate(lines) if "np.linalg." in line)
    return f"{fn.__code__.co_filename}:{first + at}: {text}\n    {lines[at].strip()}"


SINGULAR = {
    "rank1_2x2": np.array([[1.0, 2.0], [2.0, 4.0]]),
    "zeros": np.zeros((3, 3)),
    "zero_diagonal_entry": np.diag([1.0, 0.0, 2.0, 3.0]),
    "dependent_rows": np.array([[1.0, 2.0, 3.0, 4.0], [0.0, 1.0, 1.0, 1.0], [2.0, 4.0, 6.0, 8.0],
                                [1.0, 0.0, 0.0, 1.0]]),   # row 2 = 2 row 0 (exact in LU's steps)
    "zero_column": np.array([[0.0, 1.0, 2.0], [0.0, 3.0, 1.0], [0.0, 1.0, 5.0]]),
}
NOT_POSITIVE_DEFINITE = {
    "negative": -np.eye(3),
    "semidefinite": np.diag([1.0, 0.0, 2.0]),
    "indefinite": np.array([[1.0, 2.0], [2.0, 1.0]]),
    "late_failure": np.array([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),   # s = 0 at j = 1
}


def _raises_like_numpy(call, numpy_call, message):
    with pytest.raises(np.linalg.LinAlgError) as numpy_error:
        numpy_call()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # the loop computed inf / nan first
        with pytest.raises(np.linalg.LinAlgError) as ours:
            call()
    assert type(ours.value) is type(numpy_error.value)
    assert str(ours.value) == message
    assert str(numpy_error.value) in message


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SINGULAR))
def test_inv_and_solve_of_a_singular_matrix_raise(name, dtype, target):
    a = SINGULAR[name].astype(dtype)
    for fn, numpy_call in ((inv_sum, lambda: np.linalg.inv(a)),
                           (solve_sum, lambda: np.linalg.solve(a, np.ones(len(a), dtype)))):
        message = _message(fn, "Singular matrix")
        _raises_like_numpy(lambda: sg.differentiate(fn, target=target)(a), numpy_call, message)
        _raises_like_numpy(lambda: sg.grad(fn, target=target)(a), numpy_call, message)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(NOT_POSITIVE_DEFINITE))
def test_cholesky_of_a_matrix_not_positive_definite_raises(name, dtype, target):
    a = NOT_POSITIVE_DEFINITE[name].astype(dtype)
    message = _message(cholesky_sum, "Matrix is not positive definite")
    numpy_call = lambda: np.linalg.cholesky(a)   # noqa: E731
    _raises_like_numpy(lambda: sg.differentiate(cholesky_sum, target=target)(a), numpy_call, message)
    _raises_like_numpy(lambda: sg.grad(cholesky_sum, target=target)(a), numpy_call, message)


@pytest.mark.parametrize("target", TARGETS)
def test_a_nan_in_cholesky_is_nan_not_an_error(target):
    """NumPy's cholesky gives NaN for a NaN diagonal (OpenBLAS's potrf tests s <= 0 only)."""
    a = np.eye(3) * 4 + 1
    a[2, 2] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = sg.differentiate(lambda a: np.linalg.cholesky(a), target=target)(a)
    want = np.linalg.cholesky(a)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[~np.isnan(got)], want[~np.isnan(want)], rtol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_every_transform_raises(target):
    """jvp, jacobian, hessian, vmap (one singular example of the batch raises, as NumPy does
    for a stack) and a stack of matrices."""
    a = SINGULAR["dependent_rows"]
    ok = np.eye(4) * 2 + 0.1
    message = _message(inv_sum, "Singular matrix")
    numpy_call = lambda: np.linalg.inv(np.stack([ok, a]))   # noqa: E731
    calls = {
        "jvp": lambda: sg.jvp(inv_sum, target=target)(a, np.ones_like(a)),
        "jacobian": lambda: sg.jacobian(inv_sum, target=target)(a),
        "hessian": lambda: sg.hessian(inv_sum, target=target)(a),
        "vmap": lambda: sg.vmap(sg.differentiate(inv_sum, target=target))(np.stack([ok, a])),
        "vmap_grad": lambda: sg.vmap(sg.grad(inv_sum, target=target))(np.stack([ok, a])),
        "stack": lambda: sg.differentiate(inv_sum, target=target)(np.stack([ok, a])),
    }
    for call in calls.values():
        _raises_like_numpy(call, numpy_call, message)
    # the same functions on nonsingular input: values, not errors
    np.testing.assert_allclose(sg.vmap(sg.differentiate(inv_sum, target=target))(np.stack([ok, 2 * ok])),
                               [inv_sum(ok), inv_sum(2 * ok)], rtol=1e-13)
    np.testing.assert_allclose(sg.jacobian(inv_sum, target=target)(ok),
                               sg.grad(inv_sum, target=target)(ok), rtol=1e-13)


def checkpointed(a):
    return sg.checkpoint(inv_sum)(a) + 1.0


def looped(a):
    total = 0.0
    for t in range(12):   # a loop region (more trips than are unrolled): singular at t = 6
        total = total + np.sum(np.linalg.inv(a - t * np.eye(2)))
    return total


@pytest.mark.parametrize("target", TARGETS)
def test_inside_a_checkpoint_and_a_loop_region(target):
    a = SINGULAR["rank1_2x2"]
    _raises_like_numpy(lambda: sg.grad(checkpointed, target=target)(a), lambda: np.linalg.inv(a),
                       _message(inv_sum, "Singular matrix"))
    d = np.diag([6.0, 20.0])
    for call in (sg.differentiate(looped, target=target), sg.grad(looped, target=target)):
        _raises_like_numpy(lambda: call(d), lambda: looped(d), _message(looped, "Singular matrix"))
    fine = np.diag([6.5, 20.5])
    assert sg.differentiate(looped, target=target)(fine) == pytest.approx(looped(fine), rel=1e-13)


def test_the_exported_module_raises(tmp_path):
    f = sg.differentiate(inv_sum)
    path = sg.export(f, tmp_path / "inv_sum.py", np.eye(3))
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    np.testing.assert_allclose(namespace["inv_sum"](np.eye(3) * 2), inv_sum(np.eye(3) * 2), rtol=1e-14)
    _raises_like_numpy(lambda: namespace["inv_sum"](SINGULAR["zeros"]), lambda: np.linalg.inv(SINGULAR["zeros"]),
                       _message(inv_sum, "Singular matrix"))
    sg.export(f, tmp_path / "inv_sum.c", np.eye(3))   # C has no exceptions: still exported


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_det_and_slogdet_of_singular_matrices_do_not_raise(dtype, target):
    def f(a):
        sign, logdet = np.linalg.slogdet(a)
        return np.linalg.det(a), sign, logdet
    g = sg.differentiate(f, target=target)
    for a in list(SINGULAR.values()) + [np.diag([1.0, 0.0, 2.0, 3.0, 4.0])]:
        a = a.astype(dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            det, sign, logdet = g(a)
        want = np.linalg.slogdet(a)
        assert det == 0.0 and sign == want.sign == 0.0 and logdet == want.logabsdet == -np.inf
        assert np.asarray(det).dtype == dtype


def _hilbert(n):
    return 1.0 / (np.arange(n)[:, None] + np.arange(n)[None, :] + 1.0)


# ill-conditioned but nonsingular: NumPy accepts every one (checked in the test)
ILL_CONDITIONED = {
    "hilbert8": _hilbert(8),
    "hilbert11": _hilbert(11),
    "vandermonde": np.vander(np.linspace(1.0, 2.0, 7)),
    "nearly_rank1": np.array([[1.0, 1.0], [1.0, 1.0 + 2.0 ** -50]]),
    "tiny_scale": np.eye(4) * 1e-300 + np.triu(np.ones((4, 4))) * 1e-301,
    "graded": np.diag(10.0 ** -np.arange(0.0, 60.0, 12.0)) + np.diag(np.ones(4), 1) * 1e-70,
}
POSITIVE_DEFINITE = {
    "hilbert8": _hilbert(8),
    "nearly_semidefinite": np.array([[1.0, 1.0], [1.0, 1.0 + 2.0 ** -40]]),
    "tiny_scale": np.eye(3) * 1e-300,
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(ILL_CONDITIONED))
def test_ill_conditioned_matrices_numpy_accepts_are_accepted(name, target):
    a = ILL_CONDITIONED[name]
    want_inv, want_solve = np.linalg.inv(a), np.linalg.solve(a, np.ones(len(a)))   # no error
    f = sg.differentiate(lambda a: (np.linalg.inv(a), np.linalg.solve(a, np.ones(a.shape[-1]))), target=target)
    got_inv, got_solve = f(a)
    # Gauss-Jordan and LAPACK's LU round differently: agreement to the condition number
    scale = np.linalg.cond(a) * np.finfo(np.float64).eps * 100
    assert np.all(np.isfinite(got_inv))
    np.testing.assert_allclose(got_inv, want_inv, rtol=scale, atol=scale * np.abs(want_inv).max())
    np.testing.assert_allclose(got_solve, want_solve, rtol=scale, atol=scale * np.abs(want_solve).max())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(POSITIVE_DEFINITE))
def test_positive_definite_matrices_near_the_edge_are_accepted(name, target):
    a = POSITIVE_DEFINITE[name]
    want = np.linalg.cholesky(a)
    got = sg.differentiate(lambda a: np.linalg.cholesky(a), target=target)(a)
    scale = np.linalg.cond(a) * np.finfo(np.float64).eps * 10   # the orders of the sums differ
    np.testing.assert_allclose(got, want, rtol=scale, atol=scale * np.abs(want).max())


# ----------------------------------------------------------------------------------------------
# det's gradient at singular matrices: the adjugate (transposed), any n

def _cofactors(a):
    """C[i, j] = (-1)^(i+j) det(a without row i and column j) = d det / d a[i, j], from NumPy's
    det of the minors (each one nonsingular or singular, NumPy's det is defined for both)."""
    n = len(a)
    return np.array([[(-1) ** (i + j) * np.linalg.det(np.delete(np.delete(a, i, 0), j, 1))
                      for j in range(n)] for i in range(n)])


def _singular_for_det():
    """Matrices of rank n - 1 whose exact zero pivot comes before the last step (the case LU
    alone got wrong), and of rank <= n - 2 (gradient 0)."""
    rng = np.random.default_rng(5)
    cases = {}
    for n, col in ((4, 0), (5, 2), (6, 1), (8, 3)):
        m = rng.integers(-3, 4, size=(n, n)).astype(float)
        m[:, col] = 0.0
        cases[f"zero_column_{col}_n{n}"] = m
    m = rng.integers(-3, 4, size=(6, 6)).astype(float)
    m[:, 1] = 2 * m[:, 0]
    cases["duplicate_column"] = m
    m = rng.integers(-3, 4, size=(5, 5)).astype(float)
    m[1] = 0.0
    cases["zero_row"] = m
    m = rng.integers(-3, 4, size=(6, 6)).astype(float)
    m[:, 0] = 0.0
    m[:, 4] = 0.0
    cases["rank_n_minus_2"] = m
    cases["zeros"] = np.zeros((5, 5))
    cases["diagonal"] = np.diag([1.0, 2.0, 0.0, 3.0, 4.0])
    return cases


SINGULAR_FOR_DET = _singular_for_det()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SINGULAR_FOR_DET))
def test_det_gradient_at_a_singular_matrix_is_the_adjugate(name, dtype, target):
    a = SINGULAR_FOR_DET[name]
    want = _cofactors(a)   # float64 minors of small integers: exact to rounding
    got = sg.grad(lambda a: np.linalg.det(a), target=target)(a.astype(dtype))
    assert got.dtype == dtype
    tol = 1e-12 if dtype == np.float64 else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))
    if np.linalg.matrix_rank(a) <= len(a) - 2:
        assert not np.any(got)


@pytest.mark.parametrize("target", TARGETS)
def test_det_gradient_at_a_singular_matrix_matches_finite_differences(target):
    """det is a polynomial: central differences of a rank n - 1 matrix along a random
    direction agree with the gradient (no LU-specific reference)."""
    a = SINGULAR_FOR_DET["zero_column_2_n5"]
    v = np.random.default_rng(1).standard_normal(a.shape)
    h = 1e-5
    fd = (np.linalg.det(a + h * v) - np.linalg.det(a - h * v)) / (2 * h)
    got = sg.grad(lambda a: np.linalg.det(a), target=target)(a)
    assert np.sum(got * v) == pytest.approx(fd, rel=1e-7)
    # and under vmap, a singular example next to a nonsingular one
    ok = a + np.eye(5)
    batched = sg.vmap(sg.grad(lambda a: np.linalg.det(a), target=target))(np.stack([ok, a]))
    np.testing.assert_allclose(batched, np.stack([_cofactors(ok), _cofactors(a)]), rtol=1e-12, atol=1e-10)


# ----------------------------------------------------------------------------------------------
# t // 2 of a loop index

def halves(x):
    y = 0.0
    for t in range(2 * x.shape[0]):   # a loop region: t is its int64 index
        y = y + x[t // 2] * t
    return y


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("target", TARGETS)
def test_floor_division_of_a_loop_index_warns_nothing(target):
    x = np.linspace(1.0, 2.0, 8)
    assert sg.differentiate(halves, target=target)(x) == pytest.approx(halves(x), rel=1e-14)
    np.testing.assert_allclose(sg.grad(halves, target=target)(x), [2 * t + 1.0 for t in range(0, 16, 2)])


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_signed_zeros_are_read_without_dividing(dtype, target):
    """signbit and copysign at +-0, +-inf, NaN, subnormals; // of floats at signed zeros (a
    zero quotient takes the sign of x / y)."""
    x = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-310, -1e-310, 3.0, -3.0]).astype(dtype)
    y = np.array([-0.0, 0.0, -2.0, 2.0, 1.0, -1.0, 1.0, -1.0, 1.0, -0.0, 0.5]).astype(dtype)
    f = sg.differentiate(lambda x, y: (np.signbit(x), np.copysign(y, x)), target=target)
    got = f(x, y)
    want = (np.signbit(x), np.copysign(y, x))
    xs = x[np.isfinite(x)]
    ys = np.where(xs < 0, 0.5, -2.0).astype(dtype)
    q = sg.differentiate(lambda x, y: (x // y, x // 2.0, (x * 0.0) // -3.0), target=target)
    got += q(xs, ys)
    want += (xs // ys, xs // 2.0, (xs * 0.0) // -3.0)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w))


# ----------------------------------------------------------------------------------------------
# target="cuda": its kernels compute the guards as hidden outputs (run here through the CPU
# emulation of the PTX kernels); the API's check after the call is the same for every target

def test_cuda_kernels_compute_the_error_guards():
    from symgrad.codegen import ptx_emulate
    from symgrad.guards import with_guard_outputs
    for fn, bad, good in ((inv_sum, SINGULAR["dependent_rows"], np.eye(4) * 2 + 0.5),
                          (cholesky_sum, NOT_POSITIVE_DEFINITE["late_failure"], np.eye(3) * 2 + 0.5)):
        for make in (sg.differentiate, sg.grad):
            graph = with_guard_outputs(make(fn, target="cuda").graph_for([good])[0])
            result, flags = ptx_emulate.run(graph, [good])
            assert not any(flags)
            np.testing.assert_allclose(result, make(fn, target="python")(good), rtol=1e-12, atol=1e-14)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                assert any(ptx_emulate.run(graph, [bad])[1])


_PTX_SCRIPT = """
import sys
import numpy as np
import symgrad as sg
sys.path.insert(0, {tests!r})
from test_linalg_singular import cholesky_sum, inv_sum
open(sys.argv[1], "w").write(sg.grad(inv_sum, target="cuda").ptx(np.eye(3), arch="sm_80"))
open(sys.argv[2], "w").write(sg.grad(cholesky_sum, target="cuda").ptx(np.eye(3), arch="sm_80"))
"""


def test_ptx_of_the_guarded_gradients_assembles(tmp_path):
    assemble_in_child(_PTX_SCRIPT, [tmp_path / "inv.ptx", tmp_path / "cholesky.ptx"])


@pytest.mark.parametrize("target", TARGETS)
def test_the_hot_path_checks_the_guards_too(target):
    """After calls that took the fast path (a plan bound to the argument types), a singular
    matrix of the same types still raises, and a good one after it still gives its value."""
    f = sg.differentiate(inv_sum, target=target)
    ok = np.eye(3) * 2 + 0.25
    for _ in range(3):
        assert f(ok) == pytest.approx(inv_sum(ok), rel=1e-14)
    _raises_like_numpy(lambda: f(SINGULAR["zeros"]), lambda: np.linalg.inv(SINGULAR["zeros"]),
                       _message(inv_sum, "Singular matrix"))
    assert f(ok) == pytest.approx(inv_sum(ok), rel=1e-14)


@sg.custom_gradient
def inv_with_rule(a):
    value = np.sum(np.linalg.inv(a))
    return value, lambda g: g * np.ones_like(a)


def calls_custom(a):
    return inv_with_rule(a) * 2.0


@pytest.mark.parametrize("target", TARGETS)
def test_inside_a_custom_gradient(target):
    """The value of a custom-gradient function raises; its rule replaces only the derivative."""
    a = SINGULAR["rank1_2x2"]
    for make in (sg.differentiate, sg.grad):
        f = make(calls_custom, target=target)
        np.testing.assert_allclose(f(np.eye(2)), 4.0 if make is sg.differentiate else np.full((2, 2), 2.0))
        _raises_like_numpy(lambda: f(a), lambda: np.linalg.inv(a), _message(inv_with_rule.fn, "Singular matrix"))
