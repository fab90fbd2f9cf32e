"""Lowerings of the primitives to XLA FFI custom calls, shared by the native backends.

A backend names its target and how the primitive's parameters become the call's
attributes; this module builds the call, with the attributes that let XLA partition it
along N and C (`_sharding.call_attributes`), and sends a channels-last call, whose C is
not a leading dim, through `_sharding`'s custom_partitioning (outside `jax.export`: its
callback lives in the tracing process and cannot be serialized). The calls on window
offsets (`index_window`, `index_format="window"`, `window_offsets_p`) carry the pool's
window as attributes (`window_attributes`), so that the kernels read the uint8 offsets
themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import mlir

from jax_unpool import _compat, _sharding
from jax_unpool.backends import registry

# What the native pools order (ffi/common/pool_values.h), on CPU and CUDA alike; other
# dtypes (the packed sub-byte ones) keep the XLA ops there too.
NATIVE_POOL_DTYPES = frozenset(np.dtype(d) for d in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", jnp.bfloat16, "float32", "float64", *(
        getattr(jnp, f) for f in ("float8_e5m2", "float8_e4m3", "float8_e3m4", "float8_e4m3fn",
                                  "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                  "float8_e8m0fnu") if hasattr(jnp, f))))


def unpool_attributes(k: int, channels_last: bool, window) -> tuple:
    """The attributes of the CPU unpool targets (`_v2`): the layout and the spatial rank
    (the handlers read the sizes from the buffers)."""
    return (("channels_last", channels_last), ("spatial_rank", k))


def unpool_lowering(target: str, attributes: Callable[..., tuple] = unpool_attributes, *,
                    per_shard: bool = True):
    """The lowering of an unpool primitive (the forward or the backward) to the FFI call
    `target` with `attributes(k, channels_last, window)`, a tuple of (name, value).
    `per_shard=False` keeps a channels-last call whole (it is gathered on several
    devices): for targets with no channels-last partitioning."""
    def lowering(ctx, *operands, channels_last, output_size=None, spatial_rank=2,
                 window=None, check_indices=False):
        k = len(output_size) if output_size is not None else spatial_rank
        pairs = attributes(k=int(k), channels_last=bool(channels_last), window=window)
        if channels_last and per_shard and not _compat.lowering_for_export(ctx):
            kernel = partial(_sharding.per_shard_unpool_call, target, k, output_size, pairs)
            return mlir.lower_fun(kernel, multiple_results=False)(ctx, *operands)
        call = jax.ffi.ffi_lowering(
            target, extra_attributes=_sharding.call_attributes(ctx, channels_last, k))
        return call(ctx, *operands, **_sharding.ffi_attributes(pairs))
    return lowering


def pool_attributes(channels_last: bool, kernel_size, stride, padding, dilation,
                    ceil_mode) -> tuple:
    """The attributes of the pool targets: the window (k ints each), ceil_mode and the
    layout."""
    return (("kernel_size", tuple(kernel_size)), ("stride", tuple(stride)),
            ("padding", tuple(padding)), ("dilation", tuple(dilation)),
            ("ceil_mode", bool(ceil_mode)), ("channels_last", bool(channels_last)))


def window_attributes(g) -> tuple:
    """The pool's window (a `_geometry.PoolGeometry`) as the attributes of the calls on its
    window offsets: the pool targets' attributes."""
    return pool_attributes(g.channels_last, g.kernel, g.stride, g.padding, g.dilation,
                           g.ceil_mode)


def window_unpool_lowering(target: str) -> Callable:
    """The lowering of an unpool primitive (the forward or the backward) on window offsets
    (`index_window`, the pool's geometry) to the FFI call `target`: (values, offsets) ->
    out, with the pool's window as attributes, partitioned along N and C as the flat
    calls are."""
    def lowering(ctx, values, offsets, *, index_window, output_size=None, **_):
        g = index_window
        pairs = window_attributes(g)
        if g.channels_last and not _compat.lowering_for_export(ctx):
            kernel = partial(_sharding.per_shard_unpool_call, target, g.k, output_size, pairs)
            return mlir.lower_fun(kernel, multiple_results=False)(ctx, values, offsets)
        call = jax.ffi.ffi_lowering(
            target, extra_attributes=_sharding.call_attributes(ctx, g.channels_last, g.k))
        return call(ctx, values, offsets, **_sharding.ffi_attributes(pairs))
    return lowering


def window_offsets_lowering(target: str) -> Callable:
    """The lowering of window_offsets_p (flat indices -> uint8 offsets) to the FFI call
    `target`, with the pool's window and input size as attributes."""
    def lowering(ctx, indices, *, geometry, check_indices=False):
        g = geometry
        pairs = (*window_attributes(g), ("input_size", tuple(g.in_size)))
        if g.channels_last and not _compat.lowering_for_export(ctx):
            kernel = partial(_sharding.per_shard_offsets_call, target, g.k, pairs)
            return mlir.lower_fun(kernel, multiple_results=False)(ctx, indices)
        call = jax.ffi.ffi_lowering(
            target, extra_attributes=_sharding.call_attributes(ctx, g.channels_last, g.k))
        return call(ctx, indices, **_sharding.ffi_attributes(pairs))
    return lowering


def native_pool_or_xla(native: Callable, window_native: Callable | None = None) -> Callable:
    """The pool rule `native` (`window_native` for window offsets) for the dtypes the
    native pools order, the XLA ops' for the others."""
    def lowering(ctx, x, **params):
        rule = native if params["index_format"] == "flat" else window_native
        if rule is not None and np.dtype(ctx.avals_in[0].dtype) in NATIVE_POOL_DTYPES:
            return rule(ctx, x, **params)
        return registry.rule(None, "max_pool")(ctx, x, **params)
    return lowering


def pool_lowering(target: str, attributes: Callable[..., tuple] = pool_attributes):
    """The lowering of a pool primitive (x -> values, indices) to the FFI call `target`,
    partitioned along N and C as the unpool calls are."""
    def lowering(ctx, x, *, kernel_size, stride, padding, dilation, ceil_mode, channels_last,
                 index_dtype, index_format="flat"):
        k = len(kernel_size)
        pairs = attributes(bool(channels_last), kernel_size, stride, padding, dilation,
                           ceil_mode)
        if channels_last and not _compat.lowering_for_export(ctx):
            values = ctx.avals_out[0]
            out_size = tuple(values.shape[values.ndim - 1 - k:values.ndim - 1])
            # The indices' dtype as abstract evaluation gave it: uint8 for window offsets.
            kernel = partial(_sharding.per_shard_pool_call, target, k, pairs, out_size,
                             np.dtype(ctx.avals_out[1].dtype))
            return mlir.lower_fun(kernel, multiple_results=True)(ctx, x)
        call = jax.ffi.ffi_lowering(
            target, extra_attributes=_sharding.call_attributes(ctx, channels_last, k))
        return call(ctx, x, **_sharding.ffi_attributes(pairs))
    return lowering
