"""How the CPU max pool's cost grows with the kernel size (issue 31, items 4 and 5).

    python benchmarks/kernel_size_scaling.py [--reps 20] [--trace-timeout 20]

(From a source checkout, `PYTHONPATH=. python benchmarks/...` measures the checkout's
jax_unpool rather than the installed one.)

Pools a small input, (32, 32, 8, 8) float32, with a kernel of 2, 16, 256 and 2**20 per
axis, stride 1 and the largest padding allowed (kernel // 2), so that the large
windows cover the whole input and are nearly all padding. For each kernel it prints the
taps per output that land inside the input (the work an output needs), the time per output
element (and, for the native kernel, per tap inside the input) of

- ``native``: ``jax_unpool.max_pool2d_with_indices`` (on CPU the FFI kernel), and
- ``xla ops``: ``jax_unpool.reference.max_pool2d_with_indices`` (the XLA-ops pool),

each with its ratio to kernel 2, measured in this run. A cost that follows the window's
part inside the input stays flat from kernel 16 on (8 x 8 taps inside, whatever the
kernel). Each (implementation, kernel) runs in a child process; an XLA-ops size whose
trace and compile take longer than --trace-timeout seconds is reported as skipped (the
XLA-ops pool traces one slice per kernel tap). The median of --reps calls after a
warm-up. A benchmark, not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SHAPE = (32, 32, 8, 8)  # (N, C, H, W)
KERNELS = (2, 16, 256, 2**20)


def inside_taps_per_output(size: int, kernel: int) -> float:
    """The mean number of a window's taps inside an axis of `size` (stride 1, padding
    kernel // 2), squared for the two spatial axes."""
    pad = kernel // 2
    out = size + 2 * pad - kernel + 1
    inside = [min(o - pad + kernel, size) - max(o - pad, 0) for o in range(out)]
    return (sum(inside) / out) ** 2


def measure(implementation: str, kernel: int, reps: int) -> dict:
    """In the child: trace, compile and time one pool; seconds per call and per output."""
    import jax
    import numpy as np

    import jax_unpool as ju

    pool = (ju.max_pool2d_with_indices if implementation == "native"
            else ju.reference.max_pool2d_with_indices)
    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    f = jax.jit(lambda v: pool(v, kernel, 1, kernel // 2))
    start = time.perf_counter()
    compiled = f.lower(x).compile()
    compile_seconds = time.perf_counter() - start
    values, _ = jax.block_until_ready(compiled(x))  # warm-up
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(compiled(x))
        samples.append(time.perf_counter() - start)
    seconds = statistics.median(samples)
    return {"compile_s": compile_seconds, "call_s": seconds,
            "per_output_ns": seconds / values.size * 1e9}


def run_child(implementation: str, kernel: int, reps: int, timeout: float) -> dict | None:
    """measure() in a child process that imports this process's jax_unpool; None if it
    ran out of time."""
    import jax_unpool

    package_root = str(Path(jax_unpool.__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        path for path in (package_root, os.environ.get("PYTHONPATH")) if path))
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--child", implementation, str(kernel), "--reps",
             str(reps)], env=env, capture_output=True, text=True, timeout=timeout, check=True)
    except subprocess.TimeoutExpired:
        return None
    return json.loads(proc.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--trace-timeout", type=float, default=20.0,
                        help="seconds an XLA-ops size may take (trace, compile, timing)")
    parser.add_argument("--child", nargs=2, metavar=("IMPLEMENTATION", "KERNEL"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child[0], int(args.child[1]), args.reps)))
        return 0

    results: dict[tuple[str, int], dict | None] = {}
    for implementation, timeout in (("native", 600.0), ("xla ops", args.trace_timeout)):
        for kernel in KERNELS:
            smaller = [results[implementation, k] for k in KERNELS if k < kernel]
            # A kernel larger than one that ran out of time is not tried.
            results[implementation, kernel] = None if None in smaller else run_child(
                implementation, kernel, args.reps, timeout)

    import jax_unpool

    print(f"CPU max pool of x {SHAPE} float32, stride 1, padding kernel // 2; median of "
          f"{args.reps} calls per cell; jax_unpool {jax_unpool.__version__} from "
          f"{Path(jax_unpool.__file__).parent}")
    header = (f"{'kernel':>9} {'taps inside':>12} {'native ns/out':>14} {'ratio':>6} "
              f"{'ns/tap inside':>14} {'xla ops ns/out':>15} {'ratio':>6} "
              f"{'xla compile s':>14}")
    print(header)
    print("-" * len(header))
    for kernel in KERNELS:
        taps = inside_taps_per_output(SHAPE[2], kernel)
        row = f"{kernel:>9} {taps:>12.1f}"
        for implementation, width in (("native", 14), ("xla ops", 15)):
            got, base = results[implementation, kernel], results[implementation, KERNELS[0]]
            if got is None:
                row += f" {'skipped':>{width}} {'':>6}"
            else:
                ratio = got["per_output_ns"] / base["per_output_ns"]
                row += f" {got['per_output_ns']:>{width}.2f} {ratio:>6.2f}"
            if implementation == "native":
                row += f" {got['per_output_ns'] / taps:>14.2f}" if got else f" {'':>14}"
        xla = results["xla ops", kernel]
        row += f" {xla['compile_s']:>14.2f}" if xla else f" {'-':>14}"
        print(row)
    if None in results.values():
        print(f"skipped: XLA-ops kernels whose child process (import, trace, compile and "
              f"{args.reps} calls) took more than --trace-timeout={args.trace_timeout:g} s, "
              "and any larger one; the XLA-ops pool traces one slice per kernel tap")
    return 0


if __name__ == "__main__":
    sys.exit(main())
