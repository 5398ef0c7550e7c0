"""Compile time against trip count for a loop: the first call of the gradient of a scalar
recurrence at 10, 30, 100 and 300 steps, each in a fresh process with no disk cache.

Static ``range(n)`` loops are unrolled while tracing today (``n`` is a static int), so the IR,
the generated code and the compile time grow with the trip count; this measurement shows how
much. It stores its rows under ``"trip_count"`` in ``benchmarks/results.json`` (which
``plots.py`` reads).

Usage: python benchmarks/trip_count.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
TRIPS = (10, 30, 100, 300)
REPEATS = 3


def recurrence(x, n):
    y = x
    for _ in range(n):
        y = np.sin(y) * 0.9 + x * 0.1
    return y


# The back end is imported before the clock starts: the curve is tracing, differentiation,
# simplification and compilation, not the (constant) import of llvmlite.
SNIPPET = """
import json, sys, time
sys.path.insert(0, {here!r}); sys.path.insert(0, {root!r})
import numpy as np
import symgrad as sg
import symgrad.codegen.llvm
from trip_count import recurrence
n, target = int(sys.argv[1]), sys.argv[2]
start = time.perf_counter()
g = sg.grad(recurrence, target=target)
g(0.5, n)
elapsed = time.perf_counter() - start
print(json.dumps({{"seconds": elapsed, "ir_nodes": len(g._inspect_entry(0.5, n).graph.nodes())}}))
"""


def first_call(n: int, target: str) -> dict:
    env = dict(os.environ, SYMGRAD_NO_CACHE="1")
    snippet = SNIPPET.format(here=HERE, root=os.path.dirname(HERE))
    runs = []
    for _ in range(REPEATS):
        out = subprocess.run([sys.executable, "-c", snippet, str(n), target], env=env,
                             capture_output=True, text=True, timeout=600, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"seconds": float(np.median([r["seconds"] for r in runs])),
            "ir_nodes": runs[0]["ir_nodes"]}


def measure() -> list[dict]:
    rows = []
    for n in TRIPS:
        cpu, python = first_call(n, "cpu"), first_call(n, "python")
        rows.append({"trips": n, "cpu_seconds": cpu["seconds"],
                     "python_seconds": python["seconds"], "ir_nodes": cpu["ir_nodes"]})
        print(f"  {n:4d} steps: first gradient {cpu['seconds'] * 1e3:8.1f} ms (cpu), "
              f"{python['seconds'] * 1e3:8.1f} ms (python); {cpu['ir_nodes']} IR nodes", flush=True)
    return rows


def main():
    path = os.path.join(HERE, "results.json")
    report = json.load(open(path)) if os.path.exists(path) else {}
    report["trip_count"] = measure()
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"stored under 'trip_count' in {path}")


if __name__ == "__main__":
    main()
