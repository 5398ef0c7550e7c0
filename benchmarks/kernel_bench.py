"""The matmul kernel against np.matmul, and the ADBench GMM objective and gradient, timed in
one process (issue 13, item 3). Prints one JSON object, so that two checkouts can be compared
side by side by running each interpreter in turn (see ``--compare``).

    python benchmarks/kernel_bench.py [--reps 7] [--threads N] [--sizes 64,256,512,1024]
        [--gmm 2,10,20,64]
    python benchmarks/kernel_bench.py --compare OTHER_PYTHON [--rounds 2]  # A B A B, medians

Matmul: square float64 and float32 products, medians of ``reps`` calls after a warm-up (the
first call compiles), next to NumPy's BLAS with the same thread count (``--threads`` sets
SYMGRAD_NUM_THREADS and OPENBLAS_NUM_THREADS before NumPy loads). GMM: ``gmm_objective`` of
examples/gmm_objective.py (triangle gathered from icf, batched matmul in (K, n, d) layout,
logsumexp with a max) and of benchmarks/workloads.py (the (n, K, d, d) broadcast form),
objective and gradient with respect to (alphas, means, icf); with ``--jax``, ``jax.jit`` of the
same batched-matmul source (``np`` rebound to jax.numpy, ``sg.stop_gradient`` to
``jax.lax.stop_gradient``, float64), timed in the same loop as ours, call by call.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from timing import median_time

HERE = os.path.dirname(os.path.abspath(__file__))


def bench_matmul(sizes, reps):
    import numpy as np
    import symgrad as sg

    def mm(a, b):
        return a @ b

    f = sg.differentiate(mm)
    rng = np.random.default_rng(0)
    out = {}
    for n in sizes:
        for dt in ("float64", "float32"):
            a = rng.normal(size=(n, n)).astype(dt)
            b = rng.normal(size=(n, n)).astype(dt)
            f(a, b)
            r = max(3, reps if n <= 512 else reps // 2)
            ours, theirs = [], []
            for _ in range(r):   # alternated, so load hits both alike
                ours.append(1e3 * median_time(lambda: f(a, b), 1))
                theirs.append(1e3 * median_time(lambda: np.matmul(a, b), 1))
            out[f"matmul {n} {dt}"] = [sorted(ours)[r // 2], sorted(theirs)[r // 2]]
    return out


def jax_gmm(G):
    """``G.gmm_objective`` under jax.jit: the same source with its helpers' ``np`` rebound."""
    import types
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    stop = types.SimpleNamespace(stop_gradient=jax.lax.stop_gradient)

    def rebind(fn, **extra):
        g = dict(fn.__globals__, np=jnp, sg=stop, **extra)
        return types.FunctionType(fn.__code__, g, fn.__name__, fn.__defaults__, fn.__closure__)
    f = rebind(G.gmm_objective, logsumexp=rebind(G.logsumexp),
               logsumexp_columns=rebind(G.logsumexp_columns))
    static = (4, 5, 7)     # wishart_gamma, wishart_m, log_gamma_term: Python numbers (math.log)
    objective = jax.jit(f, static_argnums=static)
    gradient = jax.jit(jax.grad(f, argnums=(0, 1, 2)), static_argnums=static)

    def prepare(args):
        jargs = tuple(jnp.asarray(a) if isinstance(a, G.np.ndarray) else a for a in args)
        return (lambda: objective(*jargs).block_until_ready(),
                lambda: jax.block_until_ready(gradient(*jargs)), lambda: gradient(*jargs))
    return prepare


def alternated_ms(fns, reps):
    """Medians of ``reps`` calls of each of ``fns``, called in turn (so load hits all alike)."""
    for fn in fns:
        fn()
    times = [[] for _ in fns]
    for _ in range(reps):
        for fn, ts in zip(fns, times):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    return [1e3 * sorted(ts)[len(ts) // 2] for ts in times]


def bench_gmm(dims, reps, with_jax=False):
    sys.path.insert(0, os.path.join(HERE, "..", "examples"))
    sys.path.insert(0, HERE)
    import gmm_objective as G
    import symgrad as sg
    import workloads as W
    sizes = {d: (d, k, n) for d, k, n in W.GMM_SIZES}
    out = {}
    fb = sg.differentiate(G.gmm_objective, wrt=(0, 1, 2))
    fw = sg.differentiate(W.gmm_objective, wrt=(0, 1, 2))
    jax_prepare = jax_gmm(G) if with_jax else None
    for d in dims:
        _, k, n = sizes[d]
        args = G.make_problem(d, k, n)
        t = time.perf_counter()
        fb.grad(*args)
        first = time.perf_counter() - t
        fns = [lambda: fb(*args), lambda: fb.grad(*args)]
        if jax_prepare is not None:
            j_obj, j_grad, j_value = jax_prepare(args)
            for ours, theirs in zip(fb.grad(*args), j_value()):   # the same gradient first
                G.np.testing.assert_allclose(ours, G.np.asarray(theirs), rtol=1e-9, atol=1e-9)
            fns += [j_obj, j_grad]
        times = alternated_ms(fns, reps)
        out[f"gmm matmul form d={d} objective"] = times[0]
        out[f"gmm matmul form d={d} gradient"] = times[1]
        if jax_prepare is not None:
            out[f"gmm matmul form d={d} jax objective"] = times[2]
            out[f"gmm matmul form d={d} jax gradient"] = times[3]
        out[f"gmm matmul form d={d} first gradient (s)"] = first
        if d <= 20:
            wargs = W.gmm_inputs(d, k, n)
            out[f"gmm broadcast form d={d} objective"] = 1e3 * median_time(lambda: fw(*wargs), reps)
            out[f"gmm broadcast form d={d} gradient"] = 1e3 * median_time(lambda: fw.grad(*wargs), reps)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--sizes", default="64,256,512,1024")
    ap.add_argument("--gmm", default="2,10,20,64")
    ap.add_argument("--jax", action="store_true", help="jax.jit of the same GMM source too")
    ap.add_argument("--compare", default=None, help="another interpreter (checkout) to run too")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    if args.compare:
        return compare(args)
    if args.threads:
        for var in ("SYMGRAD_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
            os.environ[var] = str(args.threads)
    result = {"load": os.getloadavg()[0]}
    sizes = [int(s) for s in args.sizes.split(",") if s]
    dims = [int(s) for s in args.gmm.split(",") if s]
    result.update(bench_matmul(sizes, args.reps))
    result.update(bench_gmm(dims, args.reps, args.jax))
    print(json.dumps(result))


def compare(args):
    """Run this checkout and ``--compare``'s in turn, ``rounds`` times; medians per row."""
    passed = [a for a in sys.argv[1:]]
    i = passed.index("--compare")
    del passed[i:i + 2]
    runs = {"this": [], "other": []}
    for _ in range(args.rounds):
        for who, py in (("this", sys.executable), ("other", args.compare)):
            out = subprocess.run([py, os.path.abspath(__file__)] + passed, capture_output=True,
                                 text=True, check=True)
            runs[who].append(json.loads(out.stdout.strip().splitlines()[-1]))
    keys = list(runs["this"][0])
    for key in keys:
        def med(who):
            vals = sorted(r[key] if not isinstance(r[key], list) else r[key][0] for r in runs[who])
            return vals[len(vals) // 2]
        line = f"{key}: this {med('this'):.3f}  other {med('other'):.3f}"
        if isinstance(runs["this"][0][key], list):
            blas = sorted(r[key][1] for r in runs["this"] + runs["other"])
            line += f"  numpy {blas[len(blas) // 2]:.3f}"
        print(line)


if __name__ == "__main__":
    main()
