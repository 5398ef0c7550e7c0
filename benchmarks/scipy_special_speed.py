"""scipy.special's logsumexp and expit on traced values (symgrad.scipy_special): the gradient
of symgrad's CPU code for scipy's formulas against the same gradient of the short hand-written
forms (what a user wrote before these were recognised) and against NumPy/scipy by hand.

Each case runs in a fresh process (``--child``): one warm-up call (compiles), then the median
of ``--calls`` timed calls; ``--rounds`` processes per case, cases interleaved.

    python benchmarks/scipy_special_speed.py [--rows 100000] [--k 16] [--n 1000000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json

import numpy as np
import scipy.special as ss

import symgrad as sg
from timing import interleaved, median_ms, print_ms_table


def lse_scipy(a):
    return np.sum(ss.logsumexp(a, axis=1))


def lse_hand(a):
    m = sg.stop_gradient(np.max(a, axis=1, keepdims=True))
    return np.sum(np.log(np.sum(np.exp(a - m), axis=1)) + m[:, 0])


def lse_numpy_grad(a):
    e = np.exp(a - np.max(a, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)


def expit_scipy(x):
    return np.sum(ss.expit(x))


def expit_hand(x):
    return np.sum(1 / (1 + np.exp(-x)))


def expit_scipy_grad(x):
    s = ss.expit(x)
    return s * (1 - s)


def _case(name: str):
    """(callable, argument) of a case name."""
    rng = np.random.default_rng(0)
    a = rng.normal(size=(ARGS.rows, ARGS.k)) * 3
    x = rng.normal(size=ARGS.n) * 5
    table = {
        "logsumexp(a, axis=1) gradient, symgrad cpu, scipy.special.logsumexp": (sg.grad(lse_scipy), a),
        "logsumexp(a, axis=1) gradient, symgrad cpu, hand-written shift form": (sg.grad(lse_hand), a),
        "logsumexp(a, axis=1) gradient, NumPy by hand (softmax)": (lse_numpy_grad, a),
        "logsumexp(a, axis=1) value, scipy.special": (lambda v: ss.logsumexp(v, axis=1), a),
        "expit gradient, symgrad cpu, scipy.special.expit": (sg.grad(expit_scipy), x),
        "expit gradient, symgrad cpu, hand 1 / (1 + exp(-x))": (sg.grad(expit_hand), x),
        "expit gradient, scipy by hand s (1 - s)": (expit_scipy_grad, x),
    }
    return table[name]


CASES = ["logsumexp(a, axis=1) gradient, symgrad cpu, scipy.special.logsumexp",
         "logsumexp(a, axis=1) gradient, symgrad cpu, hand-written shift form",
         "logsumexp(a, axis=1) gradient, NumPy by hand (softmax)",
         "logsumexp(a, axis=1) value, scipy.special",
         "expit gradient, symgrad cpu, scipy.special.expit",
         "expit gradient, symgrad cpu, hand 1 / (1 + exp(-x))",
         "expit gradient, scipy by hand s (1 - s)"]


def child(name: str) -> float:
    fn, x = _case(name)
    return median_ms(fn, x, ARGS.calls)


def main() -> None:
    results = interleaved(__file__, CASES, ["--rows", ARGS.rows, "--k", ARGS.k, "--n", ARGS.n,
                                            "--calls", ARGS.calls], ARGS.rounds)
    print(f"a: {ARGS.rows} x {ARGS.k}, x: {ARGS.n}; medians of {ARGS.calls} calls, "
          f"{ARGS.rounds} processes each (ms)")
    print_ms_table(results, 2)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--k", type=int, default=16)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=7)
    parser.add_argument("--child")
    ARGS = parser.parse_args()
    if ARGS.child:
        print(json.dumps(child(ARGS.child)))
    else:
        main()
