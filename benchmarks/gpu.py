"""GPU benchmark: jax_unpool's CUDA kernels against XLA's ops (ju.reference, what the GPU
ran before them), the dense XLA-ops lowering (JAX_UNPOOL_BACKEND=xla, in a child process,
where this build has it), PyTorch CUDA and a device copy, in one run.

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
op must move at least: inputs read once, results written once, and for a gather the
32-byte sectors of the gathered tensor that its indices touch (at (32, 64, 224, 224) 2x2,
15 of 16: about 590 MB in all, not the 308 MB of the gathered values alone); ``of_copy``
is that against the device copy's GB/s (read + write of the pool input) measured in the
same run. ``goal`` is issue 30's bound on ours/torch. Nothing here asserts a timing; each
row does check that ours equals XLA's result (``equal``).

Every row is written to gpu-bench.json and gpu-bench.txt in --out (default: $OUT, else the
current directory) as soon as it is measured, the biggest shape first, so that a run
stopped at its time limit keeps what it measured. At the end, ``routing`` names, per op,
the faster of the CUDA kernels and XLA's ops at the first shape: what
jax_unpool.backends.cuda.CUDA_OPS should hold. ``--platform cpu --quick`` runs the same
code on the CPU kernels (no torch, a smoke test of this script where there is no GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
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


SECTOR = 32  # bytes: the unit a GPU reads global memory in


def gathered_sectors(idx: np.ndarray, plane: int, itemsize: int = 4) -> int:
    """The 32-byte sectors of a (N, C, plane) tensor of `itemsize` values that a gather at
    `idx` (flat positions per plane, channels first) reads."""
    per_plane = idx.reshape(-1, idx.shape[-2] * idx.shape[-1]).astype(np.int64)
    flat = per_plane + np.arange(per_plane.shape[0])[:, None] * plane
    touched = np.zeros(-(-per_plane.shape[0] * plane * itemsize // SECTOR), bool)
    touched[flat.reshape(-1) * itemsize // SECTOR] = True
    return int(touched.sum())


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


def rows_for(device, shape, fmt: str, torch: Torch, reps: int, batch: int, rng,
             contenders=("ours", "xla")) -> list[dict]:
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
    pool_bytes = full * f32 + quarter * (f32 + i32)  # read x; write values and indices
    unpool_bytes = quarter * (f32 + i32) + full * f32  # read values and indices; write all
    gather_bytes = quarter * (i32 + f32) + gathered_sectors(idx, h * w) * SECTOR
    ops = {  # op: (jax function of the library, jax args, bytes the op must move)
        "unpool": (unpool, (jpooled, jidx), unpool_bytes),
        "unpool_backward": (unpool_backward, (jg, jidx), gather_bytes),
        "pool": (pool, (jx,), pool_bytes),
        "pool+grad": (pool_grad, (jx, jgp), pool_bytes + unpool_bytes),
        "segnet": (segnet, (jx, jg), pool_bytes + unpool_bytes + gather_bytes + unpool_bytes),
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
        fns = {"ours": make(ju), "xla": make(ju.reference)}
        calls = {name: lambda f=fns[name], a=args: f(*a) for name in contenders}
        sync = {name: jax_sync for name in contenders}
        if t is not None:
            calls["torch"] = torch_ops[op]
            sync["torch"] = torch.sync
        results = timed(calls, sync, reps, batch if full * f32 > 1 << 20 else 20 * batch)
        equal = "xla" not in contenders or all(
            np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(
                jax.tree.leaves(fns["ours"](*args)), jax.tree.leaves(fns["xla"](*args))))
        rows.append({"op": op, "shape": list(shape), "format": fmt, "bytes": int(nbytes),
                     "equal": bool(equal),
                     **{f"{name}_{k}": v for name, r in results.items() for k, v in r.items()},
                     "MB": nbytes * mb})
        yield rows[-1]


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


# Issue 30's goals, as bounds on ours/torch at (32, 64, 224, 224) float32.
GOALS = {"unpool": 0.5, "unpool_backward": 1.0, "pool": 1 / 1.2, "pool+grad": 0.7,
         "segnet": 0.5}


def add_ratios(row: dict, copies: dict[tuple, dict]) -> None:
    ours = row["ours_ms"]
    row["ours_GBps"] = row["bytes"] / ours * 1e-6
    copy = copies.get(tuple(row["shape"])) or max(copies.values(), key=lambda c: c["bytes"])
    row["of_copy"] = row["ours_GBps"] / copy["GBps"]
    row["ours_per_torch"] = ours / row["torch_ms"] if "torch_ms" in row else None
    row["ours_per_xla"] = ours / row["xla_ms"]
    row["goal"] = GOALS[row["op"]] if tuple(row["shape"]) == BIG[0] else None


def fmt(v, spec=".3f") -> str:
    return "-" if v is None else format(v, spec)


def table(result: dict) -> str:
    m = result["machine"]
    lines = [(f"GPU: {m['gpu']}; jax {m['jax']}, torch {m['torch']}; CUDA module "
              f"{m['cuda_module']}"), f"dense XLA-ops lowering: {result['dense_xla']}"]
    for c in result["copies"]:
        lines.append(f"copy {tuple(c['shape'])}: xla {fmt(c.get('xla_ms'))} ms, torch "
                     f"{fmt(c.get('torch_ms'))} ms, {c['GBps']:.0f} GB/s (read + write)")
    head = (f"{'op':16} {'shape':20} {'fmt':5} {'ours ms':>8} {'xla ms':>8} {'dense ms':>8} "
            f"{'torch ms':>8} {'ours/torch':>10} {'goal':>5} {'ours/xla':>8} {'GB/s':>6} "
            f"{'of copy':>7} {'sync ms':>8} {'xla sync':>8} {'equal':>5}")
    lines += [head, "-" * len(head)]
    for r in result["rows"]:
        lines.append(
            f"{r['op']:16} {tuple(r['shape'])!s:20} {r['format']:5} {fmt(r['ours_ms']):>8} "
            f"{fmt(r['xla_ms']):>8} {fmt(r.get('dense_xla_ms')):>8} {fmt(r.get('torch_ms')):>8} "
            f"{fmt(r['ours_per_torch'], '.2f'):>10} {fmt(r['goal'], '.2f'):>5} "
            f"{fmt(r['ours_per_xla'], '.2f'):>8} {r['ours_GBps']:6.0f} {r['of_copy']:7.2f} "
            f"{fmt(r['ours_sync_ms']):>8} {fmt(r['xla_sync_ms']):>8} {r['equal']!s:>5}")
    if result.get("routing"):
        lines.append("routing (the faster at the first shape): " + ", ".join(
            f"{op} -> {r['route']}" for op, r in result["routing"].items()))
    return "\n".join(lines)


class ResultsFile:
    """gpu-bench.json and gpu-bench.txt, rewritten whole (atomically: a reader never sees a
    half-written file) each time a row is added."""

    def __init__(self, out: Path, machine: dict):
        out.mkdir(parents=True, exist_ok=True)
        self.out = out
        self.result = {"machine": machine, "copies": [], "rows": [], "dense_xla": "not run",
                       "routing": None, "seconds": 0.0}
        self.started = time.perf_counter()
        self.save()

    def add(self, key: str, item: dict) -> None:
        self.result[key].append(item)
        self.save()

    def save(self) -> None:
        self.result["seconds"] = time.perf_counter() - self.started
        for name, text in (("gpu-bench.json", json.dumps(self.result, indent=1)),
                           ("gpu-bench.txt", table(self.result) + "\n")):
            tmp = self.out / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.out / name)


def measure_rows(cases, measure: Callable[..., list[dict]], results: ResultsFile,
                 copies: dict[tuple, dict]) -> None:
    """Each case's rows (measure(*case)), each written out as soon as it is measured."""
    for case in cases:
        for row in measure(*case):
            add_ratios(row, copies)
            results.add("rows", row)


# The child that measures the dense XLA-ops lowering: ju's ops with JAX_UNPOOL_BACKEND=xla.
DENSE_ENV = {"JAX_UNPOOL_BACKEND": "xla"}


def dense_child(args) -> int:
    """Prints a JSON line per row ("DENSE {...}"), or "DENSE_ABSENT" where this build has no
    dense lowering (the variable changes nothing: the CUDA kernels are still called)."""
    device = jax.devices(args.platform)[0]
    x = jax.ShapeDtypeStruct((1, 1, 4, 4), jnp.float32)
    text = jax.jit(lambda v: ju.max_unpool2d(*ju.max_pool2d_with_indices(v, 2), 2)).lower(
        x).as_text()
    if "jax_unpool" in text:
        print("DENSE_ABSENT", flush=True)
        return 0
    rng = np.random.default_rng(0)
    shape = tuple(int(n) for n in args.dense_shape.split(","))
    for row in rows_for(device, shape, "NCHW", Torch("none"), args.reps, args.batch, rng,
                        contenders=("ours",)):
        print("DENSE " + json.dumps({"op": row["op"], "shape": row["shape"],
                                     "format": row["format"], "ms": row["ours_ms"]}),
              flush=True)
    return 0


def dense_rows(args, shape: tuple, results: ResultsFile, timeout: float) -> None:
    """Runs dense_child in a child process at `shape` (the first NCHW rows' shape, which the
    routing reads) and adds its times (dense_xla_ms) to those rows."""
    env = dict(os.environ, **DENSE_ENV)
    command = [sys.executable, __file__, "--dense-child", "--platform", args.platform,
               "--reps", str(args.reps), "--batch", str(args.batch),
               "--dense-shape", ",".join(str(n) for n in shape)]
    try:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        stdout, status = proc.stdout, f"exit {proc.returncode}"
    except subprocess.TimeoutExpired as e:
        stdout = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        status = f"stopped after {timeout:.0f} s"
    if "DENSE_ABSENT" in stdout:
        results.result["dense_xla"] = "absent: JAX_UNPOOL_BACKEND=xla still calls the kernels"
    else:
        measured = [json.loads(line[6:]) for line in stdout.splitlines()
                    if line.startswith("DENSE {")]
        for m in measured:
            for row in results.result["rows"]:
                if (row["op"], row["shape"], row["format"]) == (m["op"], m["shape"], m["format"]):
                    row["dense_xla_ms"] = m["ms"]
        results.result["dense_xla"] = f"{len(measured)} rows measured ({status})"
    results.save()


ROUTED_OPS = {"unpool": "max_unpool", "unpool_backward": "max_unpool_backward",
              "pool": "max_pool"}


def routing(rows: list[dict]) -> dict:
    """Per op, at the first shape measured: the faster of the CUDA kernels and XLA's ops
    (ju.reference's lowering, or the dense one where measured)."""
    out = {}
    first = rows[0]["shape"] if rows else None
    for row in rows:
        if row["shape"] != first or row["format"] != "NCHW" or row["op"] not in ROUTED_OPS:
            continue
        xla = min(v for v in (row["xla_ms"], row.get("dense_xla_ms")) if v is not None)
        out[ROUTED_OPS[row["op"]]] = {"cuda_ms": row["ours_ms"], "xla_ms": xla,
                                      "route": "cuda" if row["ours_ms"] <= xla else "xla"}
    return out


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
    parser.add_argument("--dense", choices=("auto", "on", "off"), default="auto",
                        help="measure the dense XLA-ops lowering (auto: on CUDA)")
    parser.add_argument("--dense-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--dense-shape", default=",".join(map(str, BIG[0])),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.dense_child:
        return dense_child(args)
    if args.platform == "cuda" and not cuda.available():
        print("jax_unpool has no CUDA module: build it first (tools/gpu-check)", file=sys.stderr)
        return 2
    device = jax.devices(args.platform)[0]
    rng = np.random.default_rng(0)
    torch = Torch(args.platform)
    results = ResultsFile(args.out, machine(device, torch))
    copies = {}
    for s in TINY[:1] if args.quick else BIG:
        copies[tuple(s)] = copy_row(device, s, torch, args.reps, args.batch, rng)
        results.add("copies", copies[tuple(s)])
    shapes = TINY if args.quick else (*BIG, *SMALLER, *TINY)
    cases = [(device, s, "NCHW", torch, args.reps, args.batch, rng) for s in shapes]
    if not args.quick:
        cases.append((device, BIG[1], "NHWC", torch, args.reps, args.batch, rng))
    measure_rows(cases[:1], rows_for, results, copies)  # the goals' shape first
    if args.dense == "on" or (args.dense == "auto" and args.platform == "cuda"):
        dense_rows(args, cases[0][1], results, timeout=60)
    measure_rows(cases[1:], rows_for, results, copies)
    results.result["routing"] = routing(results.result["rows"])
    results.save()
    print(table(results.result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
