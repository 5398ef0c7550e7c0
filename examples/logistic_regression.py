"""Logistic regression on a synthetic dataset, trained with ``sg.optim.SGD`` (Nesterov momentum).

The loss is ordinary NumPy code; symgrad differentiates it with respect to the weights and
the bias (``minimize`` gets the value and both gradients from one compiled call), and the
generated gradient is printed so you can read what runs.

    python examples/logistic_regression.py [--steps 300]
"""
import argparse

import numpy as np

import symgrad as sg


def make_data(n=600, d=5, seed=0):
    """Two classes separated by a random hyperplane, with 5% of the labels flipped."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    true_w, true_b = rng.normal(size=d), 0.5
    y = np.where(x @ true_w + true_b > 0, 1.0, -1.0)
    flip = rng.random(n) < 0.05
    y[flip] = -y[flip]
    return x, y, true_w, true_b


def loss(w, b, x, y, l2):
    """Mean logistic loss log(1 + exp(-y (x.w + b))) plus an L2 penalty on w."""
    margin = y * (x @ w + b)
    return np.mean(np.logaddexp(0.0, -margin)) + 0.5 * l2 * np.sum(w * w)


def accuracy(w, b, x, y):
    return float(np.mean(np.sign(x @ w + b) == y))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    say = (lambda *a: None) if args.quiet else print

    x, y, true_w, true_b = make_data()
    w, b = np.zeros(x.shape[1]), np.array(0.0)     # variables: arrays updated in place
    l2 = 1e-3
    err = sg.check_grad(sg.differentiate(loss, wrt=(0, 1)), w + 0.1, 0.1, x, y, l2, wrt=(0, 1))
    say(f"gradient check (relative error vs central differences): {err:.1e}")
    say("\nThe gradient symgrad generated for (w, b):\n")
    say(sg.grad(loss, wrt=(0, 1)).source_for(w, b, x, y, l2))

    opt = sg.optim.SGD(learning_rate=0.5, momentum=0.9, nesterov=True)
    history = []
    for step in range(args.steps):
        history.append(opt.minimize(loss, [w, b], x, y, l2))
        if step % max(1, args.steps // 6) == 0 or step == args.steps - 1:
            say(f"step {step:4d}  loss {history[-1]:.5f}  accuracy {accuracy(w, b, x, y):.3f}")

    cosine = float(w @ true_w / np.linalg.norm(w) / np.linalg.norm(true_w))
    say(f"\nfinal loss {history[-1]:.5f}, training accuracy {accuracy(w, b, x, y):.3f}, "
        f"cos(angle to the true weights) {cosine:.4f}")
    return {"losses": history, "accuracy": accuracy(w, b, x, y), "cosine": cosine,
            "grad_error": err}


if __name__ == "__main__":
    main()
