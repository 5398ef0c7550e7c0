"""Charts of a benchmark run, drawn from ``benchmarks/results.json`` alone (no benchmark runs):

* ``workloads.png``: time per workload, symgrad against its peers (W1 float64/float32, W2, W3,
  W4 first gradient, W5 GMM gradient), one panel each, from the tables ``run_all.py`` stored;
* ``trip_count.png``: first-call time (trace + differentiate + compile) against trip count of a
  scalar recurrence, from ``trip_count.py``'s rows, with the IR size on a second axis.

``make bench`` calls this after ``run_all.py``; matplotlib comes from the ``bench`` extra and is
never needed by ``make test``. Usage: python benchmarks/plots.py [results.json] [output folder]
"""
from __future__ import annotations

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"s": 1.0, "ms": 1e-3, "µs": 1e-6, "us": 1e-6, "ns": 1e-9}
SYMGRAD_COLOUR, PEER_COLOUR, BOUND_COLOUR = "#1f77b4", "#9e9e9e", "#2ca02c"


def parse_table(markdown: str) -> tuple[list[str], list[list[str]]]:
    """A markdown table -> (header cells, rows of cells)."""
    lines = [line.strip() for line in markdown.strip().splitlines() if line.strip().startswith("|")]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    return cells[0], [row for row in cells[2:]]


def seconds(text: str) -> float | None:
    """``"877.98 ms"`` -> 0.87798; ``None`` for a cell that is not a time."""
    m = re.fullmatch(r"([0-9.]+)\s*(s|ms|µs|us|ns)", text.strip())
    return float(m.group(1)) * UNITS[m.group(2)] if m else None


def _colour(label: str) -> str:
    if "symgrad" in label:
        return SYMGRAD_COLOUR
    return BOUND_COLOUR if "bound" in label else PEER_COLOUR


def workload_panels(report: dict) -> list[tuple[str, list[tuple[str, float]]]]:
    """(title, [(implementation, seconds)]) per panel, from the stored tables."""
    panels = []
    if "W1" in report:
        _, rows = parse_table(report["W1"])
        for dtype in ("float64", "float32"):
            bars = [(r[1], seconds(r[2])) for r in rows if r[0] == dtype and seconds(r[2])]
            if bars:
                panels.append((f"W1 elementwise gradient, 1e7 {dtype}", bars))
    for key, title in (("W2", "W2 softmax cross-entropy gradient, 1e6"),
                       ("W3", "W3 Rosenbrock gradient, n = 1000, per call")):
        if key in report:
            _, rows = parse_table(report[key])
            bars = [(r[0], seconds(r[1])) for r in rows
                    if seconds(r[1]) and not r[0].startswith(("scalar", "of which"))
                    and r[0] not in ("symgrad objective", "symgrad value_and_grad")]
            panels.append((title, bars))
    if "W4" in report:
        header, rows = parse_table(report["W4"])
        bars = [(f"{r[0]}: {h}", seconds(c)) for r in rows for h, c in zip(header[1:], r[1:])
                if seconds(c)]
        panels.append(("W4 decorator -> first gradient, fresh process", bars))
    if "W5" in report:
        _, rows = parse_table(report["W5"])
        bars = []
        for r in rows:
            bars.append((f"symgrad d,K,n={r[0]}", seconds(r[2])))
            if len(r) > 5 and seconds(r[5]):
                bars.append((f"jax.jit d,K,n={r[0]}", seconds(r[5])))
        panels.append(("W5 ADBench GMM gradient", [b for b in bars if b[1]]))
    return [p for p in panels if p[1]]


def _label(value: float) -> str:
    for unit in ("s", "ms", "µs", "ns"):
        if value >= UNITS[unit] or unit == "ns":
            return f"{value / UNITS[unit]:.3g} {unit}"
    return f"{value:.3g} s"


def draw_workloads(report: dict, path: str, plt) -> str:
    panels = workload_panels(report)
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.0 + sum(0.32 * len(b) + 0.7 for _, b in panels)),
                             gridspec_kw={"height_ratios": [len(b) + 1 for _, b in panels]})
    axes = axes if len(panels) > 1 else [axes]
    for ax, (title, bars) in zip(axes, panels):
        labels, values = [b[0] for b in bars], [b[1] for b in bars]
        ax.barh(range(len(bars)), values, color=[_colour(lbl) for lbl in labels])
        ax.set_yticks(range(len(bars)), labels, fontsize=8)
        ax.invert_yaxis()
        for i, v in enumerate(values):
            ax.text(v, i, " " + _label(v), va="center", fontsize=7)
        if max(values) > 50 * min(values):   # e.g. GMM sizes: a log axis keeps small bars visible
            ax.set_xscale("log")
            ax.set_xlim(min(values) / 2, max(values) * 4)
            title += " (log scale)"
        else:
            ax.set_xlim(0, max(values) * 1.25)
        ax.set_xticks([], minor=True)
        ax.set_xticks([])
        ax.set_title(title, fontsize=9, loc="left")
        for side in ("top", "right", "bottom"):
            ax.spines[side].set_visible(False)
    fig.suptitle("Time per workload (median; shorter is faster; symgrad in blue)", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_trip_count(report: dict, path: str, plt) -> str | None:
    rows = report.get("trip_count")
    if not rows:
        return None
    trips = [r["trips"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(trips, [r["cpu_seconds"] * 1e3 for r in rows], "o-", color=SYMGRAD_COLOUR,
            label='target="cpu" (trace + differentiate + LLVM compile)')
    ax.plot(trips, [r["python_seconds"] * 1e3 for r in rows], "s--", color=PEER_COLOUR,
            label='target="python" (trace + differentiate + NumPy source)')
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(trips, [str(t) for t in trips])
    ax.set_xlabel("trip count of the loop (static range(n), unrolled while tracing)")
    ax.set_ylabel("first gradient call, ms (fresh process, no cache)")
    ax2 = ax.twinx()
    ax2.plot(trips, [r["ir_nodes"] for r in rows], ":", color=BOUND_COLOUR, label="IR nodes (right)")
    ax2.set_yscale("log")
    ax2.set_ylabel("IR nodes of the gradient")
    lines = ax.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax.legend(lines, labels, fontsize=7, loc="upper left")
    ax.set_title("Compile time grows with the trip count: static loops are unrolled today",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def render(results_path: str = os.path.join(HERE, "results.json"), out_dir: str = HERE) -> list[str]:
    """Write the PNGs beside RESULTS.md; returns the paths written."""
    import matplotlib
    matplotlib.use("Agg")   # files only, no display
    import matplotlib.pyplot as plt
    with open(results_path) as f:
        report = json.load(f)
    written = [draw_workloads(report, os.path.join(out_dir, "workloads.png"), plt),
               draw_trip_count(report, os.path.join(out_dir, "trip_count.png"), plt)]
    return [p for p in written if p]


if __name__ == "__main__":
    args = sys.argv[1:]
    for p in render(*args):
        print("wrote", p)
