"""Measuring, for every section: a run's settings, the sampler that times the calls, the
memory bandwidth that is every row's roofline, and the row of an op against XLA and torch.

The sampler takes the median over ``reps`` samples after warm-up; the calls of one row
take turns sample by sample, so load from elsewhere on the machine hits them alike and
the ratios of a row are measured together.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

LARGE_SHAPES = ((8, 64, 112, 112), (32, 64, 56, 56), (16, 256, 28, 28), (64, 128, 14, 14))
# Issue 13's 1-D (64, 256, 4096) and 3-D (16, 64, 32, 32, 32) inputs, pooled by 2 per axis.
RANK_SHAPES = ((64, 256, 2048), (16, 64, 16, 16, 16))
TINY_SHAPE = (1, 3, 4, 4)
# --quick: one small shape per rank (compiling dominates its time).
QUICK_SHAPES = (TINY_SHAPE, (2, 4, 16), (1, 2, 2, 4, 4))
KERNEL = 2  # 2 per axis, stride 2: unpooled outputs are twice the input per spatial axis
SAMPLE_SECONDS = 5e-3  # a sample repeats a fast call until it lasts about this long
# Idle time before each sample: OpenMP (torch) and Eigen (XLA) worker threads spin for a
# while after a parallel region, and on a small machine whoever runs next would share
# the cores with them.
PAUSE_SECONDS = 0.01
BANDWIDTH_BYTES = 256 << 20  # far above any last-level cache


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a run measures, and how: each section reads what it needs."""

    shapes: Sequence[tuple[int, ...]]  # pooled shapes, channels first
    dtypes: Sequence[str]  # value dtypes
    index_dtypes: Sequence[str]
    reps: int  # samples per median
    warmup: int  # untimed calls first
    quick: bool
    torch: Any  # the torch module on the benchmark's threads, or None
    bandwidth: dict[str, float]  # GB/s, from `bandwidth`
    rng: np.random.Generator


# --------------------------------------------------------------------------------------
# timing
# --------------------------------------------------------------------------------------

def system_seconds() -> float | None:
    """CPU seconds this process has spent in the operating system (all threads), or None
    where there is no getrusage."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def times(calls: dict[str, Callable[[], Any]], reps: int, warmup: int,
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
            start, start_system = time.perf_counter(), system_seconds()
            for _ in range(repeat[name]):
                call()
            samples[name].append((time.perf_counter() - start) / repeat[name])
            if start_system is not None:
                system[name].append((system_seconds() - start_system) / repeat[name])
    if system_ms is not None:
        system_ms.update({name: statistics.median(s) * 1e3 if s else None
                          for name, s in system.items()})
    return {name: statistics.median(s) * 1e3 for name, s in samples.items()}


# --------------------------------------------------------------------------------------
# inputs and contenders
# --------------------------------------------------------------------------------------

def inputs(*arrays: np.ndarray) -> list[jax.Array]:
    """Fresh copies: every contender reads its own, for one that read what another has
    just read would find it in cache and win for that alone. (The numpy copy comes first:
    on CPU a device array may share an aligned numpy array's memory.)"""
    return [jnp.asarray(np.array(a, copy=True)) for a in arrays]


def needs_x64(dtype: str, index_dtype: str = "int32") -> bool:
    """Whether a row runs with jax_enable_x64 on: 8-byte values or int64 indices, which
    jax makes 32-bit with it off."""
    return index_dtype == "int64" or jnp.dtype(dtype).itemsize == 8


def ran(dtype: str) -> str:
    """The dtype jax gives an array of `dtype` here and now (32-bit for a 64-bit one with
    x64 off): rows are labelled with it, so that a label never names what did not run."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype)).name


def values(rng: np.random.Generator, shape: Sequence[int], dtype: str) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32).astype(jnp.dtype(dtype))


def channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


def jax_call(fn: Callable, *args: Any) -> Callable[[], Any]:
    return lambda: jax.block_until_ready(fn(*args))


def load_torch(threads: int):
    """PyTorch on `threads` threads, or None when it is not installed (it is no
    dependency of jax_unpool; only this benchmark uses it)."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def torch_call(make: Callable[[], Callable[[], Any]]) -> tuple[Callable[[], Any] | None,
                                                               str | None]:
    """A torch contender: the call `make` builds, tried once, and None; or, where torch
    cannot run it (a dtype its CPU kernels or torch.from_numpy lack: integer gradients,
    unsigned gathers, float8), None and torch's reason, for the report's note."""
    try:
        call = make()
        call()
    except (RuntimeError, TypeError) as error:  # NotImplementedError is a RuntimeError
        return None, str(error).strip().splitlines()[0].split(". ")[0]
    return call, None


def to_torch(torch, a: np.ndarray):
    """A torch copy of a numpy array; bfloat16 (ml_dtypes) goes over as its bits."""
    if a.dtype == jnp.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


# --------------------------------------------------------------------------------------
# rows
# --------------------------------------------------------------------------------------

def ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None else num / den


def gbps(nbytes: int, ms: float | None) -> float | None:
    return None if ms is None else nbytes / ms / 1e6


def median(numbers: list[float | None]) -> float | None:
    """The median of the numbers measured (None: not measured), or None."""
    numbers = [v for v in numbers if v is not None]
    return statistics.median(numbers) if numbers else None


def op_row(common: dict, op: str, t: dict[str, float], nbytes: int, bw: dict,
           sys_ms: dict[str, float | None]) -> dict:
    """The row of one op: ours, XLA and torch (`t`, milliseconds per call), the roofline
    of its least traffic `nbytes`, and the ratios."""
    ours = t["jax_unpool"]
    roof = nbytes / bw["copy_faulted"] / 1e6  # ms at DRAM copy bandwidth, no page faults
    return {**common, "op": op, "bytes": nbytes, "jax_unpool_ms": ours, "xla_ms": t.get("xla"),
            "torch_ms": t.get("torch"), "roofline_ms": roof,
            "jax_unpool_sys_ms": sys_ms.get("jax_unpool"), "xla_sys_ms": sys_ms.get("xla"),
            "speedup_vs_xla": ratio(t.get("xla"), ours),
            "speedup_vs_torch": ratio(t.get("torch"), ours),
            "vs_roofline": ratio(ours, roof),
            "jax_unpool_gbps": gbps(nbytes, ours), "xla_gbps": gbps(nbytes, t.get("xla")),
            "torch_gbps": gbps(nbytes, t.get("torch")),
            "bandwidth_fraction": ratio(gbps(nbytes, ours), bw["copy_faulted"])}


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

            t = times({
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
    return {k: gbps(total * (2 if k.startswith("copy") else 1), ms) for k, ms in t.items()}
