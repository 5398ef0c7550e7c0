"""In-place writes of textbook code: ``xs[t][k] = v`` into an array a list or dict holds
(Karpathy's min-char-rnn builds its one-hot inputs so: ``xs[t] = np.zeros((vocab, 1));
xs[t][inputs[t]] = 1``), ``num[range(n), range(n)] = 0`` (van der Maaten's tsne.py) and
``np.fill_diagonal``: NumPy's values and gradients where the write is seen through that array
only, and a clear refusal where NumPy's write would also change another name, another slot or
the caller's array."""
import re

import numpy as np
import pytest

import symgrad as sg

TARGETS = ["python", "cpu"]
VOCAB, HIDDEN, SEQ = 5, 4, 6


def lossFun(Wxh, Whh, Why, bh, by, inputs, targets, hprev):
    """min-char-rnn's forward pass, as written there (dicts keyed by t, hs[-1] the state)."""
    xs, hs, ys, ps = {}, {}, {}, {}
    hs[-1] = np.copy(hprev)
    loss = 0
    for t in range(len(inputs)):
        xs[t] = np.zeros((VOCAB, 1))
        xs[t][inputs[t]] = 1
        hs[t] = np.tanh(np.dot(Wxh, xs[t]) + np.dot(Whh, hs[t - 1]) + bh)
        ys[t] = np.dot(Why, hs[t]) + by
        ps[t] = np.exp(ys[t]) / np.sum(np.exp(ys[t]))
        loss += -np.log(ps[t][targets[t], 0])
    return loss


def _model(seed=0):
    rng = np.random.default_rng(seed)
    params = [rng.normal(size=s) * 0.3 for s in
              ((HIDDEN, VOCAB), (HIDDEN, HIDDEN), (VOCAB, HIDDEN), (HIDDEN, 1), (VOCAB, 1))]
    inputs = [int(i) for i in rng.integers(0, VOCAB, SEQ)]
    targets = [int(i) for i in rng.integers(0, VOCAB, SEQ)]
    return params, inputs, targets, rng.normal(size=(HIDDEN, 1)) * 0.1


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("as_arrays", [False, True])
def test_min_char_rnn_loss_and_gradient(target, as_arrays):
    params, inputs, targets, hprev = _model()
    if as_arrays:               # the indices as integer arrays: traced data, not constants
        inputs, targets = np.array(inputs), np.array(targets)
    f = sg.differentiate(lossFun, wrt=(0, 1, 2, 3, 4), target=target)
    value, grads = f.value_and_grad(*params, inputs, targets, hprev)
    np.testing.assert_allclose(value, lossFun(*params, inputs, targets, hprev), rtol=1e-13)
    for k, g in enumerate(grads):            # central differences, every entry
        fd = np.zeros_like(g)
        for idx in np.ndindex(g.shape):
            plus = [p.copy() for p in params]
            minus = [p.copy() for p in params]
            plus[k][idx] += 1e-6
            minus[k][idx] -= 1e-6
            fd[idx] = (lossFun(*plus, inputs, targets, hprev)
                       - lossFun(*minus, inputs, targets, hprev)) / 2e-6
        np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-7)
    # the gradient clipping min-char-rnn then does, on what symgrad returned
    clipped = [np.clip(g, -5, 5) for g in grads]
    assert all(np.all(np.abs(c) <= 5) for c in clipped)


@pytest.mark.parametrize("target", TARGETS)
def test_lists_of_traced_arrays_and_constants(target):
    def f(x):
        xs = [x * 2.0, np.sin(x), np.zeros(3)]
        xs[0][1] = x[2] ** 2
        xs[2][0] = np.sum(x)
        xs[1][-1] += 1.0
        return xs[0] @ xs[1] + xs[2][0]
    x = np.array([0.3, -1.2, 2.0])
    np.testing.assert_allclose(sg.differentiate(f, target=target)(x), f(x.copy()), rtol=1e-14)
    assert sg.check_grad(f, x) < 1e-7


def test_writes_numpy_would_show_elsewhere_are_refused():
    x = np.array([1.0, 2.0, 3.0])

    def shared_name(x):
        a = x * 2.0
        xs = [a]
        xs[0][1] = 5.0
        return np.sum(a)         # NumPy: a changed too

    def shared_slot(x):
        xs = [x * 2.0] * 2
        xs[0][1] = 5.0
        return np.sum(xs[1])     # NumPy: the same array

    def argument(x):
        xs = {0: x}
        xs[0][1] = 5.0           # NumPy: the caller's array
        return np.sum(xs[0])

    def copied_list(x):
        xs = [x * 2.0]
        ys = list(xs)
        xs[0][1] = 5.0
        return np.sum(ys[0])

    def equal_elements(x):       # distinct arrays in NumPy, one node here: refused, with a way out
        xs = [x * 2.0 for _ in range(2)]
        xs[0][1] = 5.0
        return np.sum(xs[1])

    for fn, match in ((shared_name, "may share memory with 'a'"),
                      (shared_slot, "an item repeated by a list"),
                      (equal_elements, r"another element of 'xs' holds too \(or an equal one"),
                      (argument, "argument 'x'"), (copied_list, "may share memory with 'ys'")):
        with pytest.raises(sg.UnsupportedSyntaxError, match=match):
            sg.differentiate(fn)(x)

    def aliased_list(x):         # another name for the same list sees the write, as in NumPy
        xs = [x * 2.0]
        ys = xs
        xs[0][1] = 5.0
        return np.sum(ys[0])
    assert sg.differentiate(aliased_list)(x) == aliased_list(x.copy())


def test_other_chained_targets_still_name_the_construct():
    def f(x):
        x.T[0] = 1.0
        return x
    with pytest.raises(sg.UnsupportedSyntaxError, match="item assignment into an expression"):
        sg.differentiate(f)(np.ones((2, 2)))


def tsne_kl(Y, P):
    """The KL cost of van der Maaten's reference tsne.py, as written there."""
    sum_Y = np.sum(np.square(Y), 1)
    num = -2. * np.dot(Y, Y.T)
    num = 1. / (1. + np.add(np.add(num, sum_Y).T, sum_Y))
    num[range(Y.shape[0]), range(Y.shape[0])] = 0.
    Q = num / np.sum(num)
    Q = np.maximum(Q, 1e-12)
    return np.sum(P * np.log(P / Q))


def filled(Y, v):
    D = Y @ Y.T
    np.fill_diagonal(D, 0.0)                  # a scalar
    T = np.zeros((5, 3))
    np.fill_diagonal(T, v, wrap=True)         # a tall array, wrapping; v traced
    E = np.exp(Y[:3, :3])
    np.fill_diagonal(E, v[:2])                # shorter than the diagonal: repeated
    C = np.ones((3, 3, 3))
    np.fill_diagonal(C, v[0])                 # 3-d: the main diagonal a[i, i, i]
    for i in range(2):                        # in a loop: the array is carried
        np.fill_diagonal(E, E[0, i] * 2)
    return np.sum(D ** 2) + np.sum(T * Y) + np.sum(E) + np.sum(C * C)


@pytest.mark.parametrize("target", TARGETS)
def test_tsne_cost_with_range_indices(target):
    rng = np.random.default_rng(4)
    Y = rng.normal(size=(7, 2))
    P = rng.uniform(0.1, 1.0, size=(7, 7))
    P = (P + P.T) / np.sum(P + P.T)
    np.testing.assert_allclose(sg.differentiate(tsne_kl, target=target)(Y, P), tsne_kl(Y, P),
                               rtol=1e-13)
    assert sg.check_grad(tsne_kl, Y, P) < 1e-6
    rows = lambda Y: np.sum(Y[range(1, 4)] ** 3) + np.sum(Y[range(0, 6, 2), 1])  # noqa: E731
    np.testing.assert_allclose(sg.differentiate(rows, target=target)(Y), rows(Y), rtol=1e-14)


@pytest.mark.parametrize("target", TARGETS)
def test_fill_diagonal_as_numpy(target):
    rng = np.random.default_rng(5)
    Y, v = rng.normal(size=(5, 3)), np.array([1.5, -2.0, 0.7])
    np.testing.assert_allclose(sg.differentiate(filled, target=target)(Y, v), filled(Y.copy(), v),
                               rtol=1e-14)
    assert sg.check_grad(filled, Y, v, wrt=(0, 1)) < 1e-6


def test_fill_diagonal_refusals_and_numpy_errors():
    def into_argument(x):
        np.fill_diagonal(x, 0.0)
        return np.sum(x)
    with pytest.raises(sg.UnsupportedSyntaxError, match="argument array 'x'"):
        sg.differentiate(into_argument)(np.ones((3, 3)))

    def one_d(x):
        y = x * 2
        np.fill_diagonal(y, 0.0)
        return np.sum(y)
    with pytest.raises(ValueError, match="at least 2-d"):
        sg.differentiate(one_d)(np.ones(3))

    def not_cube(x):
        y = np.ones((2, 3, 2)) * x
        np.fill_diagonal(y, 0.0)
        return np.sum(y)
    with pytest.raises(ValueError, match="equal length"):
        sg.differentiate(not_cube)(1.0)


def conv_rows(img, k):
    out = np.zeros((img.shape[0] - 2, img.shape[1] - 2))
    for i in range(img.shape[0] - 2):
        for j in range(img.shape[1] - 2):
            out[i][j] = np.sum(img[i:i + 3, j:j + 3] * k)     # C-style: through the row's view
    return np.sum(out ** 2)


def conv_pairs(img, k):
    out = np.zeros((img.shape[0] - 2, img.shape[1] - 2))
    for i in range(img.shape[0] - 2):
        for j in range(img.shape[1] - 2):
            out[i, j] = np.sum(img[i:i + 3, j:j + 3] * k)
    return np.sum(out ** 2)


@pytest.mark.parametrize("target", TARGETS)
def test_a_row_views_item_is_the_arrays_item(target):
    """A[i][j] = v (i an integer, static or a loop index) writes A[i, j]: the same graph as
    the tuple index (so the nested loops' write is the same stacked output); a slice's row
    (A[0:2][1] = v) is not taken; the caller's array is never written."""
    rng = np.random.default_rng(6)
    img, k = rng.normal(size=(12, 10)), rng.normal(size=(3, 3))
    f = sg.differentiate(conv_rows, wrt=(0, 1), target=target)
    np.testing.assert_allclose(f(img, k), conv_rows(img, k), rtol=1e-13)
    assert sg.check_grad(conv_rows, img, k, wrt=(0, 1)) < 1e-7
    def listing(fn):
        text = sg.differentiate(fn, wrt=(0, 1)).grad.ir_for(img, k)
        return re.sub(r"line \d+", "line", text.replace(fn.__name__, "conv"))
    assert listing(conv_rows) == listing(conv_pairs)

    def static(x):
        A = np.zeros((3, 4))
        A[1][2] = x[0]
        A[-1][1:3] = x[1:3]
        A[0][[0, 3]] = x[3]
        return np.sum(A * np.arange(12.0).reshape(3, 4))
    x = rng.normal(size=4)
    np.testing.assert_allclose(sg.differentiate(static, target=target)(x), static(x), rtol=1e-14)

    def argument(x):
        x[0][1] = 2.0
        return np.sum(x)
    with pytest.raises(sg.UnsupportedSyntaxError, match="argument array 'x'"):
        sg.differentiate(argument, target=target)(np.ones((2, 2)))

    def slice_row(x):
        A = np.zeros((3, 3))
        A[0:2][1] = x
        return np.sum(A)
    with pytest.raises(sg.UnsupportedSyntaxError, match="item assignment into an expression"):
        sg.differentiate(slice_row, target=target)(np.ones(3))
