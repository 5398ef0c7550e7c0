"""sg.jacobian and sg.hessian: against central differences, against rows of sg.grad (reverse
mode) and columns of sg.jvp (forward mode), modes fwd/rev/auto against each other, the
Rosenbrock Hessian against its analytic form; elementwise, matmul, reductions, a loop region,
scalars and arrays, tuple wrt and tuple outputs, float32 and float64, on target="cpu" and
"python"; compositions (jacobian of grad, vmap of jacobian) and the errors."""
import copy
import pickle

import numpy as np
import pytest

import symgrad as sg

TARGETS = ("python", "cpu")
MODES = ("fwd", "rev", "auto")
RNG = np.random.default_rng(11)


def rand(*shape, dtype="float64"):
    return RNG.uniform(0.5, 1.5, size=shape).astype(dtype)


def central_jacobian(fn, args, i, eps=1e-6):
    """d fn / d args[i] by central differences, shape out.shape + arg.shape."""
    x = np.asarray(args[i], dtype=np.float64)
    columns = []
    for e in np.eye(x.size):
        step = e.reshape(x.shape) * eps
        plus = list(args)
        minus = list(args)
        plus[i], minus[i] = x + step, x - step
        columns.append((np.asarray(fn(*plus)) - np.asarray(fn(*minus))) / (2 * eps))
    stacked = np.stack(columns, axis=-1)   # out.shape + (x.size,)
    return stacked.reshape(np.shape(columns[0]) + x.shape)


# -- functions of each family ---------------------------------------------------------------------
def elementwise(x):
    return np.exp(np.sin(x)) * np.sqrt(x) - np.log(x)


def matmul(x, W):
    return np.tanh(W @ x) + W @ (x * x)


def reductions(x):
    return np.sum(x * x, axis=0) + np.max(x, axis=1).sum() + np.mean(np.exp(x), axis=1)[::-1]


def looped(x, n):        # n > 4: a loop region, not an unrolled trace
    acc = x
    for i in range(n):
        acc = np.sin(acc) * x + 0.1 * i
    return acc


def scalar_fn(s):
    return s * s * np.sin(s)


def mixed(s, x):         # scalar and array arguments, array output
    return s * np.exp(x) + s ** 3


CASES = [
    (elementwise, lambda dt: (rand(4, dtype=dt),)),
    (matmul, lambda dt: (rand(3, dtype=dt), rand(5, 3, dtype=dt))),
    (reductions, lambda dt: (rand(3, 3, dtype=dt),)),
    (scalar_fn, lambda dt: (np.asarray(0.7, dtype=dt)[()] if dt == "float32" else 0.7,)),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fn,make_args", CASES, ids=[c[0].__name__ for c in CASES])
def test_against_central_differences(fn, make_args, mode, target):
    args = make_args("float64")
    J = sg.jacobian(fn, mode=mode, target=target)(*args)
    reference = central_jacobian(fn, args, 0)
    assert np.shape(J) == reference.shape == np.shape(fn(*args)) + np.shape(args[0])
    np.testing.assert_allclose(J, reference, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn,make_args", CASES, ids=[c[0].__name__ for c in CASES])
def test_float32(fn, make_args, target):
    args = make_args("float32")
    for mode in MODES:
        J = sg.jacobian(fn, mode=mode, target=target)(*args)
        assert np.asarray(J).dtype == np.float32
        reference = central_jacobian(fn, [np.asarray(a, np.float64) for a in args], 0)
        np.testing.assert_allclose(J, reference, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("target", TARGETS)
def test_rows_are_gradients_and_columns_are_jvps(target):
    x, W = rand(3), rand(5, 3)
    J = sg.jacobian(matmul, mode="rev", target=target)(x, W)
    for r in range(5):   # row r: the gradient of output r
        row = sg.grad(lambda x, W, r=r: matmul(x, W)[r], target=target)(x, W)
        np.testing.assert_allclose(J[r], row, rtol=1e-12, atol=1e-12)
    jvp = sg.jvp(matmul, target=target)
    J = sg.jacobian(matmul, mode="fwd", target=target)(x, W)
    for c, e in enumerate(np.eye(3)):   # column c: the tangent along unit vector c
        np.testing.assert_allclose(J[:, c], jvp(x, W, e)[1], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_loop_region(target):
    x = rand(3)
    results = [sg.jacobian(looped, mode=mode, target=target)(x, 6) for mode in MODES]
    reference = central_jacobian(looped, (x, 6), 0)
    for J in results:
        np.testing.assert_allclose(J, reference, rtol=1e-6, atol=1e-7)
    source = sg.jacobian(looped, mode="rev", target="python").source_for(x, 6)
    assert "for " in source and "range(6)" in source   # the loop stayed a loop


@pytest.mark.parametrize("target", TARGETS)
def test_tuple_wrt_and_tuple_outputs(target):
    def two(s, x):
        return mixed(s, x), np.sum(x * x) * s
    s, x = 0.8, rand(4)
    for mode in MODES:
        (j_ss, j_sx), (j_ts, j_tx) = sg.jacobian(two, wrt=(0, 1), mode=mode, target=target)(s, x)
        assert np.shape(j_ss) == (4,) and j_sx.shape == (4, 4)
        assert np.shape(j_ts) == () and j_tx.shape == (4,)
        np.testing.assert_allclose(j_ss, central_jacobian(mixed, (s, x), 0), rtol=1e-6)
        np.testing.assert_allclose(j_sx, central_jacobian(mixed, (s, x), 1), rtol=1e-6)
        np.testing.assert_allclose(j_ts, np.sum(x * x), rtol=1e-12)
        np.testing.assert_allclose(j_tx, 2 * x * s, rtol=1e-12)
    (single,) = sg.jacobian(mixed, wrt=(1,), target=target)(s, x)   # a 1-tuple
    np.testing.assert_allclose(single, np.diag(s * np.exp(x)), rtol=1e-12)
    by_name = sg.jacobian(mixed, wrt="x", target=target)(s, x)
    np.testing.assert_allclose(by_name, single, rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_output_that_does_not_depend_on_the_argument(target):
    def f(x, y):
        return x * 2.0, np.sum(y)
    x, y = rand(3), rand(2)
    for mode in MODES:
        jx, jy = sg.jacobian(f, wrt=1, mode=mode, target=target)(x, y)
        np.testing.assert_array_equal(jx, np.zeros((3, 2)))
        np.testing.assert_array_equal(jy, np.ones(2))


@pytest.mark.parametrize("target", TARGETS)
def test_auto_mode_picks_by_size(target):
    from symgrad.jacobian import choose_mode
    from symgrad.ir import make
    wide = make("arg", (), (0, "x", "float64", (10,)))
    narrow = make("arg", (), (1, "y", "float64", (2,)))
    assert choose_mode("auto", [narrow], [wide]) == "fwd"
    assert choose_mode("auto", [wide], [narrow]) == "rev"
    assert choose_mode("auto", [wide], [wide]) == "rev"
    x = rand(2)   # 2 inputs, 4 outputs: forward mode
    sources = {mode: sg.jacobian(outer, mode=mode).source_for(x) for mode in MODES}
    assert sources["auto"] == sources["fwd"] != sources["rev"]
    np.testing.assert_allclose(sg.jacobian(outer, target=target)(x),
                               central_jacobian(outer, (x,), 0), rtol=1e-7)


def outer(x):
    return np.outer(x, x).ravel()


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosenbrock_hessian(x):
    n = x.size
    H = np.zeros((n, n))
    d = np.zeros(n)
    d[:-1] += 1200 * x[:-1] ** 2 - 400 * x[1:] + 2
    d[1:] += 200
    H[np.arange(n), np.arange(n)] = d
    off = -400 * x[:-1]
    H[np.arange(n - 1), np.arange(1, n)] = off
    H[np.arange(1, n), np.arange(n - 1)] = off
    return H


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ("float64", "float32"))
def test_hessian_of_rosenbrock(target, dtype):
    x = rand(7, dtype=dtype)
    H = sg.hessian(rosenbrock, target=target)(x)
    assert H.shape == (7, 7) and H.dtype == np.dtype(dtype)
    tol = 1e-12 if dtype == "float64" else 1e-4
    np.testing.assert_allclose(H, rosenbrock_hessian(x.astype(np.float64)), rtol=tol, atol=tol * 100)
    np.testing.assert_allclose(H, H.T, rtol=tol)
    via_jacobian = sg.jacobian(sg.grad(rosenbrock), mode="rev", target=target)(x)
    np.testing.assert_allclose(H, via_jacobian, rtol=tol, atol=tol * 100)


@pytest.mark.parametrize("target", TARGETS)
def test_hessian_tuple_wrt_and_matrix_argument(target):
    def f(x, y):
        return np.sum(x * x * y) + np.sum(np.sin(x)) * np.sum(y)
    x, y = rand(3), rand(3)
    (hxx, hxy), (hyx, hyy) = sg.hessian(f, wrt=(0, 1), target=target)(x, y)
    np.testing.assert_allclose(hxx, np.diag(2 * y - np.sin(x) * np.sum(y)), rtol=1e-12)
    np.testing.assert_allclose(hxy, np.diag(2 * x) + np.cos(x)[:, None], rtol=1e-12)
    np.testing.assert_allclose(hyx, hxy.T, rtol=1e-12)
    np.testing.assert_allclose(hyy, np.zeros((3, 3)), atol=0)
    M = rand(2, 3)
    H = sg.hessian(lambda M: np.sum(M ** 3), target=target)(M)
    assert H.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(H.reshape(6, 6), np.diag(6 * M.ravel()), rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_of_jacobian_gives_per_example_blocks(target):
    def residual(p, obs):
        return np.stack([p[0] * np.sin(p[1]) - obs[0], p[2] * p[0] - obs[1]])
    P, O = rand(6, 3), rand(6, 2)
    blocks = sg.vmap(sg.jacobian(residual), in_axes=(0, 0), target=target)(P, O)
    assert blocks.shape == (6, 2, 3)
    for k in range(6):
        np.testing.assert_allclose(blocks[k], central_jacobian(residual, (P[k], O[k]), 0),
                                   rtol=1e-6, atol=1e-8)


def test_source_is_batched_numpy():
    x, W = rand(3), rand(5, 3)
    for mode in ("fwd", "rev"):
        f = sg.jacobian(matmul, mode=mode, target="python")
        source = f.source_for(x, W)
        assert "def jacobian_matmul(x, W):" in source
        assert "    for " not in source    # one batched pass, not a loop over basis vectors
        assert "np.arange" in source    # the basis, not a stored identity matrix
        assert "jacobian_matmul" in f.ir_for(x, W)
    assert "define" in sg.jacobian(matmul).llvm_ir(x, W)


def test_pickle_and_copy_keep_mode_and_wrt():
    f = sg.jacobian(mixed, wrt=(0, 1), mode="rev", target="python")
    for twin in (pickle.loads(pickle.dumps(f)), copy.deepcopy(f)):
        assert twin.mode == "rev" and twin.wrt == (0, 1) and twin.target == "python"
        for a, b in zip(twin(0.5, rand(2) * 0 + 1.0), f(0.5, np.ones(2))):
            np.testing.assert_allclose(a, b)
    h = pickle.loads(pickle.dumps(sg.hessian(rosenbrock)))
    x = rand(4)
    np.testing.assert_allclose(h(x), rosenbrock_hessian(x), rtol=1e-12)


def test_errors():
    with pytest.raises(ValueError, match="mode must be one of"):
        sg.jacobian(elementwise, mode="forward")
    with pytest.raises(TypeError, match="pytree argument 'p'"):
        sg.jacobian(lambda p: p["a"] * 2.0)({"a": rand(2)})
    with pytest.raises(TypeError, match="output 1 is int64"):
        sg.jacobian(lambda x, k: (x * 2.0, k + 1))(rand(2), np.arange(2))
    with pytest.raises(TypeError, match="not a float"):
        sg.jacobian(lambda x, k: x * k, wrt=1)(rand(2), np.arange(2))
    with pytest.raises(TypeError, match="hvp Function"):
        sg.jacobian(sg.hvp(rosenbrock))


def test_readme_example_is_what_symgrad_prints(tmp_path):
    """The README's jacobian section: its numbers and its generated source are real (run as
    a script after the two imports, so its line numbers are the README's)."""
    import pathlib
    import runpy
    text = (pathlib.Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text[text.index("### Jacobians and Hessians"):]
    example, shown = section.split("```python\n")[1:3]
    example, shown = example.split("```")[0], shown.split("```")[0]
    script = tmp_path / "readme_jacobian.py"
    script.write_text("import numpy as np\nimport symgrad as sg\n\n" + example.replace("print(", "str("))
    namespace = runpy.run_path(str(script))
    assert namespace["jac"].source == shown
    np.testing.assert_allclose(namespace["J"], [[0.18070664, 0.36141328], [0.14020743, -0.28041487],
                                                [0.29925125, 0.19950083]], rtol=1e-7)
    assert namespace["JW"].shape == (3, 3, 2)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", ("fwd", "rev"))
def test_a_linear_map_has_its_matrix_as_jacobian(mode, target):
    """A matrix product by the basis is read off as the matrix, not multiplied out."""
    def linear(x, W):
        return W @ x
    x, W = rand(3), rand(4, 3)
    f = sg.jacobian(linear, mode=mode, target=target)
    np.testing.assert_array_equal(f(x, W), W)
    source = f.source_for(x, W)
    assert "np.arange" not in source and "@" not in source, source


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("mode", MODES)
def test_empty_arrays(mode, target):
    assert sg.jacobian(elementwise, mode=mode, target=target)(np.ones(0)).shape == (0, 0)
    assert sg.jacobian(rosenbrock, mode=mode, target=target)(np.ones(0)).shape == (0,)
