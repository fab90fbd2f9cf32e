"""The public functions, one per spatial rank as PyTorch's: each checks its arguments and
binds one of the two primitives, which serve every spatial rank."""

from __future__ import annotations

from typing import Any

import jax

from jax_unpool import _args
from jax_unpool._primitives import max_unpool_backward_p, max_unpool_p

IntOrPair = int | tuple[int, int]
IntOrTuple = int | tuple[int, ...]


def _unpool(fn: str, k: int, *args) -> jax.Array:
    x, indices, size, last = _args.unpool_operands(fn, k, *args)
    return max_unpool_p[k].bind(x, indices, output_size=size, channels_last=last)


def _unpool_backward(fn: str, k: int, *args) -> jax.Array:
    grad_output, indices, last = _args.unpool_backward_operands(fn, k, *args)
    return max_unpool_backward_p[k].bind(grad_output, indices, channels_last=last,
                                         spatial_rank=k)


def max_unpool2d(x: Any, indices: Any, kernel_size: IntOrPair | None = None,
                 stride: IntOrPair | None = None, padding: IntOrPair = 0,
                 output_size: Any = None, *, data_format: str = "NCHW") -> jax.Array:
    """Max-unpooling: the partial inverse of a max-pool, as ``torch.nn.functional.max_unpool2d``.

    ``out = zeros(N, C, H_out, W_out)``, then ``out[n, c, indices[n, c, i]] = x[n, c, i]``
    where each plane is flattened (``index = h * W_out + w``).

    Args:
      x: values, ``(N, C, H, W)`` or ``(C, H, W)`` (``(N, H, W, C)`` / ``(H, W, C)`` with
        ``data_format="NHWC"``). Any 1-, 2-, 4- or 8-byte dtype: bits are moved as they are.
      indices: int32 or int64, the shape of ``x``; flat positions inside an output plane.
      kernel_size: the pooling window, an int or an ``(h, w)`` pair (ints, a tuple, a list
        or a 1-D integer numpy array). Required unless ``output_size`` is given.
      stride: the pooling stride, an int or a pair; defaults to ``kernel_size``.
      padding: the pooling padding, an int or a pair (default 0). Without
        ``output_size``: ``H_out = (H - 1) * stride - 2 * padding + kernel_size``, and the
        same for ``W_out``.
      output_size: ``(H_out, W_out)`` or a full shape; with ``kernel_size`` it must lie
        strictly within ``stride`` of the default size (PyTorch's rule). A size may be 0
        (as in PyTorch): the result is empty.
      data_format: ``"NCHW"`` (default), ``"NHWC"``, or ``"CHW"`` / ``"HWC"`` for rank 3.

    Returns:
      ``x``'s layout with ``(H, W)`` replaced by ``(H_out, W_out)`` and ``x``'s dtype.
      Positions no index names are zero. Among duplicated indices in a plane the element
      with the largest flat input position wins, deterministically, on CPU and wherever
      the jnp reference runs (GPU, TPU); on an Ascend NPU through aclnn the result is
      deterministic but which duplicate wins is unspecified (CANN names no winner).

    Raises:
      ValueError: at trace time, for a bad rank, shape or size (each message names the
        function, the argument, what was expected and what was received).
      TypeError: at trace time, for a bad dtype or an argument of the wrong type.
      jax.errors.JaxRuntimeError: at run time on CPU, for an index outside
        ``[0, H_out * W_out)``, naming the index, its position ``(n, c, i)`` and the
        valid range. The jnp reference used on other platforms drops such an element
        instead.
    """
    return _unpool("max_unpool2d", 2, x, indices, kernel_size, stride,
                   padding, output_size, data_format)


def max_unpool1d(x: Any, indices: Any, kernel_size: IntOrTuple | None = None,
                 stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
                 output_size: Any = None, *, data_format: str = "NCW") -> jax.Array:
    """:func:`max_unpool2d` for 1-D signals, as ``torch.nn.functional.max_unpool1d``.

    ``x`` and ``indices`` are ``(N, C, W)`` or ``(C, W)`` (``(N, W, C)`` / ``(W, C)`` with
    ``data_format="NWC"``/``"WC"``); indices are positions ``w`` in ``[0, W_out)``;
    ``W_out = (W - 1) * stride - 2 * padding + kernel_size`` without ``output_size``.
    Everything else (dtypes, duplicates, errors, autodiff, vmap) is as in 2-D.
    """
    return _unpool("max_unpool1d", 1, x, indices, kernel_size, stride,
                   padding, output_size, data_format)


def max_unpool3d(x: Any, indices: Any, kernel_size: IntOrTuple | None = None,
                 stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
                 output_size: Any = None, *, data_format: str = "NCDHW") -> jax.Array:
    """:func:`max_unpool2d` for volumes, as ``torch.nn.functional.max_unpool3d``.

    ``x`` and ``indices`` are ``(N, C, D, H, W)`` or ``(C, D, H, W)`` (``(N, D, H, W, C)`` /
    ``(D, H, W, C)`` with ``data_format="NDHWC"``/``"DHWC"``); indices are flat positions
    ``d * H_out * W_out + h * W_out + w`` inside an output volume. Everything else is as
    in 2-D.
    """
    return _unpool("max_unpool3d", 3, x, indices, kernel_size, stride,
                   padding, output_size, data_format)


def max_unpool2d_backward(grad_output: Any, x: Any, indices: Any, output_size: Any, *,
                          data_format: str = "NCHW") -> jax.Array:
    """The gradient of :func:`max_unpool2d` w.r.t. ``x``: CANN's aclnnMaxUnpool2dBackward.

    ``out[n, c, i] = grad_output[n, c, indices[n, c, i]]`` (planes flattened).

    Args:
      grad_output: ``(N, C, H_out, W_out)`` or ``(C, H_out, W_out)``, ``x``'s dtype.
      x: the forward's input ("self" in CANN); only its shape and dtype are used, so a
        ``jax.ShapeDtypeStruct`` will do.
      indices: int32 or int64, ``x``'s shape.
      output_size: ``(H_out, W_out)`` or a full shape; must equal grad_output's spatial dims.
      data_format: as in :func:`max_unpool2d`.

    Returns:
      ``x``'s shape, ``grad_output``'s dtype. Every duplicate index reads its position
      (as PyTorch and CANN do).

    Raises:
      ValueError: at trace time, for a bad rank, shape or size, or an ``output_size``
        that is not ``grad_output``'s.
      TypeError: at trace time, for a bad dtype (``grad_output``'s must be ``x``'s).
      jax.errors.JaxRuntimeError: at run time on CPU, for an out-of-range index, as
        :func:`max_unpool2d`. The jnp reference used on other platforms reads 0 for it.
    """
    return _unpool_backward("max_unpool2d_backward", 2, grad_output, x,
                            indices, output_size, data_format)


def max_unpool1d_backward(grad_output: Any, x: Any, indices: Any, output_size: Any, *,
                          data_format: str = "NCW") -> jax.Array:
    """The gradient of :func:`max_unpool1d` w.r.t. ``x`` (a gather, as in 2-D)."""
    return _unpool_backward("max_unpool1d_backward", 1, grad_output, x,
                            indices, output_size, data_format)


def max_unpool3d_backward(grad_output: Any, x: Any, indices: Any, output_size: Any, *,
                          data_format: str = "NCDHW") -> jax.Array:
    """The gradient of :func:`max_unpool3d` w.r.t. ``x``: CANN's aclnnMaxUnpool3dBackward."""
    return _unpool_backward("max_unpool3d_backward", 3, grad_output, x,
                            indices, output_size, data_format)
