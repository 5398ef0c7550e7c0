"""Model code as users write it in NumPy: classification losses (softmax cross-entropy with
metrics returned beside it, one-hot by np.eye, take_along_axis, a multiclass SVM hinge with
its index write, focal loss), normalisation layers, attention (with a causal mask of -inf),
a 1-d convolution by a loop of window writes, an exponential moving average and Horner's
rule, each checked on target="cpu" and "python" against NumPy and central differences, and
through the CUDA emulation (tests/user_program_check.py)."""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from user_program_check import check_program  # noqa: E402

RNG = np.random.default_rng(4)
W = RNG.normal(size=(3, 4))
X = RNG.normal(size=(6, 3))
LABELS = RNG.integers(0, 4, 6)


def test_cross_entropy_with_accuracy_returned_beside_it():
    def with_metrics(W, X, labels):
        logits = X @ W
        logp = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
        loss = -np.mean(logp[np.arange(X.shape[0]), labels])
        acc = np.mean(np.argmax(logits, axis=1) == labels)
        return loss, {"acc": acc}
    check_program(with_metrics, [W, X, LABELS])


def test_one_hot_by_eye_and_by_comparison():
    def by_eye(W, X, labels):
        y = np.eye(W.shape[1])[labels]
        p = np.exp(X @ W)
        p = p / p.sum(axis=1, keepdims=True)
        return -np.sum(y * np.log(p))

    def by_comparison(W, X, labels):
        y = (labels[:, None] == np.arange(W.shape[1])).astype(float)
        return np.sum(y * (X @ W) ** 2)
    check_program(by_eye, [W, X, LABELS])
    check_program(by_comparison, [W, X, LABELS])


def test_take_along_axis_and_argmax_pick():
    def nll(W, X, labels):
        return -np.sum(np.take_along_axis(X @ W, labels[:, None], axis=1))

    def best(W, X):
        z = X @ W
        return np.sum(z[np.arange(X.shape[0]), np.argmax(z, axis=1)])
    check_program(nll, [W, X, LABELS])
    check_program(best, [W, X])


def test_multiclass_svm_hinge_with_index_write():
    def hinge(W, X, labels):
        s = X @ W
        correct = s[np.arange(len(labels)), labels][:, None]
        margins = np.maximum(0, s - correct + 1.0)
        margins[np.arange(len(labels)), labels] = 0
        return np.sum(margins) / len(labels)
    check_program(hinge, [W, X, LABELS])


def test_focal_loss():
    def focal(W, X, labels, gamma=2.0):
        p = 1 / (1 + np.exp(-(X @ W)))
        y = np.eye(4)[labels]
        pt = np.where(y == 1, p, 1 - p)
        return -np.sum((1 - pt) ** gamma * np.log(np.clip(pt, 1e-7, 1 - 1e-7)))
    check_program(focal, [W, X, LABELS, 2.0], wrt=(0, 3))


def test_batch_and_layer_norm():
    def batchnorm(x, gamma, beta, eps=1e-5):
        mu = x.mean(axis=0)
        var = x.var(axis=0)
        xhat = (x - mu) / np.sqrt(var + eps)
        return np.sum((gamma * xhat + beta) ** 3)

    def layernorm(x, g):
        mu = np.mean(x, axis=-1, keepdims=True)
        sd = np.std(x, axis=-1, keepdims=True)
        return np.sum(np.tanh(g * (x - mu) / (sd + 1e-6)))
    check_program(batchnorm, [X, RNG.normal(size=3), RNG.normal(size=3)], wrt=(0, 1, 2))
    check_program(layernorm, [X, RNG.normal(size=3)], wrt=(0, 1))


def test_attention_and_causal_mask():
    def attention(q, k, v):
        s = q @ k.T / math.sqrt(q.shape[-1])
        s = s - s.max(axis=-1, keepdims=True)
        a = np.exp(s)
        a /= a.sum(axis=-1, keepdims=True)
        return np.sum((a @ v) ** 2)

    def causal(q, k):
        s = q @ k.T
        mask = np.triu(np.ones((q.shape[0], k.shape[0]), dtype=bool), k=1)
        s = np.where(mask, -np.inf, s)
        s = s - s.max(axis=-1, keepdims=True)
        a = np.exp(s)
        return np.sum(a / a.sum(-1, keepdims=True) * s.clip(-5, 5))
    check_program(attention, [RNG.normal(size=(4, 3)), RNG.normal(size=(5, 3)), RNG.normal(size=(5, 2))],
                  wrt=(0, 1, 2))
    check_program(causal, [RNG.normal(size=(4, 3)), RNG.normal(size=(4, 3))], wrt=(0, 1))


def test_conv1d_by_window_writes_and_by_np_convolve():
    from test_window_slices import conv1d   # (the window loop as users write it)

    def convolve(x, w):
        return np.sum(np.convolve(x, w[::-1], mode="valid") ** 2)
    x, w = RNG.normal(size=9), RNG.normal(size=3)
    check_program(conv1d, [x, w], wrt=(0, 1))
    check_program(convolve, [x, w], wrt=(0, 1))


def test_kl_divergence_ema_and_horner():
    def kl(logits_p, logits_q):
        p = np.exp(logits_p) / np.sum(np.exp(logits_p))
        q = np.exp(logits_q) / np.sum(np.exp(logits_q))
        return np.sum(p * (np.log(p) - np.log(q)))

    def ema(x, alpha=0.3):
        s = x[0]
        out = [s]
        for v in x[1:]:
            s = alpha * v + (1 - alpha) * s
            out.append(s)
        return np.sum(np.array(out) ** 2)

    def horner(c, x):
        y = np.zeros_like(x)
        for ci in c[::-1]:
            y = y * x + ci
        return np.sum(y)
    check_program(kl, [RNG.normal(size=5), RNG.normal(size=5)], wrt=(0, 1))
    check_program(ema, [RNG.normal(size=8), 0.3], wrt=(0, 1))
    check_program(horner, [RNG.normal(size=6), RNG.normal(size=4)], wrt=(0, 1))
