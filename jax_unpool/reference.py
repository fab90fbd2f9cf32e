"""Pure-XLA implementations of the public functions, with the same signatures and semantics.

They are the test oracle and the pure-XLA baseline of the benchmarks: the unpooling is
XLA's scatter and gather (``scatter_planes``, ``gather_planes``), the pools are XLA ops
with XLA's scatter-add as their gradient; window offsets go through flat indices
(``WindowIndices.to_flat`` and its inverse). Being XLA ops, they cannot fail at run time: an
out-of-range index is dropped by the forward and reads 0 in the backward.
"""

from __future__ import annotations

import inspect

from jax_unpool import _geometry, _pool_xla, _window, pooling, unpooling
from jax_unpool._geometry import RANKS
from jax_unpool._unpool_xla import gather_planes, scatter_planes

__all__ = [
    "gather_planes", "max_pool1d_with_indices", "max_pool2d_with_indices",
    "max_pool3d_with_indices", "max_unpool1d", "max_unpool1d_backward", "max_unpool2d",
    "max_unpool2d_backward", "max_unpool3d", "max_unpool3d_backward", "scatter_planes",
]


def _reference_of(public, compute):
    """A function with `public`'s name, signature and argument checks that computes
    `compute(k, **its arguments)` in XLA ops."""
    signature = inspect.signature(public)
    fn = public.__name__
    k = int(fn[len("max_unpool"):][0] if fn.startswith("max_unpool") else fn[len("max_pool")])

    def reference(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return compute(fn, k, **bound.arguments)

    reference.__name__ = reference.__qualname__ = fn
    reference.__signature__ = signature
    reference.__doc__ = (f"Reference of :func:`jax_unpool.{fn}` in XLA ops (same arguments and "
                         "semantics).")
    return reference


def _flat(fn, k, indices, **arguments):
    """Window offsets (a WindowIndices) as flat indices, and the arguments they imply."""
    g = unpooling.window_geometry(fn, k, indices, **arguments)
    fmt = _geometry.data_format(k, g.channels_last, indices.offsets.ndim == k + 2)
    return indices.to_flat(g.index_dtype), g.in_size, fmt


def _unpool(fn, k, x, indices, kernel_size, stride, padding, output_size, data_format):
    if isinstance(indices, _window.WindowIndices):
        indices, output_size, data_format = _flat(
            fn, k, indices, kernel_size=kernel_size, stride=stride, padding=padding,
            output_size=output_size, data_format=data_format)
        kernel_size, stride, padding = None, None, 0
    x, indices, size, last, _ = unpooling.unpool_operands(
        fn, k, x, indices, kernel_size, stride, padding, output_size, data_format)
    return scatter_planes(x, indices, size, last)


def _unpool_backward(fn, k, grad_output, x, indices, output_size, data_format):
    if isinstance(indices, _window.WindowIndices):
        indices, output_size, data_format = _flat(fn, k, indices, output_size=output_size,
                                                  data_format=data_format)
    grad_output, indices, last = unpooling.unpool_backward_operands(
        fn, k, grad_output, x, indices, output_size, data_format)
    return gather_planes(grad_output, indices, last, k)


def _pool(fn, k, x, kernel_size, stride, padding, dilation, ceil_mode, data_format,
          index_dtype, index_format):
    x, g = pooling.checked(fn, k, x, kernel_size, stride, padding, dilation, ceil_mode,
                           data_format, index_dtype)
    values, indices = _pool_xla.pool(x, g)
    if _window.check_format(fn, index_format) == "window":  # from the flat indices
        _window.check_taps(fn, g)
        return values, _window.WindowIndices(_window.from_flat(indices, g)[0], g)
    return values, indices


max_unpool1d, max_unpool2d, max_unpool3d = (
    _reference_of(getattr(unpooling, f"max_unpool{k}d"), _unpool) for k in RANKS)
max_unpool1d_backward, max_unpool2d_backward, max_unpool3d_backward = (
    _reference_of(getattr(unpooling, f"max_unpool{k}d_backward"), _unpool_backward)
    for k in RANKS)
max_pool1d_with_indices, max_pool2d_with_indices, max_pool3d_with_indices = (
    _reference_of(getattr(pooling, f"max_pool{k}d_with_indices"), _pool) for k in RANKS)
