"""benchmarks/plots.py reads the stored results.json (parsing needs no matplotlib; drawing is
checked where matplotlib, from the bench extra, is installed)."""
import importlib.util
import json
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import plots  # noqa: E402


def test_times_parse_with_their_units():
    assert plots.seconds("877.98 ms") == pytest.approx(0.87798)
    assert plots.seconds("7.06 µs") == pytest.approx(7.06e-6)
    assert plots.seconds("1.40x the objective") is None


def test_panels_come_from_the_stored_tables():
    report = json.loads((BENCH / "results.json").read_text())
    panels = dict(plots.workload_panels(report))
    w1 = dict(panels["W1 elementwise gradient, 1e7 float64"])
    header, rows = plots.parse_table(report["W1"])
    stored = next(r for r in rows if r[0] == "float64" and r[1] == "symgrad (fresh outputs)")
    assert w1["symgrad (fresh outputs)"] == plots.seconds(stored[2])
    assert all(v > 0 for _, bars in panels.items() for _, v in bars)


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="matplotlib (bench extra) not installed")
def test_charts_are_written(tmp_path):
    written = plots.render(str(BENCH / "results.json"), str(tmp_path))
    assert sorted(pathlib.Path(p).name for p in written) == ["trip_count.png", "workloads.png"]
    for p in written:
        assert pathlib.Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
