"""Straight-line code per compile stage, gradient and value (issue 13's row: <= 1 s per 1000
statements, linear).

Each case runs in a fresh process (cold: ``SYMGRAD_NO_CACHE=1``): the decorator and the first
``f.grad(x)`` (gradient: the issue's row, decorator -> first gradient), then the first ``f(x)``
(value), with compile_profile's stage timers (CPU time of the thread that runs a stage, summed
over the threads compiling a large module's parts; a stage called inside another is charged to
the inner one). **total** is the phase's CPU time (the process's, all threads), **wall** its
elapsed time, **per call** the median of 15 later calls (wall; **per call cpu**: their CPU
time, steadier on a loaded machine). ``x`` is a float (scalar code:
every stage one iteration) or a length-1000 vector (elementwise code); the program is
``compile_profile.straight_line_source(n)``.

    python benchmarks/straight_line_profile.py [--sizes 500,1000,2000,4000] [--shapes 0,1000]
        [--tree base=/path/to/checkout --tree new=.] [--runs 1]

With several trees, each row's processes alternate between them (so that load touches each
alike); with ``--runs k``, k processes per tree and row, medians per column.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PHASES = ("gradient", "value")


def measure_one(n: int, size: int) -> dict:
    os.environ["SYMGRAD_NO_CACHE"] = "1"
    sys.path.insert(0, HERE)
    import symgrad as sg
    import symgrad.codegen.llvm  # noqa: F401  (the back end's import, not counted)
    import compile_profile as P
    clock = P.Clock()
    P.instrument(clock)
    fn = P.straight_line_function(n)
    x = np.random.default_rng(0).uniform(-1, 1, size) if size else 0.3
    out = {}
    before = dict(clock.total)
    w0, c0 = time.perf_counter(), time.process_time()
    f = sg.differentiate(fn, wrt=0)
    for phase, call in (("gradient", lambda: f.grad(x)), ("value", lambda: f(x))):
        if phase != "gradient":
            before = dict(clock.total)
            w0, c0 = time.perf_counter(), time.process_time()
        call()
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        stages = {k: clock.total[k] - before[k] for k in clock.total}
        stages["other"] = cpu - sum(stages.values())
        stages["total"] = cpu
        stages["wall"] = wall
        times, cpus = [], []
        for _ in range(15):
            t, c = time.perf_counter(), time.process_time()
            call()
            times.append(time.perf_counter() - t)
            cpus.append(time.process_time() - c)
        stages["per call"] = float(np.median(times))
        stages["per call cpu"] = float(np.median(cpus))
        out[phase] = stages
    return out


def run_child(n: int, size: int, tree: str) -> dict:
    """One case in a fresh process of ``tree``'s own virtual environment (its editable install
    decides which symgrad is imported), else of this interpreter with ``tree`` on the path."""
    python = os.path.join(tree, ".venv", "bin", "python")
    cmd = [python if os.path.exists(python) else sys.executable, __file__, "--one", f"{n},{size}"]
    env = dict(os.environ, PYTHONPATH=tree, SYMGRAD_NO_CACHE="1")
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if run.returncode != 0:
        raise RuntimeError(run.stderr.strip()[-2000:])
    return json.loads(run.stdout.strip().splitlines()[-1])


def _ms(x: float) -> str:
    return f"{x * 1e3:.0f}" if x >= 0.0995 else f"{x * 1e3:.1f}" if x >= 0.001 else f"{x * 1e3:.3f}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="500,1000,2000,4000")
    ap.add_argument("--shapes", default="0,1000", help="0: a float; k: a length-k vector")
    ap.add_argument("--tree", action="append", metavar="LABEL=DIR")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    if args.one:
        n, size = map(int, args.one.split(","))
        print(json.dumps(measure_one(n, size)))
        return
    trees = dict(t.split("=", 1) for t in args.tree) if args.tree else {"this": ROOT}
    import compile_profile as P
    import startup
    for root in trees.values():    # as installed copies are (see startup.byte_compile)
        startup.byte_compile(root)
    cols = P.STAGES + ["other", "total", "wall", "per call", "per call cpu"]
    print(f"Machine: {P.machine()}; fresh processes, cold, {args.runs} per tree and row "
          "(medians); ms (stages and total: CPU time)")
    print("| statements | x | phase | tree | " + " | ".join(cols) + " |")
    print("|" + "---|" * (4 + len(cols)))
    results = {}
    for size in map(int, args.shapes.split(",")):
        for n in map(int, args.sizes.split(",")):
            runs = {label: [] for label in trees}
            for _ in range(args.runs):
                for label, tree in trees.items():   # alternated: load touches each alike
                    runs[label].append(run_child(n, size, tree))
            for label in trees:
                r = results[n, size, label] = {
                    phase: {c: float(np.median([run[phase][c] for run in runs[label]]))
                            for c in cols} for phase in PHASES}
                for phase in PHASES:
                    row = [str(n), "float" if not size else f"({size},)", phase, label]
                    print("| " + " | ".join(row + [_ms(r[phase][c]) for c in cols]) + " |",
                          flush=True)
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n} {s} {t}": r for (n, s, t), r in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
