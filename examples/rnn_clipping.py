"""A character-level tanh RNN trained with Adam, its exploding gradients clipped by
``sg.clip_by_global_norm``: the seed's question ("how do I clip the exploding gradients of an
RNN?") answered with a plain Python loop over time steps.

The loss is ordinary NumPy: ``for x, y in zip(xs, ys)`` over the one-hot characters of a
window of text. symgrad traces the loop once into a loop region and differentiates it (a
forward loop that stores the hidden states, a reversed loop that carries their cotangents:
see ``--show-source``). The training step is the TensorFlow idiom, ported by renaming ``tf``
to ``sg``::

    grads_and_vars = opt.compute_gradients(loss, params, xs, ys)   # one compiled call
    grads, norm = sg.clip_by_global_norm([g for g, _ in grads_and_vars], clip)
    opt.apply_gradients(zip(grads, params))

The recurrent weights start with a spectral radius above 1, the regime where gradients
explode: the global norm printed before clipping is far above the clip threshold in the first
steps, and the norm after clipping never exceeds it.

    python examples/rnn_clipping.py [--steps 300] [--hidden 32] [--seq 16] [--show-source]
"""
import argparse
import sys
import time

import numpy as np

import symgrad as sg

TEXT = ("the quick brown fox jumps over the lazy dog. "
        "a lazy dog sleeps in the sun while the quick fox runs. "
        "the fox and the dog are friends; the sun shines on them both. ") * 4


def vocabulary(text):
    chars = sorted(set(text))
    return chars, {c: i for i, c in enumerate(chars)}


def one_hot(indices, size):
    out = np.zeros((len(indices), size))
    out[np.arange(len(indices)), indices] = 1.0
    return out


def init_params(vocab, hidden, radius=1.6, seed=0):
    """[Wxh, Whh, bh, Why, by]; Whh is a random orthogonal matrix times ``radius``."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((hidden, hidden)))
    return [rng.standard_normal((hidden, vocab)) * 0.3, radius * q, np.zeros(hidden),
            rng.standard_normal((vocab, hidden)) * 0.3, np.zeros(vocab)]


def loss(Wxh, Whh, bh, Why, by, xs, ys):
    """Mean cross-entropy of predicting each next character (ys) from the ones before."""
    h = np.zeros(Whh.shape[0])
    total = 0.0
    for x, y in zip(xs, ys):
        h = np.tanh(Wxh @ x + Whh @ h + bh)
        logits = Why @ h + by
        m = np.max(logits)
        log_probs = logits - m - np.log(np.sum(np.exp(logits - m)))
        total = total - np.sum(y * log_probs)
    return total / xs.shape[0]


def sample(params, chars, index, start, length, seed=0):
    """Greedy-ish sampling (temperature 0.5) with the plain NumPy forward pass."""
    Wxh, Whh, bh, Why, by = params
    rng = np.random.default_rng(seed)
    h, c, out = np.zeros(Whh.shape[0]), index[start], [start]
    for _ in range(length):
        h = np.tanh(Wxh[:, c] + Whh @ h + bh)
        logits = (Why @ h + by) / 0.5
        p = np.exp(logits - logits.max())
        c = int(rng.choice(len(chars), p=p / p.sum()))
        out.append(chars[c])
    return "".join(out)


def progress(step, total, value, before, after, start, width=28, stream=sys.stdout):
    done = width * step // total
    bar = "#" * done + "." * (width - done)
    stream.write(f"\r[{bar}] {step:4d}/{total}  loss {value:.3f}  |grad| {before:8.3f} -> "
                 f"{after:6.3f}  {time.perf_counter() - start:5.1f} s")
    stream.flush()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=32)
    # 16 characters: the CPU back end still expands loop regions into straight-line code, so
    # its compile time grows with the window (about 8 s of CPU time here at 16)
    parser.add_argument("--seq", type=int, default=16, help="characters per training window")
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--show-source", action="store_true",
                        help="print the generated gradient source (the two loops) and exit")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)

    chars, index = vocabulary(TEXT)
    encoded = np.array([index[c] for c in TEXT])
    params = init_params(len(chars), args.hidden)
    f = sg.differentiate(loss, wrt=(0, 1, 2, 3, 4), target=args.target)
    windows = np.arange(len(TEXT) - args.seq - 1)

    def window(start):
        return (one_hot(encoded[start:start + args.seq], len(chars)),
                one_hot(encoded[start + 1:start + args.seq + 1], len(chars)))

    if args.show_source:
        print(f.grad.source_for(*params, *window(0)))
        return {}
    opt = sg.optim.Adam(learning_rate=0.01, target=args.target)
    rng = np.random.default_rng(1)
    losses, before, after, start = [], [], [], time.perf_counter()
    for step in range(1, args.steps + 1):
        xs, ys = window(int(rng.choice(windows)))
        grads_and_vars = opt.compute_gradients(f, params, xs, ys)
        grads, norm = sg.clip_by_global_norm([g for g, _ in grads_and_vars], args.clip)
        opt.apply_gradients(zip(grads, params))
        losses.append(float(opt.last_loss))
        before.append(float(norm))
        after.append(float(np.sqrt(sum(np.sum(g * g) for g in grads))))
        if not args.quiet and (step % 5 == 0 or step == args.steps):
            progress(step, args.steps, np.mean(losses[-20:]), before[-1], after[-1], start)
    elapsed = time.perf_counter() - start
    text = sample(params, chars, index, "t", 60)
    if not args.quiet:
        clipped = sum(n > args.clip for n in before)
        print(f"\n{args.steps} steps in {elapsed:.1f} s; the global gradient norm was clipped on "
              f"{clipped} of {args.steps} steps (largest {max(before):.2f}, clip {args.clip}); "
              f"loss {np.mean(losses[:20]):.3f} -> {np.mean(losses[-20:]):.3f}")
        print(f"sample: {text!r}")
    return {"losses": losses, "norms_before": before, "norms_after": after, "sample": text,
            "clip": args.clip, "elapsed": elapsed}


if __name__ == "__main__":
    main()
