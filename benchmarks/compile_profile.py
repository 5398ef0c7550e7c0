"""Where the time to the first gradient goes, per compile stage (issue 13).

Each measurement runs in a fresh process: the decorator, then the first ``f.grad(*args)``,
with the stages timed by wrapping the functions that implement them:

  trace         symgrad.frontend.trace (the function's AST run on symbolic values)
  differentiate symgrad.autodiff.grad_graph (reverse mode on the traced graph)
  simplify      symgrad.simplify.simplify (both graphs: the trace's and the gradient's)
  schedule      codegen.schedule.Schedule (stages, fusion, buffers)
  lower         codegen.kernel.KernelModule + jit.finish_text (the LLVM IR text)
  llvm opt      codegen.jit._optimize (parse, verify, the -O pass pipeline), summed over the
                threads that compile a large module's parts
  llvm codegen  codegen.jit._emit (machine code), summed likewise
  load          what else codegen.jit.load takes: the disk-cache read on a hit, linking
                the object into the engine
  other         the first call's CPU time (the process's, all threads) minus the stages
                above (argument binding, Native's tables, the call itself)

"cold" runs with ``SYMGRAD_NO_CACHE=1``; "warm" with a private cache directory that only
another program (``_warmup``: matmuls, the common maths) filled, as on a machine that has run
symgrad before: shared libraries (the matmul kernels, the far-argument maths) come from the
disk, the case's own module is compiled; "disk" with a private cache directory that a previous
process of the case filled (the disk-cache hit path in a fresh process). Medians of ``--runs``
processes per case; the import of symgrad is not counted (its own row).

    python benchmarks/compile_profile.py [--cases gmm2,gmm10,w1,line1000,det8] [--runs 3]
    python benchmarks/compile_profile.py --cprofile gmm20     # top functions of one case
    python benchmarks/compile_profile.py --texts w1 --runs 5  # LLVM's time per module/part

Cases: gmm2, gmm10, gmm20, gmm64 (ADBench GMM, K = 5/25/50/200, n = 1000, written as
ADBench's definition reads), w1, w2, w3 (benchmarks/workloads.py), lstm (ADBench LSTM, l = 2,
c = 1024), line1000, line2000, line4000 (straight-line code of that many statements).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from workloads import _lower_triangles   # the triangle column by column, as ADBench builds it

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STAGES = ["trace", "differentiate", "simplify", "schedule", "lower", "llvm opt", "llvm codegen",
          "load"]
GMM_DIMS = {2: (5, 1000), 10: (25, 1000), 20: (50, 1000), 64: (200, 1000)}


# ---------------------------------------------------------------------------------------------
# ADBench GMM, as its definition reads: the triangle from static slices stacked column by
# column, Q_k (x_i - mu_k) as a batched matmul, logsumexp with a max.

def _logsumexp_vec(a):
    mx = np.max(a, axis=0)
    return np.log(np.sum(np.exp(a - mx[None, :]), axis=0)) + mx


def _logsumexp(a):
    mx = np.max(a)
    return np.log(np.sum(np.exp(a - mx))) + mx


def gmm_adbench(alphas, means, icf, x):
    n, d = x.shape
    k = alphas.shape[0]
    qdiags = np.exp(icf[:, :d])
    sum_qs = np.sum(icf[:, :d], axis=1)
    ls = _lower_triangles(icf, d)                                  # (K, d, d)
    xcentered = x[None, :, :] - means[:, None, :]                  # (K, n, d)
    lxcentered = qdiags[:, None, :] * xcentered + xcentered @ np.transpose(ls, (0, 2, 1))
    sqsum = np.sum(lxcentered * lxcentered, axis=2)                # (K, n)
    inner = (alphas + sum_qs)[:, None] - 0.5 * sqsum
    slse = np.sum(_logsumexp_vec(inner))
    constant = -n * d * 0.5 * math.log(2 * math.pi)
    gamma, m = 1.0, 0
    prior = np.sum(0.5 * gamma * gamma * (np.sum(qdiags * qdiags, axis=1)
                                          + np.sum(icf[:, d:] * icf[:, d:], axis=1)) - m * sum_qs)
    return constant + slse - n * _logsumexp(alphas) + prior


def gmm_args(d):
    k, n = GMM_DIMS[d]
    rng = np.random.default_rng(0)
    return (rng.standard_normal(k), rng.uniform(0, 1, (k, d)),
            rng.uniform(0, 1, (k, d + d * (d - 1) // 2)) * 0.1, rng.standard_normal((n, d)))


# ---------------------------------------------------------------------------------------------
# Straight-line code: n statements, each reading the previous value and one earlier value
# (a fixed pseudo-random choice), elementwise on a length-1000 vector.

def straight_line_source(n: int) -> str:
    lines = ["import numpy as np", "", "", "def line(x):", "    v0 = x"]
    state = 12345
    for i in range(1, n + 1):
        state = (state * 1103515245 + 12345) % 2 ** 31
        j = state % i
        op = ("np.sin({a}) * 0.9 + {b} * 0.1", "{a} * {b} * 0.5 + 0.25",
              "np.tanh({a}) - {b} * 0.3", "{a} + np.exp(-{b} * {b}) * 0.2")[i % 4]
        lines.append(f"    v{i} = " + op.format(a=f"v{i - 1}", b=f"v{j}"))
    lines.append(f"    return np.sum(v{n})")
    return "\n".join(lines) + "\n"


def straight_line_function(n: int):
    import importlib.util
    path = os.path.join(tempfile.mkdtemp(prefix="sg_line"), f"line{n}.py")
    with open(path, "w") as f:
        f.write(straight_line_source(n))
    spec = importlib.util.spec_from_file_location(f"line{n}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.line


# ---------------------------------------------------------------------------------------------
# The cases: (function, wrt, arguments), built in the measuring process.

def _warmup(a, b):
    """Another program with matmuls in both layouts of b and the common maths: what the disk
    cache of a machine that has run symgrad before holds beside nothing of the case itself."""
    h = np.tanh(a @ b)
    return np.sum(np.exp(-h * h) @ b.T) + np.sum(np.log(1.0 + (h @ b) ** 2))


def case(name: str):
    sys.path.insert(0, HERE)
    import workloads as W
    rng = np.random.default_rng(0)
    if name.startswith("gmm"):
        d = int(name[3:])
        return gmm_adbench, (0, 1, 2), gmm_args(d)
    if name == "w1":
        x = rng.uniform(-1, 1, 1000)
        return W.w1, (0, 1), (x, x)
    if name == "w2":
        return W.w2_symgrad, 0, (rng.uniform(-1, 1, 1000), np.full(1000, 1e-3))
    if name == "w3":
        return W.w3, 0, (rng.uniform(-1, 1, 1000),)
    if name == "lstm":
        import adbench_lstm as L
        return L.objective, (0, 1), L.make_inputs(2, 1024)
    linalg = next((op for op in ("det", "inv", "solve", "cholesky") if name.startswith(op)), None)
    if linalg and name[len(linalg):].isdigit():     # det8, cholesky32: linalg_compile's losses
        import linalg_compile
        n = int(name[len(linalg):])
        x = rng.uniform(-1, 1, (n, n)) + 2.0 * np.eye(n)
        return linalg_compile._loss(linalg, n), 0, (x,)
    if name.startswith("line"):
        return straight_line_function(int(name[4:])), 0, (rng.uniform(-1, 1, 1000),)
    if name == "warmup":     # what another program compiled before ("warm" mode)
        return _warmup, (0, 1), (rng.normal(size=(30, 20)), rng.normal(size=(20, 20)))
    raise SystemExit(f"unknown case {name!r}")


# ---------------------------------------------------------------------------------------------
# Instrumentation (in the measuring process)

class Clock:
    """CPU time per stage, of the thread that runs it (LLVM compiles a large module's parts on
    several threads: their CPU times add up); on a shared machine CPU time is far steadier
    than wall time. A stage called inside another is charged to the inner one only."""

    def __init__(self):
        self.total = dict.fromkeys(STAGES, 0.0)
        self.local = threading.local()
        self.lock = threading.Lock()

    def wrap(self, stage, fn):
        def timed(*args, **kwargs):
            stack = self.local.__dict__.setdefault("stack", [])
            t0 = time.thread_time()
            stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                inner = stack.pop()
                spent = time.thread_time() - t0
                with self.lock:
                    self.total[stage] += spent - inner
                if stack:
                    stack[-1] += spent
        timed.__wrapped__ = fn
        return timed


def instrument(clock: Clock):
    import symgrad.api as api
    from symgrad.codegen import jit, kernel, schedule
    api.trace = clock.wrap("trace", api.trace)
    api.grad_graph = clock.wrap("differentiate", api.grad_graph)
    api.simplify = clock.wrap("simplify", api.simplify)
    # codegen.llvm imports these where it builds IR (a run plan's hit needs neither)
    schedule.Schedule.__init__ = clock.wrap("schedule", schedule.Schedule.__init__)
    kernel.KernelModule.__init__ = clock.wrap("lower", kernel.KernelModule.__init__)
    jit.finish_text = clock.wrap("lower", jit.finish_text)
    jit._optimize = clock.wrap("llvm opt", jit._optimize)
    jit._emit = clock.wrap("llvm codegen", jit._emit)
    jit.load = clock.wrap("load", jit.load)


def measure_one(name: str) -> dict:
    t0 = time.perf_counter()
    import symgrad as sg
    import symgrad.codegen.llvm  # noqa: F401  (the back end's import, counted with symgrad's)
    t_import = time.perf_counter() - t0
    clock = Clock()
    instrument(clock)
    fn, wrt, args = case(name)
    t0, c0 = time.perf_counter(), time.process_time()
    f = sg.differentiate(fn, wrt=wrt)
    f.grad(*args)
    first, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = dict(clock.total)
    out["other"] = cpu - sum(clock.total.values())
    out["first gradient cpu"] = cpu
    out["first gradient"] = first
    out["import"] = t_import
    # kernel time of the compiled gradient, so that an optimisation-level change is visible
    f.grad(*args)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        f.grad(*args)
        times.append(time.perf_counter() - t)
    out["gradient call"] = float(np.median(times))
    return out


def run_child(name: str, env: dict, tree: str) -> dict:
    """``measure_one(name)`` in a fresh process importing symgrad from ``tree``: with the
    tree's own virtualenv where it has one (``make .venv/.installed`` there), as an editable
    install maps ``symgrad.codegen`` to its own checkout whatever PYTHONPATH says."""
    own = os.path.join(tree, ".venv", "bin", "python")
    cmd = [own if os.path.exists(own) else sys.executable, __file__, "--one", name]
    env = dict(env, PYTHONPATH=tree)
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if run.returncode != 0:
        raise RuntimeError(f"{name}: {run.stderr.strip()[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def _median(rows: list) -> dict:
    return {k: float(np.median([r[k] for r in rows])) for k in rows[0]}


def profile(names, runs: int, disk: bool, trees: dict) -> dict:
    """{(case, mode, tree label): medians}; the trees' runs alternate process by process, so
    that a change of load touches every tree alike."""
    results = {}
    env = {k: v for k, v in os.environ.items() if k != "SYMGRAD_NO_CACHE"}
    for name in names:
        with tempfile.TemporaryDirectory() as cache:
            env["SYMGRAD_CACHE_DIR"] = cache
            caches = {label: os.path.join(cache, str(i)) for i, label in enumerate(trees)}
            modes = [("cold", dict(env, SYMGRAD_NO_CACHE="1"))]
            modes += [("warm", env), ("disk", env)] if disk else []
            for mode, menv in modes:
                rows: dict = {label: [] for label in trees}
                for label, tree in trees.items():
                    fill = "warmup" if mode == "warm" else name if mode == "disk" else None
                    if fill is not None:     # fill this tree's cache first
                        shutil.rmtree(caches[label], ignore_errors=True)
                        run_child(fill, dict(menv, SYMGRAD_CACHE_DIR=caches[label]), tree)
                for _ in range(runs):
                    for label, tree in trees.items():
                        where = caches[label]
                        if mode == "warm":   # a copy: the run would leave its own entries
                            where = caches[label] + ".run"
                            shutil.rmtree(where, ignore_errors=True)
                            shutil.copytree(caches[label], where)
                        rows[label].append(run_child(name, dict(menv, SYMGRAD_CACHE_DIR=where),
                                                     tree))
                for label in trees:
                    results[name, mode, label] = r = _median(rows[label])
                    print(f"  {_fmt_row(name, mode, label, r)}", file=sys.stderr, flush=True)
    return results


COLUMNS = STAGES + ["other", "first gradient cpu", "first gradient", "import", "gradient call"]


def _fmt(x: float) -> str:
    return f"{x * 1e3:.0f}" if x >= 0.0995 else f"{x * 1e3:.1f}" if x >= 0.001 else f"{x * 1e3:.2f}"


def _fmt_row(name, mode, label, r) -> str:
    return " | ".join([name, mode, label] + [_fmt(r[c]) for c in COLUMNS])


def markdown(results: dict) -> str:
    head = ["case", "cache", "tree"] + COLUMNS
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (name, mode, label), r in results.items():
        lines.append("| " + _fmt_row(name, mode, label, r) + " |")
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start"


def cprofile(name: str, top: int):
    import cProfile
    import pstats
    os.environ["SYMGRAD_NO_CACHE"] = "1"
    import symgrad as sg
    import symgrad.codegen.llvm  # noqa: F401
    fn, wrt, args = case(name)
    f = sg.differentiate(fn, wrt=wrt)
    prof = cProfile.Profile()
    prof.enable()
    f.grad(*args)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def texts_profile(name: str, runs: int):
    """LLVM's CPU time per text it compiled (a kernel's module or part, each library) for the
    first gradient of ``name``, medians of ``runs`` fresh processes: which text costs what,
    and which are compiled light (no IR pipeline, the -O0 code generator)."""
    rows: dict = {}
    for _ in range(runs):
        env = dict(os.environ, SYMGRAD_NO_CACHE="1")
        cmd = [sys.executable, __file__, "--one-texts", name]
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
        if run.returncode != 0:
            raise RuntimeError(run.stderr[-2000:])
        for row in json.loads(run.stdout.strip().splitlines()[-1]):
            rows.setdefault((row["module"], row["part"]), []).append(row)
    print("| module | part | IR chars | functions | light | llvm opt | llvm codegen |")
    print("|---|---|---|---|---|---|---|")
    for (module, part), rs in rows.items():
        r = rs[0]
        opt = float(np.median([x["opt"] for x in rs]))
        emit = float(np.median([x["codegen"] for x in rs]))
        print(f"| {module} | {part} | {r['chars']} | {r['functions']} | "
              f"{'yes' if r['light'] else 'no'} | {_fmt(opt)} | {_fmt(emit)} |")


def measure_texts(name: str) -> list:
    """(in the measuring process) one row per text LLVM compiled for ``name``'s first
    gradient: its module's name, part number, size, and the CPU time of each step."""
    import re
    import symgrad as sg
    import symgrad.codegen.llvm  # noqa: F401
    from symgrad.codegen import jit
    local = threading.local()
    rows, lock = [], threading.Lock()
    optimize, emit = jit._optimize, jit._emit
    parts_of: dict = {}

    def timed_optimize(text, tm, context=None):
        t0 = time.thread_time()
        try:
            return optimize(text, tm, context)
        finally:
            m = re.search(r'^; ModuleID = "([^"]*)"', text, re.M)
            module = m.group(1) if m else "?"
            with lock:
                part = parts_of[module] = parts_of.get(module, -1) + 1
            local.row = dict(module=module, part=part, chars=len(text),
                             functions=text.count("\ndefine "), light=jit.is_light(text),
                             opt=time.thread_time() - t0, codegen=0.0)

    def timed_emit(mod, tm):
        t0 = time.thread_time()
        try:
            return emit(mod, tm)
        finally:
            row = local.row
            row["codegen"] = time.thread_time() - t0
            with lock:
                rows.append(row)

    jit._optimize, jit._emit = timed_optimize, timed_emit
    fn, wrt, args = case(name)
    sg.differentiate(fn, wrt=wrt).grad(*args)
    return sorted(rows, key=lambda r: (r["module"], r["part"]))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="gmm2,gmm10,gmm20,gmm64,w1,w2,w3,lstm,line1000,line2000,line4000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--no-disk", action="store_true", help="skip the disk-cache rows")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--cprofile", metavar="CASE")
    ap.add_argument("--texts", metavar="CASE", help="LLVM's time per compiled text (module, "
                    "part, library) of one case, no disk cache, medians of --runs processes")
    ap.add_argument("--one-texts", help=argparse.SUPPRESS)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--tree", action="append", metavar="LABEL=DIR",
                    help="a checkout to measure (symgrad imported from DIR, run by DIR's "
                         ".venv: `make .venv/.installed` there first; repeatable, runs "
                         "alternate); default: this one")
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(measure_one(args.one)))
        return
    if args.cprofile:
        cprofile(args.cprofile, args.top)
        return
    if args.one_texts:
        print(json.dumps(measure_texts(args.one_texts)))
        return
    if args.texts:
        texts_profile(args.texts, args.runs)
        return
    trees = dict(t.split("=", 1) for t in args.tree) if args.tree else {"this": ROOT}
    import startup
    for root in trees.values():    # as installed copies are (see startup.byte_compile)
        startup.byte_compile(root)
    print(f"Machine: {machine()}; medians of {args.runs} fresh processes; times in ms "
          "(stages: CPU time of the threads that ran them)")
    names = [s for s in args.cases.split(",") if s]
    results = profile(names, args.runs, not args.no_disk, trees)
    print(markdown(results))
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({" ".join(k): r for k, r in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
