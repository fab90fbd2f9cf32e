"""Loads the compiled extension and registers its CPU handlers with XLA.

The target names are stable and versioned: `jax.export` artifacts record them, so a
changed calling convention gets a new `_vN` name instead of reusing an old one.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.export

# How the CPU unpool backward gathers 4- and 8-byte values (ffi/cpu/simd.h): unset, by
# CPU (AVX2 gathers, but scalar loads on AMD, whose gathers are slower); "vector" or
# "scalar" to choose. The kernel reads it once; a typo would be ignored there, so it is
# refused here.
GATHER_ENV = "JAX_UNPOOL_CPU_GATHER"
if os.environ.get(GATHER_ENV, "") not in ("", "vector", "scalar"):
    raise ImportError(f"jax_unpool: environment variable {GATHER_ENV} must be 'vector', "
                      f"'scalar' or unset, got {os.environ[GATHER_ENV]!r}")

try:
    from jax_unpool import _jax_unpool
except ImportError:
    _package = Path(__file__).resolve().parent
    if not list(_package.glob("_jax_unpool*.so")):
        # A source tree that was never built: say so instead of "circular import".
        raise ImportError(
            f"jax_unpool at {_package} has no compiled extension module _jax_unpool (this is "
            f"a source tree that was not built): run `pip install .` in {_package.parent}"
        ) from None
    raise

# Every spatial rank, with the `spatial_rank` attribute: what the CPU lowering calls.
MAX_UNPOOL_TARGET = "jax_unpool_max_unpool_v2"
MAX_UNPOOL_BACKWARD_TARGET = "jax_unpool_max_unpool_backward_v2"
# The max pool with indices, every spatial rank (the window's attributes say which).
MAX_POOL_TARGET = "jax_unpool_max_pool_v1"
# 2-D only (no `spatial_rank`): kept for artifacts exported before the _v2 targets.
MAX_UNPOOL2D_TARGET = "jax_unpool_max_unpool2d_v1"
MAX_UNPOOL2D_BACKWARD_TARGET = "jax_unpool_max_unpool2d_backward_v1"
# The Ascend NPU handlers (registered by jax_unpool.npu.register).
ACLNN_MAX_UNPOOL2D_TARGET = "jax_unpool_aclnn_max_unpool2d_v1"
ACLNN_MAX_UNPOOL2D_BACKWARD_TARGET = "jax_unpool_aclnn_max_unpool2d_backward_v1"
# aclnnMaxUnpool3d(Backward): channels-first (C, D, H, W) or (N, C, D, H, W), no attributes.
ACLNN_MAX_UNPOOL3D_TARGET = "jax_unpool_aclnn_max_unpool3d_v1"
ACLNN_MAX_UNPOOL3D_BACKWARD_TARGET = "jax_unpool_aclnn_max_unpool3d_backward_v1"
# aclnnMaxPool2dWithIndices / aclnnMaxPool3dWithArgmax: x -> (values, indices), attributes
# kernel_size, stride, padding, dilation (int64 arrays of 2 or 3), ceil_mode, channels_last.
ACLNN_MAX_POOL2D_TARGET = "jax_unpool_aclnn_max_pool2d_with_indices_v1"
ACLNN_MAX_POOL3D_TARGET = "jax_unpool_aclnn_max_pool3d_with_argmax_v1"
# The CUDA handlers (ffi/cuda/, the optional _jax_unpool_cuda module; registered by
# jax_unpool.backends.cuda), by the key the module's registrations() uses.
CUDA_TARGETS = {
    "max_unpool": "jax_unpool_cuda_max_unpool_v1",
    "max_unpool_checked": "jax_unpool_cuda_max_unpool_checked_v1",
    "max_unpool_backward": "jax_unpool_cuda_max_unpool_backward_v1",
    "max_unpool_backward_checked": "jax_unpool_cuda_max_unpool_backward_checked_v1",
    "max_pool": "jax_unpool_cuda_max_pool_v1",
}
STABLE_TARGETS = (MAX_UNPOOL_TARGET, MAX_UNPOOL_BACKWARD_TARGET, MAX_POOL_TARGET,
                  MAX_UNPOOL2D_TARGET, MAX_UNPOOL2D_BACKWARD_TARGET,
                  ACLNN_MAX_UNPOOL2D_TARGET, ACLNN_MAX_UNPOOL2D_BACKWARD_TARGET,
                  ACLNN_MAX_UNPOOL3D_TARGET, ACLNN_MAX_UNPOOL3D_BACKWARD_TARGET,
                  ACLNN_MAX_POOL2D_TARGET, ACLNN_MAX_POOL3D_TARGET, *CUDA_TARGETS.values())

_CPU_TARGETS = {
    "max_unpool": MAX_UNPOOL_TARGET,
    "max_unpool_backward": MAX_UNPOOL_BACKWARD_TARGET,
    "max_pool": MAX_POOL_TARGET,
    "max_unpool2d": MAX_UNPOOL2D_TARGET,
    "max_unpool2d_backward": MAX_UNPOOL2D_BACKWARD_TARGET,
}

for _op, _capsule in _jax_unpool.cpu_registrations().items():
    jax.ffi.register_ffi_target(_CPU_TARGETS[_op], _capsule, platform="cpu")
    jax.ffi.register_ffi_target_as_batch_partitionable(_CPU_TARGETS[_op])


def export_safety_checks() -> list[jax.export.DisabledSafetyCheck]:
    """The ``disabled_checks`` that ``jax.export.export`` needs for functions using these ops.

    ``jax.export`` refuses custom calls that jax itself does not guarantee to keep
    compatible. Ours are: a target's calling convention never changes under its name
    (a change gets a new ``_vN`` target), so a serialized artifact keeps running in any
    process that has imported ``jax_unpool``.
    """
    return [jax.export.DisabledSafetyCheck.custom_call(target) for target in STABLE_TARGETS]
