"""A stand-in for the pool primitive (x -> values, indices) until main has one: the
parameters jax_unpool.npu.pool_lowering expects (the CPU pool target's window, channels_last)
plus index_dtype, abstract evaluation from the pools' geometry, and the pools' XLA ops as
its lowering on every platform -- what the NPU lowering falls back to.
"""

from __future__ import annotations

import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import mlir

from jax_unpool import _args, _pool_xla
from jax_unpool._pool_xla import pool_values_and_indices

stand_in_p = Primitive("stand_in_max_pool")
stand_in_p.multiple_results = True


def _geometry(x, kernel_size, stride, padding, dilation, ceil_mode, channels_last,
              index_dtype):
    k = len(kernel_size)
    data_format = _pool_xla._formats(k)[channels_last][0]  # a test helper: the private format names
    return _pool_xla.geometry("stand_in_max_pool", k, x.shape, kernel_size, stride, padding,
                              dilation, ceil_mode, data_format, index_dtype)


@stand_in_p.def_abstract_eval
def _abstract(x, **params):
    g = _geometry(x, **params)
    s = _args.spatial_axis(x.ndim, g.channels_last, g.k)
    shape = (*x.shape[:s], *g.out_size, *x.shape[s + g.k:])
    return [x.update(shape=shape), x.update(shape=shape, dtype=g.index_dtype)]


def _xla_ops(x, **params):
    g = _geometry(x, **params)
    unbatched = x.ndim == g.k + 1
    values, indices = pool_values_and_indices(x[None] if unbatched else x, g)
    return [values[0], indices[0]] if unbatched else [values, indices]


xla_lowering = mlir.lower_fun(_xla_ops, multiple_results=True)
mlir.register_lowering(stand_in_p, xla_lowering)


def pool(x, kernel_size, stride, padding, dilation=None, ceil_mode=False,
         channels_last=False, index_dtype=np.int32):
    k = len(kernel_size)
    return stand_in_p.bind(x, kernel_size=tuple(kernel_size), stride=tuple(stride),
                           padding=tuple(padding), dilation=tuple(dilation or (1,) * k),
                           ceil_mode=ceil_mode, channels_last=channels_last,
                           index_dtype=np.dtype(index_dtype))
