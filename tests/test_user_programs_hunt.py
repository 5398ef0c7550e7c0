"""Realistic programs found by the `hunt` pass: each once through the whole check
(tests/user_program_check.py), plus the two bugs they found: a C export whose user variables
are named like libm functions (``cos = np.cos(theta)``), and ``sg.jvp`` of a function with a
parameter left at its default."""
import pathlib

import numpy as np
import pytest

import symgrad as sg
from user_program_check import check_program
from test_export import _call_c, _flat, needs_gcc


def rodrigues(rot, X):
    theta = np.sqrt(np.sum(rot ** 2))
    w = rot / theta
    cos, sin = np.cos(theta), np.sin(theta)   # names that are libm functions in C
    return X * cos + np.cross(w, X) * sin + w * np.dot(w, X) * (1 - cos)


def reprojection(cam, X, obs):
    """ADBench bundle adjustment: Rodrigues rotation, projection, radial distortion."""
    Xcam = rodrigues(cam[0:3], X - cam[3:6])
    p = Xcam[:2] / Xcam[2]
    r2 = np.sum(p ** 2)
    distortion = 1 + cam[9] * r2 + cam[10] * r2 * r2
    return p * distortion * cam[6] + cam[7:9] - obs


CAM = np.array([0.1, -0.2, 0.3, 0.5, 0.2, -3.0, 1.2, 0.1, -0.1, 0.01, 0.001])
POINT, OBS = np.array([0.3, 0.4, 1.5]), np.array([0.2, 0.1])


def huber(pred, y, delta=1.0):
    e = np.abs(pred - y)
    quad = np.minimum(e, delta)
    return np.sum(0.5 * quad ** 2 + delta * (e - quad))


def test_bundle_adjustment_reprojection():
    check_program(reprojection, (CAM, POINT, OBS), wrt=(0, 1), fd_rtol=1e-5, fd_atol=1e-6)


@needs_gcc
def test_c_export_of_user_variables_named_like_libm_functions(tmp_path: pathlib.Path):
    f = sg.differentiate(reprojection, wrt=(0, 1)).grad
    for got, want in zip(_call_c(f, tmp_path, CAM, POINT, OBS), _flat(f(CAM, POINT, OBS))):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_jvp_leaves_defaults_out_and_takes_keywords(target):
    pred, y, t = np.array([0.1, 2.0, -3.0]), np.zeros(3), np.array([1.0, 0.5, -2.0])
    jvp = sg.jvp(huber, target=target)
    slope = float(np.dot(sg.grad(huber, target="python")(pred, y), t))
    for value, tangent in (jvp(pred, y, t), jvp(pred, y, 1.0, t)):
        assert value == pytest.approx(huber(pred, y))
        assert tangent == pytest.approx(slope)
    value, _ = jvp(pred, y, t, delta=2.0)
    assert value == pytest.approx(huber(pred, y, 2.0))
    with pytest.raises(TypeError, match="missing a required argument: 'y'"):
        jvp(pred, t)


def nbody_energy(pos, vel, m):
    ke = 0.5 * np.sum(m[:, None] * vel ** 2)
    pe = 0.0
    for i in range(pos.shape[0]):
        for j in range(i + 1, pos.shape[0]):
            d = pos[i] - pos[j]
            pe = pe - m[i] * m[j] / np.sqrt(np.dot(d, d))
    return ke + pe


def gp_log_marginal(log_ell, X, y):
    d2 = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    K = np.exp(-0.5 * d2 / np.exp(2 * log_ell)) + 0.01 * np.eye(X.shape[0])
    L = np.linalg.cholesky(K)
    a = np.linalg.solve(L, y)
    return -0.5 * a @ a - np.sum(np.log(np.diag(L)))


def test_nbody_energy_and_gaussian_process_likelihood():
    rng = np.random.default_rng(1)
    check_program(nbody_energy, (rng.standard_normal((3, 3)), rng.standard_normal((3, 3)),
                                 np.array([1.0, 2.0, 0.5])), wrt=(0, 1, 2), fd_rtol=1e-5, fd_atol=1e-6)
    check_program(gp_log_marginal, (0.1, rng.standard_normal((4, 2)), rng.standard_normal(4)),
                  wrt=(0, 1), fd_rtol=1e-5, fd_atol=1e-6)
