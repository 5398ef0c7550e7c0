"""symgrad quickstart: differentiate an ordinary NumPy function, read the generated derivative,
run it compiled. This is what `make demo` runs."""
import time

import numpy as np

import symgrad as sg


@sg.differentiate(wrt=(0, 1))
def f(x, y):
    z = x * y
    return x * np.sin(y) + np.exp(-x * x) * np.log1p(y * y) + np.tanh(z)


print("The derivative symgrad generated (f.grad.source):\n")
print(f.grad.source_for(1.0, 2.0))

print("Value and gradient at (x, y) = (1, 2):")
print("  f(1, 2)      =", f(1.0, 2.0))
print("  f.grad(1, 2) =", f.grad(1.0, 2.0))
print("  max relative error vs central differences:", f"{sg.check_grad(f, 1.0, 2.0, wrt=(0, 1)):.1e}")

# The same function on arrays: an elementwise gradient over a million points, compiled
# (target="cpu", LLVM) against the generated NumPy source (target="python"), side by side.
rng = np.random.default_rng(0)
x, y = rng.standard_normal(1_000_000), rng.standard_normal(1_000_000)
reference = sg.grad(f.fn, wrt=(0, 1), target="python")


def median_ms(fn, runs=7):
    fn(x, y)                                    # compile for this signature
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(x, y)
        times.append(time.perf_counter() - start)
    return 1e3 * sorted(times)[runs // 2]


compiled_ms, numpy_ms = median_ms(f.grad), median_ms(reference)
(gx, gy), (rx, ry) = f.grad(x, y), reference(x, y)
print(f"\nf.grad on 10^6 points: compiled (target={f.target!r}) {compiled_ms:.1f} ms, "
      f"generated NumPy {numpy_ms:.1f} ms ({numpy_ms / compiled_ms:.1f}x); "
      f"max |difference| {max(np.max(np.abs(gx - rx)), np.max(np.abs(gy - ry))):.1e}")
optimized = f.grad.llvm_ir(x, y, optimized=True).splitlines()
fused_multiply_adds = sum("@llvm.fmuladd.v" in line for line in optimized)
far_checks = [line.strip() for line in optimized if "call <" in line and "_far" in line]
library_calls = [line.strip() for line in optimized
                 if "call <" in line and "@_ZGV" in line and "_far" not in line]
print("\nThe compiled gradient's optimised LLVM IR (f.grad.llvm_ir(x, y, optimized=True)):")
print(f"  sin, cos, exp, log1p and tanh are symgrad's own vectorised code, inlined: "
      f"{fused_multiply_adds} vector fused multiply-adds")
print(f"  {len(far_checks)} vector calls check for arguments beyond 2^21 (a Payne-Hanek reduction),"
      f" e.g.\n    {far_checks[0] if far_checks else '(none)'}")
print(f"  {len(library_calls)} calls into glibc's libmvec")
