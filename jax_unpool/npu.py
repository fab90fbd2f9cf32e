"""Ascend NPU path: routes the two primitives to CANN's aclnnMaxUnpool2d and
aclnnMaxUnpool2dBackward (2-D; 1-D on the (N, C, 1, W) view; channels-last 3-D on the
(N, D*H, W, C) view, since the 3-D ops want a contiguous NCDHW out) and
aclnnMaxUnpool3d and aclnnMaxUnpool3dBackward (channels-first 3-D) through the XLA FFI
handlers of ffi/npu/; and the pools' forward to aclnnMaxPool2dWithIndices (1-D, 2-D) and
aclnnMaxPool3dWithArgmax (3-D) where they give PyTorch's result (`pool_lowering`). Its
functions::

    register(platform="ascend", library_dir=None, *, ffi_platform=None, aclnn_pools=True)
        Loads CANN (dlopen at run time: importing this module never needs it), registers
        the aclnn FFI targets with the platform's PJRT plugin and makes the unpool
        primitives lower to them there, and the pool primitives through `pool_lowering`. `platform` is JAX's name for the plugin's platform (none is
        official; it is a parameter); it must have devices, and is never a GPU or TPU
        platform. platform="cpu" is the host-emulation mode, for testing: the handlers run
        on host memory with no stream against an emulated CANN (tests/fake_cann), named by
        an explicit library_dir, and the primitives' CPU lowering goes through them (the
        pools' to the XLA ops where aclnn's would not give PyTorch's result), process-wide,
        until unregister_cpu_emulation() (or use `cpu_emulation()`).
    is_available(library_dir=None) -> bool
        Whether CANN can be loaded (or already is); never raises.
    locate(library_dir=None) -> dict
        Where CANN would be (or was) loaded from; raises RuntimeError like register().

CANN search order: a libascendcl.so already loaded in the process (only directories whose
libascendcl.so is that very file: library_dir when given, else the one it was loaded from,
the search's below, its real one -- files are compared, so CANN's latest/ symlinks into
versioned package directories load); else library_dir (only it, when given); else
$ASCEND_TOOLKIT_HOME/lib64; $ASCEND_HOME_PATH/lib64; /usr/local/Ascend/ascend-toolkit/latest/lib64;
/usr/local/Ascend/cann/lib64; the dynamic loader's path. The first directory holding
libascendcl.so, libnnopbase.so and one aclnn op library (libopapi_nn.so, else libopapi.so,
else the libaclnn_ops_train.so + libaclnn_ops_infer.so pair) wins. Loading is once per
process: a later register() whose library_dir resolves to other files raises, and so
does one in the other mode (host emulation or NPU platform) than the first; a failed load
can be retried.

Supported chips (CANN's docs for the ops, hicann/ops-nn index/*/docs/aclnnMaxUnpool*.md):
all four ops on Atlas A2/A3 and Ascend 950; only the two backwards on the Atlas training
series (910); none on the Atlas inference series (310P) or Atlas 200I/500 A2. The chip is
not checked (nor by the ops): elsewhere the outcome is CANN's, a failing status a run-time
error. The loader requires the aclnnMaxUnpool2dBackward entry points; without the forward
ones, register() warns and the forward unpools lower to the jnp reference.

In the NPU lowering the indices are clamped into the output plane (CANN does not report an
out-of-range index synchronously and its kernels would write or read out of bounds) and
the forward's are converted to int64 (CANN before 8.0.0 took only INT64 there), as are
the 3-D backward's (aclnnMaxUnpool3dBackward takes INT64 only). Shapes aclnn refuses --
an empty input, or an output plane smaller than the input plane (only possible with
duplicated indices; the 3-D backward refuses it too) -- are lowered to the jnp
reference, which gives the same result. With a CANN without the (optional) 3-D ops,
channels-first 3-D runs on the 2-D ops' view too (a direct call of the 3-D targets fails
with FAILED_PRECONDITION naming the missing symbols). The pool ops are optional as well:
without them, and for every pool they would not compute as PyTorch does, the pools keep
their XLA ops.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import warnings
from collections.abc import Iterator

import jax
import numpy as np
from jax import core
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir

from jax_unpool import (
    _args,
    _compat,
    _ffi,
    _jax_unpool,
    _planes,
    _pool_primitives,
    _primitives,
    _sharding,
)

__all__ = [
    "MAX_POOL2D_TARGET",
    "MAX_POOL3D_TARGET",
    "MAX_UNPOOL2D_BACKWARD_TARGET",
    "MAX_UNPOOL2D_TARGET",
    "MAX_UNPOOL3D_BACKWARD_TARGET",
    "MAX_UNPOOL3D_TARGET",
    "cpu_emulation",
    "cpu_emulation_active",
    "is_available",
    "locate",
    "register",
    "unregister_cpu_emulation",
]

# Stable and versioned, like the CPU targets: jax.export artifacts record them. (The #:
# comments are their entries in the API reference.)
#: The FFI target of the unpooling forward of rank 1 and 2 on the NPU
#: (``aclnnMaxUnpool2d``; 1-D runs as 2-D over an ``(N, C, 1, W)`` view).
MAX_UNPOOL2D_TARGET = _ffi.ACLNN_MAX_UNPOOL2D_TARGET
#: The FFI target of the unpooling backward of rank 1 and 2 on the NPU
#: (``aclnnMaxUnpool2dBackward``).
MAX_UNPOOL2D_BACKWARD_TARGET = _ffi.ACLNN_MAX_UNPOOL2D_BACKWARD_TARGET
#: The FFI target of the 3-D unpooling forward on the NPU (``aclnnMaxUnpool3d``).
MAX_UNPOOL3D_TARGET = _ffi.ACLNN_MAX_UNPOOL3D_TARGET
#: The FFI target of the 3-D unpooling backward on the NPU (``aclnnMaxUnpool3dBackward``).
MAX_UNPOOL3D_BACKWARD_TARGET = _ffi.ACLNN_MAX_UNPOOL3D_BACKWARD_TARGET
#: The FFI target of the 1-D and 2-D pools on the NPU (``aclnnMaxPool2dWithIndices``).
MAX_POOL2D_TARGET = _ffi.ACLNN_MAX_POOL2D_TARGET
#: The FFI target of the 3-D pool on the NPU (``aclnnMaxPool3dWithArgmax``).
MAX_POOL3D_TARGET = _ffi.ACLNN_MAX_POOL3D_TARGET

_lock = threading.Lock()
_targets_registered: set[str] = set()  # platforms
_cpu_emulation = False
_aclnn_pools = True  # register(..., aclnn_pools=False) keeps the pools' XLA ops


def _library_dir(library_dir: str | os.PathLike | None, fn: str = "register") -> str:
    """The directory as the loader takes it ("" for the default search)."""
    if library_dir is None:
        return ""
    path = os.fspath(library_dir) if isinstance(library_dir, (str, os.PathLike)) else None
    if not isinstance(path, str):  # bytes would reach the loader's str argument
        raise TypeError(f"jax_unpool.npu.{fn}: library_dir must be a directory as a str or "
                        f"os.PathLike of str, or None, got {library_dir!r}")
    return path


def _check_arguments(platform: object, ffi_platform: object, aclnn_pools: object) -> None:
    if not isinstance(platform, str) or not platform:
        raise TypeError("jax_unpool.npu.register: platform must be JAX's name of the NPU "
                        f"platform, a non-empty str (e.g. 'ascend'), got {platform!r}")
    if ffi_platform is not None and (not isinstance(ffi_platform, str) or not ffi_platform):
        raise TypeError("jax_unpool.npu.register: ffi_platform must be a non-empty str or "
                        f"None, got {ffi_platform!r}")
    if not isinstance(aclnn_pools, (bool, np.bool_)):  # "no" would count as True
        raise TypeError(f"jax_unpool.npu.register: aclnn_pools must be a bool, got "
                        f"{aclnn_pools!r}")


def is_available(library_dir: str | os.PathLike | None = None) -> bool:
    """True if the CANN runtime is already loaded (with library_dir None), or can be found
    and opened from `library_dir` or the default search; never raises."""
    try:
        _jax_unpool.probe_cann(_library_dir(library_dir))
    except Exception:  # noqa: BLE001 -- documented: never raises
        return False
    return True


def locate(library_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """The files CANN would be loaded from (or was, when already loaded and `library_dir`
    is None): {"libascendcl": ..., "libnnopbase": ..., "opapi": ...}. Raises RuntimeError
    listing every path tried and the environment variables consulted."""
    return dict(_jax_unpool.probe_cann(_library_dir(library_dir, "locate")))


# --------------------------------------------------------------------------------------
# Lowerings
# --------------------------------------------------------------------------------------

def _aclnn_takes(x_shape, output_size, channels_last: bool) -> bool:
    """aclnnMaxUnpool2d/3d refuse empty C and spatial dims (and leave `out` unwritten for
    an empty x) and an output plane smaller than the input plane."""
    k = len(output_size)
    s = _args.spatial_axis(len(x_shape), channels_last, k)
    return all(d > 0 for d in x_shape) and math.prod(output_size) >= math.prod(x_shape[s:s + k])


def _scatter_reference(x, indices, *, output_size, channels_last):
    return _planes.scatter_planes(x, indices, output_size, channels_last)


def _gather_reference(grad_output, indices, *, channels_last, spatial_rank):
    return _planes.gather_planes(grad_output, indices, channels_last, spatial_rank)


_forward_reference = mlir.lower_fun(_scatter_reference, multiple_results=False)
_backward_reference = mlir.lower_fun(_gather_reference, multiple_results=False)
_aclnn_forward = _sharding.ffi_call_lowering(MAX_UNPOOL2D_TARGET)
_aclnn_backward = _sharding.ffi_call_lowering(MAX_UNPOOL2D_BACKWARD_TARGET)


def _aclnn_volume_call(target: str, ctx, values, indices):
    """A call of a 3-D aclnn target (NCDHW/CDHW buffers, no attributes)."""
    call = jax.ffi.ffi_lowering(target, extra_attributes=_sharding.call_attributes(ctx, False, 3))
    return call(ctx, values, indices)


def _indices_into_plane(ctx, indices, plane: int, dtype):
    """Indices as `dtype`, clamped into [0, plane): CANN reports an out-of-range index only
    asynchronously if at all (its ScatterElements/GatherElements would write or read out of
    bounds), so on the NPU such an index lands on the plane's nearest end instead -- a wrong
    value for an input that is wrong anyway, never memory corruption. Returns the value and
    the LoweringRuleContext updated for it."""
    aval = ctx.avals_in[1]
    new_aval = aval.update(dtype=np.dtype(dtype))
    value = indices
    if aval.dtype != new_aval.dtype:
        value = hlo.convert(_compat.ir_type(ctx, new_aval), value)
    value = hlo.clamp(mlir.ir_constant(np.array(0, dtype)), value,
                      mlir.ir_constant(np.array(plane - 1, dtype)))
    return value, ctx.replace(avals_in=[ctx.avals_in[0], new_aval, *ctx.avals_in[2:]])


def _plane_shape(shape, channels_last: bool, k: int) -> tuple[int, ...]:
    """`shape` with its k spatial dims as the plane of the 2-D ops: (W,) -> (1, W),
    (D, H, W) -> (D * H, W). Indices are flat positions in either, so it is the same
    data: a reshape that XLA compiles to a bitcast."""
    s = _args.spatial_axis(len(shape), channels_last, k)
    spatial = shape[s:s + k]
    return (*shape[:s], math.prod(spatial[:-1]), spatial[-1], *shape[s + k:])


def _on_planes(lowering_2d, ctx, values, indices, channels_last: bool, k: int):
    """`lowering_2d` of a 2-D aclnn call on operands and result of spatial rank k viewed
    as 2-D planes."""
    def plane_aval(aval):
        return core.ShapedArray(_plane_shape(aval.shape, channels_last, k), aval.dtype)

    def reshape(value, aval, new_aval):  # lax's: a symbolic N (jax.export) needs it
        rule = mlir.lower_fun(lambda v: jax.lax.reshape(v, new_aval.shape),
                              multiple_results=False)
        (out,) = rule(ctx.replace(avals_in=[aval], avals_out=[new_aval]), value)
        return out

    avals_in = [plane_aval(a) for a in ctx.avals_in]
    plane_ctx = ctx.replace(avals_in=avals_in, avals_out=[plane_aval(ctx.avals_out[0])])
    (out,) = lowering_2d(plane_ctx, reshape(values, ctx.avals_in[0], avals_in[0]),
                         reshape(indices, ctx.avals_in[1], avals_in[1]),
                         channels_last=channels_last)
    return [reshape(out, plane_ctx.avals_out[0], ctx.avals_out[0])]


def _forward(ctx, x, indices, output_size, channels_last):
    """aclnnMaxUnpool2d, or aclnnMaxUnpool3d for an NCDHW output_size of 3 sizes."""
    if not _aclnn_takes(ctx.avals_in[0].shape, output_size, channels_last):
        return _forward_reference(ctx, x, indices, output_size=output_size,
                                  channels_last=channels_last)
    # int64 always: aclnnMaxUnpool2d took INT64 indices only before CANN 8.0.0, and the
    # conversion is cheap next to the scatter.
    indices, ctx = _indices_into_plane(ctx, indices, math.prod(output_size), np.int64)
    if len(output_size) == 3:
        return _aclnn_volume_call(MAX_UNPOOL3D_TARGET, ctx, x, indices)
    # outputSize is read from the result's shape by the handler: one source of truth.
    return _aclnn_forward(ctx, x, indices, channels_last=channels_last)


def _on_2d_ops(k: int, channels_last: bool, op_3d: str) -> bool:
    """Whether rank k runs on the 2-D ops' view: 1-D as (N, C, 1, W), and NDHWC as
    (N, D * H, W, C) -- aclnnMaxUnpool3d(Backward) want a contiguous NCDHW out
    (CheckOutContiguous), which a channels-last buffer is not, while the 2-D ops honour
    strides -- and NCDHW as (N, C, D * H, W) with a CANN that lacks `op_3d` (it predates
    the 3-D ops)."""
    return k == 1 or (k == 3 and (channels_last or op_3d not in _jax_unpool.cann_ops()))


def _symbolic_planes(ctx, channels_last: bool, k: int) -> bool:
    """Whether a spatial dim is symbolic (jax.export): the handlers would take it (they read
    sizes from the buffers), but clamping the indices into the plane needs its size here.
    Symbolic N and C are fine."""
    s = _args.spatial_axis(ctx.avals_out[0].ndim, channels_last, k)
    return any(jax.export.is_symbolic_dim(d)
               for a in (*ctx.avals_in, *ctx.avals_out) for d in a.shape[s:s + k])


def _max_unpool2d_aclnn_lowering(ctx, x, indices, *, output_size, channels_last):
    k = len(output_size)
    if _symbolic_planes(ctx, channels_last, k):
        return _forward_reference(ctx, x, indices, output_size=output_size,
                                  channels_last=channels_last)
    on_2d = _on_2d_ops(k, channels_last, "max_unpool3d")
    if (on_2d or k == 2) and "max_unpool2d" not in _jax_unpool.cann_ops():
        # An op library without the forward op (the backwards are required; see register).
        return _forward_reference(ctx, x, indices, output_size=output_size,
                                  channels_last=channels_last)
    if on_2d:
        plane = (math.prod(output_size[:-1]), output_size[-1])
        return _on_planes(lambda c, a, b, channels_last: _forward(c, a, b, plane,
                                                                   channels_last),
                          ctx, x, indices, channels_last, k)
    return _forward(ctx, x, indices, output_size, channels_last)


def _backward(ctx, grad_output, indices, channels_last, k):
    """aclnnMaxUnpool2dBackward (k = 2), or aclnnMaxUnpool3dBackward (NCDHW, k = 3)."""
    g_shape, i_shape = ctx.avals_in[0].shape, ctx.avals_in[1].shape
    s = _args.spatial_axis(len(g_shape), channels_last, k)
    plane = math.prod(g_shape[s:s + k])
    # aclnn refuses empty dims; aclnnMaxUnpool3dBackward also a gradient volume smaller
    # than the input's (CheckIntArrayShapeMaxUnPool3D, shared with the forward).
    if not (all(d > 0 for d in (*g_shape, *i_shape))
            and (k == 2 or plane >= math.prod(i_shape[s:s + k]))):
        return _backward_reference(ctx, grad_output, indices, channels_last=channels_last,
                                   spatial_rank=k)
    if k == 3:  # int64 always: aclnnMaxUnpool3dBackward takes INT64 indices only
        indices, ctx = _indices_into_plane(ctx, indices, plane, np.int64)
        return _aclnn_volume_call(MAX_UNPOOL3D_BACKWARD_TARGET, ctx, grad_output, indices)
    indices, ctx = _indices_into_plane(ctx, indices, plane, ctx.avals_in[1].dtype)
    return _aclnn_backward(ctx, grad_output, indices, channels_last=channels_last)


def _max_unpool2d_backward_aclnn_lowering(ctx, grad_output, indices, *, channels_last,
                                          spatial_rank=2):
    k = spatial_rank
    if _symbolic_planes(ctx, channels_last, k):
        return _backward_reference(ctx, grad_output, indices, channels_last=channels_last,
                                   spatial_rank=k)
    if _on_2d_ops(k, channels_last, "max_unpool3d_backward"):
        return _on_planes(lambda c, g, i, channels_last: _backward(c, g, i, channels_last, 2),
                          ctx, grad_output, indices, channels_last, k)
    return _backward(ctx, grad_output, indices, channels_last, k)


# --------------------------------------------------------------------------------------
# The pools' forward
# --------------------------------------------------------------------------------------

_POOL_TARGETS = {2: MAX_POOL2D_TARGET, 3: MAX_POOL3D_TARGET}
# What aclnnMaxPool2dWithIndices and aclnnMaxPool3dWithArgmax take on every chip that has
# them (Atlas A2/A3, Ascend 950; hicann/ops-nn pooling/max_pool3d_with_argmax_v2/op_api).
_POOL_VALUE_DTYPES = frozenset(map(np.dtype, ("float16", jax.numpy.bfloat16, "float32")))
_INT32_MAX = 2**31 - 1


def _aclnn_pool_takes(x_aval, k: int, window: dict, channels_last: bool) -> bool:
    """Whether the pool of spatial rank k goes through aclnn: the loaded CANN has the op
    (1-D runs on the 2-D op's (N, C, 1, W) view) and it gives PyTorch's values and indices
    on every chip that has it -- values float16, bfloat16 or float32; dilation 1 (Atlas
    A2/A3 refuse any other, and the chip is unknown at trace time); padding at most half
    the kernel (PyTorch's rule, which CANN checks too); a plane or volume of at most
    INT_MAX positions (A2/A3 index it in int32); a non-empty x of known shape."""
    if not all(isinstance(d, int) for d in x_aval.shape):  # symbolic (jax.export)
        return False
    s = _args.spatial_axis(x_aval.ndim, channels_last, k)
    return (max(k, 2) in _jax_unpool.cann_pool_ranks()
            and np.dtype(x_aval.dtype) in _POOL_VALUE_DTYPES
            and all(d == 1 for d in window["dilation"])
            and all(p <= kk // 2 for p, kk in zip(window["padding"], window["kernel_size"]))
            and math.prod(x_aval.shape[s:s + k]) <= _INT32_MAX
            and math.prod(x_aval.shape) > 0)


def _aclnn_pool(ctx, x, k: int, window: dict, channels_last: bool):
    """The aclnn pool call: 1-D on the 2-D op's view of one-row planes (its indices are
    then w, as 1-D's); the 3-D op asked for int32 indices (Atlas A2/A3 take no other,
    exact: the volume has at most INT_MAX positions) converted to the requested dtype."""
    op_k = max(k, 2)
    x_aval, v_aval, i_aval = ctx.avals_in[0], *ctx.avals_out
    if k == 1:  # (N,) C, W -> (N,) C, 1, W; (N,) W, C -> (N,) 1, W, C
        def plane(aval):
            s = _args.spatial_axis(aval.ndim, channels_last, 1)
            return aval.update(shape=(*aval.shape[:s], 1, *aval.shape[s:]))

        x_call, v_call, i_call = plane(x_aval), plane(v_aval), plane(i_aval)
        # The added axis: kernel 1, stride 1, padding 0, dilation 1 -- an output row of 1.
        window = {**window, "kernel_size": (1, *window["kernel_size"]),
                  "stride": (1, *window["stride"]), "padding": (0, *window["padding"]),
                  "dilation": (1, *window["dilation"])}
        x = hlo.reshape(_compat.ir_type(ctx, x_call), x)
    else:
        x_call, v_call, i_call = x_aval, v_aval, i_aval
    if op_k == 3:
        i_call = i_call.update(dtype=np.dtype(np.int32))
    call_ctx = ctx.replace(avals_in=[x_call], avals_out=[v_call, i_call])
    call = jax.ffi.ffi_lowering(
        _POOL_TARGETS[op_k],
        extra_attributes=_sharding.call_attributes(call_ctx, channels_last, op_k))
    values, indices = call(
        call_ctx, x, ceil_mode=bool(window["ceil_mode"]), channels_last=bool(channels_last),
        **{n: np.asarray(window[n], np.int64)
           for n in ("kernel_size", "stride", "padding", "dilation")})
    if i_call.dtype != i_aval.dtype:
        indices = hlo.convert(_compat.ir_type(ctx, i_call.update(dtype=i_aval.dtype)),
                              indices)
    if k == 1:
        values = hlo.reshape(_compat.ir_type(ctx, v_aval), values)
        indices = hlo.reshape(_compat.ir_type(ctx, i_aval), indices)
    return [values, indices]


def pool_lowering(xla_lowering):
    """The NPU lowering rule of a max-pool-with-indices primitive (x -> values, indices of
    spatial rank k = len(kernel_size)): aclnnMaxPool2dWithIndices (1-D and 2-D) or
    aclnnMaxPool3dWithArgmax where they give PyTorch's result (`_aclnn_pool_takes`), else
    `xla_lowering`, the primitive's lowering in XLA ops, with the same arguments. The
    rule takes the window as the CPU pool target does -- kernel_size, stride, padding,
    dilation (k ints each), ceil_mode -- and channels_last; other parameters only go on to
    `xla_lowering`. The index dtype is the second result's."""
    def lowering(ctx, x, *, kernel_size, stride, padding, dilation, ceil_mode, channels_last,
                 **params):
        window = {"kernel_size": tuple(kernel_size), "stride": tuple(stride),
                  "padding": tuple(padding), "dilation": tuple(dilation),
                  "ceil_mode": ceil_mode}
        k = len(window["kernel_size"])
        if _aclnn_pools and _aclnn_pool_takes(ctx.avals_in[0], k, window, channels_last):
            return _aclnn_pool(ctx, x, k, window, channels_last)
        return xla_lowering(ctx, x, channels_last=channels_last, **window, **params)
    return lowering


# --------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------

# JAX platforms that are never an Ascend NPU: their devices would get CANN calls.
_NOT_ASCEND = frozenset({"gpu", "cuda", "rocm", "oneapi", "tpu"})


def _require_devices(platform: str) -> None:
    if platform in _NOT_ASCEND:
        raise RuntimeError(
            f"jax_unpool.npu.register: platform {platform!r} is not an Ascend NPU platform: "
            f"the aclnn kernels cannot run on its devices. Pass the platform name your "
            f"Ascend PJRT plugin registers, or platform='cpu' for the host-emulation mode.")
    try:
        # Also initialises the backends, and with them the plugin's FFI handler.
        jax.devices(platform)
    except RuntimeError as err:
        raise RuntimeError(
            f"jax_unpool.npu.register: platform {platform!r} has no devices in this process: "
            f"no PJRT plugin for it is loaded, or it found no device. Install and import the "
            f"JAX plugin for your Ascend NPU and pass the platform name it registers (none "
            f"is official today), or use platform='cpu' for the host-emulation mode. "
            f"({err})") from None


def _ffi_platforms(platform: str, ffi_platform: str | None) -> list[str]:
    """Where a plugin may take FFI targets: JAX's platform name and XLA's (upper case, as
    "CUDA" is for "cuda"), unless the caller names it."""
    if ffi_platform is not None:
        return [ffi_platform]
    return list(dict.fromkeys([platform, platform.upper()]))


def _register_lowerings(platform: str, forward, backward, pool) -> None:
    """`forward`, `backward` and `pool` as the lowerings of every rank's unpool, unpool
    backward and pool primitives on `platform`."""
    for p in _primitives.max_unpool_p.values():
        mlir.register_lowering(p, forward, platform=platform)
    for p in _primitives.max_unpool_backward_p.values():
        mlir.register_lowering(p, backward, platform=platform)
    for p in _pool_primitives.max_pool_p.values():
        mlir.register_lowering(p, pool, platform=platform)


def register(platform: str = "ascend", library_dir: str | os.PathLike | None = None, *,
             ffi_platform: str | None = None, aclnn_pools: bool = True) -> dict[str, str]:
    """Routes the unpool primitives of every rank to aclnn on `platform`.

    Loads CANN (see the module docstring for the search order), registers the FFI targets
    MAX_UNPOOL2D_TARGET, MAX_UNPOOL2D_BACKWARD_TARGET, MAX_UNPOOL3D_TARGET,
    MAX_UNPOOL3D_BACKWARD_TARGET, MAX_POOL2D_TARGET and MAX_POOL3D_TARGET with the
    platform's plugin and the primitives' lowerings for it. Returns where CANN was loaded
    from.

    The pools' forward goes through aclnnMaxPool2dWithIndices / aclnnMaxPool3dWithArgmax
    where the loaded CANN has them and they give PyTorch's result (see `pool_lowering`);
    `aclnn_pools=False` keeps the XLA ops for every pool (CANN's docs say the 2-D op on
    Atlas A2/A3 does not support NaN or -inf in its input).

    The targets go to every name among `platform` and `platform.upper()` under which the
    plugin installed its FFI handler (plugins that follow the CUDA plugin use XLA's
    upper-case name), or to `ffi_platform` when given.

    platform="cpu" is the host-emulation mode (testing): `library_dir` must name an
    emulated CANN; the handlers get host memory and no stream, and the CPU lowering of
    the primitives goes through them (the pools' as on an NPU) for the whole process until
    unregister_cpu_emulation(). jax's compilation caches are cleared on both transitions
    so that no program compiled before keeps the other lowering. A process serves one mode:
    a CANN loaded for the host emulation is never handed device memory, nor a CANN loaded
    for an NPU platform host memory.

    Supported chips, as CANN documents the ops (hicann/ops-nn
    index/*/docs/aclnnMaxUnpool*.md): Atlas A2/A3 and Ascend 950 have all four;
    the Atlas training series (910) only aclnnMaxUnpool2dBackward and
    aclnnMaxUnpool3dBackward; the Atlas inference series (310P) and Atlas 200I/500 A2
    none. The chip is not checked (nor do the ops check it): elsewhere the call is made
    and a failing status is a run-time error. If the op library has no aclnnMaxUnpool2d
    entry points, a RuntimeWarning says so and the forward unpools lower to the jnp
    reference (channels-first 3-D to aclnnMaxUnpool3d if present); the backwards run
    aclnn.

    Raises TypeError for a `platform` or `ffi_platform` that is not a non-empty str, a
    `library_dir` that is not None, a str or a str os.PathLike (bytes are refused), or an
    `aclnn_pools` that is not a bool; ValueError
    for platform="cpu" without library_dir; RuntimeError if `platform`
    is a GPU/TPU platform or has no devices, if its plugin installed no FFI handler under
    any of the names, if CANN cannot be loaded (the message lists every path tried and
    the environment variables consulted), or if it is loaded in this process in the other
    mode.
    """
    global _cpu_emulation, _aclnn_pools
    _check_arguments(platform, ffi_platform, aclnn_pools)
    directory = _library_dir(library_dir)
    host = platform == "cpu"
    if host and library_dir is None:
        raise ValueError(
            "jax_unpool.npu.register: platform='cpu' (the host-emulation mode) needs "
            "library_dir, the directory of an emulated CANN such as tests/fake_cann's "
            "build; got None. A real CANN found through the environment would be handed "
            "host memory as device memory.")
    with _lock:
        _require_devices(platform)
        names = _ffi_platforms(platform, ffi_platform)
        targets = _compat.platforms_with_ffi_handler(names)
        if not targets:
            raise RuntimeError(
                f"jax_unpool.npu.register: the PJRT plugin of platform {platform!r} has "
                f"installed no FFI handler under {' or '.join(map(repr, names))}, so the "
                f"aclnn targets would never reach it. Pass ffi_platform=<the XLA platform "
                f"name the plugin gives xla_client.register_custom_call_handler>.")
        where = dict(_jax_unpool.load_cann(directory, host))
        if "max_unpool2d" not in _jax_unpool.cann_ops():
            warnings.warn(
                f"jax_unpool.npu.register: the CANN op library {where['opapi']} has no "
                f"aclnnMaxUnpool2d, so on platform {platform!r} the forward unpools run the "
                f"jnp reference (XLA's scatter; channels-first 3-D runs aclnnMaxUnpool3d if "
                f"present); the backwards run aclnn.", RuntimeWarning, stacklevel=2)
        if platform not in _targets_registered:
            capsules = _jax_unpool.npu_registrations()
            suffix = "_host" if host else ""
            for op, target in (("max_unpool2d", MAX_UNPOOL2D_TARGET),
                               ("max_unpool2d_backward", MAX_UNPOOL2D_BACKWARD_TARGET),
                               ("max_unpool3d", MAX_UNPOOL3D_TARGET),
                               ("max_unpool3d_backward", MAX_UNPOOL3D_BACKWARD_TARGET),
                               ("max_pool2d", MAX_POOL2D_TARGET),
                               ("max_pool3d", MAX_POOL3D_TARGET)):
                for name in targets:
                    jax.ffi.register_ffi_target(target, capsules[op + suffix], platform=name)
                if not _targets_registered:  # platform-independent, once per target
                    jax.ffi.register_ffi_target_as_batch_partitionable(target)
            _targets_registered.add(platform)
        _register_lowerings(platform,
                            _primitives.forward_lowering(_max_unpool2d_aclnn_lowering),
                            _primitives.backward_lowering(
                                _max_unpool2d_backward_aclnn_lowering),
                            pool_lowering(_pool_primitives.xla_lowering))
        _aclnn_pools = bool(aclnn_pools)
        if host:
            _cpu_emulation = True
            jax.clear_caches()
    return where


def unregister_cpu_emulation() -> None:
    """Ends the host-emulation mode: the primitives lower to the CPU FFI kernels again.
    A no-op when the mode is off."""
    global _cpu_emulation
    with _lock:
        if not _cpu_emulation:
            return
        _register_lowerings("cpu", _primitives._forward_cpu_lowering,
                            _primitives._backward_cpu_lowering, _pool_primitives.cpu_lowering)
        _cpu_emulation = False
        jax.clear_caches()


@contextlib.contextmanager
def cpu_emulation(library_dir: str | os.PathLike) -> Iterator[dict[str, str]]:
    """Host-emulation mode, against the emulated CANN in `library_dir`, for the duration of
    a `with` block; on exit the mode is left as it was found (off, unless it was on before).
    Yields where CANN was loaded from."""
    was_on = _cpu_emulation
    where = register("cpu", library_dir)
    try:
        yield where
    finally:
        if not was_on:
            unregister_cpu_emulation()


def cpu_emulation_active() -> bool:
    """Whether the CPU lowering currently goes through the aclnn handlers."""
    return _cpu_emulation
