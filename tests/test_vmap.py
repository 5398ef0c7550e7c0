"""sg.vmap against a Python loop over the examples (np.stack of the per-example results), for
every op family of the batching table, in_axes/out_axes variants (None, negative), nested
vmap, pytrees; per-example gradients against a loop of sg.grad; on target="cpu" and "python",
float64 and float32. The completeness test: every op of the table has a batching rule."""
import pickle

import numpy as np
import pytest

import symgrad as sg
from symgrad import batching
from symgrad.ir import OPS

TARGETS = ("python", "cpu")
RNG = np.random.default_rng(7)


def rand(*shape, dtype="float64"):
    return RNG.uniform(0.5, 1.5, size=shape).astype(dtype)


def loop_reference(fn, args, in_axes, out_axes=0):
    """What vmap means: fn on each example, the results stacked along out_axes."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    size = next(np.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None)
    results = []
    for i in range(size):
        example = [a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, axes)]
        results.append(fn(*example))
    if isinstance(results[0], tuple):
        outs = out_axes if isinstance(out_axes, tuple) else (out_axes,) * len(results[0])
        return tuple(np.stack([r[k] for r in results], axis=ax) for k, ax in enumerate(outs))
    return np.stack(results, axis=out_axes)


# -- one function per op family -------------------------------------------------------------------
def unary(x):
    return np.exp(np.sin(x)) + np.sqrt(x) * np.tanh(x) - np.log(x)


def binary_broadcast(x, y):          # y is a row broadcast against x's columns
    return x * y - x / y + np.maximum(x, y) ** 2


def scalar_mix(x, s):
    return np.arctan2(x, s) + s * x


def select(x, y):
    return np.where(x > y, np.sqrt(x), y * y)


def cast_compare(x, k):              # k: an integer array
    return x * k.astype(x.dtype) + (x > 1.0)


def reductions(x):
    return np.sum(x, axis=0) + np.max(x, axis=1).sum() + np.prod(x) + np.mean(x, axis=-1, keepdims=True).sum()


def min_keepdims(x):
    return x - np.min(x, axis=1, keepdims=True)


def shapes(x):
    return np.transpose(x.reshape(2, 3, 2), (2, 0, 1)).reshape(4, 3) + (x[0, :3] + np.zeros((4, 3)))


def matvec(W, x):
    return W @ x


def vecmat(x, W):
    return x @ W


def matmat(A, B):
    return A @ B


def dot(x, y):
    return np.dot(x, y)


def batched_matmul(A, B):            # operands of rank 3
    return A @ B


def indexing(x):
    return x[1:, ::2] * x[0, None, :1] + x[-1, 1]


def updates(x, v):
    y = np.zeros((4, 3))
    y[1] = v
    y[2:, 1] += x[0, :2]
    return y * x


def joined(x, y):
    return np.concatenate([x, y, x * y]) * np.stack([x, y, y], axis=0).ravel()


def gather_const(x):
    return x[np.array([2, 0, 2, 1])] + np.take(x, np.array([1, 1, 0, 2]), axis=0)


def gather_labels(P, labels):        # labels: integer data
    return np.take(P, labels, axis=0).sum() + P[labels].sum(axis=0)


def gather_columns(P, labels):
    return np.take(P, labels, axis=1)


CASES = {   # name: (fn, args, in_axes)
    "elementwise unary": (unary, lambda: [rand(5, 3)], 0),
    "binary broadcast": (binary_broadcast, lambda: [rand(5, 4, 3), rand(3)], (0, None)),
    "binary broadcast both": (binary_broadcast, lambda: [rand(5, 4, 3), rand(5, 3)], 0),
    "scalar examples": (scalar_mix, lambda: [rand(5, 3), rand(5)], 0),
    "where": (select, lambda: [rand(5, 6), rand(6, 5)], (0, 1)),
    "cast and compare": (cast_compare, lambda: [rand(5, 3), RNG.integers(0, 4, size=(5, 3))], 0),
    "reductions": (reductions, lambda: [rand(4, 5, 3)], 0),
    "reductions negative axis": (min_keepdims, lambda: [rand(4, 3, 5)], -1),
    "reshape transpose broadcast": (shapes, lambda: [rand(4, 3, 3)], 1),
    "matvec batched vector": (matvec, lambda: [rand(4, 3), rand(6, 3)], (None, 0)),
    "matvec batched matrix": (matvec, lambda: [rand(6, 4, 3), rand(3)], (0, None)),
    "matvec both": (matvec, lambda: [rand(6, 4, 3), rand(6, 3)], 0),
    "vecmat batched vector": (vecmat, lambda: [rand(6, 4), rand(4, 3)], (0, None)),
    "matmat left": (matmat, lambda: [rand(5, 2, 4), rand(4, 3)], (0, None)),
    "matmat right": (matmat, lambda: [rand(2, 4), rand(4, 3, 5)], (None, -1)),
    "matmat both": (matmat, lambda: [rand(5, 2, 4), rand(5, 4, 3)], 0),
    "dot both": (dot, lambda: [rand(5, 4), rand(4, 5)], (0, 1)),
    "rank-3 matmul": (batched_matmul, lambda: [rand(3, 2, 4, 5), rand(5, 2)], (0, None)),
    "basic indexing": (indexing, lambda: [rand(5, 4, 3)], 0),
    "setitem and index_add": (updates, lambda: [rand(5, 4, 3), rand(5, 3)], 0),
    "setitem broadcast value": (updates, lambda: [rand(5, 4, 3), rand(3)], (0, None)),
    "setitem batched value only": (updates, lambda: [rand(4, 3), rand(5, 3)], (None, 0)),
    "concatenate and stack": (joined, lambda: [rand(5, 3), rand(3)], (0, None)),
    "gather constant index": (gather_const, lambda: [rand(5, 3, 2)], 0),
    "gather batched labels": (gather_labels, lambda: [rand(4, 3), RNG.integers(0, 4, size=(6, 5))], (None, 0)),
    "gather both batched": (gather_labels, lambda: [rand(6, 4, 3), RNG.integers(0, 4, size=(6, 5))], 0),
    "gather columns both": (gather_columns, lambda: [rand(6, 4, 3), RNG.integers(0, 3, size=(6, 2, 2))], 0),
}


def as_dtype(args, dtype):
    return [a.astype(dtype) if a.dtype.kind == "f" else a for a in args]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_equals_a_loop(name, target, dtype):
    fn, make_args, in_axes = CASES[name]
    args = as_dtype(make_args(), dtype)
    got = sg.vmap(fn, in_axes=in_axes, target=target)(*args)
    expected = loop_reference(fn, args, in_axes)
    assert np.asarray(got).dtype == expected.dtype
    tol = 1e-12 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol)


GRAD_CASES = ["elementwise unary", "binary broadcast", "where", "reductions", "matvec batched vector",
              "matmat left", "basic indexing", "setitem and index_add", "concatenate and stack",
              "gather batched labels", "gather both batched", "gather columns both",
              "reshape transpose broadcast", "dot both"]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", GRAD_CASES)
def test_vmap_of_grad_is_a_loop_of_grads(name, target):
    """Per-example gradients: vmap(grad(f)) equals grad(f) on each example (the gradient's
    graph holds the scatter/index_add/matmul-transpose ops the forward one does not)."""
    fn, make_args, in_axes = CASES[name]
    args = make_args()
    g = sg.grad(fn, target=target)
    got = sg.vmap(g, in_axes=in_axes, target=target)(*args)
    np.testing.assert_allclose(got, loop_reference(g, args, in_axes), rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
def test_grad_of_vmap_is_the_gradient_of_the_summed_outputs(target):
    fn, make_args, in_axes = CASES["matvec batched vector"]
    W, X = make_args()
    got = sg.grad(sg.vmap(fn, in_axes=in_axes), wrt=0, target=target)(W, X)
    expected = sum(sg.grad(fn, target="python")(W, x) for x in X)
    np.testing.assert_allclose(got, expected, rtol=1e-12)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_per_example_logistic_gradients(target, dtype):
    def loss(w, x, y):
        return np.log1p(np.exp(-y * (x @ w)))
    w, X = rand(4, dtype=dtype), rand(7, 4, dtype=dtype) - 1
    Y = np.sign(RNG.normal(size=7)).astype(dtype)
    per_example = sg.vmap(sg.grad(loss), in_axes=(None, 0, 0), target=target)
    G = per_example(w, X, Y)
    assert G.dtype == dtype and G.shape == (7, 4)
    expected = np.stack([sg.grad(loss, target="python")(w, x, y) for x, y in zip(X, Y)])
    tol = 1e-5 if dtype == "float32" else 1e-13
    np.testing.assert_allclose(G, expected, rtol=tol, atol=tol)
    assert "    for " not in per_example.source   # batched NumPy, not a loop
    assert "x @ w" in per_example.source      # the batch of dot products is one product


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("out_axes", [0, 1, -1, (1, 0)])
def test_out_axes(target, out_axes):
    def two(x, y):
        return x * y, np.sin(x) + y
    args = [rand(3, 5), rand(3)]
    got = sg.vmap(two, in_axes=(1, None), out_axes=out_axes, target=target)(*args)
    expected = loop_reference(two, args, (1, None), out_axes)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-13)


@pytest.mark.parametrize("target", TARGETS)
def test_out_axes_none_and_unbatched_outputs(target):
    def f(x, y):
        return x * 2.0, y + 1.0     # the second output does not depend on the batch
    x, y = rand(4, 3), rand(3)
    a, b = sg.vmap(f, in_axes=(0, None), out_axes=(0, None), target=target)(x, y)
    np.testing.assert_allclose(a, x * 2)
    np.testing.assert_allclose(b, y + 1)
    a, b = sg.vmap(f, in_axes=(0, None), target=target)(x, y)   # out_axes 0: repeated
    np.testing.assert_allclose(b, np.broadcast_to(y + 1, (4, 3)))
    with pytest.raises(ValueError, match="out_axes None"):
        sg.vmap(f, in_axes=(0, None), out_axes=(None, None), target=target)(x, y)


@pytest.mark.parametrize("target", TARGETS)
def test_nested_vmap(target):
    def f(x, y):
        return np.sum(x * y) + np.exp(x[0])
    X, Y = rand(3, 4, 5), rand(4, 5)
    inner = sg.vmap(f, in_axes=(0, 0))                  # over the 4
    outer = sg.vmap(inner, in_axes=(0, None), target=target)   # over the 3
    expected = np.array([[f(X[i, j], Y[j]) for j in range(4)] for i in range(3)])
    np.testing.assert_allclose(outer(X, Y), expected, rtol=1e-13)
    pairwise = sg.vmap(sg.vmap(f, in_axes=(None, 0)), in_axes=(0, None), target=target)
    A, B = rand(3, 5), rand(4, 5)
    expected = np.array([[f(a, b) for b in B] for a in A])
    np.testing.assert_allclose(pairwise(A, B), expected, rtol=1e-13)


@pytest.mark.parametrize("target", TARGETS)
def test_pytree_arguments(target):
    def predict(params, x):
        return np.tanh(params["W"] @ x + params["b"]) * params["scale"][0]
    params = {"W": rand(3, 4), "b": rand(3), "scale": (1.5, "static")}
    X = rand(6, 4)
    got = sg.vmap(predict, in_axes=(None, 0), target=target)(params, X)
    np.testing.assert_allclose(got, np.stack([predict(params, x) for x in X]), rtol=1e-13)
    batch = {"W": rand(6, 3, 4), "b": rand(6, 3), "scale": (2.0, "static")}
    # in_axes 0 applies to every array leaf; the float leaf cannot be batched
    with pytest.raises(ValueError, match="scalar"):
        sg.vmap(predict, in_axes=(0, 0), target=target)(batch, X)
    batch["scale"] = (np.full(6, 2.0), "static")
    got = sg.vmap(predict, in_axes=(0, 0), target=target)(batch, X)
    expected = [predict({"W": batch["W"][i], "b": batch["b"][i], "scale": (2.0, "static")}, X[i])
                for i in range(6)]
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-13)


@pytest.mark.parametrize("target", TARGETS)
def test_per_example_gradient_of_a_pytree(target):
    def loss(params, x, y):
        h = np.tanh(params["W"] @ x + params["b"])
        return (np.sum(h) - y) ** 2
    params = {"W": rand(3, 4), "b": rand(3)}
    X, Y = rand(5, 4), rand(5)
    G = sg.vmap(sg.grad(loss), in_axes=(None, 0, 0), target=target)(params, X, Y)
    for i in range(5):
        expected = sg.grad(loss, target="python")(params, X[i], Y[i])
        for k in params:
            np.testing.assert_allclose(G[k][i], expected[k], rtol=1e-10, atol=1e-14)


def test_clear_errors():
    def f(x, y):
        return x * y
    x = rand(4, 3)
    with pytest.raises(ValueError, match="different batch sizes"):
        sg.vmap(f)(x, rand(5, 3))
    with pytest.raises(ValueError, match="in_axes has 1 entries"):
        sg.vmap(f, in_axes=(0,))(x, x)
    with pytest.raises(ValueError, match="no argument is batched"):
        sg.vmap(f, in_axes=None)(x, x)
    with pytest.raises(ValueError, match="in_axes=2"):
        sg.vmap(f, in_axes=(2, None))(x, x)
    with pytest.raises(ValueError, match="holds no array"):
        sg.vmap(lambda x, n: x * n)(x, 3)
    with pytest.raises(TypeError, match="ints or None"):
        sg.vmap(f, in_axes="0")


def test_every_op_has_a_batching_rule():
    """Every op of the table is batched by a rule, is a leaf (never batched) or is listed as
    not batchable with its reason: a new op cannot reach vmap unhandled."""
    assert [op for op in OPS if not batching.covered(op)] == []
    for op, reason in batching.NOT_BATCHABLE.items():
        assert op in OPS and reason


def test_an_op_without_a_rule_is_a_clear_type_error(monkeypatch):
    """An op with no rule (here: matmul's removed) fails naming the op, never computes."""
    monkeypatch.delitem(batching.RULES, "matmul")
    with pytest.raises(TypeError, match="'matmul' has no batching rule"):
        sg.vmap(matmat, in_axes=(0, None))(rand(5, 2, 4), rand(4, 3))
    monkeypatch.setitem(batching.NOT_BATCHABLE, "matmul", "a test's reason")
    with pytest.raises(TypeError, match="'matmul' cannot be batched: a test's reason"):
        sg.vmap(matmat, in_axes=(0, None), target="python")(rand(5, 2, 4), rand(4, 3))


def test_source_ir_llvm_and_pickle():
    f = sg.vmap(matvec, in_axes=(None, 0))
    W, X = rand(4, 3), rand(6, 3)
    f(W, X)
    assert "W" in f.source and "%" in f.ir
    assert "define" in f.llvm_ir(W, X)
    twin = pickle.loads(pickle.dumps(f))
    np.testing.assert_allclose(twin(W, X), X @ W.T)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("axes", [[1], [-1], (1,), 1])
def test_per_example_gradients_clipped_in_one_function(target, axes):
    """clip_by_norm(G, c, axes=[1]) clips each example's gradient (TensorFlow's semantics),
    eagerly and traced, fused with the per-example gradients in one compiled function."""
    def loss(w, x, y):
        return np.logaddexp(0.0, -y * (x @ w))
    per_example = sg.vmap(sg.grad(loss), in_axes=(None, 0, 0))

    def clipped(w, X, Y, c):
        return sg.clip_by_norm(per_example(w, X, Y), c, axes=axes)
    w, X = rand(4) - 1, 3 * rand(9, 4)
    Y = np.sign(RNG.normal(size=9))
    G = np.stack([sg.grad(loss, target="python")(w, x, y) for x, y in zip(X, Y)])
    c = float(np.median(np.linalg.norm(G, axis=1)))   # some rows clipped, some not
    expected = np.stack([g * c / max(np.linalg.norm(g), c) for g in G])
    np.testing.assert_allclose(sg.clip_by_norm(G, c, axes=axes), expected, rtol=1e-13)   # eager
    fused = sg.differentiate(clipped, target=target)
    np.testing.assert_allclose(fused(w, X, Y, c), expected, rtol=1e-12)
    assert "clip" in fused.source and "def clipped" in fused.source


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name", ["matvec batched vector", "vecmat batched vector", "dot both",
                                  "matmat right", "gather both batched", "binary broadcast"])
def test_vmap_of_grad_with_respect_to_a_batched_argument(name, target):
    fn, make_args, in_axes = CASES[name]
    args = make_args()
    g = sg.grad(fn, wrt=1 if name != "gather both batched" else 0, target=target)
    got = sg.vmap(g, in_axes=in_axes, target=target)(*args)
    np.testing.assert_allclose(got, loop_reference(g, args, in_axes), rtol=1e-11, atol=1e-12)


def test_copies_and_inspection_use_the_batched_signature():
    import copy
    f = sg.vmap(matvec, in_axes=(None, 0))
    W, X = rand(4, 3), rand(6, 3)
    twin = copy.deepcopy(f)
    np.testing.assert_allclose(twin(W, X), X @ W.T)
    assert isinstance(twin, type(f)) and twin is not f
    # the parent was called with one example's shapes: a derivative of the vmapped function
    # never shows code for those (they are not its argument types)
    base = sg.differentiate(matvec)
    base(W, X[0])
    g = sg.grad(sg.vmap(base, in_axes=(None, 0)))
    with pytest.raises(TypeError, match="cannot guess argument types"):
        g.source     # before any call of g: no argument types of its own yet
    g(W, X)
    assert "6" in g.source   # the batch size of the call


def _logistic(w, x, y):
    return np.log1p(np.exp(-y * (x @ w)))


per_example_losses = sg.vmap(_logistic, in_axes=(None, 0, 0))


def mean_of_per_example_losses(w, X, Y):
    return np.mean(per_example_losses(w, X, Y)) + 0.1 * np.sum(w * w)


@pytest.mark.parametrize("target", TARGETS)
def test_grad_of_a_function_calling_vmap(target):
    """A vmapped Function called inside a differentiated function is spliced into its trace,
    so its gradient is the gradient of what it computes."""
    w, X = rand(3) - 1, rand(6, 3) - 1
    Y = np.sign(RNG.normal(size=6))
    g = sg.grad(mean_of_per_example_losses, target=target)(w, X, Y)
    expected = np.mean([sg.grad(_logistic, target="python")(w, x, y) for x, y in zip(X, Y)],
                       axis=0) + 0.2 * w
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    assert sg.check_grad(mean_of_per_example_losses, w, X, Y) < 1e-6


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_of_value_and_grad_and_static_arguments(target):
    def f(x, n, scale):
        return np.sum(x ** n) * scale
    X = rand(5, 3)
    vg = sg.vmap(sg.value_and_grad(f), in_axes=(0, None, None), target=target)
    values, grads = vg(X, 3, 2.0)
    np.testing.assert_allclose(values, [f(x, 3, 2.0) for x in X], rtol=1e-13)
    np.testing.assert_allclose(grads, 6.0 * X ** 2, rtol=1e-13)


def test_vmap_of_hvp_is_refused_clearly():
    with pytest.raises(TypeError, match="vmap of an hvp"):
        sg.vmap(sg.hvp(lambda x: np.sum(x ** 3)))


@sg.custom_gradient
def _clipped_square(x):
    return x * x, lambda upstream: np.clip(upstream * 2.0 * x, -1.0, 1.0)


def _uses_custom_rule(x):
    return np.sum(_clipped_square(x))


def test_vmap_of_a_custom_gradient_rule_keeps_the_rule_per_example():
    X = np.array([[0.1, 2.0], [3.0, -0.2]])
    for target in ("python", "cpu"):
        np.testing.assert_allclose(sg.vmap(_uses_custom_rule, target=target)(X),
                                   np.sum(X * X, axis=1))
        np.testing.assert_allclose(sg.vmap(sg.grad(_uses_custom_rule), target=target)(X),
                                   np.clip(2.0 * X, -1.0, 1.0))
        # the gradient of the sum of the batched outputs goes through the batched rule
        np.testing.assert_allclose(sg.grad(sg.vmap(_uses_custom_rule, target=target))(X),
                                   np.clip(2.0 * X, -1.0, 1.0))


@sg.custom_gradient
def _scaled(w, x):
    return w * x, lambda up: (np.sum(up * x), np.clip(up * w, -0.5, 0.5))


def _uses_two_argument_rule(w, x):
    return np.sum(_scaled(w, x))


def test_vmap_of_a_custom_rule_with_an_unbatched_argument_sums_its_gradient():
    w, X = 1.5, np.array([[0.1, 2.0], [3.0, -0.2], [1.0, 1.0]])
    for target in ("python", "cpu"):
        batched = sg.vmap(_uses_two_argument_rule, in_axes=(None, 0), target=target)
        np.testing.assert_allclose(batched(w, X), w * np.sum(X, axis=1))
        g_w, g_x = sg.grad(batched, wrt=(0, 1))(w, X)
        assert g_w == pytest.approx(np.sum(X))
        np.testing.assert_allclose(g_x, np.clip(np.full_like(X, w), -0.5, 0.5))


# -- in_axes / out_axes as pytree prefixes (JAX) --------------------------------------------------
def _affine(params, x):
    return np.tanh(params["w"] @ x + params["b"]) * params["scale"][0]


@pytest.mark.parametrize("target", TARGETS)
def test_in_axes_per_leaf_of_a_dict(target):
    w, B, X = rand(3, 4), rand(5, 3), rand(5, 4)
    params = {"w": w, "b": B, "scale": (rand(5), "static")}
    spec = ({"w": None, "b": 0, "scale": (0, None)}, 0)
    got = sg.vmap(_affine, in_axes=spec, target=target)(params, X)
    expected = [_affine({"w": w, "b": B[i], "scale": (params["scale"][0][i], "static")}, X[i])
                for i in range(5)]
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-13)
    # a None leaf of a prefix shares the leaf; the batch axis of another may be any of its axes
    spec = ({"w": None, "b": 1, "scale": None}, 0)
    shared = {"w": w, "b": B.T.copy(), "scale": (2.0, "static")}
    got = sg.vmap(_affine, in_axes=spec, target=target)(shared, X)
    expected = [_affine({"w": w, "b": B[i], "scale": (2.0, "static")}, X[i]) for i in range(5)]
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-13)
    # per-example gradients with respect to the shared leaf and the batched one
    def loss(p, x):
        return np.sum(np.tanh(p["w"] @ x + p["b"]))
    grads = sg.vmap(sg.grad(loss), in_axes=({"w": None, "b": 1}, 0), target=target)(
        {"w": w, "b": B.T.copy()}, X)
    for i in range(5):
        one = sg.grad(loss, target="python")({"w": w, "b": B[i]}, X[i])
        # (1 - tanh^2 near saturation: the last digits cancel differently per back end)
        np.testing.assert_allclose(grads["w"][i], one["w"], rtol=1e-9, atol=1e-15)
        np.testing.assert_allclose(grads["b"][i], one["b"], rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("target", TARGETS)
def test_in_axes_nested_tuples_lists_and_namedtuples(target):
    from collections import namedtuple
    Layer = namedtuple("Layer", "w b")

    def net(layers, xs):
        h = xs[0]
        for layer in layers:
            h = np.tanh(layer.w @ h + layer.b)
        return h * xs[1]
    layers = [Layer(rand(3, 4), rand(6, 3)), Layer(rand(2, 3), rand(2))]
    xs = (rand(6, 4), rand(2))
    spec = ([Layer(None, 0), Layer(None, None)], (0, None))
    got = sg.vmap(net, in_axes=spec, target=target)(layers, xs)
    expected = [net([Layer(layers[0].w, layers[0].b[i]), layers[1]], (xs[0][i], xs[1]))
                for i in range(6)]
    np.testing.assert_allclose(got, np.stack(expected), rtol=1e-13)


@pytest.mark.parametrize("target", TARGETS)
def test_out_axes_as_a_prefix_of_the_result(target):
    def parts(x, y):
        return {"scaled": x * y, "stats": (np.sum(x), y * 2.0)}
    X, y = rand(5, 3), rand(3)
    got = sg.vmap(parts, in_axes=(0, None), out_axes={"scaled": 1, "stats": (0, None)},
                  target=target)(X, y)
    np.testing.assert_allclose(got["scaled"], (X * y).T, rtol=1e-14)
    np.testing.assert_allclose(got["stats"][0], X.sum(axis=1), rtol=1e-14)
    np.testing.assert_allclose(got["stats"][1], y * 2.0, rtol=1e-14)   # not batched: once


def test_prefix_mismatches_name_the_argument_and_the_key():
    params, X = {"w": rand(3, 4), "b": rand(5, 3), "scale": (rand(5), "static")}, rand(5, 4)
    mismatches = [
        (({"w": None, "b": 0}, 0), r"in_axes for argument 'params' does not match its keys: "
                                   r"no entry for key 'scale'"),
        (({"w": None, "b": 0, "scale": 0, "bias": 0}, 0), r"key 'bias' not in argument 'params'"),
        (((None, 0, 0), 0), r"in_axes for argument 'params' is a tuple, but argument 'params' is a dict"),
        (({"w": {"a": 0}, "b": 0, "scale": 0}, 0), r"argument 'params'\['w'\] is a dict, but "
                                                   r"argument 'params'\['w'\] is an array of shape \(3, 4\)"),
        (({"w": None, "b": 0, "scale": (0,)}, 0), r"argument 'params'\['scale'\] has 1 entries, but "
                                                  r"argument 'params'\['scale'\] has 2 items"),
        (({"w": None, "b": 0, "scale": [0, None]}, 0), r"is a list, but argument 'params'\['scale'\] is a tuple"),
        (({"w": None, "b": 0, "scale": (0, 0)}, 0), r"in_axes=0 for argument 'params'\['scale'\]\[1\], "
                                                    r"which is a static str"),
        (({"w": None, "b": 2, "scale": None}, 0), r"in_axes=2 for argument 'params'\['b'\], which is of rank 2"),
        (({"w": None, "b": 0, "scale": None}, {"x": 0}), r"in_axes for argument 'x' is a dict, but "
                                                         r"argument 'x' is an array"),
    ]
    for spec, message in mismatches:
        with pytest.raises(ValueError, match=message):
            sg.vmap(_affine, in_axes=spec)(params, X)
    with pytest.raises(ValueError, match="in_axes is a dict"):
        sg.vmap(_affine, in_axes={"params": 0, "x": 0})(params, X)
    with pytest.raises(TypeError, match=r"got 'b' at in_axes\[0\]\['b'\]"):
        sg.vmap(_affine, in_axes=({"w": None, "b": "b"}, 0))
    with pytest.raises(ValueError, match=r"out_axes for the output does not match its keys: "
                                         r"no entry for key 'stats'"):
        sg.vmap(lambda x: {"scaled": x, "stats": x}, out_axes={"scaled": 0})(X)
    with pytest.raises(ValueError, match=r"out_axes for the output\[1\] is a tuple, but the output\[1\] is one array"):
        sg.vmap(lambda x: (x, x), out_axes=(0, (0, 0)))(X)
