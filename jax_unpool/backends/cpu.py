"""The CPU backend: the C++ kernels of ffi/cpu/ as XLA FFI targets, lowered to on "cpu".

The target names are stable and versioned: `jax.export` artifacts record them, so a
changed calling convention gets a new `_vN` name, and the old target stays registered.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

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

# What the C++ pool orders (ffi/common/pool_values.h); other dtypes (the sub-byte ones) keep
# the XLA ops on CPU too.
NATIVE_POOL_DTYPES = frozenset(np.dtype(d) for d in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", jnp.bfloat16, "float32", "float64", *(
        getattr(jnp, f) for f in ("float8_e5m2", "float8_e4m3", "float8_e3m4", "float8_e4m3fn",
                                  "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                  "float8_e8m0fnu") if hasattr(jnp, f))))

_native_pool = custom_call.pool_lowering(MAX_POOL_TARGET)


def _max_pool(ctx, x, **params):
    if np.dtype(ctx.avals_in[0].dtype) in NATIVE_POOL_DTYPES:
        return _native_pool(ctx, x, **params)
    return registry.rule(None, "max_pool")(ctx, x, **params)


LOWERINGS = {
    "max_unpool": registry.Lowering(custom_call.unpool_lowering(MAX_UNPOOL_TARGET), "cpu",
                                    f"C++ kernel {MAX_UNPOOL_TARGET}"),
    "max_unpool_backward": registry.Lowering(
        custom_call.unpool_lowering(MAX_UNPOOL_BACKWARD_TARGET), "cpu",
        f"C++ kernel {MAX_UNPOOL_BACKWARD_TARGET}"),
    "max_pool": registry.Lowering(_max_pool, "cpu", f"C++ kernel {MAX_POOL_TARGET} (sub-byte "
                                  "dtypes: XLA ops)"),
}
for _op, _lowering in LOWERINGS.items():
    registry.register(_op, _lowering, platform="cpu")
