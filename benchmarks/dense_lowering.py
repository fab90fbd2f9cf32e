"""The XLA-ops lowering's dense unpool against XLA's scatter, gather and copies (issue 36).

    python benchmarks/dense_lowering.py [--rounds 5] [--reps 9] [--shape 8 64 112 112]

(From a source checkout, `PYTHONPATH=. python benchmarks/...` measures the checkout's
jax_unpool rather than the installed one.)

Runs with ``JAX_UNPOOL_BACKEND=xla`` (set here before jax_unpool is imported), so that the
CPU runs what a TPU runs: the dense ops, with the on-device check of the indices and the
conditional included. float32, x of --shape (N, C, H, W) unpooled to (2H, 2W):

- unpool forward 2x2/s2 against XLA's scatter (``.at[].set`` on flattened planes) and
  XLA's broadcast copy of the same values (``jnp.repeat`` on both axes);
- unpool forward 3x3/s2/p1 (overlapping windows) against XLA's scatter;
- unpool backward 2x2/s2 against XLA's gather (``jnp.take_along_axis``);
- a SegNet pair's forward and gradient (``value_and_grad`` of pool -> unpool -> loss,
  2x2/s2) against the same step lowered as before the dense ops: XLA's scatter and gather
  for the unpool primitives (`_unpool_xla`'s general path, installed on the CPU here).

Each of --rounds rounds times every contender of a row --reps times (taking turns, after a
warm-up) and keeps the medians of the wall time and of the process's CPU time (all
threads). Printed: the median over the rounds of each, and each ratio as its range over
the rounds (min to max), with the load average. A benchmark, not a test: nothing here
asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ["JAX_UNPOOL_BACKEND"] = "xla"

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import mlir

import jax_unpool as ju
from jax_unpool import _unpool_xla
from jax_unpool.backends import registry


def rounds_of_medians(calls, rounds: int, reps: int) -> list[list[tuple[float, float]]]:
    """Per round, per compiled call (fn, args): the medians of the wall time and of the
    process's CPU time (every thread's) in ms over `reps` calls, the calls taking turns so
    that the machine's state weighs on each alike. On a loaded machine the CPU time says
    more of the work than the wall time."""
    for fn, args in calls:
        jax.block_until_ready(fn(*args))  # warm up
    out = []
    for _ in range(rounds):
        times = [([], []) for _ in calls]
        for _ in range(reps):
            for (fn, args), (wall, cpu) in zip(calls, times):
                start, start_cpu = time.perf_counter(), time.process_time()
                jax.block_until_ready(fn(*args))
                wall.append(time.perf_counter() - start)
                cpu.append(time.process_time() - start_cpu)
        out.append([(1e3 * statistics.median(wall), 1e3 * statistics.median(cpu))
                    for wall, cpu in times])
    return out


def compiled(fn, *args):
    return jax.jit(fn).lower(*args).compile(), args


def flat_scatter(x, idx, size):
    """XLA's scatter of each plane's values to their indices (.at[].set)."""
    n, c = x.shape[:2]
    planes = jnp.zeros((n, c, size[0] * size[1]), x.dtype)
    rows = (jnp.arange(n)[:, None, None], jnp.arange(c)[None, :, None])
    return planes.at[(*rows, idx.reshape(n, c, -1))].set(x.reshape(n, c, -1)).reshape(
        n, c, *size)


def flat_gather(g, idx):
    n, c = g.shape[:2]
    return jnp.take_along_axis(g.reshape(n, c, -1), idx.reshape(n, c, -1), axis=2).reshape(
        idx.shape)


def segnet_step(x):
    def loss(x):
        v, i = ju.max_pool2d_with_indices(x, 2)
        y = ju.max_unpool2d(jnp.tanh(v), i, 2)
        return jnp.sum((y - x) ** 2)
    return jax.value_and_grad(loss)(x)


def general_lowerings() -> dict[str, registry.Lowering]:
    """The unpool primitives lowered as before the dense ops: XLA's scatter and gather."""
    def forward(x, indices, *, output_size, channels_last, **_):
        return _unpool_xla.scatter_planes(x, indices, output_size, channels_last)

    def backward(grad_output, indices, *, channels_last, spatial_rank=2, **_):
        return _unpool_xla.gather_planes(grad_output, indices, channels_last, spatial_rank)

    return {"max_unpool": registry.Lowering(mlir.lower_fun(forward, multiple_results=False),
                                            "xla", "XLA scatter"),
            "max_unpool_backward": registry.Lowering(
                mlir.lower_fun(backward, multiple_results=False), "xla", "XLA gather")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--shape", type=int, nargs=4, default=(8, 64, 112, 112),
                        metavar=("N", "C", "H", "W"))
    args = parser.parse_args()
    n, c, h, w = args.shape
    size = (2 * h, 2 * w)
    rng = np.random.default_rng(0)
    big = jnp.asarray(rng.standard_normal((n, c, *size), np.float32))
    _, idx2 = ju.max_pool2d_with_indices(big, 2)
    _, idx3 = ju.max_pool2d_with_indices(big, 3, 2, 1)
    x = jnp.asarray(rng.standard_normal((n, c, h, w), np.float32))
    g = jnp.asarray(rng.standard_normal((n, c, *size), np.float32))
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}; JAX_UNPOOL_BACKEND=xla; "
          f"float32 {tuple(x.shape)} -> {size}; {args.rounds} rounds of the median of "
          f"{args.reps} calls, ms")
    print(f"  {'':<38} {'wall':>8} {'cpu':>8}   the wall time's ratio, min to max over the "
          "rounds (cpu time's median)")

    def rows(names, calls, against):
        """Prints each call's median ms over the rounds, and for those in `against` (name ->
        index of the call it is compared with, and a label) the ratio's range."""
        per_round = rounds_of_medians(calls, args.rounds, args.reps)
        for j, name in enumerate(names):
            wall = statistics.median(r[j][0] for r in per_round)
            cpu = statistics.median(r[j][1] for r in per_round)
            ratios = []
            for other, label in against.get(j, ()):
                walls = [r[j][0] / r[other][0] for r in per_round]
                cpus = statistics.median(r[j][1] / r[other][1] for r in per_round)
                ratios.append(f"{min(walls):.2f}x to {max(walls):.2f}x (cpu {cpus:.2f}x) "
                              f"{label}")
            print(f"  {name:<38} {wall:8.2f} {cpu:8.2f}   {'; '.join(ratios)}")

    rows(["XLA scatter (.at[].set), 2x2/s2", "XLA repeat (jnp.repeat twice)",
          "dense unpool forward 2x2/s2"],
         [compiled(lambda v, i: flat_scatter(v, i, size), x, idx2),
          compiled(lambda v: jnp.repeat(jnp.repeat(v, 2, axis=2), 2, axis=3), x),
          compiled(lambda v, i: ju.max_unpool2d(v, i, 2), x, idx2)],
         {2: [(0, "the scatter's time"), (1, "the repeat's time")]})
    rows(["XLA scatter (.at[].set), 3x3/s2/p1", "dense unpool forward 3x3/s2/p1"],
         [compiled(lambda v, i: flat_scatter(v, i, size), x, idx3),
          compiled(lambda v, i: ju.max_unpool2d(v, i, 3, 2, 1, output_size=size), x, idx3)],
         {1: [(0, "the scatter's time")]})
    rows(["XLA gather (take_along_axis), 2x2/s2", "dense unpool backward 2x2/s2"],
         [compiled(flat_gather, g, idx2),
          compiled(lambda g, i: ju.max_unpool2d_backward(g, x, i, size), g, idx2)],
         {1: [(0, "the gather's time")]})
    dense_step = compiled(segnet_step, big)
    registry.install("cpu", general_lowerings())  # clears jax's caches
    try:
        general_step = compiled(segnet_step, big)
    finally:
        registry.restore("cpu")
    rows(["SegNet pair, scatter/gather lowering", "SegNet pair, dense lowering"],
         [general_step, dense_step], {1: [(0, "the scatter/gather step")]})
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
