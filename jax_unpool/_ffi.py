"""Loads the compiled extension and registers its CPU handlers with XLA.

The target names are stable and versioned: `jax.export` artifacts record them, so a
changed calling convention gets a new `_vN` name instead of reusing an old one.
"""

from __future__ import annotations

import jax

from jax_unpool import _jax_unpool

MAX_UNPOOL2D_TARGET = "jax_unpool_max_unpool2d_v1"
MAX_UNPOOL2D_BACKWARD_TARGET = "jax_unpool_max_unpool2d_backward_v1"

_CPU_TARGETS = {
    "max_unpool2d": MAX_UNPOOL2D_TARGET,
    "max_unpool2d_backward": MAX_UNPOOL2D_BACKWARD_TARGET,
}

for _op, _capsule in _jax_unpool.cpu_registrations().items():
    jax.ffi.register_ffi_target(_CPU_TARGETS[_op], _capsule, platform="cpu")
    jax.ffi.register_ffi_target_as_batch_partitionable(_CPU_TARGETS[_op])
