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

# The same function on arrays: an elementwise gradient over a million points.
rng = np.random.default_rng(0)
x, y = rng.standard_normal(1_000_000), rng.standard_normal(1_000_000)
f.grad(x, y)                                    # compile for this signature
reference = sg.grad(f.fn, wrt=(0, 1), target="python")
times = []
for _ in range(5):
    start = time.perf_counter()
    gx, gy = f.grad(x, y)
    times.append(time.perf_counter() - start)
rx, ry = reference(x, y)
print(f"\nf.grad on 10^6 points (target={f.target!r}): median {1e3 * sorted(times)[2]:.1f} ms;"
      f" max |difference| from the NumPy reference back end: "
      f"{max(np.max(np.abs(gx - rx)), np.max(np.abs(gy - ry))):.1e}")
