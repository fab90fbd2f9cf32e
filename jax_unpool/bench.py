"""Side-by-side benchmark of the CPU kernels against XLA, PyTorch and a memory roofline.

    python -m jax_unpool bench [--quick] [--json PATH] [--reps N] ...
    python benchmarks/run.py ...            (the same)

For each shape, value dtype and index dtype it times, jitted and in one run:

- ``jax_unpool``: :func:`jax_unpool.max_unpool2d` / :func:`max_unpool2d_backward` (the FFI
  kernels);
- ``xla``: the pure-jnp reference (:mod:`jax_unpool.reference`), i.e. XLA's scatter and
  gather, on the same inputs;
- ``torch``: ``F.max_unpool2d`` and ``torch.gather`` with int64 indices (the torch way) on
  as many threads as JAX's CPU client has cores, when PyTorch is installed;
- ``roofline``: XLA ops with the same memory traffic. Forward: a copy of an output-sized
  array (it allocates and writes as much as the forward and reads more). Backward: a sum
  over grad_output plus a copy of an input-sized array.

Indices are those of a 2x2, stride-2 max-pool (one per window, drawn with numpy, not with
the op under test). Further sections: NHWC against NCHW, and
:func:`jax_unpool.max_pool2d_with_indices` against ``torch.max_pool2d(return_indices=True)``.

Every number is the median over ``--reps`` samples after warm-up; the contenders of one
row take turns sample by sample, so load from elsewhere on the machine hits them alike
and the ratios of a row are measured together. This is a benchmark, not a test: nothing
here asserts a timing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jax_unpool as ju

LARGE_SHAPES = ((8, 64, 112, 112), (32, 64, 56, 56), (16, 256, 28, 28), (64, 128, 14, 14))
TINY_SHAPE = (1, 3, 4, 4)
QUICK_SHAPES = ((2, 4, 8, 8), TINY_SHAPE)
KERNEL = 2  # 2x2 windows, stride 2: outputs are (2H, 2W)
SAMPLE_SECONDS = 5e-3  # a sample repeats a fast call until it lasts about this long
# Idle time before each sample: OpenMP (torch) and Eigen (XLA) worker threads spin for a
# while after a parallel region, and on a small machine whoever runs next would share
# the cores with them.
PAUSE_SECONDS = 0.01

# The targets of the performance issue, checked on float32 values with int32 indices.
TARGETS = {
    "forward_vs_xla": (">=", 2.0),
    "forward_vs_torch": (">=", 1.0),
    "forward_vs_roofline": ("<=", 1.2),
    "backward_vs_xla": (">=", 1.25),
    "backward_vs_torch": (">=", 1.0),
    "backward_vs_roofline": ("<=", 1.3),
    "tiny_forward_vs_xla_per_call": ("<=", 1.2),
    "tiny_backward_vs_xla_per_call": ("<=", 1.2),
    "nhwc_vs_nchw_forward": ("<=", 1.3),
    "nhwc_vs_nchw_backward": ("<=", 1.3),
    "pool_vs_torch": ("<=", 2.0),
}


# --------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------

def pool_indices(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """NCHW indices as a 2x2, stride-2 max-pool of a (2H, 2W) input produces them: one
    flat position per window, ``(2h + dh) * 2W + 2w + dw``, so unique within a plane."""
    *_, h, w = shape
    dh = rng.integers(0, KERNEL, size=shape)
    dw = rng.integers(0, KERNEL, size=shape)
    rows = np.arange(h)[:, None] * KERNEL + dh
    cols = np.arange(w)[None, :] * KERNEL + dw
    return rows * (w * KERNEL) + cols


def _values(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(jnp.dtype(dtype))


def _nhwc(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1))


# --------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------

def _measure(calls: dict[str, Callable[[], Any]], reps: int, warmup: int) -> dict[str, float]:
    """Median milliseconds per call of each zero-argument call, in its steady state. The
    calls take turns sample by sample, in an order that rotates; before a sample come a
    pause and an untimed call; a sample repeats a fast call until it lasts
    ~SAMPLE_SECONDS. (Taking turns spreads load from elsewhere over all calls alike;
    the untimed call gives each sample the same cache state: without it, whoever's
    data some earlier call left in the last-level cache -- hundreds of MB here -- wins.)"""
    repeat = {}
    for name, call in calls.items():
        for _ in range(warmup):
            call()
        start = time.perf_counter()
        call()
        once = time.perf_counter() - start
        repeat[name] = max(1, min(2000, int(SAMPLE_SECONDS / max(once, 1e-7))))
    samples: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for rep in range(reps):
        # The order rotates: each call follows each other one in turn.
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            call = calls[name]
            time.sleep(PAUSE_SECONDS)
            call()  # untimed: the timed call finds its own data, not another's, in cache
            start = time.perf_counter()
            for _ in range(repeat[name]):
                call()
            samples[name].append((time.perf_counter() - start) / repeat[name])
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


def inputs(*arrays: np.ndarray) -> list[jax.Array]:
    """Fresh copies: every contender reads its own, for one that read what another has
    just read would find it in cache and win for that alone. (The numpy copy comes first:
    on CPU a device array may share an aligned numpy array's memory.)"""
    return [jnp.asarray(np.array(a, copy=True)) for a in arrays]


def _jax_call(fn: Callable, *args: Any) -> Callable[[], Any]:
    return lambda: jax.block_until_ready(fn(*args))


def _checked_copy(like: jax.Array) -> Callable:
    """jit(jnp.copy), after checking that the compiled program really copies."""
    copy = jax.jit(jnp.copy)
    hlo = copy.lower(like).compile().as_text()
    if " copy(" not in hlo:  # an elided copy would make the roofline meaningless
        raise RuntimeError(f"bench: XLA elided the roofline copy:\n{hlo}")
    return copy


def _torch(threads: int):
    """PyTorch on `threads` threads, or None when it is not installed (it is no
    dependency of jax_unpool; only this benchmark uses it)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def _to_torch(torch, a: np.ndarray):
    """A torch copy of a numpy array; bfloat16 (ml_dtypes) goes over as its bits."""
    if a.dtype == jnp.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None else num / den


# --------------------------------------------------------------------------------------
# sections
# --------------------------------------------------------------------------------------

def _unpool_rows(shape, dtype, index_dtype, torch, reps, warmup, rng) -> list[dict]:
    """Forward and backward rows of one NCHW configuration: ours, XLA, torch, roofline."""
    n, c, h, w = shape
    hw_out = (h * KERNEL, w * KERNEL)
    out_shape = (n, c, *hw_out)
    x_np = _values(rng, shape, dtype)
    i_np = pool_indices(rng, shape).astype(index_dtype)
    g_np = _values(rng, out_shape, dtype)
    x_struct = jax.ShapeDtypeStruct(shape, x_np.dtype)

    ours_fwd = jax.jit(lambda x, i: ju.max_unpool2d(x, i, KERNEL))
    xla_fwd = jax.jit(lambda x, i: ju.reference.max_unpool2d(x, i, KERNEL))
    ours_bwd = jax.jit(lambda g, i: ju.max_unpool2d_backward(g, x_struct, i, hw_out))
    xla_bwd = jax.jit(lambda g, i: ju.reference.max_unpool2d_backward(g, x_struct, i, hw_out))
    copy, total = _checked_copy(jnp.asarray(g_np)), jax.jit(jnp.sum)

    fwd = {"jax_unpool": _jax_call(ours_fwd, *inputs(x_np, i_np)),
           "xla": _jax_call(xla_fwd, *inputs(x_np, i_np)),
           "roofline": _jax_call(copy, *inputs(g_np))}
    bwd = {"jax_unpool": _jax_call(ours_bwd, *inputs(g_np, i_np)),
           "xla": _jax_call(xla_bwd, *inputs(g_np, i_np)),
           "roofline_sum": _jax_call(total, *inputs(g_np)),
           "roofline_copy": _jax_call(copy, *inputs(x_np))}
    if torch is not None:
        tx, tg = _to_torch(torch, x_np), _to_torch(torch, g_np)
        ti = torch.from_numpy(i_np.astype(np.int64))  # torch's index type
        try:
            torch.nn.functional.max_unpool2d(tx, ti, KERNEL)
            fwd["torch"] = lambda: torch.nn.functional.max_unpool2d(tx, ti, KERNEL)
        except RuntimeError:  # a value dtype torch's CPU kernel lacks: no torch column
            pass
        ti_planes, tg_planes = ti.view(n, c, -1), tg.view(n, c, -1)
        bwd["torch"] = lambda: torch.gather(tg_planes, 2, ti_planes).view(shape)

    t_fwd = _measure(fwd, reps, warmup)
    t_bwd = _measure(bwd, reps, warmup)
    t_bwd["roofline"] = t_bwd.pop("roofline_sum") + t_bwd.pop("roofline_copy")
    common = {"section": "unpool", "shape": list(shape), "output_shape": list(out_shape),
              "dtype": dtype, "index_dtype": index_dtype, "layout": "NCHW"}
    rows = []
    for op, t in (("forward", t_fwd), ("backward", t_bwd)):
        ours = t["jax_unpool"]
        rows.append({**common, "op": op, "jax_unpool_ms": ours, "xla_ms": t["xla"],
                     "torch_ms": t.get("torch"), "roofline_ms": t["roofline"],
                     "speedup_vs_xla": _ratio(t["xla"], ours),
                     "speedup_vs_torch": _ratio(t.get("torch"), ours),
                     "vs_roofline": _ratio(ours, t["roofline"])})
    return rows


def _layout_rows(shape, dtype, index_dtype, reps, warmup, rng) -> list[dict]:
    """Forward and backward of jax_unpool in NHWC against NCHW on the same data."""
    n, c, h, w = shape
    hw_out = (h * KERNEL, w * KERNEL)
    x_np = _values(rng, shape, dtype)
    i_np = pool_indices(rng, shape).astype(index_dtype)
    g_np = _values(rng, (n, c, *hw_out), dtype)
    nchw = [jnp.asarray(a) for a in (x_np, i_np, g_np)]
    nhwc = [jnp.asarray(_nhwc(a)) for a in (x_np, i_np, g_np)]

    def fns(fmt):
        x_struct = jax.ShapeDtypeStruct(shape if fmt == "NCHW" else _nhwc(x_np).shape,
                                        x_np.dtype)
        fwd = jax.jit(lambda x, i: ju.max_unpool2d(x, i, KERNEL, data_format=fmt))
        bwd = jax.jit(lambda g, i: ju.max_unpool2d_backward(g, x_struct, i, hw_out,
                                                             data_format=fmt))
        return fwd, bwd

    (f_nchw, b_nchw), (f_nhwc, b_nhwc) = fns("NCHW"), fns("NHWC")
    t = _measure({"fwd_nchw": _jax_call(f_nchw, nchw[0], nchw[1]),
                  "fwd_nhwc": _jax_call(f_nhwc, nhwc[0], nhwc[1]),
                  "bwd_nchw": _jax_call(b_nchw, nchw[2], nchw[1]),
                  "bwd_nhwc": _jax_call(b_nhwc, nhwc[2], nhwc[1])}, reps, warmup)
    common = {"section": "layout", "shape": list(shape), "dtype": dtype,
              "index_dtype": index_dtype}
    return [{**common, "op": op, "nchw_ms": t[f"{k}_nchw"], "nhwc_ms": t[f"{k}_nhwc"],
             "nhwc_vs_nchw": t[f"{k}_nhwc"] / t[f"{k}_nchw"]}
            for op, k in (("forward", "fwd"), ("backward", "bwd"))]


def _pool_rows(shape, dtype, torch, reps, warmup, rng) -> list[dict]:
    """max_pool2d_with_indices (2x2, stride 2) of a (N, C, 2H, 2W) input, whose results
    have the benchmark shape, against torch's max_pool2d(return_indices=True)."""
    n, c, h, w = shape
    in_shape = (n, c, h * KERNEL, w * KERNEL)
    x_np = _values(rng, in_shape, dtype)
    pool = jax.jit(lambda x: ju.max_pool2d_with_indices(x, KERNEL))
    calls = {"jax_unpool": _jax_call(pool, jnp.asarray(x_np))}
    if torch is not None:
        tx = _to_torch(torch, x_np)
        try:
            torch.nn.functional.max_pool2d(tx, KERNEL, return_indices=True)
            calls["torch"] = lambda: torch.nn.functional.max_pool2d(tx, KERNEL,
                                                                    return_indices=True)
        except RuntimeError:
            pass
    t = _measure(calls, reps, warmup)
    return [{"section": "pool", "op": "max_pool2d_with_indices", "shape": list(shape),
             "input_shape": list(in_shape), "dtype": dtype, "index_dtype": "int32",
             "jax_unpool_ms": t["jax_unpool"], "torch_ms": t.get("torch"),
             "vs_torch": _ratio(t["jax_unpool"], t.get("torch"))}]


# --------------------------------------------------------------------------------------
# summary and output
# --------------------------------------------------------------------------------------

def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(rows: list[dict]) -> dict[str, dict]:
    """The targets, each the median over the large shapes (float32 values, int32
    indices) of the per-shape ratio, or the tiny shape's ratio; None when not measured."""
    large = [list(s) for s in LARGE_SHAPES]

    def pick(section, op, field, shapes):
        return _median([r.get(field) for r in rows
                        if r["section"] == section and r["op"] == op and r["shape"] in shapes
                        and r["dtype"] == "float32" and r["index_dtype"] == "int32"])

    values = {}
    for op in ("forward", "backward"):
        values[f"{op}_vs_xla"] = pick("unpool", op, "speedup_vs_xla", large)
        values[f"{op}_vs_torch"] = pick("unpool", op, "speedup_vs_torch", large)
        values[f"{op}_vs_roofline"] = pick("unpool", op, "vs_roofline", large)
        tiny = pick("unpool", op, "speedup_vs_xla", [list(TINY_SHAPE)])
        values[f"tiny_{op}_vs_xla_per_call"] = None if tiny is None else 1 / tiny
        values[f"nhwc_vs_nchw_{op}"] = pick("layout", op, "nhwc_vs_nchw", large)
    values["pool_vs_torch"] = pick("pool", "max_pool2d_with_indices", "vs_torch", large)
    summary = {}
    for name, (cmp, target) in TARGETS.items():
        v = values[name]
        holds = None if v is None else (v >= target if cmp == ">=" else v <= target)
        summary[name] = {"value": v, "target": f"{cmp} {target}", "holds": holds}
    return summary


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _ms(v: float | None) -> str:
    return _fmt(v, ".4f" if v is not None and v < 0.1 else ".2f")  # tiny shapes: to 0.1 us


def format_table(rows: list[dict], summary: dict[str, dict]) -> str:
    lines = []
    unpool = [r for r in rows if r["section"] == "unpool"]
    if unpool:
        lines.append("max_unpool2d (NCHW): milliseconds per call; xla/ours and torch/ours are "
                     "speedups, ours/roof is the ratio to the roofline estimate")
        head = (f"{'op':<9}{'shape':<20}{'dtype':<10}{'index':<7}{'ours':>9}{'xla':>9}"
                f"{'torch':>9}{'roof':>9}{'xla/ours':>10}{'torch/ours':>11}{'ours/roof':>10}")
        lines += [head, "-" * len(head)]
        for r in unpool:
            lines.append(
                f"{r['op']:<9}{'x'.join(map(str, r['shape'])):<20}{r['dtype']:<10}"
                f"{r['index_dtype']:<7}{_ms(r['jax_unpool_ms']):>9}{_ms(r['xla_ms']):>9}"
                f"{_ms(r['torch_ms']):>9}{_ms(r['roofline_ms']):>9}"
                f"{_fmt(r['speedup_vs_xla']):>10}{_fmt(r['speedup_vs_torch']):>11}"
                f"{_fmt(r['vs_roofline']):>10}")
    layout = [r for r in rows if r["section"] == "layout"]
    if layout:
        lines += ["", "layout: jax_unpool in NHWC against NCHW (milliseconds per call)"]
        head = (f"{'op':<9}{'shape':<20}{'dtype':<10}{'index':<7}{'NCHW':>9}{'NHWC':>9}"
                f"{'NHWC/NCHW':>11}")
        lines += [head, "-" * len(head)]
        for r in layout:
            lines.append(f"{r['op']:<9}{'x'.join(map(str, r['shape'])):<20}{r['dtype']:<10}"
                         f"{r['index_dtype']:<7}{_ms(r['nchw_ms']):>9}{_ms(r['nhwc_ms']):>9}"
                         f"{_fmt(r['nhwc_vs_nchw']):>11}")
    pool = [r for r in rows if r["section"] == "pool"]
    if pool:
        lines += ["", ("max_pool2d_with_indices (2x2, stride 2; shape = pooled result) "
                       "against torch.max_pool2d(return_indices=True)")]
        head = f"{'shape':<20}{'dtype':<10}{'ours':>9}{'torch':>9}{'ours/torch':>11}"
        lines += [head, "-" * len(head)]
        for r in pool:
            lines.append(f"{'x'.join(map(str, r['shape'])):<20}{r['dtype']:<10}"
                         f"{_ms(r['jax_unpool_ms']):>9}{_ms(r['torch_ms']):>9}"
                         f"{_fmt(r['vs_torch']):>11}")
    lines += ["", "targets (float32 values, int32 indices; median over the large shapes)"]
    for name, s in summary.items():
        verdict = {True: "holds", False: "MISSED", None: "not measured"}[s["holds"]]
        lines.append(f"  {name:<32}{_fmt(s['value'], '.3f'):>8}  (target {s['target']}): "
                     f"{verdict}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    torch = sys.modules.get("torch")
    return {"cpu": model, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "jax": jax.__version__,
            "jaxlib": importlib.metadata.version("jaxlib"),
            "numpy": np.__version__, "torch": getattr(torch, "__version__", None)}


# --------------------------------------------------------------------------------------
# command line
# --------------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jax_unpool bench", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: tiny shapes, 2 samples (a few seconds)")
    p.add_argument("--json", metavar="PATH", help="also write the rows and targets as JSON")
    p.add_argument("--reps", type=int, help="samples per median (default 7; 2 with --quick)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls first (default 2)")
    p.add_argument("--shapes", nargs="+", metavar="NxCxHxW",
                   help="input shapes (default: the four large ones and 1x3x4x4)")
    p.add_argument("--dtypes", nargs="+",
                   help="value dtypes (default float32 bfloat16; float32 with --quick)")
    p.add_argument("--index-dtypes", nargs="+", default=["int32", "int64"],
                   choices=["int32", "int64"], help="index dtypes (default int32 int64)")
    p.add_argument("--sections", nargs="+", default=["unpool", "layout", "pool"],
                   choices=["unpool", "layout", "pool"], help="what to run (default all)")
    p.add_argument("--no-torch", action="store_true", help="leave out the torch columns")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.shapes:
        shapes = [tuple(int(d) for d in s.split("x")) for s in args.shapes]
    else:
        shapes = list(QUICK_SHAPES if args.quick else (*LARGE_SHAPES, TINY_SHAPE))
    dtypes = args.dtypes or (["float32"] if args.quick else ["float32", "bfloat16"])
    reps = args.reps or (2 if args.quick else 7)
    warmup = 1 if args.quick else args.warmup
    threads = len(os.sched_getaffinity(0))  # the cores XLA's CPU client uses too
    torch = None if args.no_torch else _torch(threads)
    rng = np.random.default_rng(0)
    load_before = os.getloadavg()
    rows: list[dict] = []
    for shape in shapes:
        for index_dtype in args.index_dtypes:
            with jax.enable_x64(index_dtype == "int64"):  # int64 indices need x64
                for dtype in dtypes:
                    if "unpool" in args.sections:
                        rows += _unpool_rows(shape, dtype, index_dtype, torch, reps, warmup,
                                             rng)
                    if "layout" in args.sections:
                        rows += _layout_rows(shape, dtype, index_dtype, reps, warmup, rng)
        if "pool" in args.sections:
            for dtype in dtypes:
                rows += _pool_rows(shape, dtype, torch, reps, warmup, rng)
    summary = summarize(rows)
    # Other processes on a small machine move every number: the load before and after.
    return {"machine": {**machine(), "load_average_before": load_before,
                        "load_average_after": os.getloadavg()},
            "settings": {"quick": args.quick, "reps": reps, "warmup": warmup,
                         "torch_threads": threads},
            "rows": rows, "targets": summary}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    result = run(args)
    m = result["machine"]
    load = ", ".join(f"{a:.2f}" for a in m["load_average_before"])
    print(f"{m['cpu']}, {m['cores']} cores; jax {m['jax']}, torch {m['torch']}; "
          f"median of {result['settings']['reps']} samples; load average {load} before\n")
    print(format_table(result["rows"], result["targets"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
