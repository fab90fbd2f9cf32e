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
import numpy as np

from jax_unpool._api import max_unpool2d
from jax_unpool.pooling import max_pool2d_with_indices

__all__ = ["MaxPool2d", "MaxUnpool2d"]

IntOrPair = int | tuple[int, int]


class MaxPool2d(nnx.Module):
    """Max pooling with indices, as ``torch.nn.MaxPool2d(..., return_indices=True)``.

    ``pool(x)`` returns ``(values, indices)``: see :func:`jax_unpool.max_pool2d_with_indices`
    for the semantics, shapes and errors. ``x`` is ``(N, H, W, C)`` or ``(H, W, C)`` by
    default; ``data_format="NCHW"`` (or ``"CHW"``) for channels-first data. Indices are flat
    positions ``h * W + w`` inside each input plane, ready for :class:`MaxUnpool2d`.
    The layer has no parameters.
    """

    def __init__(self, kernel_size: IntOrPair, stride: IntOrPair | None = None,
                 padding: IntOrPair = 0, dilation: IntOrPair = 1, ceil_mode: bool = False,
                 data_format: str = "NHWC"):
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.ceil_mode = ceil_mode
        self.data_format = data_format

    def __call__(self, x: Any) -> tuple[jax.Array, jax.Array]:
        return max_pool2d_with_indices(x, self.kernel_size, self.stride, self.padding,
                                       self.dilation, self.ceil_mode,
                                       data_format=_unbatched(self.data_format, x))


class MaxUnpool2d(nnx.Module):
    """Max-unpooling, as ``torch.nn.MaxUnpool2d``: the partial inverse of :class:`MaxPool2d`.

    ``unpool(y, indices, output_size=None)`` scatters ``y`` into zeros at ``indices``: see
    :func:`jax_unpool.max_unpool2d` for the semantics, shapes and errors. Without
    ``output_size``, ``H_out = (H - 1) * stride - 2 * padding + kernel_size``; pass the
    pooled input's size (a pair or a full shape) when the pooling dropped rows or columns.
    ``y`` is ``(N, H, W, C)`` or ``(H, W, C)`` by default. The layer has no parameters.
    """

    def __init__(self, kernel_size: IntOrPair, stride: IntOrPair | None = None,
                 padding: IntOrPair = 0, data_format: str = "NHWC"):
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.data_format = data_format

    def __call__(self, y: Any, indices: Any, output_size: Any = None) -> jax.Array:
        return max_unpool2d(y, indices, self.kernel_size, self.stride, self.padding,
                            output_size, data_format=_unbatched(self.data_format, y))


def _unbatched(data_format: str, x: Any) -> str:
    """A layer built for batches also takes one example: NHWC -> HWC, NCHW -> CHW."""
    if data_format in ("NHWC", "NCHW") and np.ndim(x) == 3:
        return data_format[1:]
    return data_format
