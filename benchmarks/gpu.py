"""GPU benchmark: jax_unpool's CUDA kernels against XLA's ops (ju.reference, what the GPU
ran before them), PyTorch CUDA and a device copy, in one run.

    python benchmarks/gpu.py [--out DIR] [--reps 25] [--quick] [--platform cuda]

Rows (float32, channels first unless named, 2x2 windows of stride 2; the shapes are the
pool inputs, (32, 64, 224, 224) and (8, 64, 224, 224) as in issue 30, plus smaller ones):
``unpool`` (pooled values + int32 indices -> the unpooled plane), ``unpool_backward``
(the gather), ``pool`` (values + int32 indices), ``pool+grad`` (the pool and its
gradient), ``segnet`` (pool -> unpool and the gradient of both: the SegNet pair), each
also on tiny shapes; NHWC rows for ours and XLA's. Torch's unpool, gather and pools take
int64 indices (its only kind).

Timing: a sample is `--batch` calls issued back to back and one synchronisation (jax:
block_until_ready; torch: torch.cuda.synchronize), divided by the calls: the GPU's
throughput, dispatch overlapped. ``sync_ms`` is one call waited for alone: the latency
that matters for tiny shapes. Each number is the median of `--reps` samples after
warm-up; contenders of a row take turns sample by sample. ``GB/s`` counts the bytes the
op must move at least (inputs read once, results written once, a gather's gathered
values only) over the time; ``of_copy`` is that against the device copy's GB/s (read +
write of the pool input) measured in the same run. Nothing here asserts a timing; each
row does check that ours equals XLA's result (``equal``).

Writes gpu-bench.json and gpu-bench.txt into --out (default: $OUT, else the current
directory) and prints the table. ``--platform cpu --quick`` runs the same code on the CPU
kernels (no torch, a smoke test of this script where there is no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jax_unpool as ju
from jax_unpool.backends import cuda

BIG = ((32, 64, 224, 224), (8, 64, 224, 224))
SMALLER = ((8, 64, 112, 112), (64, 32, 64, 64))
TINY = ((2, 8, 16, 16), (1, 3, 4, 4))


def pooled_indices(rng, shape) -> np.ndarray:
    """int32 indices of a 2x2, stride-2 pool of a (N, C, H, W) input: one position per
    window, drawn with numpy."""
    n, c, h, w = shape
    dh = rng.integers(0, 2, (n, c, h // 2, w // 2))
    dw = rng.integers(0, 2, (n, c, h // 2, w // 2))
    rows = 2 * np.arange(h // 2)[:, None] + dh
    cols = 2 * np.arange(w // 2)[None, :] + dw
    return (rows * w + cols).astype(np.int32)


def timed(calls: dict[str, Callable[[], object]], sync: dict[str, Callable[[object], None]],
          reps: int, batch: int) -> dict[str, dict[str, float]]:
    """Median ms per call of each contender, batched and alone, taking turns."""
    batched = {name: [] for name in calls}
    alone = {name: [] for name in calls}
    for name, call in calls.items():  # warm-up (and compilation)
        for _ in range(3):
            sync[name](call())
    for _ in range(reps):
        for name, call in calls.items():
            start = time.perf_counter()
            out = None
            for _ in range(batch):
                out = call()
            sync[name](out)
            batched[name].append((time.perf_counter() - start) * 1e3 / batch)
            start = time.perf_counter()
            sync[name](call())
            alone[name].append((time.perf_counter() - start) * 1e3)
    return {name: {"ms": statistics.median(batched[name]), "sync_ms": statistics.median(alone[name])}
            for name in calls}


def jax_sync(out) -> None:
    jax.block_until_ready(out)


class Torch:
    def __init__(self, platform: str):
        self.torch = None
        if platform != "cuda":
            return
        try:
            import torch
        except ImportError:
            return
        self.torch = torch if torch.cuda.is_available() else None

    def sync(self, _out) -> None:
        self.torch.cuda.synchronize()

    def tensor(self, a: np.ndarray, grad: bool = False):
        t = self.torch.from_numpy(np.ascontiguousarray(a)).cuda()
        return t.requires_grad_() if grad else t


def rows_for(device, shape, fmt: str, torch: Torch, reps: int, batch: int, rng) -> list[dict]:
    n, c, h, w = shape
    last = fmt == "NHWC"

    def lay(a):  # NCHW numpy -> the row's layout
        return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if last else a

    x = rng.standard_normal(shape).astype(np.float32)
    idx = pooled_indices(rng, shape)
    pooled = rng.standard_normal(idx.shape).astype(np.float32)
    g_full = rng.standard_normal(shape).astype(np.float32)
    g_pooled = rng.standard_normal(idx.shape).astype(np.float32)
    dev = lambda a: jax.device_put(lay(a), device)
    jx, jidx, jpooled, jg, jgp = map(dev, (x, idx, pooled, g_full, g_pooled))

    def unpool(lib):
        return jax.jit(lambda v, i: lib.max_unpool2d(v, i, 2, data_format=fmt))

    def unpool_backward(lib):
        return jax.jit(lambda g, i: lib.max_unpool2d_backward(
            g, jnp.zeros(i.shape, g.dtype), i, (h, w), data_format=fmt))

    def pool(lib):
        return jax.jit(lambda x: lib.max_pool2d_with_indices(x, 2, data_format=fmt))

    def pool_grad(lib):
        def f(x, ct):
            (values, indices), vjp = jax.vjp(
                lambda x: lib.max_pool2d_with_indices(x, 2, data_format=fmt), x)
            return values, indices, vjp((ct, np.zeros(indices.shape, jax.dtypes.float0)))[0]
        return jax.jit(f)

    def segnet(lib):
        def f(x, ct):
            def pair(x):
                values, indices = lib.max_pool2d_with_indices(x, 2, data_format=fmt)
                return lib.max_unpool2d(values, indices, 2, data_format=fmt)
            y, vjp = jax.vjp(pair, x)
            return y, vjp(ct)[0]
        return jax.jit(f)

    mb = 1e-6
    f32, i32 = 4, 4
    full, quarter = n * c * h * w, n * c * (h // 2) * (w // 2)
    ops = {  # op: (jax function of the library, jax args, bytes the op must move)
        "unpool": (unpool, (jpooled, jidx), quarter * (f32 + i32) + full * f32),
        "unpool_backward": (unpool_backward, (jg, jidx), quarter * (i32 + 2 * f32)),
        "pool": (pool, (jx,), full * f32 + quarter * (f32 + i32)),
        "pool+grad": (pool_grad, (jx, jgp),
                      full * f32 + quarter * (f32 + i32) + quarter * (f32 + i32) + full * f32),
        "segnet": (segnet, (jx, jg),
                   (full * f32 + quarter * (f32 + i32)) + (quarter * (f32 + i32) + full * f32)
                   + quarter * (i32 + 2 * f32) + (quarter * (f32 + i32) + full * f32)),
    }
    t = torch.torch if torch.torch is not None and not last else None
    if t is not None:
        F = t.nn.functional
        tx, tidx64 = torch.tensor(x), torch.tensor(idx.astype(np.int64))
        tpooled, tg, tgp = torch.tensor(pooled), torch.tensor(g_full), torch.tensor(g_pooled)
        tx_grad = torch.tensor(x, grad=True)

        def t_pool_grad():
            tx_grad.grad = None
            values, indices = F.max_pool2d(tx_grad, 2, return_indices=True)
            values.backward(tgp)
            return values, indices, tx_grad.grad

        def t_segnet():
            tx_grad.grad = None
            values, indices = F.max_pool2d(tx_grad, 2, return_indices=True)
            y = F.max_unpool2d(values, indices, 2)
            y.backward(tg)
            return y, tx_grad.grad

        torch_ops = {
            "unpool": lambda: F.max_unpool2d(tpooled, tidx64, 2),
            "unpool_backward": lambda: t.gather(tg.flatten(2), 2, tidx64.flatten(2)),
            "pool": lambda: F.max_pool2d(tx, 2, return_indices=True),
            "pool+grad": t_pool_grad,
            "segnet": t_segnet,
        }
    rows = []
    for op, (make, args, nbytes) in ops.items():
        ours, xla = make(ju), make(ju.reference)
        calls = {"ours": lambda f=ours, a=args: f(*a), "xla": lambda f=xla, a=args: f(*a)}
        sync = {"ours": jax_sync, "xla": jax_sync}
        if t is not None:
            calls["torch"] = torch_ops[op]
            sync["torch"] = torch.sync
        results = timed(calls, sync, reps, batch if full * f32 > 1 << 20 else 20 * batch)
        equal = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(
            jax.tree.leaves(ours(*args)), jax.tree.leaves(xla(*args))))
        rows.append({"op": op, "shape": list(shape), "format": fmt, "bytes": int(nbytes),
                     "equal": bool(equal),
                     **{f"{name}_{k}": v for name, r in results.items() for k, v in r.items()},
                     "MB": nbytes * mb})
    return rows


def copy_row(device, shape, torch: Torch, reps: int, batch: int, rng) -> dict:
    """The device copy of the pool input: XLA's negation (a read and a write) and, where
    torch is there, torch's copy_."""
    x = rng.standard_normal(shape).astype(np.float32)
    jx = jax.device_put(x, device)
    neg = jax.jit(lambda x: -x)
    calls, sync = {"xla": lambda: neg(jx)}, {"xla": jax_sync}
    if torch.torch is not None:
        tx = torch.tensor(x)
        dst = torch.torch.empty_like(tx)
        calls["torch"] = lambda: dst.copy_(tx)
        sync["torch"] = torch.sync
    results = timed(calls, sync, reps, batch)
    nbytes = 2 * x.nbytes
    best = min(r["ms"] for r in results.values())
    return {"op": "copy", "shape": list(shape), "bytes": nbytes,
            **{f"{name}_{k}": v for name, r in results.items() for k, v in r.items()},
            "GBps": nbytes / best * 1e-6}


def add_ratios(rows: list[dict], copies: dict[tuple, dict]) -> None:
    for row in rows:
        ours = row["ours_ms"]
        row["ours_GBps"] = row["bytes"] / ours * 1e-6
        copy = copies.get(tuple(row["shape"])) or max(copies.values(), key=lambda c: c["bytes"])
        row["of_copy"] = row["ours_GBps"] / copy["GBps"]
        row["ours_per_torch"] = ours / row["torch_ms"] if "torch_ms" in row else None
        row["ours_per_xla"] = ours / row["xla_ms"]


def fmt(v, spec=".3f") -> str:
    return "-" if v is None else format(v, spec)


def table(result: dict) -> str:
    m = result["machine"]
    lines = [(f"GPU: {m['gpu']}; jax {m['jax']}, torch {m['torch']}; CUDA module "
              f"{m['cuda_module']}")]
    for c in result["copies"]:
        lines.append(f"copy {tuple(c['shape'])}: xla {fmt(c.get('xla_ms'))} ms, torch "
                     f"{fmt(c.get('torch_ms'))} ms, {c['GBps']:.0f} GB/s (read + write)")
    head = (f"{'op':16} {'shape':20} {'fmt':5} {'ours ms':>8} {'xla ms':>8} {'torch ms':>8} "
            f"{'ours/torch':>10} {'ours/xla':>8} {'GB/s':>6} {'of copy':>7} {'sync ms':>8} "
            f"{'xla sync':>8} {'equal':>5}")
    lines += [head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(
            f"{r['op']:16} {tuple(r['shape'])!s:20} {r['format']:5} {fmt(r['ours_ms']):>8} "
            f"{fmt(r['xla_ms']):>8} {fmt(r.get('torch_ms')):>8} "
            f"{fmt(r['ours_per_torch'], '.2f'):>10} {fmt(r['ours_per_xla'], '.2f'):>8} "
            f"{r['ours_GBps']:6.0f} {r['of_copy']:7.2f} {fmt(r['ours_sync_ms']):>8} "
            f"{fmt(r['xla_sync_ms']):>8} {r['equal']!s:>5}")
    return "\n".join(lines)


def machine(device, torch: Torch) -> dict:
    import jaxlib
    return {"gpu": device.device_kind, "jax": jax.__version__, "jaxlib": jaxlib.__version__,
            "torch": torch.torch.__version__ if torch.torch is not None else None,
            "python": platform.python_version(),
            "cuda_module": cuda._jax_unpool_cuda.build_info() if cuda.available() else None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--reps", type=int, default=25)
    parser.add_argument("--batch", type=int, default=5, help="calls per sample (big shapes)")
    parser.add_argument("--quick", action="store_true", help="tiny shapes only (a smoke test)")
    parser.add_argument("--platform", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args(argv)
    if args.platform == "cuda" and not cuda.available():
        print("jax_unpool has no CUDA module: build it first (tools/gpu-check)", file=sys.stderr)
        return 2
    device = jax.devices(args.platform)[0]
    rng = np.random.default_rng(0)
    torch = Torch(args.platform)
    started = time.perf_counter()
    shapes = TINY if args.quick else (*BIG, *SMALLER, *TINY)
    copies = {tuple(s): copy_row(device, s, torch, args.reps, args.batch, rng)
              for s in (TINY[:1] if args.quick else BIG)}
    rows = []
    for shape in shapes:
        rows += rows_for(device, shape, "NCHW", torch, args.reps, args.batch, rng)
        print(f"{shape} NCHW done at {time.perf_counter() - started:.0f} s", flush=True)
    if not args.quick:
        rows += rows_for(device, BIG[1], "NHWC", torch, args.reps, args.batch, rng)
    add_ratios(rows, copies)
    result = {"machine": machine(device, torch), "copies": list(copies.values()), "rows": rows,
              "seconds": time.perf_counter() - started}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-bench.json").write_text(json.dumps(result, indent=1))
    text = table(result)
    (args.out / "gpu-bench.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
