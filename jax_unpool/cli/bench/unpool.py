"""Section ``unpool``: max_unpoolNd forward and backward (the FFI kernels) against the
XLA reference's scatter and gather, ``F.max_unpoolNd`` and ``torch.gather``, and the
memory roofline, channels first, for every shape, value dtype and index dtype.

Indices are those of a 2x2 (2 per axis), stride-2 max-pool (one per window, drawn with
numpy, not with the op under test), for 1-D, 2-D and 3-D shapes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np

import jax_unpool as ju
from jax_unpool._compat import enable_x64
from jax_unpool.cli.bench import measure, table
from jax_unpool.cli.bench.measure import KERNEL, Settings

NAME = "unpool"
# The targets of the performance issues, checked on float32 values with int32 indices:
# the median over the large 2-D shapes, or the tiny shape's call.
TARGETS = {
    "forward_vs_xla": (">=", 2.0),
    "forward_vs_torch": (">=", 1.0),
    "backward_vs_xla": (">=", 1.25),
    "backward_vs_torch": (">=", 1.0),
    "tiny_forward_vs_xla_per_call": ("<=", 1.2),
    "tiny_backward_vs_xla_per_call": ("<=", 1.2),
}

UNPOOL = {1: (ju.max_unpool1d, ju.reference.max_unpool1d, ju.max_unpool1d_backward,
              ju.reference.max_unpool1d_backward, "max_unpool1d"),
          2: (ju.max_unpool2d, ju.reference.max_unpool2d, ju.max_unpool2d_backward,
              ju.reference.max_unpool2d_backward, "max_unpool2d"),
          3: (ju.max_unpool3d, ju.reference.max_unpool3d, ju.max_unpool3d_backward,
              ju.reference.max_unpool3d_backward, "max_unpool3d")}


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


def configurations(settings: Settings, shapes: Sequence[tuple[int, ...]]):
    """Every (shape, value dtype, index dtype) of `shapes`, each in x64 mode where its
    dtypes need it (`measure.needs_x64`), while the caller measures it."""
    for shape in shapes:
        for index_dtype in settings.index_dtypes:
            for dtype in settings.dtypes:
                with enable_x64(measure.needs_x64(dtype, index_dtype)):
                    yield shape, dtype, index_dtype


def rows(settings: Settings) -> list[dict]:
    return [row for configuration in configurations(settings, settings.shapes)
            for row in _configuration(*configuration, settings)]


def _configuration(shape, dtype, index_dtype, settings: Settings) -> list[dict]:
    """Forward and backward rows of one channels-first configuration: ours, XLA, torch,
    and the bandwidth roofline."""
    k = len(shape) - 2
    ours_f, xla_f, ours_b, xla_b, torch_name = UNPOOL[k]
    n, c, *spatial = shape
    out_spatial = tuple(KERNEL * d for d in spatial)
    out_shape = (n, c, *out_spatial)
    rng, torch = settings.rng, settings.torch
    x_np = measure.values(rng, shape, dtype)
    i_np = pool_indices(rng, shape).astype(index_dtype)
    g_np = measure.values(rng, out_shape, dtype)
    x_struct = jax.ShapeDtypeStruct(shape, x_np.dtype)

    call, inputs = measure.jax_call, measure.inputs
    fwd = {"jax_unpool": call(jax.jit(lambda x, i: ours_f(x, i, KERNEL)), *inputs(x_np, i_np)),
           "xla": call(jax.jit(lambda x, i: xla_f(x, i, KERNEL)), *inputs(x_np, i_np))}
    bwd = {"jax_unpool": call(jax.jit(lambda g, i: ours_b(g, x_struct, i, out_spatial)),
                              *inputs(g_np, i_np)),
           "xla": call(jax.jit(lambda g, i: xla_b(g, x_struct, i, out_spatial)),
                       *inputs(g_np, i_np))}
    skipped = {}  # op -> why torch has no column
    if torch is not None:
        ti = torch.from_numpy(i_np.astype(np.int64))  # torch's index type
        t_unpool = getattr(torch.nn.functional, torch_name)

        def forward():
            tx = measure.to_torch(torch, x_np)
            return lambda: t_unpool(tx, ti, KERNEL)

        def backward():
            tg_planes, ti_planes = measure.to_torch(torch, g_np).view(n, c, -1), ti.view(n, c, -1)
            return lambda: torch.gather(tg_planes, 2, ti_planes).view(shape)

        for calls, op, make in ((fwd, "forward", forward), (bwd, "backward", backward)):
            call, skipped[op] = measure.torch_call(make)
            if call is not None:
                calls["torch"] = call

    sys_fwd, sys_bwd = {}, {}
    t_fwd = measure.times(fwd, settings.reps, settings.warmup, sys_fwd)
    t_bwd = measure.times(bwd, settings.reps, settings.warmup, sys_bwd)
    # The least traffic: values and indices read, the result written (fresh pages).
    small, big = x_np.nbytes + i_np.nbytes, g_np.nbytes
    common = {"section": NAME, "rank": k, "shape": list(shape),
              "output_shape": list(out_shape), "dtype": measure.ran(dtype),
              "index_dtype": measure.ran(index_dtype),
              "layout": "channels_first"}
    return [{**measure.op_row(common, op, t, nbytes, settings.bandwidth, sys_ms),
             "torch_skipped": skipped.get(op)}
            for op, t, sys_ms, nbytes in (("forward", t_fwd, sys_fwd, small + big),
                                          ("backward", t_bwd, sys_bwd, big + small))]


def targets(rows: list[dict]) -> dict[str, float | None]:
    def pick(op, field, shapes):
        return measure.median([r.get(field) for r in rows
                       if r["section"] == NAME and r["op"] == op and r["shape"] in shapes
                       and r["dtype"] == "float32" and r["index_dtype"] == "int32"])

    large = [list(s) for s in measure.LARGE_SHAPES]
    found = {}
    for op in ("forward", "backward"):
        found[f"{op}_vs_xla"] = pick(op, "speedup_vs_xla", large)
        found[f"{op}_vs_torch"] = pick(op, "speedup_vs_torch", large)
    for op in ("forward", "backward"):
        tiny = pick(op, "speedup_vs_xla", [list(measure.TINY_SHAPE)])
        found[f"tiny_{op}_vs_xla_per_call"] = None if tiny is None else 1 / tiny
    return found


def report(rows: list[dict], judged: bool) -> list[str]:
    return [("max_unpool (channels first): milliseconds per call; xla/ours and torch/ours "
             "are speedups"), *table.op_table(rows, "shape", judged)]
