"""Equinox layers: ``MaxPool2d`` returns the argmax indices that ``MaxUnpool2d`` consumes.

As Equinox's own layers (``eqx.nn.MaxPool2d``, ``eqx.nn.Conv2d``): channels first, one
unbatched example ``(C, *spatial)`` per call, ``jax.vmap`` for a batch, and a keyword-only
``key`` that is ignored. The hyperparameters are static fields, so a layer has no array
leaves. Equinox is an optional extra (``pip install 'jax-unpool[equinox]'``); ``import
jax_unpool`` never imports this module on its own.
"""

from __future__ import annotations

from typing import Any, ClassVar

try:
    import equinox as eqx
except ImportError as error:  # keep the reason (which import failed) in the chain
    raise ImportError(
        "jax_unpool.equinox needs Equinox, an optional extra: pip install 'jax-unpool[equinox]'"
    ) from error

import jax
import jax.numpy as jnp
import numpy as np

from jax_unpool._geometry import SPATIAL
from jax_unpool._layers import POOLS, UNPOOLS, channels_first_example, static_size

__all__ = ["MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d"]

IntOrTuple = int | tuple[int, ...]


def _size(**kwargs: Any) -> Any:
    # Static: an eqx.Module is hashable and compared (a static jit argument, a cache key).
    return eqx.field(static=True, converter=static_size, **kwargs)


def _check_one_example(layer: eqx.Module, name: str, a: Any, args: str) -> None:
    """Equinox layers take one example; a batch goes through jax.vmap."""
    k = layer.num_spatial_dims
    if np.ndim(a) != k + 1:
        dims = ", ".join(SPATIAL[k])
        raise ValueError(
            f"jax_unpool.equinox.{type(layer).__name__}: {name} must be one example "
            f"(C, {dims}) of rank {k + 1}, got rank {np.ndim(a)} with shape {np.shape(a)}; "
            f"Equinox layers take one example: for a batch use jax.vmap(layer)({args})")


class _MaxPool(eqx.Module):
    """The pooling layer of every rank: `num_spatial_dims` comes from the subclass."""

    num_spatial_dims: ClassVar[int]

    kernel_size: IntOrTuple = _size()
    stride: IntOrTuple | None = _size(default=None)
    padding: IntOrTuple = _size(default=0)
    dilation: IntOrTuple = _size(default=1)
    ceil_mode: bool = eqx.field(static=True, default=False)
    index_dtype: Any = eqx.field(static=True, default=jnp.int32)
    index_format: str = eqx.field(static=True, default="flat")  # or "window"

    def __call__(self, x: jax.Array, *, key: jax.Array | None = None
                 ) -> tuple[jax.Array, Any]:
        """``x``: ``(C, *spatial)``. ``key`` is ignored (Equinox's layer signature).
        Returns ``(values, indices)``, each ``(C, *spatial_out)``."""
        del key
        _check_one_example(self, "x", x, "x")
        k = self.num_spatial_dims
        return POOLS[k](x, self.kernel_size, self.stride, self.padding, self.dilation,
                        self.ceil_mode, data_format=channels_first_example(k),
                        index_dtype=self.index_dtype, index_format=self.index_format)


class _MaxUnpool(eqx.Module):
    """The unpooling layer of every rank: `num_spatial_dims` comes from the subclass."""

    num_spatial_dims: ClassVar[int]

    kernel_size: IntOrTuple = _size()
    stride: IntOrTuple | None = _size(default=None)
    padding: IntOrTuple = _size(default=0)

    def __call__(self, y: jax.Array, indices: jax.Array, output_size: Any = None, *,
                 key: jax.Array | None = None) -> jax.Array:
        """``y`` and ``indices``: ``(C, *spatial)``; ``output_size``: the spatial sizes or
        the full ``(C, *spatial_out)`` shape. ``key`` is ignored."""
        del key
        _check_one_example(self, "y", y, "y, indices")
        k = self.num_spatial_dims
        return UNPOOLS[k](y, indices, self.kernel_size, self.stride, self.padding,
                          output_size, data_format=channels_first_example(k))


class MaxPool2d(_MaxPool):
    """Max pooling with indices, as ``torch.nn.MaxPool2d(..., return_indices=True)``.

    ``MaxPool2d(kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
    index_dtype=jnp.int32, index_format="flat")``; ``pool(x)`` takes one example
    ``(C, H, W)`` and returns
    ``(values, indices)``, each ``(C, H_out, W_out)``: see
    :func:`jax_unpool.max_pool2d_with_indices` for the semantics and errors (``stride``
    defaults to ``kernel_size``, as in PyTorch; sizes are ints or pairs: tuples, lists or
    1-D integer numpy arrays). Indices are flat positions ``h * W + w`` inside each plane,
    ready for :class:`MaxUnpool2d`, of ``index_dtype``: int32, or int64 (PyTorch's, with
    ``jax_enable_x64``); ``index_format="window"`` returns a
    :class:`jax_unpool.WindowIndices` instead (one byte per index), which
    :class:`MaxUnpool2d` takes the same way.
    ``jax.vmap(pool)(xs)`` pools a batch ``(N, C, H, W)``. A batched ``x`` raises
    ValueError. The layer has no parameters.
    """

    num_spatial_dims = 2


class MaxUnpool2d(_MaxUnpool):
    """Max-unpooling, as ``torch.nn.MaxUnpool2d``: the partial inverse of :class:`MaxPool2d`.

    ``MaxUnpool2d(kernel_size, stride=None, padding=0)``; ``unpool(y, indices,
    output_size=None)`` scatters one example ``y`` ``(C, H, W)`` into zeros at
    ``indices``: see :func:`jax_unpool.max_unpool2d` for the semantics and errors. Without
    ``output_size``, ``H_out = (H - 1) * stride - 2 * padding + kernel_size``; pass the
    pooled input's size (``(H, W)`` or its full shape) when the pooling dropped rows or
    columns. ``jax.vmap`` for a batch. The layer has no parameters.
    """

    num_spatial_dims = 2


class MaxPool1d(_MaxPool):
    """:class:`MaxPool2d` for signals, as ``torch.nn.MaxPool1d(..., return_indices=True)``:
    ``x`` is ``(C, W)``; see :func:`jax_unpool.max_pool1d_with_indices`."""

    num_spatial_dims = 1


class MaxUnpool1d(_MaxUnpool):
    """:class:`MaxUnpool2d` for signals, as ``torch.nn.MaxUnpool1d``: ``y`` is ``(C, W)``;
    see :func:`jax_unpool.max_unpool1d`."""

    num_spatial_dims = 1


class MaxPool3d(_MaxPool):
    """:class:`MaxPool2d` for volumes, as ``torch.nn.MaxPool3d(..., return_indices=True)``:
    ``x`` is ``(C, D, H, W)``; indices are flat positions ``d * H * W + h * W + w``; see
    :func:`jax_unpool.max_pool3d_with_indices`."""

    num_spatial_dims = 3


class MaxUnpool3d(_MaxUnpool):
    """:class:`MaxUnpool2d` for volumes, as ``torch.nn.MaxUnpool3d``: ``y`` is
    ``(C, D, H, W)``; see :func:`jax_unpool.max_unpool3d`."""

    num_spatial_dims = 3
