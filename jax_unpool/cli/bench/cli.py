"""Side-by-side benchmark of the CPU kernels against XLA, PyTorch and a memory roofline.

Run as::

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

Memory bandwidth (always measured first): numpy on as many threads as JAX uses, over 256
MiB: a STREAM-like copy and a write-only fill into buffers whose pages are already
faulted in, and the same into fresh buffers (XLA hands out fresh results, whose pages the
OS faults in on first write), of 4 KiB pages and of huge pages. Every row reports the
achieved GB/s and its fraction of the faulted-copy bandwidth, and (``sys``) the operating
system's CPU time per call of ours (all threads): where that is large, the call's time
goes to the OS zeroing the fresh pages of its results, not to the kernel.

The sections, one module each: ``unpool``, ``layout`` (NHWC against NCHW), ``pool`` (the
pools against the XLA ops and torch) and ``step`` (one jitted training step of a
SegNet-style model with jax_unpool against the same model with XLA's scatter/gather).
This module holds the options, the run and the report.

Every number is the median over ``--reps`` samples after warm-up; the contenders of one
row take turns sample by sample, so load from elsewhere on the machine hits them alike
and the ratios of a row are measured together. Targets are judged from 5 samples per
median or more; ``--quick`` takes 2, and says so. This is a benchmark, not a test: nothing
here asserts a timing.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import sys
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_unpool import _args
from jax_unpool.cli import options
from jax_unpool.cli.bench import layout, measure, pool, step, table, targets, unpool

# The sections, in the order they run and report. A section is a module with NAME,
# TARGETS, rows(settings), targets(rows) and report(rows, judged) (docs/performance.md,
# "Adding a section").
SECTIONS = {section.NAME: section for section in (unpool, layout, pool, step)}
# memory_needed's terms, about 1.5 times the peak resident memory measured
# (docs/performance.md, "Measured choices").
MEMORY_BASE = 3 << 29
MEMORY_PER_BYTE = 7


def _shape(text: str) -> tuple[int, ...]:
    """--shapes: N x C x 1 to 3 spatial sizes, each from 1 to options.MAX_SIZE."""
    try:
        shape = tuple(int(d) for d in text.split("x"))
    except ValueError:  # not an int, or one past int()'s 4300 digits
        shape = ()
    if not 3 <= len(shape) <= 5 or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"{options.shown(text)} is not a pooled shape: N, C and 1 to 3 spatial sizes, "
            "positive ints joined by 'x', e.g. 8x64x112x112")
    if max(shape) > options.MAX_SIZE:
        raise argparse.ArgumentTypeError(
            f"{options.shown(text)} is not a pooled shape: a size is more than "
            f"{options.MAX_SIZE} (the most elements an array holds)")
    return shape


# --dtypes: the value dtypes both ops take (whole 1, 2, 4 or 8 bytes, real: the pools
# compare), by name; float8 ones this jax lacks are left out. Names, not numpy's parser,
# which takes "O", "U1" or "i4,i4" and raises a SyntaxError on "(i4,2)".
VALUE_DTYPES = tuple(
    name for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                      "uint64", "float16", "bfloat16", "float32", "float64", "float8_e3m4",
                      "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz",
                      "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu")
    if hasattr(jnp, name) and _args.is_movable(jnp.dtype(name)))


def _value_dtype(text: str) -> str:
    """--dtypes: one of VALUE_DTYPES."""
    if text not in VALUE_DTYPES:
        raise argparse.ArgumentTypeError(
            f"{options.shown(text)} is not a value dtype the ops take: one of "
            f"{', '.join(VALUE_DTYPES)}")
    return text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jax_unpool bench",
                                description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke run: one tiny shape per rank, 2 samples, too few to judge "
                        "the targets (about 20 s of CPU time)")
    p.add_argument("--json", metavar="PATH", type=options.writable_file,
                   help="also write the rows and targets as JSON (the file is opened, not "
                        "emptied, once the options are checked, and written at the end)")
    p.add_argument("--reps", type=options.positive_count,
                   help=f"samples per median (default 7; 2 with --quick; targets are judged "
                        f"from {targets.SAMPLES_TO_JUDGE}; at most {options.MAX_COUNT})")
    p.add_argument("--warmup", type=options.non_negative_count, default=2,
                   help=f"untimed calls first (default 2, at most {options.MAX_COUNT})")
    p.add_argument("--shapes", nargs="+", metavar="NxCx...", type=_shape,
                   help="pooled shapes, channels first, 1-D to 3-D (default: the four large "
                        "2-D ones, 1x3x4x4, 64x256x2048 and 16x64x16x16x16)")
    p.add_argument("--dtypes", nargs="+", type=_value_dtype,
                   help="value dtypes (default float32 bfloat16; float32 with --quick); the "
                        "8-byte ones run with jax_enable_x64 on; where torch cannot run one "
                        "(int8 gradients, unsigned gathers, float8), its torch column is left "
                        "out and the report says why")
    p.add_argument("--index-dtypes", nargs="+", choices=["int32", "int64"],
                   help="index dtypes (default int32 int64; int32 with --quick)")
    p.add_argument("--sections", nargs="+", default=list(SECTIONS), choices=list(SECTIONS),
                   help="what to run (default all; the bandwidth is always measured)")
    p.add_argument("--no-torch", action="store_true", help="leave out the torch columns")
    return p


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


def shapes(args: argparse.Namespace) -> list[tuple[int, ...]]:
    return args.shapes or list(measure.QUICK_SHAPES if args.quick else
                               (*measure.LARGE_SHAPES, measure.TINY_SHAPE, *measure.RANK_SHAPES))


def dtypes(args: argparse.Namespace) -> list[str]:
    return args.dtypes or (["float32"] if args.quick else ["float32", "bfloat16"])


def index_dtypes(args: argparse.Namespace) -> list[str]:
    return args.index_dtypes or (["int32"] if args.quick else ["int32", "int64"])


def memory_needed(shape: Sequence[int], dtype: str) -> int:
    """Bytes a row of `shape` and `dtype` needs at most, about (measured, with a margin):
    its arrays (values, int64 indices, the unpooled result 2**k times larger), each in
    several copies (every contender reads its own), and the bandwidth's buffers."""
    unpooled = math.prod(shape) * 2 ** (len(shape) - 2)
    return MEMORY_BASE + MEMORY_PER_BYTE * unpooled * (np.dtype(jnp.dtype(dtype)).itemsize + 8)


def check_sizes(args: argparse.Namespace) -> None:
    """A ValueError for a shape the run could not hold in this machine's memory, or whose
    unpooled plane int32 indices cannot address (the pool section's are int32)."""
    available = options.memory_bytes()
    for shape in shapes(args):
        for dtype in dtypes(args):
            needed = memory_needed(shape, dtype)
            if needed > available:
                raise ValueError(
                    f"--shapes {table.name(shape)} in {dtype} needs about "
                    f"{options.gib(needed)} of memory, more than this machine's "
                    f"{options.gib(available)}")
        plane = math.prod(shape[2:]) * 2 ** (len(shape) - 2)
        if plane > _args.INT32_MAX and ("pool" in args.sections or
                                        "int32" in index_dtypes(args)):
            raise ValueError(
                f"--shapes {table.name(shape)}: its unpooled planes of {plane} positions are "
                f"more than int32 indices address ({_args.INT32_MAX}); run it with "
                "--index-dtypes int64 and without the pool section")


def run(args: argparse.Namespace) -> dict[str, Any]:
    reps = args.reps if args.reps is not None else (2 if args.quick else 7)
    warmup = 1 if args.quick else args.warmup
    threads = len(os.sched_getaffinity(0))  # the cores XLA's CPU client uses too
    load_before = os.getloadavg()
    settings = measure.Settings(
        shapes=shapes(args), dtypes=dtypes(args), index_dtypes=index_dtypes(args),
        reps=reps, warmup=warmup, quick=args.quick,
        torch=None if args.no_torch else measure.load_torch(threads),
        bandwidth=measure.bandwidth(threads, measure.BANDWIDTH_BYTES >> (6 if args.quick else 0),
                                    reps, warmup),
        rng=np.random.default_rng(0))
    rows = [row for name, section in SECTIONS.items() if name in args.sections
            for row in section.rows(settings)]
    # Other processes on a small machine move every number: the load before and after.
    return {"machine": {**machine(), "load_average_before": load_before,
                        "load_average_after": os.getloadavg()},
            "settings": {"quick": args.quick, "reps": reps, "warmup": warmup,
                         "torch_threads": threads,
                         "samples_to_judge": targets.SAMPLES_TO_JUDGE},
            "bandwidth": settings.bandwidth, "rows": rows,
            "targets": targets.summarize(list(SECTIONS.values()), rows, reps)}


def report(result: dict) -> str:
    """The text report: the bandwidth, each section's table, the targets."""
    reps = result["settings"]["reps"]
    judged = reps >= targets.SAMPLES_TO_JUDGE
    lines = ["memory bandwidth (numpy, GB/s; copy counts bytes read + written): "
             + ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in result["bandwidth"].items()),
             ("roof = the op's least traffic (inputs read, result written) at the copy "
              "bandwidth into faulted pages; GB/s = that traffic per second; of bw = ours "
              "GB/s / copy faulted; sys = ours' OS CPU ms per call (all threads: the OS "
              "zeroing its results' fresh pages)")]
    if not judged:
        lines.append(f"ratios marked ? come from medians of {reps} samples: too few to say "
                     f"which is faster ({targets.SAMPLES_TO_JUDGE} or more are needed)")
    for name, section in SECTIONS.items():
        rows = [r for r in result["rows"] if r["section"] == name]
        if rows:
            lines += ["", *section.report(rows, judged)]
    lines += ["", *targets.report(result["targets"], reps), *torch_notes(result["rows"])]
    return "\n".join(lines)


def torch_notes(rows: list[dict]) -> list[str]:
    """Where torch could not run a row: a line per dtype and torch's reason, naming the
    rows."""
    skipped: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        if r.get("torch_skipped"):
            skipped.setdefault((r["dtype"], r["torch_skipped"]), set()).add(
                f"{r['section']} {r['op']}")
    if not skipped:
        return []
    return ["", "no torch column where torch cannot run the dtype:",
            *(f"  {dtype}: {', '.join(sorted(ops))} ({why})"
              for (dtype, why), ops in sorted(skipped.items()))]


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    try:
        check_sizes(args)
    except ValueError as error:
        p.error(str(error))
    options.check_environment(p)
    # Opened now, once every option is checked, so that a path that cannot be written is a
    # usage error before the run rather than a traceback after it.
    out = args.json and options.open_output(p, "--json", args.json, b"{")
    try:
        result = run(args)
    except BaseException:  # Ctrl-C, or a failure: no file of one "{" left behind
        if out:
            out.abandon()
        raise
    m = result["machine"]
    load = ", ".join(f"{a:.2f}" for a in m["load_average_before"])
    after = ", ".join(f"{a:.2f}" for a in m["load_average_after"])
    print(f"{m['cpu']}, {m['cores']} cores; jax {m['jax']}, torch {m['torch']}; "
          f"median of {result['settings']['reps']} samples; load average {load} before, "
          f"{after} after\n")
    print(report(result))
    if out:
        try:
            out.finish(json.dumps(result, indent=1)[1:].encode())  # after the "{"
        except options.OutputError as error:
            print(f"{p.prog}: error: {error}", file=sys.stderr)
            return 1
    return 0
