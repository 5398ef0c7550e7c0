"""Differentially private SGD (DP-SGD) for logistic regression: per-example gradients,
per-example clipping, Gaussian noise and the update, fused into one compiled function.

DP-SGD (Abadi et al., 2016) bounds each example's influence on a step: every example's
gradient is clipped to L2 norm ``clip`` before the batch is summed, and Gaussian noise of
standard deviation ``noise_multiplier * clip`` is added to the sum. The per-example gradients
are ``sg.vmap(sg.grad(loss), in_axes=(None, 0, 0))``: the gradient of one example's loss,
batched over the examples (a batch of rows times the weights: one matrix product, no loop);
``sg.clip_by_norm(G, clip, axes=[1])`` clips each row. The generated step is printed.

    python examples/per_example_clipping.py [--steps 300] [--batch 256]
"""
import argparse

import numpy as np

import symgrad as sg


def make_data(n=4000, d=10, seed=0):
    """Two classes separated by a random hyperplane, 5% of the labels flipped; the features
    carry a constant 1 column (its weight is the bias)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    true_w = rng.normal(size=d)
    y = np.where(x @ true_w + 0.5 > 0, 1.0, -1.0)
    flip = rng.random(n) < 0.05
    y[flip] = -y[flip]
    return np.hstack([x, np.ones((n, 1))]), y


def example_loss(theta, x, y):
    """One example's logistic loss log(1 + exp(-y x.theta))."""
    return np.logaddexp(0.0, -y * (x @ theta))


per_example_gradients = sg.vmap(sg.grad(example_loss), in_axes=(None, 0, 0))


@sg.differentiate
def dp_sgd_step(theta, x, y, noise, learning_rate, clip, noise_multiplier):
    """One DP-SGD step on a batch: the new theta (``noise`` is a standard normal draw)."""
    clipped = sg.clip_by_norm(per_example_gradients(theta, x, y), clip, axes=[1])
    noisy_sum = np.sum(clipped, axis=0) + noise_multiplier * clip * noise
    return theta - learning_rate * noisy_sum / x.shape[0]


def mean_loss(theta, x, y):
    return float(np.mean(np.logaddexp(0.0, -y * (x @ theta))))


def accuracy(theta, x, y):
    return float(np.mean(np.sign(x @ theta) == y))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--noise", type=float, default=1.0, help="noise multiplier sigma")
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    say = (lambda *a: None) if args.quiet else print

    x, y = make_data()
    rng = np.random.default_rng(1)
    theta = np.zeros(x.shape[1])

    # the per-example gradients are the gradients of each example, computed as one batch
    probe = rng.normal(size=x.shape[1])
    G = per_example_gradients(probe, x[:32], y[:32])
    one_by_one = np.stack([sg.grad(example_loss)(probe, xi, yi) for xi, yi in zip(x[:32], y[:32])])
    per_example_error = float(np.max(np.abs(G - one_by_one)))
    clipped_norms = np.linalg.norm(sg.clip_by_norm(G, args.clip, axes=[1]), axis=1)
    say(f"per-example gradients vs a loop of sg.grad: max difference {per_example_error:.1e}")
    say("\nThe generated DP-SGD step (per-example gradients, clipping, noise, update):\n")
    say(dp_sgd_step.source_for(theta, x[:args.batch], y[:args.batch], theta, args.lr, args.clip,
                               args.noise))

    losses = [mean_loss(theta, x, y)]
    for step in range(args.steps):
        batch = rng.choice(len(x), size=args.batch, replace=False)
        noise = rng.normal(size=theta.shape)
        theta = dp_sgd_step(theta, x[batch], y[batch], noise, args.lr, args.clip, args.noise)
        losses.append(mean_loss(theta, x, y))
        if step % max(1, args.steps // 6) == 0 or step == args.steps - 1:
            say(f"step {step:4d}  loss {losses[-1]:.4f}  accuracy {accuracy(theta, x, y):.3f}")
    say(f"\nfinal loss {losses[-1]:.4f}, training accuracy {accuracy(theta, x, y):.3f} "
        f"(clip {args.clip}, noise multiplier {args.noise}, batch {args.batch})")
    return {"losses": losses, "accuracy": accuracy(theta, x, y),
            "per_example_error": per_example_error, "max_clipped_norm": float(clipped_norms.max())}


if __name__ == "__main__":
    main()
