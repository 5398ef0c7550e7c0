"""Pytree arguments and outputs (DESIGN.md §2): tuples, lists, dicts and namedtuples, nested, of
floats and arrays are differentiable arguments whose gradient has the argument's structure; ints,
bools, strings and None inside them are static (part of the signature). Back ends see only the
leaves. Checked on target="python", target="cpu" and the CUDA plan through its CPU emulation
(and its PTX through ``ptxas``)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import namedtuple

import numpy as np
import pytest

import symgrad as sg
from codegen import ptx_emulate
from symgrad.runtime import flat_plan, flat_values, value_leaves

TARGETS = ("python", "cpu", "cuda-emulated")
Layer = namedtuple("Layer", "w b")


def mlp(params, x):
    """A dict holding an array, a list of namedtuples and a tuple with a float."""
    h = np.tanh(x @ params["W"])
    for layer in params["layers"]:
        h = np.tanh(h * layer.w + layer.b)
    scale, shift = params["head"]
    return np.sum(h * scale) + shift * np.sum(x)


def make_params(rng):
    return {"W": rng.normal(size=(3, 4)),
            "layers": [Layer(rng.normal(size=4), rng.normal(size=4)),
                       Layer(rng.normal(size=4), 0.3)],
            "head": (rng.normal(size=4), 1.5)}


def call(target, fn, kind, args, wrt=0):
    """``fn`` (or its grad / value_and_grad) on ``target``."""
    f = sg.differentiate(fn, wrt=wrt, target="python" if target == "cuda-emulated" else target)
    f = {"call": f, "grad": f.grad, "value_and_grad": f.value_and_grad}[kind]
    if target == "cuda-emulated":
        graph = f._graph(list(args))
        return ptx_emulate.run(graph, flat_values(list(args), flat_plan(graph.in_tree)))
    return f(*args)


def assert_same_structure(got, want, where="value"):
    """Same containers (type, dict keys, namedtuple class) all the way down."""
    stack = [(got, want, where)]
    while stack:
        g, w, at = stack.pop()
        assert type(g) is type(w) or (np.ndim(w) == 0 and isinstance(g, float)), \
            f"{at}: {type(g).__name__} vs {type(w).__name__}"
        if isinstance(w, dict):
            assert list(g) == sorted(w), f"{at}: keys {list(g)} vs {sorted(w)}"
            stack.extend((g[k], w[k], f"{at}[{k!r}]") for k in w)
        elif isinstance(w, (tuple, list)):
            assert len(g) == len(w), at
            stack.extend((gi, wi, f"{at}[{i}]") for i, (gi, wi) in enumerate(zip(g, w)))
        else:
            assert np.shape(g) == np.shape(w), f"{at}: shape {np.shape(g)} vs {np.shape(w)}"


def finite_difference_tree(fn, args, wrt=0, h=1e-6):
    """The central-difference gradient of ``fn`` with respect to every float leaf of
    ``args[wrt]``, as leaves in tree order."""
    def with_leaf(k, value):
        leaves = value_leaves(args[wrt])
        leaves[k] = value
        return [sg_rebuild(args[wrt], leaves) if i == wrt else a for i, a in enumerate(args)]

    grads = []
    for k, leaf in enumerate(value_leaves(args[wrt])):
        arr = np.array(leaf, dtype=float)
        g = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            up, down = arr.copy(), arr.copy()
            up[idx] += h
            down[idx] -= h
            lift = (lambda a: float(a)) if isinstance(leaf, float) else (lambda a: a)
            g[idx] = (fn(*with_leaf(k, lift(up))) - fn(*with_leaf(k, lift(down)))) / (2 * h)
        grads.append(g)
    return grads


def sg_rebuild(value, leaves):
    from symgrad.runtime import replace_leaves
    it = iter(leaves)
    return replace_leaves(value, lambda _: next(it))


@pytest.mark.parametrize("target", TARGETS)
def test_nested_pytree_value_and_gradient(target):
    rng = np.random.default_rng(0)
    params, x = make_params(rng), rng.normal(size=(5, 3))
    np.testing.assert_allclose(call(target, mlp, "call", (params, x)), mlp(params, x), rtol=1e-12)
    g = call(target, mlp, "grad", (params, x))
    assert_same_structure(g, params, "grad")
    assert isinstance(g["layers"][0], Layer) and isinstance(g["head"], tuple)
    for got, want in zip(value_leaves(g), finite_difference_tree(mlp, (params, x))):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("target", TARGETS)
def test_value_and_grad_and_wrt_pytree_first_with_a_plain_argument(target):
    rng = np.random.default_rng(1)
    params, x = make_params(rng), rng.normal(size=(5, 3))
    value, (g_params, g_x) = call(target, mlp, "value_and_grad", (params, x), wrt=(0, 1))
    np.testing.assert_allclose(value, mlp(params, x), rtol=1e-12)
    assert_same_structure(g_params, params)
    want = call("python", mlp, "grad", (params, x))
    for got, w in zip(value_leaves(g_params), value_leaves(want)):
        np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-14)
    (fd_x,) = finite_difference_tree(lambda x, p: mlp(p, x), (x, params))
    np.testing.assert_allclose(g_x, fd_x, rtol=1e-6, atol=1e-8)


def plain_then_tree(a, state, n):
    return a * np.sum(state.h ** 2) + np.sum(state.c[0] * state.c[1]) * n


State = namedtuple("State", "h c")


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_tree_as_second_argument_and_static_tree_leaves(target):
    state = State(np.array([1.0, -2.0]), [np.array([0.5, 1.5]), np.array([2.0, 3.0])])
    f = sg.differentiate(plain_then_tree, wrt=1, target=target)
    g = f.grad(0.5, state, 3)
    assert isinstance(g, State) and isinstance(g.c, list)
    np.testing.assert_allclose(g.h, 0.5 * 2 * state.h)
    np.testing.assert_allclose(g.c[0], state.c[1] * 3)
    np.testing.assert_allclose(g.c[1], state.c[0] * 3)
    assert f(0.5, state, 3) == pytest.approx(plain_then_tree(0.5, state, 3))


def with_config(params, x):
    """``params['power']`` and ``params['name']`` are static leaves of a differentiable pytree."""
    y = x * params["w"]
    if params["name"] == "cube":
        y = y * y
    return np.sum(y ** params["power"])


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_static_leaves_are_part_of_the_signature(target):
    x = np.array([0.5, 1.5])
    f = sg.differentiate(with_config, wrt=1, target=target)
    for power in (1, 2, 3):
        for name in ("id", "cube"):
            params = {"w": np.array([2.0, -1.0]), "power": power, "name": name, "off": None}
            assert f(params, x) == pytest.approx(with_config(params, x))
    assert len(f._cache) == 6   # a new int or str leaf traced again; the same ones did not
    params = {"w": np.array([2.0, -1.0]), "power": 3, "name": "id", "off": None}
    f(params, x)
    assert len(f._cache) == 6


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_dict_key_order_does_not_matter(target):
    """Dicts are flattened in sorted key order (as JAX): insertion order shares a signature."""
    f = sg.differentiate(lambda d: d["b"] * 2.0 + d["a"] ** 2, target=target)
    g1 = f.grad({"a": 3.0, "b": 1.0})
    g2 = f.grad({"b": 1.0, "a": 3.0})
    assert g1 == g2 == {"a": 6.0, "b": 2.0} and list(g1) == ["a", "b"]
    assert len(f.grad._cache) == 1


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_a_list_and_a_tuple_are_different_signatures(target):
    f = sg.differentiate(lambda p: p[0] * p[1], target=target)
    assert f.grad([2.0, 3.0]) == [3.0, 2.0]
    assert f.grad((2.0, 3.0)) == (3.0, 2.0)
    assert f.grad([2.0, 3.0]) == [3.0, 2.0]


def scalars(p):
    return p[0] ** 3 * p[1]["y"] + p[1]["y"] ** 2


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_grad_of_grad_on_a_pytree_of_scalars(target):
    """f.grad returns (3x²y, {y: x³ + 2y}); its grad is the gradient of the sum of those."""
    f = sg.differentiate(scalars, target=target)
    p = (2.0, {"y": 0.5})
    assert f.grad(p) == (pytest.approx(6.0), {"y": pytest.approx(9.0)})
    gg = f.grad.grad(p)
    assert isinstance(gg, tuple) and isinstance(gg[1], dict) and isinstance(gg[0], float)
    # d/dx (3x²y + x³ + 2y) = 6xy + 3x², d/dy = 3x² + 2
    assert gg == (pytest.approx(6 * 2 * 0.5 + 3 * 4), {"y": pytest.approx(3 * 4 + 2)})


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_integer_leaves_cannot_be_differentiated(target):
    f = sg.differentiate(lambda d: np.sum(d["x"] * d["mask"]) * d["k"], target=target)
    arg = {"x": np.ones(3), "mask": np.array([1, 0, 1]), "k": 2}
    assert f(arg) == 4.0   # int array and int leaves are data / static in a plain call
    with pytest.raises(TypeError, match=r"argument 'd': its leaf d\['k'\] is static"):
        f.grad(arg)
    arg = {"x": np.ones(3), "mask": np.array([1, 0, 1]), "k": 2.0}
    with pytest.raises(TypeError, match=r"its leaf d\['mask'\] is int64 data"):
        f.grad(arg)


def test_pytree_keys_hold_structure_and_leaf_keys():
    from symgrad import runtime
    value = {"b": [np.ones(2, np.float32), 3], "a": Layer(1.5, None)}
    key = runtime.arg_key(value)
    assert key.kind == "tree"
    standin = runtime.standin(key)
    assert runtime.arg_key(standin) == key and list(standin) == ["a", "b"]
    assert isinstance(standin["a"], Layer) and standin["b"][1] == 3
    assert runtime.arg_key({"b": [np.ones(2, np.float32), 4], "a": Layer(1.5, None)}) != key
    assert runtime.arg_key({"b": (np.ones(2, np.float32), 3), "a": Layer(1.5, None)}) != key
    assert runtime.arg_key({"c": [np.ones(2, np.float32), 3], "a": Layer(1.5, None)}) != key
    Other = namedtuple("Other", "w b")
    assert runtime.arg_key({"b": [np.ones(2, np.float32), 3], "a": Other(1.5, None)}) != key


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_unsupported_leaves_and_keys_are_clear_errors(target):
    f = sg.differentiate(lambda d: d["x"] * 2.0, target=target)
    with pytest.raises(TypeError, match="expected a float, int, bool, NumPy array or function"):
        f({"x": 1.0, "s": {1, 2}})
    with pytest.raises(TypeError, match="sortable keys"):
        f({"x": 1.0, 2: 3.0})


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_dict_and_namedtuple_outputs_come_back_as_such(target):
    f = sg.differentiate(lambda x: {"sq": x * x, "pair": Layer(x + 1.0, [np.sum(x)])},
                         target=target)
    x = np.array([1.0, 2.0])
    out = f(x)
    assert list(out) == ["pair", "sq"] and isinstance(out["pair"], Layer)
    assert isinstance(out["pair"].b, list)
    np.testing.assert_allclose(out["sq"], x * x)
    np.testing.assert_allclose(out["pair"].w, x + 1.0)
    value, g = f.value_and_grad(x)
    assert isinstance(value, dict) and isinstance(value["pair"], Layer)
    np.testing.assert_allclose(g, 2 * x + 2.0)


def test_generated_source_names_the_leaves():
    f = sg.differentiate(mlp, target="python")
    params, x = make_params(np.random.default_rng(2)), np.ones((2, 3))
    f.grad(params, x)
    src = f.grad.source
    assert src.startswith("def grad_mlp(params_W, params_head_0, params_head_1, params_layers_0_w,")
    assert "b_params_W = " in src


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_gradient_of_a_pytree_function_called_inside_a_trace(target):
    inner = sg.differentiate(lambda p: np.sum(p["a"] ** 2) * p["b"], target=target)

    @sg.differentiate(target=target)
    def outer(a, b):
        g = inner.grad({"a": a, "b": b})
        return np.sum(g["a"]) + g["b"]

    a = np.array([1.0, 2.0])
    assert outer(a, 3.0) == pytest.approx(np.sum(2 * a * 3.0) + np.sum(a ** 2))


@pytest.mark.parametrize("target", ("python", "cpu"))
def test_optimizer_with_a_dict_var_list_matches_the_list_form(target):
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(20, 3)), rng.normal(size=20)
    W0, b0 = rng.normal(size=3), np.array(0.1)

    def dict_loss(v, X, y):
        return np.mean((X @ v["W"] + v["b"] - y) ** 2)

    def list_loss(W, b, X, y):
        return np.mean((X @ W + b - y) ** 2)

    by_dict, by_list = sg.optim.Adam(0.05, target=target), sg.optim.Adam(0.05, target=target)
    variables = {"W": W0.copy(), "b": b0.copy()}
    W, b = W0.copy(), b0.copy()
    for _ in range(5):
        loss_dict = by_dict.minimize(dict_loss, variables, X, y)
        loss_list = by_list.minimize(list_loss, [W, b], X, y)
        assert loss_dict == pytest.approx(loss_list, rel=1e-12)
    np.testing.assert_allclose(variables["W"], W, rtol=1e-12)
    np.testing.assert_allclose(variables["b"], b, rtol=1e-12)
    pairs = by_dict.compute_gradients(dict_loss, variables, X, y)
    assert [v for _, v in pairs] == [variables["W"], variables["b"]]   # sorted keys, same arrays
    assert pairs[0][1] is variables["W"]


_PTX_SCRIPT = """
import sys, numpy as np, symgrad as sg
sys.path.insert(0, {tests!r})
from test_pytrees import make_params, mlp
f = sg.differentiate(mlp, target="cuda")
params, x = make_params(np.random.default_rng(0)), np.ones((5, 3))
for arch in ("sm_80", "sm_90"):
    open({out!r} + "/" + arch + ".ptx", "w").write(f.grad.ptx(params, x, arch=arch))
"""


def test_ptx_of_a_pytree_gradient_assembles(tmp_path):
    """In a child process: LLVM's NVPTX back end may abort the process on bad input."""
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("ptxas not found")
    script = _PTX_SCRIPT.format(tests=os.path.dirname(__file__), out=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    for arch in ("sm_80", "sm_90"):
        r = subprocess.run([ptxas, f"-arch={arch}", str(tmp_path / f"{arch}.ptx"), "-o", os.devnull],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]


def dict_loss(params, X, y):
    z = X @ params["W"] + params["b"]
    return np.sum((np.tanh(z) - y) ** 2) + 0.1 * np.sum(params["W"] ** 2)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_hessian_vector_product_of_a_pytree_argument(target):
    P = {"W": np.random.default_rng(3).normal(size=(3, 2)), "b": np.random.default_rng(3).normal(size=2)}
    V = {"W": np.random.default_rng(3).normal(size=(3, 2)), "b": np.random.default_rng(3).normal(size=2)}
    X, y = np.random.default_rng(3).normal(size=(5, 3)), np.random.default_rng(3).normal(size=(5, 2))
    h = sg.hvp(dict_loss, target=target)(P, V, X, y)
    g, eps = sg.grad(dict_loss), 1e-6
    up = g({k: P[k] + eps * V[k] for k in P}, X, y)
    down = g({k: P[k] - eps * V[k] for k in P}, X, y)
    assert set(h) == {"W", "b"}
    for k in P:
        np.testing.assert_allclose(h[k], (up[k] - down[k]) / (2 * eps), rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="structure of x"):
        sg.hvp(dict_loss, target=target)(P, {"W": V["W"]}, X, y)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_hessian_vector_product_of_an_array_beside_a_pytree_argument(target):
    """x a plain array while another argument is a dict: the graph has an input tree, but v
    is an array like x (it was read as a pytree: a TypeError; found by helper hunt2)."""
    rng = np.random.default_rng(4)
    P = {"W": rng.normal(size=(3, 2)), "b": rng.normal(size=2)}
    X, V, y = rng.normal(size=(5, 3)), rng.normal(size=(5, 3)), rng.normal(size=(5, 2))
    h = sg.hvp(dict_loss, wrt=1, target=target)(X, V, P, y)
    H = sg.hessian(dict_loss, wrt=1, target="python")(P, X, y)
    np.testing.assert_allclose(h, np.tensordot(H, V, axes=2), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="v has shape"):
        sg.hvp(dict_loss, wrt=1, target=target)(X, V[:2], P, y)


def _dict_result(p, x):
    return {"a": np.sum(x @ p["W"]), "v": p["b"] * 2.0}


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_out_with_a_dict_result(target):
    p = {"W": np.arange(6.0).reshape(3, 2), "b": np.array([1.0, -1.0])}
    x = np.ones((4, 3))
    f = sg.differentiate(_dict_result, target=target)
    out = {"a": np.zeros(()), "v": np.zeros(2)}
    got = f(p, x, out=out)
    assert got is out and out["a"] == pytest.approx(np.sum(x @ p["W"]))
    np.testing.assert_array_equal(out["v"], [2.0, -2.0])
    with pytest.raises(ValueError, match="structure of the result"):
        f(p, x, out=(np.zeros(()), np.zeros(2)))
    bad = {"a": np.zeros(()), "v": np.zeros(3)}      # checked before anything is written
    with pytest.raises(ValueError, match="shape"):
        f(p, x, out=bad)
    assert bad["a"] == 0.0
