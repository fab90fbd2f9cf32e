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
- ``roofline``: the machine's memory bandwidth (the copy into faulted pages), measured in
  the same run (below), applied to the bytes the op must move at least (its inputs read
  once, its result written once).

Memory bandwidth (section ``memory``, always run first): numpy on as many threads as JAX
uses, over 256 MiB: a STREAM-like copy and a write-only fill into buffers whose pages are
already faulted in, and the same into fresh buffers (XLA hands out fresh results, whose
pages the OS faults in on first write), of 4 KiB pages and of huge pages. Every row
reports the achieved GB/s and its fraction of the faulted-copy bandwidth, and (``sys``)
the operating system's CPU time per call of ours (all threads): where that is large, the
call's time goes to the OS zeroing the fresh pages of its results, not to the kernel.

Indices are those of a 2x2 (2 per axis), stride-2 max-pool (one per window, drawn with
numpy, not with the op under test), for 1-D, 2-D and 3-D shapes. Further sections: NHWC
against NCHW (2-D), and ``pool``: :func:`jax_unpool.max_pool2d_with_indices` (and 1-D/3-D;
on CPU the native pool) against the XLA-ops pool (:mod:`jax_unpool.reference`) and
``torch.max_poolNd(return_indices=True)``, forward and forward + gradient, channels first
and channels last (torch: channels first only), and ``step``:
one jitted training step of a SegNet-style model with jax_unpool against the same model
with XLA's scatter/gather (:mod:`jax_unpool.cli.bench_step`).

Every number is the median over ``--reps`` samples after warm-up; the contenders of one
row take turns sample by sample, so load from elsewhere on the machine hits them alike
and the ratios of a row are measured together. This is a benchmark, not a test: nothing
here asserts a timing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jax_unpool as ju
from jax_unpool import _args
from jax_unpool._compat import enable_x64
from jax_unpool.cli import bench_step, options

LARGE_SHAPES = ((8, 64, 112, 112), (32, 64, 56, 56), (16, 256, 28, 28), (64, 128, 14, 14))
# Issue 13's 1-D (64, 256, 4096) and 3-D (16, 64, 32, 32, 32) inputs, pooled by 2 per axis.
RANK_SHAPES = ((64, 256, 2048), (16, 64, 16, 16, 16))
TINY_SHAPE = (1, 3, 4, 4)
QUICK_SHAPES = ((2, 4, 8, 8), TINY_SHAPE, (2, 4, 16), (1, 2, 2, 4, 4))
KERNEL = 2  # 2 per axis, stride 2: unpooled outputs are twice the input per spatial axis
SAMPLE_SECONDS = 5e-3  # a sample repeats a fast call until it lasts about this long
# Idle time before each sample: OpenMP (torch) and Eigen (XLA) worker threads spin for a
# while after a parallel region, and on a small machine whoever runs next would share
# the cores with them.
PAUSE_SECONDS = 0.01
BANDWIDTH_BYTES = 256 << 20  # far above any last-level cache
# The SegNet-style step (batch, image size, width); the quick run's is tiny.
STEP = (8, 64, 32)
QUICK_STEP = (2, 16, 4)

# The targets of the performance issues, checked on float32 values with int32 indices
# (2-D, the large shapes).
TARGETS = {
    "forward_vs_xla": (">=", 2.0),
    "forward_vs_torch": (">=", 1.0),
    "backward_vs_xla": (">=", 1.25),
    "backward_vs_torch": (">=", 1.0),
    "tiny_forward_vs_xla_per_call": ("<=", 1.2),
    "tiny_backward_vs_xla_per_call": ("<=", 1.2),
    "nhwc_vs_nchw_forward": ("<=", 1.3),
    "nhwc_vs_nchw_backward": ("<=", 1.3),
    "pool_vs_torch": ("<=", 1.0),
    "pool_grad_vs_torch": ("<=", 0.25),
    "pool_forward_vs_xla": (">=", 2.5),
    "pool_forward_of_bandwidth_32mb": (">=", 0.7),
    "tiny_pool_vs_xla_per_call": ("<=", 1.0),
    # ms per byte of each rank and layout over 2-D NCHW's (forward; the large shapes for
    # 2-D, the rank shapes for 1-D and 3-D)
    "pool_per_byte_nhwc_vs_nchw": ("<=", 1.3),
    "pool_per_byte_ncw_vs_nchw": ("<=", 1.3),
    "pool_per_byte_nwc_vs_nchw": ("<=", 1.3),
    "pool_per_byte_ncdhw_vs_nchw": ("<=", 1.3),
    "pool_per_byte_ndhwc_vs_nchw": ("<=", 1.3),
}
# The pool targets' "large input": where the pool's input is at least this big.
POOL_BANDWIDTH_INPUT_BYTES = 32 << 20


# --------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------

def pool_indices(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Channels-first indices as a 2-per-axis, stride-2 max-pool of an input twice the
    size per spatial axis produces them: one flat position per window (in
    ``prod(2 * spatial)``), so unique within a plane. Any rank: ``shape = (N, C, *spatial)``."""
    spatial = shape[2:]
    out = [KERNEL * d for d in spatial]
    flat = np.zeros(shape, np.int64)
    for a, d in enumerate(spatial):
        view = [1] * len(shape)
        view[2 + a] = d
        coord = np.arange(d).reshape(view) * KERNEL + rng.integers(0, KERNEL, size=shape)
        flat = flat + coord * math.prod(out[a + 1:])
    return flat


def _values(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(jnp.dtype(dtype))


def _nhwc(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def _name(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape))


# --------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------

def _system_seconds() -> float | None:
    """CPU seconds this process has spent in the operating system (all threads), or None
    where there is no getrusage."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def _measure(calls: dict[str, Callable[[], Any]], reps: int, warmup: int,
             system_ms: dict[str, float | None] | None = None) -> dict[str, float]:
    """Median milliseconds per call of each zero-argument call, in its steady state. The
    calls take turns sample by sample, in an order that rotates; before a sample come a
    pause and an untimed call; a sample repeats a fast call until it lasts
    ~SAMPLE_SECONDS. (Taking turns spreads load from elsewhere over all calls alike;
    the untimed call gives each sample the same cache state: without it, whoever's
    data some earlier call left in the last-level cache -- hundreds of MB here -- wins.)
    Given `system_ms`, fills it with each call's median OS CPU milliseconds per call."""
    repeat = {}
    for name, call in calls.items():
        for _ in range(warmup):
            call()
        start = time.perf_counter()
        call()
        once = time.perf_counter() - start
        repeat[name] = max(1, min(2000, int(SAMPLE_SECONDS / max(once, 1e-7))))
    samples: dict[str, list[float]] = {name: [] for name in calls}
    system: dict[str, list[float]] = {name: [] for name in calls}
    names = list(calls)
    for rep in range(reps):
        # The order rotates: each call follows each other one in turn.
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            call = calls[name]
            time.sleep(PAUSE_SECONDS)
            call()  # untimed: the timed call finds its own data, not another's, in cache
            start, start_system = time.perf_counter(), _system_seconds()
            for _ in range(repeat[name]):
                call()
            samples[name].append((time.perf_counter() - start) / repeat[name])
            if start_system is not None:
                system[name].append((_system_seconds() - start_system) / repeat[name])
    if system_ms is not None:
        system_ms.update({name: statistics.median(s) * 1e3 if s else None
                          for name, s in system.items()})
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


def inputs(*arrays: np.ndarray) -> list[jax.Array]:
    """Fresh copies: every contender reads its own, for one that read what another has
    just read would find it in cache and win for that alone. (The numpy copy comes first:
    on CPU a device array may share an aligned numpy array's memory.)"""
    return [jnp.asarray(np.array(a, copy=True)) for a in arrays]


def _jax_call(fn: Callable, *args: Any) -> Callable[[], Any]:
    return lambda: jax.block_until_ready(fn(*args))


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


def _gbps(nbytes: int, ms: float | None) -> float | None:
    return None if ms is None else nbytes / ms / 1e6


# --------------------------------------------------------------------------------------
# memory bandwidth
# --------------------------------------------------------------------------------------

def bandwidth(threads: int, nbytes: int, reps: int, warmup: int) -> dict[str, float]:
    """GB/s of numpy on `threads` threads (each on its own chunk; numpy releases the GIL):
    copy (bytes read + written, as STREAM counts them) and fill (bytes written), into
    buffers already faulted in, into fresh 4 KiB pages (as XLA allocates its results)
    and into fresh transparent huge pages (as numpy, and jax_unpool's unpool kernel for
    results of 32 MB or more, ask for)."""
    n = nbytes // 4 // threads
    src = [np.ones(n, np.float32) for _ in range(threads)]
    dst = [np.zeros(n, np.float32) for _ in range(threads)]
    advise = np._core.multiarray._set_madvise_hugepage
    huge = advise(False)
    try:
        with ThreadPoolExecutor(threads) as pool:
            def each(fn, thp=False):
                def call():
                    advise(thp)
                    list(pool.map(fn, range(threads)))
                return call

            t = _measure({
                "copy_faulted": each(lambda i: np.copyto(dst[i], src[i])),
                "fill_faulted": each(lambda i: dst[i].fill(2.0)),
                "copy_fresh": each(lambda i: src[i].copy()),
                "fill_fresh": each(lambda i: np.full(n, 2.0, np.float32)),
                "copy_fresh_thp": each(lambda i: src[i].copy(), thp=True),
                "fill_fresh_thp": each(lambda i: np.full(n, 2.0, np.float32), thp=True),
            }, reps, warmup)
    finally:
        advise(huge)
    total = n * threads * 4
    return {k: _gbps(total * (2 if k.startswith("copy") else 1), ms) for k, ms in t.items()}


# --------------------------------------------------------------------------------------
# sections
# --------------------------------------------------------------------------------------

UNPOOL = {1: (ju.max_unpool1d, ju.reference.max_unpool1d, ju.max_unpool1d_backward,
              ju.reference.max_unpool1d_backward, "max_unpool1d"),
          2: (ju.max_unpool2d, ju.reference.max_unpool2d, ju.max_unpool2d_backward,
              ju.reference.max_unpool2d_backward, "max_unpool2d"),
          3: (ju.max_unpool3d, ju.reference.max_unpool3d, ju.max_unpool3d_backward,
              ju.reference.max_unpool3d_backward, "max_unpool3d")}
FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
POOL = {1: (ju.max_pool1d_with_indices, ju.reference.max_pool1d_with_indices, "max_pool1d"),
        2: (ju.max_pool2d_with_indices, ju.reference.max_pool2d_with_indices, "max_pool2d"),
        3: (ju.max_pool3d_with_indices, ju.reference.max_pool3d_with_indices, "max_pool3d")}


def _unpool_rows(shape, dtype, index_dtype, torch, reps, warmup, rng, bw) -> list[dict]:
    """Forward and backward rows of one channels-first configuration: ours, XLA, torch,
    and the bandwidth roofline."""
    k = len(shape) - 2
    ours_f, xla_f, ours_b, xla_b, torch_name = UNPOOL[k]
    n, c, *spatial = shape
    out_spatial = tuple(KERNEL * d for d in spatial)
    out_shape = (n, c, *out_spatial)
    x_np = _values(rng, shape, dtype)
    i_np = pool_indices(rng, shape).astype(index_dtype)
    g_np = _values(rng, out_shape, dtype)
    x_struct = jax.ShapeDtypeStruct(shape, x_np.dtype)

    fwd = {"jax_unpool": _jax_call(jax.jit(lambda x, i: ours_f(x, i, KERNEL)),
                                   *inputs(x_np, i_np)),
           "xla": _jax_call(jax.jit(lambda x, i: xla_f(x, i, KERNEL)), *inputs(x_np, i_np))}
    bwd = {"jax_unpool": _jax_call(jax.jit(lambda g, i: ours_b(g, x_struct, i, out_spatial)),
                                   *inputs(g_np, i_np)),
           "xla": _jax_call(jax.jit(lambda g, i: xla_b(g, x_struct, i, out_spatial)),
                            *inputs(g_np, i_np))}
    if torch is not None:
        tx, tg = _to_torch(torch, x_np), _to_torch(torch, g_np)
        ti = torch.from_numpy(i_np.astype(np.int64))  # torch's index type
        t_unpool = getattr(torch.nn.functional, torch_name)
        try:
            t_unpool(tx, ti, KERNEL)
            fwd["torch"] = lambda: t_unpool(tx, ti, KERNEL)
        except RuntimeError:  # a value dtype torch's CPU kernel lacks: no torch column
            pass
        ti_planes, tg_planes = ti.view(n, c, -1), tg.view(n, c, -1)
        bwd["torch"] = lambda: torch.gather(tg_planes, 2, ti_planes).view(shape)

    sys_fwd, sys_bwd = {}, {}
    t_fwd = _measure(fwd, reps, warmup, sys_fwd)
    t_bwd = _measure(bwd, reps, warmup, sys_bwd)
    # The least traffic: values and indices read, the result written (fresh pages).
    small, big = x_np.nbytes + i_np.nbytes, g_np.nbytes
    common = {"section": "unpool", "rank": k, "shape": list(shape),
              "output_shape": list(out_shape), "dtype": dtype, "index_dtype": index_dtype,
              "layout": "channels_first"}
    rows = []
    for op, t, sys_ms, nbytes in (("forward", t_fwd, sys_fwd, small + big),
                                  ("backward", t_bwd, sys_bwd, big + small)):
        rows.append(_row(common, op, t, nbytes, bw, sys_ms))
    return rows


def _row(common: dict, op: str, t: dict[str, float], nbytes: int, bw: dict,
         sys_ms: dict[str, float | None]) -> dict:
    ours = t["jax_unpool"]
    roof = nbytes / bw["copy_faulted"] / 1e6  # ms at DRAM copy bandwidth, no page faults
    return {**common, "op": op, "bytes": nbytes, "jax_unpool_ms": ours, "xla_ms": t.get("xla"),
            "torch_ms": t.get("torch"), "roofline_ms": roof,
            "jax_unpool_sys_ms": sys_ms.get("jax_unpool"), "xla_sys_ms": sys_ms.get("xla"),
            "speedup_vs_xla": _ratio(t.get("xla"), ours),
            "speedup_vs_torch": _ratio(t.get("torch"), ours),
            "vs_roofline": _ratio(ours, roof),
            "jax_unpool_gbps": _gbps(nbytes, ours), "xla_gbps": _gbps(nbytes, t.get("xla")),
            "torch_gbps": _gbps(nbytes, t.get("torch")),
            "bandwidth_fraction": _ratio(_gbps(nbytes, ours), bw["copy_faulted"])}


def _layout_rows(shape, dtype, index_dtype, reps, warmup, rng) -> list[dict]:
    """Forward and backward of jax_unpool in NHWC against NCHW on the same data (2-D)."""
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
    common = {"section": "layout", "rank": 2, "shape": list(shape), "dtype": dtype,
              "index_dtype": index_dtype}
    return [{**common, "op": op, "nchw_ms": t[f"{k}_nchw"], "nhwc_ms": t[f"{k}_nhwc"],
             "nhwc_vs_nchw": t[f"{k}_nhwc"] / t[f"{k}_nchw"]}
            for op, k in (("forward", "fwd"), ("backward", "bwd"))]


def _pool_rows(shape, dtype, torch, reps, warmup, rng, bw, channels_last=False
               ) -> list[dict]:
    """max_poolNd_with_indices (2 per axis, stride 2) of an input twice `shape` per
    spatial axis, whose results have the benchmark shape: the forward, and the forward +
    gradient w.r.t. x, against the XLA-ops pool (whose gradient is XLA's scatter-add) and,
    channels first, against torch (``return_indices=True``, then autograd)."""
    k = len(shape) - 2
    ours_p, xla_p, torch_name = POOL[k]
    n, c, *spatial = shape
    in_shape = (n, c, *(d * KERNEL for d in spatial))
    x_np = _values(rng, in_shape, dtype)
    ct_np = _values(rng, shape, dtype)
    fmt = FORMATS[k][channels_last]
    if channels_last:
        x_np, ct_np = _nhwc(x_np), _nhwc(ct_np)

    def with_grad(pool):
        def f(x, ct):
            (out, idx), vjp = jax.vjp(lambda v: pool(v, KERNEL, data_format=fmt), x)
            return out, idx, vjp((ct, np.zeros(idx.shape, jax.dtypes.float0)))[0]
        return jax.jit(f)

    fwd = {"jax_unpool": _jax_call(jax.jit(lambda x: ours_p(x, KERNEL, data_format=fmt)),
                                   *inputs(x_np)),
           "xla": _jax_call(jax.jit(lambda x: xla_p(x, KERNEL, data_format=fmt)),
                            *inputs(x_np))}
    grad = {"jax_unpool": _jax_call(with_grad(ours_p), *inputs(x_np, ct_np)),
            "xla": _jax_call(with_grad(xla_p), *inputs(x_np, ct_np))}
    if torch is not None and not channels_last:
        t_pool = getattr(torch.nn.functional, torch_name)
        tx, tct = _to_torch(torch, x_np), _to_torch(torch, ct_np)
        tx_grad = tx.clone().requires_grad_(True)

        def torch_grad():
            out, _ = t_pool(tx_grad, KERNEL, return_indices=True)
            return torch.autograd.grad(out, tx_grad, tct)

        try:
            torch_grad()
            fwd["torch"] = lambda: t_pool(tx, KERNEL, return_indices=True)
            grad["torch"] = torch_grad
        except RuntimeError:  # a value dtype torch's CPU kernel lacks
            pass
    sys_fwd, sys_grad = {}, {}
    t_fwd = _measure(fwd, reps, warmup, sys_fwd)
    t_grad = _measure(grad, reps, warmup, sys_grad)
    x_bytes, out_bytes = x_np.nbytes, ct_np.nbytes
    idx_bytes = out_bytes // ct_np.itemsize * 4
    common = {"section": "pool", "rank": k, "shape": list(shape), "input_shape": list(in_shape),
              "dtype": dtype, "index_dtype": "int32", "format": fmt,
              "layout": "channels_last" if channels_last else "channels_first",
              "input_bytes": x_bytes}
    rows = [_row(common, "forward", t_fwd, x_bytes + out_bytes + idx_bytes, bw, sys_fwd),
            # + the cotangent and the indices read, the gradient written
            _row(common, "forward+grad", t_grad,
                 2 * x_bytes + 2 * out_bytes + 2 * idx_bytes, bw, sys_grad)]
    for r in rows:
        r["vs_torch"] = _ratio(r["jax_unpool_ms"], r["torch_ms"])
    return rows


def _step_rows(fmt: str, step: tuple[int, int, int], reps: int, warmup: int) -> list[dict]:
    """One jitted training step of the SegNet-style model, jax_unpool against the XLA
    reference, and the pooling part of it timed on its own."""
    n, size, width = step
    t = _measure(bench_step.calls(fmt, n, size, width), reps, warmup)
    common = {"section": "step", "layout": fmt, "batch": n, "image": size, "width": width}
    return [{**common, "impl": impl, "step_ms": t[f"step_{impl}"], "pooling_ms": t[f"pool_{impl}"],
             "pooling_share": t[f"pool_{impl}"] / t[f"step_{impl}"]}
            for impl in ("ours", "xla")]


# --------------------------------------------------------------------------------------
# summary and output
# --------------------------------------------------------------------------------------

def _median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _pool_targets(rows: list[dict], large: list[list[int]]) -> dict[str, float | None]:
    """The pool's targets (float32): against torch and the XLA ops, the fraction of the
    memory bandwidth, the tiny shape's call, and each rank and layout's time per byte
    over 2-D NCHW's."""
    def pool_rows(op, fmt, shapes=None):
        return [r for r in rows if r["section"] == "pool" and r["op"] == op
                and r["format"] == fmt and r["dtype"] == "float32"
                and (shapes is None or r["shape"] in shapes)]

    def median_of(op, fmt, field, shapes=None, keep=lambda r: True):
        return _median([r.get(field) for r in pool_rows(op, fmt, shapes) if keep(r)])

    def ms_per_byte(fmt, shapes):
        return _median([r["jax_unpool_ms"] / r["bytes"]
                        for r in pool_rows("forward", fmt, shapes)])

    tiny = median_of("forward", "NCHW", "speedup_vs_xla", [list(TINY_SHAPE)])
    values = {
        "pool_vs_torch": median_of("forward", "NCHW", "vs_torch", large),
        "pool_grad_vs_torch": median_of("forward+grad", "NCHW", "vs_torch", large),
        "pool_forward_vs_xla": median_of("forward", "NCHW", "speedup_vs_xla", large),
        "pool_forward_of_bandwidth_32mb": median_of(
            "forward", "NCHW", "bandwidth_fraction", large,
            keep=lambda r: r["input_bytes"] >= POOL_BANDWIDTH_INPUT_BYTES),
        "tiny_pool_vs_xla_per_call": None if tiny is None else 1 / tiny,
    }
    nchw = ms_per_byte("NCHW", large)
    ranks = [list(s) for s in RANK_SHAPES]
    for fmt, shapes in (("NHWC", large), ("NCW", ranks), ("NWC", ranks), ("NCDHW", ranks),
                        ("NDHWC", ranks)):
        values[f"pool_per_byte_{fmt.lower()}_vs_nchw"] = _ratio(ms_per_byte(fmt, shapes),
                                                                 nchw)
    return values


def summarize(rows: list[dict]) -> dict[str, dict]:
    """The targets, each the median over the large 2-D shapes (float32 values, int32
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
        tiny = pick("unpool", op, "speedup_vs_xla", [list(TINY_SHAPE)])
        values[f"tiny_{op}_vs_xla_per_call"] = None if tiny is None else 1 / tiny
        values[f"nhwc_vs_nchw_{op}"] = pick("layout", op, "nhwc_vs_nchw", large)
    values.update(_pool_targets(rows, large))
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


def _gb(v: float | None) -> str:
    return _fmt(v, ".1f")


def _op_table(rows: list[dict], first: str, label=lambda r: r["op"]) -> list[str]:
    head = (f"{'op':<19}{first:<20}{'dtype':<10}{'index':<7}{'ours':>9}{'xla':>9}"
            f"{'torch':>9}{'roof':>9}{'xla/ours':>9}{'torch/ours':>11}{'GB/s':>7}"
            f"{'xla':>7}{'torch':>7}{'of bw':>7}{'sys':>8}")
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{label(r):<19}{_name(r['shape']):<20}{r['dtype']:<10}"
            f"{r['index_dtype']:<7}{_ms(r['jax_unpool_ms']):>9}{_ms(r['xla_ms']):>9}"
            f"{_ms(r['torch_ms']):>9}{_ms(r['roofline_ms']):>9}"
            f"{_fmt(r['speedup_vs_xla']):>9}{_fmt(r['speedup_vs_torch']):>11}"
            f"{_gb(r['jax_unpool_gbps']):>7}{_gb(r['xla_gbps']):>7}{_gb(r['torch_gbps']):>7}"
            f"{_fmt(r['bandwidth_fraction']):>7}{_ms(r.get('jax_unpool_sys_ms')):>8}")
    return lines


def format_table(result: dict) -> str:
    rows, lines = result["rows"], []
    bw = result["bandwidth"]
    lines.append("memory bandwidth (numpy, GB/s; copy counts bytes read + written): "
                 + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in bw.items()))
    lines.append("roof = the op's least traffic (inputs read, result written) at the copy "
                 "bandwidth into faulted pages; GB/s = that traffic per second; of bw = ours "
                 "GB/s / copy faulted; sys = ours' OS CPU ms per call (all threads: the OS "
                 "zeroing its results' fresh pages)")
    unpool = [r for r in rows if r["section"] == "unpool"]
    if unpool:
        lines += ["", ("max_unpool (channels first): milliseconds per call; xla/ours and "
                       "torch/ours are speedups")]
        lines += _op_table(unpool, "shape")
    layout = [r for r in rows if r["section"] == "layout"]
    if layout:
        lines += ["", "layout: jax_unpool in NHWC against NCHW (milliseconds per call)"]
        head = (f"{'op':<9}{'shape':<20}{'dtype':<10}{'index':<7}{'NCHW':>9}{'NHWC':>9}"
                f"{'NHWC/NCHW':>11}")
        lines += [head, "-" * len(head)]
        for r in layout:
            lines.append(f"{r['op']:<9}{_name(r['shape']):<20}{r['dtype']:<10}"
                         f"{r['index_dtype']:<7}{_ms(r['nchw_ms']):>9}{_ms(r['nhwc_ms']):>9}"
                         f"{_fmt(r['nhwc_vs_nchw']):>11}")
    pool = [r for r in rows if r["section"] == "pool"]
    if pool:
        lines += ["", ("max_poolNd_with_indices (2 per axis, stride 2; shape = pooled result, "
                       "channels first; ours = the native pool) against the XLA ops (xla; "
                       "gradient: XLA's scatter-add) and torch.max_poolNd(return_indices="
                       "True) [+ autograd]")]
        lines += _op_table(pool, "shape", label=lambda r: f"{r['op']} {r['format']}")
    step = [r for r in rows if r["section"] == "step"]
    if step:
        lines += ["", ("SegNet-style training step (jitted; pooling = its 2 pools + 2 "
                       "unpools, forward and gradient, timed alone)")]
        head = (f"{'layout':<8}{'batch x image x width':<22}{'impl':<6}{'step ms':>9}"
                f"{'pooling ms':>12}{'share':>7}")
        lines += [head, "-" * len(head)]
        for r in step:
            lines.append(f"{r['layout']:<8}{_name([r['batch'], r['image'], r['width']]):<22}"
                         f"{r['impl']:<6}{_ms(r['step_ms']):>9}{_ms(r['pooling_ms']):>12}"
                         f"{_fmt(r['pooling_share']):>7}")
    lines += ["", ("targets (float32 values, int32 indices; median over the large 2-D "
                   "shapes; pool_per_byte_*: 1-D and 3-D over the rank shapes)")]
    for name, s in result["targets"].items():
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

SECTIONS = ["unpool", "layout", "pool", "step"]


def _shape(text: str) -> tuple[int, ...]:
    """--shapes: N x C x 1 to 3 spatial sizes, all positive."""
    try:
        shape = tuple(int(d) for d in text.split("x"))
    except ValueError:
        shape = ()
    if not 3 <= len(shape) <= 5 or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a pooled shape: N, C and 1 to 3 spatial sizes, positive ints "
            "joined by 'x', e.g. 8x64x112x112")
    return shape


def _value_dtype(text: str) -> str:
    """--dtypes: a dtype both ops take (1, 2, 4 or 8 bytes, real: the pools compare)."""
    try:
        dtype = np.dtype(jnp.dtype(text))
    except TypeError:
        dtype = None
    if (dtype is None or not _args.is_movable(dtype)
            or jnp.issubdtype(dtype, jnp.complexfloating)):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a value dtype: a real dtype of 1, 2, 4 or 8 bytes, e.g. "
            "float32, bfloat16, int8")
    return text


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jax_unpool bench", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: tiny shapes, 2 samples (a few seconds)")
    p.add_argument("--json", metavar="PATH", type=options.writable_file,
                   help="also write the rows and targets as JSON")
    p.add_argument("--reps", type=options.positive_int,
                   help="samples per median (default 7; 2 with --quick)")
    p.add_argument("--warmup", type=options.non_negative_int, default=2,
                   help="untimed calls first (default 2)")
    p.add_argument("--shapes", nargs="+", metavar="NxCx...", type=_shape,
                   help="pooled shapes, channels first, 1-D to 3-D (default: the four large "
                        "2-D ones, 1x3x4x4, 64x256x2048 and 16x64x16x16x16)")
    p.add_argument("--dtypes", nargs="+", type=_value_dtype,
                   help="value dtypes (default float32 bfloat16; float32 with --quick)")
    p.add_argument("--index-dtypes", nargs="+", default=["int32", "int64"],
                   choices=["int32", "int64"], help="index dtypes (default int32 int64)")
    p.add_argument("--sections", nargs="+", default=SECTIONS, choices=SECTIONS,
                   help="what to run (default all; the bandwidth is always measured)")
    p.add_argument("--no-torch", action="store_true", help="leave out the torch columns")
    return p


def run(args: argparse.Namespace) -> dict[str, Any]:
    shapes = args.shapes or list(QUICK_SHAPES if args.quick
                                 else (*LARGE_SHAPES, TINY_SHAPE, *RANK_SHAPES))
    dtypes = args.dtypes or (["float32"] if args.quick else ["float32", "bfloat16"])
    reps = args.reps if args.reps is not None else (2 if args.quick else 7)
    warmup = 1 if args.quick else args.warmup
    threads = len(os.sched_getaffinity(0))  # the cores XLA's CPU client uses too
    torch = None if args.no_torch else _torch(threads)
    rng = np.random.default_rng(0)
    load_before = os.getloadavg()
    bw = bandwidth(threads, BANDWIDTH_BYTES >> (6 if args.quick else 0), reps, warmup)
    rows: list[dict] = []
    for shape in shapes:
        for index_dtype in args.index_dtypes:
            with enable_x64(index_dtype == "int64"):  # int64 indices need x64
                for dtype in dtypes:
                    if "unpool" in args.sections:
                        rows += _unpool_rows(shape, dtype, index_dtype, torch, reps, warmup,
                                             rng, bw)
                    if "layout" in args.sections and len(shape) == 4:
                        rows += _layout_rows(shape, dtype, index_dtype, reps, warmup, rng)
        if "pool" in args.sections:
            for dtype in dtypes:
                for channels_last in (False, True):
                    rows += _pool_rows(shape, dtype, torch, reps, warmup, rng, bw,
                                       channels_last)
    if "step" in args.sections:
        for fmt in ("NHWC", "NCHW"):
            rows += _step_rows(fmt, QUICK_STEP if args.quick else STEP, reps, warmup)
    # Other processes on a small machine move every number: the load before and after.
    return {"machine": {**machine(), "load_average_before": load_before,
                        "load_average_after": os.getloadavg()},
            "settings": {"quick": args.quick, "reps": reps, "warmup": warmup,
                         "torch_threads": threads},
            "bandwidth": bw, "rows": rows, "targets": summarize(rows)}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    result = run(args)
    m = result["machine"]
    load = ", ".join(f"{a:.2f}" for a in m["load_average_before"])
    after = ", ".join(f"{a:.2f}" for a in m["load_average_after"])
    print(f"{m['cpu']}, {m['cores']} cores; jax {m['jax']}, torch {m['torch']}; "
          f"median of {result['settings']['reps']} samples; load average {load} before, "
          f"{after} after\n")
    print(format_table(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
