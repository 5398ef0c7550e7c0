"""Three softmax cross-entropies, as in TensorFlow: naive, max-subtracted, and max-subtracted
behind stop_gradient. symgrad shows each gradient's source: the stop_gradient version contains
no derivative of the max. The naive one overflows at x ~ 1000; the stable ones do not."""
import numpy as np

import symgrad as sg


def naive(x, t):
    return -sg.reduce_sum(t * sg.log(sg.exp(x) / sg.reduce_sum(sg.exp(x))))


def max_subtracted(x, t):
    z = x - sg.reduce_max(x)
    return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))


def stop_gradient_max(x, t):
    z = x - sg.stop_gradient(sg.reduce_max(x))
    return -sg.reduce_sum(t * (z - sg.log(sg.reduce_sum(sg.exp(z)))))


VARIANTS = [naive, max_subtracted, stop_gradient_max]

if __name__ == "__main__":
    small = np.array([1.0, 2.0, 0.5, -1.0])
    large = small + 1000.0
    target = np.array([0.0, 1.0, 0.0, 0.0])
    import warnings
    warnings.simplefilter("ignore", RuntimeWarning)   # the naive version overflows on purpose
    results = {}
    for fn in VARIANTS:
        g = sg.grad(fn)
        print(f"--- gradient of {fn.__name__} ---")
        print(g.source_for(small, target))
        results[fn.__name__] = (g(small, target), g(large, target))
    print("gradient at x (moderate values):")
    for name, (at_small, _) in results.items():
        print(f"  {name:18s}", np.array2string(at_small, precision=6))
    print("gradient at x + 1000:")
    for name, (_, at_large) in results.items():
        print(f"  {name:18s}", np.array2string(at_large, precision=6))
    stable = [results["max_subtracted"], results["stop_gradient_max"]]
    assert np.all(np.isnan(results["naive"][1])), "the naive softmax should overflow to nan"
    assert all(np.all(np.isfinite(r[1])) for r in stable)
    np.testing.assert_allclose(results["naive"][0], stable[0][0], rtol=1e-12)
    np.testing.assert_allclose(stable[0][1], stable[1][1], rtol=1e-12)
    np.testing.assert_allclose(stable[0][0], stable[0][1], rtol=1e-9)   # shift invariance
    print("naive overflows to nan at x + 1000; both stable versions agree wherever finite.")
    print("\nWhat the stop_gradient removed (sg.grad(stop_gradient_max).stopped(x, t)):")
    print(sg.grad(stop_gradient_max).stopped(small, target))
