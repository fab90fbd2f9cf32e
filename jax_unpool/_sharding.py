"""How the two primitives behave on several devices.

Each plane (one (n, c) pair) is unpooled or gathered on its own, so the dims that
address planes -- N and C -- can be split across devices with no communication; H and
W cannot, because an index addresses a whole output plane.

- Types (abstract evaluation): the result's sharding on an explicit mesh follows the
  operands' plane dims, and its varying manual axes (`shard_map`) are the union of the
  operands'. As jax's own ops do, `bind` first casts every operand to that union
  (`pcast(..., to="varying")`), so that the transpose of a replicated `x` used with
  varying indices sums its cotangent over the devices.
- Partitioning (CPU lowering): the FFI call is marked batch-partitionable over its
  leading plane dims (`num_batch_dims`), and carries the matching Shardy sharding rule,
  so XLA runs the kernel on each device's shard instead of gathering the operands.
  NHWC keeps C last, so only N is a leading batch dim there.
"""

from __future__ import annotations

import math

import jax
from jax.extend import core
from jax.extend.mlir.dialects import sdy
from jax.interpreters import mlir
from jax.sharding import NamedSharding, PartitionSpec

from jax_unpool import _args


def plane_dims(ndim: int, channels_last: bool) -> tuple[int, ...]:
    """Positions of N and C (or C alone for rank 3) in a rank-3/4 shape."""
    h = _args.spatial_axis(ndim, channels_last)
    return tuple(d for d in range(ndim) if d not in (h, h + 1))


def leading_batch_dims(ndim: int, channels_last: bool) -> int:
    """How many leading dims are plane dims: the batch dims of the partitioned call."""
    return _args.spatial_axis(ndim, channels_last)


# --------------------------------------------------------------------------------------
# Types
# --------------------------------------------------------------------------------------

class Primitive(core.Primitive):
    """A primitive whose operands vary over the same manual axes when it is bound."""

    def bind(self, *args, **params):
        return super().bind(*_vary_to_union(args), **params)


def _vary_to_union(args):
    varying = [jax.typeof(a).mat.varying for a in args]
    union = frozenset().union(*varying)
    return [a if v == union else jax.lax.pcast(a, tuple(union - v), to="varying")
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


def result_type(fn: str, operand, others, shape, dtype, channels_last: bool):
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
    for d in plane_dims(len(shape), channels_last):
        spec[d] = _merge_entry(fn, d, [a.sharding.spec[d] if d < len(a.sharding.spec)
                                       else None for a in avals])
    h = _args.spatial_axis(len(shape), channels_last)
    for d in (h, h + 1):
        entry = operand.sharding.spec[d] if d < len(operand.sharding.spec) else None
        if entry is not None and shape[d] % _axes_size(mesh, entry) == 0:
            spec[d] = entry
    varying = frozenset().union(*(a.mat.varying for a in avals))
    return operand.update(shape=shape, dtype=dtype, weak_type=False,
                          sharding=NamedSharding(mesh, PartitionSpec(*spec)),
                          manual_axis_type=operand.mat.update(varying=varying))


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


def call_attributes(ctx, channels_last: bool) -> dict | None:
    """Extra attributes for the FFI custom call that let XLA partition it along the
    leading plane dims; None when there are none, or the shapes are symbolic."""
    avals = (*ctx.avals_in, *ctx.avals_out)
    num_batch_dims = leading_batch_dims(ctx.avals_out[0].ndim, channels_last)
    if num_batch_dims == 0 or not all(isinstance(d, int) for a in avals for d in a.shape):
        return None
    attributes = {"mhlo.frontend_attributes":
                  mlir.ir_attribute({"num_batch_dims": str(num_batch_dims)})}
    if jax.config.jax_use_shardy_partitioner:
        attributes["sdy.sharding_rule"] = _sharding_rule(ctx.avals_in, ctx.avals_out,
                                                         num_batch_dims)
    return attributes


def ffi_call_lowering(target: str):
    """A primitive's lowering to the FFI call `target`: `channels_last` is its only
    attribute (the handlers read output_size from the result's shape), plus the
    partitioning attributes above."""
    def lowering(ctx, *operands, channels_last, **_):
        call = jax.ffi.ffi_lowering(target,
                                    extra_attributes=call_attributes(ctx, channels_last))
        return call(ctx, *operands, channels_last=bool(channels_last))
    return lowering
