"""Regions in the IR (symgrad.regions): loop and branch nodes, their closing and hoisting,
reverse mode through them, pruning, expansion for back ends, batching, and the front-end
constructs that build them (a data-dependent scalar if, break/continue on data, y[i] = v)."""
import numpy as np
import pytest

import symgrad as sg
from symgrad import ops
from symgrad.autodiff import grad_graph
from symgrad.ir import Graph, make, toposort
from symgrad.regions import evaluate, expand_regions, placeholder, scan
from symgrad.simplify import simplify

TARGETS = ("python", "cpu")
rng = np.random.default_rng(7)


def _arg(k, name, shape):
    return make("arg", (), (k, name, "float64", shape))


def _rnn_graph(trips=5):
    x, W, xs = _arg(0, "x", (3,)), _arg(1, "W", (3, 3)), _arg(2, "xs", (trips, 3))
    i, h, r = placeholder("int64"), placeholder("float64", (3,)), placeholder("float64", (3,))
    h_next = ops.tanh(ops.matmul(W, h) + r)
    (final,), (ys,) = scan(trips, i, [h], [x], [r], [xs], [h_next], [ops.reduce("sum", h_next * h_next)])
    out = ops.reduce("sum", final) + ops.reduce("sum", ys)
    return Graph("f", ("x", "W", "xs"), (x, W, xs), (out,), 0)


def _rnn(x, W, xs):
    h, s = x, 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + xs[t])
        s += np.sum(h * h)
    return np.sum(h) + s


def _values(graph):
    x, W, xs = graph.inputs
    return {x: rng.normal(size=3), W: rng.normal(size=(3, 3)) * 0.5, xs: rng.normal(size=(5, 3))}


def _central(f, args, k, eps=1e-6):
    out = np.zeros_like(args[k])
    for idx in np.ndindex(args[k].shape):
        up = [a.copy() for a in args]
        down = [a.copy() for a in args]
        up[k][idx] += eps
        down[k][idx] -= eps
        out[idx] = (f(*up) - f(*down)) / (2 * eps)
    return out


def test_a_loop_is_one_node_whose_body_is_closed_and_shared():
    g = _rnn_graph()
    loops = [n for n in g.nodes() if n.op == "loop"]
    assert len(loops) == 1 and loops[0] is [n for n in _rnn_graph().nodes() if n.op == "loop"][0]
    body = loops[0].attrs[0]
    leaves = {n.op for n in toposort(body.results) if not n.inputs}
    assert leaves <= {"param", "const"}           # closed: W arrives as an input, not a free node


def test_loop_invariant_work_is_hoisted_out_of_the_body():
    x, W = _arg(0, "x", (3,)), _arg(1, "W", (3, 3))
    i, h = placeholder("int64"), placeholder("float64", (3,))
    (final,), _ = scan(6, i, [h], [x], [], [], [ops.matmul(ops.exp(W), h)], [])
    loop = final.inputs[0]
    assert "exp" not in {n.op for n in toposort(loop.attrs[0].results)}
    assert any(n.op == "exp" for n in loop.inputs)


def test_reverse_mode_through_a_loop_matches_finite_differences_first_and_second_order():
    g = _rnn_graph()
    vals = _values(g)
    x, W, xs = g.inputs
    grads = evaluate(grad_graph(g, (0, 1, 2), False, False).outputs, vals)
    args = [vals[x], vals[W], vals[xs]]
    for k in range(3):
        np.testing.assert_allclose(grads[k], _central(_rnn, args, k), rtol=1e-6, atol=1e-8)
    first = grad_graph(g, (0,), True, False)
    inner = g.derive("s", (ops.reduce("sum", first.outputs[0]),), 0)
    hess_row_sum = evaluate(grad_graph(inner, (0,), True, False).outputs, vals)[0]

    def summed_grad(xv, Wv, xsv):
        return np.sum(evaluate(first.outputs, {x: xv, W: Wv, xs: xsv})[0])
    np.testing.assert_allclose(hess_row_sum, _central(summed_grad, args, 0), rtol=1e-5, atol=1e-7)


def test_the_gradient_has_one_forward_and_one_reversed_loop_and_prunes_what_is_unread():
    g = simplify(grad_graph(_rnn_graph(), (0,), True, False))
    loops = [n for n in g.nodes() if n.op == "loop"]
    assert sorted(n.attrs[4] for n in loops) == [False, True]
    forward = next(n for n in loops if not n.attrs[4])
    backward = next(n for n in loops if n.attrs[4])
    stacks_read = {i.attrs[0] for i in backward.inputs if i.op == "proj"}
    assert len(forward.attrs[0].results) == 1 + len(stacks_read)   # the carry + what is read


def test_expansion_for_back_ends_gives_the_same_values():
    g = grad_graph(_rnn_graph(), (0, 1, 2), False, False)
    vals = _values(g)
    straight = expand_regions(g.outputs)
    assert not any(n.op in ("loop", "cond", "proj") for n in toposort(straight))
    for a, b in zip(evaluate(g.outputs, vals), evaluate(straight, vals)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def safe_sqrt(a):
    if a >= 0:
        r = np.sqrt(a)
    else:
        r = np.sqrt(-a)
    return r


def two_sided(x, y):
    s = np.sum(x * y)
    if s > 0:
        out = np.log(s) * x
        k = 2.0
    else:
        out = -x
        k = 3.0
    return np.sum(out) * k


@pytest.mark.parametrize("target", TARGETS)
def test_a_scalar_if_is_a_branch_and_the_side_not_taken_leaks_nothing(target):
    f = sg.differentiate(safe_sqrt, target=target)
    assert "cond(" in f.ir_for(4.0)
    for a in (4.0, -4.0, 1e-300, -1e-300):
        assert np.isfinite(f.grad(a))
        assert f.grad(a) == pytest.approx(np.sign(a) * 0.5 / np.sqrt(abs(a)))
    assert f.grad.grad(4.0) == pytest.approx(-0.25 * 4.0 ** -1.5)
    g = sg.differentiate(two_sided, wrt=(0, 1), target=target)
    x = np.array([1.0, 2.0])
    for y in (np.array([0.5, 0.25]), np.array([-0.5, -0.25])):
        assert g(x, y) == pytest.approx(two_sided(x, y))
        assert sg.check_grad(two_sided, x, y, wrt=(0, 1)) < 1e-6


def test_the_generated_source_of_a_branch_is_an_if():
    source = sg.grad(safe_sqrt, target="python").source_for(4.0)
    assert "if a >= 0.0:" in source and "else:" in source and "np.where" not in source


def newton_sqrt(a):
    x = a
    for _ in range(50):
        x_new = 0.5 * (x + a / x)
        if np.abs(x_new - x) < 1e-12:
            break
        x = x_new
    return x


def skip_negative(xs):
    s = 0.0
    for v in xs:
        if v < 0:
            continue
        s = s + v * v
    return s


def stop_early(X):
    acc = np.zeros(2)
    for i, v in enumerate(X):
        acc = acc + v
        if np.sum(acc) > 3.0:
            break
    return np.sum(acc * acc) + i


@pytest.mark.parametrize("target", TARGETS)
def test_break_and_continue_on_data_in_a_loop_region(target):
    f = sg.differentiate(newton_sqrt, target=target)
    assert "loop(" in f.ir_for(2.0)
    assert f(2.0) == pytest.approx(np.sqrt(2.0))
    assert f.grad(2.0) == pytest.approx(0.5 / np.sqrt(2.0), rel=1e-9)
    xs = np.array([0.5, -1.0, 2.0, -0.3, 1.5, 0.7, -2.0, 0.1])
    g = sg.differentiate(skip_negative, target=target)
    assert g(xs) == pytest.approx(skip_negative(xs))
    np.testing.assert_allclose(g.grad(xs), np.where(xs < 0, 0.0, 2 * xs))
    X = np.abs(rng.normal(size=(10, 2)))
    h = sg.differentiate(stop_early, target=target)
    assert h(X) == pytest.approx(stop_early(X))
    assert sg.check_grad(stop_early, X) < 1e-6


def trajectory(y0, k):
    traj = np.zeros((30, 3))
    y = y0
    for t in range(30):
        y = y + 0.01 * np.array([y[1], -k * y[0], -y[2]])
        traj[t] = y
    return np.sum(traj ** 2)


@pytest.mark.parametrize("target", TARGETS)
def test_item_assignment_by_the_loop_index_updates_a_carried_array(target):
    y0 = np.array([1.0, 0.5, 2.0])
    f = sg.differentiate(trajectory, wrt=(0, 1), target=target)
    assert "loop(" in f.ir_for(y0, 2.0)
    assert f(y0, 2.0) == pytest.approx(trajectory(y0, 2.0))
    assert sg.check_grad(trajectory, y0, 2.0, wrt=(0, 1)) < 1e-6
    source = f.grad.source_for(y0, 2.0) if target == "python" else ""
    assert target != "python" or "np.empty((30, 30" not in source   # no per-iteration mask stored


def rnn_value(W, x, h0):
    h = h0
    for t in range(x.shape[0]):
        h = np.tanh(W @ h + x[t])
    return np.sum(h ** 2)


def piecewise(a, b):
    if a > 0:
        r = np.sqrt(a) * b
    else:
        r = -a * b
    return r


@pytest.mark.parametrize("target", TARGETS)
def test_vmap_through_loops_and_branches(target):
    W = rng.normal(size=(3, 3)) * 0.5
    X = rng.normal(size=(4, 6, 3))
    h0 = np.zeros(3)
    v = sg.vmap(rnn_value, in_axes=(None, 0, None), target=target)
    np.testing.assert_allclose(v(W, X, h0), [rnn_value(W, x, h0) for x in X], rtol=1e-12)
    per_example = sg.vmap(sg.grad(rnn_value), in_axes=(None, 0, None), target=target)
    np.testing.assert_allclose(per_example(W, X, h0),
                               np.stack([sg.grad(rnn_value)(W, x, h0) for x in X]), rtol=1e-10)
    a, b = np.array([1.0, -2.0, 4.0, 0.0]), np.array([1.0, 2.0, 3.0, 4.0])
    with np.errstate(invalid="ignore", divide="ignore"):
        np.testing.assert_allclose(sg.vmap(piecewise, target=target)(a, b),
                                   [piecewise(p, q) for p, q in zip(a, b)])
        np.testing.assert_allclose(sg.vmap(sg.grad(piecewise), target=target)(a, b),
                                   [sg.grad(piecewise)(p, q) for p, q in zip(a, b)])


def test_loop_source_does_not_grow_with_the_trip_count():
    lengths = set()
    for n in (10, 1000):
        xs = rng.normal(size=(n, 3))
        source = sg.grad(rnn_value, target="python").source_for(np.eye(3) * 0.5, xs, np.zeros(3))
        lengths.add(source.replace(str(n), "N"))   # the trip count is the only difference
    assert len(lengths) == 1


def growing(x):
    h = x
    for t in range(10):
        h = np.concatenate([h, x])
    return np.sum(h)


def scalar_then_vector(x):
    h = 0.0
    for t in range(10):
        h = np.tanh(h + x)
    return np.sum(h)


def test_a_carry_changing_shape_is_refused_naming_it_and_a_first_iteration_change_is_peeled():
    x = np.ones(3)
    f = sg.differentiate(scalar_then_vector)
    assert "loop(" in f.ir_for(x) and f(x) == pytest.approx(scalar_then_vector(x))
    with pytest.raises(sg.UnsupportedSyntaxError, match=r"'h' changes shape from \(6,\) to \(9,\)") as e:
        sg.differentiate(growing)(x)
    assert e.value.lineno == growing.__code__.co_firstlineno + 2


@pytest.mark.parametrize("target", TARGETS)
def test_forward_mode_runs_through_loops_and_branches_natively(target):
    W, X, h0 = rng.normal(size=(3, 3)) * 0.5, rng.normal(size=(6, 3)), rng.normal(size=3)
    tW, th = rng.normal(size=(3, 3)), rng.normal(size=3)
    value, tangent = sg.jvp(rnn_value, wrt=(0, 2), target=target)(W, X, h0, tW, th)
    gW, gh = sg.grad(rnn_value, wrt=(0, 2))(W, X, h0)
    assert value == pytest.approx(rnn_value(W, X, h0))
    assert tangent == pytest.approx(np.sum(gW * tW) + gh @ th, rel=1e-10)
    listing = sg.jvp(rnn_value).ir_for(W, X, h0, tW)
    assert listing.count("= loop(") == 1          # one loop computes the value and the tangent
    assert sg.jvp(safe_sqrt, target=target)(-4.0, 1.0) == pytest.approx((2.0, -0.25))
    assert sg.jvp(newton_sqrt, target=target)(2.0, 1.0)[1] == pytest.approx(0.5 / np.sqrt(2.0))
    hvp = sg.jvp(sg.grad(rnn_value), target=target)(W, X, h0, tW)[1]   # forward over reverse
    np.testing.assert_allclose(hvp, sg.hvp(rnn_value)(W, tW, X, h0), rtol=1e-9, atol=1e-12)


def counted_mean(xs):
    total = 0.0
    count = 0
    for x in xs:
        total = total + np.sum(x * x)
        count += x.shape[0]
    return total / count, count


@pytest.mark.parametrize("target", TARGETS)
def test_a_python_int_counter_stays_out_of_the_loop_and_a_python_int_after_it(target):
    xs = rng.normal(size=(9, 3))
    f = sg.differentiate(counted_mean, target=target)
    assert "loop(" in f.ir_for(xs)
    value, count = f(xs)
    assert count == 27 and value == pytest.approx(np.sum(xs * xs) / 27)


def nested_loops(X, w):
    total = 0.0
    for row in X:
        acc = np.zeros_like(w)
        for k in range(6):
            acc = np.tanh(acc * w + row[k % 3])
        total = total + np.sum(acc * row[0])
    return total


@pytest.mark.parametrize("target", TARGETS)
def test_nested_data_loops_first_and_second_order(target):
    X, w = rng.normal(size=(7, 3)), np.array([0.5, -0.2])
    f = sg.differentiate(nested_loops, wrt=(0, 1), target=target)
    assert f(X, w) == pytest.approx(nested_loops(X, w), rel=1e-12)
    assert sg.check_grad(nested_loops, X, w, wrt=(0, 1)) < 1e-6
    grad_w = sg.grad(nested_loops, wrt=1, target=target)
    inner = sg.differentiate(lambda X, w: np.sum(grad_w(X, w)), wrt=1, target=target)
    eps = 1e-6
    e = np.array([1.0, 0.0])
    fd = (np.sum(sg.grad(nested_loops, wrt=1)(X, w + eps * e)) -
          np.sum(sg.grad(nested_loops, wrt=1)(X, w - eps * e))) / (2 * eps)
    assert inner.grad(X, w)[0] == pytest.approx(fd, rel=1e-5)
    body = sg.differentiate(nested_loops, target="python").ir_for(X, w)
    assert "        body(" in body and "loop(" in body.split("body(", 1)[1]   # a loop in a loop


def zeros_started(W, xs):
    h = np.zeros(3)
    for t in range(xs.shape[0]):
        h = np.tanh(W @ h + xs[t])
    return np.sum(h)


def test_generated_source_runs_as_shown_with_only_numpy():
    W, xs = np.eye(3) * 0.5, rng.normal(size=(6, 3))
    source = sg.grad(zeros_started, target="python").source_for(W, xs)
    namespace = {"np": np}
    exec(source, namespace)                      # nothing but NumPy: the constant is spelled
    np.testing.assert_allclose(namespace["grad_zeros_started"](W, xs), sg.grad(zeros_started)(W, xs))
