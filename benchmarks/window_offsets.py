"""Window offsets (index_format="window") against flat int32 indices: memory and speed on
this machine's CPU (issue 46).

    PYTHONPATH=. python benchmarks/window_offsets.py [--rounds 7] [--reps 5] [--memory-only]

Memory: a SegNet-style train step (4 conv + pool 2x2/s2 stages, 4 unpool + conv stages,
the gradient of a cross-entropy loss w.r.t. every weight), batch 8 of 3x360x480, float32
and bfloat16, compiled for this CPU with each index format; XLA's `memory_analysis()`
gives its temporary and argument bytes. Printed: both, the int32 indices' bytes (every
pool's values' element count times 4), and the saving as a fraction of them.

Speed: the native CPU kernels with each format, float32, x of (8, 64, 224, 224):
- unpool forward (values and indices of a 2x2/s2 pool of x);
- unpool backward (the gather);
- the pool's forward and gradient (`jax.vjp` of the pool, then its VJP);
- the SegNet pair's forward and gradient (pool -> tanh -> unpool -> squared error).
Each round times every contender --reps times (they take turns) and keeps the median;
the window/flat ratio of each round is printed, and their range over --rounds rounds,
with the load average. A benchmark, not a test: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jax_unpool as ju

# --------------------------------------------------------------------------------------
# Memory: a SegNet train step
# --------------------------------------------------------------------------------------

CHANNELS = (3, 64, 128, 256, 512)
CLASSES = 11


def segnet_params(key, dtype):
    keys = jax.random.split(key, 8)
    enc = [jax.random.normal(keys[i], (3, 3, CHANNELS[i], CHANNELS[i + 1]), dtype) * 0.05
           for i in range(4)]
    outs = (*CHANNELS[3:0:-1], CLASSES)
    dec = [jax.random.normal(keys[4 + i], (3, 3, CHANNELS[4 - i], outs[i]), dtype) * 0.05
           for i in range(4)]
    return {"enc": enc, "dec": dec}


def conv(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def segnet_loss(params, x, labels, index_format):
    saved = []
    h = x
    for w in params["enc"]:
        h = jax.nn.relu(conv(h, w))
        size = h.shape[1:3]
        h, idx = ju.max_pool2d_with_indices(h, 2, data_format="NHWC",
                                            index_format=index_format)
        saved.append((idx, size))
    for w, (idx, size) in zip(params["dec"], reversed(saved)):
        if index_format == "window":
            h = ju.max_unpool2d(h, idx)
        else:
            h = ju.max_unpool2d(h, idx, 2, output_size=size, data_format="NHWC")
        h = conv(h, w)
    logits = h.astype(jnp.float32)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], -1))


def index_bytes(batch: int, size: tuple[int, int]) -> int:
    """int32 bytes of every pool's indices: its values' element count times 4."""
    total, (h, w) = 0, size
    for c in CHANNELS[1:]:
        h, w = h // 2, w // 2
        total += batch * h * w * c * 4
    return total


def memory(batch: int = 8, size=(360, 480)) -> None:
    print(f"SegNet train step, batch {batch} of 3x{size[0]}x{size[1]}, "
          f"{len(CHANNELS) - 1} pools 2x2/s2 and 4 unpools; XLA's memory_analysis(), MiB")
    print("dtype      format  temporary  arguments  temp+args  saved/int32 index bytes")
    int32 = index_bytes(batch, size)
    for dtype in (jnp.float32, jnp.bfloat16):
        params = jax.eval_shape(lambda k, dtype=dtype: segnet_params(k, dtype),
                                jax.random.key(0))
        x = jax.ShapeDtypeStruct((batch, *size, 3), dtype)
        labels = jax.ShapeDtypeStruct((batch, *size), jnp.int32)
        totals = {}
        for index_format in ("flat", "window"):
            step = jax.jit(jax.grad(lambda p, x, y, f=index_format: segnet_loss(p, x, y, f)))
            analysis = step.lower(params, x, labels).compile().memory_analysis()
            temp, args = analysis.temp_size_in_bytes, analysis.argument_size_in_bytes
            totals[index_format] = temp + args
            saved = "" if index_format == "flat" else (
                f"{(totals['flat'] - totals['window']) / int32:.2f}")
            print(f"{jnp.dtype(dtype).name:<10} {index_format:<7} {temp / 2**20:9.1f}  "
                  f"{args / 2**20:9.1f}  {(temp + args) / 2**20:9.1f}  {saved}")
    print(f"int32 index bytes: {int32 / 2**20:.1f} MiB")


# --------------------------------------------------------------------------------------
# Speed: the native kernels with each format
# --------------------------------------------------------------------------------------

def _median_ms(fn, args, reps: int) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def speed_cases(shape):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal(shape, np.float32))
    values, idx = ju.max_pool2d_with_indices(x, 2)
    _, w = ju.max_pool2d_with_indices(x, 2, index_format="window")
    ct = jnp.asarray(rng.standard_normal(values.shape, np.float32))

    def pool_grad(index_format):
        def step(x, ct):
            out, vjp = jax.vjp(lambda x: ju.max_pool2d_with_indices(
                x, 2, index_format=index_format)[0], x)
            return out, vjp(ct)[0]
        return jax.jit(step), (x, ct)

    def segnet(index_format):
        def loss(x):
            v, i = ju.max_pool2d_with_indices(x, 2, index_format=index_format)
            y = ju.max_unpool2d(jnp.tanh(v), i) if index_format == "window" else \
                ju.max_unpool2d(jnp.tanh(v), i, 2)
            return jnp.sum((y - x) ** 2)
        return jax.jit(jax.value_and_grad(loss)), (x,)

    return {
        "unpool forward": {
            "flat": (jax.jit(lambda v, i: ju.max_unpool2d(v, i, 2)), (values, idx)),
            "window": (jax.jit(ju.max_unpool2d), (values, w))},
        "unpool backward": {
            "flat": (jax.jit(lambda g, i: ju.max_unpool2d_backward(g, values, i, shape[2:])),
                     (x, idx)),
            "window": (jax.jit(lambda g, w: ju.max_unpool2d_backward(g, values, w)), (x, w))},
        "pool forward+gradient": {"flat": pool_grad("flat"), "window": pool_grad("window")},
        "SegNet pair forward+gradient": {"flat": segnet("flat"), "window": segnet("window")},
    }


def speed(shape, rounds: int, reps: int) -> None:
    cases = speed_cases(shape)
    for contenders in cases.values():
        for fn, args in contenders.values():
            jax.block_until_ready(fn(*args))  # compile and warm up
    print(f"\nCPU kernels, float32 x of {shape}, 2x2/s2; window/flat time per round "
          f"(median of {reps} calls each, the formats taking turns), {rounds} rounds")
    for name, contenders in cases.items():
        ratios, flat_ms = [], []
        for _ in range(rounds):
            f = _median_ms(*contenders["flat"], reps)
            w = _median_ms(*contenders["window"], reps)
            ratios.append(w / f)
            flat_ms.append(f)
        print(f"  {name:<30} flat {statistics.median(flat_ms):7.2f} ms; window/flat "
              f"{min(ratios):.2f} to {max(ratios):.2f} (median {statistics.median(ratios):.2f})")
    print(f"load average during the run: {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--shape", type=int, nargs=4, default=(8, 64, 224, 224),
                        metavar=("N", "C", "H", "W"))
    parser.add_argument("--memory-only", action="store_true")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.devices()[0].device_kind}, {os.cpu_count()} cores")
    memory()
    if not args.memory_only:
        speed(tuple(args.shape), args.rounds, args.reps)


if __name__ == "__main__":
    main()
