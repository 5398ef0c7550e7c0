"""Adversarial examples with the fast gradient sign method (Goodfellow et al., 2015).

A small tanh network is trained on a synthetic two-class problem in 20 dimensions (one
robust feature, nineteen weak ones). FGSM moves
each input by ``eps * sign(d loss / d x)``: symgrad differentiates the loss with respect to the
*input* (``sg.grad(loss, wrt="x")``). Adversarial training then minimises the loss at the
perturbed inputs, with the perturbation computed inside the loss and put behind
``sg.stop_gradient``, so the weight gradient treats it as a constant (as in the paper, and as
TF code writes it with ``tf.stop_gradient``)::

    def adversarial_loss(W1, b1, w2, b2, x, y, eps):
        g = input_grad(W1, b1, w2, b2, x, y)                  # a gradient inside the loss
        x_adv = x + sg.stop_gradient(eps * np.sign(g))
        return loss(W1, b1, w2, b2, x_adv, y)

    python examples/fgsm.py [--steps 400] [--eps 0.5]
"""
import argparse

import numpy as np

import symgrad as sg

DIM = 20
EPS_TABLE = (0.1, 0.3, 0.5)


def make_data(n, seed):
    """Labels +-1. Feature 0 is robust (+-1 plus noise of sd 0.5); the other 19 are each only
    weakly correlated with the label (+-0.3 plus unit noise) but predictive together, and
    an L-infinity perturbation moves all of them at once (Tsipras et al., 2019)."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    x = 0.3 * y[:, None] + rng.normal(size=(n, DIM))
    x[:, 0] = y + 0.5 * rng.normal(size=n)
    return x, y


def init_params(hidden=16, seed=2):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(DIM, hidden)) / np.sqrt(DIM), np.zeros(hidden),
            rng.normal(size=hidden) / np.sqrt(hidden), np.array(0.0)]


def logits(W1, b1, w2, b2, x):
    return np.tanh(x @ W1 + b1) @ w2 + b2


def loss(W1, b1, w2, b2, x, y):
    """Mean logistic loss."""
    return np.mean(np.logaddexp(0.0, -y * logits(W1, b1, w2, b2, x)))


input_grad = sg.grad(loss, wrt="x")


def adversarial_loss(W1, b1, w2, b2, x, y, eps):
    """The loss at FGSM-perturbed inputs; the perturbation is a constant for the weights."""
    g = input_grad(W1, b1, w2, b2, x, y)
    x_adv = x + sg.stop_gradient(eps * np.sign(g))
    return loss(W1, b1, w2, b2, x_adv, y)


def fgsm(params, x, y, eps):
    return x + eps * np.sign(input_grad(*params, x, y))


def accuracy(params, x, y):
    return float(np.mean(np.sign(logits(*params, x)) == y))


def train(objective, extra, x, y, steps):
    params = init_params()
    opt = sg.optim.Adam(learning_rate=0.02)
    for _ in range(steps):
        opt.minimize(objective, params, x, y, *extra)
    return params


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--eps", type=float, default=0.5, help="training perturbation size")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    say = (lambda *a: None) if args.quiet else print

    x, y = make_data(1000, seed=0)
    x_test, y_test = make_data(2000, seed=1)
    standard = train(loss, (), x, y, args.steps)
    robust = train(adversarial_loss, (args.eps,), x, y, args.steps)

    # stop_gradient means: the weight gradient of the adversarial loss is the ordinary loss
    # gradient at the (fixed) adversarial inputs
    vg = sg.grad(adversarial_loss, wrt=(0, 1, 2, 3))(*robust, x, y, args.eps)
    fixed = sg.grad(loss, wrt=(0, 1, 2, 3))(*robust, fgsm(robust, x, y, args.eps), y)
    stop_check = max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(vg, fixed))
    say(f"max |grad of adversarial loss - grad of loss at fixed x_adv| = {stop_check:.1e}\n")

    results = {"stop_check": stop_check}
    say(f"{'test accuracy':<22}{'clean':>8}" + "".join(f"{'eps=' + str(e):>10}" for e in EPS_TABLE))
    for name, params in (("standard training", standard), ("adversarial training", robust)):
        accs = [accuracy(params, x_test, y_test)] + [
            accuracy(params, fgsm(params, x_test, y_test, e), y_test) for e in EPS_TABLE]
        results[name] = accs
        say(f"{name:<22}{accs[0]:>8.3f}" + "".join(f"{a:>10.3f}" for a in accs[1:]))
    return results


if __name__ == "__main__":
    main()
