"""How the two primitives behave on several devices.

Each plane (one (n, c) pair) is unpooled or gathered on its own, so the dims that
address planes -- N and C -- can be split across devices with no communication; the
spatial dims (W; H, W; D, H, W) cannot, because an index addresses a whole output plane.

- Types (abstract evaluation): the result's sharding on an explicit mesh follows the
  operands' plane dims, and its varying manual axes (`shard_map`) are the union of the
  operands'. As jax's own ops do, `bind` first casts every operand to that union
  (`pcast(..., to="varying")`), so that the transpose of a replicated `x` used with
  varying indices sums its cotangent over the devices.
- Partitioning (the native kernels' lowerings, `backends.custom_call`): the FFI call is marked batch-partitionable over its
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
from functools import partial

import jax
import numpy as np
from jax.experimental.custom_partitioning import custom_partitioning
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import sdy
from jax.sharding import NamedSharding, PartitionSpec

from jax_unpool import _compat, _geometry

# --------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------

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
    for d in _geometry.plane_dims(len(shape), channels_last, k):
        spec[d] = _merge_entry(fn, d, [a.sharding.spec[d] if d < len(a.sharding.spec)
                                       else None for a in avals])
    s = _geometry.spatial_axis(len(shape), channels_last, k)
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
    # The plane dims before the spatial ones: the batch dims of the partitioned call.
    num_batch_dims = _geometry.spatial_axis(ctx.avals_out[0].ndim, channels_last, k)
    if num_batch_dims == 0 or not all(isinstance(d, int) for a in avals for d in a.shape):
        return None
    attributes = {"mhlo.frontend_attributes":
                  ir.DictAttr.get({"num_batch_dims": ir.StringAttr.get(str(num_batch_dims))})}
    if jax.config.jax_use_shardy_partitioner:
        attributes["sdy.sharding_rule"] = _sharding_rule(ctx.avals_in, ctx.avals_out,
                                                         num_batch_dims)
    return attributes


def ffi_attributes(attributes) -> dict:
    """An FFI call's attributes from (name, value) pairs: tuples of ints become int64
    arrays (XLA's FFI decoder rejects array attributes of Python lists and tuples)."""
    return {name: np.asarray(v, np.int64) if isinstance(v, tuple) else v
            for name, v in attributes}


# The unpool calls (two operands -> one result), channels last. `attributes` is the FFI
# call's attributes as a hashable tuple of (name, value); `output_size` is None for the
# backward, whose result has the indices' shape.

def _rule(target, k, output_size, attributes, mesh, operand_types, result_types):
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


def _kernel(target: str, k: int, output_size, attributes, x, indices):
    """The FFI call on channels-last operands as they come: whole arrays, or one device's
    shard when `per_shard_unpool_call` is partitioned."""
    shape = (indices.shape if output_size is None
             else (*x.shape[:-k - 1], *output_size, x.shape[-1]))
    return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(shape, x.dtype))(
        x, indices, **ffi_attributes(attributes))


def _plane_sharding(mesh, sharding, ndim: int, k: int) -> NamedSharding:
    """`sharding`'s N and C entries, with the k spatial dims whole."""
    spec = list(sharding.spec) + [None] * (ndim - len(sharding.spec))
    for d in range(ndim - 1 - k, ndim - 1):
        spec[d] = None
    return NamedSharding(mesh, PartitionSpec(*spec))


def _partition(target, k, output_size, attributes, mesh, arg_shapes, result_shape):
    # Operands and result have the same rank and plane dims: one sharding for all.
    sharding = _plane_sharding(mesh, result_shape.sharding, len(result_shape.shape), k)
    kernel = partial(_kernel, target, k, output_size, attributes)
    return mesh, kernel, sharding, (sharding, sharding)


def _infer_sharding(target, k, output_size, attributes, mesh, arg_shapes, result_shape):
    # GSPMD only (Shardy uses the rule): the indices always have the plane dims.
    return _plane_sharding(mesh, arg_shapes[1].sharding, len(result_shape.shape), k)


per_shard_unpool_call = custom_partitioning(_kernel, static_argnums=(0, 1, 2, 3))
per_shard_unpool_call.def_partition(_partition, infer_sharding_from_operands=_infer_sharding,
                                    sharding_rule=_rule)


# The pool (x -> values, indices), channels last: the same split, one operand and two
# results.

def _pool_rule(target, k, attributes, out_size, index_dtype, mesh, operand_types,
               result_types):
    small = " ".join(f"o{d}" for d in range(k))
    rule = f"... {' '.join(f'i{d}' for d in range(k))} c -> ... {small} c, ... {small} c"
    return rule, {"need_replication_factors": (*(f"i{d}" for d in range(k)),
                                               *(f"o{d}" for d in range(k)))}


def _pool_kernel(target: str, k: int, attributes, out_size, index_dtype, x):
    shape = (*x.shape[:-k - 1], *out_size, x.shape[-1])
    return jax.ffi.ffi_call(target, (jax.ShapeDtypeStruct(shape, x.dtype),
                                     jax.ShapeDtypeStruct(shape, index_dtype)))(
        x, **ffi_attributes(attributes))


def _pool_partition(target, k, attributes, out_size, index_dtype, mesh, arg_shapes,
                    result_shapes):
    sharding = _plane_sharding(mesh, result_shapes[0].sharding, len(result_shapes[0].shape), k)
    kernel = partial(_pool_kernel, target, k, attributes, out_size, index_dtype)
    return mesh, kernel, (sharding, sharding), (sharding,)


def _pool_infer_sharding(target, k, attributes, out_size, index_dtype, mesh, arg_shapes,
                         result_shapes):
    sharding = _plane_sharding(mesh, arg_shapes[0].sharding, len(arg_shapes[0].shape), k)
    return (sharding, sharding)


per_shard_pool_call = custom_partitioning(_pool_kernel, static_argnums=(0, 1, 2, 3, 4))
per_shard_pool_call.def_partition(_pool_partition,
                                  infer_sharding_from_operands=_pool_infer_sharding,
                                  sharding_rule=_pool_rule)


# window_offsets (flat indices -> window offsets, one operand and one result of its shape),
# channels last: the same split.

def _offsets_rule(target, k, attributes, mesh, operand_types, result_types):
    spatial = " ".join(f"s{d}" for d in range(k))
    return (f"... {spatial} c -> ... {spatial} c",
            {"need_replication_factors": tuple(f"s{d}" for d in range(k))})


def _offsets_kernel(target: str, k: int, attributes, indices):
    return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(indices.shape, np.uint8))(
        indices, **ffi_attributes(attributes))


def _offsets_partition(target, k, attributes, mesh, arg_shapes, result_shape):
    sharding = _plane_sharding(mesh, result_shape.sharding, len(result_shape.shape), k)
    return mesh, partial(_offsets_kernel, target, k, attributes), sharding, (sharding,)


def _offsets_infer_sharding(target, k, attributes, mesh, arg_shapes, result_shape):
    return _plane_sharding(mesh, arg_shapes[0].sharding, len(arg_shapes[0].shape), k)


per_shard_offsets_call = custom_partitioning(_offsets_kernel, static_argnums=(0, 1, 2))
per_shard_offsets_call.def_partition(_offsets_partition,
                                     infer_sharding_from_operands=_offsets_infer_sharding,
                                     sharding_rule=_offsets_rule)
