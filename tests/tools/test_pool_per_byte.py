"""benchmarks/pool_per_byte.py (issue 37's table of the pool's time per byte moved) runs,
measures every rank and layout, and counts the bytes each pool moves: x, values and int32
indices. Timings are never asserted: this is a smoke test of the tool."""

from __future__ import annotations

import json
import subprocess
import sys
from math import prod
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pool_per_byte.py"
CASES = ["2-D NCHW", "2-D NHWC", "1-D NCW", "1-D NWC", "3-D NDHWC", "3-D NCDHW",
         "2-D NCHW, 28 wide", "3-D NCDHW, 56 wide"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=600, check=False)


def test_one_round_prints_every_case_and_the_bytes_it_moves(tmp_path):
    path = tmp_path / "rows.json"
    proc = run("--rounds", "1", "--calls", "1", "--json", str(path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(path.read_text())
    assert [r["case"] for r in rows] == CASES
    for row in rows:
        elements = prod(row["shape"])
        outputs = elements // 2 ** (len(row["shape"]) - 2)  # windows of 2 per spatial axis
        assert row["bytes"] == 4 * elements + 4 * outputs + 4 * outputs, row
        assert row["ms"] > 0
        assert f"| {row['case']} | {tuple(row['shape'])} |" in proc.stdout
    assert rows[0]["ratio"] == 1.0 and rows[0]["ratio_range"] == [1.0, 1.0]
    for row in rows:  # one round: its range is the one ratio
        assert row["ratio_range"] == pytest.approx([row["ratio"], row["ratio"]], rel=1e-12)
    assert elements == prod(rows[0]["shape"])  # the same input size in every case


def test_rounds_below_one_are_a_usage_error():
    proc = run("--rounds", "0")
    assert proc.returncode == 2
    assert "--rounds and --calls must be at least 1" in proc.stderr
