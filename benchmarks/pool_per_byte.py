"""The CPU max pool's time per byte moved, per rank and layout, against 2-D NCHW (issue 37,
item 10).

    python benchmarks/pool_per_byte.py [--rounds 5] [--calls 9] [--json out.json]

(From a source checkout, `PYTHONPATH=. python benchmarks/...` measures the checkout's
jax_unpool rather than the installed one.)

Pools float32 inputs of about 51 MB (2-D NCHW (16, 256, 56, 56), and the same number of
elements in every other rank and layout, and in two channels-first cases whose planes
have the other rank's width) by 2 per axis, stride 2, with int32 indices, and
divides each call's time by the bytes it moves (x, values and indices). Each round takes
every case in turn (the median of --calls calls each), so that load from elsewhere on the
machine hits them alike; printed: each case's fastest round, and its ratio per byte to
2-D NCHW in the same round as a range over the rounds (min to max), with the load
average. (A case's calls run back to back, each reusing the
pages its previous call freed: cases taking turns call by call reuse each other's pages,
some still in cache, and one case's time moved 2x from round to round.) glibc is pinned to reuse freed pages
(MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_, set for a child process that does the
measuring): without it each call's results are fresh pages, whose faults cost as much as
the pool and vary with the allocator's state. A benchmark, not a test: nothing here
asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# (case, data_format, input shape): the same 12.8 M elements in each.
CASES = (
    ("2-D NCHW", "NCHW", (16, 256, 56, 56)),
    ("2-D NHWC", "NHWC", (16, 56, 56, 256)),
    ("1-D NCW", "NCW", (16, 256, 3136)),
    ("1-D NWC", "NWC", (16, 3136, 256)),
    ("3-D NDHWC", "NDHWC", (16, 16, 28, 28, 64)),
    ("3-D NCDHW", "NCDHW", (16, 64, 16, 28, 28)),
    # Channels first, the rank or the plane's width: 3-D NCDHW's planes are 28 wide, 2-D
    # NCHW's 56 (issue 47). Each with the other's width:
    ("2-D NCHW, 28 wide", "NCHW", (16, 1024, 28, 28)),
    ("3-D NCDHW, 56 wide", "NCDHW", (16, 16, 16, 56, 56)),
)
PINNED = {"MALLOC_MMAP_THRESHOLD_": "4294967296", "MALLOC_TRIM_THRESHOLD_": "4294967296"}


def measure(rounds: int, calls: int) -> list[dict]:
    """In the pinned child: each case's seconds per call and per byte moved."""
    import jax
    import numpy as np

    import jax_unpool as ju

    pools = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
             3: ju.max_pool3d_with_indices}
    rng = np.random.default_rng(0)
    runs = []
    for name, fmt, shape in CASES:
        pool = pools[len(shape) - 2]
        f = jax.jit(lambda v, pool=pool, fmt=fmt: pool(v, 2, 2, data_format=fmt))
        x = jax.device_put(rng.standard_normal(shape, dtype=np.float32))
        values, indices = jax.block_until_ready(f(x))  # compile, and a warm-up
        moved = x.nbytes + values.nbytes + indices.nbytes
        runs.append({"case": name, "shape": list(shape), "bytes": moved, "f": f, "x": x,
                     "seconds": []})
    for _ in range(rounds):
        for run in runs:
            samples = []
            for _ in range(calls):
                start = time.perf_counter()
                jax.block_until_ready(run["f"](run["x"]))
                samples.append(time.perf_counter() - start)
            run["seconds"].append(statistics.median(samples))
    rows = []
    for run in runs:
        seconds = min(run["seconds"])
        rows.append({"case": run["case"], "shape": run["shape"], "bytes": run["bytes"],
                     "ms": seconds * 1e3, "gb_per_s": run["bytes"] / seconds / 1e9})
    base = rows[0]["ms"] / rows[0]["bytes"]
    for row, run in zip(rows, runs):
        row["ratio"] = row["ms"] / row["bytes"] / base
        per_round = [s / run["bytes"] / (b / runs[0]["bytes"])
                     for s, b in zip(run["seconds"], runs[0]["seconds"])]
        row["ratio_range"] = [min(per_round), max(per_round)]
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| case | input shape | ms | GB/s moved | time per byte / 2-D NCHW's, per round |",
             "|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {tuple(r['shape'])} | {r['ms']:.2f} | {r['gb_per_s']:.2f} "
              f"| {r['ratio_range'][0]:.2f} to {r['ratio_range'][1]:.2f} |" for r in rows]
    lines.append(f"\nload average (1 min) at the end: {os.getloadavg()[0]:.1f}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--calls", type=int, default=9, help="calls per median (default 9)")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be at least 1")
    if args.child:
        print(json.dumps(measure(args.rounds, args.calls)))
        return 0
    # glibc reads its tunables at start-up: the measuring runs in a child that has them.
    child = subprocess.run(
        [sys.executable, __file__, "--child", "--rounds", str(args.rounds),
         "--calls", str(args.calls)],
        env=dict(os.environ, **PINNED), capture_output=True, text=True, check=False)
    if child.returncode != 0:
        sys.stderr.write(child.stderr)
        return child.returncode
    rows = json.loads(child.stdout.strip().splitlines()[-1])
    print(table(rows))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
