"""Generated source says what it was generated for and refuses arguments it would get wrong
(symgrad.source_contract): a copied ``.source`` or an exported module run on other ranks,
sizes it depends on, integer data or other static values raises, never returns a wrong number."""
import importlib.util

import numpy as np
import pytest

import symgrad as sg


def run_source(source: str, name: str, *args):
    namespace = {"np": np}
    exec(source, namespace)
    return namespace[name](*args)


def row_sums(x):
    return np.sum(np.exp(x), axis=-1)     # 1-d x: folded to a whole-array sum


def loss(x, t):
    return -np.sum(t * (x - np.log(np.sum(np.exp(x)))))


def last_and_mean(x):
    return x[-1] + np.sum(x) / len(x)     # x[2] and / 3.0 for size 3: sizes baked in


def power(x, n):
    return np.sum(x ** n)


X2 = np.array([[0.1, -0.4, 0.3], [1.2, 0.5, -2.0]])


def test_source_before_a_call_states_the_guessed_types():
    f = sg.differentiate(loss)
    source = f.grad.source
    assert source.splitlines()[1] == "    # generated for x: float64[n], t: float64[n]"
    assert "np.ndim(x) != 1" in source and "np.ndim(t) != 1" in source


def test_guessed_source_refuses_2d_data_naming_the_argument():
    f = sg.differentiate(row_sums)
    source = f.grad.source                     # generated for 1-d x before any call
    with pytest.raises(ValueError, match=r"expected x: float64\[n\]; got x: float64\[2, 3\]; "
                                         r"regenerate with \.source_for"):
        run_source(source, "grad_row_sums", X2)
    with pytest.raises(ValueError, match=r"^expected x: float64\[n\]; got"):
        run_source(f.source, "row_sums", X2)   # the value's source: np.sum(x) would be a scalar


def test_source_after_a_2d_call_is_the_2d_version_and_right():
    f = sg.differentiate(row_sums)
    f.source                                   # the guessed 1-d version first
    expected = f(X2)
    source = f.source
    assert "float64[n, m]" in source and ("axis=-1" in source or "axis=1" in source)
    np.testing.assert_allclose(run_source(source, "row_sums", X2), expected, rtol=1e-15)
    np.testing.assert_allclose(run_source(source, "row_sums", np.ones((4, 5))),
                               np.full(4, 5 * np.e), rtol=1e-15)   # sizes are free
    np.testing.assert_allclose(run_source(f.grad.source_for(X2), "grad_row_sums", X2),
                               np.exp(X2), rtol=1e-15)
    with pytest.raises(ValueError, match=r"got x: float64\[3\];"):
        run_source(source, "row_sums", np.ones(3))


def test_sizes_the_code_depends_on_are_checked():
    f = sg.differentiate(last_and_mean)
    x3, x5 = np.array([1.0, 2.0, 4.0]), np.arange(5.0)
    source = f.grad.source_for(x3)
    assert "# generated for x: float64[3]; sizes baked in" in source
    np.testing.assert_allclose(run_source(source, "grad_last_and_mean", x3), f.grad(x3))
    with pytest.raises(ValueError, match=r"expected x: float64\[3\]; got x: float64\[5\]"):
        run_source(source, "grad_last_and_mean", x5)
    np.testing.assert_allclose(run_source(f.grad.source_for(x5), "grad_last_and_mean", x5),
                               f.grad(x5))


def test_size_one_axes_are_checked():
    source = sg.differentiate(lambda x, y: x * y).source_for(np.ones((3, 1)), np.ones((3, 4)))
    assert "x: float64[n, 1], y: float64[n, m]" in source and "np.shape(x)[1] != 1" in source
    assert run_source(source, "lambda_", np.ones((5, 1)), np.ones((5, 2))).shape == (5, 2)
    with pytest.raises(ValueError, match=r"got x: float64\[3, 4\], y: float64\[3, 4\]"):
        run_source(source, "lambda_", np.ones((3, 4)), np.ones((3, 4)))


def test_sizes_that_were_equal_must_stay_equal():
    """The probe at other sizes kept equal sizes equal: that is all it saw work."""
    source = sg.jvp(lambda x, w: np.sum(np.tanh(x @ w)), wrt=(0, 1)).source_for(
        np.ones((2, 2)), np.ones(2), np.ones((2, 2)), np.ones(2))
    assert "# generated for x: float64[n, n], w: float64[n], t_x: float64[n, n], t_w: float64[n]" \
        in source
    x, w = np.array([[0.5, -1.0, 2.0], [0.1, 0.2, 0.3], [1.0, 1.0, -1.0]]), np.array([0.3, 0.1, -0.7])
    np.testing.assert_allclose(run_source(source, "jvp_lambda", x, w, x, w),
                               sg.jvp(lambda x, w: np.sum(np.tanh(x @ w)), wrt=(0, 1))(x, w, x, w))
    with pytest.raises(ValueError, match=r"expected x: float64\[n, n\], w: float64\[n\], .*; "
                                         r"got x: float64\[2, 3\], w: float64\[3\], "):
        run_source(source, "jvp_lambda", np.ones((2, 3)), np.ones(3), np.ones((2, 3)), np.ones(3))


def test_static_values_are_checked():
    f = sg.differentiate(power)
    source = f.grad.source_for(np.ones(3), 2)
    assert "n = 2 (baked in)" in source
    x = np.array([0.5, 1.5])
    np.testing.assert_allclose(run_source(source, "grad_power", x, 2), 2 * x)
    with pytest.raises(ValueError,
                       match=r"expected x: float64\[m\], n = 2; got x: float64\[2\], n = 3;"):
        run_source(source, "grad_power", x, 3)


def index_sum(x, i, mode, scale, act=np.tanh):
    return np.sum(act(x[i])) * (2.0 if mode == "{twice}" else 1.0) * (3.0 if scale else 1.0)


def test_static_strings_bools_integer_data_and_functions_in_one_check():
    f = sg.grad(index_sum)
    x, i = np.array([0.1, 0.5, -0.3, 2.0]), np.array([0, 2, 2])
    source = f.source_for(x, i, "{twice}", True, np.tanh)
    assert "mode = '{twice}' (baked in)" in source
    assert "act = tanh (baked in, not checked)" in source
    assert source.count("raise ValueError") == 1
    np.testing.assert_allclose(
        run_source(source, "grad_index_sum", x, i, "{twice}", True, np.tanh),
        f(x, i, "{twice}", True, np.tanh), rtol=1e-15)
    for args, got in [((x, i, "once", True, np.tanh), r"mode = 'once', scale = True;"),
                      ((x, i, "{twice}", 1, np.tanh), r"mode = '\{twice\}', scale = 1;"),
                      ((x, i.astype(float), "{twice}", True, np.tanh), r"i: float64\[3\],"),
                      ((x, i[:, None], "{twice}", True, np.tanh), r"i: int64\[3, 1\],")]:
        with pytest.raises(ValueError, match=r"^expected x: float64\[n\], i: int64\[m\], "
                                             r"mode = '\{twice\}', scale = True; got .*" + got):
            run_source(source, "grad_index_sum", *args)
    assert run_source(source, "grad_index_sum", x, i.astype(np.int32), "{twice}", True,
                      np.tanh).shape == (4,)   # any integer kind indexes the same


@pytest.mark.parametrize("make", [
    lambda: sg.jvp(lambda x, w: np.sum(np.tanh(x @ w)), wrt=(0, 1)).source_for(
        np.ones((2, 2)), np.ones(2), np.ones((2, 2)), np.ones(2)),
    lambda: sg.grad(lambda params, x: np.sum(x @ params["weights"] + params["bias"])).source_for(
        {"weights": np.ones((3, 2)), "bias": np.ones(2)}, np.ones((4, 3))),
    lambda: sg.grad(index_sum).source_for(np.ones(4), np.array([0, 1]), "abc", False, np.sin)])
def test_argument_checks_fit_in_99_columns(make):
    lines = make().splitlines()
    end = next(k for k, line in enumerate(lines) if line.endswith("source_for(...)')"))
    assert lines[1].startswith("    # generated for")
    assert "raise ValueError(" in "".join(lines[:end])
    assert all(len(line) <= 99 for line in lines[:end + 1]), "\n".join(lines[:end + 1])


def test_scalars_accept_python_floats_and_0d_arrays():
    f = sg.differentiate(lambda x, y: x * np.sin(y), wrt=(0, 1))
    source = f.grad.source_for(1.0, 2.0)
    assert "# generated for x: float64 scalar, y: float64 scalar" in source
    expected = f.grad(0.3, 0.7)
    for args in [(0.3, 0.7), (np.array(0.3), np.array(0.7)), (np.float64(0.3), np.float32(0.7))]:
        np.testing.assert_allclose(run_source(source, "grad_lambda", *args), expected, rtol=1e-7)
    with pytest.raises(ValueError,
                       match=r"y: float64 scalar; got x: float64\[\], y: float64\[2\];"):
        run_source(source, "grad_lambda", 0.3, np.ones(2))


def test_dtypes_other_floats_compute_integers_are_refused():
    """float32 data in float64 code computes in float32/float64: rounding, not a wrong answer;
    integer data would truncate what is written into arrays made like it."""
    f = sg.differentiate(last_and_mean)
    source = f.grad.source_for(np.ones(3))
    x = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(run_source(source, "grad_last_and_mean", x.astype(np.float32)),
                               f.grad(x), rtol=1e-6)
    with pytest.raises(ValueError, match=r"expected x: float64\[3\]; got x: int64\[3\];"):
        run_source(source, "grad_last_and_mean", np.array([1, 2, 4]))


def test_exported_module_refuses_the_same_way(tmp_path):
    f = sg.differentiate(row_sums)
    path = sg.export(f.grad, tmp_path / "g.py", np.ones(4))
    text = path.read_text()
    assert "# generated for x: float64[n]" in text
    spec = importlib.util.spec_from_file_location("g", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    np.testing.assert_allclose(module.grad_row_sums(np.arange(6.0)), np.exp(np.arange(6.0)))
    with pytest.raises(ValueError, match=r"expected x: float64\[n\]; got x: float64\[2, 3\]; "
                                         r"export again with sg\.export"):
        module.grad_row_sums(X2)


def test_showing_source_does_not_change_what_source_means():
    f = sg.differentiate(row_sums)
    f.grad(X2)
    key = f.grad._last_key
    source = f.grad.source          # traces at other sizes inside (to see what sizes it needs)
    assert f.grad._last_key == key and f._last_key == key
    assert "float64[n, m]" in source and f.grad.source == source and "float64[n, m]" in f.source


@pytest.mark.parametrize("args", [(np.array([0.2, -1.0, 3.0]), np.array([0.0, 1.0, 0.0])),
                                  (X2, np.ones((2, 3)))])
def test_python_target_results_unchanged(args):
    python = sg.differentiate(loss, target="python")
    cpu = sg.differentiate(loss)
    np.testing.assert_allclose(python.grad(*args), cpu.grad(*args), rtol=1e-13)
    shown = run_source(python.grad.source, "grad_loss", *args)
    np.testing.assert_array_equal(python.grad(*args), shown)


def test_hvp_source_before_any_call():
    """hvp(f).source guesses (x, v, *rest): it raised IndexError (the guess had f's arity)."""
    def f(a, x, scale=2.0):
        return np.sum(np.sin(x) * a) * scale
    source = sg.hvp(f, wrt=1).source
    assert source.startswith("def hvp_f(x, v, a") and "# generated for x: float64[n], v: float64[n]" in source
    x, v, a = np.linspace(0.1, 0.3, 3), np.array([1.0, -1.0, 0.5]), np.array([0.2, 0.4, 0.6])
    namespace = {"np": np}
    exec(source, namespace)
    np.testing.assert_allclose(namespace["hvp_f"](x, v, a, 2.0), sg.hvp(f, wrt=1)(x, v, a), rtol=1e-14)
