"""Textbook recurrent networks as users write them (an Elman RNN, a GRU, an LSTM unrolled with
``for t in range(T)``, sigmoid as 1/(1+exp(-x)), softmax with the max trick, cross-entropy of
a clipped probability) and ADBench's bundle adjustment, hand tracking and LSTM definitions,
each checked on target="cpu" and "python" against NumPy and central differences, and through
the CUDA emulation (tests/user_program_check.py)."""
import os
import sys

import numpy as np
import pytest

import symgrad as sg

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from user_program_check import check_program, check_cuda  # noqa: E402
from adbench_models import lstm_model, sigmoid  # noqa: E402

RNG = np.random.default_rng(11)
T, V, H = 6, 5, 4


def softmax(z):
    z = z - np.max(z)
    e = np.exp(z)
    return e / np.sum(e)


def cross_entropy(p, label):
    return -np.log(np.clip(p[label], 1e-12, 1.0))


def elman_loss(Wxh, Whh, Why, xs, labels):
    h = np.zeros(Whh.shape[0])
    loss = 0.0
    for t in range(xs.shape[0]):
        h = np.tanh(Wxh @ xs[t] + Whh @ h)
        p = softmax(Why @ h)
        loss += cross_entropy(p, labels[t])
    return loss


def elman_args():
    xs = np.eye(V)[RNG.integers(0, V, T)]
    labels = RNG.integers(0, V, T)
    # spectral radius above 1: the gradients grow with T
    return [RNG.normal(size=(H, V)) * 0.5, 1.5 * np.linalg.qr(RNG.normal(size=(H, H)))[0],
            RNG.normal(size=(V, H)) * 0.5, xs, labels]


def test_elman_rnn_cross_entropy():
    check_program(elman_loss, elman_args(), wrt=(0, 1, 2))


def test_elman_rnn_gradient_clipped_by_global_norm():
    args = elman_args()
    grads = sg.grad(elman_loss, wrt=(0, 1, 2))(*args)
    clipped, norm = sg.clip_by_global_norm(list(grads), 1.0)
    want_norm = np.sqrt(sum(np.sum(g * g) for g in grads))
    assert norm == pytest.approx(want_norm, rel=1e-12)
    for c, g in zip(clipped, grads):
        np.testing.assert_allclose(c, g * (1.0 / max(want_norm, 1.0)), rtol=1e-12)


def test_elman_rnn_loss_clipped_probability_at_the_clip():
    """A probability clipped at 1e-12: the gradient through np.clip there is the clip's."""
    def loss(z, label):
        p = 1.0 / (1.0 + np.exp(-z))
        return -np.sum(np.log(np.clip(p, 1e-12, 1.0 - 1e-12)) * label)
    z = np.array([-40.0, -1.0, 0.5, 40.0])
    check_program(loss, [z, np.array([1.0, 1.0, 0.0, 1.0])], cuda=True)


def gru_loss(Wz, Wr, Wh, Uz, Ur, Uh, xs):
    h = np.zeros(Uz.shape[0])
    loss = 0.0
    for t in range(len(xs)):
        x = xs[t]
        z = 1.0 / (1.0 + np.exp(-(Wz @ x + Uz @ h)))
        r = 1.0 / (1.0 + np.exp(-(Wr @ x + Ur @ h)))
        h_tilde = np.tanh(Wh @ x + Uh @ (r * h))
        h = (1 - z) * h + z * h_tilde
        loss = loss + np.sum(h ** 2)
    return loss


def test_gru_unrolled():
    ws = [RNG.normal(size=(H, V)) * 0.5 for _ in range(3)] + [RNG.normal(size=(H, H)) for _ in range(3)]
    check_program(gru_loss, ws + [RNG.normal(size=(T, V))], wrt=(0, 3, 5))


def lstm_textbook(W, U, b, xs, ys):
    hdim = U.shape[1]
    h, c = np.zeros(hdim), np.zeros(hdim)
    loss = 0.0
    for t in range(xs.shape[0]):
        gates = W @ xs[t] + U @ h + b
        i, f, o, g = np.split(gates, 4)
        i, f, o = sigmoid(i), sigmoid(f), sigmoid(o)
        c = f * c + i * np.tanh(g)
        h = o * np.tanh(c)
        loss += 0.5 * np.sum((h - ys[t]) ** 2)
    return loss / xs.shape[0]


def test_lstm_textbook_split_gates():
    args = [RNG.normal(size=(4 * H, V)) * 0.5, RNG.normal(size=(4 * H, H)) * 0.5, RNG.normal(size=4 * H),
            RNG.normal(size=(T, V)), RNG.normal(size=(T, H))]
    check_program(lstm_textbook, args, wrt=(0, 1, 2))


# -- ADBench ------------------------------------------------------------------------------------

def lstm_predict(w, b, state, x):
    # ADBench: one step of the layered LSTM, then the output transformation
    x2 = x * w[0]
    s2 = state.copy()
    for i in range(0, len(state), 2):
        h, c = lstm_model(w[i // 2 + 1], b[i // 2 + 1], state[i], state[i + 1], x2)
        s2[i] = h
        s2[i + 1] = c
        x2 = h
    return x2 * w[-1] + b[-1], s2


def lstm_objective(main_params, extra_params, state, sequence):
    total = 0.0
    count = 0
    _input = sequence[0]
    for t in range(len(sequence) - 1):
        ypred, state = lstm_predict(main_params, extra_params, state, _input)
        ynorm = ypred - np.log(np.sum(np.exp(ypred), 0) + 2)
        ygold = sequence[t + 1]
        total += np.sum(ygold * ynorm)
        count += ygold.shape[0]
        _input = ygold
    return -total / count


def test_adbench_lstm_objective():
    layers, b = 2, 3
    main = RNG.normal(size=(layers + 2, 4 * b)) * 0.5
    extra = RNG.normal(size=(layers + 2, 4 * b)) * 0.5
    main[0, :b], main[-1, :b] = 1.0, 1.0   # w[0], w[-1] are read as their first b entries
    state = RNG.normal(size=(2 * layers, b)) * 0.5
    seq = RNG.normal(size=(5, b))

    def sliced(main, extra, state, seq):
        return lstm_objective(_rows(main, b), _rows(extra, b), state, seq)
    check_program(sliced, [main, extra, state, seq], wrt=(0, 1))


def _rows(p, b):
    return [p[0, :b]] + [p[i] for i in range(1, p.shape[0] - 1)] + [p[-1, :b]]


def rodrigues_rotate_point(rot, X):
    sqtheta = np.sum(np.square(rot))
    if sqtheta != 0.0:
        theta = np.sqrt(sqtheta)
        costheta = np.cos(theta)
        sintheta = np.sin(theta)
        theta_inverse = 1.0 / theta
        w = theta_inverse * rot
        w_cross_X = np.cross(w, X)
        tmp = np.dot(w, X) * (1.0 - costheta)
        return X * costheta + w_cross_X * sintheta + w * tmp
    else:
        return X + np.cross(rot, X)


def radial_distort(rad_params, proj):
    rsq = np.sum(np.square(proj))
    L = 1.0 + rad_params[0] * rsq + rad_params[1] * rsq * rsq
    return proj * L


def project(cam, X):
    # ADBench: cam = [rotation(3), center(3), focal, principal point(2), radial(2)]
    Xcam = rodrigues_rotate_point(cam[0:3], X - cam[3:6])
    distorted = radial_distort(cam[9:11], Xcam[0:2] / Xcam[2])
    return distorted * cam[6] + cam[7:9]


def compute_reproj_err(cam, X, w, feat):
    return (project(cam, X) - feat) * w


def compute_zach_weight_error(w):
    return 1.0 - w * w


def ba_cam():
    cam = np.array([0.1, -0.2, 0.3, 0.05, -0.1, -4.0, 800.0, 320.0, 240.0, 1e-3, -1e-4])
    return cam


def test_adbench_bundle_adjustment_reprojection():
    X, feat = np.array([0.3, -0.4, 2.0]), np.array([300.0, 200.0])
    check_program(compute_reproj_err, [ba_cam(), X, 0.8, feat], wrt=(0, 1, 2), fd_rtol=1e-5, fd_atol=1e-5)
    check_program(compute_zach_weight_error, [0.8])


def test_adbench_bundle_adjustment_zero_rotation_branch():
    """rot == 0 exactly takes the else branch (the Taylor form)."""
    cam = ba_cam()
    cam[0:3] = 0.0
    X, feat = np.array([0.3, -0.4, 2.0]), np.array([300.0, 200.0])
    f = sg.differentiate(compute_reproj_err, wrt=(0, 1), target="cpu")
    np.testing.assert_allclose(f(cam, X, 0.8, feat), compute_reproj_err(cam, X, 0.8, feat), rtol=1e-12)
    ref = sg.differentiate(compute_reproj_err, wrt=(0, 1), target="python").grad(cam, X, 0.8, feat)
    got = f.grad(cam, X, 0.8, feat)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    assert np.all(np.isfinite(got[0]))


def test_adbench_bundle_adjustment_jacobian():
    X, feat = np.array([0.3, -0.4, 2.0]), np.array([300.0, 200.0])
    for target in ("cpu", "python"):
        jac = sg.jacobian(compute_reproj_err, wrt=(0, 1), target=target)(ba_cam(), X, 0.8, feat)
        assert jac[0].shape == (2, 11) and jac[1].shape == (2, 3)
        eps = 1e-6
        for k in range(11):
            e = np.zeros(11)
            e[k] = eps
            col = (compute_reproj_err(ba_cam() + e, X, 0.8, feat) - compute_reproj_err(ba_cam() - e, X, 0.8, feat)) / (2 * eps)
            np.testing.assert_allclose(jac[0][:, k], col, rtol=1e-5, atol=1e-4)


def ba_objective(cams, X, w, obs, feats):
    n = obs.shape[0]
    reproj_err = np.empty((n, 2))
    for i in range(n):
        cam_idx, pt_idx = obs[i, 0], obs[i, 1]
        reproj_err[i] = compute_reproj_err(cams[cam_idx], X[pt_idx], w[i], feats[i])
    w_err = compute_zach_weight_error(w)
    return reproj_err, w_err

def test_adbench_bundle_adjustment_objective_over_observations():
    """ADBench's ba objective: np.empty filled row by row in a loop over observations whose
    camera and point are gathered through the int array obs; one camera with an exactly zero
    rotation takes rodrigues' other branch inside the loop."""
    rng = np.random.default_rng(3)
    cams = np.tile(ba_cam(), (2, 1))
    cams[1, :3] = 0.0
    cams[:, 3:6] += rng.normal(size=(2, 3)) * 0.01
    X = rng.normal(size=(3, 3)) * 0.3 + [0, 0, 2.0]
    obs = np.array([[0, 0], [0, 1], [1, 2], [1, 0], [0, 2], [1, 1]])
    w = rng.uniform(0.5, 1.0, 6)
    feats = rng.normal(size=(6, 2)) * 50 + [320, 240]
    check_program(ba_objective, [cams, X, w, obs, feats], wrt=(0, 1, 2), fd_rtol=1e-5, fd_atol=1e-4)


def angle_axis_to_rotation_matrix(angle_axis):
    n = np.sqrt(np.sum(angle_axis ** 2))
    if n < 0.0001:
        return np.identity(3)
    x, y, z = angle_axis / n
    s, c = np.sin(n), np.cos(n)
    return np.array([
        [x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s],
        [x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s],
        [x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c],
    ])


def hand_pose_points(pose, points):
    R = angle_axis_to_rotation_matrix(pose[0:3])
    return points @ R.T + pose[3:6]


def test_adbench_hand_angle_axis():
    pts = RNG.normal(size=(5, 3))
    check_program(hand_pose_points, [np.array([0.3, -0.2, 0.5, 0.1, 0.2, 0.3]), pts], wrt=(0, 1))


def test_adbench_hand_angle_axis_small_angle():
    pts = RNG.normal(size=(5, 3))
    pose = np.array([1e-6, 0.0, 0.0, 0.1, 0.2, 0.3])
    check_program(hand_pose_points, [pose, pts], wrt=(0, 1))


def apply_global_transform(pose_params, positions):
    R = angle_axis_to_rotation_matrix(pose_params[0])
    s = pose_params[1]
    R *= s[np.newaxis, :]
    t = pose_params[2]
    return (R @ positions.T).T + t

def relatives_to_absolutes(relatives, parents):
    absolutes = []
    for i in range(len(relatives)):
        if parents[i] == -1:
            absolutes.append(relatives[i])
        else:
            absolutes.append(absolutes[parents[i]] @ relatives[i])
    return np.array(absolutes)

def euler_angles_to_rotation_matrix(xzy):
    tx, ty, tz = xzy[0], xzy[2], xzy[1]
    Rx = np.array([[1, 0, 0], [0, np.cos(tx), -np.sin(tx)], [0, np.sin(tx), np.cos(tx)]])
    Ry = np.array([[np.cos(ty), 0, np.sin(ty)], [0, 1, 0], [-np.sin(ty), 0, np.cos(ty)]])
    Rz = np.array([[np.cos(tz), -np.sin(tz), 0], [np.sin(tz), np.cos(tz), 0], [0, 0, 1]])
    return Rz @ Ry @ Rx

def get_posed_relatives(pose_params, base_relatives):
    def inner(rot_param, base_relative):
        M = np.eye(4)
        M[:3, :3] = euler_angles_to_rotation_matrix(rot_param)
        return base_relative @ M
    offset = 3
    return np.array([inner(pose_params[i + offset], base_relatives[i]) for i in range(base_relatives.shape[0])])

def get_skinned_vertex_positions(pose_params, base_relatives, parents, inverse_base_absolutes,
                                 base_positions, weights, mirror_factor):
    relatives = get_posed_relatives(pose_params, base_relatives)
    absolutes = relatives_to_absolutes(relatives, parents)
    transforms = np.matmul(absolutes, inverse_base_absolutes)
    n = base_positions.shape[0]
    base_h = np.concatenate([base_positions, np.ones((n, 1))], axis=1)
    positions = np.einsum('kij,nj->nki', transforms, base_h)
    positions = np.sum(positions * weights[:, :, None], axis=1)[:, :3]
    positions[:, 0] *= mirror_factor
    positions = apply_global_transform(pose_params, positions)
    return positions

def hand_objective(params, base_relatives, parents, inverse_base_absolutes, base_positions,
                   weights, mirror_factor, points, correspondences):
    pose = params.reshape(-1, 3)
    vertex_positions = get_skinned_vertex_positions(pose, base_relatives, parents, inverse_base_absolutes,
                                                    base_positions, weights, mirror_factor)
    return points - vertex_positions[correspondences]

def hand_args(parents=(-1, 0, 1, 1)):
    rng = np.random.default_rng(2)
    bones = len(parents)
    base_rel = np.tile(np.eye(4), (bones, 1, 1))
    base_rel[:, :3, 3] = rng.normal(size=(bones, 3))
    inv_abs = np.tile(np.eye(4), (bones, 1, 1))
    inv_abs[:, :3, 3] = rng.normal(size=(bones, 3)) * 0.1
    base_pos = rng.normal(size=(6, 3))
    weights = rng.random((6, bones))
    weights /= weights.sum(1, keepdims=True)
    params = rng.normal(size=(3 + bones) * 3) * 0.3
    params[3:6] = [1.0, 1.1, 0.9]   # the global scale
    return [params, base_rel, np.array(parents), inv_abs, base_pos, weights, -1.0,
            rng.normal(size=(5, 3)), np.array([0, 2, 3, 5, 1])]


def test_adbench_hand_objective_with_the_parents_array():
    """ADBench's hand tracking objective as its NumPy reference reads: the kinematic chain
    appends each bone's absolute transform to a list and reads its parent's back through the
    int array ``parents`` (a traced index into a list: at i = 0 the list is empty, which only
    the side of ``if parents[i] == -1`` not taken would index)."""
    args = hand_args()
    check_program(hand_objective, args)
    for target in ("cpu", "python"):
        jac = sg.jacobian(hand_objective, target=target)(*args)
        assert jac.shape == (5, 3, args[0].size)
        np.testing.assert_allclose(jac.sum(axis=(0, 1)), sg.grad(hand_objective, target="python")(*args),
                                   rtol=1e-10, atol=1e-12)


def test_adbench_hand_objective_with_bad_parents_raises_as_numpy():
    """A root that is not -1 makes NumPy index the empty list; a parent out of range, the
    list past its end: IndexError from the call on every target, as NumPy."""
    for parents in ((0, 0, 1, 1), (-1, 0, 7, 1)):
        args = hand_args(parents)
        with pytest.raises(IndexError):
            hand_objective(*args)
        for target in ("cpu", "python"):
            with pytest.raises(IndexError):
                sg.differentiate(hand_objective, target=target)(*args)
            with pytest.raises(IndexError):
                sg.grad(hand_objective, target=target)(*args)


def test_a_traced_index_into_a_list_of_one_array():
    def pick(x, i):
        parts = [np.sin(x)]
        return np.sum(parts[i] * x)
    check_program(pick, [np.array([0.3, -0.7]), np.array(0)])
    check_program(pick, [np.array([0.3, -0.7]), np.array(-1)])
    for target in ("cpu", "python"):
        with pytest.raises(IndexError):
            sg.differentiate(pick, target=target)(np.array([0.3, -0.7]), np.array(1))
