"""Max pooling with PyTorch's argmax indices in XLA ops: the geometry (PyTorch's argument
checks and output sizes, at trace time) and the forward as one strided slice per kernel
tap, which XLA fuses. ``jax_unpool.reference``'s pools are this module's `max_pool`; the
pool primitives (``jax_unpool._pool_primitives``) use the geometry, and the forward as
their lowering wherever there is no native kernel.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_unpool import _args, _symbolic

IntOrPair = int | Sequence[int]

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}  # the spatial dims of each rank, as PyTorch names them


def _formats(k: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(channels-first, channels-last) data formats of spatial rank k, e.g. NCHW/CHW, NHWC/HWC."""
    s = _SPATIAL[k]
    return (f"NC{s}", f"C{s}"), (f"N{s}C", f"{s}C")


class Geometry(NamedTuple):
    """Static (hashable) pooling configuration, one entry per spatial axis ((D,) H, W)."""

    in_size: tuple[int, ...]
    out_size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    channels_last: bool
    index_dtype: np.dtype

    @property
    def k(self) -> int:
        return len(self.in_size)

    def flat_strides(self) -> tuple[int, ...]:
        """Flat index = sum of coordinate * stride: (H*W, W, 1) for a (D, H, W) volume."""
        return tuple(int(np.prod(self.in_size[a + 1:])) for a in range(self.k))


# --------------------------------------------------------------------------- #
# Argument handling
# --------------------------------------------------------------------------- #


def _sizes(fn: str, value: object, name: str, k: int) -> tuple[int, ...]:
    """An int or k ints (length-1 sequences too, as PyTorch; a tuple, a list or a 1-D
    integer numpy array) -> one per spatial axis, each at most INT32_MAX (PyTorch's
    pooling takes int32 sizes: safe_downcast<int, int64_t> in DilatedMaxPool2d.cpp)."""
    sizes = (int(value),) * k if _args.is_int(value) else _args.int_tuple(value, (1, k))
    if sizes is None:
        what = {1: "a 1-tuple (w,)", 2: "a pair of ints (h, w)",
                3: "a triple of ints (d, h, w)"}[k]
        raise TypeError(f"{fn}: {name} must be an int or {what}, got {_args.received(value)}")
    sizes = sizes * (k // len(sizes))
    if max(sizes) > _args.INT32_MAX:
        raise ValueError(f"{fn}: {name} must be at most {_args.INT32_MAX} (PyTorch's pooling "
                         f"takes int32 sizes), got {sizes}")
    return sizes


def _output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape`` (aten/src/ATen/native/Pool.h)."""
    num = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1  # Python's // floors, like PyTorch's div_rtn
    # ceil_mode: the last window must start inside the input or the left padding.
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _index_dtype(fn: str, index_dtype: object) -> np.dtype:
    try:
        if index_dtype is None:  # np.dtype(None) is float64
            raise TypeError
        dt = np.dtype(index_dtype)
    except (TypeError, ValueError):
        raise TypeError(
            f"{fn}: index_dtype must be int32 or int64, got {_args.received(index_dtype)}"
        ) from None
    if dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        # A dtype's name; what np.dtype made of anything else ({} is "void") would puzzle.
        named = isinstance(index_dtype, (str, type, np.dtype)) or hasattr(index_dtype, "dtype")
        got = dt.name if named else _args.received(index_dtype)
        raise TypeError(f"{fn}: index_dtype must be int32 or int64, got {got}")
    canonical = np.dtype(jax.dtypes.canonicalize_dtype(dt))
    if canonical != dt:
        # Same behaviour (and wording) as jnp functions asked for a 64-bit dtype
        # with x64 disabled: warn, then use the 32-bit one.
        warnings.warn(
            f"Explicitly requested dtype {dt.name} requested in {fn} is not "
            f"available, and will be truncated to dtype {canonical.name}. To enable "
            "more dtypes, set the jax_enable_x64 configuration option or the "
            "JAX_ENABLE_X64 shell environment variable. See "
            "https://github.com/jax-ml/jax#current-gotchas for more.",
            stacklevel=5,  # point at the caller of max_pool{k}d_with_indices
        )
    return canonical


def geometry(
    fn: str,
    k: int,
    shape: tuple[int, ...],
    kernel_size: IntOrPair,
    stride: IntOrPair | None,
    padding: IntOrPair,
    dilation: IntOrPair,
    ceil_mode: bool,
    data_format: str,
    index_dtype: object,
) -> Geometry:
    """Validate everything at trace time (PyTorch's checks, as Python errors)."""
    first, last = _formats(k)
    if not isinstance(data_format, str) or data_format not in first + last:
        raise ValueError(
            f"{fn}: data_format must be one of {', '.join(map(repr, first + last))}, "
            f"got {data_format!r}"
        )
    channels_last = data_format in last
    names = _SPATIAL[k]
    if len(shape) not in (k + 1, k + 2):
        dims = ", ".join(names)
        layout = (f"({dims}, C) or (N, {dims}, C)" if channels_last
                  else f"(C, {dims}) or (N, C, {dims})")
        raise ValueError(
            f"{fn}: x must be {k + 1}-D or {k + 2}-D {layout}, got a {len(shape)}-D array "
            f"of shape {shape}"
        )
    in_size = tuple(shape[-k - 1:-1]) if channels_last else tuple(shape[-k:])
    if any(map(jax.export.is_symbolic_dim, in_size)):
        # The window geometry below is numpy, computed from the sizes at trace time.
        raise ValueError(
            f"{fn}: the spatial dims ({', '.join(names)}) must be known at trace time, got "
            f"({', '.join(names)})=({', '.join(map(str, in_size))}), symbolic (jax.export); "
            "only the batch and channel dims may be symbolic"
        )
    # Not bool(ceil_mode): "no" would be True, an array ambiguous. PyTorch takes bools only.
    if not isinstance(ceil_mode, (bool, np.bool_)):
        raise TypeError(f"{fn}: ceil_mode must be a bool, got {_args.received(ceil_mode)}")

    kernel = _sizes(fn, kernel_size, "kernel_size", k)
    stride_ = kernel if stride is None else _sizes(fn, stride, "stride", k)
    pad = _sizes(fn, padding, "padding", k)
    dil = _sizes(fn, dilation, "dilation", k)
    if min(kernel) <= 0:
        raise ValueError(f"{fn}: kernel_size must be positive, got {kernel}")
    if min(stride_) <= 0:
        raise ValueError(f"{fn}: stride must be positive, got {stride_}")
    if min(dil) <= 0:
        raise ValueError(f"{fn}: dilation must be positive, got {dil}")
    if min(pad) < 0:
        raise ValueError(f"{fn}: padding must be non-negative, got {pad}")
    # PyTorch's rule compares with the kernel size itself, not the dilated one.
    if any(p > kk // 2 for p, kk in zip(pad, kernel)):
        raise ValueError(
            f"{fn}: padding must be at most half of kernel_size "
            f"(padding <= kernel_size // 2), got padding={pad} and kernel_size={kernel}"
        )
    if min(in_size) <= 0:
        raise ValueError(
            f"{fn}: x must have non-empty spatial dimensions ({', '.join(names)}), got "
            f"({', '.join(names)})={in_size} for shape {shape} and "
            f"data_format={data_format!r}"
        )
    out_size = tuple(
        _output_size(in_size[a], kernel[a], stride_[a], pad[a], dil[a], bool(ceil_mode))
        for a in range(k)
    )
    if min(out_size) <= 0:
        out_names = ", ".join(f"{n}_out" for n in names)
        raise ValueError(
            f"{fn}: output size must be positive, got ({out_names})={out_size} for "
            f"input ({', '.join(names)})={in_size}, kernel_size={kernel}, stride={stride_}, "
            f"padding={pad}, dilation={dil}, ceil_mode={bool(ceil_mode)}: the input is "
            "too small"
        )
    g = Geometry(
        in_size=in_size,
        out_size=out_size,
        kernel=kernel,
        stride=stride_,
        padding=pad,
        dilation=dil,
        channels_last=channels_last,
        index_dtype=_index_dtype(fn, index_dtype),
    )
    # Flat indices silently wrap around in a too-narrow integer type. The last tap of the
    # last window is the largest position (computed, not listed: kernels may be huge).
    largest = sum(((g.out_size[a] - 1) * g.stride[a] - g.padding[a]
                   + (g.kernel[a] - 1) * g.dilation[a]) * st
                  for a, st in enumerate(g.flat_strides()))
    if largest > np.iinfo(g.index_dtype).max:
        raise ValueError(
            f"{fn}: index_dtype {g.index_dtype.name} cannot hold the flat indices of a "
            f"({', '.join(names)})={in_size} {'plane' if k < 3 else 'volume'} (up to "
            f"{largest}); use index_dtype=int64 with jax_enable_x64"
        )
    return g


# --------------------------------------------------------------------------- #
# Static window geometry (numpy; the shapes are known at trace time)
# --------------------------------------------------------------------------- #


def _positions(g: Geometry, axis: int) -> np.ndarray:
    """(out, k) input coordinate of kernel tap t of window o along one axis (may be padding)."""
    o = np.arange(g.out_size[axis])[:, None]
    t = np.arange(g.kernel[axis])[None, :]
    return o * g.stride[axis] - g.padding[axis] + t * g.dilation[axis]


def _first_in_bounds(g: Geometry, axis: int) -> np.ndarray:
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


def _spatial_axes(g: Geometry) -> tuple[int, ...]:
    # Operands are always batched here (an unbatched x gets a unit batch axis).
    return tuple(range(1, g.k + 1)) if g.channels_last else tuple(range(2, g.k + 2))


def _plane(a: np.ndarray, g: Geometry) -> np.ndarray:
    """An array of the output's spatial shape -> broadcastable against the batched output
    in either layout."""
    return a[..., None] if g.channels_last else a


def _flat_index(g: Geometry, coords: Sequence[np.ndarray]) -> np.ndarray:
    """Flat input positions of per-axis coordinates (each of shape (out_size[a],)),
    broadcast over the output's spatial shape."""
    total = np.zeros(g.out_size, np.int64)
    for a, (c, st) in enumerate(zip(coords, g.flat_strides())):
        shape = [1] * g.k
        shape[a] = -1
        total = total + c.reshape(shape) * st
    return total


def _padded(x: jax.Array, g: Geometry, fill: jax.Array) -> jax.Array:
    """Pad left by `padding` and pad/trim right so that every tap slice fits exactly."""
    config = [(0, 0, 0)] * x.ndim
    for a, ax in enumerate(_spatial_axes(g)):
        span = (g.out_size[a] - 1) * g.stride[a] + (g.kernel[a] - 1) * g.dilation[a] + 1
        hi = span - g.padding[a] - g.in_size[a]  # negative = trim rows no window reaches
        config[ax] = (g.padding[a], hi, 0)
    return lax.pad(x, fill, config)


def _tap(xp: jax.Array, g: Geometry, taps: tuple[int, ...]) -> jax.Array:
    """Element `taps` (one kernel offset per axis) of every window, as one strided slice:
    shape of the output."""
    start, limit, strides = [0] * xp.ndim, list(xp.shape), [1] * xp.ndim
    for a, ax, t in zip(range(g.k), _spatial_axes(g), taps):
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


def pool_values_and_indices(x: jax.Array, g: Geometry) -> tuple[jax.Array, jax.Array]:
    positions = [_positions(g, a) for a in range(g.k)]
    xp = _padded(x, g, jnp.asarray(_lowest(x.dtype)))
    # Like PyTorch's loop: start from (lowest value, first in-bounds position) and
    # let only a strictly greater element or a NaN replace it. Tap (0, ..., 0) is that
    # start: it is the first in-bounds element or padding (= lowest, loses every
    # later comparison, so the index stays the first in-bounds one). Padding is
    # never selected, even against an all -inf / all dtype-min input.
    first = _flat_index(g, [_first_in_bounds(g, a) for a in range(g.k)])
    zero = (0,) * g.k
    best = _tap(xp, g, zero)
    idx = jnp.broadcast_to(jnp.asarray(_plane(first, g), g.index_dtype), best.shape)
    is_float = jnp.issubdtype(x.dtype, jnp.inexact)
    # A Python loop over the kernel taps, in PyTorch's scan order (row-major), not over
    # positions: each step is dense elementwise work that XLA fuses into one loop.
    for taps in itertools.product(*(range(kk) for kk in g.kernel)):
        if taps == zero:
            continue
        v = _tap(xp, g, taps)
        # PyTorch CPU and CUDA: `val > maxval || isnan(val)`; every later NaN
        # replaces an earlier one, so the LAST NaN in scan order wins.
        take = v > best
        if is_float:
            take = take | jnp.isnan(v)
        tap_idx = _flat_index(g, [positions[a][:, t] for a, t in enumerate(taps)])
        best = jnp.where(take, v, best)
        idx = jnp.where(take, jnp.asarray(_plane(tap_idx, g), g.index_dtype), idx)
    return best, idx


def argmax_is_unique(g: Geometry) -> bool:
    """Whether the argmax positions of distinct windows are distinct input positions
    inside the plane, whatever x holds: then the gradient is a plain scatter (an unpool
    into the input plane), exactly equal to the scatter-add.

    Per axis: windows cannot overlap (stride >= dilated extent), and every window's
    initial argmax coordinate (`_first_in_bounds`) lies inside the input. That
    coordinate is a tap of its own window (padding <= kernel // 2 keeps it within
    ceil(p / d) <= k - 1 steps of the start), and later winners are in-bounds taps
    (padding never wins), so every index is an in-bounds position of its own window.
    What is excluded: a ceil_mode window with dilation holding only padding, whose
    index lies past the row or plane (PyTorch's quirk; it may alias another window's
    argmax or fall outside the plane, where the unpool kernel would fail).
    """
    return all(
        g.stride[a] >= g.dilation[a] * (g.kernel[a] - 1) + 1
        and int(_first_in_bounds(g, a).max()) < g.in_size[a]
        for a in range(g.k)
    )


def gather_at_argmax(t: jax.Array, idx: jax.Array, g: Geometry) -> jax.Array:
    """t at the argmax positions, on the flattened (D*H*W, H*W or W) plane, with XLA's
    gather: linear in t, and reverse mode transposes it into XLA's scatter-add of each
    output cotangent to its argmax position (overlapping windows sum up).

    On CPU this measured faster than a select chain over the tap slices, whose transpose
    (interior pads) XLA fuses with a recomputation of the whole forward pass per input
    element.
    """
    n = t.shape[0]
    plane = int(np.prod(g.in_size))
    out_plane = int(np.prod(g.out_size))  # explicit: -1 fails for N=0 or C=0
    # Indices of all-padding ceil_mode windows (see _first_in_bounds): past a row's end
    # they land on the next row's element, as in PyTorch; past the plane they read 0,
    # so their cotangent is dropped, where PyTorch's CPU backward adds it unchecked
    # (cpu_max_pool_backward in aten/src/ATen/native/cpu/MaxPoolKernel.cpp) to the next
    # plane's gradient, or past the end of its buffer.
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


# custom_jvp rather than differentiating the select chain: the tangent is one gather at
# the argmax (not kh*kw selects), and integer x (float0 tangent) and the indices (no
# gradient) are handled explicitly.
@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _pool(x: jax.Array, g: Geometry) -> tuple[jax.Array, jax.Array]:
    return pool_values_and_indices(x, g)


# One compiled computation per geometry, so that eager calls do not dispatch the
# kh*kw tap loop op by op (under an outer jit this is simply inlined).
_pool_jit = jax.jit(_pool, static_argnums=(1,))


@_pool.defjvp
def _pool_jvp(g: Geometry, primals: tuple, tangents: tuple) -> tuple:
    (x,), (t,) = primals, tangents
    out, idx = _pool(x, g)
    if t.dtype == jax.dtypes.float0:  # integer x: nothing to differentiate
        t_out = _symbolic.no_tangent(out.shape)
    else:
        t_out = gather_at_argmax(t, idx, g)
    return (out, idx), (t_out, _symbolic.no_tangent(idx.shape))


def max_pool(fn: str, k: int, x, kernel_size, stride, padding, dilation, ceil_mode,
             data_format, index_dtype):
    """``max_pool{k}d_with_indices`` (named `fn` in errors) in XLA ops only, its gradient
    XLA's scatter-add: ``jax_unpool.reference``'s pools."""
    x = _args.as_array(fn, "x", x)
    g = geometry(fn, k, x.shape, kernel_size, stride, padding, dilation, ceil_mode,
                 data_format, index_dtype)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        raise TypeError(f"{fn}: x must have a real dtype (max needs an order), got {x.dtype}")
    unbatched = x.ndim == k + 1
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
