"""The CPU backend: the C++ kernels of ffi/cpu/ as XLA FFI targets, lowered to on "cpu".

The target names are stable and versioned: `jax.export` artifacts record them, so a
changed calling convention gets a new `_vN` name, and the old target stays registered.
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
# 2-D only (no `spatial_rank`): kept for artifacts exported before the _v2 targets.
MAX_UNPOOL2D_TARGET = "jax_unpool_max_unpool2d_v1"
MAX_UNPOOL2D_BACKWARD_TARGET = "jax_unpool_max_unpool2d_backward_v1"

_TARGETS = {  # the extension's names for its handlers
    "max_unpool": MAX_UNPOOL_TARGET,
    "max_unpool_backward": MAX_UNPOOL_BACKWARD_TARGET,
    "max_pool": MAX_POOL_TARGET,
    "max_unpool2d": MAX_UNPOOL2D_TARGET,
    "max_unpool2d_backward": MAX_UNPOOL2D_BACKWARD_TARGET,
}
STABLE_TARGETS = tuple(_TARGETS.values())  # every target this backend registers
for _op, _capsule in module.cpu_registrations().items():
    jax.ffi.register_ffi_target(_TARGETS[_op], _capsule, platform="cpu")
    jax.ffi.register_ffi_target_as_batch_partitionable(_TARGETS[_op])

_unpool = registry.flat_indices_first(custom_call.unpool_lowering(MAX_UNPOOL_TARGET))
_gather = registry.flat_indices_first(custom_call.unpool_lowering(MAX_UNPOOL_BACKWARD_TARGET))
_derivative = registry.pool_derivative(_gather, _unpool)

LOWERINGS = {
    "max_unpool": registry.Lowering(_unpool, "cpu", f"C++ kernel {MAX_UNPOOL_TARGET}"),
    "max_unpool_backward": registry.Lowering(_gather, "cpu",
                                             f"C++ kernel {MAX_UNPOOL_BACKWARD_TARGET}"),
    "max_pool": registry.Lowering(
        custom_call.native_pool_or_xla(custom_call.pool_lowering(MAX_POOL_TARGET)), "cpu",
        f"C++ kernel {MAX_POOL_TARGET} (sub-byte dtypes: XLA ops)"),
    "max_pool_gather": registry.Lowering(
        _derivative["max_pool_gather"], "cpu",
        f"C++ kernel {MAX_UNPOOL_BACKWARD_TARGET} (XLA ops for windows of padding only)"),
    "max_pool_scatter_add": registry.Lowering(
        _derivative["max_pool_scatter_add"], "cpu",
        f"C++ kernel {MAX_UNPOOL_TARGET} where windows cannot share an argmax; XLA ops "
        "otherwise"),
}
for _op, _lowering in LOWERINGS.items():
    registry.register(_op, _lowering, platform="cpu")
