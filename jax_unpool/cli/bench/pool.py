"""Section ``pool``: max_poolNd_with_indices (on CPU the native pool) against the XLA-ops
pool (:mod:`jax_unpool.reference`, whose gradient is XLA's scatter-add) and
``torch.max_poolNd(return_indices=True)``, forward and forward + gradient, channels first
and channels last (torch: channels first only), 2 per axis, stride 2."""

from __future__ import annotations

import jax
import numpy as np

import jax_unpool as ju
from jax_unpool._compat import enable_x64
from jax_unpool.cli.bench import measure, table
from jax_unpool.cli.bench.measure import KERNEL, Settings

NAME = "pool"
# Float32: against torch and the XLA ops (the median over the large 2-D shapes, NCHW), the
# fraction of the memory bandwidth on inputs of POOL_BANDWIDTH_INPUT_BYTES or more, the
# tiny shape's call, and the ms per byte of each rank and layout over 2-D NCHW's (forward;
# the large shapes for 2-D, the rank shapes for 1-D and 3-D).
TARGETS = {
    "pool_vs_torch": ("<=", 1.0),
    "pool_grad_vs_torch": ("<=", 0.25),
    "pool_forward_vs_xla": (">=", 2.5),
    "pool_forward_of_bandwidth_32mb": (">=", 0.7),
    "tiny_pool_vs_xla_per_call": ("<=", 1.0),
    "pool_per_byte_nhwc_vs_nchw": ("<=", 1.3),
    "pool_per_byte_ncw_vs_nchw": ("<=", 1.3),
    "pool_per_byte_nwc_vs_nchw": ("<=", 1.3),
    "pool_per_byte_ncdhw_vs_nchw": ("<=", 1.3),
    "pool_per_byte_ndhwc_vs_nchw": ("<=", 1.3),
}
POOL_BANDWIDTH_INPUT_BYTES = 32 << 20

FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
POOL = {1: (ju.max_pool1d_with_indices, ju.reference.max_pool1d_with_indices, "max_pool1d"),
        2: (ju.max_pool2d_with_indices, ju.reference.max_pool2d_with_indices, "max_pool2d"),
        3: (ju.max_pool3d_with_indices, ju.reference.max_pool3d_with_indices, "max_pool3d")}


def rows(settings: Settings) -> list[dict]:
    found = []
    for shape in settings.shapes:
        for dtype in settings.dtypes:
            with enable_x64(measure.needs_x64(dtype)):  # float64 is float32 without it
                for last in (False, True):
                    found += _configuration(shape, dtype, settings, last)
    return found


def _configuration(shape, dtype, settings: Settings, last: bool) -> list[dict]:
    """The pool of an input twice `shape` per spatial axis, whose results have the
    benchmark shape: the forward, and the forward + gradient w.r.t. x."""
    k = len(shape) - 2
    ours_p, xla_p, torch_name = POOL[k]
    n, c, *spatial = shape
    in_shape = (n, c, *(d * KERNEL for d in spatial))
    rng, torch = settings.rng, settings.torch
    x_np = measure.values(rng, in_shape, dtype)
    ct_np = measure.values(rng, shape, dtype)
    fmt = FORMATS[k][last]
    if last:
        x_np, ct_np = measure.channels_last(x_np), measure.channels_last(ct_np)

    def with_grad(pool):
        def f(x, ct):
            (out, idx), vjp = jax.vjp(lambda v: pool(v, KERNEL, data_format=fmt), x)
            return out, idx, vjp((ct, np.zeros(idx.shape, jax.dtypes.float0)))[0]
        return jax.jit(f)

    call, inputs = measure.jax_call, measure.inputs
    fwd = {"jax_unpool": call(jax.jit(lambda x: ours_p(x, KERNEL, data_format=fmt)),
                              *inputs(x_np)),
           "xla": call(jax.jit(lambda x: xla_p(x, KERNEL, data_format=fmt)), *inputs(x_np))}
    grad = {"jax_unpool": call(with_grad(ours_p), *inputs(x_np, ct_np)),
            "xla": call(with_grad(xla_p), *inputs(x_np, ct_np))}
    skipped = {}  # op -> why torch has no column
    if torch is not None and not last:
        t_pool = getattr(torch.nn.functional, torch_name)

        def forward():
            tx = measure.to_torch(torch, x_np)
            return lambda: t_pool(tx, KERNEL, return_indices=True)

        def forward_and_grad():
            tx_grad = measure.to_torch(torch, x_np).requires_grad_(True)
            tct = measure.to_torch(torch, ct_np)

            def torch_grad():
                out, _ = t_pool(tx_grad, KERNEL, return_indices=True)
                return torch.autograd.grad(out, tx_grad, tct)
            return torch_grad

        for calls, op, make in ((fwd, "forward", forward),
                                (grad, "forward+grad", forward_and_grad)):
            call, skipped[op] = measure.torch_call(make)
            if call is not None:
                calls["torch"] = call
    sys_fwd, sys_grad = {}, {}
    t_fwd = measure.times(fwd, settings.reps, settings.warmup, sys_fwd)
    t_grad = measure.times(grad, settings.reps, settings.warmup, sys_grad)
    x_bytes, out_bytes = x_np.nbytes, ct_np.nbytes
    idx_bytes = out_bytes // ct_np.itemsize * 4
    common = {"section": NAME, "rank": k, "shape": list(shape), "input_shape": list(in_shape),
              "dtype": measure.ran(dtype), "index_dtype": "int32", "format": fmt,
              "layout": "channels_last" if last else "channels_first",
              "input_bytes": x_bytes}
    bw = settings.bandwidth
    rows = [measure.op_row(common, "forward", t_fwd, x_bytes + out_bytes + idx_bytes, bw,
                           sys_fwd),
            # + the cotangent and the indices read, the gradient written
            measure.op_row(common, "forward+grad", t_grad,
                           2 * x_bytes + 2 * out_bytes + 2 * idx_bytes, bw, sys_grad)]
    for r in rows:
        r["vs_torch"] = measure.ratio(r["jax_unpool_ms"], r["torch_ms"])
        r["torch_skipped"] = skipped.get(r["op"])
    return rows


def targets(rows: list[dict]) -> dict[str, float | None]:
    large = [list(s) for s in measure.LARGE_SHAPES]

    def pool_rows(op, fmt, shapes=None):
        return [r for r in rows if r["section"] == NAME and r["op"] == op
                and r["format"] == fmt and r["dtype"] == "float32"
                and (shapes is None or r["shape"] in shapes)]

    def median_of(op, fmt, field, shapes=None, keep=lambda r: True):
        return measure.median([r.get(field) for r in pool_rows(op, fmt, shapes) if keep(r)])

    def ms_per_byte(fmt, shapes):
        return measure.median([r["jax_unpool_ms"] / r["bytes"]
                               for r in pool_rows("forward", fmt, shapes)])

    tiny = median_of("forward", "NCHW", "speedup_vs_xla", [list(measure.TINY_SHAPE)])
    found = {
        "pool_vs_torch": median_of("forward", "NCHW", "vs_torch", large),
        "pool_grad_vs_torch": median_of("forward+grad", "NCHW", "vs_torch", large),
        "pool_forward_vs_xla": median_of("forward", "NCHW", "speedup_vs_xla", large),
        "pool_forward_of_bandwidth_32mb": median_of(
            "forward", "NCHW", "bandwidth_fraction", large,
            keep=lambda r: r["input_bytes"] >= POOL_BANDWIDTH_INPUT_BYTES),
        "tiny_pool_vs_xla_per_call": None if tiny is None else 1 / tiny,
    }
    nchw = ms_per_byte("NCHW", large)
    ranks = [list(s) for s in measure.RANK_SHAPES]
    for fmt, shapes in (("NHWC", large), ("NCW", ranks), ("NWC", ranks), ("NCDHW", ranks),
                        ("NDHWC", ranks)):
        found[f"pool_per_byte_{fmt.lower()}_vs_nchw"] = measure.ratio(ms_per_byte(fmt, shapes),
                                                                       nchw)
    return found


def report(rows: list[dict], judged: bool) -> list[str]:
    return [("max_poolNd_with_indices (2 per axis, stride 2; shape = pooled result, "
             "channels first; ours = the native pool) against the XLA ops (xla; gradient: "
             "XLA's scatter-add) and torch.max_poolNd(return_indices=True) [+ autograd]"),
            *table.op_table(rows, "shape", judged, label=lambda r: f"{r['op']} {r['format']}")]
