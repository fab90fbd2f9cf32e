"""Section ``layout``: max_unpool2d forward and backward of jax_unpool in NHWC against
NCHW, on the same data (the 2-D shapes)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

import jax_unpool as ju
from jax_unpool.cli.bench import measure, table
from jax_unpool.cli.bench.measure import KERNEL, Settings
from jax_unpool.cli.bench.unpool import configurations, pool_indices

NAME = "layout"
# ms in NHWC over ms in NCHW: the median over the large shapes (float32, int32 indices).
TARGETS = {
    "nhwc_vs_nchw_forward": ("<=", 1.3),
    "nhwc_vs_nchw_backward": ("<=", 1.3),
}


def rows(settings: Settings) -> list[dict]:
    two_d = [shape for shape in settings.shapes if len(shape) == 4]
    return [row for configuration in configurations(settings, two_d)
            for row in _configuration(*configuration, settings)]


def _configuration(shape, dtype, index_dtype, settings: Settings) -> list[dict]:
    n, c, h, w = shape
    hw_out = (h * KERNEL, w * KERNEL)
    rng = settings.rng
    x_np = measure.values(rng, shape, dtype)
    i_np = pool_indices(rng, shape).astype(index_dtype)
    g_np = measure.values(rng, (n, c, *hw_out), dtype)
    nchw = [jnp.asarray(a) for a in (x_np, i_np, g_np)]
    nhwc = [jnp.asarray(measure.channels_last(a)) for a in (x_np, i_np, g_np)]

    def fns(fmt):
        x_shape = shape if fmt == "NCHW" else measure.channels_last(x_np).shape
        x_struct = jax.ShapeDtypeStruct(x_shape, x_np.dtype)
        fwd = jax.jit(lambda x, i: ju.max_unpool2d(x, i, KERNEL, data_format=fmt))
        bwd = jax.jit(lambda g, i: ju.max_unpool2d_backward(g, x_struct, i, hw_out,
                                                             data_format=fmt))
        return fwd, bwd

    (f_nchw, b_nchw), (f_nhwc, b_nhwc) = fns("NCHW"), fns("NHWC")
    call = measure.jax_call
    t = measure.times({"fwd_nchw": call(f_nchw, nchw[0], nchw[1]),
                       "fwd_nhwc": call(f_nhwc, nhwc[0], nhwc[1]),
                       "bwd_nchw": call(b_nchw, nchw[2], nchw[1]),
                       "bwd_nhwc": call(b_nhwc, nhwc[2], nhwc[1])}, settings.reps,
                      settings.warmup)
    common = {"section": NAME, "rank": 2, "shape": list(shape), "dtype": measure.ran(dtype),
              "index_dtype": measure.ran(index_dtype)}
    return [{**common, "op": op, "nchw_ms": t[f"{k}_nchw"], "nhwc_ms": t[f"{k}_nhwc"],
             "nhwc_vs_nchw": t[f"{k}_nhwc"] / t[f"{k}_nchw"]}
            for op, k in (("forward", "fwd"), ("backward", "bwd"))]


def targets(rows: list[dict]) -> dict[str, float | None]:
    large = [list(s) for s in measure.LARGE_SHAPES]
    return {f"nhwc_vs_nchw_{op}": measure.median([
        r["nhwc_vs_nchw"] for r in rows
        if r["section"] == NAME and r["op"] == op and r["shape"] in large
        and r["dtype"] == "float32" and r["index_dtype"] == "int32"])
        for op in ("forward", "backward")}


def report(rows: list[dict], judged: bool) -> list[str]:
    head = (f"{'op':<9}{'shape':<20}{'dtype':<{table.DTYPE}}{'index':<7}{'NCHW':>9}{'NHWC':>9}"
            f"{'NHWC/NCHW':>11}")
    lines = ["layout: jax_unpool in NHWC against NCHW (milliseconds per call)",
             head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['op']:<9}{table.name(r['shape']):<20}{r['dtype']:<{table.DTYPE}}"
                     f"{r['index_dtype']:<7}{table.ms(r['nchw_ms']):>9}"
                     f"{table.ms(r['nhwc_ms']):>9}{table.ratio(r['nhwc_vs_nchw'], judged):>11}")
    return lines
