"""Flax NNX layers: ``MaxPool2d`` returns the argmax indices that ``MaxUnpool2d`` consumes.

NHWC by default, as Flax is. Flax is an optional extra (``pip install 'jax-unpool[flax]'``);
``import jax_unpool`` never imports this module on its own.
"""

from __future__ import annotations

from typing import Any

try:
    from flax import nnx
except ImportError as error:  # keep the reason (which import failed) in the chain
    raise ImportError(
        "jax_unpool.nnx needs Flax, an optional extra: pip install 'jax-unpool[flax]'"
    ) from error

import jax
import jax.numpy as jnp

from jax_unpool._layers import POOLS, UNPOOLS, layer_data_format, static_size, unbatched

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]

IntOrPair = int | tuple[int, ...]


class _MaxPool(nnx.Module):
    """The pooling layer of every rank: `k` comes from the subclass."""

    k: int  # spatial rank

    def __init__(self, kernel_size: IntOrPair, stride: IntOrPair | None = None,
                 padding: IntOrPair = 0, dilation: IntOrPair = 1, ceil_mode: bool = False,
                 data_format: str | None = None, index_dtype: Any = jnp.int32,
                 index_format: str = "flat"):
        # Tuples of ints: an NNX module's numpy arrays are state, traced under nnx.jit.
        self.kernel_size = static_size(kernel_size)
        self.stride = static_size(stride)
        self.padding = static_size(padding)
        self.dilation = static_size(dilation)
        self.ceil_mode = ceil_mode
        self.data_format = layer_data_format(type(self).__name__, data_format, self.k)
        self.index_dtype = index_dtype
        self.index_format = index_format

    def __call__(self, x: Any) -> tuple[jax.Array, Any]:
        return POOLS[self.k](x, self.kernel_size, self.stride, self.padding, self.dilation,
                             self.ceil_mode, data_format=unbatched(self.data_format, x, self.k),
                             index_dtype=self.index_dtype, index_format=self.index_format)


class _MaxUnpool(nnx.Module):
    """The unpooling layer of every rank: `k` comes from the subclass."""

    k: int

    def __init__(self, kernel_size: IntOrPair, stride: IntOrPair | None = None,
                 padding: IntOrPair = 0, data_format: str | None = None):
        self.kernel_size = static_size(kernel_size)
        self.stride = static_size(stride)
        self.padding = static_size(padding)
        self.data_format = layer_data_format(type(self).__name__, data_format, self.k)

    def __call__(self, y: Any, indices: Any, output_size: Any = None) -> jax.Array:
        return UNPOOLS[self.k](y, indices, self.kernel_size, self.stride, self.padding,
                               output_size, data_format=unbatched(self.data_format, y, self.k))


class MaxPool2d(_MaxPool):
    """Max pooling with indices, as ``torch.nn.MaxPool2d(..., return_indices=True)``.

    ``pool(x)`` returns ``(values, indices)``: see :func:`jax_unpool.max_pool2d_with_indices`
    for the semantics, shapes and errors. ``x`` is ``(N, H, W, C)`` or ``(H, W, C)`` by
    default; ``data_format="NCHW"`` (or ``"CHW"``) for channels-first data. Indices are flat
    positions ``h * W + w`` inside each input plane, ready for :class:`MaxUnpool2d`, of
    ``index_dtype``: int32, or int64 (PyTorch's, with ``jax_enable_x64``);
    ``index_format="window"`` returns a :class:`jax_unpool.WindowIndices` instead (one byte
    per index), which :class:`MaxUnpool2d` takes the same way. The layer has no parameters.
    """

    k = 2


class MaxUnpool2d(_MaxUnpool):
    """Max-unpooling, as ``torch.nn.MaxUnpool2d``: the partial inverse of :class:`MaxPool2d`.

    ``unpool(y, indices, output_size=None)`` scatters ``y`` into zeros at ``indices`` (flat
    indices, or a pool's :class:`jax_unpool.WindowIndices`, whose window must be the
    layer's): see
    :func:`jax_unpool.max_unpool2d` for the semantics, shapes and errors. Without
    ``output_size``, ``H_out = (H - 1) * stride - 2 * padding + kernel_size``; pass the
    pooled input's size (a pair or a full shape) when the pooling dropped rows or columns.
    ``y`` is ``(N, H, W, C)`` or ``(H, W, C)`` by default. The layer has no parameters.
    """

    k = 2


class MaxPool1d(_MaxPool):
    """:class:`MaxPool2d` for signals, as ``torch.nn.MaxPool1d(..., return_indices=True)``:
    ``x`` is ``(N, W, C)`` or ``(W, C)`` by default (``data_format="NCW"``/``"CW"`` for
    channels-first); see :func:`jax_unpool.max_pool1d_with_indices`."""

    k = 1


class MaxUnpool1d(_MaxUnpool):
    """:class:`MaxUnpool2d` for signals, as ``torch.nn.MaxUnpool1d``: ``y`` is ``(N, W, C)`` or
    ``(W, C)`` by default; see :func:`jax_unpool.max_unpool1d`."""

    k = 1


class MaxPool3d(_MaxPool):
    """:class:`MaxPool2d` for volumes, as ``torch.nn.MaxPool3d(..., return_indices=True)``:
    ``x`` is ``(N, D, H, W, C)`` or ``(D, H, W, C)`` by default (``data_format="NCDHW"``/
    ``"CDHW"`` for channels-first); see :func:`jax_unpool.max_pool3d_with_indices`."""

    k = 3


class MaxUnpool3d(_MaxUnpool):
    """:class:`MaxUnpool2d` for volumes, as ``torch.nn.MaxUnpool3d``: ``y`` is
    ``(N, D, H, W, C)`` or ``(D, H, W, C)`` by default; see :func:`jax_unpool.max_unpool3d`."""

    k = 3

