"""The GPU machine's command and benchmark where there is no GPU, so that neither is first
found broken on a GPU machine's short lease: tools/gpu-check is a well-formed bash script
whose dry run lists every step with its limit (all under 480 s together) and checks the
prerequisites; a step past its limit gets SIGINT, and a Python step can still write its
results then; benchmarks/gpu.py keeps every row it measured when it is killed, and runs end
to end on the CPU (`--platform cpu --quick`) with ours equal to XLA's ops in every row."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import fresh_process
import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "tools" / "gpu-check"
STEPS = ["prerequisites", "machine", "configure", "build", "import", "resources", "benchmark",
         "gpu-tests", "export-tests"]


def steps_and_limits() -> dict[str, int]:
    """STEPS=(name:limit ...) as the script declares it."""
    declared = re.search(r"^STEPS=\(([^)]*)\)", SCRIPT.read_text(), re.MULTILINE).group(1)
    return {name: int(limit) for name, limit in re.findall(r"([\w-]+):(\d+)", declared)}


def dry_run(tmp_path, **env) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", str(tmp_path / "out")],
                          env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=300, check=False)


def test_gpu_check_is_an_executable_bash_script():
    assert os.access(SCRIPT, os.X_OK)
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_every_step_has_a_limit_and_they_add_up_to_under_8_minutes():
    limits = steps_and_limits()
    assert list(limits) == STEPS
    assert sum(limits.values()) < 480
    text = SCRIPT.read_text()
    # Every step the script runs is a declared one, and every timeout sends SIGINT first.
    assert set(re.findall(r"run_step ([a-z-]+) ", text)) <= set(limits)
    timeouts = re.findall(r"timeout [^\n]*", text)
    assert timeouts and all(t.startswith("timeout -s INT -k 10 ") for t in timeouts), timeouts


def test_the_dry_run_lists_each_step_with_its_limit_and_checks_the_prerequisites(tmp_path):
    proc = dry_run(tmp_path, PYTHON=sys.executable)
    out = proc.stdout
    limits = steps_and_limits()
    found = re.findall(r"^=== ([\w-]+) \(limit (\d+) s", out, re.MULTILINE)
    assert found == [(name, str(limit)) for name, limit in limits.items()], out
    assert f"sum {sum(limits.values())} s" in out
    for name in ("PYTHON", "Python headers", "nvcc", "static CUDA runtime", "pytest", "xdist",
                 "torch"):
        assert re.search(rf"^{re.escape(name)} ", out, re.MULTILINE), (name, out)
    # Exit 0 exactly when nothing the check needs is missing; nothing was built or run.
    assert proc.returncode == (2 if "MISSING" in out else 0), out
    assert out.count("would run: ") == (0 if "MISSING" in out else len(limits) - 1)
    assert not (ROOT / "build" / "gpu").exists() or "would run: cmake" in out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == []


def test_the_dry_run_wants_python_named(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert "set PYTHON to the interpreter" in proc.stdout


def test_a_step_past_its_limit_gets_sigint_and_keeps_its_results(tmp_path):
    # The script's own run_step, with a limit of 2 s, on a Python step that writes a result
    # when interrupted (as pytest writes its XML and the benchmark its rows).
    run_step = re.search(r"^run_step\(\) \{.*?^\}", SCRIPT.read_text(), re.MULTILINE | re.DOTALL).group(0)
    step = ("import time, pathlib\ntry:\n    time.sleep(60)\nexcept KeyboardInterrupt:\n"
            f"    pathlib.Path({str(tmp_path / 'kept')!r}).write_text('interrupted')\n")
    shell = (f"{run_step}\nlimit() {{ echo 2; }}\ndry_run=0\nstarted=$SECONDS\n"
             f"run_step slow {sys.executable} -c \"$STEP\"; echo \"rc=$?\"")
    started = time.monotonic()
    proc = subprocess.run(["bash", "-c", shell], env={**os.environ, "STEP": step},
                          capture_output=True, text=True, timeout=60, check=False)
    assert time.monotonic() - started < 12  # stopped at 2 s, well before the kill at 12
    assert "rc=124" in proc.stdout and "slow: stopped at its limit of 2 s" in proc.stdout
    assert (tmp_path / "kept").read_text() == "interrupted"


WRITER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {benchmarks!r})
import gpu

def measure(i):
    time.sleep(0.3)
    yield {{"op": "unpool", "shape": [1, 1, 2, 2], "format": "NCHW", "bytes": 64,
            "equal": True, "ours_ms": 1.0 + i, "ours_sync_ms": 1.0, "xla_ms": 2.0,
            "xla_sync_ms": 2.0, "MB": 6.4e-05}}

results = gpu.ResultsFile(Path({out!r}), {{"gpu": "fake", "jax": "-", "torch": None,
                                            "cuda_module": None}})
copies = {{(1, 1, 2, 2): {{"op": "copy", "shape": [1, 1, 2, 2], "bytes": 32, "GBps": 1.0}}}}
gpu.measure_rows([(i,) for i in range(100)], measure, results, copies)
"""


def test_the_benchmark_keeps_every_row_measured_before_it_is_killed(tmp_path):
    code = WRITER.format(benchmarks=str(ROOT / "benchmarks"), out=str(tmp_path))
    child = subprocess.Popen([sys.executable, "-c", code], env=fresh_process.child_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    path = tmp_path / "gpu-bench.json"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if path.exists() and len(json.loads(path.read_text())["rows"]) >= 3:
                break
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)  # no chance to write anything more
    finally:
        child.wait(timeout=30)
    rows = json.loads(path.read_text())["rows"]
    assert 3 <= len(rows) < 100
    assert [r["ours_ms"] for r in rows] == [1.0 + i for i in range(len(rows))]
    assert all(r["ours_per_xla"] == r["ours_ms"] / 2.0 for r in rows)
    assert (tmp_path / "gpu-bench.txt").read_text().count("\nunpool ") == len(rows)


def test_the_gpu_benchmark_runs_on_the_cpu(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--platform", "cpu", "--quick",
         "--reps", "2", "--batch", "1", "--dense", "on", "--out", str(tmp_path)],
        env=fresh_process.child_env(), capture_output=True, text=True, timeout=600,
        check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "gpu-bench.json").read_text())
    ops = {row["op"] for row in result["rows"]}
    assert ops == {"unpool", "unpool_backward", "pool", "pool+grad", "segnet"}
    assert all(row["equal"] for row in result["rows"])
    assert (tmp_path / "gpu-bench.txt").read_text().startswith("GPU: cpu")
    # The dense XLA-ops lowering, measured in a child, or reported absent (where
    # JAX_UNPOOL_BACKEND=xla still calls the kernels); the routing names each op.
    dense = result["dense_xla"]
    assert dense.startswith("absent") or re.fullmatch(r"5 rows measured \(exit 0\)", dense), dense
    assert sorted(result["routing"]) == ["max_pool", "max_unpool", "max_unpool_backward"]
    if not dense.startswith("absent"):
        assert all("dense_xla_ms" in r for r in result["rows"][:5])
        # The routing weighs the faster XLA lowering of each op's row.
        first = {r["op"]: r for r in result["rows"][:5]}
        for op, routed in (("unpool", "max_unpool"), ("unpool_backward", "max_unpool_backward"),
                           ("pool", "max_pool")):
            row = first[op]
            assert result["routing"][routed]["xla_ms"] == min(row["xla_ms"], row["dense_xla_ms"])


def test_the_backward_counts_the_sectors_it_gathers():
    # 2x2 windows: in each row pair, a 32-byte sector (8 floats, 4 windows) of the gathered
    # row is read unless all 4 windows chose the other row: 15/16 of the sectors.
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu
    finally:
        sys.path.pop(0)
    import numpy as np
    idx = gpu.pooled_indices(np.random.default_rng(0), (2, 16, 64, 64))
    sectors = gpu.gathered_sectors(idx, 64 * 64)
    assert abs(sectors / (2 * 16 * 64 * 64 * 4 / 32) - 15 / 16) < 0.01
    rows = np.zeros((1, 1, 1, 8), np.int32)  # 8 windows all on row 0 of a 2x16 plane
    rows[..., :] = 2 * np.arange(8)
    assert gpu.gathered_sectors(rows, 2 * 16) == 2  # 16 floats: 2 sectors of row 0 only
