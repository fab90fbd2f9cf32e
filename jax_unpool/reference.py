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


# Each function is written out, so that its signature is the public function's (the
# API reference shows it as written).

def _unpool(fn: str, k: int, *args: Any) -> jax.Array:
    x, indices, size, last = _args.unpool_operands(fn, k, *args)
    return scatter_planes(x, indices, size, last)


def _unpool_backward(fn: str, k: int, *args: Any) -> jax.Array:
    grad_output, indices, last = _args.unpool_backward_operands(fn, k, *args)
    return gather_planes(grad_output, indices, last, k)


def max_unpool1d(x: Any, indices: Any, kernel_size: Any = None, stride: Any = None,
                 padding: Any = 0, output_size: Any = None, *,
                 data_format: str = "NCW") -> jax.Array:
    """Reference of :func:`jax_unpool.max_unpool1d` (same arguments and semantics)."""
    return _unpool("max_unpool1d", 1, x, indices, kernel_size, stride, padding, output_size,
                   data_format)


def max_unpool2d(x: Any, indices: Any, kernel_size: Any = None, stride: Any = None,
                 padding: Any = 0, output_size: Any = None, *,
                 data_format: str = "NCHW") -> jax.Array:
    """Reference of :func:`jax_unpool.max_unpool2d` (same arguments and semantics)."""
    return _unpool("max_unpool2d", 2, x, indices, kernel_size, stride, padding, output_size,
                   data_format)


def max_unpool3d(x: Any, indices: Any, kernel_size: Any = None, stride: Any = None,
                 padding: Any = 0, output_size: Any = None, *,
                 data_format: str = "NCDHW") -> jax.Array:
    """Reference of :func:`jax_unpool.max_unpool3d` (same arguments and semantics)."""
    return _unpool("max_unpool3d", 3, x, indices, kernel_size, stride, padding, output_size,
                   data_format)


def max_unpool1d_backward(grad_output: Any, x: Any, indices: Any, output_size: Any, *,
                          data_format: str = "NCW") -> jax.Array:
    """Reference of :func:`jax_unpool.max_unpool1d_backward` (same arguments and semantics)."""
    return _unpool_backward("max_unpool1d_backward", 1, grad_output, x, indices, output_size,
                            data_format)


def max_unpool2d_backward(grad_output: Any, x: Any, indices: Any, output_size: Any, *,
                          data_format: str = "NCHW") -> jax.Array:
    """Reference of :func:`jax_unpool.max_unpool2d_backward` (same arguments and semantics)."""
    return _unpool_backward("max_unpool2d_backward", 2, grad_output, x, indices, output_size,
                            data_format)


def max_unpool3d_backward(grad_output: Any, x: Any, indices: Any, output_size: Any, *,
                          data_format: str = "NCDHW") -> jax.Array:
    """Reference of :func:`jax_unpool.max_unpool3d_backward` (same arguments and semantics)."""
    return _unpool_backward("max_unpool3d_backward", 3, grad_output, x, indices, output_size,
                            data_format)


# The pools in XLA ops, their gradient XLA's scatter-add (the public ones run the native
# kernel on CPU and scatter through the unpool primitive where windows cannot overlap).

def max_pool1d_with_indices(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False, *,
                            data_format: str = "NCW",
                            index_dtype: Any = jnp.int32) -> tuple[jax.Array, jax.Array]:
    """Reference of :func:`jax_unpool.max_pool1d_with_indices` (XLA ops; same arguments and
    semantics)."""
    return _pool_xla.max_pool("max_pool1d_with_indices", 1, x, kernel_size, stride, padding,
                              dilation, ceil_mode, data_format, index_dtype)


def max_pool2d_with_indices(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False, *,
                            data_format: str = "NCHW",
                            index_dtype: Any = jnp.int32) -> tuple[jax.Array, jax.Array]:
    """Reference of :func:`jax_unpool.max_pool2d_with_indices` (XLA ops; same arguments and
    semantics)."""
    return _pool_xla.max_pool("max_pool2d_with_indices", 2, x, kernel_size, stride, padding,
                              dilation, ceil_mode, data_format, index_dtype)


def max_pool3d_with_indices(x: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                            dilation: Any = 1, ceil_mode: bool = False, *,
                            data_format: str = "NCDHW",
                            index_dtype: Any = jnp.int32) -> tuple[jax.Array, jax.Array]:
    """Reference of :func:`jax_unpool.max_pool3d_with_indices` (XLA ops; same arguments and
    semantics)."""
    return _pool_xla.max_pool("max_pool3d_with_indices", 3, x, kernel_size, stride, padding,
                              dilation, ceil_mode, data_format, index_dtype)
