"""A small tanh MLP fitted to a synthetic 2-D regression problem with Adam and
``sg.clip_by_global_norm``, TensorFlow style, with a text progress bar.

The training step is the TF idiom, ported by renaming ``tf`` to ``sg``::

    grads_and_vars = opt.compute_gradients(loss, params, x, y)     # one compiled call
    grads, norm = sg.clip_by_global_norm([g for g, _ in grads_and_vars], 0.1)
    opt.apply_gradients(zip(grads, params))                       # fused, in place

(``sg.optim.Adam(global_clipnorm=0.1)`` does the same clipping inside the update kernels.)

    python examples/mlp_adam.py [--steps 600] [--hidden 32]
"""
import argparse
import sys
import time

import numpy as np

import symgrad as sg


def make_data(n=256, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, size=(n, 2))
    y = np.sin(3.0 * x[:, 0]) * np.cos(2.0 * x[:, 1]) + 0.05 * rng.normal(size=n)
    return x, y


def init_params(hidden, seed=1):
    """Glorot-uniform weights, zero biases: [W1, b1, W2, b2, w3, b3]."""
    rng = np.random.default_rng(seed)

    def glorot(fan_in, fan_out, shape):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, size=shape)
    return [glorot(2, hidden, (2, hidden)), np.zeros(hidden),
            glorot(hidden, hidden, (hidden, hidden)), np.zeros(hidden),
            glorot(hidden, 1, (hidden,)), np.array(0.0)]


def predict(W1, b1, W2, b2, w3, b3, x):
    h = np.tanh(x @ W1 + b1)
    h = np.tanh(h @ W2 + b2)
    return h @ w3 + b3


def loss(W1, b1, W2, b2, w3, b3, x, y):
    """Mean squared error of the MLP on (x, y)."""
    r = predict(W1, b1, W2, b2, w3, b3, x) - y
    return np.mean(r * r)


def progress(step, total, value, norm, start, width=28, stream=sys.stdout):
    done = width * step // total
    bar = "#" * done + "." * (width - done)
    stream.write(f"\r[{bar}] {step:4d}/{total}  loss {value:.5f}  |grad| {norm:7.3f}  "
                 f"{time.perf_counter() - start:5.1f} s")
    stream.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--clip", type=float, default=0.1)
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    x, y = make_data()
    params = init_params(args.hidden)
    opt = sg.optim.Adam(learning_rate=0.01)
    losses, norms, start = [], [], time.perf_counter()
    for step in range(1, args.steps + 1):
        grads_and_vars = opt.compute_gradients(loss, params, x, y)
        grads, norm = sg.clip_by_global_norm([g for g, _ in grads_and_vars], args.clip)
        opt.apply_gradients(zip(grads, params))
        losses.append(opt.last_loss)
        norms.append(float(norm))
        if not args.quiet and (step % 10 == 0 or step == args.steps):
            progress(step, args.steps, losses[-1], norms[-1], start)
    elapsed = time.perf_counter() - start
    final = loss(*params, x, y)
    if not args.quiet:
        print(f"\nfinal training MSE {final:.5f} (variance of y {np.var(y):.3f}); "
              f"{args.steps} steps in {elapsed:.2f} s ({1e3 * elapsed / args.steps:.2f} ms/step); "
              f"clipped on {sum(n > args.clip for n in norms)} of {args.steps} steps")
    return {"losses": losses, "final": float(final), "norms": norms, "var_y": float(np.var(y))}


if __name__ == "__main__":
    main()
