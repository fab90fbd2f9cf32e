"""The two operations, each followed by its rules: abstract evaluation, JVP, transpose
(each binds the other), batching, the reference lowering and the CPU FFI lowering.

Each operation has one primitive per spatial rank k, so that a jaxpr names its rank
(`max_unpool3d[...]`), and one set of rank-generic rules that all of them share:

max_unpool{k}d_p(x, indices; output_size, channels_last) -> out
    scatter: zeros of x's shape with its k spatial dims -> output_size (k = its length),
    then out[n, c, idx] = x.
max_unpool{k}d_backward_p(grad_output, indices; channels_last, spatial_rank) -> out
    gather: out[n, c, i] = grad_output[n, c, indices[n, c, i]]; out has indices' shape.

The rank is in the parameters (len(output_size), spatial_rank), not in the primitive:
`max_unpool2d_p` and `max_unpool2d_backward_p`, which served every rank before the
per-rank ones existed, still accept binds of any rank (spatial_rank defaults to 2), and
their rules bind the primitives of the bound rank.

Operands have rank k + 1 (unbatched) or k + 2, channels-first (NCHW, NCW, NCDHW;
channels_last=False) or channels-last (NHWC, ...). Indices are flat positions inside one
output plane -- w, h * W_out + w, (d * H_out + h) * W_out + w -- in both layouts.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir, xla

from jax_unpool import _args, _compat, _ffi, _planes, _sharding, _symbolic

RANKS = (1, 2, 3)

__all__ = [f"max_unpool{k}d{op}_p" for k in RANKS for op in ("", "_backward")]


def _fold_batch(args, dims, k):
    """Folds the vmapped axis B into N (unbatched operands get it as N): one bind, no loop.
    Returns the operands and how to unfold a result into (result, its batch dim).

    B goes before N, unless N is split across devices (an explicit mesh) and B is not:
    then after it, so that each device's rows of the folded dim stay one block. (A
    reshape can merge a split dim only with whole dims after it.)"""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    moved = [batching.bdim_at_front(a, d, size) for a, d in zip(args, dims)]
    if moved[0].ndim == k + 2:  # the operands were unbatched
        return moved, lambda out: (out, 0)
    n = moved[0].shape[1]
    specs = [tuple(jax.typeof(a).sharding.spec) + (None, None) for a in moved]
    if any(spec[1] is not None for spec in specs) and all(spec[0] is None for spec in specs):
        folded = [jnp.moveaxis(a, 0, 1).reshape(n * size, *a.shape[2:]) for a in moved]
        return folded, lambda out: (out.reshape(n, size, *out.shape[1:]), 1)
    folded = [a.reshape(size * n, *a.shape[2:]) for a in moved]
    return folded, lambda out: (out.reshape(size, n, *out.shape[1:]), 0)


def _guarded(call_guards, rule):
    """`rule` after `call_guards`: the abstract evaluation's size checks that symbolic
    shapes left open, asserted when an exported function is called (see _symbolic). Every
    platform's lowering of a primitive is guarded so."""
    def lowering(ctx, *operands, **params):
        call_guards(ctx, **params)
        return rule(ctx, *operands, **params)
    return lowering


def _plane_guard(ctx, fn: str, plane) -> None:
    if ctx.avals_in[1].dtype == np.int32:
        _symbolic.assert_at_most(
            ctx, plane, _args.INT32_MAX,
            f"{fn}: int32 indices cannot address an output plane of more than "
            f"{_args.INT32_MAX} positions (use int64 indices)")


def _tangent_or_zero(tangent, out, bind):
    if type(tangent) is ad.Zero:
        return _compat.zero_tangent(out)
    return bind(tangent)


# --------------------------------------------------------------------------------------
# max_unpool{k}d_p: the scatter
# --------------------------------------------------------------------------------------

def _check_channels_last(fn: str, channels_last) -> None:
    # "no" or 0 would otherwise pick a layout silently.
    if not isinstance(channels_last, (bool, np.bool_)):
        raise TypeError(
            f"{fn}: channels_last must be a bool, got {_args.received(channels_last)}")


def _forward_params(primitive: str, *, output_size, channels_last) -> None:
    k = len(output_size) if isinstance(output_size, tuple) else 0
    if k not in (1, 2, 3):
        raise ValueError(f"{primitive}: output_size must be a tuple of 1, 2 or 3 sizes "
                         f"(the spatial rank), got {_args.received(output_size)}")
    fn = f"max_unpool{k}d"
    _check_channels_last(fn, channels_last)
    _args.positive_sizes(fn, "output_size", output_size, k, allow_zero=True, symbolic=True)


max_unpool_p = {k: _sharding.Primitive(f"max_unpool{k}d",
                                       partial(_forward_params, f"max_unpool{k}d_p"))
                for k in RANKS}
max_unpool1d_p, max_unpool2d_p, max_unpool3d_p = max_unpool_p.values()


# The parameters are checked at bind (_forward_params), the operands here.
def _forward_abstract_eval(x, indices, *, output_size, channels_last):
    k = len(output_size)
    fn = f"max_unpool{k}d"
    _args.check_unpool_operands(fn, x, indices, k)
    _args.check_plane_fits_indices(fn, indices.dtype, output_size)
    shape = _args.unpool_result_shape(fn, x.shape, output_size, channels_last, k)
    return _sharding.result_type(fn, x, [indices], shape, x.dtype, channels_last, k)


def _forward_jvp(primals, tangents, *, output_size, channels_last):
    x, indices = primals
    def bind(values):
        return max_unpool_p[len(output_size)].bind(values, indices, output_size=output_size,
                                                   channels_last=channels_last)

    out = bind(x)
    return out, _tangent_or_zero(tangents[0], out, bind)  # indices get no tangent


def _forward_transpose(ct, x, indices, *, output_size, channels_last):
    # Linear in x only: its cotangent gathers ct at the indices.
    assert ad.is_undefined_primal(x) and not ad.is_undefined_primal(indices)
    if type(ct) is ad.Zero:
        return ad.Zero(x.aval), None
    k = len(output_size)
    return max_unpool_backward_p[k].bind(ct, indices, channels_last=channels_last,
                                         spatial_rank=k), None


def _forward_batch(args, dims, *, output_size, channels_last):
    k = len(output_size)
    (x, indices), unfold = _fold_batch(args, dims, k)
    out = max_unpool_p[k].bind(x, indices, output_size=output_size, channels_last=channels_last)
    return unfold(out)


def _forward_reference(x, indices, *, output_size, channels_last):
    return _planes.scatter_planes(x, indices, output_size, channels_last)


def _forward_call_guards(ctx, *, output_size, channels_last):
    fn = f"max_unpool{len(output_size)}d"
    _symbolic.assert_at_most(
        ctx, ctx.avals_out[0].shape, _args.MAX_ELEMENTS,
        f"{fn}: the result must have at most {_args.MAX_ELEMENTS} (2**60 - 1) elements, what "
        "XLA can hold")
    _plane_guard(ctx, fn, output_size)


def forward_lowering(rule):
    """`rule` as a lowering of max_unpool{k}d_p: with its call-time size guards."""
    return _guarded(_forward_call_guards, rule)


_forward_cpu_lowering = forward_lowering(_sharding.ffi_call_lowering(
    _ffi.MAX_UNPOOL_TARGET, with_spatial_rank=True, split_channels_last=True))


for _p in max_unpool_p.values():
    _p.def_impl(partial(xla.apply_primitive, _p))
    _p.def_abstract_eval(_forward_abstract_eval)
    ad.primitive_jvps[_p] = _forward_jvp
    ad.primitive_transposes[_p] = _forward_transpose
    batching.primitive_batchers[_p] = _forward_batch
    mlir.register_lowering(_p, forward_lowering(
        mlir.lower_fun(_forward_reference, multiple_results=False)))
    mlir.register_lowering(_p, _forward_cpu_lowering, platform="cpu")


# --------------------------------------------------------------------------------------
# max_unpool{k}d_backward_p: the gather (CANN's aclnnMaxUnpool2dBackward)
# --------------------------------------------------------------------------------------

def _backward_params(primitive: str, *, channels_last, spatial_rank=2) -> None:
    # Integral numpy ints count as ints (they hash and index as ints do); floats do not.
    if not _args.is_int(spatial_rank):
        raise TypeError(f"{primitive}: spatial_rank must be an int (1, 2 or 3), got "
                        f"{_args.received(spatial_rank)}")
    if spatial_rank not in (1, 2, 3):
        raise ValueError(f"{primitive}: spatial_rank must be 1, 2 or 3, got {spatial_rank!r}")
    _check_channels_last(f"max_unpool{spatial_rank}d_backward", channels_last)


max_unpool_backward_p = {
    k: _sharding.Primitive(f"max_unpool{k}d_backward",
                           partial(_backward_params, f"max_unpool{k}d_backward_p"))
    for k in RANKS}
max_unpool1d_backward_p, max_unpool2d_backward_p, max_unpool3d_backward_p = (
    max_unpool_backward_p.values())


# spatial_rank defaults to 2 in every rule: binds written before 1-D and 3-D omit it.
def _backward_abstract_eval(grad_output, indices, *, channels_last,
                                         spatial_rank=2):
    k = spatial_rank  # checked at bind (_backward_params), as channels_last
    fn = f"max_unpool{k}d_backward"
    _args.check_gather_operands(fn, grad_output, indices, channels_last, k)
    s = _args.spatial_axis(grad_output.ndim, channels_last, k)
    _args.check_plane_fits_indices(fn, indices.dtype, grad_output.shape[s:s + k])
    return _sharding.result_type(fn, indices, [grad_output], indices.shape,
                                 grad_output.dtype, channels_last, k)


def _backward_jvp(primals, tangents, *, channels_last, spatial_rank=2):
    grad_output, indices = primals
    def bind(values):
        return max_unpool_backward_p[spatial_rank].bind(
            values, indices, channels_last=channels_last, spatial_rank=spatial_rank)

    out = bind(grad_output)
    return out, _tangent_or_zero(tangents[0], out, bind)


def _backward_transpose(ct, grad_output, indices, *, channels_last,
                                     spatial_rank=2):
    # Linear in grad_output only: its cotangent scatters ct to the indices.
    assert ad.is_undefined_primal(grad_output) and not ad.is_undefined_primal(indices)
    if type(ct) is ad.Zero:
        return ad.Zero(grad_output.aval), None
    s = _args.spatial_axis(grad_output.aval.ndim, channels_last, spatial_rank)
    output_size = tuple(grad_output.aval.shape[s:s + spatial_rank])
    return max_unpool_p[spatial_rank].bind(ct, indices, output_size=output_size,
                                           channels_last=channels_last), None


def _backward_batch(args, dims, *, channels_last, spatial_rank=2):
    (grad_output, indices), unfold = _fold_batch(args, dims, spatial_rank)
    out = max_unpool_backward_p[spatial_rank].bind(grad_output, indices,
                                                   channels_last=channels_last,
                                                   spatial_rank=spatial_rank)
    return unfold(out)


def _backward_reference(grad_output, indices, *, channels_last, spatial_rank=2):
    return _planes.gather_planes(grad_output, indices, channels_last, spatial_rank)


def _backward_call_guards(ctx, *, channels_last, spatial_rank=2):
    s = _args.spatial_axis(ctx.avals_in[0].ndim, channels_last, spatial_rank)
    _plane_guard(ctx, f"max_unpool{spatial_rank}d_backward",
                 ctx.avals_in[0].shape[s:s + spatial_rank])


def backward_lowering(rule):
    """`rule` as a lowering of max_unpool{k}d_backward_p: with its call-time size guard."""
    return _guarded(_backward_call_guards, rule)


_backward_cpu_lowering = backward_lowering(_sharding.ffi_call_lowering(
    _ffi.MAX_UNPOOL_BACKWARD_TARGET, with_spatial_rank=True, split_channels_last=True))


for _p in max_unpool_backward_p.values():
    _p.def_impl(partial(xla.apply_primitive, _p))
    _p.def_abstract_eval(_backward_abstract_eval)
    ad.primitive_jvps[_p] = _backward_jvp
    ad.primitive_transposes[_p] = _backward_transpose
    batching.primitive_batchers[_p] = _backward_batch
    mlir.register_lowering(_p, backward_lowering(
        mlir.lower_fun(_backward_reference, multiple_results=False)))
    mlir.register_lowering(_p, _backward_cpu_lowering, platform="cpu")
