"""Programs of every kind for tests/test_elf_load.py, run in a fresh process:

    python elf_load_programs.py elf|mcjit

prints one JSON line: each program's results (sha256 of their bytes, and their sum), jit's
statistics, whether llvmlite.binding was imported and whether LLVM's engine was made. ``mcjit``
links every object with LLVM's engine instead of codegen.elf_load."""
import hashlib
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "benchmarks"))

import symgrad as sg  # noqa: E402
import workloads as W  # noqa: E402
from test_tiling import gmm, gmm_args  # noqa: E402


def matmul_tanh(a, b):          # links the blocked matmul library (a library of its own)
    return np.sum(np.tanh(a @ b))


def f32_maths(x):
    return np.sum(np.exp(x) * np.sin(x) + np.log1p(x * x) + np.tanh(x) + np.cbrt(x))


def far_sines(x):              # huge arguments: the far-argument library of sin/cos
    return np.sum(np.sin(x * 1e22) + np.cos(x))


def loop(x):
    for i in range(6):
        x = 0.9 * x + np.sin(x) * 0.1
    return np.sum(x * x)


def newton_sqrt(a):
    x = a
    while abs(x * x - a) > 1e-12 * a:
        x = 0.5 * (x + a / x)
    return x


def inv_sum(a):
    return np.sum(np.linalg.inv(a) * np.arange(a.shape[-1]))


def solve_sum(a, b):
    return np.sum(np.linalg.solve(a, b))


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def softplus_sum(x):
    return np.sum(np.log1p(np.exp(x)))


def programs():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, 1000)
    t = np.full(1000, 1e-3)
    a = rng.standard_normal((64, 64))
    m = rng.standard_normal((4, 4)) + 4 * np.eye(4)
    return {
        "w1": lambda: sg.grad(W.w1, wrt=(0, 1))(x, x),
        "w2": lambda: sg.grad(W.w2_symgrad)(x, t),
        "w3": lambda: sg.grad(W.w3)(x),
        "gmm d=2": lambda: sg.grad(gmm, wrt=(0, 1, 2))(*gmm_args(3, 20, 2)),
        "matmul": lambda: sg.grad(matmul_tanh, wrt=(0, 1))(a, a.T),
        "float32": lambda: sg.grad(f32_maths)(x.astype(np.float32)),
        "far sin/cos": lambda: sg.grad(far_sines)(x),
        "loop": lambda: sg.grad(loop)(x),
        "while": lambda: sg.grad(newton_sqrt)(2.0),
        "inv": lambda: sg.grad(inv_sum)(m),
        "solve": lambda: sg.grad(solve_sum, wrt=(0, 1))(m, x[:4]),
        "vmap": lambda: sg.vmap(sg.grad(softplus_sum))(a[:8]),
        "hessian": lambda: sg.hessian(rosenbrock)(x[:6]),
    }


def digest(value):
    parts = value if isinstance(value, tuple) else (value,)
    h = hashlib.sha256()
    total = 0.0
    for p in parts:
        p = np.ascontiguousarray(p)
        h.update(str(p.dtype).encode() + str(p.shape).encode() + p.tobytes())
        total += float(np.sum(p))
    return [h.hexdigest(), total]


def main():
    from symgrad.codegen import jit, linker
    linker.USE_ELF_LOADER = sys.argv[1] == "elf"
    results = {name: digest(run()) for name, run in programs().items()}
    print(json.dumps({"results": results, "stats": jit.STATS,
                      "binding": "llvmlite.binding" in sys.modules,
                      "engine": linker.has_engine()}))


if __name__ == "__main__":
    main()
