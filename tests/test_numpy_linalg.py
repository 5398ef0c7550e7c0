"""Contractions, linear algebra, sorting and scans (symgrad.numpy_contractions, numpy_linalg,
numpy_sorting): values against NumPy, first and second derivatives against finite
differences, float32 kept, on target="python" and target="cpu"; and the special points
(ties in sort, zeros in cumprod, singular det, small matrices, argmax's integer data)."""
import numpy as np
import pytest

import symgrad as sg

TARGETS = ("python", "cpu")
W = np.linspace(0.5, 1.7, 64)   # fixed weights: every output element gets its own cotangent
B = np.random.default_rng(3).standard_normal((3, 4))
SPREAD = np.arange(24.0).reshape(2, 3, 4) / 24   # keeps the entries of x + SPREAD distinct


def _weigh(y):
    y = np.ravel(y)
    return np.sum(np.sin(y) * W[:y.size])


def _spd(x):
    return x @ np.swapaxes(x, -1, -2) + 3 * np.eye(x.shape[-1])


# (name, function of one array, input shape, kind of input)
ROWS = [
    ("einsum_matmul", lambda x: np.einsum("ij,jk->ik", x, B), (2, 3), "any"),
    ("einsum_chain", lambda x: np.einsum("ij,jk,kl->il", x, B, B.T), (2, 3), "any"),
    ("einsum_trace_diag", lambda x: np.concatenate([np.einsum("ii->i", x), [np.einsum("ii", x)],
                                                    np.einsum("ij->ji", x).ravel()]), (3, 3), "any"),
    ("einsum_batch", lambda x: np.einsum("bij,bkj->bik", x, x) + np.einsum("...ij,jk->...ik", x, B[:, :3])
     + np.einsum("bij->j", x)[None, None, :3], (2, 3, 3), "any"),
    ("einsum_implicit", lambda x: np.stack([np.einsum("ij,ij", x, x), np.einsum("i,i", x[0], x[1])]), (2, 3), "any"),
    ("einsum_outer", lambda x: np.concatenate([np.einsum("i,j->ij", x[0], x[1]).ravel(),
                                                  np.einsum("ij,ij->ij", x, x).ravel()]), (2, 3), "any"),
    ("tensordot", lambda x: np.concatenate([np.tensordot(x, B, 1).ravel(), np.tensordot(x, x, 2)[None],
                                            np.tensordot(x, x, ([0], [0])).ravel(),
                                            np.tensordot(x, x, axes=([1, 0], [1, 0]))[None]]), (3, 3), "any"),
    ("inner_vdot", lambda x: np.concatenate([np.inner(x, x).ravel(), np.inner(x[0], x[1])[None],
                                             np.inner(x, 2.0).ravel(), [np.vdot(x, B[:, :3])]]), (3, 3), "any"),
    ("kron", lambda x: np.concatenate([np.kron(x, x[:2, :2]).ravel(), np.kron(x[0], x[1])]), (3, 3), "any"),
    ("cross", lambda x: np.concatenate([np.cross(x, x[::-1]).ravel(), np.cross(x[0], x[1, :2]),
                                        np.cross(x[:, :2], x[::-1, :2]).ravel(),
                                        np.cross(x.T, x, axisa=0, axisc=0).ravel()]), (3, 3), "any"),
    ("matrix_power", lambda x: np.concatenate([np.linalg.matrix_power(x / 3, 3).ravel(),
                                               np.linalg.matrix_power(x, 0).ravel(),
                                               np.linalg.matrix_power(x, -2).ravel()]), (3, 3), "matrix"),
    ("det", lambda x: np.stack([np.linalg.det(x), np.linalg.det(x[:2, :2]), np.linalg.det(x[:1, :1])]), (3, 3), "matrix"),
    ("det_batch", lambda x: np.linalg.det(x), (2, 3, 3), "matrix"),
    # (scaled: a det of 3^5 in sin() would vary too fast for the finite differences)
    ("det_lu", lambda x: np.stack([np.linalg.det(x / 2), np.linalg.det(x[:4, :4] / 2)]), (5, 5), "matrix"),
    ("det_lu_batch", lambda x: np.linalg.det(x[..., ::-1, :] / 2), (2, 5, 5), "matrix"),
    ("slogdet", lambda x: np.concatenate([np.linalg.slogdet(x)[0] * np.linalg.slogdet(x)[1],
                                          np.linalg.slogdet(x).logabsdet]), (2, 3, 3), "matrix"),
    ("inv", lambda x: np.linalg.inv(x), (3, 3), "matrix"),
    ("inv_batch", lambda x: np.linalg.inv(x), (2, 3, 3), "matrix"),
    ("solve", lambda x: np.concatenate([np.linalg.solve(x, B[:, 0]), np.linalg.solve(x, B).ravel(),
                                        np.linalg.solve(x, x[0])]), (3, 3), "matrix"),
    ("solve_batch", lambda x: np.linalg.solve(x, B[None, :, :2]), (2, 3, 3), "matrix"),
    ("cholesky", lambda x: np.concatenate([np.linalg.cholesky(_spd(x)).ravel(),
                                           np.linalg.cholesky(_spd(x), upper=True).ravel()]), (3, 3), "any"),
    ("cholesky_batch", lambda x: np.linalg.cholesky(_spd(x)), (2, 3, 3), "any"),
    ("sort", lambda x: np.concatenate([np.sort(x).ravel(), np.sort(x, axis=0).ravel(), np.sort(x, axis=None),
                                       np.partition(x, 1, axis=1)[:, 1]]), (3, 4), "distinct"),
    ("cumsum_cumprod", lambda x: np.concatenate([np.cumsum(x).ravel(), np.cumsum(x, axis=0).ravel(),
                                                 np.cumprod(x, axis=1).ravel(), np.cumprod(x[0]), x.cumsum(1)[1],
                                                 x.cumprod(axis=0)[2]]), (3, 4), "any"),
    ("arg_extrema", lambda x: x * np.argmax(x, axis=1, keepdims=True) + np.argmin(x) * x
     + x.argmax(0) + x.argmin(axis=1)[:, None], (3, 4), "distinct"),
]
# partition along an axis is only defined up to the order inside each side: compare the kth
# entry (above) and, for the whole array, the sets (test_partition_is_a_partition)


def _input(kind, shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, shape)
    if kind == "matrix":   # well conditioned
        return x + 3.0 * np.eye(shape[-1])
    if kind == "distinct":
        return x * 0.3 + SPREAD[0, :shape[0], :shape[1]] if len(shape) == 2 else x
    return x


FIRST_ORDER = [row + (target,) for target in TARGETS for row in ROWS]


@pytest.mark.parametrize("name, fn, shape, kind, target", FIRST_ORDER,
                         ids=[f"{r[0]}-{r[-1]}" for r in FIRST_ORDER])
def test_values_and_first_order(name, fn, shape, kind, target):
    x = _input(kind, shape, 20)
    f = sg.differentiate(fn, target=target)
    got, want = f(x), fn(x)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    loss = sg.differentiate(lambda x: _weigh(fn(x)), target=target)
    assert sg.check_grad(loss, x) < 1e-6
    x32 = x.astype(np.float32)
    assert np.asarray(f(x32)).dtype == np.asarray(fn(x32)).dtype   # float32 kept
    g32 = loss.grad(x32)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, loss.grad(x), rtol=2e-3, atol=2e-3)


# Second order on the CPU for some contraction, sorting and scan rows and every factorisation
# routine (LU, Gauss-Jordan, Cholesky; batched); target='python' runs them all.
CPU_SECOND_ORDER = ("einsum_chain", "tensordot", "sort", "cumsum_cumprod", "det", "det_lu_batch",
                    "slogdet", "inv", "solve_batch", "cholesky_batch")
SECOND_ORDER = [row + ("python",) for row in ROWS] + \
    [row + ("cpu",) for row in ROWS if row[0] in CPU_SECOND_ORDER]


@pytest.mark.parametrize("name, fn, shape, kind, target", SECOND_ORDER,
                         ids=[f"{r[0]}-{r[-1]}" for r in SECOND_ORDER])
def test_second_order(name, fn, shape, kind, target):
    """The gradient's own gradient (a Hessian-vector product) against finite differences."""
    x = _input(kind, shape, 21)
    first = sg.grad(lambda x: _weigh(fn(x)), target=target)
    weights = np.arange(x.size).reshape(x.shape)
    second = sg.differentiate(lambda x: np.sum(np.cos(first(x)) * weights), target=target)
    assert sg.check_grad(second, x) < 1e-5


@pytest.mark.parametrize("target", TARGETS)
def test_scalars(target):
    """0-d and 1-element operands: einsum / inner / kron of scalars, 1x1 det and inverse."""
    def f(s):
        m = np.reshape(s, (1, 1))
        return (np.einsum(",->", s, s) + np.inner(s, 3.0) + np.kron(s, s) + np.linalg.det(m * 2.0)
                + np.linalg.inv(m)[0, 0] + np.cumsum(s)[0] + np.cumprod(s * s)[0] + np.sort(m)[0, 0])
    g = sg.differentiate(f, target=target)
    np.testing.assert_allclose(g(0.7), f(0.7), rtol=1e-14)
    assert sg.check_grad(g, 0.7) < 1e-7
    assert abs(g.grad.grad(0.7) - (g.grad(0.7 + 1e-5) - g.grad(0.7 - 1e-5)) / 2e-5) < 1e-5


@pytest.mark.parametrize("target", TARGETS)
def test_sort_ties_follow_the_stable_permutation(target):
    """With equal keys, output slot r's cotangent goes to the element a stable sort puts at
    r (equal elements in their original order), and NaN sorts last, as NumPy."""
    x = np.array([2.0, 1.0, 2.0, 1.0, 0.5])
    weights = np.arange(1.0, 6.0)
    f = sg.differentiate(lambda x: np.sum(np.sort(x) * weights), target=target)
    order = np.argsort(x, kind="stable")    # [4, 1, 3, 0, 2]
    want = np.empty(5)
    want[order] = weights
    np.testing.assert_array_equal(f.grad(x), want)
    nan = np.array([1.0, np.nan, -np.inf, 0.0, np.nan, np.inf])
    np.testing.assert_array_equal(sg.differentiate(lambda x: np.sort(x), target=target)(nan), np.sort(nan))
    k = sg.differentiate(lambda x: np.argmax(x) + np.argmin(x) * 10 + 0.0 * x[0], target=target)
    assert k(np.array([1.0, 3.0, 3.0, -1.0, -1.0])) == 1 + 3 * 10   # the first of equal extrema
    assert k(np.array([1.0, np.nan, 3.0, np.nan])) == 1 + 1 * 10    # the first NaN, as NumPy


@pytest.mark.parametrize("target", TARGETS)
def test_partition_is_a_partition(target):
    x = np.random.default_rng(22).permutation(10).astype(float)
    got = sg.differentiate(lambda x: np.partition(x, 3), target=target)(x)
    assert got[3] == np.partition(x, 3)[3]
    assert np.all(got[:3] <= got[3]) and np.all(got[4:] >= got[3])
    np.testing.assert_array_equal(np.sort(got), np.sort(x))


@pytest.mark.parametrize("target", TARGETS)
def test_cumprod_with_zeros(target):
    """d cumprod(x)[k] / d x[j] = prod of x[:k+1] but x[j], zeros included (no 0 / 0)."""
    x = np.array([1.5, 0.0, 2.0, 0.0, -3.0])
    weights = np.arange(1.0, 6.0)
    f = sg.differentiate(lambda x: np.sum(np.cumprod(x) * weights), target=target)
    want = [sum(weights[k] * np.prod(np.delete(x[:k + 1], j)) for k in range(j, 5)) for j in range(5)]
    np.testing.assert_allclose(f.grad(x), want, rtol=1e-15)
    assert f(x) == np.sum(np.cumprod(x) * weights)
    h = sg.hvp(lambda x: np.sum(np.cumprod(x) * weights), target=target)(x, np.ones(5))
    assert np.all(np.isfinite(h))
    ints = sg.differentiate(lambda x, k: x * np.cumsum(k)[-1] + np.cumprod(k)[2], target=target)
    assert ints(1.0, np.array([2, 3, 4])) == 1.0 * 9 + 24


@pytest.mark.parametrize("target", TARGETS)
def test_small_matrices_and_singular_det(target):
    a = np.array([[4.0, 7.0], [2.0, 6.0]])
    det = sg.differentiate(lambda a: np.linalg.det(a), target=target)
    assert abs(det(a) - 10.0) < 1e-13
    np.testing.assert_allclose(det.grad(a), np.linalg.inv(a).T * 10.0, rtol=1e-14)
    inv = sg.differentiate(lambda a: np.sum(np.linalg.inv(a)), target=target)
    np.testing.assert_allclose(inv(a), np.sum(np.linalg.inv(a)), rtol=1e-14)
    ai = np.linalg.inv(a)
    np.testing.assert_allclose(inv.grad(a), -(ai.T @ np.ones((2, 2)) @ ai.T), rtol=1e-13)
    swap = np.array([[0.0, 1.0], [1.0, 0.0]])   # needs a row exchange: det -1
    assert det(swap) == -1.0
    for singular in (np.ones((3, 3)), np.diag([1.0, 0.0, 2.0])):
        assert det(singular) == 0.0
        sign, logdet = sg.differentiate(lambda a: np.linalg.slogdet(a), target=target)(singular)
        assert sign == 0.0 and logdet == -np.inf
    empty = sg.differentiate(lambda a: np.linalg.det(a[:0, :0]) * a[0, 0], target=target)
    assert empty(a) == 4.0


def test_wrong_shapes_are_numpy_errors():
    with pytest.raises(np.linalg.LinAlgError):
        sg.grad(lambda a: np.linalg.det(a), target="python")(np.ones((2, 3)))
    with pytest.raises(ValueError, match="shape-mismatch"):
        sg.grad(lambda a: np.sum(np.tensordot(a, a, ([0], [1]))), target="python")(np.ones((2, 3)))
    with pytest.raises(ValueError, match="operand"):
        sg.grad(lambda a: np.sum(np.einsum("ijk->", a)), target="python")(np.ones((2, 3)))
    with pytest.raises(ValueError, match="kth"):
        sg.grad(lambda a: np.sum(np.partition(a, 5)), target="python")(np.ones(3))


# ----------------------------------------------------------------------------------------------
# The factorisations are loop regions over the pivot index (symgrad.numpy_linalg): the IR does
# not grow with n; sizes 1 and n > 3 (det's closed forms stop at 3); stacks; special points.

def lu_loss(a):
    return np.linalg.slogdet(a)[1] + np.sum(np.sin(np.linalg.det(a / 3)))


def gauss_jordan_loss(a):
    return np.sum(np.sin(np.linalg.inv(a))) + np.sum(np.sin(np.linalg.solve(a, a[..., :1] * 2.0)))


def cholesky_loss(a):
    spd = a @ np.swapaxes(a, -1, -2) + 0.5 * np.eye(a.shape[-1])
    return np.sum(np.sin(np.linalg.cholesky(spd))) + np.sum(np.sin(np.linalg.cholesky(spd, upper=True)))


ROUTINES = {"lu": lu_loss, "gauss_jordan": gauss_jordan_loss, "cholesky": cholesky_loss}


def _matrix(shape, seed=30):
    return _input("matrix", shape, seed)


@pytest.mark.parametrize("routine", ROUTINES)
def test_the_ir_does_not_grow_with_n(routine):
    grad = sg.grad(ROUTINES[routine], target="python")
    small, large = _matrix((4, 4)), _matrix((24, 24))
    assert len(grad.ir_for(small).splitlines()) == len(grad.ir_for(large).splitlines())
    def code_lines(source):   # a large constant's binding gets a comment saying where it is from
        return [line for line in source.splitlines() if not line.strip().startswith("#")]
    assert len(code_lines(grad.source_for(small))) == len(code_lines(grad.source_for(large)))
    assert grad.source_for(large).count("for k in range(") >= 1   # the pivot loop, not unrolled


def test_the_cpu_kernel_does_not_grow_with_n():
    loss = sg.grad(lambda a: lu_loss(a) + gauss_jordan_loss(a) + cholesky_loss(a), target="cpu")
    sizes = [len(loss.llvm_ir(_matrix((n, n))).splitlines()) for n in (6, 40)]
    assert sizes[1] < 1.1 * sizes[0]   # unrolled, 40 pivot steps were about 7x the code of 6


@pytest.mark.parametrize("target", TARGETS)
def test_one_by_one(target):
    def f(a):
        sign, logdet = np.linalg.slogdet(a)
        return (np.linalg.det(a), sign, logdet, np.linalg.inv(a), np.linalg.solve(a, np.array([3.0])),
                np.linalg.cholesky(a * a))
    a = np.array([[-2.5]])
    got = sg.differentiate(f, target=target)(a)
    for g, w in zip(got, f(a)):
        np.testing.assert_allclose(g, w, rtol=1e-15)
        assert np.shape(g) == np.shape(w)
    for routine in ROUTINES.values():
        loss = sg.differentiate(routine, target=target)
        assert sg.check_grad(loss, a) < 1e-7
    inv = sg.grad(lambda a: np.linalg.inv(a)[0, 0], target=target)
    np.testing.assert_allclose(inv(a), [[-1 / 6.25]], rtol=1e-15)


# (function, its derivative in closed form) on stacks: d det = det inv^T, d sum(inv * W) =
# -inv^T W inv^T, d sum(solve(a, B) * W) = -solve(a^T, W) x^T
def _det_and_slogdet(a):
    return np.sum(np.linalg.det(a) * 0.5 + np.linalg.slogdet(a).logabsdet)


def _inv_weighted(a):
    return np.sum(np.linalg.inv(a) * np.arange(16.0).reshape(4, 4))


def _solve_weighted(a, b):
    return np.sum(np.linalg.solve(a, b) * np.arange(8.0).reshape(4, 2))


@pytest.mark.parametrize("target", TARGETS)
def test_stacks_of_matrices(target):
    a = _matrix((2, 3, 4, 4))
    b = np.random.default_rng(31).uniform(-1, 1, (3, 4, 2))   # broadcast against a's stack
    ai = np.linalg.inv(a)
    det = sg.grad(_det_and_slogdet, target=target)
    np.testing.assert_allclose(det(a), (0.5 * np.linalg.det(a)[..., None, None] + 1) * np.swapaxes(ai, -1, -2),
                               rtol=1e-12)
    weights = np.arange(16.0).reshape(4, 4)
    aiT = np.swapaxes(ai, -1, -2)
    np.testing.assert_allclose(sg.grad(_inv_weighted, target=target)(a), -aiT @ weights @ aiT,
                               rtol=1e-11, atol=1e-13)
    solve = sg.differentiate(_solve_weighted, target=target)
    x = np.linalg.solve(a, b)
    np.testing.assert_allclose(solve(a, b), _solve_weighted(a, b), rtol=1e-13)
    g_a, g_b = solve.grad(a, b, wrt=(0, 1)) if False else (sg.grad(_solve_weighted, wrt=0, target=target)(a, b),
                                                           sg.grad(_solve_weighted, wrt=1, target=target)(a, b))
    lam = np.linalg.solve(np.swapaxes(a, -1, -2), np.broadcast_to(np.arange(8.0).reshape(4, 2), x.shape))
    np.testing.assert_allclose(g_a, -lam @ np.swapaxes(x, -1, -2), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(g_b, np.sum(lam, axis=0), rtol=1e-11, atol=1e-13)
    spd = a @ np.swapaxes(a, -1, -2)
    chol = sg.differentiate(lambda s: np.linalg.cholesky(s), target=target)
    np.testing.assert_allclose(chol(spd), np.linalg.cholesky(spd), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_values_match_numpy_at_moderate_n(target):
    """n = 12: values to rounding (relative to the result's scale), det's gradient det inv^T."""
    a = _matrix((12, 12), 32) / 2
    fns = sg.differentiate(lambda a: (np.linalg.det(a), np.linalg.slogdet(a), np.linalg.inv(a),
                                      np.linalg.solve(a, a[0]), np.linalg.cholesky(a @ a.T)), target=target)
    det, (sign, logdet), inv, solve, chol = fns(a)
    assert abs(det - np.linalg.det(a)) < 1e-13 * abs(det)
    assert sign == np.linalg.slogdet(a).sign and abs(logdet - np.linalg.slogdet(a).logabsdet) < 1e-14 * 10
    for got, want in ((inv, np.linalg.inv(a)), (solve, np.linalg.solve(a, a[0])), (chol, np.linalg.cholesky(a @ a.T))):
        assert np.max(np.abs(got - want)) < 1e-14 * 20 * np.max(np.abs(want))
    np.testing.assert_allclose(sg.grad(lambda a: np.linalg.det(a), target=target)(a),
                               np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-11)
    a32 = a.astype(np.float32)
    got32 = fns(a32)
    assert got32[2].dtype == np.float32
    np.testing.assert_allclose(got32[2], np.linalg.inv(a32), rtol=1e-4, atol=1e-5)


def _laplace_det(a) -> float:
    """det by expansion along the first row (exact for small integer matrices)."""
    if a.shape[0] == 0:
        return 1.0
    return sum((-1) ** j * a[0, j] * _laplace_det(np.delete(a[1:], j, 1)) for j in range(a.shape[0]))


def _adjugate(a):
    """The cofactor matrix transposed, from minors (defined for singular a too)."""
    n = a.shape[0]
    cof = np.array([[(-1) ** (i + j) * _laplace_det(np.delete(np.delete(a, i, 0), j, 1))
                     for j in range(n)] for i in range(n)])
    return cof.T


@pytest.mark.parametrize("target", TARGETS)
def test_singular_det_has_the_adjugate_gradient(target):
    """d det / d a = adj(a)^T, defined at singular matrices too: exact for n <= 3 (the closed
    forms), and through LU when the zero pivot is the last one (rank n - 1, generic)."""
    grad = sg.grad(lambda a: np.linalg.det(a), target=target)
    det = sg.differentiate(lambda a: np.linalg.det(a), target=target)
    for a in (np.array([[1.0, 2.0], [2.0, 4.0]]), np.array([[0.0, 1.0], [0.0, 1.0]]), np.ones((3, 3)),
              np.arange(9.0).reshape(3, 3), np.diag([1.0, 0.0, 2.0])):
        assert det(a) == 0.0
        np.testing.assert_array_equal(grad(a), _adjugate(a).T)
    rank3 = np.array([[2.0, 1.0, 0.0, 1.0], [1.0, 3.0, 1.0, 0.0], [0.0, 1.0, 4.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    rank3[3] = rank3[0] + rank3[2]   # exact in floating point
    assert abs(det(rank3)) < 1e-14
    np.testing.assert_allclose(grad(rank3), _adjugate(rank3).T, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("target", TARGETS)
def test_ties_in_pivoting(target):
    """Equal magnitudes in a pivot column: the first row wins (as LAPACK); values and the
    (smooth) derivatives are those of the matrix, whichever row is chosen."""
    a = np.array([[1.0, 2.0, 0.0, 1.0], [-1.0, 1.0, 3.0, 0.0], [1.0, 0.0, 2.0, 2.0], [0.0, 1.0, -1.0, 3.0]])
    f = sg.differentiate(lambda a: (np.linalg.det(a), np.linalg.slogdet(a)[0], np.linalg.inv(a)), target=target)
    det, sign, inv = f(a)
    np.testing.assert_allclose(det, np.linalg.det(a), rtol=1e-14)
    assert sign == np.linalg.slogdet(a).sign
    np.testing.assert_allclose(inv, np.linalg.inv(a), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(sg.grad(lambda a: np.linalg.det(a), target=target)(a),
                               np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-13)
    ai = np.linalg.inv(a)
    np.testing.assert_allclose(sg.grad(lambda a: np.sum(np.linalg.inv(a)), target=target)(a),
                               -(ai.T @ np.ones((4, 4)) @ ai.T), rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_nan_is_never_hidden(target):
    """A NaN entry makes det, log|det| and every entry NumPy gives as NaN NaN here too (NumPy's
    LAPACK skips a NaN pivot and leaves other entries finite; here a NaN pivot wins)."""
    def f(a):
        return np.linalg.det(a), np.linalg.slogdet(a).logabsdet, np.linalg.inv(a), np.linalg.solve(a, a[0] * 0 + 1.0)
    g = sg.differentiate(f, target=target)
    for i, j in ((1, 2), (3, 0), (0, 0)):
        a = np.eye(4) * 3 + np.arange(16.0).reshape(4, 4) / 10
        a[i, j] = np.nan
        with np.errstate(all="ignore"):
            want = f(a)
            got = g(a)
        for w, o in zip(want, got):
            assert np.all(np.isnan(o)[np.isnan(w)])
        assert np.isnan(got[0]) and np.isnan(got[1])


def test_ptx_of_the_factorisations_runs_in_the_emulator():
    """target='cuda': the gradients' loops as host-driven launches, run through the CPU
    emulation of the PTX kernels (ptxas assembles them in tests/test_ptx.py)."""
    from symgrad.codegen import ptx_emulate
    a = _matrix((2, 4, 4))
    for routine in ROUTINES.values():
        py = sg.grad(routine, target="python")
        np.testing.assert_allclose(ptx_emulate.run(py.graph_for((a,))[0], [a]), py(a), rtol=1e-11, atol=1e-13)


def _all_routines(a):
    return lu_loss(a) + gauss_jordan_loss(a) + cholesky_loss(a)


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_and_forward_mode_through_the_loops(target):
    a = _matrix((3, 5, 5))
    grad = sg.grad(_all_routines, target=target)
    np.testing.assert_allclose(sg.vmap(grad)(a), np.stack([grad(m) for m in a]), rtol=1e-12, atol=1e-13)
    v = np.linspace(-1.0, 1.0, 25).reshape(5, 5)
    value, tangent = sg.jvp(_all_routines, target=target)(a[0], v)
    assert value == pytest.approx(_all_routines(a[0]), rel=1e-13)
    assert tangent == pytest.approx(np.sum(grad(a[0]) * v), rel=1e-11)
