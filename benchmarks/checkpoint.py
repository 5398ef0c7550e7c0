"""``sg.checkpoint`` on long recurrences: what the forward loop stores for the backward loop
(bytes of its stacked outputs, read off the compiled graph) and the gradient's time per call,
with and without checkpointing the cell, for a tanh RNN and a GRU cell (target="cpu").

Checkpointing trades memory for time: the forward loop then stores only the carried state per
step and the backward loop recomputes the cell's gates before applying their derivative.

    python benchmarks/checkpoint.py [--hidden 64] [--steps 1000,10000] [--repeats 20]
"""
from __future__ import annotations

import argparse
import platform

import numpy as np

import symgrad as sg
from symgrad.ir import toposort
from timing import median_time


def identity(fn):
    return fn


def tanh_cell(h, x, W, U, b):
    return np.tanh(W @ h + U @ x + b)


def gru_cell(h, x, W, U, b):
    n = h.shape[0]
    gates = W @ h + U @ x + b                      # z, r and the candidate's input part
    z = 1.0 / (1.0 + np.exp(-gates[:n]))
    r = 1.0 / (1.0 + np.exp(-gates[n:2 * n]))
    c = np.tanh(gates[2 * n:] + (W[2 * n:] @ (r * h)))
    return (1.0 - z) * h + z * c


def loss_of(cell, wrap):
    def loss(W, U, b, xs):
        h = np.zeros(W.shape[1])
        for x in xs:
            h = wrap(cell)(h, x, W, U, b)
        return np.sum(h * h)
    return loss


def stored_bytes(f, args) -> int:
    """Bytes the forward loops of ``f``'s gradient stack for its backward loops."""
    graph = f.grad._graph(args)
    total = 0
    for n in toposort(graph.outputs):
        if n.op == "loop" and not n.attrs[4]:
            body, trips, nc = n.attrs[:3]
            total += sum(trips * max(r.size, 1) * np.dtype(r.dtype).itemsize
                         for r in body.results[nc:])
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--steps", default="1000,10000")
    ap.add_argument("--repeats", type=int, default=20)
    opts = ap.parse_args()
    rng = np.random.default_rng(0)
    n = opts.hidden
    print(f"# {platform.processor() or platform.machine()}, hidden {n}, float64, target=cpu, "
          f"median of {opts.repeats}")
    print(f"{'cell':6} {'steps':>6} {'stored plain':>13} {'stored ckpt':>12} "
          f"{'grad plain':>11} {'grad ckpt':>10} {'time ratio':>10}")
    for name, cell, rows in (("tanh", tanh_cell, n), ("gru", gru_cell, 3 * n)):
        for steps in (int(s) for s in opts.steps.split(",")):
            args = (rng.normal(size=(rows, n)) / np.sqrt(n), rng.normal(size=(rows, n)) / np.sqrt(n),
                    rng.normal(size=rows) * 0.1, rng.normal(size=(steps, n)))
            plain = sg.differentiate(loss_of(cell, identity), wrt=(0, 1, 2))
            ckpt = sg.differentiate(loss_of(cell, sg.checkpoint), wrt=(0, 1, 2))
            for a, b in zip(plain.grad(*args), ckpt.grad(*args)):
                np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)
            t_plain = median_time(lambda: plain.grad(*args), opts.repeats)
            t_ckpt = median_time(lambda: ckpt.grad(*args), opts.repeats)
            print(f"{name:6} {steps:6d} {stored_bytes(plain, args) / 1e6:10.2f} MB "
                  f"{stored_bytes(ckpt, args) / 1e6:9.2f} MB {t_plain * 1e3:8.2f} ms "
                  f"{t_ckpt * 1e3:7.2f} ms {t_ckpt / t_plain:10.2f}")


if __name__ == "__main__":
    main()
