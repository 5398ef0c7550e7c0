"""TensorFlow's clipping functions in symgrad: the same results as TF, eagerly on NumPy arrays
and inside differentiated functions (where they are differentiated like any other code).

    python examples/clipping.py
"""
import numpy as np

import symgrad as sg

np.set_printoptions(precision=4, suppress=True)

g1, g2 = np.array([3.0, -4.0]), np.array([[0.5, 1.0], [2.0, -0.1]])

print("clip_by_value([3, -4], -1, 1)      ", sg.clip_by_value(g1, -1.0, 1.0))
print("clip_by_norm([3, -4], 1)           ", sg.clip_by_norm(g1, 1.0), "  (norm 5 -> 1)")
print("clip_by_norm(g2, 1, axes=1)        ", sg.clip_by_norm(g2, 1.0, axes=1).tolist(), "  (row by row)")
clipped, norm = sg.clip_by_global_norm([g1, None, g2], 2.0)
print(f"clip_by_global_norm([g1, None, g2], 2): global norm {float(norm):.4f}; None passes through:",
      clipped[1] is None)
print("   after clipping the global norm is", float(sg.global_norm(clipped)))
print("zero norm: inputs unchanged        ", sg.clip_by_global_norm([np.zeros(2)], 1.0)[0][0])
print("inf norm: every value NaN (as TF)  ", sg.clip_by_global_norm([np.array([np.inf, 1.0]), g2], 1.0)[0][1].tolist())


# Inside a differentiated function: a loss on a clipped update direction.
def clipped_step_loss(x, target):
    step, _ = sg.clip_by_global_norm([target - x], 0.5)
    return np.sum((x + step[0] - target) ** 2)


f = sg.differentiate(clipped_step_loss)
x, target = np.array([0.0, 0.0, 0.0]), np.array([1.0, 2.0, 2.0])
print(f"\nloss {f(x, target):.4f}, gradient {f.grad(x, target)}, "
      f"max relative error vs central differences {sg.check_grad(f, x, target):.1e}")
print("\nThe derivative symgrad generated (clip_by_global_norm inlined and differentiated):\n")
print(f.grad.source)
