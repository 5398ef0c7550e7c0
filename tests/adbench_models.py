"""ADBench's model pieces as its Python modules write them, for the tests that differentiate
them: the LSTM cell (``lstm_model``, with ``sigmoid``; ADBench's lstm objective) and GMM's
strictly lower-triangular factors assembled column by column from static slices
(``lower_triangles``; ADBench's gmm objective). One copy for the whole suite; benchmarks/ keep
the ones they measure (adbench_lstm.py, workloads.py), since the tests do not import
benchmarks/ (test_loops' check of benchmarks/adbench_lstm.py, which compares the two cells,
aside)."""
import numpy as np


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_model(weight, bias, hidden, cell, _input):
    # ADBench: gates = hcat(input, hidden) * weight .+ bias
    gates = np.concatenate((_input, hidden, _input, hidden)) * weight + bias
    hsize = hidden.shape[0]
    forget = sigmoid(gates[0:hsize])
    ingate = sigmoid(gates[hsize:2 * hsize])
    outgate = sigmoid(gates[2 * hsize:3 * hsize])
    change = np.tanh(gates[3 * hsize:])
    cell = cell * forget + ingate * change
    hidden = outgate * np.tanh(cell)
    return hidden, cell


def lower_triangles(icf, d):
    """(K, d, d) strictly lower-triangular factors from icf[:, d:], column by column."""
    k = icf.shape[0]
    cols = []
    start = d
    for i in range(d):
        count = d - i - 1
        cols.append(np.concatenate([np.zeros((k, i + 1)), icf[:, start:start + count]], axis=1))
        start += count
    return np.stack(cols, axis=2)


def gmm_adbench(alphas, means, icf, x):
    """ADBench GMM as its definition reads (benchmarks/compile_profile.gmm_adbench), its
    constants left out."""
    n, d = x.shape
    qdiags = np.exp(icf[:, :d])
    sum_qs = np.sum(icf[:, :d], axis=1)
    ls = lower_triangles(icf, d)
    xcentered = x[None, :, :] - means[:, None, :]
    lx = qdiags[:, None, :] * xcentered + xcentered @ np.transpose(ls, (0, 2, 1))
    sqsum = np.sum(lx * lx, axis=2)
    inner = (alphas + sum_qs)[:, None] - 0.5 * sqsum
    mx = np.max(inner, axis=0)
    slse = np.sum(np.log(np.sum(np.exp(inner - mx[None, :]), axis=0)) + mx)
    am = np.max(alphas)
    lse_alphas = np.log(np.sum(np.exp(alphas - am))) + am
    prior = np.sum(0.5 * (np.sum(qdiags * qdiags, axis=1) + np.sum(icf[:, d:] ** 2, axis=1)))
    return slse - n * lse_alphas + prior
