"""Front-end regressions: branches of different shapes, list methods on any element, long
traces (issue 8, items 3, 12 and 16)."""
import inspect

import numpy as np
import pytest

from symgrad.emit_python import compile_python
from symgrad.regions import straight_line

import symgrad as sg
from symgrad.frontend import trace

TARGETS = ("cpu", "python")


# -- item 3: a data-dependent branch whose sides have different shapes --------------------------
def ifexp_shapes_differ(x, s):
    v = x * 2.0 if s > 0 else s
    return np.sum(v)


def if_statement_shapes_differ(x, s):
    if s > 0:
        v = x * 2.0
    else:
        v = s
    return np.sum(v)


def early_return_shapes_differ(x, s):
    if s > 0:
        return x * 2.0
    return s


def ifexp_constant_shapes_differ(x, s):
    v = np.ones(3) if s > 0 else 1.0
    return np.sum(v * x)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [ifexp_shapes_differ, if_statement_shapes_differ,
                                early_return_shapes_differ, ifexp_constant_shapes_differ])
def test_branches_of_different_shapes_are_refused(fn, target):
    f = sg.differentiate(fn, target=target)
    with pytest.raises(sg.UnsupportedSyntaxError) as info:
        f(np.array([1.0, 2.0, 3.0]), -1.0)
    message = str(info.value)
    assert "(3,)" in message and "()" in message and "shape" in message
    if fn is not early_return_shapes_differ:
        assert "'v'" in message
    lines, start = inspect.getsourcelines(fn)
    assert start < info.value.lineno < start + len(lines)


def ifexp_dtypes_differ(x, s):
    v = x * 2.0 if s > 0 else np.zeros(3)      # float32 on one side, float64 on the other
    return np.sum(v)


def early_return_dtypes_differ(x, s):
    if s > 0:
        return x * 2.0
    return np.zeros(3)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("fn", [ifexp_dtypes_differ, early_return_dtypes_differ])
def test_branches_of_different_dtypes_are_refused(fn, target):
    # NumPy gives the taken side's dtype, which is known only at run time
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    with pytest.raises(sg.UnsupportedSyntaxError, match="float32 on one branch and float64"):
        sg.differentiate(fn, target=target)(x, np.float32(-1.0))


def weak_scalar_branch(x, s):
    v = s * 2.0 if s > 0 else 0.5               # a Python number takes the other side's dtype
    return x * v


@pytest.mark.parametrize("target", TARGETS)
def test_a_python_number_branch_keeps_the_arrays_dtype(target):
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    out = sg.differentiate(weak_scalar_branch, target=target)(x, np.float32(1.0))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [2.0, 4.0, 6.0])


def branches_same_shape(x, s):
    v = x * 2.0 if s > 0 else x - s
    w = s * s if s > 0 else 1.0            # a scalar node against a Python scalar
    k = 2 if s > 0 else 3                  # static ints: selected
    if s > 0.5:
        u = np.arange(3)
    else:
        u = x                              # same shape, dtypes promoted
    return np.sum(v * w * k + u)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("s", [-1.0, 0.25, 2.0])
def test_branches_of_one_shape_still_select(s, target):
    x = np.array([1.0, 2.0, 3.0])
    f = sg.differentiate(branches_same_shape, wrt=(0, 1), target=target)
    assert f(x, s) == pytest.approx(branches_same_shape(x, s), rel=1e-6)
    assert sg.check_grad(f, x, s, wrt=(0, 1)) < 1e-6


def elementwise_if_on_arrays(x):
    return np.sum(x * x if x > 0 else 0.0)   # an array condition is elementwise


def test_array_condition_still_elementwise():
    x = np.array([1.0, -2.0, 3.0])
    f = sg.differentiate(elementwise_if_on_arrays, target="python")
    assert f(x) == pytest.approx(10.0)


# -- item 16: list methods on any element -------------------------------------------------------
def gmm_style_entries(x):
    k = x.shape[0]
    zero = np.zeros(k)
    rows = []
    for i in range(3):
        entries = []
        for j in range(k):
            entries.append(x[j] * i if j <= i else 0.0)
        rows.append(np.stack(entries))
    rows.append(zero)
    rows.insert(0, np.ones(k))
    rows.extend([zero + 1.0, x])
    last = rows.pop()
    return np.sum(np.stack(rows) ** 2) + np.sum(np.concatenate([zero, last, np.ones(2)]))


@pytest.mark.parametrize("target", TARGETS)
def test_list_methods_with_static_and_traced_elements(target):
    x = np.array([0.3, -1.2, 2.0])
    f = sg.differentiate(gmm_style_entries, target=target)
    assert f(x) == pytest.approx(gmm_style_entries(x))
    assert sg.check_grad(f, x) < 1e-6


def dict_methods_with_constants(x):
    d = {}
    d.setdefault("a", np.zeros(3))
    d.update(b=x * 2.0)
    return np.sum(d.get("a") + d["b"]) + len(d.keys())


@pytest.mark.parametrize("target", TARGETS)
def test_dict_methods_with_static_elements(target):
    x = np.array([0.3, -1.2, 2.0])
    f = sg.differentiate(dict_methods_with_constants, target=target)
    assert f(x) == pytest.approx(dict_methods_with_constants(x))


# -- item 12: long traces -----------------------------------------------------------------------
def loop_over_rows(y):
    acc = np.zeros(3)
    for i, row in enumerate(y):
        acc = acc + row * i
    return np.sum(acc * acc)


@pytest.mark.parametrize("target", TARGETS)
def test_200_step_loop_over_rows(target):
    y = np.random.default_rng(0).uniform(-1, 1, (200, 3))
    f = sg.differentiate(loop_over_rows, target=target)
    assert f(y) == pytest.approx(loop_over_rows(y), rel=1e-12)
    w = np.arange(200.0)
    expected = 2 * w[:, None] * (w @ y)[None, :]
    np.testing.assert_allclose(f.grad(y), expected, rtol=1e-10)


def long_chain(x):
    acc = x
    for k in range(2000):
        acc = acc * 0.999 + np.sin(acc) * 1e-3
    return acc


def test_2000_term_chain_traces():
    graph = trace(long_chain, [0.5])
    assert [n.op for n in graph.nodes()].count("loop") == 1   # a loop region, not 2000 copies
    straight = straight_line(graph)                            # what a back end may unroll
    assert len(straight.nodes()) > 2000
    fn, _ = compile_python(straight)
    assert fn(0.5) == pytest.approx(long_chain(0.5), rel=1e-12)
    for target in ("python", "cpu"):
        got = sg.differentiate(long_chain, target=target)(0.5)
        assert got == pytest.approx(long_chain(0.5), rel=1e-12)


def nested_values(x):
    v = x
    for _ in range(1200):          # deeper than the interpreter's recursion limit
        v = [v]
    for _ in range(1200):
        v = v[0]
    return v * 2.0


def test_deeply_nested_lists_trace():
    assert sg.differentiate(nested_values, target="python")(1.5) == 3.0


def test_expression_nesting_too_deep_is_a_clear_error(tmp_path):
    depth = 2000        # right-nested (unary minus): no left spine to walk iteratively
    source = "def deep(x):\n    return " + "-" * depth + "x\n"
    try:
        compile(source, "probe", "exec")
    except (RecursionError, SyntaxError, MemoryError):
        pytest.skip("this Python cannot parse the expression itself")
    path = tmp_path / "deep_module.py"
    path.write_text(source)
    namespace = {}
    exec(compile(source, str(path), "exec"), namespace)
    with pytest.raises(sg.UnsupportedSyntaxError, match="nesting") as info:
        sg.differentiate(namespace["deep"], target="python")(1.0)
    assert info.value.lineno == 2


def long_sum_expression_source(n):
    return "def chain(x):\n    return " + " + ".join(f"x * {k}.0" for k in range(n)) + "\n"


def test_2000_term_expression_traces(tmp_path):
    source = long_sum_expression_source(2000)
    path = tmp_path / "chain_module.py"
    path.write_text(source)
    namespace = {}
    exec(compile(source, str(path), "exec"), namespace)
    f = sg.differentiate(namespace["chain"], target="python")
    assert f(1.0) == pytest.approx(sum(range(2000)))
    assert f.grad(1.0) == pytest.approx(sum(range(2000)))


def nested_values_through_a_branch(x, s):
    a, b = x, x * 2.0
    for _ in range(1200):
        a, b = [a], [b]
    v = a if s > 0 else b
    for _ in range(1200):
        v = v[0]
    return v


@pytest.mark.parametrize("s", [1.0, -1.0])
def test_deeply_nested_values_merge_across_a_data_branch(s):
    f = sg.differentiate(nested_values_through_a_branch, target="python")
    assert f(1.5, s) == (1.5 if s > 0 else 3.0)
