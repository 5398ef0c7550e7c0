"""ADBench GMM gradient / objective, per call, for one or more checkouts side by side (issue 13).

The objective is ``compile_profile.gmm_adbench`` (ADBench's definition as it reads: the
triangle stacked from static slices, batched matmul, logsumexp with a max), differentiated
with respect to (alphas, means, icf), as run_all's GMM rows. Every measurement runs in a fresh
process importing symgrad from one tree (with that tree's own virtualenv where it has one);
the trees alternate process by process and round by round, so a change of the machine's load
touches each alike. In a process the gradient and the objective calls alternate too, after a
warm-up call each; the figures are medians of the per-call times, then medians over rounds.

    python benchmarks/gmm_ratio.py [--tree new=DIR --tree old=DIR] [--dims 2,10,20,64]
        [--rounds 3] [--reps 15] [--threads N]

``--threads`` sets SYMGRAD_NUM_THREADS in the children (default: symgrad's own choice). With
``--threads 1`` the kernel runs on the calling thread, and its CPU time (also printed, median
per call) is the figure a loaded machine disturbs least: it leaves out the time the thread
waited for a core.
Prints a table per tree and the load average before and after; "first gradient" is the
process's CPU time (all threads) from the decorator to the first gradient's result, no disk
cache (``SYMGRAD_NO_CACHE=1``).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CHILD = r'''
import sys, time, json
sys.path.insert(0, {bench!r})
import numpy as np
import compile_profile as P
import symgrad as sg
d, reps = int(sys.argv[1]), int(sys.argv[2])
args = P.gmm_args(d)
t0 = time.process_time()
f = sg.differentiate(P.gmm_adbench, wrt=(0, 1, 2))
g = f.grad(*args)
first = time.process_time() - t0
f(*args)
times = dict(grad=[], obj=[], grad_cpu=[], obj_cpu=[])
def timed(key, fn):
    t, c = time.perf_counter(), time.thread_time()
    fn()
    times[key + "_cpu"].append(time.thread_time() - c)
    times[key].append(time.perf_counter() - t)
for _ in range(reps):
    timed("grad", lambda: f.grad(*args))
    timed("obj", lambda: f(*args))
out = {{k: sorted(v)[reps // 2] for k, v in times.items()}}
print(json.dumps(dict(out, first=first, checksum=[float(np.sum(np.abs(a))) for a in g])))
'''


def run_child(tree: str, d: int, reps: int, env: dict) -> dict:
    python = os.path.join(tree, ".venv", "bin", "python")
    if not os.path.exists(python):
        python = sys.executable
    child = CHILD.format(bench=os.path.join(tree, "benchmarks"))
    out = subprocess.run([python, "-c", child, str(d), str(reps)], cwd=tree,
                         env=dict(env, PYTHONPATH=tree), capture_output=True, text=True,
                         timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{tree} d={d}: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", action="append", metavar="LABEL=DIR")
    ap.add_argument("--dims", default="2,10,20,64")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree) if args.tree else {"this": ROOT}
    dims = [int(d) for d in args.dims.split(",")]
    env = dict(os.environ, SYMGRAD_NO_CACHE="1")
    if args.threads is not None:
        env["SYMGRAD_NUM_THREADS"] = str(args.threads)
    sys.path.insert(0, HERE)
    from startup import byte_compile
    for tree in trees.values():     # as installed copies are
        byte_compile(tree)
    load_before = os.getloadavg()
    runs: dict = {}
    for r in range(args.rounds):
        order = list(trees.items()) if r % 2 == 0 else list(trees.items())[::-1]
        for d in dims:
            for label, tree in order:
                runs.setdefault((label, d), []).append(run_child(tree, d, args.reps, env))
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.2f} / {load_before[1]:.2f}, after "
          f"{load_after[0]:.2f} / {load_after[1]:.2f}; {args.rounds} rounds, {args.reps} "
          f"calls each, threads {args.threads or 'default'}")
    print("| tree | d | gradient ms | objective ms | ratio | ratio per round | "
          "calling thread's CPU: gradient ms | objective ms | ratio | first gradient CPU s | "
          "checksum |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label in trees:
        for d in dims:
            rs = runs[(label, d)]
            grad = statistics.median(x["grad"] for x in rs) * 1e3
            obj = statistics.median(x["obj"] for x in rs) * 1e3
            per = " ".join(f"{x['grad'] / x['obj']:.2f}" for x in rs)
            grad_cpu = statistics.median(x["grad_cpu"] for x in rs) * 1e3
            obj_cpu = statistics.median(x["obj_cpu"] for x in rs) * 1e3
            first = statistics.median(x["first"] for x in rs)
            check = " ".join(f"{c:.6g}" for c in rs[0]["checksum"])
            print(f"| {label} | {d} | {grad:.3f} | {obj:.3f} | {grad / obj:.2f} | {per} | "
                  f"{grad_cpu:.3f} | {obj_cpu:.3f} | {grad_cpu / obj_cpu:.2f} | {first:.2f} | "
                  f"{check} |")


if __name__ == "__main__":
    main()
