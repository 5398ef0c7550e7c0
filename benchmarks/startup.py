"""What a fresh process pays before its first result (issue 13: import and W4).

Each row is a fresh ``python`` process, the rows interleaved run by run, medians of RUNS:

* ``import numpy`` and ``import symgrad`` (numpy included; also after numpy), wall clock and
  CPU time of the importing process and the subprocesses it waited for (CPU time is less
  disturbed by other processes' load);
* W4: decorator -> first gradient of W1, W2 and W3 (``run_all.COMPILE_SNIPPET``'s code, timed
  after ``import symgrad``), with the machine code on disk (a warm ``SYMGRAD_CACHE_DIR``) and
  cold (``SYMGRAD_NO_CACHE=1``), and the same plus the import.

symgrad's own modules are byte-compiled first, as ``pip install`` does (an editable install on
a machine with ``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile every changed module's
source in every process, which no installed copy does).

    python benchmarks/startup.py [--runs 9] [--disk-only] [--tree new=DIR --tree old=DIR]

``--tree`` measures several checkouts (each run by its own ``.venv``: ``make .venv/.installed``
there first), process by process in turn, each with a cache directory of its own.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# CPU seconds of this process and its waited-for children (getrusage: microseconds, where
# os.times counts clock ticks)
CPU = ("lambda: sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF), "
       "resource.getrusage(resource.RUSAGE_CHILDREN)))")

IMPORT = r"""
import json, resource, time
cpu = """ + CPU + r"""
w, c = time.perf_counter(), cpu()
import numpy
w1, c1 = time.perf_counter(), cpu()
import symgrad
w2, c2 = time.perf_counter(), cpu()
print(json.dumps({"numpy": [w1 - w, c1 - c], "symgrad": [w2 - w, c2 - c],
                  "symgrad after numpy": [w2 - w1, c2 - c1]}))
"""

W4 = r"""
import json, resource, sys, time
cpu = """ + CPU + r"""
sys.path.insert(0, {here!r})
import numpy as np
import workloads as W
x = np.random.default_rng(0).uniform(-1, 1, 1000)
t = np.full(1000, 1e-3)
w, c = time.perf_counter(), cpu()
import symgrad as sg
w1, c1 = time.perf_counter(), cpu()
if sys.argv[1] == "w1":
    sg.grad(W.w1, wrt=(0, 1))(x, x)
elif sys.argv[1] == "w2":
    sg.grad(W.w2_symgrad)(x, t)
else:
    sg.grad(W.w3)(x)
w2, c2 = time.perf_counter(), cpu()
print(json.dumps({{"first gradient": [w2 - w1, c2 - c1], "import + first gradient": [w2 - w, c2 - c]}}))
"""


def run(code: str, args=(), env=None, python: str = sys.executable) -> dict:
    out = subprocess.run([python, "-c", code, *args], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def interpreter(tree: str) -> str:
    own = os.path.join(tree, ".venv", "bin", "python")
    return own if os.path.exists(own) else sys.executable


def byte_compile(root: str | None = None):
    """Byte-compile symgrad and codegen of the checkout at ``root`` (default: the imported
    one), as ``pip install`` does for an installed copy."""
    import compileall

    if root is None:
        import symgrad
        root = os.path.dirname(os.path.dirname(os.path.abspath(symgrad.__file__)))
    for package in ("symgrad", "codegen"):
        compileall.compile_dir(os.path.join(root, package), quiet=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--disk-only", action="store_true", help="only the rows with the machine "
                    "code on disk (no import rows, no cold rows)")
    ap.add_argument("--tree", action="append", metavar="LABEL=DIR")
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree) if args.tree else {"": None}
    for root in trees.values():
        byte_compile(root)
    w4 = W4.format(here=HERE)
    load = os.getloadavg()[0]
    samples: dict = {}
    with tempfile.TemporaryDirectory() as cache:
        modes = {}
        for k, label in enumerate(trees):
            warm = dict(os.environ, SYMGRAD_CACHE_DIR=os.path.join(cache, str(k)))
            warm.pop("SYMGRAD_NO_CACHE", None)
            modes[label] = [("machine code on disk", warm)]
            modes[label] += [] if args.disk_only else [("cold", dict(warm, SYMGRAD_NO_CACHE="1"))]
            for which in ("w1", "w2", "w3"):      # fill the cache: kernels and the native entry
                run(w4, [which], warm, interpreter(trees[label] or ROOT))
        for _ in range(args.runs):
            rows = {}
            for label, tree in trees.items():
                python = interpreter(tree or ROOT)
                tag = f"{label}: " if label else ""
                if not args.disk_only:
                    rows.update({f"{tag}import: {k}": v for k, v in run(IMPORT, (), None,
                                                                        python).items()})
                for which in ("w1", "w2", "w3"):
                    for mode, env in modes[label]:
                        for k, v in run(w4, [which], env, python).items():
                            rows[f"{tag}W4 {which.upper()} {mode}: {k}"] = v
            for name, (wall, cpu) in rows.items():
                samples.setdefault(name, ([], []))
                samples[name][0].append(wall)
                samples[name][1].append(cpu)
    print(f"load average at start {load:.2f}, at end {os.getloadavg()[0]:.2f}; "
          f"medians of {args.runs} fresh processes")
    print("| what | wall | CPU |\n|---|---|---|")
    for name, (walls, cpus) in sorted(samples.items()) if len(trees) > 1 else samples.items():
        print(f"| {name} | {statistics.median(walls) * 1e3:.1f} ms | "
              f"{statistics.median(cpus) * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
