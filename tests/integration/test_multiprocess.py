"""A data-parallel training step over two processes with two CPU devices each, joined by
jax.distributed (gloo): both get the loss and gradient of the same step in one process,
and the compiled step's only collective is the all-reduce of the loss and gradient.

The processes run `multiprocess_worker.py`; a free port for the coordinator, a deadline
on each, and if one dies the other is killed and both outputs are shown.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax_unpool
import multiprocess_worker as worker
import numpy as np
import pytest

pytestmark = pytest.mark.slow

PROCESSES = 2
DEADLINE_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_processes(out: Path) -> None:
    """Runs the workers to the end; fails (after killing the others) on the first one that
    exits with an error or when the deadline passes."""
    env = dict(os.environ)
    package_root = str(Path(jax_unpool.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    address = f"127.0.0.1:{free_port()}"
    logs = [out / f"process{i}.log" for i in range(PROCESSES)]
    files = [log.open("w") for log in logs]
    procs = [subprocess.Popen([sys.executable, worker.__file__, address, str(PROCESSES),
                               str(i), str(out)], env=env, stdout=f, stderr=subprocess.STDOUT)
             for i, f in enumerate(files)]
    deadline = time.monotonic() + DEADLINE_S
    try:
        while any(p.poll() is None for p in procs):
            failed = [i for i, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                reason = (f"process {failed[0]} exited with {procs[failed[0]].returncode}"
                          if failed else f"not done after {DEADLINE_S} s")
                break
            time.sleep(0.2)
        else:
            reason = None
            if any(p.returncode for p in procs):
                reason = f"exit codes {[p.returncode for p in procs]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for f in files:
            f.close()
    if reason:
        outputs = "\n".join(f"--- process {i} ---\n{log.read_text()[-4000:]}"
                            for i, log in enumerate(logs))
        pytest.fail(f"multi-process step failed: {reason}\n{outputs}")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("multiprocess")
    run_processes(out)
    return [json.loads((out / f"process{i}.json").read_text()) for i in range(PROCESSES)]


def test_every_process_sees_all_four_devices(results):
    assert [(r["local_devices"], r["devices"]) for r in results] == [(2, 4)] * PROCESSES


def test_every_process_gets_the_single_process_loss_and_gradient(results):
    loss, grad = worker.loss_and_grad(*worker.data())  # this process: one device
    for r in results:
        assert r["loss"] == float(loss)
        np.testing.assert_array_equal(np.array(r["grad"], np.float32), np.asarray(grad))


def test_the_step_gathers_nothing_and_all_reduces_once(results):
    for r in results:
        assert r["collectives"] == {"all-gather": 0, "all-to-all": 0, "collective-permute": 0,
                                    "all-reduce": 1, "reduce-scatter": 0}
