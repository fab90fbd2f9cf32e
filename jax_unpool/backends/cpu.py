"""The CPU backend: the C++ kernels of ffi/cpu/ as XLA FFI targets, lowered to on "cpu".

The target names are stable and versioned: `jax.export` artifacts record them, so a
changed calling convention gets a new `_vN` name, and the old target stays registered.
Window offsets (`index_format="window"`) have targets of their own, which read and write
the uint8 offsets directly, with the pool's window as attributes.
"""

from __future__ import annotations

import jax

from jax_unpool._extension import module
from jax_unpool.backends import custom_call, registry

# Every spatial rank, with the `spatial_rank` attribute: what the lowering calls.
MAX_UNPOOL_TARGET = "jax_unpool_max_unpool_v2"
MAX_UNPOOL_BACKWARD_TARGET = "jax_unpool_max_unpool_backward_v2"
# The max pool with indices, every spatial rank (the window's attributes say which).
MAX_POOL_TARGET = "jax_unpool_max_pool_v1"
# Window offsets, every spatial rank, the pool's window as attributes: the pool writing
# them, the unpool and its backward reading them, and flat indices converted to them.
MAX_POOL_WINDOW_TARGET = "jax_unpool_max_pool_window_v1"
MAX_UNPOOL_WINDOW_TARGET = "jax_unpool_max_unpool_window_v1"
MAX_UNPOOL_BACKWARD_WINDOW_TARGET = "jax_unpool_max_unpool_backward_window_v1"
WINDOW_OFFSETS_TARGET = "jax_unpool_window_offsets_v1"
# 2-D only (no `spatial_rank`): kept for artifacts exported before the _v2 targets.
MAX_UNPOOL2D_TARGET = "jax_unpool_max_unpool2d_v1"
MAX_UNPOOL2D_BACKWARD_TARGET = "jax_unpool_max_unpool2d_backward_v1"

_TARGETS = {  # the extension's names for its handlers
    "max_unpool": MAX_UNPOOL_TARGET,
    "max_unpool_backward": MAX_UNPOOL_BACKWARD_TARGET,
    "max_pool": MAX_POOL_TARGET,
    "max_pool_window": MAX_POOL_WINDOW_TARGET,
    "max_unpool_window": MAX_UNPOOL_WINDOW_TARGET,
    "max_unpool_backward_window": MAX_UNPOOL_BACKWARD_WINDOW_TARGET,
    "window_offsets": WINDOW_OFFSETS_TARGET,
    "max_unpool2d": MAX_UNPOOL2D_TARGET,
    "max_unpool2d_backward": MAX_UNPOOL2D_BACKWARD_TARGET,
}
STABLE_TARGETS = tuple(_TARGETS.values())  # every target this backend registers
for _op, _capsule in module.cpu_registrations().items():
    jax.ffi.register_ffi_target(_TARGETS[_op], _capsule, platform="cpu")
    jax.ffi.register_ffi_target_as_batch_partitionable(_TARGETS[_op])

_unpool = registry.by_index_format(
    custom_call.unpool_lowering(MAX_UNPOOL_TARGET),
    custom_call.window_unpool_lowering(MAX_UNPOOL_WINDOW_TARGET))
_gather = registry.by_index_format(
    custom_call.unpool_lowering(MAX_UNPOOL_BACKWARD_TARGET),
    custom_call.window_unpool_lowering(MAX_UNPOOL_BACKWARD_WINDOW_TARGET))
_derivative = registry.pool_derivative(_gather, _unpool)


def _kernels(flat: str, window: str) -> str:
    return f"C++ kernel {flat} ({window} for window offsets)"


LOWERINGS = {
    "max_unpool": registry.Lowering(_unpool, "cpu",
                                    _kernels(MAX_UNPOOL_TARGET, MAX_UNPOOL_WINDOW_TARGET)),
    "max_unpool_backward": registry.Lowering(
        _gather, "cpu", _kernels(MAX_UNPOOL_BACKWARD_TARGET, MAX_UNPOOL_BACKWARD_WINDOW_TARGET)),
    "max_pool": registry.Lowering(
        custom_call.native_pool_or_xla(custom_call.pool_lowering(MAX_POOL_TARGET),
                                       custom_call.pool_lowering(MAX_POOL_WINDOW_TARGET)), "cpu",
        f"{_kernels(MAX_POOL_TARGET, MAX_POOL_WINDOW_TARGET)}; sub-byte dtypes: XLA ops"),
    "max_pool_gather": registry.Lowering(
        _derivative["max_pool_gather"], "cpu",
        f"{_kernels(MAX_UNPOOL_BACKWARD_TARGET, MAX_UNPOOL_BACKWARD_WINDOW_TARGET)}; XLA ops "
        "for windows of padding only"),
    "max_pool_scatter_add": registry.Lowering(
        _derivative["max_pool_scatter_add"], "cpu",
        f"{_kernels(MAX_UNPOOL_TARGET, MAX_UNPOOL_WINDOW_TARGET)} where windows cannot share "
        "an argmax; XLA ops otherwise"),
    "window_offsets": registry.Lowering(
        custom_call.window_offsets_lowering(WINDOW_OFFSETS_TARGET), "cpu",
        f"C++ kernel {WINDOW_OFFSETS_TARGET} (an index outside its window: an error)"),
}
for _op, _lowering in LOWERINGS.items():
    registry.register(_op, _lowering, platform="cpu")
