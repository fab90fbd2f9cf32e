"""Resources: thousands of calls do not leak memory.

3000 jitted forward calls plus 3000 jitted gradient calls (a backward each), on inputs big
enough to use the XLA thread pool, and 1000 calls that fail with an out-of-range error,
must not grow the process's peak RSS by more than a few MB after a warm-up. Measured in a
fresh subprocess (this file run as a script), so that other tests' allocations -- the
multi-GB arrays of test_large_offsets.py -- neither hide nor add to the growth. The peak is the
kernel's VmHWM of the subprocess's own address space: getrusage's ru_maxrss would not do,
it keeps the parent's peak across fork and exec.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

MB = 2**20
CALLS, ERROR_CALLS, WARMUP = 3000, 1000, 300
MAX_GROWTH_MB = 8  # no growth measured here; a leak of 1.5 KB per call would exceed it


def measure() -> dict[str, float]:
    """Runs the calls and reports RSS and peak RSS (MB) before and after each phase."""
    import gc

    import jax
    import jax.numpy as jnp
    import numpy as np
    import psutil

    import jax_unpool as ju

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 16, 32, 32)).astype(np.float32)
    idx = rng.integers(0, 64 * 64, x.shape).astype(np.int32)
    bad = idx.copy()
    bad[1, 7, 3, 5] = -1

    def unpool(x, i):
        return ju.max_unpool2d(x, i, output_size=(64, 64))

    forward = jax.jit(unpool)
    grad = jax.jit(jax.grad(lambda x, i: jnp.sum(unpool(x, i) ** 2)))

    def fail():
        try:
            forward(x, bad).block_until_ready()
        except (jax.errors.JaxRuntimeError, ValueError):
            return
        raise AssertionError("no error")

    def snapshot() -> tuple[float, float]:
        gc.collect()
        with open("/proc/self/status") as status:
            peak_kb = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
        return psutil.Process().memory_info().rss / MB, peak_kb * 1024 / MB

    for _ in range(WARMUP):
        forward(x, idx).block_until_ready()
        grad(x, idx).block_until_ready()
        fail()
    rss0, peak0 = snapshot()
    for _ in range(CALLS):
        forward(x, idx).block_until_ready()
        grad(x, idx).block_until_ready()
    rss1, peak1 = snapshot()
    for _ in range(ERROR_CALLS):
        fail()
    rss2, peak2 = snapshot()
    return {"rss0": rss0, "peak0": peak0, "rss1": rss1, "peak1": peak1,
            "rss2": rss2, "peak2": peak2}


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's VmHWM")
def test_repeated_calls_do_not_grow_peak_rss():
    done = subprocess.run([sys.executable, os.path.abspath(__file__)], capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-5000:]
    m = json.loads(done.stdout.strip().splitlines()[-1])
    report = (f"peak RSS {m['peak0']:.1f} -> {m['peak1']:.1f} MB after {CALLS} forward + "
              f"{CALLS} grad calls -> {m['peak2']:.1f} MB after {ERROR_CALLS} failing calls; "
              f"RSS {m['rss0']:.1f} -> {m['rss1']:.1f} -> {m['rss2']:.1f} MB")
    print(report)
    assert m["peak1"] - m["peak0"] < MAX_GROWTH_MB, report
    assert m["peak2"] - m["peak1"] < MAX_GROWTH_MB, report


if __name__ == "__main__":
    print(json.dumps(measure()))
