"""Window offsets on several devices: split along N and C, a step that pools with
index_format="window", unpools with the WindowIndices and differentiates runs with no
communication, and gives the flat indices' results (simulated CPU devices in a fresh
process: tests/helpers/sharded_windows.py)."""

from __future__ import annotations

import re
from pathlib import Path

import fresh_process
import numpy as np
import pytest
import sharded_windows as cases

COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce",
               "reduce-scatter")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sharded_windows")
    fresh_process.run_ok("sharded_windows.py", str(out))
    return out


@pytest.mark.parametrize("name", list(cases.CASES))
def test_a_split_along_n_and_c_needs_no_collective(run, name):
    hlo = (run / f"{name}-window.hlo.txt").read_text()
    counts = {op: len(re.findall(rf"\b{op}(?:-start)?\(", hlo)) for op in COLLECTIVES}
    assert counts == dict.fromkeys(COLLECTIVES, 0), counts


@pytest.mark.parametrize("name", list(cases.CASES))
def test_the_sharded_step_equals_the_flat_indices_step(run, name):
    saved = np.load(run / f"{name}.npz")
    np.testing.assert_array_equal(saved["window_up"], saved["flat_up"])
    np.testing.assert_array_equal(saved["window_grad"], saved["flat_grad"])
    assert str(saved["window_spec"]) == str(saved["flat_spec"])
