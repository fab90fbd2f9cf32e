"""benchmarks/pool_rows.cc (the CPU pool's channels-first loops alone, for instruction
counts) builds against today's ffi/cpu/max_pool.cc and its results are a plain scan's in
every rank, including rows of a width that is not a whole number of vector blocks. Timings
are never asserted: this is a smoke test of the tool. Slow: it compiles the pool at -O3."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def pool_rows(tmp_path_factory) -> Path:
    binary = tmp_path_factory.mktemp("pool_rows") / "pool_rows"
    cxx = shutil.which("c++") or shutil.which("g++")
    assert cxx, "no C++ compiler: the package's build needs one too"
    # The command in the tool's first lines.
    subprocess.run([cxx, "-std=c++17", "-O3", "-falign-loops=64", "-w", "-Iffi",
                    "-Iffi/third_party", "-o", str(binary), "benchmarks/pool_rows.cc"],
                   cwd=ROOT, check=True, timeout=600)
    return binary


@pytest.mark.parametrize("shape", [["1", "2", "3", "17"], ["2", "2", "3", "9", "28"],
                                   ["2", "1", "2", "8", "56"], ["3", "2", "3", "6", "10", "29"]],
                         ids=["1d", "2d-28", "2d-56", "3d-29"])
def test_results_are_a_plain_scans(pool_rows, shape):
    proc = subprocess.run([str(pool_rows), *shape, "2"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.fullmatch(r"[0-9.]+ ms, [0-9.]+ ns per KB moved, 0 of \d+ results unlike a "
                        r"plain scan\n", proc.stdout)


def test_a_wrong_argument_count_is_a_usage_error(pool_rows):
    proc = subprocess.run([str(pool_rows), "2", "1", "1", "8"], capture_output=True, text=True,
                          timeout=60)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "usage: pool_rows RANK N C SIZE... CALLS\n"
