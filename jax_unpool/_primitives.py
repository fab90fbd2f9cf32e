"""The two primitives, each followed by its rules: abstract evaluation, JVP, transpose
(each binds the other), batching, the reference lowering and the CPU FFI lowering.

max_unpool2d_p(x, indices; output_size, channels_last) -> out
    scatter: zeros of x's shape with (H, W) -> output_size, then out[n, c, idx] = x.
max_unpool2d_backward_p(grad_output, indices; channels_last) -> out
    gather: out[n, c, i] = grad_output[n, c, indices[n, c, i]]; out has indices' shape.

Both take rank-3 or rank-4 operands, NCHW (channels_last=False) or NHWC. Indices are
flat positions inside one plane, h * W_out + w, in both layouts.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax.interpreters import ad, batching, mlir, xla

from jax_unpool import _args, _ffi, _sharding, reference

__all__ = ["max_unpool2d_backward_p", "max_unpool2d_p"]


def _fold_batch(args, dims):
    """Folds the vmapped axis B into N (rank-3 operands get it as N): one bind, no loop.
    Returns the operands and how to unfold a result into (result, its batch dim).

    B goes before N, unless N is split across devices (an explicit mesh) and B is not:
    then after it, so that each device's rows of the folded dim stay one block. (A
    reshape can merge a split dim only with whole dims after it.)"""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    moved = [batching.bdim_at_front(a, d, size) for a, d in zip(args, dims)]
    if moved[0].ndim == 4:  # the operands were rank 3
        return moved, lambda out: (out, 0)
    n = moved[0].shape[1]
    specs = [tuple(jax.typeof(a).sharding.spec) + (None, None) for a in moved]
    if any(spec[1] is not None for spec in specs) and all(spec[0] is None for spec in specs):
        folded = [jnp.moveaxis(a, 0, 1).reshape(n * size, *a.shape[2:]) for a in moved]
        return folded, lambda out: (out.reshape(n, size, *out.shape[1:]), 1)
    folded = [a.reshape(size * n, *a.shape[2:]) for a in moved]
    return folded, lambda out: (out.reshape(size, n, *out.shape[1:]), 0)


def _tangent_or_zero(tangent, out, bind):
    if type(tangent) is ad.Zero:
        return ad.Zero.from_primal_value(out)
    return bind(tangent)


# --------------------------------------------------------------------------------------
# max_unpool2d_p: the scatter
# --------------------------------------------------------------------------------------

max_unpool2d_p = _sharding.Primitive("max_unpool2d")
max_unpool2d_p.def_impl(partial(xla.apply_primitive, max_unpool2d_p))


def _max_unpool2d_abstract_eval(x, indices, *, output_size, channels_last):
    fn = "max_unpool2d"
    _args.check_unpool_operands(fn, x, indices)
    _args.positive_sizes(fn, "output_size", output_size)
    _args.check_plane_fits_indices(fn, indices.dtype, output_size)
    shape = _args.unpool_result_shape(fn, x.shape, output_size, channels_last)
    return _sharding.result_type(fn, x, [indices], shape, x.dtype, channels_last)


def _max_unpool2d_jvp(primals, tangents, *, output_size, channels_last):
    x, indices = primals
    def bind(values):
        return max_unpool2d_p.bind(values, indices, output_size=output_size,
                                   channels_last=channels_last)

    out = bind(x)
    return out, _tangent_or_zero(tangents[0], out, bind)  # indices get no tangent


def _max_unpool2d_transpose(ct, x, indices, *, output_size, channels_last):
    # Linear in x only: its cotangent gathers ct at the indices.
    assert ad.is_undefined_primal(x) and not ad.is_undefined_primal(indices)
    if type(ct) is ad.Zero:
        return ad.Zero(x.aval), None
    return max_unpool2d_backward_p.bind(ct, indices, channels_last=channels_last), None


def _max_unpool2d_batch(args, dims, *, output_size, channels_last):
    (x, indices), unfold = _fold_batch(args, dims)
    out = max_unpool2d_p.bind(x, indices, output_size=output_size, channels_last=channels_last)
    return unfold(out)


def _max_unpool2d_reference(x, indices, *, output_size, channels_last):
    return reference.scatter_planes(x, indices, output_size, channels_last)


_max_unpool2d_cpu_lowering = _sharding.ffi_call_lowering(_ffi.MAX_UNPOOL2D_TARGET,
                                                           split_channels_last=True)


max_unpool2d_p.def_abstract_eval(_max_unpool2d_abstract_eval)
ad.primitive_jvps[max_unpool2d_p] = _max_unpool2d_jvp
ad.primitive_transposes[max_unpool2d_p] = _max_unpool2d_transpose
batching.primitive_batchers[max_unpool2d_p] = _max_unpool2d_batch
mlir.register_lowering(max_unpool2d_p, mlir.lower_fun(_max_unpool2d_reference,
                                                      multiple_results=False))
mlir.register_lowering(max_unpool2d_p, _max_unpool2d_cpu_lowering, platform="cpu")


# --------------------------------------------------------------------------------------
# max_unpool2d_backward_p: the gather (CANN's aclnnMaxUnpool2dBackward)
# --------------------------------------------------------------------------------------

max_unpool2d_backward_p = _sharding.Primitive("max_unpool2d_backward")
max_unpool2d_backward_p.def_impl(partial(xla.apply_primitive, max_unpool2d_backward_p))


def _max_unpool2d_backward_abstract_eval(grad_output, indices, *, channels_last):
    fn = "max_unpool2d_backward"
    _args.check_gather_operands(fn, grad_output, indices, channels_last)
    h = _args.spatial_axis(grad_output.ndim, channels_last)
    _args.check_plane_fits_indices(fn, indices.dtype, grad_output.shape[h:h + 2])
    return _sharding.result_type(fn, indices, [grad_output], indices.shape,
                                 grad_output.dtype, channels_last)


def _max_unpool2d_backward_jvp(primals, tangents, *, channels_last):
    grad_output, indices = primals
    def bind(values):
        return max_unpool2d_backward_p.bind(values, indices, channels_last=channels_last)

    out = bind(grad_output)
    return out, _tangent_or_zero(tangents[0], out, bind)


def _max_unpool2d_backward_transpose(ct, grad_output, indices, *, channels_last):
    # Linear in grad_output only: its cotangent scatters ct to the indices.
    assert ad.is_undefined_primal(grad_output) and not ad.is_undefined_primal(indices)
    if type(ct) is ad.Zero:
        return ad.Zero(grad_output.aval), None
    h = _args.spatial_axis(grad_output.aval.ndim, channels_last)
    output_size = tuple(grad_output.aval.shape[h:h + 2])
    return max_unpool2d_p.bind(ct, indices, output_size=output_size,
                               channels_last=channels_last), None


def _max_unpool2d_backward_batch(args, dims, *, channels_last):
    (grad_output, indices), unfold = _fold_batch(args, dims)
    out = max_unpool2d_backward_p.bind(grad_output, indices, channels_last=channels_last)
    return unfold(out)


def _max_unpool2d_backward_reference(grad_output, indices, *, channels_last):
    return reference.gather_planes(grad_output, indices, channels_last)


_max_unpool2d_backward_cpu_lowering = _sharding.ffi_call_lowering(
    _ffi.MAX_UNPOOL2D_BACKWARD_TARGET, split_channels_last=True)


max_unpool2d_backward_p.def_abstract_eval(_max_unpool2d_backward_abstract_eval)
ad.primitive_jvps[max_unpool2d_backward_p] = _max_unpool2d_backward_jvp
ad.primitive_transposes[max_unpool2d_backward_p] = _max_unpool2d_backward_transpose
batching.primitive_batchers[max_unpool2d_backward_p] = _max_unpool2d_backward_batch
mlir.register_lowering(max_unpool2d_backward_p,
                       mlir.lower_fun(_max_unpool2d_backward_reference, multiple_results=False))
mlir.register_lowering(max_unpool2d_backward_p, _max_unpool2d_backward_cpu_lowering,
                       platform="cpu")
