"""The public API contract of DESIGN.md §2."""
import math

import numpy as np
import pytest

import symgrad as sg


def f2(x, y):
    return x * np.sin(y) + y * y


def vector_fn(x, w):
    return np.sum(np.tanh(x * w))


def two_outputs(x):
    return x * x, np.sum(np.sin(x))


def test_decorator_forms_and_plain_call():
    @sg.differentiate
    def a(x):
        return x * x

    @sg.differentiate(wrt=1, target="python")
    def b(x, y):
        return x * y * y

    c = sg.differentiate(f2, wrt="y")
    assert isinstance(a, sg.Function) and a(3.0) == 9.0 and a.grad(3.0) == 6.0
    assert b.grad(2.0, 3.0) == 12.0
    assert c.grad(1.0, 2.0) == pytest.approx(math.cos(2.0) + 4.0)


def test_wrt_conventions():
    f = sg.differentiate(f2, wrt=(1, 0))
    gy, gx = f.grad(1.0, 2.0)
    assert gx == pytest.approx(math.sin(2.0)) and gy == pytest.approx(math.cos(2.0) + 4.0)
    single = sg.differentiate(f2, wrt=0).grad(1.0, 2.0)
    assert isinstance(single, float)
    by_name = sg.grad(f2, wrt=("x", "y"))(1.0, 2.0)
    assert isinstance(by_name, tuple) and len(by_name) == 2


def test_gradient_has_argument_shape_and_dtype():
    x = np.linspace(-1, 1, 6).reshape(2, 3)
    w = np.float32(0.5) * np.ones(3, dtype=np.float32)
    gx, gw = sg.grad(vector_fn, wrt=(0, 1))(x.astype(np.float32), w)
    assert gx.shape == (2, 3) and gx.dtype == np.float32
    assert gw.shape == (3,) and gw.dtype == np.float32


def test_sum_of_outputs_convention():
    x = np.array([0.3, -0.5])
    g = sg.grad(two_outputs)(x)
    np.testing.assert_allclose(g, 2 * x + np.cos(x))
    value, grad = sg.value_and_grad(two_outputs)(x)
    np.testing.assert_allclose(value[0], x * x)
    assert value[1] == pytest.approx(np.sum(np.sin(x)))
    np.testing.assert_allclose(grad, g)


def test_value_and_grad_method_and_function_agree():
    f = sg.differentiate(f2, wrt=(0, 1))
    v1, g1 = f.value_and_grad(1.0, 2.0)
    v2, g2 = sg.value_and_grad(f2, wrt=(0, 1))(1.0, 2.0)
    assert v1 == v2 == f(1.0, 2.0) and g1 == g2 == f.grad(1.0, 2.0)


def test_grad_is_cached_and_reused():
    f = sg.differentiate(f2)
    assert f.grad is f.grad and f.value_and_grad is f.value_and_grad
    f.grad(1.0, 2.0)
    entry = f.grad._cache[next(iter(f.grad._cache))]
    f.grad(3.0, 4.0)
    assert len(f.grad._cache) == 1 and f.grad._cache[next(iter(f.grad._cache))] is entry


def test_second_derivative_composes():
    f = sg.differentiate(lambda x: x ** 4 + np.sin(x))
    x = 0.7
    assert f.grad.grad(x) == pytest.approx(12 * x * x - math.sin(x), rel=1e-13)
    assert f.grad.grad.grad(x) == pytest.approx(24 * x - math.cos(x), rel=1e-13)
    assert sg.grad(sg.grad(lambda x: np.exp(2 * x)))(0.3) == pytest.approx(4 * math.exp(0.6))


def test_source_and_ir_are_strings_before_any_call():
    f = sg.differentiate(f2, wrt=(0, 1))
    source, ir = f.grad.source, f.grad.ir
    assert source.startswith("def grad_f2(x, y):") and "b_x" in source and "np.cos(y)" in source
    assert "graph grad_f2(x, y):" in ir and "cos" in ir
    namespace = {"np": np}
    exec(source, namespace)
    np.testing.assert_allclose(namespace["grad_f2"](np.ones(3), np.ones(3)),
                               f.grad(np.ones(3), np.ones(3)))


def test_python_target_runs_exactly_the_source():
    """...less the argument checks it begins with: the API matched the exact signature."""
    f = sg.differentiate(f2, target="python")
    f.grad(1.0, 2.0)
    entry = next(iter(f.grad._cache.values()))
    assert entry.prepared["python"].fn.__code__.co_filename.startswith("<symgrad")
    shown = f.grad.source.splitlines(keepends=True)
    end = next(k for k, line in enumerate(shown) if line.endswith("source_for(...)')\n"))
    checks = shown[1:end + 1]    # the comment, one ``if`` and its ``raise``
    assert checks[0].startswith("    # generated for") and checks[1].startswith("    if ")
    assert sum("raise ValueError" in line for line in checks) == 1
    assert "".join(shown[:1] + shown[end + 1:]) == entry.prepared["python"].source


def test_scalars_in_python_floats_out():
    f = sg.differentiate(f2)
    assert type(f(1.0, 2.0)) is float and type(f.grad(1.0, 2.0)) is float


def test_out_argument():
    f = sg.differentiate(lambda x: np.sin(x) * 2.0)
    x = np.linspace(0, 1, 5)
    out = np.empty(5)
    result = f.grad(x, out=out)
    assert result is out
    np.testing.assert_allclose(out, 2 * np.cos(x))
    with pytest.raises(ValueError, match="shape"):
        f.grad(x, out=np.empty(4))


def test_results_never_alias_arguments():
    f = sg.differentiate(lambda x: x, target="python")
    x = np.ones(3)
    y = f(x)
    y[0] = 5.0
    assert x[0] == 1.0
    g = f.grad(x)
    g[0] = 7.0
    assert f.grad(x)[0] == 1.0


def test_stop_gradient_structural_zero_in_ir():
    g = sg.grad(lambda x: np.sin(sg.stop_gradient(x)) + x)
    assert g(0.3) == 1.0
    assert "cos" not in g.source and "cos" not in g.ir


def test_check_grad_reports_error():
    assert sg.check_grad(f2, 0.4, 1.1, wrt=(0, 1)) < 1e-8
    big = np.random.default_rng(0).standard_normal(500)
    assert sg.check_grad(vector_fn, big, np.ones(500)) < 1e-6


def test_hvp_and_hessp():
    def quartic(x, a):
        return np.sum(a * x ** 4) + np.sum(x[1:] * x[:-1])
    x, v, a = np.array([0.5, -1.0, 2.0]), np.array([1.0, 2.0, -1.0]), 3.0
    hessian = np.diag(12 * a * x ** 2) + np.diag(np.ones(2), 1) + np.diag(np.ones(2), -1)
    np.testing.assert_allclose(sg.hvp(quartic)(x, v, a), hessian @ v)
    np.testing.assert_allclose(sg.differentiate(quartic).hessp(x, v, a), hessian @ v)


def test_grad_of_function_object_keeps_target():
    f = sg.differentiate(f2, target="python")
    assert sg.grad(f).target == "python"
    assert sg.grad(f, target="cpu").target == "cpu"
    assert sg.grad(f)(1.0, 2.0) == f.grad(1.0, 2.0)


def test_command_line_shows_source_and_ir(capsys):
    from symgrad.cli import main
    assert main(["examples/stable_softmax.py", "stop_gradient_max", "--arg", "4", "--arg", "4",
                 "--show", "source,ir"]) == 0
    out = capsys.readouterr().out
    assert "def grad_stop_gradient_max(x, t):" in out and "graph grad_stop_gradient_max" in out


def test_hessp_uses_the_functions_wrt():
    def f(a, x):
        return np.sum(a * x ** 3)
    x, v = np.array([1.0, 2.0]), np.array([1.0, -1.0])
    h = sg.differentiate(f, wrt=1).hessp(x, v, 2.0)   # x first, then v, then the rest
    np.testing.assert_allclose(h, 6 * 2.0 * x * v)


def test_inlined_helper_from_another_file_is_named_in_comments():
    source = sg.grad(lambda t: sg.clip_by_norm(t, 1.0)).source_for(np.ones(3))
    assert "clip.py line" in source


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_numpy_result_types(target):
    """0-d float32 results stay np.float32; small integer sums accumulate in 64 bits; integers
    to negative integer powers raise, as in NumPy."""
    g = sg.grad(lambda x: 3.0 * x, target=target)(np.float32(2.0))
    assert type(g) is np.float32 and g == 3.0
    total = sg.differentiate(lambda x, b: x + np.sum(b), target=target)(1.0, np.array([200, 100], dtype=np.uint8))
    assert total == 301.0
    with pytest.raises(ValueError, match="negative integer powers"):
        sg.differentiate(lambda x, k: x * np.sum(k ** -1), target=target)(1.0, np.array([2, 3]))


def test_method_decoration_is_refused_clearly():
    class Model:
        @sg.differentiate
        def loss(self, x):
            return x * x
    assert isinstance(Model.loss, sg.Function)
    with pytest.raises(TypeError, match="method of Model"):
        Model().loss(1.0)
