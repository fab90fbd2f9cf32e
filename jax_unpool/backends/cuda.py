"""The CUDA backend: native kernels for the three ops on NVIDIA GPUs (``ffi/cuda/``), from
the optional extension module ``_jax_unpool_cuda``, built when CMake finds a CUDA compiler
(``JAX_UNPOOL_CUDA``, see CMakeLists.txt). Without that module -- a normal install -- this
backend registers nothing and the GPU keeps the XLA ops.

Targets (platform "CUDA"; semantics in ``ffi/cuda/unpool_call.h`` and ``pool_call.h``):

- ``jax_unpool_cuda_max_unpool_v1``: (x, indices) -> (out, workspace). The workspace is an
  extra result that the lowering drops, so that XLA allocates it: a 16-byte header per
  leading batch unit, and where the result cannot hold the general pass's positions
  (1-byte values, odd planes of 2-byte values), ``position_bytes`` more per output element.
  Attributes: ``channels_last``, ``spatial_rank``, and the primitive's ``window`` hint as
  ``window_extent``, ``window_stride``, ``window_padding`` (empty arrays without one).
- ``jax_unpool_cuda_max_unpool_backward_v1``: (grad_output, indices) -> out.
- ``jax_unpool_cuda_max_pool_v1``: the CPU pool target's calling convention.
- ``jax_unpool_cuda_max_pool_window_v1``, ``..._max_unpool_window_v1``,
  ``..._max_unpool_backward_window_v1`` (and their ``_checked``), ``..._window_offsets_v1``:
  the same on window offsets (``index_format="window"``), the CPU window targets'
  attributes; an offset naming no tap is dropped or reads 0 as an out-of-range index does,
  and window_indices turns an index outside its window into such an offset.
- ``..._checked_v1`` of both unpool ops: the same, but an index outside its plane fails
  the call with the CPU kernels' message. They wait for the GPU (a device-to-host copy
  per call), so they serve the unpool primitives' ``check_indices=True`` only. Otherwise
  an out-of-range index is dropped (forward) or reads 0 (backward), as XLA's scatter and
  gather do on GPU.
"""

from __future__ import annotations

import math

import jax
import numpy as np

from jax_unpool import _geometry, _settings, _sharding
from jax_unpool.backends import custom_call, registry

try:
    from jax_unpool import _jax_unpool_cuda
except ImportError:  # built without CUDA: the normal case
    _jax_unpool_cuda = None

# By the key the module's registrations() uses.
TARGETS = {
    "max_unpool": "jax_unpool_cuda_max_unpool_v1",
    "max_unpool_checked": "jax_unpool_cuda_max_unpool_checked_v1",
    "max_unpool_backward": "jax_unpool_cuda_max_unpool_backward_v1",
    "max_unpool_backward_checked": "jax_unpool_cuda_max_unpool_backward_checked_v1",
    "max_pool": "jax_unpool_cuda_max_pool_v1",
    # Window offsets (uint8), every rank, the pool's window as attributes (the CPU window
    # targets' calling convention; the forward's workspace as above).
    "max_pool_window": "jax_unpool_cuda_max_pool_window_v1",
    "max_unpool_window": "jax_unpool_cuda_max_unpool_window_v1",
    "max_unpool_window_checked": "jax_unpool_cuda_max_unpool_window_checked_v1",
    "max_unpool_backward_window": "jax_unpool_cuda_max_unpool_backward_window_v1",
    "max_unpool_backward_window_checked":
        "jax_unpool_cuda_max_unpool_backward_window_checked_v1",
    "window_offsets": "jax_unpool_cuda_window_offsets_v1",
}
STABLE_TARGETS = tuple(TARGETS.values())
# The ops whose CUDA kernels serve the GPU; the others keep XLA's ops. Each op goes to the
# faster of the two, as the GPU benchmark measures it (benchmarks/gpu.py prints a
# "routing"): all three until a GPU says otherwise. JAX_UNPOOL_CUDA_OPS (`_settings`)
# overrides it: how the benchmark measures each.
CUDA_OPS = _settings.OPS
HEADER_BYTES = 16  # kHeaderBytes in ffi/cuda/unpool_plan.h
_UINT32_MAX = 2**32 - 1


def available() -> bool:
    """Whether this build has the CUDA module (whether a GPU is present is jax's business)."""
    return _jax_unpool_cuda is not None


def position_bytes(width: int, plane, out_plane) -> int:
    """Bytes per output element of the forward's positions outside its result: the rule of
    ``PositionBytes`` in ffi/cuda/unpool_plan.h. `plane` (L) and `out_plane` (Lo) may be
    symbolic: then planes of fewer than 2**32 positions are assumed."""
    if not all(isinstance(d, int) for d in (plane, out_plane)):
        return 0 if width in (4, 8) else 4
    if width == 8 or (width == 4 and plane <= _UINT32_MAX) or (
            width == 2 and plane <= 0xFFFF and out_plane % 2 == 0):
        return 0
    return 4 if plane <= _UINT32_MAX else 8


def _workspace(out, channels_last: bool, k: int, per_element: int) -> jax.core.ShapedArray:
    """The workspace result: one header (and `per_element` bytes per output element) per
    unit of the call's leading batch dims, which XLA's batch partitioner splits with the
    other buffers, so each shard's call gets its own."""
    lead = _geometry.spatial_axis(out.ndim, channels_last, k)
    per_unit = HEADER_BYTES + per_element * math.prod(out.shape[lead:])
    return jax.core.ShapedArray((*out.shape[:lead], per_unit), np.uint8)


def _call_dropping_workspace(target: str, ctx, operands, workspace, channels_last: bool,
                             k: int, attributes: tuple):
    ctx = ctx.replace(avals_out=[*ctx.avals_out, workspace])
    call = jax.ffi.ffi_lowering(target,
                                extra_attributes=_sharding.call_attributes(ctx, channels_last, k))
    return call(ctx, *operands, **_sharding.ffi_attributes(attributes))[:-1]


def _window_attributes(window) -> tuple:
    """The primitive's `window` hint, (extent, stride, padding) or None, as attributes
    (empty arrays without one)."""
    extent, stride, padding = window if window is not None else ((), (), ())
    return (("window_extent", tuple(extent)), ("window_stride", tuple(stride)),
            ("window_padding", tuple(padding)))


def _max_unpool(ctx, x, indices, *, output_size, channels_last, window, check_indices):
    k = len(output_size)
    x_aval, out = ctx.avals_in[0], ctx.avals_out[0]
    in_size = _geometry.spatial_dims(x_aval.shape, channels_last, k)
    per_element = position_bytes(np.dtype(x_aval.dtype).itemsize, math.prod(in_size),
                                 math.prod(output_size))
    target = TARGETS["max_unpool_checked" if check_indices else "max_unpool"]
    return _call_dropping_workspace(
        target, ctx, (x, indices), _workspace(out, channels_last, k, per_element),
        channels_last, k, (*custom_call.unpool_attributes(k, bool(channels_last), window),
                           *_window_attributes(_geometry.unpool_window(in_size, output_size,
                                                                       window))))


_gather = custom_call.unpool_lowering(TARGETS["max_unpool_backward"])


def _max_unpool_backward(ctx, grad_output, indices, *, channels_last, spatial_rank, window,
                         check_indices):
    if not check_indices:  # a gather needs no window hint
        return _gather(ctx, grad_output, indices, channels_last=channels_last,
                       spatial_rank=spatial_rank)
    k = spatial_rank
    return _call_dropping_workspace(
        TARGETS["max_unpool_backward_checked"], ctx, (grad_output, indices),
        _workspace(ctx.avals_out[0], channels_last, k, 0), channels_last, k,
        custom_call.unpool_attributes(k, bool(channels_last), None))


def _max_unpool_window(ctx, x, offsets, *, index_window, check_indices, **_):
    g = index_window  # x has the pool's output size; the result its input size
    per_element = position_bytes(np.dtype(ctx.avals_in[0].dtype).itemsize,
                                 math.prod(g.out_size), math.prod(g.in_size))
    target = TARGETS["max_unpool_window_checked" if check_indices else "max_unpool_window"]
    return _call_dropping_workspace(
        target, ctx, (x, offsets), _workspace(ctx.avals_out[0], g.channels_last, g.k,
                                              per_element),
        g.channels_last, g.k, custom_call.window_attributes(g))


_gather_window = custom_call.window_unpool_lowering(TARGETS["max_unpool_backward_window"])


def _max_unpool_backward_window(ctx, grad_output, offsets, *, index_window, check_indices,
                                **params):
    g = index_window
    if not check_indices:
        return _gather_window(ctx, grad_output, offsets, index_window=g, **params)
    return _call_dropping_workspace(
        TARGETS["max_unpool_backward_window_checked"], ctx, (grad_output, offsets),
        _workspace(ctx.avals_out[0], g.channels_last, g.k, 0), g.channels_last, g.k,
        custom_call.window_attributes(g))


_max_unpool = registry.by_index_format(_max_unpool, _max_unpool_window)
_max_unpool_backward = registry.by_index_format(_max_unpool_backward,
                                                _max_unpool_backward_window)
_max_pool = custom_call.native_pool_or_xla(
    custom_call.pool_lowering(TARGETS["max_pool"]),
    custom_call.pool_lowering(TARGETS["max_pool_window"]))
# An index outside its window becomes an offset the unpools drop, as on XLA's ops.
_window_offsets = custom_call.window_offsets_lowering(TARGETS["window_offsets"])


# Registered only where this build has the CUDA module; other GPU platforms (rocm) keep
# the XLA ops.
def _register(target: str, stages: dict) -> None:
    """Registers the target's stages (instantiate loads the kernels before XLA runs or
    captures a call: ffi/cuda/kernel_registry.h); a jaxlib whose CUDA plugin takes only an
    execute capsule gets that, and the kernels load at the first call."""
    try:
        jax.ffi.register_ffi_target(target, stages, platform="CUDA")
    except Exception:  # noqa: BLE001 -- the plugin's own error type varies by release
        jax.ffi.register_ffi_target(target, stages["execute"], platform="CUDA")


if _jax_unpool_cuda is not None:
    for _op, _stages in _jax_unpool_cuda.registrations().items():
        _register(TARGETS[_op], _stages)
        jax.ffi.register_ffi_target_as_batch_partitionable(TARGETS[_op])
    _rules = {"max_unpool": _max_unpool, "max_unpool_backward": _max_unpool_backward,
              "max_pool": _max_pool}
    for _op in _settings.CUDA_OPS:
        registry.register(_op, registry.Lowering(
            _rules[_op], "cuda", f"CUDA kernel {TARGETS[_op]} ({TARGETS[_op + '_window']} for "
            "window offsets)"), platform="cuda")
    registry.register("window_offsets", registry.Lowering(
        _window_offsets, "cuda", f"CUDA kernel {TARGETS['window_offsets']} (an index outside "
        "its window: an offset the unpools drop)"), platform="cuda")
    # The pool's derivative runs the unpool kernels where they serve the GPU.
    if {"max_unpool", "max_unpool_backward"} <= set(_settings.CUDA_OPS):
        for _op, _rule in registry.pool_derivative(_max_unpool_backward, _max_unpool).items():
            registry.register(_op, registry.Lowering(_rule, "cuda", "CUDA unpool kernels "
                                                     "where the argmaxes allow, XLA ops "
                                                     "otherwise"), platform="cuda")
