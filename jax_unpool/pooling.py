"""``max_pool2d_with_indices``: PyTorch's max pooling with argmax indices, in XLA ops.

This module imports only jax and numpy so that it works on its own (it is the
producer of the indices that ``max_unpool2d`` consumes, and the oracle tests
use it without the compiled extension).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import NamedTuple, Union

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["max_pool2d_with_indices"]

_FN = "max_pool2d_with_indices"

IntOrPair = Union[int, Sequence[int]]

_CHANNELS_FIRST = ("NCHW", "CHW")
_CHANNELS_LAST = ("NHWC", "HWC")


class _Geometry(NamedTuple):
    """Static (hashable) pooling configuration, one entry per spatial axis (H, W)."""

    in_size: tuple[int, int]
    out_size: tuple[int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    channels_last: bool
    index_dtype: np.dtype


# --------------------------------------------------------------------------- #
# Argument handling
# --------------------------------------------------------------------------- #


def _is_int(v: object) -> bool:
    # bool is an int subclass, but kernel_size=True is a bug, not a size.
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _pair(value: object, name: str) -> tuple[int, int]:
    """Ints or pairs (length-1 sequences too, as PyTorch) -> (h, w)."""
    if _is_int(value):
        return (int(value), int(value))
    if isinstance(value, (tuple, list)) and len(value) in (1, 2) and all(map(_is_int, value)):
        vals = tuple(int(v) for v in value)
        return (vals[0], vals[-1])
    raise TypeError(
        f"{_FN}: {name} must be an int or a pair of ints (h, w), got {value!r}"
    )


def _output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape`` (aten/src/ATen/native/Pool.h)."""
    num = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1  # Python's // floors, like PyTorch's div_rtn
    # ceil_mode: the last window must start inside the input or the left padding.
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _index_dtype(index_dtype: object) -> np.dtype:
    try:
        dt = np.dtype(index_dtype)
    except TypeError:
        raise TypeError(
            f"{_FN}: index_dtype must be int32 or int64, got {index_dtype!r}"
        ) from None
    if dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"{_FN}: index_dtype must be int32 or int64, got {dt.name}")
    canonical = np.dtype(jax.dtypes.canonicalize_dtype(dt))
    if canonical != dt:
        # Same behaviour (and wording) as jnp functions asked for a 64-bit dtype
        # with x64 disabled: warn, then use the 32-bit one.
        warnings.warn(
            f"Explicitly requested dtype {dt.name} requested in {_FN} is not "
            f"available, and will be truncated to dtype {canonical.name}. To enable "
            "more dtypes, set the jax_enable_x64 configuration option or the "
            "JAX_ENABLE_X64 shell environment variable. See "
            "https://github.com/jax-ml/jax#current-gotchas for more.",
            stacklevel=4,  # point at the caller of max_pool2d_with_indices
        )
    return canonical


def _geometry(
    shape: tuple[int, ...],
    kernel_size: IntOrPair,
    stride: IntOrPair | None,
    padding: IntOrPair,
    dilation: IntOrPair,
    ceil_mode: bool,
    data_format: str,
    index_dtype: object,
) -> _Geometry:
    """Validate everything at trace time (PyTorch's checks, as Python errors)."""
    if not isinstance(data_format, str) or data_format not in _CHANNELS_FIRST + _CHANNELS_LAST:
        raise ValueError(
            f"{_FN}: data_format must be one of 'NCHW', 'CHW', 'NHWC', 'HWC', "
            f"got {data_format!r}"
        )
    channels_last = data_format in _CHANNELS_LAST
    if len(shape) not in (3, 4):
        layout = "(C, H, W) or (N, C, H, W)" if not channels_last else "(H, W, C) or (N, H, W, C)"
        raise ValueError(
            f"{_FN}: x must be 3-D or 4-D {layout}, got a {len(shape)}-D array of shape {shape}"
        )
    in_size = (shape[-3], shape[-2]) if channels_last else (shape[-2], shape[-1])

    kernel = _pair(kernel_size, "kernel_size")
    stride_ = kernel if stride is None else _pair(stride, "stride")
    pad = _pair(padding, "padding")
    dil = _pair(dilation, "dilation")
    if min(kernel) <= 0:
        raise ValueError(f"{_FN}: kernel_size must be positive, got {kernel}")
    if min(stride_) <= 0:
        raise ValueError(f"{_FN}: stride must be positive, got {stride_}")
    if min(dil) <= 0:
        raise ValueError(f"{_FN}: dilation must be positive, got {dil}")
    if min(pad) < 0:
        raise ValueError(f"{_FN}: padding must be non-negative, got {pad}")
    # PyTorch's rule compares with the kernel size itself, not the dilated one.
    if pad[0] > kernel[0] // 2 or pad[1] > kernel[1] // 2:
        raise ValueError(
            f"{_FN}: padding must be at most half of kernel_size "
            f"(padding <= kernel_size // 2), got padding={pad} and kernel_size={kernel}"
        )
    if min(in_size) <= 0:
        raise ValueError(
            f"{_FN}: x must have non-empty spatial dimensions (H, W), got (H, W)={in_size} "
            f"for shape {shape} and data_format={data_format!r}"
        )
    out_size = tuple(
        _output_size(in_size[a], kernel[a], stride_[a], pad[a], dil[a], bool(ceil_mode))
        for a in range(2)
    )
    if min(out_size) <= 0:
        raise ValueError(
            f"{_FN}: output size must be positive, got (H_out, W_out)={out_size} for "
            f"input (H, W)={in_size}, kernel_size={kernel}, stride={stride_}, "
            f"padding={pad}, dilation={dil}, ceil_mode={bool(ceil_mode)}: the input is "
            "too small"
        )
    g = _Geometry(
        in_size=in_size,
        out_size=out_size,  # type: ignore[arg-type]
        kernel=kernel,
        stride=stride_,
        padding=pad,
        dilation=dil,
        channels_last=channels_last,
        index_dtype=_index_dtype(index_dtype),
    )
    # Flat indices silently wrap around in a too-narrow integer type.
    largest = int(_positions(g, 0).max()) * in_size[1] + int(_positions(g, 1).max())
    if largest > np.iinfo(g.index_dtype).max:
        raise ValueError(
            f"{_FN}: index_dtype {g.index_dtype.name} cannot hold the flat indices of an "
            f"(H, W)={in_size} plane (up to {largest}); use index_dtype=int64 with "
            "jax_enable_x64"
        )
    return g


# --------------------------------------------------------------------------- #
# Static window geometry (numpy; the shapes are known at trace time)
# --------------------------------------------------------------------------- #


def _positions(g: _Geometry, axis: int) -> np.ndarray:
    """(out, k) input coordinate of kernel tap t of window o along one axis (may be padding)."""
    o = np.arange(g.out_size[axis])[:, None]
    t = np.arange(g.kernel[axis])[None, :]
    return o * g.stride[axis] - g.padding[axis] + t * g.dilation[axis]


def _first_in_bounds(g: _Geometry, axis: int) -> np.ndarray:
    """PyTorch's initial argmax coordinate: the window start, moved by whole dilation
    steps past the left padding (``while (ih0 < 0) ih0 += dilationH``).

    It can still lie past the right edge when a ceil_mode window holds no input
    element at all; PyTorch then returns that (out-of-range) index and -inf, and so
    do we.
    """
    start = np.arange(g.out_size[axis]) * g.stride[axis] - g.padding[axis]
    d = g.dilation[axis]
    steps = np.where(start < 0, -(start // d), 0)  # ceil(-start / d) for start < 0
    return start + steps * d


def _spatial_axes(g: _Geometry) -> tuple[int, int]:
    # Operands are always 4-D here (a 3-D x gets a unit batch axis).
    return (1, 2) if g.channels_last else (2, 3)


def _plane(a: np.ndarray, g: _Geometry) -> np.ndarray:
    """(Ho, Wo) array -> broadcastable against the 4-D output in either layout."""
    return a[:, :, None] if g.channels_last else a


def _padded(x: jax.Array, g: _Geometry, fill: jax.Array) -> jax.Array:
    """Pad left by `padding` and pad/trim right so that every tap slice fits exactly."""
    config = [(0, 0, 0)] * 4
    for a, ax in enumerate(_spatial_axes(g)):
        span = (g.out_size[a] - 1) * g.stride[a] + (g.kernel[a] - 1) * g.dilation[a] + 1
        hi = span - g.padding[a] - g.in_size[a]  # negative = trim rows no window reaches
        config[ax] = (g.padding[a], hi, 0)
    return lax.pad(x, fill, config)


def _tap(xp: jax.Array, g: _Geometry, i: int, j: int) -> jax.Array:
    """Element (i, j) of every window, as one strided slice: shape of the output."""
    start, limit, strides = [0] * 4, list(xp.shape), [1] * 4
    for a, ax, t in zip(range(2), _spatial_axes(g), (i, j)):
        start[ax] = t * g.dilation[a]
        limit[ax] = start[ax] + (g.out_size[a] - 1) * g.stride[a] + 1
        strides[ax] = g.stride[a]
    return lax.slice(xp, start, limit, strides)


def _lowest(dtype: np.dtype) -> np.ndarray:
    """Padding value: below (or tied with) every element, never NaN."""
    if jnp.issubdtype(dtype, jnp.floating):
        neg_inf = np.array(-np.inf).astype(dtype)
        # Some float8 formats have no inf (-inf would become NaN, which wins).
        return neg_inf if np.isinf(neg_inf) else np.array(jnp.finfo(dtype).min, dtype)
    return np.array(jnp.iinfo(dtype).min, dtype)


# --------------------------------------------------------------------------- #
# The op
# --------------------------------------------------------------------------- #


def _pool_impl(x: jax.Array, g: _Geometry) -> tuple[jax.Array, jax.Array]:
    rows, cols = _positions(g, 0), _positions(g, 1)
    width = g.in_size[1]
    xp = _padded(x, g, jnp.asarray(_lowest(x.dtype)))
    # Like PyTorch's loop: start from (lowest value, first in-bounds position) and
    # let only a strictly greater element or a NaN replace it. Tap (0, 0) is that
    # start: it is the first in-bounds element or padding (= lowest, loses every
    # later comparison, so the index stays the first in-bounds one). Padding is
    # never selected, even against an all -inf / all dtype-min input.
    first = _first_in_bounds(g, 0)[:, None] * width + _first_in_bounds(g, 1)[None, :]
    best = _tap(xp, g, 0, 0)
    idx = jnp.broadcast_to(jnp.asarray(_plane(first, g), g.index_dtype), best.shape)
    is_float = jnp.issubdtype(x.dtype, jnp.inexact)
    # A Python loop over the kh*kw kernel taps (not over positions): each step is
    # dense elementwise work that XLA fuses into one loop.
    for i in range(g.kernel[0]):
        for j in range(g.kernel[1]):
            if i == 0 and j == 0:
                continue
            v = _tap(xp, g, i, j)
            # PyTorch CPU and CUDA: `val > maxval || isnan(val)`; every later NaN
            # replaces an earlier one, so the LAST NaN in scan order wins.
            take = v > best
            if is_float:
                take = take | jnp.isnan(v)
            tap_idx = rows[:, i][:, None] * width + cols[:, j][None, :]
            best = jnp.where(take, v, best)
            idx = jnp.where(take, jnp.asarray(_plane(tap_idx, g), g.index_dtype), idx)
    return best, idx


def _gather_tangent(t: jax.Array, idx: jax.Array, g: _Geometry) -> jax.Array:
    """t at the argmax positions: a gather on the flattened (H*W) plane.

    Linear in t; XLA's gather transposes into a scatter-add, so reverse mode adds
    each output cotangent into its argmax position (right for overlapping
    windows). On CPU this measured faster than a select chain over the tap
    slices, whose transpose (interior pads) XLA fuses with a recomputation of
    the whole forward pass per input element.
    """
    n = t.shape[0]
    plane = g.in_size[0] * g.in_size[1]
    out_plane = g.out_size[0] * g.out_size[1]  # explicit: -1 fails for N=0 or C=0
    # Indices of all-padding ceil_mode windows (see _first_in_bounds) behave as
    # in PyTorch's backward: past the plane they read 0 and their cotangent is
    # dropped; past a row's end they land on the next row's element.
    if g.channels_last:
        flat_t = t.reshape(n, plane, t.shape[-1])
        flat_i = idx.reshape(n, out_plane, idx.shape[-1])
        axis = 1
    else:
        flat_t = t.reshape(n, t.shape[1], plane)
        flat_i = idx.reshape(n, idx.shape[1], out_plane)
        axis = 2
    out = jnp.take_along_axis(flat_t, flat_i, axis=axis, mode="fill", fill_value=0)
    return out.reshape(idx.shape)


# custom_jvp rather than differentiating the select chain: the tangent is one
# gather at the argmax (not kh*kw selects), and integer x (float0 tangent) and
# the indices (no gradient) are handled explicitly.
_pool = jax.custom_jvp(_pool_impl, nondiff_argnums=(1,))
# One compiled computation per geometry, so that eager calls do not dispatch the
# kh*kw tap loop op by op (under an outer jit this is simply inlined).
_pool_jit = jax.jit(_pool, static_argnums=(1,))


@_pool.defjvp
def _pool_jvp(g: _Geometry, primals: tuple, tangents: tuple) -> tuple:
    (x,), (t,) = primals, tangents
    out, idx = _pool(x, g)
    if t.dtype == jax.dtypes.float0:  # integer x: nothing to differentiate
        t_out = np.zeros(out.shape, jax.dtypes.float0)
    else:
        t_out = _gather_tangent(t, idx, g)
    return (out, idx), (t_out, np.zeros(idx.shape, jax.dtypes.float0))


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
    indices are not differentiable (float0 tangent). Works under ``jit``,
    ``vmap``, ``grad``, ``jvp`` and higher orders.

    Raises (at trace time, naming the argument and the received value):
      ValueError: ``x`` not 3-D/4-D; empty H or W; kernel_size, stride or
        dilation not positive; padding negative or above ``kernel_size // 2``;
        output size not positive; unknown ``data_format``; int32 indices too
        narrow for the plane.
      TypeError: kernel_size/stride/padding/dilation not ints or pairs of ints;
        ``index_dtype`` not int32/int64; complex ``x``.
    """
    x = jnp.asarray(x)
    g = _geometry(
        x.shape, kernel_size, stride, padding, dilation, ceil_mode, data_format, index_dtype
    )
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise TypeError(f"{_FN}: x must have a real dtype (max needs an order), got {x.dtype}")
    unbatched = x.ndim == 3
    if unbatched:
        x = x[None]
    if x.dtype == jnp.bool_:
        # Comparisons on bool are awkward in XLA; uint8 orders False < True the same.
        out, idx = _pool_jit(x.astype(jnp.uint8), g)
        out = out.astype(jnp.bool_)
    else:
        out, idx = _pool_jit(x, g)
    if unbatched:
        out, idx = out[0], idx[0]
    return out, idx
