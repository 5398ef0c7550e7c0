"""Where a compiled function's kernel time goes, loop nest by loop nest (issue 13, item 3).

For each stage of the CPU schedule (``codegen.schedule``: one loop nest, or one matmul) the
median of ``--reps`` runs of ``sg_init<k>`` + ``sg_stage<k>`` over its whole range, called
through ctypes on the calling thread, with no Python around them: the figure the machine's
load disturbs least. Each line shows the stage's loop shape, the ops it computes in registers
and what it writes (its sinks).

    python benchmarks/stage_profile.py gmm 10 [--reps 7] [--quiet]   # examples/gmm_objective.py
    python benchmarks/stage_profile.py adbench 10                     # compile_profile.gmm_adbench
    python benchmarks/stage_profile.py w2                            # W2, 10^6 logits

The stage calls reuse the buffers of one real call (arguments, outputs, scratch), so every
stage reads what it would read in a call; the times add up to the kernel time of one call on
one thread. A tile group (``codegen.tiling``: stages run chunk by chunk of their outer axis)
is timed as one line, its stages listed below it.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))


def stage_label(st) -> str:
    ops = Counter(n.op for n in st.ssa)
    sinks = ", ".join(f"{s.kind} {s.node.op}{list(s.node.shape)}" for s in st.sinks)
    inner = " ".join(f"{op}x{c}" for op, c in sorted(ops.items()))
    return f"{st.kind} over {list(st.shape)} [{inner}] -> {sinks}"


def stage_times(fn, args, reps: int) -> list[tuple[float, object]]:
    """(median ms, stage) per stage of ``fn``'s CPU kernel for ``args``."""
    fn(*args)
    native = fn._inspect_entry(*args).prepared["cpu"]
    # the pointer table now holds this call's buffers: its outputs must stay alive (the
    # stages write into them) until the last stage has run
    results = native(list(args))
    table = native.cached[0].ctypes.data
    out = []
    stages = native.program.schedule.stages
    for k, (call, st) in enumerate(zip(native.stages, stages)):
        if k in native.tiles.grouped:   # a tile group (codegen.tiling) runs as one: its chunk-local
            if k in native.tiles.calls:   # buffers hold one chunk, no stage runs alone
                group = native.tiles.calls[k]
                out.append((_median_ms(reps, lambda: _run_group(native, group, table)),
                            [stages[j] for j in group.stages]))
            continue
        def run():
            call.init(table, native.params_addr)
            call.stage(table, native.params_addr, 0, call.extent0)
        out.append((_median_ms(reps, run), st))
    del results
    return out


def _run_group(native, group, table):
    for j in group.stages:
        native.stages[j].init(table, native.params_addr)
    group.run(table, native.params_addr, 0, group.extent)


def _median_ms(reps: int, fn) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return 1e3 * sorted(times)[reps // 2]


def report(name, fn, args, reps, quiet) -> float:
    rows = stage_times(fn, args, reps)
    total = sum(t for t, _ in rows)
    print(f"{name}: {total:.3f} ms in {len(rows)} stages")
    if not quiet:
        for t, st in rows:
            if isinstance(st, list):   # a tile group: its stages chunk by chunk
                print(f"  {'':3} {t:9.3f} ms  tile group of stages {st[0].index}-{st[-1].index}:")
                for member in st:
                    print(f"  {member.index:3d} {'':12s}  {stage_label(member)}")
            else:
                print(f"  {st.index:3d} {t:9.3f} ms  {stage_label(st)}")
    return total


def problems(which: str, d: int | None):
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    sys.path.insert(0, HERE)
    import numpy as np
    import symgrad as sg
    if which == "gmm":
        import gmm_objective as G
        import workloads as W
        k, n = {dd: (kk, nn) for dd, kk, nn in W.GMM_SIZES}[d]
        return sg.differentiate(G.gmm_objective, wrt=(0, 1, 2)), G.make_problem(d, k, n)
    if which == "adbench":   # the GMM as ADBench's definition reads (run_all's GMM table)
        import compile_profile as P
        return sg.differentiate(P.gmm_adbench, wrt=(0, 1, 2)), P.gmm_args(d)
    import workloads as W
    rng = np.random.default_rng(1)
    x = rng.normal(size=10 ** 6) * 3
    t = rng.uniform(size=10 ** 6)
    return sg.differentiate(W.w2_symgrad), (x, t / t.sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["gmm", "adbench", "w2"])
    ap.add_argument("d", type=int, nargs="?", default=10, help="GMM dimension (2, 10, 20, 64)")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--quiet", action="store_true", help="totals only")
    args = ap.parse_args()
    os.environ.setdefault("SYMGRAD_NUM_THREADS", "1")
    f, inputs = problems(args.workload, args.d)
    objective = report("objective", f, inputs, args.reps, args.quiet)
    gradient = report("gradient", f.grad, inputs, args.reps, args.quiet)
    print(f"gradient / objective: {gradient / objective:.2f}")


if __name__ == "__main__":
    main()
