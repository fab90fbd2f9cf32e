"""Flax Linen layers: ``MaxPool2d`` returns the argmax indices that ``MaxUnpool2d`` consumes.

The arguments, semantics and errors of the NNX layers (:mod:`jax_unpool.nnx`), as
``flax.linen.Module`` dataclasses: channels-last by default, as Flax is, batched or one
example. They have no parameters: ``init`` returns no variables and ``apply({}, x)`` runs
one. Flax is an optional extra (``pip install 'jax-unpool[flax]'``); ``import jax_unpool``
never imports this module on its own.
"""

from __future__ import annotations

from typing import Any, ClassVar

try:
    from flax import linen as nn
except ImportError as error:  # keep the reason (which import failed) in the chain
    raise ImportError(
        "jax_unpool.linen needs Flax, an optional extra: pip install 'jax-unpool[flax]'"
    ) from error

import jax
import jax.numpy as jnp

from jax_unpool._layers import POOLS, UNPOOLS, layer_data_format, static_size, unbatched

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]

IntOrTuple = int | tuple[int, ...]


def _keep_sizes(layer: nn.Module, *names: str) -> None:
    """The sizes as layers keep them (a Linen module is hashed: no list, no array)."""
    for name in names:
        object.__setattr__(layer, name, static_size(getattr(layer, name)))


class _MaxPool(nn.Module):
    """The pooling layer of every rank: `k` comes from the subclass."""

    k: ClassVar[int]  # spatial rank

    kernel_size: IntOrTuple
    stride: IntOrTuple | None = None
    padding: IntOrTuple = 0
    dilation: IntOrTuple = 1
    ceil_mode: bool = False
    data_format: str | None = None  # channels-last by default
    index_dtype: Any = jnp.int32
    index_format: str = "flat"  # or "window": a WindowIndices

    def __post_init__(self):
        layer_data_format(type(self).__name__, self.data_format, self.k)  # when built
        _keep_sizes(self, "kernel_size", "stride", "padding", "dilation")
        super().__post_init__()

    def __call__(self, x: Any) -> tuple[jax.Array, Any]:
        data_format = layer_data_format(type(self).__name__, self.data_format, self.k)
        return POOLS[self.k](x, self.kernel_size, self.stride, self.padding, self.dilation,
                             self.ceil_mode, data_format=unbatched(data_format, x, self.k),
                             index_dtype=self.index_dtype, index_format=self.index_format)


class _MaxUnpool(nn.Module):
    """The unpooling layer of every rank: `k` comes from the subclass."""

    k: ClassVar[int]

    kernel_size: IntOrTuple
    stride: IntOrTuple | None = None
    padding: IntOrTuple = 0
    data_format: str | None = None

    def __post_init__(self):
        layer_data_format(type(self).__name__, self.data_format, self.k)  # when built
        _keep_sizes(self, "kernel_size", "stride", "padding")
        super().__post_init__()

    def __call__(self, y: Any, indices: Any, output_size: Any = None) -> jax.Array:
        data_format = layer_data_format(type(self).__name__, self.data_format, self.k)
        return UNPOOLS[self.k](y, indices, self.kernel_size, self.stride, self.padding,
                               output_size, data_format=unbatched(data_format, y, self.k))


class MaxPool2d(_MaxPool):
    """Max pooling with indices, as ``torch.nn.MaxPool2d(..., return_indices=True)``.

    ``MaxPool2d(kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
    data_format=None, index_dtype=jnp.int32, index_format="flat")``; ``pool(x)`` returns
    ``(values, indices)``:
    see :func:`jax_unpool.max_pool2d_with_indices` for the semantics, shapes and errors.
    ``x`` is ``(N, H, W, C)`` or ``(H, W, C)`` by default; ``data_format="NCHW"`` (or
    ``"CHW"``) for channels-first data. Indices are flat positions ``h * W + w`` inside
    each input plane, ready for :class:`MaxUnpool2d`, of ``index_dtype``: int32, or int64
    (PyTorch's, with ``jax_enable_x64``); ``index_format="window"`` returns a
    :class:`jax_unpool.WindowIndices` instead (one byte per index), which
    :class:`MaxUnpool2d` takes the same way. The layer has no parameters.
    """

    k = 2


class MaxUnpool2d(_MaxUnpool):
    """Max-unpooling, as ``torch.nn.MaxUnpool2d``: the partial inverse of :class:`MaxPool2d`.

    ``MaxUnpool2d(kernel_size, stride=None, padding=0, data_format=None)``; ``unpool(y,
    indices, output_size=None)`` scatters ``y`` into zeros at ``indices``: see
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
