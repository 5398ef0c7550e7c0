"""Long runs of the random-program check (``make fuzz N=100000``).

Programs come from ``tests/program_gen.py`` (the generator the test suite runs at a fixed seed
range); each seed is checked in a worker process, so a segfault or a hang costs only that
program: the worker is replaced and the seed is recorded as ``crash`` or ``hang``. Workers are
replaced every ``--recycle`` programs so the compiled code they accumulate stays bounded.

Every outcome is appended to ``<out>/results.jsonl`` (one line per seed); a rerun with the same
``--out`` skips the seeds already there, so an interrupted run resumes. Failing programs are
written to ``<out>/<outcome>/seed_<seed>.py`` with the failure as a header comment. Counts by
outcome are printed every ``--report`` seconds and at the end; the exit status is 1 when any
program failed.

    python benchmarks/fuzz.py --n 100000 --jobs 2 --out fuzz-out
    python benchmarks/fuzz.py --seeds 123,456 --out fuzz-out     # rerun given seeds
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from multiprocessing.connection import wait

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

import program_gen  # noqa: E402


def _worker(conn, max_statements, max_depth):
    """Check seeds sent over ``conn`` until it closes; reply (seed, kind, detail, fd_checked)."""
    os.environ["SYMGRAD_NO_CACHE"] = "1"     # 10^5 programs must not fill the disk cache
    folder = tempfile.mkdtemp(prefix="symgrad-fuzz-")
    while True:
        try:
            seed = conn.recv()
        except EOFError:
            return
        program = program_gen.generate(seed, max_statements, max_depth)
        try:
            outcome = program_gen.check(program, folder)
        except Exception as e:   # an exception the check did not expect from symgrad
            outcome = program_gen.Outcome("wrong-exception", f"{type(e).__name__}: {e}")
        conn.send((seed, outcome.kind, outcome.detail, outcome.fd_checked))


class _Slot:
    """One worker process and the seed it is running."""

    def __init__(self, ctx, args):
        self.ctx, self.args = ctx, args
        self.start()

    def start(self):
        parent, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_worker, args=(child, self.args.max_statements,
                                                           self.args.max_depth), daemon=True)
        self.proc.start()
        child.close()
        self.conn, self.seed, self.since, self.done = parent, None, 0.0, 0

    def send(self, seed):
        self.conn.send(seed)
        self.seed, self.since = seed, time.monotonic()

    def replace(self):
        self.conn.close()
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.start()


def _save(out, seed, kind, detail, args):
    program = program_gen.generate(seed, args.max_statements, args.max_depth)
    folder = os.path.join(out, kind)
    os.makedirs(folder, exist_ok=True)
    header = [f"# outcome: {kind}", f"# seed: {seed}  dtype: {program.dtype}  sizes: "
              f"{program.sizes}  wrt: {program.wrt!r}",
              f"# may refuse: {program.may_refuse}  must refuse: {program.must_refuse}",
              f"# rerun: python benchmarks/fuzz.py --seeds {seed} --max-statements "
              f"{args.max_statements} --max-depth {args.max_depth}"]
    header += ["# " + line for line in detail.splitlines()[:40]]
    with open(os.path.join(folder, f"seed_{seed}.py"), "w") as f:
        f.write("\n".join(header) + "\n" + program.text)


def _done_seeds(results_path):
    done = {}
    if os.path.exists(results_path):
        with open(results_path) as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:   # a line cut short by an interrupted run
                    continue
                done[row["seed"]] = row["kind"]
    return done


def _print_counts(counts, fd, started, total):
    elapsed = time.monotonic() - started
    done = sum(counts.values())
    parts = [f"{kind}={counts[kind]}" for kind in program_gen.OUTCOMES if counts[kind]]
    print(f"[{done}/{total} in {elapsed:.0f}s] " + " ".join(parts)
          + f" (finite differences compared: {fd})", flush=True)


def run(args) -> int:
    os.makedirs(args.out, exist_ok=True)
    results_path = os.path.join(args.out, "results.jsonl")
    done = _done_seeds(results_path)
    seeds = ([int(s) for s in args.seeds.split(",")] if args.seeds
             else list(range(args.start, args.start + args.n)))
    if args.seeds:
        done = {}
    wanted = set(seeds)
    counts = collections.Counter(kind for seed, kind in done.items() if seed in wanted)
    pending = collections.deque(s for s in seeds if s not in done)
    ctx = mp.get_context("spawn")    # a forked child would inherit LLVM and thread state
    slots = [_Slot(ctx, args) for _ in range(min(args.jobs, len(pending)) or 1)]
    fd, started, last_report = 0, time.monotonic(), time.monotonic()
    with open(results_path, "a") as results:
        def record(seed, kind, detail, fd_checked):
            nonlocal fd
            counts[kind] += 1
            fd += bool(fd_checked)
            results.write(json.dumps({"seed": seed, "kind": kind, "detail": detail[:2000]}) + "\n")
            results.flush()
            if kind in program_gen.FAILURES:
                _save(args.out, seed, kind, detail, args)

        while pending or any(s.seed is not None for s in slots):
            for slot in slots:
                if slot.seed is None and pending:
                    if slot.done >= args.recycle:
                        slot.replace()
                    slot.send(pending.popleft())
            busy = {s.conn: s for s in slots if s.seed is not None}
            for conn in wait(list(busy), timeout=1.0):
                slot = busy[conn]
                try:
                    seed, kind, detail, fd_checked = conn.recv()
                except (EOFError, OSError):   # the worker died: a crash of that program
                    code = slot.proc.exitcode if not slot.proc.is_alive() else None
                    record(slot.seed, "crash", f"worker died (exit code {code})", False)
                    slot.replace()
                    continue
                record(seed, kind, detail, fd_checked)
                slot.seed, slot.done = None, slot.done + 1
            now = time.monotonic()
            for slot in slots:
                if slot.seed is not None and now - slot.since > args.timeout:
                    record(slot.seed, "hang", f"no result after {args.timeout} s", False)
                    slot.replace()
            if now - last_report > args.report:
                _print_counts(counts, fd, started, len(seeds))
                last_report = now
    for slot in slots:
        slot.conn.close()
        slot.proc.join(timeout=5)
    _print_counts(counts, fd, started, len(seeds))
    failed = sum(counts[k] for k in program_gen.FAILURES)
    if failed:
        print(f"{failed} failing programs saved under {args.out}/<outcome>/")
    return 1 if failed else 0


def _run_interruptible(args) -> int:
    try:
        return run(args)
    except KeyboardInterrupt:   # results.jsonl holds every finished seed: a rerun resumes
        print(f"interrupted; rerun with --out {args.out} to resume", flush=True)
        return 130


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=100_000, help="programs to run")
    p.add_argument("--start", type=int, default=1_000_000,
                   help="first seed (the test suite uses seeds from 0)")
    p.add_argument("--seeds", default="", help="comma-separated seeds to (re)run instead")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
    p.add_argument("--out", default="fuzz-out", help="folder for results and failing programs")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds before a hang")
    p.add_argument("--recycle", type=int, default=300, help="programs per worker process")
    p.add_argument("--report", type=float, default=60.0, help="seconds between count lines")
    p.add_argument("--max-statements", type=int, default=5)
    p.add_argument("--max-depth", type=int, default=2)
    return _run_interruptible(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
