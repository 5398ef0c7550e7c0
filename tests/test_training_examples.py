"""The training examples run (shortened) and do what they claim: losses fall, EM's likelihood
never decreases and its gradient M-step is the closed form, FGSM's stop_gradient makes the
perturbation a constant, exact derivatives beat finite differences in scipy."""
import importlib.util
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_logistic_regression():
    out = load("logistic_regression").main(["--steps", "120", "--quiet"])
    assert out["grad_error"] < 1e-6
    assert out["losses"][-1] < 0.5 * out["losses"][0]
    assert out["accuracy"] > 0.9 and out["cosine"] > 0.95


def test_mlp_adam_with_global_norm_clipping(capsys):
    out = load("mlp_adam").main(["--steps", "200"])
    assert out["final"] < 0.2 * out["var_y"]
    assert out["losses"][-1] < out["losses"][0]
    assert any(n > 0.1 for n in out["norms"])           # clipping was active
    text = capsys.readouterr().out
    assert "[" + "#" * 28 + "]  200/200" in text and "final training MSE" in text


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_rnn_clipping(capsys, target):
    """The seed's question: the RNN's gradient norm before clipping exceeds the threshold
    (the recurrent weights start in the exploding regime), never after; the loss falls."""
    out = load("rnn_clipping").main(["--steps", "40", "--seq", "6", "--hidden", "8",
                                     "--clip", "0.5", "--target", target])
    assert max(out["norms_before"]) > 2 * out["clip"]                    # clipping was active
    assert max(out["norms_after"]) <= out["clip"] * (1 + 1e-9)
    assert all(a == pytest.approx(min(b, out["clip"]), rel=1e-9)
               for a, b in zip(out["norms_after"], out["norms_before"]))
    assert np.mean(out["losses"][-10:]) < np.mean(out["losses"][:10])
    text = capsys.readouterr().out
    assert "[" + "#" * 28 + "]   40/40" in text and "clipped on" in text and "sample:" in text


def test_rnn_clipping_gradient_source_has_the_two_loops(capsys):
    load("rnn_clipping").main(["--show-source", "--seq", "6", "--hidden", "4", "--target", "python"])
    source = capsys.readouterr().out
    # ``total = 0.0`` is a Python number; with float64 work it needs no peeled first step
    assert re.search(r"^    for i in range\(6\):$", source, re.M), source
    assert re.search(r"^    for i_1 in reversed\(range\(6\)\):$", source, re.M), source


def test_em_gmm():
    out = load("em_gmm").main(["--iterations", "40", "--quiet"])
    ll = np.array(out["loglik"])
    assert np.all(np.diff(ll) >= -1e-9 * np.abs(ll[1:]))   # EM never decreases the likelihood
    assert out["fisher"] < 1e-9                             # grad Q == grad log L
    assert out["no_stop"] > 1.0                             # ...only with stop_gradient
    assert out["m_step_error"] < 1e-9                       # gradient M-step == closed form
    np.testing.assert_allclose(out["means"], [-2.0, 0.5, 3.0], atol=0.15)


def test_fgsm():
    out = load("fgsm").main(["--steps", "250", "--quiet"])
    assert out["stop_check"] < 1e-12
    standard, robust = out["standard training"], out["adversarial training"]
    assert standard[0] > 0.95 and robust[0] > 0.95              # clean accuracy
    assert standard[-1] < standard[0] - 0.1                     # FGSM hurts the standard model
    assert robust[-1] > standard[-1] + 0.05                     # adversarial training helps


def test_scipy_rosenbrock(capsys):
    rows = load("scipy_rosenbrock").main(["--n", "10"])
    by = {(m, mode): (res, calls) for m, mode, res, calls, _ in rows}
    for (method, mode), (res, calls) in by.items():
        if mode != "finite differences":
            assert res.success, (method, mode, res.message)
            np.testing.assert_allclose(res.x, 1.0, atol=1e-3)
    for method in ("CG", "BFGS", "L-BFGS-B"):
        assert by[(method, "f.grad")][1] * 5 < by[(method, "finite differences")][1]
    assert "trust-ncg" in capsys.readouterr().out


@pytest.mark.parametrize("script,args", [
    ("logistic_regression.py", ["--steps", "5", "--quiet"]),
    ("mlp_adam.py", ["--steps", "5", "--quiet"]),
    ("em_gmm.py", ["--iterations", "3", "--quiet"]),
    ("fgsm.py", ["--steps", "5", "--quiet"]),
    ("scipy_rosenbrock.py", ["--n", "4", "--methods", "BFGS,trust-ncg"]),
    ("clipping.py", []),
    ("newton.py", ["--n", "4", "--quiet"]),
])
def test_runs_as_a_script(script, args):
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_per_example_clipping_dp_sgd():
    out = load("per_example_clipping").main(["--steps", "60", "--quiet"])
    assert out["per_example_error"] < 1e-12               # vmap(grad) == a loop of sg.grad
    assert out["max_clipped_norm"] <= 1.0 + 1e-12         # every example clipped to norm 1
    assert out["losses"][-1] < 0.7 * out["losses"][0]
    assert out["accuracy"] > 0.85


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_newton_with_sg_hessian(target):
    out = load("newton").main(["--n", "10", "--target", target, "--quiet"])
    np.testing.assert_allclose(out["x"], 1.0, atol=1e-10)
    gnorms = [g for _, g in out["history"]]
    assert gnorms[-1] < 1e-10
    if importlib.util.find_spec("scipy") is None:   # optional: the example skips scipy's part
        assert "scipy" not in out
        return
    assert out["hess_error"] < 1e-10 and out["grad_error"] < 1e-10   # scipy's rosen_hess/der
    assert out["scipy"].success
    np.testing.assert_allclose(out["scipy"].x, 1.0, atol=1e-6)
