"""``max_pool{1,2,3}d_with_indices``: PyTorch's max pooling with argmax indices.

The forward is XLA ops (jax_unpool._pool_xla). The gradient w.r.t. x goes through the
unpool primitives (the native CPU kernel, aclnn on the NPU) whenever each input position
is the argmax of at most one window; otherwise it is XLA's scatter-add.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_unpool import _pool_xla
from jax_unpool._pool_xla import IntOrPair
from jax_unpool._primitives import max_unpool_backward_p

__all__ = ["max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices"]


def _gather_tangent(t: jax.Array, idx: jax.Array, g: _pool_xla.Geometry) -> jax.Array:
    """t at the argmax positions. With unique argmaxes (`argmax_is_unique`) it is the
    unpool primitives' gather, whose transpose is the unpool primitive (the native kernel
    on CPU, aclnn on the NPU; second order transposes back to the gather); otherwise
    XLA's gather, whose transpose is a scatter-add (overlapping windows sum up)."""
    if _pool_xla.argmax_is_unique(g):
        return max_unpool_backward_p[g.k].bind(t, idx, channels_last=g.channels_last,
                                               spatial_rank=g.k)
    return _pool_xla.gather_at_argmax(t, idx, g)


def max_pool2d_with_indices(
    x: jax.typing.ArrayLike,
    kernel_size: IntOrPair,
    stride: IntOrPair | None = None,
    padding: IntOrPair = 0,
    dilation: IntOrPair = 1,
    ceil_mode: bool = False,
    *,
    data_format: str = "NCHW",
    index_dtype: jax.typing.DTypeLike = jnp.int32,
) -> tuple[jax.Array, jax.Array]:
    """2-D max pooling that also returns the argmax of every window.

    Same results as ``torch.nn.functional.max_pool2d(x, kernel_size, stride,
    padding, dilation, ceil_mode, return_indices=True)``, values and indices:

    - ``kernel_size``, ``stride``, ``padding``, ``dilation``: an int or an
      ``(h, w)`` pair. ``stride`` defaults to ``kernel_size``.
    - Output size per spatial axis:
      ``floor((L + 2*p - d*(k - 1) - 1) / s) + 1``, rounded up instead with
      ``ceil_mode=True``, in which case a last window that would start beyond the
      input plus the left padding is dropped (PyTorch's rule).
    - Padding counts as -inf: it is never selected, even when the input is
      -inf or the integer dtype's minimum (then the first in-bounds element of
      the window is the index).
    - Ties: the first maximum in window scan order (row-major over the kernel
      taps) wins.
    - NaN propagates: a NaN beats every number, and among several NaNs in one
      window the LAST one in scan order wins (PyTorch's CPU and CUDA kernels
      test ``val > maxval || isnan(val)``).
    - Indices are flat positions in the unpadded input plane, ``h * W + w``, in
      both layouts. (PyTorch quirk, kept: a ``ceil_mode`` window that contains
      only padding, possible with dilation, returns -inf, or the dtype's
      minimum, and the flat index of its first tap right of the left padding,
      which lies past the end of a row or of the plane.)

    Args:
      x: ``(N, C, H, W)`` or ``(C, H, W)``; with ``data_format="NHWC"`` (or
        ``"HWC"``) ``(N, H, W, C)`` or ``(H, W, C)``. Any real dtype: floats
        (float16/bfloat16 included), integers and bool.
      kernel_size, stride, padding, dilation, ceil_mode: as in PyTorch.
      data_format: ``"NCHW"``/``"CHW"`` (channels first) or ``"NHWC"``/``"HWC"``
        (channels last); either spelling is accepted for 3-D and 4-D ``x``.
      index_dtype: ``int32`` or ``int64``. int64 needs ``jax_enable_x64``;
        without it JAX's usual rule applies (a warning, then int32).

    Returns:
      ``(values, indices)``, both shaped like ``x`` with ``(H, W)`` replaced by
      ``(H_out, W_out)``; ``values`` has ``x``'s dtype, ``indices`` has
      ``index_dtype``.

    Differentiation: w.r.t. ``x`` the gradient adds each output cotangent into
    its argmax position (sums where overlapping windows share an argmax); the
    indices are not differentiable (float0 tangent). Where windows cannot overlap
    (stride >= dilation * (kernel - 1) + 1 on every axis) the gradient is
    ``max_unpool2d`` of the cotangent into the input plane (the native kernel). Works under ``jit``,
    ``vmap``, ``grad``, ``jvp`` and higher orders.

    Raises (at trace time, naming the argument and the received value):
      ValueError: ``x`` not 3-D/4-D; empty H or W; kernel_size, stride or
        dilation not positive; padding negative or above ``kernel_size // 2``;
        output size not positive; unknown ``data_format``; int32 indices too
        narrow for the plane.
      TypeError: kernel_size/stride/padding/dilation not ints or pairs of ints;
        ``index_dtype`` not int32/int64; complex ``x``.
    """
    return _pool_xla.max_pool("max_pool2d_with_indices", 2, x, kernel_size, stride, padding, dilation,
                     ceil_mode, data_format, index_dtype, _gather_tangent)


def max_pool1d_with_indices(
    x: jax.typing.ArrayLike,
    kernel_size: IntOrPair,
    stride: IntOrPair | None = None,
    padding: IntOrPair = 0,
    dilation: IntOrPair = 1,
    ceil_mode: bool = False,
    *,
    data_format: str = "NCW",
    index_dtype: jax.typing.DTypeLike = jnp.int32,
) -> tuple[jax.Array, jax.Array]:
    """1-D max pooling with argmax indices, as ``torch.nn.functional.max_pool1d(...,
    return_indices=True)``.

    ``x`` is ``(N, C, W)`` or ``(C, W)`` (``(N, W, C)`` / ``(W, C)`` with
    ``data_format="NWC"``/``"WC"``); indices are positions ``w``. Everything else -- output
    size, ``ceil_mode``, ``dilation``, padding never selected, ties, NaN, dtypes,
    differentiation, errors -- is as in :func:`max_pool2d_with_indices`.
    """
    return _pool_xla.max_pool("max_pool1d_with_indices", 1, x, kernel_size, stride, padding, dilation,
                     ceil_mode, data_format, index_dtype, _gather_tangent)


def max_pool3d_with_indices(
    x: jax.typing.ArrayLike,
    kernel_size: IntOrPair,
    stride: IntOrPair | None = None,
    padding: IntOrPair = 0,
    dilation: IntOrPair = 1,
    ceil_mode: bool = False,
    *,
    data_format: str = "NCDHW",
    index_dtype: jax.typing.DTypeLike = jnp.int32,
) -> tuple[jax.Array, jax.Array]:
    """3-D max pooling with argmax indices, as ``torch.nn.functional.max_pool3d(...,
    return_indices=True)``.

    ``x`` is ``(N, C, D, H, W)`` or ``(C, D, H, W)`` (``(N, D, H, W, C)`` / ``(D, H, W, C)``
    with ``data_format="NDHWC"``/``"DHWC"``); indices are flat positions
    ``d * H * W + h * W + w`` inside each input volume; windows are scanned in (d, h, w)
    order. Everything else is as in :func:`max_pool2d_with_indices`.
    """
    return _pool_xla.max_pool("max_pool3d_with_indices", 3, x, kernel_size, stride, padding, dilation,
                     ceil_mode, data_format, index_dtype, _gather_tangent)
