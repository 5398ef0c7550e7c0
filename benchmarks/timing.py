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


def median_ms(fn, x, calls: int) -> float:
    """Milliseconds per call of ``fn(x)``: one untimed call, then the median of ``calls``."""
    fn(x)
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn(x)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def interleaved(script: str, cases, args: list, rounds: int) -> dict:
    """{case: [its result in each round]}: every case in a fresh process of ``script --child
    case *args`` (which prints its result as JSON on its last line), the cases alternating
    round by round so that a change of the machine's load touches each alike."""
    import json
    import subprocess
    import sys
    results: dict = {c: [] for c in cases}
    for _ in range(rounds):
        for case in cases:
            out = subprocess.run([sys.executable, script, "--child", case, *map(str, args)],
                                 check=True, capture_output=True, text=True).stdout
            results[case].append(json.loads(out.strip().splitlines()[-1]))
    return results


def print_ms_table(results: dict, digits: int) -> None:
    print("| case | ms per call (per process) |")
    print("|---|---|")
    for case, ms in results.items():
        print(f"| {case} | {' / '.join(f'{m:.{digits}f}' for m in ms)} |")
