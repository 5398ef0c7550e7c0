"""Benchmarks W1-W5 of issue 3, side by side in one process (medians of >= 7 runs), plus the
accuracy of the SIMD math and the per-call overhead. Writes benchmarks/RESULTS.md.

Peers (NumPy with hand-derived gradients always; Numba, JAX when installed: ``pip install
.[bench]``) run on the same inputs in the same process. Compile times (W4) are measured in
fresh subprocesses so that no cache helps anyone, except where a row says "warm disk cache".

Usage: python benchmarks/run_all.py [--quick]
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import symgrad as sg  # noqa: E402
import workloads as W  # noqa: E402
from symgrad.codegen import llvm as cpu  # noqa: E402
from timing import median_time  # noqa: E402

QUICK = "--quick" in sys.argv


def try_import(name):
    try:
        return __import__(name)
    except Exception:  # noqa: BLE001 - any failure means "peer not available"
        return None


jax = try_import("jax")
numba = try_import("numba")
if jax is not None:
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp


# ----------------------------------------------------------------------------------------------
# Numba hand-written gradients (parallel=True, as the issue asks)

def numba_kernels():
    if numba is None:
        return {}
    from numba import njit, prange

    @njit(parallel=True, fastmath=False)
    def w1_grad(x, y, gx, gy):
        for i in prange(x.shape[0]):
            xi, yi = x[i], y[i]
            e = np.exp(-xi * xi)
            t = np.tanh(xi * yi)
            d = 1.0 - t * t
            yy = yi * yi
            gx[i] = np.sin(yi) - 2.0 * xi * e * np.log1p(yy) + yi * d
            gy[i] = xi * np.cos(yi) + e * 2.0 * yi / (1.0 + yy) + xi * d

    def w1_fresh(x, y):
        gx, gy = np.empty_like(x), np.empty_like(y)
        w1_grad(x, y, gx, gy)
        return gx, gy

    @njit(parallel=True)
    def w2_grad(x, t):
        m = np.max(x)
        e = np.exp(x - m)
        return e * (np.sum(t) / np.sum(e)) - t

    @njit
    def w3_grad(x):
        n = x.shape[0]
        g = np.zeros_like(x)
        for i in range(n - 1):
            d = x[i + 1] - x[i] * x[i]
            g[i] += -400.0 * x[i] * d - 2.0 * (1.0 - x[i])
            g[i + 1] += 200.0 * d
        return g

    return {"w1": w1_fresh, "w1_out": w1_grad, "w2": w2_grad, "w3": w3_grad}


# ----------------------------------------------------------------------------------------------

def machine() -> str:
    lines = []
    try:
        info = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        keep = ("Model name", "CPU(s):", "Thread(s) per core", "L1d", "L2", "L3", "Flags")
        for line in info.splitlines():
            if line.startswith(keep):
                if line.startswith("Flags"):
                    flags = line.split(":", 1)[1].split()
                    line = "Flags (SIMD): " + " ".join(f for f in flags if f.startswith(("avx", "fma", "sse4")))
                lines.append(line.strip())
    except OSError:
        lines.append(platform.processor())
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30
    lines.append(f"Memory: {mem:.0f} GiB; Python {platform.python_version()}, NumPy {np.__version__}, "
                 f"llvmlite {__import__('llvmlite').__version__}"
                 + (f", JAX {jax.__version__}" if jax else ", JAX not installed")
                 + (f", Numba {numba.__version__}" if numba else ", Numba not installed"))
    lines.append(f"symgrad threads: {cpu.num_threads()}; load average at start: "
                 f"{os.getloadavg()[0]:.2f} (the machine is shared: other jobs may run)")
    return "\n".join("    " + line for line in lines)


def bandwidth() -> float:
    """Copy bandwidth in GB/s (bytes read + written), 80 MB arrays."""
    a = np.ones(10 ** 7)
    b = np.empty_like(a)
    t = median_time(lambda: np.copyto(b, a))
    return 2 * a.nbytes / t / 1e9


def table(header, rows) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def ms(t):
    return f"{t * 1e3:.2f} ms"


def us(t):
    return f"{t * 1e6:.2f} µs"


# ----------------------------------------------------------------------------------------------

def bench_w1(nb, bw, report):
    n = 10 ** 6 if QUICK else 10 ** 7
    rows = []
    for dtype in ("float64", "float32"):
        rng = np.random.default_rng(0)
        x = rng.uniform(-2, 2, n).astype(dtype)
        y = rng.uniform(-2, 2, n).astype(dtype)
        g = sg.grad(W.w1, wrt=(0, 1))
        outs = (np.empty_like(x), np.empty_like(y))
        t_np = median_time(lambda: W.w1_grad_numpy(x, y))
        res = {"NumPy, hand gradient": t_np,
               "symgrad (fresh outputs)": median_time(lambda: g(x, y)),
               "symgrad (out=)": median_time(lambda: g(x, y, out=outs))}
        if nb:
            res["Numba parallel, hand (fresh outputs)"] = median_time(lambda: nb["w1"](x, y))
            res["Numba parallel, hand (preallocated)"] = median_time(lambda: nb["w1_out"](x, y, *outs))
        if jax:
            jg = jax.jit(jax.vmap(jax.grad(W.with_module(W.w1, jnp), argnums=(0, 1))))
            jx, jy = jnp.asarray(x), jnp.asarray(y)
            res["jax.jit(vmap(grad))"] = median_time(lambda: [a.block_until_ready() for a in jg(jx, jy)])
        ref = W.w1_grad_numpy(x.astype(np.float64), y.astype(np.float64))
        err = max(float(np.max(np.abs(a - b) / (np.abs(b) + 1))) for a, b in zip(g(x, y), ref))
        bound = 4 * x.nbytes / (bw * 1e9)
        for name, t in res.items():
            rows.append((dtype, name, ms(t), f"{t_np / t:.2f}x"))
        rows.append((dtype, "memory-bandwidth bound (2 in + 2 out)", ms(bound), f"{t_np / bound:.1f}x"))
        report.setdefault("w1_err", {})[dtype] = err
    report["W1"] = table(("dtype", f"W1 gradient, n = {n:.0e}", "median", "vs NumPy"), rows)


def bench_w2(nb, report):
    n = 10 ** 6
    rng = np.random.default_rng(1)
    x = rng.normal(size=n) * 3
    t = rng.uniform(size=n)
    t /= t.sum()
    f = sg.differentiate(W.w2_symgrad)
    obj = median_time(lambda: f(x, t))
    rows = [("symgrad objective", ms(obj), ""),
            ("symgrad gradient", ms(median_time(lambda: f.grad(x, t))), ""),
            ("symgrad value_and_grad", ms(median_time(lambda: f.value_and_grad(x, t))), "")]
    grad_t = median_time(lambda: f.grad(x, t))
    rows[1] = ("symgrad gradient", ms(grad_t), f"{grad_t / obj:.2f}x the objective")
    np_t = median_time(lambda: W.w2_grad_numpy(x, t))
    rows.append(("NumPy, hand gradient", ms(np_t), f"symgrad {np_t / grad_t:.2f}x faster"))
    if nb:
        nt = median_time(lambda: nb["w2"](x, t))
        rows.append(("Numba parallel, hand", ms(nt), f"symgrad {nt / grad_t:.2f}x faster"))
    if jax:
        jg = jax.jit(jax.grad(W.with_module(W.w2, jnp)))
        jx, jt = jnp.asarray(x), jnp.asarray(t)
        jt_ = median_time(lambda: jg(jx, jt).block_until_ready())
        rows.append(("jax.jit(grad)", ms(jt_), f"symgrad {jt_ / grad_t:.2f}x faster"))
    err = float(np.max(np.abs(f.grad(x, t) - W.w2_grad_numpy(x, t))))
    report["w2_err"] = err
    report["W2"] = table(("W2 softmax cross-entropy, n = 1e6", "median", "note"), rows)


def bench_w3(nb, report):
    x = np.random.default_rng(2).uniform(-1, 1, 1000)
    g = sg.grad(W.w3)
    inner = 2000
    sym = median_time(lambda: g(x), inner=inner)
    out = np.empty_like(x)
    rows = [("symgrad", us(sym), ""),
            ("symgrad (out=)", us(median_time(lambda: g(x, out=out), inner=inner)), ""),
            ("NumPy, hand gradient", us(median_time(lambda: W.w3_grad_numpy(x), inner=inner)), "")]
    if nb:
        rows.append(("Numba njit, hand", us(median_time(lambda: nb["w3"](x), inner=inner)), ""))
    if jax:
        jg = jax.jit(jax.grad(W.with_module(W.w3, jnp)))
        jx = jnp.asarray(x)
        rows.append(("jax.jit(grad)", us(median_time(lambda: jg(jx).block_until_ready(), inner=inner)), ""))
    # per-call overhead of the smallest possible call: a scalar function's gradient
    f = sg.grad(W.w1, wrt=(0, 1))
    scalar = median_time(lambda: f(0.5, 1.5), inner=20000)
    native = f._compiled([0.5, 1.5]).prepared["cpu"]
    native_only = median_time(lambda: native([0.5, 1.5]), inner=20000)
    rows.append(("scalar W1 gradient, whole call", us(scalar), "api + native"))
    rows.append(("  of which codegen.llvm (pointer table, ctypes call, results)", us(native_only), ""))
    report["W3"] = table(("W3 Rosenbrock n = 1000 gradient", "median per call", "note"), rows)


COMPILE_SNIPPET = r'''
import sys, time, json
sys.path.insert(0, {here!r}); sys.path.insert(0, {root!r})
import numpy as np
import workloads as W
which, tool = sys.argv[1], sys.argv[2]
x = np.random.default_rng(0).uniform(-1, 1, 1000)
t = np.full(1000, 1e-3)
t0 = time.perf_counter()
if tool == "symgrad":
    import symgrad as sg
    t0 = time.perf_counter()
    if which == "w1":
        sg.grad(W.w1, wrt=(0, 1))(x, x)
    elif which == "w2":
        sg.grad(W.w2_symgrad)(x, t)
    else:
        sg.grad(W.w3)(x)
elif tool == "jax":
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    t0 = time.perf_counter()
    if which == "w1":
        jax.jit(jax.vmap(jax.grad(W.with_module(W.w1, jnp), argnums=(0, 1))))(x, x)[0].block_until_ready()
    elif which == "w2":
        jax.jit(jax.grad(W.with_module(W.w2, jnp)))(x, t).block_until_ready()
    else:
        jax.jit(jax.grad(W.with_module(W.w3, jnp)))(x).block_until_ready()
elif tool == "numba":    # the hand-written gradient, njit (no derivative to build)
    import numba
    t0 = time.perf_counter()
    if which == "w1":
        numba.njit(W.w1_grad_numpy)(x, x)
    elif which == "w2":
        numba.njit(W.w2_grad_numpy)(x, t)
    else:
        numba.njit(W.w3_grad_numpy)(x)
print(json.dumps(time.perf_counter() - t0))
'''


def bench_w4(report):
    snippet = COMPILE_SNIPPET.format(here=HERE, root=os.path.dirname(HERE))
    rows = []
    tools = ["symgrad"] + (["jax"] if jax else []) + (["numba"] if numba else [])
    with tempfile.TemporaryDirectory() as cache:
        for which in ("w1", "w2", "w3"):
            row = [which.upper()]
            for tool in tools:
                env = dict(os.environ, SYMGRAD_CACHE_DIR=cache)
                times = []
                for _ in range(3):
                    env_cold = dict(env, SYMGRAD_NO_CACHE="1")
                    out = subprocess.run([sys.executable, "-c", snippet, which, tool], env=env_cold,
                                         capture_output=True, text=True, timeout=600)
                    times.append(json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0
                                 else float("nan"))
                row.append(ms(float(np.median(times))))
                if tool == "symgrad":   # again with the machine code on disk
                    subprocess.run([sys.executable, "-c", snippet, which, tool], env=env,
                                   capture_output=True, text=True, timeout=600)
                    out = subprocess.run([sys.executable, "-c", snippet, which, tool], env=env,
                                         capture_output=True, text=True, timeout=600)
                    row.append(ms(json.loads(out.stdout.strip().splitlines()[-1])))
            rows.append(row)
    header = ["decorator -> first gradient", "symgrad (no cache)", "symgrad (warm disk cache)"]
    header += ["jax.jit (first call)"] if jax else []
    header += ["Numba njit of the hand gradient (first call)"] if numba else []
    report["W4"] = table(header, rows)


# ADBench GMM as its definition reads (benchmarks/compile_profile.gmm_adbench: the triangle
# stacked from static slices, batched matmul, logsumexp with a max), one process per
# measurement: the first gradient (trace + compile + call, no disk cache), then the gradient
# and the objective per call in the same process.
GMM_SNIPPET = r'''
import sys, time, json
sys.path.insert(0, {here!r}); sys.path.insert(0, {root!r})
import numpy as np
import compile_profile as P
d, tool, reps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
args = P.gmm_args(d)
def medians(grad, obj):
    # gradient and objective calls alternate, so that a core another process takes for a
    # while slows both alike (two blocks of calls gave d = 64 ratios of 2.1 and 3.5 in two
    # runs: the gradient's block without the second core, the objective's with it)
    grad(); obj()
    times = ([], [])
    for _ in range(reps):
        for fn, out in zip((grad, obj), times):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return [sorted(t)[reps // 2] for t in times]
if tool == "symgrad":
    import symgrad as sg
    t0 = time.perf_counter()
    f = sg.differentiate(P.gmm_adbench, wrt=(0, 1, 2))
    g = f.grad(*args)
    first = time.perf_counter() - t0
    f(*args)
    grad, obj = medians(lambda: f.grad(*args), lambda: f(*args))
else:
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    import workloads as W
    fn = W.with_module(P.gmm_adbench, jnp, _lower_triangles=W.with_module(W._lower_triangles, jnp),
                       _logsumexp=W.with_module(P._logsumexp, jnp),
                       _logsumexp_vec=W.with_module(P._logsumexp_vec, jnp))
    jargs = [jnp.asarray(a) for a in args]
    t0 = time.perf_counter()
    jg = jax.jit(jax.grad(fn, argnums=(0, 1, 2)))
    g = [a.block_until_ready() for a in jg(*jargs)]
    first = time.perf_counter() - t0
    jo = jax.jit(fn)
    jo(*jargs).block_until_ready()
    grad, obj = medians(lambda: [a.block_until_ready() for a in jg(*jargs)],
                        lambda: jo(*jargs).block_until_ready())
print(json.dumps(dict(first=first, grad=grad, obj=obj,
                      checksum=[float(np.sum(np.abs(np.asarray(a)))) for a in g])))
'''


def bench_gmm_adbench(report):
    snippet = GMM_SNIPPET.format(here=HERE, root=os.path.dirname(HERE))
    env = dict(os.environ, SYMGRAD_NO_CACHE="1")
    import compile_profile as P
    rows = []
    for d in (2, 10) if QUICK else (2, 10, 20, 64):
        row = ["d = {}, K = {}".format(d, P.GMM_DIMS[d][0])]
        sums = {}
        for tool in ["symgrad"] + (["jax"] if jax else []):
            runs = []
            for _ in range(1 if QUICK or d == 64 else 3):
                out = subprocess.run([sys.executable, "-c", snippet, str(d), tool, "7"], env=env,
                                     capture_output=True, text=True, timeout=1800)
                if out.returncode != 0:
                    runs = None
                    break
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            if runs is None:
                row += ["(failed)"] * 4
                continue
            med = {k: float(np.median([r[k] for r in runs])) for k in ("first", "grad", "obj")}
            sums[tool] = runs[0]["checksum"]
            row += [ms(med["grad"]), ms(med["obj"]), f"{med['grad'] / med['obj']:.2f}",
                    f"{med['first']:.2f} s"]
            if tool == "symgrad":
                row.append(f"{_first_gradient_warm(snippet, d):.2f} s")
        if len(sums) == 2:
            row.append(f"{max(abs(a - b) / abs(b) for a, b in zip(*sums.values())):.1e}")
        rows.append(row)
    header = ["ADBench GMM, n = 1000", "symgrad gradient", "symgrad objective", "ratio",
              "symgrad first gradient", "same, libraries on disk"]
    if jax:
        header += ["jax.jit(grad)", "jax.jit objective", "JAX ratio", "JAX first gradient",
                   "gradient sums, rel. diff"]
    report["GMM"] = table(header, rows)


def _first_gradient_warm(snippet: str, d: int) -> float:
    """The first gradient on a machine that has run symgrad before: a disk cache that holds
    what another program compiled (compile_profile's warmup: the matmul and maths libraries),
    nothing of the GMM itself. Median of 3 (1 at d = 64), each from a fresh copy of it."""
    import compile_profile as P
    times = []
    with tempfile.TemporaryDirectory() as root:
        warm, run = os.path.join(root, "warm"), os.path.join(root, "run")
        env = {k: v for k, v in os.environ.items() if k != "SYMGRAD_NO_CACHE"}
        P.run_child("warmup", dict(env, SYMGRAD_CACHE_DIR=warm), os.path.dirname(HERE))
        for _ in range(1 if QUICK or d == 64 else 3):
            shutil.rmtree(run, ignore_errors=True)
            shutil.copytree(warm, run)
            out = subprocess.run([sys.executable, "-c", snippet, str(d), "symgrad", "1"],
                                 env=dict(env, SYMGRAD_CACHE_DIR=run), capture_output=True,
                                 text=True, timeout=1800, check=True)
            times.append(json.loads(out.stdout.strip().splitlines()[-1])["first"])
    return float(np.median(times))


def bench_compile_profile(report):
    """Per stage: where the time to the first gradient goes (benchmarks/compile_profile.py)."""
    import compile_profile as P
    cases = ["gmm2", "gmm10", "w1", "w2", "w3", "line1000"] if QUICK else \
        ["gmm2", "gmm10", "gmm20", "gmm64", "w1", "w2", "w3", "lstm", "line1000", "line2000"]
    results = P.profile(cases, 1 if QUICK else 3, disk=True, trees={"this": os.path.dirname(HERE)})
    report["compile_profile"] = P.markdown(results)


def bench_w5(report):
    rows = []
    sizes = W.GMM_SIZES[:2] if QUICK else W.GMM_SIZES
    for d, k, n in sizes:
        args = W.gmm_inputs(d, k, n)
        f = sg.differentiate(W.gmm_objective, wrt=(0, 1, 2))
        reps = 7
        obj = median_time(lambda: f(*args), repeats=reps)
        grad = median_time(lambda: f.grad(*args), repeats=reps)
        row = [f"({d}, {k}, {n})", ms(obj), ms(grad), f"{grad / obj:.2f}"]
        if jax and d * d * k * n * 8 < 2 ** 31:   # JAX materialises (n, K, d, d) arrays
            jf = _jax_gmm()
            jo = jax.jit(jf)
            jg = jax.jit(jax.grad(jf, argnums=(0, 1, 2)))
            jargs = [jnp.asarray(a) for a in args]
            jobj = median_time(lambda: jo(*jargs).block_until_ready(), repeats=reps)
            jgrad = median_time(lambda: [a.block_until_ready() for a in jg(*jargs)], repeats=reps)
            row += [ms(jobj), ms(jgrad), f"{jgrad / jobj:.2f}"]
            ref = jg(*jargs)
            mine = f.grad(*args)
            row.append(f"{max(float(np.max(np.abs(np.asarray(a) - b) / (np.abs(b) + 1))) for a, b in zip(ref, mine)):.1e}")
        elif jax:
            row += ["(skipped: > 2 GB intermediates)"] + [""] * 3
        rows.append(row)
    header = ["GMM (d, K, n)", "symgrad objective", "symgrad gradient", "ratio"]
    if jax:
        header += ["jax.jit objective", "jax.jit(grad)", "JAX ratio", "max rel. diff vs JAX"]
    report["W5"] = table(header, rows)


def bench_w5b(report):
    """The same objective written with a batched matmul in (K, n, d) layout
    (examples/gmm_objective.py): no (n, K, d, d) products at all."""
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    import gmm_objective as G
    rows = []
    sizes = W.GMM_SIZES[:2] if QUICK else W.GMM_SIZES
    f = sg.differentiate(G.gmm_objective, wrt=(0, 1, 2))
    for d, k, n in sizes:
        args = G.make_problem(d, k, n)
        obj = median_time(lambda: f(*args), repeats=7)
        grad = median_time(lambda: f.grad(*args), repeats=7)
        rows.append([f"({d}, {k}, {n})", ms(obj), ms(grad), f"{grad / obj:.2f}"])
    report["W5b"] = table(["GMM, batched-matmul form (d, K, n)", "symgrad objective",
                           "symgrad gradient", "ratio"], rows)


def _jax_gmm():
    """The same GMM source with every helper's ``np`` rebound to jax.numpy."""
    return W.with_module(W.gmm_objective, jnp, _logsumexp=W.with_module(W._logsumexp, jnp),
                         _lower_triangles=W.with_module(W._lower_triangles, jnp))


def main():
    report = {}
    # Fresh-process rows (W4, GMM first gradient, the compile profile) must see what an
    # installed copy sees: pip byte-compiles a package when it installs it, while an editable
    # install on a machine with PYTHONDONTWRITEBYTECODE=1 recompiles every module's source in
    # every process (about 40 ms of `compile` in each W4 row, measured).
    import startup
    startup.byte_compile()
    print("machine ...", flush=True)
    report["machine"] = machine()
    bw = bandwidth()
    report["bandwidth"] = bw
    nb = numba_kernels()
    for name, fn in (("W1", lambda: bench_w1(nb, bw, report)), ("W2", lambda: bench_w2(nb, report)),
                     ("W3", lambda: bench_w3(nb, report)), ("W5", lambda: bench_w5(report)),
                     ("W5b", lambda: bench_w5b(report)),
                     ("W4", lambda: bench_w4(report)), ("GMM", lambda: bench_gmm_adbench(report)),
                     ("compile_profile", lambda: bench_compile_profile(report))):
        print(f"{name} ...", flush=True)
        fn()
        print(report[name], flush=True)
    print("accuracy ...", flush=True)
    import accuracy
    report["accuracy"] = accuracy.table(accuracy.measure(200_000 if QUICK else 1_000_000))
    print(report["accuracy"])
    report["stats"] = cpu.stats()
    print("compile time against trip count ...", flush=True)
    import trip_count
    report["trip_count"] = trip_count.measure()
    with open(os.path.join(HERE, "results.json"), "w") as f:
        json.dump(report, f, indent=1)
    write_results(report)
    print("wrote benchmarks/results.json and the tables of benchmarks/RESULTS.md")
    try:
        import plots
        for path in plots.render():
            print("wrote", os.path.relpath(path))
    except ImportError as e:   # matplotlib is in the bench extra only
        print(f"no charts: {e} (pip install '.[bench]')")


BEGIN, END = "<!-- run_all:begin -->", "<!-- run_all:end -->"


def write_results(report):
    """Replace the measured part of RESULTS.md (between the markers), keep the prose."""
    body = "\n\n".join([
        f"Run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}{' (--quick)' if QUICK else ''}",
        "Machine:\n\n" + report["machine"],
        f"Copy bandwidth (NumPy copyto of 80 MB, read + write): {report['bandwidth']:.1f} GB/s",
        "### W1: elementwise gradient\n\n" + report["W1"],
        "Max relative error of symgrad vs the float64 hand gradient: "
        + ", ".join(f"{k} {v:.1e}" for k, v in report["w1_err"].items()),
        "### W2: softmax cross-entropy\n\n" + report["W2"]
        + f"\n\nMax abs. difference from the hand gradient: {report['w2_err']:.1e}",
        "### W3: Rosenbrock latency\n\n" + report["W3"],
        "### W4: compile time\n\n" + report["W4"],
        "### W5: ADBench GMM\n\n" + report["W5"],
        "### W5b: the GMM objective with a batched matmul (examples/gmm_objective.py)\n\n"
        + report["W5b"],
        "### ADBench GMM as its definition reads (fresh processes, no disk cache; first "
        "gradient = trace + compile + call)\n\n" + report["GMM"],
        "### Compile time per stage (benchmarks/compile_profile.py; ms, stages in CPU time)\n\n"
        + report["compile_profile"],
        "### Accuracy of the SIMD math (ulp vs x87 long double)\n\n" + report["accuracy"],
        f"Compile statistics of this run: {report['stats']}",
    ])
    path = os.path.join(HERE, "RESULTS.md")
    text = open(path).read() if os.path.exists(path) else f"# Benchmark results\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text:
        text += f"\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    with open(path, "w") as f:
        f.write(f"{head}{BEGIN}\n{body}\n{END}{tail}")


if __name__ == "__main__":
    main()
