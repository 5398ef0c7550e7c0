"""The timing helper every benchmark script shares: seconds per call as the median of timed
batches, after a warm-up call (compilation, page faults and caches are not what we time)."""
from __future__ import annotations

import statistics
import time

# batches when a caller names none (run_all's rows)
REPEATS = 7


def median_time(fn, repeats: int = REPEATS, inner: int = 1) -> float:
    """Seconds per call of ``fn()``: one untimed call, then the median over ``repeats``
    batches of ``inner`` calls each (a batch of many calls times what one call is too short
    for the clock to resolve)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        times.append((time.perf_counter() - start) / inner)
    return statistics.median(times)
