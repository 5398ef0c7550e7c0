"""lgamma / gamma / digamma on 10^6 float64 points: symgrad's CPU code against scipy.special
(the hand-written NumPy/scipy version), values and gradients.

Each case runs in a fresh process (``--child``): one warm-up call (compiles), then the median
of ``--calls`` timed calls; ``--rounds`` processes per case, cases interleaved.

    python benchmarks/gamma_speed.py [--n 1000000] [--rounds 3] [--calls 7]
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from timing import interleaved, median_ms, print_ms_table


def lgamma_sum(x):
    import symgrad as sg
    return np.sum(sg.lgamma(x))


def gamma_sum(x):
    import symgrad as sg
    return np.sum(sg.gamma(x))


def digamma_sum(x):
    import symgrad as sg
    return np.sum(sg.digamma(x))


def _case(name: str):
    """(callable, argument) of a case name."""
    import scipy.special as ss

    import symgrad as sg
    x = np.random.default_rng(0).uniform(0.1, 30.0, ARGS.n)
    table = {
        "lgamma value, symgrad cpu": lambda: sg.differentiate(lambda v: sg.lgamma(v)),
        "lgamma value, scipy gammaln": lambda: ss.gammaln,
        "lgamma gradient (digamma), symgrad cpu": lambda: sg.grad(lgamma_sum),
        "lgamma gradient, scipy digamma": lambda: ss.digamma,
        "digamma gradient (trigamma), symgrad cpu": lambda: sg.grad(digamma_sum),
        "digamma gradient, scipy polygamma(1)": lambda: (lambda v: ss.polygamma(1, v)),
        "gamma gradient, symgrad cpu": lambda: sg.grad(gamma_sum),
        "gamma gradient, scipy gamma * digamma": lambda: (lambda v: ss.gamma(v) * ss.digamma(v)),
    }
    return table[name](), x


CASES = ["lgamma value, symgrad cpu", "lgamma value, scipy gammaln",
         "lgamma gradient (digamma), symgrad cpu", "lgamma gradient, scipy digamma",
         "digamma gradient (trigamma), symgrad cpu", "digamma gradient, scipy polygamma(1)",
         "gamma gradient, symgrad cpu", "gamma gradient, scipy gamma * digamma"]


def child(name: str) -> float:
    fn, x = _case(name)
    return median_ms(fn, x, ARGS.calls)


def main() -> None:
    results = interleaved(__file__, CASES, ["--n", ARGS.n, "--calls", ARGS.calls], ARGS.rounds)
    print(f"n = {ARGS.n}, medians of {ARGS.calls} calls, {ARGS.rounds} processes each (ms)")
    print_ms_table(results, 1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=7)
    parser.add_argument("--child")
    ARGS = parser.parse_args()
    if ARGS.child:
        print(json.dumps(child(ARGS.child)))
    else:
        main()
