"""The GPU machine's command and benchmark where there is no GPU: tools/gpu-check is a
well-formed executable bash script, and benchmarks/gpu.py runs end to end on the CPU
(`--platform cpu --quick`), writing its JSON and table with ours equal to XLA's ops in
every row -- so that neither is first found broken on a GPU machine's short lease."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import fresh_process

ROOT = Path(__file__).resolve().parents[3]


def test_gpu_check_is_an_executable_bash_script():
    script = ROOT / "tools" / "gpu-check"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_the_gpu_benchmark_runs_on_the_cpu(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--platform", "cpu", "--quick",
         "--reps", "2", "--batch", "1", "--out", str(tmp_path)],
        env=fresh_process.child_env(), capture_output=True, text=True, timeout=600,
        check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "gpu-bench.json").read_text())
    ops = {row["op"] for row in result["rows"]}
    assert ops == {"unpool", "unpool_backward", "pool", "pool+grad", "segnet"}
    assert all(row["equal"] for row in result["rows"])
    assert (tmp_path / "gpu-bench.txt").read_text().startswith("GPU: cpu")
