"""``max_pool{1,2,3}d_with_indices``: PyTorch's max pooling with argmax indices.

Each binds its rank's pool primitive (jax_unpool._pool_primitives): on CPU one native pass
over x (the jax_unpool_max_pool_v1 kernel), elsewhere XLA ops (jax_unpool._pool_xla). The
gradient w.r.t. x goes through the unpool primitives (the native CPU kernel, aclnn on the
NPU) whenever each input position is the argmax of at most one window; otherwise it is
XLA's scatter-add.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jax_unpool import _args, _pool_xla
from jax_unpool._pool_primitives import max_pool_p
from jax_unpool._pool_xla import IntOrPair

__all__ = ["max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices"]


def _max_pool(fn: str, k: int, x, kernel_size, stride, padding, dilation, ceil_mode,
              data_format, index_dtype) -> tuple[jax.Array, jax.Array]:
    """Checks the arguments as PyTorch does (errors name `fn`), then binds the primitive."""
    x = _args.as_array(fn, "x", x)
    g = _pool_xla.geometry(fn, k, x.shape, kernel_size, stride, padding, dilation, ceil_mode,
                           data_format, index_dtype)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise TypeError(f"{fn}: x must have a real dtype (max needs an order), got {x.dtype}")
    values, indices = max_pool_p[k].bind(
        x, kernel_size=g.kernel, stride=g.stride, padding=g.padding, dilation=g.dilation,
        ceil_mode=bool(ceil_mode), channels_last=g.channels_last, index_dtype=g.index_dtype)
    return values, indices


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
      which lies past the end of a row or of the plane. In the gradient an index
      past a row's end gets its cotangent on the next row's element, as in
      PyTorch; one past the plane has its cotangent dropped, where PyTorch's CPU
      backward adds it unchecked into the next plane's gradient or past the end
      of the buffer: ``cpu_max_pool_backward`` in
      aten/src/ATen/native/cpu/MaxPoolKernel.cpp.)

    Args:
      x: ``(N, C, H, W)`` or ``(C, H, W)``; with ``data_format="NHWC"`` (or
        ``"HWC"``) ``(N, H, W, C)`` or ``(H, W, C)``. Any real dtype: floats
        (float16/bfloat16 included), integers and bool.
      kernel_size: the window, an int or an ``(h, w)`` pair (ints, a tuple, a list or a
        1-D integer numpy array), as in PyTorch.
      stride: the window's step, an int or a pair; defaults to ``kernel_size``.
      padding: implicit padding on both sides of each spatial axis, an int or a pair, at
        most ``kernel_size // 2``; it counts as -inf.
      dilation: the spacing of the window's taps, an int or a pair (default 1).
      ceil_mode: round the output size up instead of down (PyTorch's rule above).
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
    ``max_unpool2d`` of the cotangent into the input plane (the native kernel). Works
    under ``jit``, ``vmap``, ``grad``, ``jvp`` and higher orders, and under sharding of N
    and C (no communication). On CPU values and indices come from one native pass over
    ``x``; elsewhere from XLA ops.

    Raises:
      ValueError: at trace time (naming the argument and the received value): ``x``
        not 3-D/4-D; empty H or W; kernel_size, stride or dilation not positive; padding
        negative or above ``kernel_size // 2``; a size above 2**31 - 1 (PyTorch's int32
        limit); output size not positive; unknown ``data_format``; int32 indices too
        narrow for the plane.
      TypeError: at trace time: ``x`` not an array of numbers;
        kernel_size/stride/padding/dilation not ints or pairs of ints (tuples, lists or
        1-D integer numpy arrays); ``ceil_mode`` not a bool; ``index_dtype`` not
        int32/int64; complex ``x``.
    """
    return _max_pool("max_pool2d_with_indices", 2, x, kernel_size, stride, padding, dilation,
                     ceil_mode, data_format, index_dtype)


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
    return _max_pool("max_pool1d_with_indices", 1, x, kernel_size, stride, padding, dilation,
                     ceil_mode, data_format, index_dtype)


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
    return _max_pool("max_pool3d_with_indices", 3, x, kernel_size, stride, padding, dilation,
                     ceil_mode, data_format, index_dtype)
