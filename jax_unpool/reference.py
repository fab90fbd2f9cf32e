"""Pure-jnp implementations of the public functions, with the same signatures and semantics.

They are the test oracle and the pure-XLA baseline of the benchmarks: the unpooling is
XLA's scatter and gather (``scatter_planes``, ``gather_planes``: also the primitives'
lowering on GPU/TPU), the pools are XLA ops with XLA's scatter-add as their gradient.
Being XLA ops, they cannot fail at run time: an out-of-range index is dropped by the
forward and reads 0 in the backward.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jax_unpool import _args, _pool_xla
from jax_unpool._planes import gather_planes, scatter_planes

__all__ = [
    "gather_planes",
    "max_pool1d_with_indices",
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "max_unpool1d",
    "max_unpool1d_backward",
    "max_unpool2d",
    "max_unpool2d_backward",
    "max_unpool3d",
    "max_unpool3d_backward",
    "scatter_planes",
]


def _unpool(fn, k):
    def unpool(x: Any, indices: Any, kernel_size: Any = None, stride: Any = None,
               padding: Any = 0, output_size: Any = None, *,
               data_format: str = _DEFAULT_FORMAT[k]) -> jax.Array:
        x, indices, size, last = _args.unpool_operands(fn, k, x, indices, kernel_size,
                                                       stride, padding, output_size,
                                                       data_format)
        return scatter_planes(x, indices, size, last)
    unpool.__name__ = unpool.__qualname__ = fn
    unpool.__doc__ = f"Reference of :func:`jax_unpool.{fn}` (same arguments and semantics)."
    return unpool


def _unpool_backward(fn, k):
    def unpool_backward(grad_output: Any, x: Any, indices: Any, output_size: Any, *,
                        data_format: str = _DEFAULT_FORMAT[k]) -> jax.Array:
        grad_output, indices, last = _args.unpool_backward_operands(
            fn, k, grad_output, x, indices, output_size, data_format)
        return gather_planes(grad_output, indices, last, k)
    unpool_backward.__name__ = unpool_backward.__qualname__ = fn
    unpool_backward.__doc__ = (f"Reference of :func:`jax_unpool.{fn}` "
                               "(same arguments and semantics).")
    return unpool_backward


_DEFAULT_FORMAT = {1: "NCW", 2: "NCHW", 3: "NCDHW"}
max_unpool1d = _unpool("max_unpool1d", 1)
max_unpool2d = _unpool("max_unpool2d", 2)
max_unpool3d = _unpool("max_unpool3d", 3)
max_unpool1d_backward = _unpool_backward("max_unpool1d_backward", 1)
max_unpool2d_backward = _unpool_backward("max_unpool2d_backward", 2)
max_unpool3d_backward = _unpool_backward("max_unpool3d_backward", 3)


def _pool(k: int, data_format: str):
    """max_pool{k}d_with_indices in XLA ops, its gradient XLA's scatter-add (the public ones
    run the native kernel on CPU and scatter through the unpool primitive where windows
    cannot overlap)."""
    fn = f"max_pool{k}d_with_indices"

    def pool(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, *,
             data_format=data_format, index_dtype=jnp.int32):
        return _pool_xla.max_pool(fn, k, x, kernel_size, stride, padding, dilation,
                                  ceil_mode, data_format, index_dtype)

    pool.__name__ = pool.__qualname__ = fn
    pool.__doc__ = f"Reference of :func:`jax_unpool.{fn}` (XLA ops; same arguments and semantics)."
    return pool


max_pool1d_with_indices = _pool(1, "NCW")
max_pool2d_with_indices = _pool(2, "NCHW")
max_pool3d_with_indices = _pool(3, "NCDHW")
