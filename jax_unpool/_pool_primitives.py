"""The pools as primitives, one per spatial rank k (1, 2, 3), sharing one set of rules:
abstract evaluation, JVP, batching, the lowering in XLA ops on every platform and the
native kernel on CPU.

max_pool{k}d_with_indices_p(x; kernel_size, stride, padding, dilation, ceil_mode,
                            channels_last, index_dtype) -> (values, indices)
    PyTorch's max pooling with argmax indices (see jax_unpool.pooling for the semantics):
    kernel_size, stride, padding and dilation are tuples of k ints, index_dtype is int32
    or int64, x has rank k + 1 (unbatched) or k + 2, channels first or last. Indices are
    flat positions inside one input plane, in both layouts.

Values and indices come from one bind, so one pass over x computes both (on CPU the
jax_unpool_max_pool_v1 kernel; elsewhere jax_unpool._pool_xla's XLA ops). The tangent is
gathered at the argmax, which reverse mode turns into a scatter to the argmax: the unpool
primitive where each input position is the argmax of at most one window, XLA's
scatter-add otherwise.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.interpreters import ad, batching, mlir, xla

from jax_unpool import _args, _compat, _ffi, _pool_xla, _sharding
from jax_unpool._primitives import _fold_batch, max_unpool_backward_p

RANKS = (1, 2, 3)

__all__ = [f"max_pool{k}d_with_indices_p" for k in RANKS]


def _rank(kernel_size) -> int:
    k = len(kernel_size) if isinstance(kernel_size, tuple) else 0
    if k not in RANKS:
        raise ValueError(f"max_pool_with_indices_p: kernel_size must be a tuple of 1, 2 or 3 "
                         f"ints (the spatial rank), got {kernel_size!r}")
    return k


def _params(primitive: str, *, kernel_size, stride, padding, dilation, ceil_mode,
            channels_last, index_dtype) -> None:
    """The parameters' types, checked at every bind (before jax's caches, which hold 2.0
    equal to 2 and 1 equal to True); their values are checked against x's shape by the
    abstract evaluation."""
    k = _rank(kernel_size)
    for name, value in (("kernel_size", kernel_size), ("stride", stride),
                        ("padding", padding), ("dilation", dilation)):
        if not (isinstance(value, tuple) and len(value) == k
                and all(map(_args.is_int, value))):
            raise TypeError(f"{primitive}: {name} must be a tuple of {k} ints, got "
                            f"{_args.received(value)}")
    for name, value in (("ceil_mode", ceil_mode), ("channels_last", channels_last)):
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{primitive}: {name} must be a bool, got {_args.received(value)}")


max_pool_p = {k: _sharding.Primitive(f"max_pool{k}d_with_indices",
                                     partial(_params, f"max_pool{k}d_with_indices_p"))
              for k in RANKS}
max_pool1d_with_indices_p, max_pool2d_with_indices_p, max_pool3d_with_indices_p = (
    max_pool_p.values())

# What the CPU kernel orders (ffi/cpu/pool_values.h); other dtypes (sub-byte ones) keep
# the XLA ops on CPU too.
_NATIVE_DTYPES = frozenset(np.dtype(d) for d in (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", jnp.bfloat16, "float32", "float64", *(
        getattr(jnp, f) for f in ("float8_e5m2", "float8_e4m3", "float8_e3m4", "float8_e4m3fn",
                                  "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz",
                                  "float8_e8m0fnu") if hasattr(jnp, f))))


def geometry(fn: str, shape, *, kernel_size, stride, padding, dilation, ceil_mode,
             channels_last, index_dtype) -> _pool_xla.Geometry:
    """The pool's geometry from a bind's parameters, checked as the public functions
    check their arguments (errors name `fn`)."""
    k = len(kernel_size)
    data_format = _pool_xla._formats(k)[bool(channels_last)][0]
    return _pool_xla.geometry(fn, k, tuple(shape), kernel_size, stride, padding, dilation,
                              ceil_mode, data_format, index_dtype)


def _abstract_eval(x, **params):
    k = _rank(params["kernel_size"])
    fn = f"max_pool{k}d_with_indices"
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise TypeError(f"{fn}: x must have a real dtype (max needs an order), got {x.dtype}")
    g = geometry(fn, x.shape, **params)
    s = _args.spatial_axis(x.ndim, g.channels_last, k)
    shape = (*x.shape[:s], *g.out_size, *x.shape[s + k:])
    return [_sharding.result_type(fn, x, [], shape, dtype, g.channels_last, k)
            for dtype in (x.dtype, g.index_dtype)]


def _gather_tangent(t: jax.Array, indices: jax.Array, g: _pool_xla.Geometry) -> jax.Array:
    """t at the argmax positions. With unique argmaxes (`argmax_is_unique`) it is the
    unpool primitives' gather, whose transpose is the unpool primitive (the native kernel
    on CPU, aclnn on the NPU; second order transposes back to the gather); otherwise
    XLA's gather, whose transpose is a scatter-add (overlapping windows sum up). Packed
    sub-byte dtypes (float4_e2m1fn, int4), which the unpool kernels do not move, take
    XLA's gather too."""
    if _pool_xla.argmax_is_unique(g) and _args.is_movable(t.dtype):
        return max_unpool_backward_p[g.k].bind(t, indices, channels_last=g.channels_last,
                                               spatial_rank=g.k)
    if t.ndim == g.k + 1:  # unbatched
        return _pool_xla.gather_at_argmax(t[None], indices[None], g)[0]
    return _pool_xla.gather_at_argmax(t, indices, g)


def _jvp(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    k = len(params["kernel_size"])
    values, indices = max_pool_p[k].bind(x, **params)
    if type(t) is ad.Zero or t.dtype == jax.dtypes.float0:  # integer x: no tangent
        t_values = _compat.zero_tangent(values)
    else:
        t_values = _gather_tangent(t, indices, geometry(f"max_pool{k}d_with_indices",
                                                        x.shape, **params))
    return [values, indices], [t_values, _compat.zero_tangent(indices)]


def _batch(args, dims, **params):
    k = len(params["kernel_size"])
    (x,), unfold = _fold_batch(args, dims, k)
    results = [unfold(r) for r in max_pool_p[k].bind(x, **params)]
    return [r for r, _ in results], [d for _, d in results]


def _xla_ops(x, **params):
    """The pool in XLA ops: the lowering wherever there is no native kernel."""
    g = geometry("max_pool_with_indices_p", x.shape, **params)
    unbatched = x.ndim == g.k + 1
    xb = x[None] if unbatched else x
    if x.dtype == jnp.bool_:  # compares on bool are awkward in XLA; uint8 orders the same
        values, indices = _pool_xla.pool_values_and_indices(xb.astype(jnp.uint8), g)
        values = values.astype(jnp.bool_)
    else:
        values, indices = _pool_xla.pool_values_and_indices(xb, g)
    return [values[0], indices[0]] if unbatched else [values, indices]


xla_lowering = mlir.lower_fun(_xla_ops, multiple_results=True)
_native_lowering = _sharding.pool_call_lowering(_ffi.MAX_POOL_TARGET)


def cpu_lowering(ctx, x, **params):
    """The native kernel, for every dtype it orders."""
    if np.dtype(ctx.avals_in[0].dtype) in _NATIVE_DTYPES:
        return _native_lowering(ctx, x, **params)
    return xla_lowering(ctx, x, **params)


for _p in max_pool_p.values():
    _p.multiple_results = True
    _p.def_impl(partial(xla.apply_primitive, _p))
    _p.def_abstract_eval(_abstract_eval)
    ad.primitive_jvps[_p] = _jvp
    batching.primitive_batchers[_p] = _batch
    mlir.register_lowering(_p, xla_lowering)
    mlir.register_lowering(_p, cpu_lowering, platform="cpu")
