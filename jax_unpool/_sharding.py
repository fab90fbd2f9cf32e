"""How the two primitives behave on several devices.

Each plane (one (n, c) pair) is unpooled or gathered on its own, so the dims that
address planes -- N and C -- can be split across devices with no communication; the
spatial dims (W; H, W; D, H, W) cannot, because an index addresses a whole output plane.

- Types (abstract evaluation): the result's sharding on an explicit mesh follows the
  operands' plane dims, and its varying manual axes (`shard_map`) are the union of the
  operands'. As jax's own ops do, `bind` first casts every operand to that union
  (`pcast(..., to="varying")`), so that the transpose of a replicated `x` used with
  varying indices sums its cotangent over the devices.
- Partitioning (CPU lowering): the FFI call is marked batch-partitionable over its
  leading plane dims (`num_batch_dims`), and carries the matching Shardy sharding rule,
  so XLA runs the kernel on each device's shard instead of gathering the operands.
  XLA's batch partitioner only splits leading dims, and NHWC keeps C last, so a
  channels-last call goes through `jax.experimental.custom_partitioning` instead: its
  rule shares N and C between operands and result, and each device calls the kernel on
  its own NHWC shard (the kernel reads N and C from the buffers it gets). An exported
  function keeps the batch-partitionable call: a custom_partitioning callback lives in
  the process that traced it and cannot be serialized.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import jax
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend import core
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import sdy
from jax.interpreters import mlir
from jax.sharding import NamedSharding, PartitionSpec

from jax_unpool import _args, _compat


def plane_dims(ndim: int, channels_last: bool, k: int) -> tuple[int, ...]:
    """Positions of N and C (or C alone when unbatched) in a shape of spatial rank k."""
    s = _args.spatial_axis(ndim, channels_last, k)
    return tuple(d for d in range(ndim) if not s <= d < s + k)


def leading_batch_dims(ndim: int, channels_last: bool, k: int) -> int:
    """How many leading dims are plane dims: the batch dims of the partitioned call."""
    return _args.spatial_axis(ndim, channels_last, k)


# --------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------

class Primitive(core.Primitive):
    """A primitive whose operands vary over the same manual axes when it is bound, and
    whose lowering sees the devices (custom_partitioning needs them; see below).
    `check_params(**params)` runs first at every bind: before jax's caches, which hold
    2.0 equal to 2 and 1 equal to True, so that a bad parameter fails the same way every
    time."""

    def __init__(self, name: str, check_params: Callable[..., object]):
        super().__init__(name)
        self._check_params = check_params
        _compat.require_devices_during_lowering(self)

    def bind(self, *args, **params):
        self._check_params(**params)
        return super().bind(*_vary_to_union(args), **params)


def _vary_to_union(args):
    varying = [_compat.varying_axes(jax.typeof(a)) for a in args]
    union = frozenset().union(*varying)
    return [a if v == union else _compat.cast_to_varying(a, tuple(union - v))
            for a, v in zip(args, varying)]


def _mesh_of(avals):
    meshes = {a.sharding.mesh for a in avals if not a.sharding.mesh.empty}
    return meshes.pop() if len(meshes) == 1 else avals[0].sharding.mesh


def _merge_entry(fn, dim, entries):
    named = {e for e in entries if e is not None}
    if len(named) > 1:
        raise ValueError(
            f"{fn}: the operands are sharded differently along dim {dim}: "
            f"{sorted(map(str, named))}; reshard one of them to match the other")
    return named.pop() if named else None


def _axes_size(mesh, entry) -> int:
    names = entry if isinstance(entry, tuple) else (entry,)
    return math.prod(mesh.shape[name] for name in names)


def result_type(fn: str, operand, others, shape, dtype, channels_last: bool, k: int):
    """The result's aval: `operand`'s, with `shape` and `dtype`, a sharding that splits
    the plane dims (N, C) as the operands do, and the union of the operands' varying
    manual axes.

    `operand` lends its spatial dims' sharding when `shape` keeps them divisible;
    otherwise they are replicated. Operands split differently along a plane dim are a
    ValueError naming `fn`.
    """
    avals = (operand, *others)
    mesh = _mesh_of(avals)
    spec = [None] * len(shape)
    for d in plane_dims(len(shape), channels_last, k):
        spec[d] = _merge_entry(fn, d, [a.sharding.spec[d] if d < len(a.sharding.spec)
                                       else None for a in avals])
    s = _args.spatial_axis(len(shape), channels_last, k)
    for d in range(s, s + k):
        entry = operand.sharding.spec[d] if d < len(operand.sharding.spec) else None
        if entry is not None and shape[d] % _axes_size(mesh, entry) == 0:
            spec[d] = entry
    varying = frozenset().union(*(_compat.varying_axes(a) for a in avals))
    return operand.update(shape=shape, dtype=dtype, weak_type=False,
                          sharding=NamedSharding(mesh, PartitionSpec(*spec)),
                          **_compat.with_varying(operand, varying))


# --------------------------------------------------------------------------------------
# Partitioning
# --------------------------------------------------------------------------------------

def _sharding_rule(avals_in, avals_out, num_batch_dims: int):
    """Shardy rule: the leading batch dims are factors shared by every operand and the
    result; every other dim is a factor of its own that must be replicated."""
    sizes = list(avals_out[0].shape[:num_batch_dims])
    mappings = []
    for aval in (*avals_in, *avals_out):
        factors = list(range(num_batch_dims))
        for size in aval.shape[num_batch_dims:]:
            factors.append(len(sizes))
            sizes.append(size)
        mappings.append(sdy.TensorMappingAttr.get(dim_mappings=[
            sdy.DimMappingAttr.get(factor_indices=[f]) for f in factors]))
    return sdy.OpShardingRuleAttr.get(
        factor_sizes=sizes,
        operand_mappings=mappings[:len(avals_in)],
        result_mappings=mappings[len(avals_in):],
        need_replication_factors=list(range(num_batch_dims, len(sizes))),
        is_custom=True)


def call_attributes(ctx, channels_last: bool, k: int) -> dict | None:
    """Extra attributes for the FFI custom call that let XLA partition it along the
    leading plane dims; None when there are none, or the shapes are symbolic."""
    avals = (*ctx.avals_in, *ctx.avals_out)
    num_batch_dims = leading_batch_dims(ctx.avals_out[0].ndim, channels_last, k)
    if num_batch_dims == 0 or not all(isinstance(d, int) for a in avals for d in a.shape):
        return None
    attributes = {"mhlo.frontend_attributes":
                  ir.DictAttr.get({"num_batch_dims": ir.StringAttr.get(str(num_batch_dims))})}
    if jax.config.jax_use_shardy_partitioner:
        attributes["sdy.sharding_rule"] = _sharding_rule(ctx.avals_in, ctx.avals_out,
                                                         num_batch_dims)
    return attributes


def _rule(target, k, output_size, mesh, operand_types, result_types):
    """NHWC/HWC (any spatial rank k): every dim before the spatial ones is N, C is last.
    The spatial dims of the small operands (h*) and of the plane (p*) must be whole on
    each device."""
    small = [f"h{d}" for d in range(k)]
    plane = [f"p{d}" for d in range(k)]
    if output_size is None:  # (grad_output, indices) -> out
        first, second, result = plane, small, small
    else:  # (x, indices) -> out
        first, second, result = small, small, plane
    rule = (f"... {' '.join(first)} c, ... {' '.join(second)} c -> "
            f"... {' '.join(result)} c")
    # Listed in order of appearance, as Shardy requires.
    return rule, {"need_replication_factors": (*first, *(f for f in result if f not in first))}


def _kernel(target: str, k: int, output_size, x, indices):
    """The FFI call on channels-last operands as they come: whole arrays, or one device's
    shard when `_per_shard_kernel` is partitioned. `output_size` is None for the
    backward, whose result has the indices' shape."""
    shape = (indices.shape if output_size is None
             else (*x.shape[:-k - 1], *output_size, x.shape[-1]))
    return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(shape, x.dtype))(
        x, indices, channels_last=True, spatial_rank=k)


def _plane_sharding(mesh, sharding, ndim: int, k: int) -> NamedSharding:
    """`sharding`'s N and C entries, with the k spatial dims whole."""
    spec = list(sharding.spec) + [None] * (ndim - len(sharding.spec))
    for d in range(ndim - 1 - k, ndim - 1):
        spec[d] = None
    return NamedSharding(mesh, PartitionSpec(*spec))


def _partition(target, k, output_size, mesh, arg_shapes, result_shape):
    # Operands and result have the same rank and plane dims: one sharding for all.
    sharding = _plane_sharding(mesh, result_shape.sharding, len(result_shape.shape), k)
    return mesh, partial(_kernel, target, k, output_size), sharding, (sharding, sharding)


def _infer_sharding(target, k, output_size, mesh, arg_shapes, result_shape):
    # GSPMD only (Shardy uses the rule): the indices always have the plane dims.
    return _plane_sharding(mesh, arg_shapes[1].sharding, len(result_shape.shape), k)


_per_shard_kernel = custom_partitioning(_kernel, static_argnums=(0, 1, 2))
_per_shard_kernel.def_partition(_partition, infer_sharding_from_operands=_infer_sharding,
                                sharding_rule=_rule)


# The pool (x -> values, indices), channels last: the same split, one operand and two
# results. `window` is the FFI call's attributes as a hashable tuple of (name, value).

def _pool_rule(target, k, window, out_size, index_dtype, mesh, operand_types, result_types):
    small = " ".join(f"o{d}" for d in range(k))
    rule = f"... {' '.join(f'i{d}' for d in range(k))} c -> ... {small} c, ... {small} c"
    return rule, {"need_replication_factors": (*(f"i{d}" for d in range(k)),
                                               *(f"o{d}" for d in range(k)))}


def _pool_kernel(target: str, k: int, window, out_size, index_dtype, x):
    shape = (*x.shape[:-k - 1], *out_size, x.shape[-1])
    attributes = {name: np.asarray(v, np.int64) if isinstance(v, tuple) else v
                  for name, v in window}
    return jax.ffi.ffi_call(target, (jax.ShapeDtypeStruct(shape, x.dtype),
                                     jax.ShapeDtypeStruct(shape, index_dtype)))(
        x, channels_last=True, **attributes)


def _pool_partition(target, k, window, out_size, index_dtype, mesh, arg_shapes,
                    result_shapes):
    sharding = _plane_sharding(mesh, result_shapes[0].sharding, len(result_shapes[0].shape), k)
    kernel = partial(_pool_kernel, target, k, window, out_size, index_dtype)
    return mesh, kernel, (sharding, sharding), (sharding,)


def _pool_infer_sharding(target, k, window, out_size, index_dtype, mesh, arg_shapes,
                         result_shapes):
    sharding = _plane_sharding(mesh, arg_shapes[0].sharding, len(arg_shapes[0].shape), k)
    return (sharding, sharding)


_per_shard_pool = custom_partitioning(_pool_kernel, static_argnums=(0, 1, 2, 3, 4))
_per_shard_pool.def_partition(_pool_partition, infer_sharding_from_operands=_pool_infer_sharding,
                              sharding_rule=_pool_rule)


def pool_call_lowering(target: str):
    """A pool primitive's lowering to the FFI call `target` (x -> values, indices), the
    window as its attributes, partitioned along N and C as the unpool calls are (above)."""
    def lowering(ctx, x, *, kernel_size, stride, padding, dilation, ceil_mode, channels_last,
                 index_dtype):
        k = len(kernel_size)
        window = (("kernel_size", tuple(kernel_size)), ("stride", tuple(stride)),
                  ("padding", tuple(padding)), ("dilation", tuple(dilation)),
                  ("ceil_mode", bool(ceil_mode)))
        if channels_last and not ctx.module_context.lowering_parameters.for_export:
            values = ctx.avals_out[0]
            out_size = tuple(values.shape[values.ndim - 1 - k:values.ndim - 1])
            kernel = partial(_per_shard_pool, target, k, window, out_size,
                             np.dtype(index_dtype))
            return mlir.lower_fun(kernel, multiple_results=True)(ctx, x)
        call = jax.ffi.ffi_lowering(target,
                                    extra_attributes=call_attributes(ctx, channels_last, k))
        return call(ctx, x, channels_last=bool(channels_last),
                    **{name: np.asarray(v, np.int64) if isinstance(v, tuple) else v
                       for name, v in window})
    return lowering


def ffi_call_lowering(target: str, *, with_spatial_rank: bool = False,
                      split_channels_last: bool = False):
    """A primitive's lowering to the FFI call `target`: `channels_last` is its attribute,
    and `spatial_rank` too `with_spatial_rank` (the handlers read output_size from the
    result's shape), plus the partitioning attributes above. With
    `split_channels_last`, a channels-last call (outside `jax.export`) is partitioned
    per shard of N and C as described above."""
    def lowering(ctx, *operands, channels_last, output_size=None, spatial_rank=2):
        k = len(output_size) if output_size is not None else spatial_rank
        if (channels_last and split_channels_last
                and not _compat.lowering_for_export(ctx)):
            kernel = partial(_per_shard_kernel, target, k, output_size)
            return mlir.lower_fun(kernel, multiple_results=False)(ctx, *operands)
        attributes = {"channels_last": bool(channels_last)}
        if with_spatial_rank:
            attributes["spatial_rank"] = int(k)  # an i64 attribute, also for np.int32(k)
        call = jax.ffi.ffi_lowering(target,
                                    extra_attributes=call_attributes(ctx, channels_last, k))
        return call(ctx, *operands, **attributes)
    return lowering
