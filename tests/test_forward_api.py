"""``sg.jvp`` as a transform: special points (kinks, ties, selects, zero spread), pytrees,
composition with grad and with itself, the generated source, and clear errors."""
import collections

import numpy as np
import pytest

import symgrad as sg

TARGETS = ["python", "cpu"]
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # both sides of a select run


def _first_and_second(fn, x, t, target):
    """The first and second directional derivatives of ``fn`` at ``x`` along ``t``."""
    first = sg.jvp(fn, target=target)
    _, (_, second) = sg.jvp(first, target=target)(x, t, t)
    return first(x, t)[1], second


@pytest.mark.parametrize("target", TARGETS)
def test_abs_at_zero_is_zero_as_in_jax(target):
    _, t = sg.jvp(lambda x: np.abs(x), target=target)(np.array([0.0, -2.0, 3.0]), np.ones(3))
    np.testing.assert_array_equal(t, [0.0, -1.0, 1.0])


@pytest.mark.parametrize("target", TARGETS)
def test_maximum_and_minimum_ties_follow_the_vjp(target):
    """On a tie the mean of the two tangents is taken, as the VJP gives each half."""
    for fn in (np.maximum, np.minimum):
        f = sg.jvp(lambda a, b: fn(a, b), wrt=(0, 1), target=target)
        grads = sg.grad(lambda a, b: fn(a, b), wrt=(0, 1), target=target)(1.0, 1.0)
        assert grads == (0.5, 0.5)
        assert f(1.0, 1.0, 1.0, 0.0)[1] == 0.5 and f(1.0, 1.0, 0.0, 1.0)[1] == 0.5


@pytest.mark.parametrize("target", TARGETS)
def test_reduction_max_ties_share_the_tangent(target):
    x, t = np.array([1.0, 3.0, 3.0]), np.array([5.0, 1.0, 0.0])
    _, tangent = sg.jvp(lambda x: np.max(x), target=target)(x, t)
    grad = sg.grad(lambda x: np.max(x), target=target)(x)
    assert tangent == 0.5 == float(grad @ t)


@pytest.mark.parametrize("target", TARGETS)
def test_logaddexp_at_a_tie(target):
    """d/da logaddexp(a, b) = 1/2 at a tie, d2/da2 = 1/4 (both sides analytic)."""
    def f(a):
        return np.logaddexp(a, 1.0)
    first, second = _first_and_second(f, 1.0, 1.0, target)
    assert first == pytest.approx(0.5, rel=1e-14) and second == pytest.approx(0.25, rel=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_derivative_of_zero_to_the_power_y(target):
    """d/dy 0**y = 0 for y > 0 (not 0 * log(0) = nan), at every order."""
    f = sg.jvp(lambda x, y: x ** y, wrt=1, target=target)
    assert f(0.0, 2.0, 1.0) == (0.0, 0.0)
    _, (_, second) = sg.jvp(f, wrt=1, target=target)(0.0, 2.0, 1.0, 1.0)
    assert second == 0.0
    # and d/dx x**2 at 0 is 0, d/dx x**0 is 0
    assert sg.jvp(lambda x: x ** 2.0, target=target)(0.0, 1.0)[1] == 0.0
    assert sg.jvp(lambda x, y: x ** y, wrt=0, target=target)(0.0, 0.0, 1.0)[1] == 0.0


def spread(x):
    return np.std(x)


def distance_from_one(x):
    return np.linalg.norm(x - 1.0)


@pytest.mark.parametrize("target", TARGETS)
def test_std_and_norm_at_zero_spread_are_zero(target):
    x, t = np.ones(4), np.array([1.0, -1.0, 2.0, 0.5])
    for fn in (spread, distance_from_one):
        first, second = _first_and_second(fn, x, t, target)
        assert np.isfinite(first) and np.isfinite(second)
    assert sg.jvp(lambda x: np.linalg.norm(x - 1.0), target=target)(x, 0 * t)[1] == 0.0


def relu_sqrt(x):
    return np.where(x > 0, np.sqrt(x), 0.0)


def safe_sqrt(a):
    if a >= 0:
        r = np.sqrt(a)
    else:
        r = np.sqrt(-a)
    return r


@pytest.mark.parametrize("target", TARGETS)
def test_a_select_never_lets_the_other_sides_tangent_in(target):
    x = np.array([0.0, -1.0, 4.0])
    first, second = _first_and_second(relu_sqrt, x, np.ones(3), target)
    np.testing.assert_array_equal(first, [0.0, 0.0, 0.25])
    np.testing.assert_allclose(second, [0.0, 0.0, -0.25 * 4.0 ** -1.5], rtol=1e-14)
    for a in (4.0, -4.0):
        first, second = _first_and_second(safe_sqrt, a, 1.0, target)
        assert first == pytest.approx(np.sign(a) / (2 * np.sqrt(abs(a))), rel=1e-14)
        assert second == pytest.approx(-0.25 * abs(a) ** -1.5, rel=1e-14)


# -- the transform -----------------------------------------------------------------------------

def model(x, w):
    h = np.tanh(x @ w)
    return np.sum(h * h), h


@pytest.mark.parametrize("target", TARGETS)
def test_tuple_wrt_and_output_structure(target):
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    tx, tw = rng.normal(size=(3, 4)), rng.normal(size=(4, 2))
    value, tangent = sg.jvp(model, wrt=(0, 1), target=target)(x, w, tx, tw)
    assert isinstance(value, tuple) and isinstance(tangent, tuple) and len(tangent) == 2
    assert isinstance(tangent[0], float) and tangent[1].shape == (3, 2)
    h = 1e-6
    hi, lo = model(x + h * tx, w + h * tw), model(x - h * tx, w - h * tw)
    np.testing.assert_allclose(tangent[0], (hi[0] - lo[0]) / (2 * h), rtol=1e-7)
    np.testing.assert_allclose(tangent[1], (hi[1] - lo[1]) / (2 * h), rtol=1e-6, atol=1e-9)
    # wrt by name, a single tangent
    _, t_w = sg.jvp(model, wrt="w", target=target)(x, w, tw)
    _, t_both = sg.jvp(model, wrt=(0, 1), target=target)(x, w, 0 * tx, tw)
    np.testing.assert_allclose(t_w[1], t_both[1], rtol=1e-14)


Params = collections.namedtuple("Params", "W b")


def loss(params, x):
    z = x @ params["W"] + params["b"][0]
    return np.sum(np.sin(z) * params["b"][1])


def loss_nt(p, x):
    return np.sum(np.exp(x @ p.W) + p.b)


@pytest.mark.parametrize("target", TARGETS)
def test_pytree_arguments_take_tangents_of_the_same_structure(target):
    rng = np.random.default_rng(1)
    params = {"W": rng.normal(size=(3, 2)), "b": (rng.normal(size=2), 0.5)}
    tangent = {"W": rng.normal(size=(3, 2)), "b": (rng.normal(size=2), 0.25)}
    x = rng.normal(size=(4, 3))
    value, t = sg.jvp(loss, target=target)(params, x, tangent)
    grad = sg.grad(loss, target=target)(params, x)
    want = np.sum(grad["W"] * tangent["W"]) + grad["b"][0] @ tangent["b"][0] + grad["b"][1] * 0.25
    assert value == pytest.approx(loss(params, x), rel=1e-14)
    assert t == pytest.approx(want, rel=1e-12)
    p, tp = Params(rng.normal(size=(3, 2)), 1.0), Params(rng.normal(size=(3, 2)), 2.0)
    _, t = sg.jvp(loss_nt, target=target)(p, x, tp)
    g = sg.grad(loss_nt, target=target)(p, x)
    assert t == pytest.approx(np.sum(g.W * tp.W) + g.b * 2.0, rel=1e-12)
    with pytest.raises(TypeError, match="structure"):
        sg.jvp(loss, target=target)(params, x, {"W": tangent["W"]})


def rosen(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2)


jvp_rosen = sg.jvp(rosen)


def directional_twice(x, v):
    return jvp_rosen(x, v)[1] * 2.0


@pytest.mark.parametrize("target", TARGETS)
def test_compositions(target):
    x, v = np.array([0.3, -0.2, 1.1, 0.7]), np.array([1.0, 0.5, -0.25, 2.0])
    hv = sg.hvp(rosen, target=target)(x, v)
    # forward over reverse: H v
    _, t = sg.jvp(sg.grad(rosen), target=target)(x, v)
    np.testing.assert_allclose(t, hv, rtol=1e-13)
    # reverse over forward: grad_x <grad f(x), v> = H v
    g = sg.grad(sg.jvp(rosen), wrt=0, target=target)(x, v)
    np.testing.assert_allclose(g, hv + sg.grad(rosen)(x), rtol=1e-13)   # value's gradient too
    # gradient with respect to the tangent: d/dv (grad f . v) = grad f
    np.testing.assert_allclose(sg.grad(sg.jvp(rosen), wrt=1, target=target)(x, v),
                               sg.grad(rosen)(x), rtol=1e-14)
    # forward over forward: v^T H v
    _, (_, vhv) = sg.jvp(sg.jvp(rosen), target=target)(x, v, v)
    assert vhv == pytest.approx(v @ hv, rel=1e-13)
    # a jvp called from traced code is spliced in
    directional = sg.differentiate(directional_twice, target=target)
    assert directional(x, v) == pytest.approx(2 * sg.grad(rosen)(x) @ v, rel=1e-13)


def test_the_generated_source_reads_like_forward_mode():
    f = sg.jvp(model, wrt=(0, 1), target="python")
    rng = np.random.default_rng(0)
    f(rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), np.ones((3, 4)), np.ones((4, 2)))
    source = f.source
    assert source.startswith("def jvp_model(x, w, t_x, t_w):")
    assert "t_h = " in source and "t_x @ w" in source and "x @ t_w" in source
    assert "# grad of line " in source and ": h = np.tanh(x @ w)" in source
    assert "graph jvp_model(x, w, t_x, t_w)" in f.ir
    assert "define" in f.llvm_ir(np.ones((3, 4)), np.ones((4, 2)), np.ones((3, 4)), np.ones((4, 2)))
    # the source runs and gives the same numbers
    namespace = {"np": np}
    exec(source, namespace)
    args = [rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=(3, 4)), rng.normal(size=(4, 2))]
    got, want = namespace["jvp_model"](*args), f(*args)
    np.testing.assert_allclose(got[1][1], want[1][1], rtol=1e-14)


def test_zero_tangents_are_structural():
    """Nothing a tangent does not reach is in the code: a constant output's tangent is zeros."""
    def f(x, y):
        return x * 2.0, y * y
    f_jvp = sg.jvp(f, wrt=0, target="python")
    value, tangent = f_jvp(1.5, 3.0, 1.0)
    assert tangent == (2.0, 0.0)
    assert "t_y" not in f_jvp.source


def test_clear_errors():
    f = sg.jvp(model, wrt=0, target="python")
    x, w = np.ones((3, 4)), np.ones((4, 2))
    with pytest.raises(ValueError, match="shape"):
        f(x, w, np.ones(4))
    with pytest.raises(TypeError, match="float"):
        f(x, w, np.ones((3, 4), dtype=np.int64))
    with pytest.raises(TypeError, match="float"):
        sg.jvp(lambda x: x * x, target="python")(1.0, 1)
    with pytest.raises(TypeError, match="positional"):
        f(x, w=w, t_x=x)
    with pytest.raises(TypeError, match="static"):
        sg.jvp(lambda x, n: x * n, wrt=1, target="python")(1.0, 2, 1.0)


def test_jvp_pickles_and_names_its_tangents_uniquely():
    import pickle
    f = sg.jvp(rosen)
    g = pickle.loads(pickle.dumps(f))
    x, v = np.array([0.3, -0.2, 1.1]), np.ones(3)
    assert g(x, v) == f(x, v)
    assert sg.jvp(sg.jvp(rosen)).params == ("x", "t_x", "t_x_2")


def test_jvp_kernels_run_in_the_cuda_emulation():
    """The jvp's graph lowers for target="cuda" (emulated on the CPU) to the same numbers."""
    from symgrad.codegen import ptx_emulate
    rng = np.random.default_rng(3)
    args = [rng.normal(size=(3, 4)), rng.normal(size=(4, 2)), rng.normal(size=(3, 4)),
            rng.normal(size=(4, 2))]
    f = sg.jvp(model, wrt=(0, 1), target="python")
    (value, h), (t_value, t_h) = f(*args)
    got = ptx_emulate.run(f._graph(args), args)
    np.testing.assert_allclose(got[1][0], t_value, rtol=1e-12)
    np.testing.assert_allclose(got[1][1], t_h, rtol=1e-12)


def recurrence(x, w):
    h = x * 0.0
    for i in range(x.shape[0]):
        h = np.tanh(w * h + x[i])
        if np.sum(h) > 0.5:
            h = h * 0.9
    return h


@pytest.mark.parametrize("target", TARGETS)
def test_through_loops_and_data_dependent_branches(target):
    rng = np.random.default_rng(5)
    x, w, tx, tw = rng.normal(size=(6, 3)), 0.7, rng.normal(size=(6, 3)), 0.3
    value, tangent = sg.jvp(recurrence, wrt=(0, 1), target=target)(x, w, tx, tw)
    h = 1e-6
    numeric = (recurrence(x + h * tx, w + h * tw) - recurrence(x - h * tx, w - h * tw)) / (2 * h)
    np.testing.assert_allclose(value, recurrence(x, w), rtol=1e-13)
    np.testing.assert_allclose(tangent, numeric, rtol=1e-6, atol=1e-9)


def linalg_mix(a):
    return np.linalg.det(a) + np.sum(np.cumsum(np.sort(a.ravel())) * np.einsum("ij,jk->ik", a, a).ravel())


@pytest.mark.parametrize("target", TARGETS)
def test_through_compositions_of_the_numpy_surface(target):
    """det, sort, cumsum and einsum are compositions of primitives: forward mode needs no rule."""
    rng = np.random.default_rng(6)
    a, t = rng.normal(size=(3, 3)), rng.normal(size=(3, 3))
    _, tangent = sg.jvp(linalg_mix, target=target)(a, t)
    h = 1e-6
    assert tangent == pytest.approx((linalg_mix(a + h * t) - linalg_mix(a - h * t)) / (2 * h), rel=1e-7)
