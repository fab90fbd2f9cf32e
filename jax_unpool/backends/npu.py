"""The Ascend NPU backend: lowerings of the primitives to the aclnn handlers of ffi/npu/
(CANN's aclnnMaxUnpool2d/3d and their backwards, aclnnMaxPool2dWithIndices and
aclnnMaxPool3dWithArgmax). Nothing is registered on import: `jax_unpool.npu.register`
loads CANN, registers the targets with the platform's plugin and installs `lowerings(...)`
for the platform through the registry. What the routing depends on -- the ops the loaded
CANN has and CANN documents for the chip (`npu_chips`), which pools go to aclnn -- is read
there once and captured in the rules (`Routing`); jax_unpool.npu's docstring says what
each op runs on.

Indices: CANN's unpool ops do not range-check them, so the handlers make every index they
hand CANN safe themselves (ffi/npu/index_safety.h): on a device the default targets clamp
them into the plane there, and the ``*_checked_v1`` targets, which serve the unpool
primitives' ``check_indices=True``, fail the call with the CPU kernels' OUT_OF_RANGE
message instead, at the cost of a stream synchronisation per call.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import numpy as np
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir
from jax.sharding import NamedSharding, PartitionSpec

from jax_unpool import _compat, _geometry, _sharding
from jax_unpool.backends import custom_call, registry

# Stable and versioned, like the CPU targets: jax.export artifacts record them.
MAX_UNPOOL2D_TARGET = "jax_unpool_aclnn_max_unpool2d_v1"
MAX_UNPOOL2D_BACKWARD_TARGET = "jax_unpool_aclnn_max_unpool2d_backward_v1"
# aclnnMaxUnpool3d(Backward): channels-first (C, D, H, W) or (N, C, D, H, W), no attributes.
MAX_UNPOOL3D_TARGET = "jax_unpool_aclnn_max_unpool3d_v1"
MAX_UNPOOL3D_BACKWARD_TARGET = "jax_unpool_aclnn_max_unpool3d_backward_v1"
# aclnnMaxPool2dWithIndices / aclnnMaxPool3dWithArgmax: x -> (values, indices), attributes
# kernel_size, stride, padding, dilation (int64 arrays of 2 or 3), ceil_mode, channels_last.
MAX_POOL2D_TARGET = "jax_unpool_aclnn_max_pool2d_with_indices_v1"
MAX_POOL3D_TARGET = "jax_unpool_aclnn_max_pool3d_with_argmax_v1"
# The unpool targets' calling conventions, with indices checked instead of clamped on a
# device (JAX_UNPOOL_NPU_CHECK_INDICES=1).
MAX_UNPOOL2D_CHECKED_TARGET = "jax_unpool_aclnn_max_unpool2d_checked_v1"
MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET = "jax_unpool_aclnn_max_unpool2d_backward_checked_v1"
MAX_UNPOOL3D_CHECKED_TARGET = "jax_unpool_aclnn_max_unpool3d_checked_v1"
MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET = "jax_unpool_aclnn_max_unpool3d_backward_checked_v1"
STABLE_TARGETS = (MAX_UNPOOL2D_TARGET, MAX_UNPOOL2D_BACKWARD_TARGET, MAX_UNPOOL3D_TARGET,
                  MAX_UNPOOL3D_BACKWARD_TARGET, MAX_POOL2D_TARGET, MAX_POOL3D_TARGET,
                  MAX_UNPOOL2D_CHECKED_TARGET, MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET,
                  MAX_UNPOOL3D_CHECKED_TARGET, MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET)
# The extension's names for the handlers (npu_registrations(); "_host" for host memory).
HANDLERS = {"max_unpool2d": MAX_UNPOOL2D_TARGET,
            "max_unpool2d_backward": MAX_UNPOOL2D_BACKWARD_TARGET,
            "max_unpool3d": MAX_UNPOOL3D_TARGET,
            "max_unpool3d_backward": MAX_UNPOOL3D_BACKWARD_TARGET,
            "max_unpool2d_checked": MAX_UNPOOL2D_CHECKED_TARGET,
            "max_unpool2d_backward_checked": MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET,
            "max_unpool3d_checked": MAX_UNPOOL3D_CHECKED_TARGET,
            "max_unpool3d_backward_checked": MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET,
            "max_pool2d": MAX_POOL2D_TARGET, "max_pool3d": MAX_POOL3D_TARGET}
class Routing(NamedTuple):
    """What the NPU rules route by, fixed when `register` installs them."""

    # The unpool ops that go to aclnn: the loaded CANN has their entry points (cann_ops())
    # and CANN documents them for the chip (npu_chips).
    ops: frozenset
    # (rank, value dtype) of the pools that go to aclnn: the op of that rank (2, 3) is in
    # the op library and on the chip, and the loaded CANN takes the dtype (float32, which
    # every version's doc lists; float16 and bfloat16 where its GetWorkspaceSize accepts
    # them: CANN 8.0.RC2's aclnnMaxPool2dWithIndices takes FLOAT only).
    pools: frozenset

    @property
    def pool_ranks(self) -> frozenset:
        return frozenset(k for k, _ in self.pools)


# --------------------------------------------------------------------------------------
# Lowerings
# --------------------------------------------------------------------------------------

def _aclnn_takes(x_shape, output_size, channels_last: bool) -> bool:
    """aclnnMaxUnpool2d/3d refuse empty C and spatial dims (and leave `out` unwritten for
    an empty x) and an output plane smaller than the input plane."""
    k = len(output_size)
    s = _geometry.spatial_axis(len(x_shape), channels_last, k)
    return all(d > 0 for d in x_shape) and math.prod(output_size) >= math.prod(x_shape[s:s + k])


def _forward_reference(ctx, *operands, **params):  # XLA's ops: aclnn refuses the shapes
    return registry.rule(None, "max_unpool")(ctx, *operands, **params)


def _backward_reference(ctx, *operands, **params):
    return registry.rule(None, "max_unpool_backward")(ctx, *operands, **params)


def _layout(k: int, channels_last: bool, window) -> tuple:
    return (("channels_last", channels_last),)  # the 2-D handlers: no spatial rank


# Channels-last calls are partitioned along N and C as the CPU targets' are
# (custom_call.unpool_lowering): each device runs aclnn on its own shard. By whether the
# indices are checked.
_aclnn_forward = {False: custom_call.unpool_lowering(MAX_UNPOOL2D_TARGET, _layout),
                  True: custom_call.unpool_lowering(MAX_UNPOOL2D_CHECKED_TARGET, _layout)}
_aclnn_backward = {
    False: custom_call.unpool_lowering(MAX_UNPOOL2D_BACKWARD_TARGET, _layout),
    True: custom_call.unpool_lowering(MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET, _layout)}
_VOLUME_TARGETS = {(True, False): MAX_UNPOOL3D_TARGET, (True, True): MAX_UNPOOL3D_CHECKED_TARGET,
                   (False, False): MAX_UNPOOL3D_BACKWARD_TARGET,
                   (False, True): MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET}  # (forward, checked)


def _aclnn_volume_call(target: str, ctx, values, indices):
    """A call of a 3-D aclnn target (NCDHW/CDHW buffers, no attributes)."""
    call = jax.ffi.ffi_lowering(target, extra_attributes=_sharding.call_attributes(ctx, False, 3))
    return call(ctx, values, indices)


def _indices_into_plane(ctx, indices, plane: int, dtype, checked: bool):
    """Indices as `dtype`, and unless `checked`, clamped into [0, plane): an index outside
    lands on the plane's nearest end -- a wrong value for an input that is wrong anyway,
    never an out-of-bounds access (CANN does not range-check). The default handlers clamp
    on the device too (direct calls skip this); here it costs nothing next to the
    conversion and keeps an exported program safe with any handler. `checked`: the values
    go as they are, for the checked handlers to refuse. Returns the value and the
    LoweringRuleContext updated for it."""
    aval = ctx.avals_in[1]
    new_aval = aval.update(dtype=np.dtype(dtype))
    value = indices
    if aval.dtype != new_aval.dtype:
        value = hlo.convert(_compat.ir_type(ctx, new_aval), value)
    if not checked:
        value = hlo.clamp(mlir.ir_constant(np.array(0, dtype)), value,
                          mlir.ir_constant(np.array(plane - 1, dtype)))
    return value, ctx.replace(avals_in=[ctx.avals_in[0], new_aval, *ctx.avals_in[2:]])


def _plane_shape(shape, channels_last: bool, k: int) -> tuple[int, ...]:
    """`shape` with its k spatial dims as the plane of the 2-D ops: (W,) -> (1, W),
    (D, H, W) -> (D * H, W). Indices are flat positions in either, so it is the same
    data: a reshape that XLA compiles to a bitcast."""
    s = _geometry.spatial_axis(len(shape), channels_last, k)
    spatial = shape[s:s + k]
    return (*shape[:s], math.prod(spatial[:-1]), spatial[-1], *shape[s + k:])


def _on_planes(lowering_2d, ctx, values, indices, channels_last: bool, k: int):
    """`lowering_2d` of a 2-D aclnn call on operands and result of spatial rank k viewed
    as 2-D planes."""
    def plane_aval(aval):
        return jax.core.ShapedArray(_plane_shape(aval.shape, channels_last, k), aval.dtype)

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


def _forward(ctx, x, indices, output_size, channels_last, checked):
    """aclnnMaxUnpool2d, or aclnnMaxUnpool3d for an NCDHW output_size of 3 sizes."""
    if not _aclnn_takes(ctx.avals_in[0].shape, output_size, channels_last):
        return _forward_reference(ctx, x, indices, output_size=output_size,
                                  channels_last=channels_last)
    # int64 always: aclnnMaxUnpool2d took INT64 indices only before CANN 8.0.0, and the
    # conversion is cheap next to the scatter.
    indices, ctx = _indices_into_plane(ctx, indices, math.prod(output_size), np.int64, checked)
    if len(output_size) == 3:
        return _aclnn_volume_call(_VOLUME_TARGETS[True, checked], ctx, x, indices)
    # The handler reads outputSize from the result's shape; the per-shard call (NHWC on
    # several devices) needs it to shape each shard's result.
    return _aclnn_forward[checked](ctx, x, indices, channels_last=channels_last,
                                   output_size=tuple(output_size))


def _on_2d_ops(routing: Routing, k: int, channels_last: bool, op_3d: str) -> bool:
    """Whether rank k runs on the 2-D ops' view: 1-D as (N, C, 1, W), and NDHWC as
    (N, D * H, W, C) -- aclnnMaxUnpool3d(Backward) want a contiguous NCDHW out
    (CheckOutContiguous), which a channels-last buffer is not, while the 2-D ops honour
    strides -- and NCDHW as (N, C, D * H, W) with a CANN that lacks `op_3d` (it predates
    the 3-D ops)."""
    return k == 1 or (k == 3 and (channels_last or op_3d not in routing.ops))


def _symbolic_planes(ctx, channels_last: bool, k: int) -> bool:
    """Whether a spatial dim is symbolic (jax.export): the handlers would take it (they read
    sizes from the buffers), but clamping the indices into the plane needs its size here.
    Symbolic N and C are fine."""
    s = _geometry.spatial_axis(ctx.avals_out[0].ndim, channels_last, k)
    return any(jax.export.is_symbolic_dim(d)
               for a in (*ctx.avals_in, *ctx.avals_out) for d in a.shape[s:s + k])


def _max_unpool(routing: Routing, ctx, x, indices, *, output_size, channels_last, window,
                check_indices):
    k = len(output_size)
    if _symbolic_planes(ctx, channels_last, k):
        return _forward_reference(ctx, x, indices, output_size=output_size,
                                  channels_last=channels_last)
    on_2d = _on_2d_ops(routing, k, channels_last, "max_unpool3d")
    if (on_2d or k == 2) and "max_unpool2d" not in routing.ops:
        # An op library or a chip without the forward op.
        return _forward_reference(ctx, x, indices, output_size=output_size,
                                  channels_last=channels_last)
    if on_2d:
        plane = (math.prod(output_size[:-1]), output_size[-1])
        return _on_planes(lambda c, a, b, channels_last: _forward(c, a, b, plane,
                                                                   channels_last, check_indices),
                          ctx, x, indices, channels_last, k)
    return _forward(ctx, x, indices, output_size, channels_last, check_indices)


def _backward(ctx, grad_output, indices, channels_last, k, checked):
    """aclnnMaxUnpool2dBackward (k = 2), or aclnnMaxUnpool3dBackward (NCDHW, k = 3)."""
    g_shape, i_shape = ctx.avals_in[0].shape, ctx.avals_in[1].shape
    s = _geometry.spatial_axis(len(g_shape), channels_last, k)
    plane = math.prod(g_shape[s:s + k])
    # aclnn refuses empty dims; aclnnMaxUnpool3dBackward also a gradient volume smaller
    # than the input's (CheckIntArrayShapeMaxUnPool3D, shared with the forward).
    if not (all(d > 0 for d in (*g_shape, *i_shape))
            and (k == 2 or plane >= math.prod(i_shape[s:s + k]))):
        return _backward_reference(ctx, grad_output, indices, channels_last=channels_last,
                                   spatial_rank=k)
    if k == 3:  # int64 always: aclnnMaxUnpool3dBackward takes INT64 indices only
        indices, ctx = _indices_into_plane(ctx, indices, plane, np.int64, checked)
        return _aclnn_volume_call(_VOLUME_TARGETS[False, checked], ctx, grad_output, indices)
    indices, ctx = _indices_into_plane(ctx, indices, plane, ctx.avals_in[1].dtype, checked)
    return _aclnn_backward[checked](ctx, grad_output, indices, channels_last=channels_last)


def _max_unpool_backward(routing: Routing, ctx, grad_output, indices, *, channels_last,
                         spatial_rank, window, check_indices):
    k = spatial_rank
    if _symbolic_planes(ctx, channels_last, k):
        return _backward_reference(ctx, grad_output, indices, channels_last=channels_last,
                                   spatial_rank=k)
    on_2d = _on_2d_ops(routing, k, channels_last, "max_unpool3d_backward")
    if (on_2d or k == 2) and "max_unpool2d_backward" not in routing.ops:  # a chip without it
        return _backward_reference(ctx, grad_output, indices, channels_last=channels_last,
                                   spatial_rank=k)
    if on_2d:
        return _on_planes(lambda c, g, i, channels_last: _backward(c, g, i, channels_last, 2,
                                                                   check_indices),
                          ctx, grad_output, indices, channels_last, k)
    return _backward(ctx, grad_output, indices, channels_last, k, check_indices)


# --------------------------------------------------------------------------------------
# The pools' forward
# --------------------------------------------------------------------------------------

_POOL_TARGETS = {2: MAX_POOL2D_TARGET, 3: MAX_POOL3D_TARGET}
_INT32_MAX = 2**31 - 1


def _aclnn_pool_takes(routing: Routing, x_aval, k: int, window: dict,
                      channels_last: bool) -> bool:
    """Whether the pool of spatial rank k goes through aclnn: the routing sends that op
    and x's dtype there -- the op library has the op, the chip does, the loaded CANN takes
    the dtype (1-D runs on the 2-D op's (N, C, 1, W) view) -- and it gives PyTorch's values
    and indices for finite input on every chip that has it (on Atlas A2/A3 CANN does not
    support NaN or -inf input to either op: the 2-D op's doc says so, and the 3-D op runs
    the same kernel): dilation 1 (Atlas A2/A3 refuse any other; what the 950's kernels give
    for more is unverified); padding at most half the kernel (PyTorch's rule, which CANN
    checks too); a plane or volume of at most INT_MAX positions (A2/A3 index it in int32);
    a non-empty x of known shape."""
    if not all(isinstance(d, int) for d in x_aval.shape):  # symbolic (jax.export)
        return False
    s = _geometry.spatial_axis(x_aval.ndim, channels_last, k)
    return ((max(k, 2), np.dtype(x_aval.dtype)) in routing.pools
            and all(d == 1 for d in window["dilation"])
            and all(p <= kk // 2 for p, kk in zip(window["padding"], window["kernel_size"]))
            and math.prod(x_aval.shape[s:s + k]) <= _INT32_MAX
            and math.prod(x_aval.shape) > 0)


def _aclnn_pool(ctx, x, k: int, window: dict, channels_last: bool):
    """The aclnn pool call: 1-D on the 2-D op's view of one-row planes (its indices are
    then w, as 1-D's); both ops asked for int32 indices (the 3-D op takes no other on
    Atlas A2/A3, nor the 2-D op in CANN 8.0.RC2; exact: a plane or volume has at most
    INT_MAX positions) widened to the requested dtype. Channels-last calls are partitioned
    along N and C (custom_call.pool_lowering)."""
    op_k = max(k, 2)
    x_aval, v_aval, i_aval = ctx.avals_in[0], *ctx.avals_out
    if k == 1:  # (N,) C, W -> (N,) C, 1, W; (N,) W, C -> (N,) 1, W, C
        def plane(aval):
            # The new axis is whole; the others keep their sharding (spec entries move along).
            s = _geometry.spatial_axis(aval.ndim, channels_last, 1)
            spec = [*aval.sharding.spec, *[None] * (aval.ndim - len(aval.sharding.spec))]
            return aval.update(shape=(*aval.shape[:s], 1, *aval.shape[s:]),
                               sharding=NamedSharding(aval.sharding.mesh,
                                                      PartitionSpec(*spec[:s], None,
                                                                    *spec[s:])))

        x_call, v_call, i_call = plane(x_aval), plane(v_aval), plane(i_aval)
        # The added axis: kernel 1, stride 1, padding 0, dilation 1 -- an output row of 1.
        window = {**window, "kernel_size": (1, *window["kernel_size"]),
                  "stride": (1, *window["stride"]), "padding": (0, *window["padding"]),
                  "dilation": (1, *window["dilation"])}
        x = hlo.reshape(_compat.ir_type(ctx, x_call), x)
    else:
        x_call, v_call, i_call = x_aval, v_aval, i_aval
    i_call = i_call.update(dtype=np.dtype(np.int32))
    call_ctx = ctx.replace(avals_in=[x_call], avals_out=[v_call, i_call])
    values, indices = custom_call.pool_lowering(_POOL_TARGETS[op_k])(
        call_ctx, x, channels_last=channels_last, index_dtype=np.int32, **window)
    if i_call.dtype != i_aval.dtype:
        indices = hlo.convert(_compat.ir_type(ctx, i_call.update(dtype=i_aval.dtype)),
                              indices)
    if k == 1:
        values = hlo.reshape(_compat.ir_type(ctx, v_aval), values)
        indices = hlo.reshape(_compat.ir_type(ctx, i_aval), indices)
    return [values, indices]


def pool_lowering(routing: Routing, xla_lowering):
    """The NPU lowering rule of a max-pool-with-indices primitive (x -> values, indices of
    spatial rank k = len(kernel_size)): aclnnMaxPool2dWithIndices (1-D and 2-D) or
    aclnnMaxPool3dWithArgmax where they give PyTorch's result for finite input
    (`_aclnn_pool_takes`; CANN does not support NaN or -inf input to them on Atlas A2/A3),
    else `xla_lowering`, the primitive's lowering in XLA ops, with the same arguments. The rule takes the window as the CPU pool target does --
    kernel_size, stride, padding, dilation (k ints each), ceil_mode -- and channels_last;
    other parameters only go on to `xla_lowering`. The index dtype is the second
    result's."""
    def lowering(ctx, x, *, kernel_size, stride, padding, dilation, ceil_mode, channels_last,
                 **params):
        window = {"kernel_size": tuple(kernel_size), "stride": tuple(stride),
                  "padding": tuple(padding), "dilation": tuple(dilation),
                  "ceil_mode": ceil_mode}
        k = len(window["kernel_size"])
        # Window offsets: XLA's ops write them directly (aclnn gives flat indices).
        if (params.get("index_format", "flat") == "flat"
                and _aclnn_pool_takes(routing, ctx.avals_in[0], k, window, channels_last)):
            return _aclnn_pool(ctx, x, k, window, channels_last)
        return xla_lowering(ctx, x, channels_last=channels_last, **window, **params)
    return lowering



def lowerings(routing: Routing) -> dict[str, registry.Lowering]:
    """The NPU lowerings of the three operations, routed by `routing`."""
    dtypes = {k: sorted(np.dtype(d).name for r, d in routing.pools if r == k)
              for k in sorted(routing.pool_ranks)}
    pools = (f"aclnn pool ops for ranks and dtypes {dtypes}, XLA ops otherwise"
             if routing.pools else "XLA ops (no aclnn pool op used)")

    def runs(ops: str, names: tuple) -> str:
        return ops if routing.ops & set(names) else "XLA ops (no aclnn op used)"

    # Window offsets become flat indices on the device (XLA's ops, on its stream) first.
    unpool = registry.flat_indices_first(partial(_max_unpool, routing))
    gather = registry.flat_indices_first(partial(_max_unpool_backward, routing))
    derivative = registry.pool_derivative(gather, unpool)
    return {
        "max_unpool": registry.Lowering(
            unpool, "npu", runs("aclnnMaxUnpool2d/3d", ("max_unpool2d", "max_unpool3d"))),
        "max_unpool_backward": registry.Lowering(
            gather, "npu", runs("aclnnMaxUnpool2d/3dBackward", ("max_unpool2d_backward",
                                                                 "max_unpool3d_backward"))),
        "max_pool": registry.Lowering(pool_lowering(routing, registry.rule(None, "max_pool")),
                                      "npu", pools),
        "max_pool_gather": registry.Lowering(
            derivative["max_pool_gather"], "npu",
            runs("aclnnMaxUnpool2d/3dBackward where the argmaxes are in their windows",
                 ("max_unpool2d_backward", "max_unpool3d_backward"))),
        "max_pool_scatter_add": registry.Lowering(
            derivative["max_pool_scatter_add"], "npu",
            runs("aclnnMaxUnpool2d/3d where windows cannot share an argmax",
                 ("max_unpool2d", "max_unpool3d"))),
    }
