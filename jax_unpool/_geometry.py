"""Ranks, layouts and window arithmetic: the one place that knows them.

A spatial rank k is 1, 2 or 3 (W; H, W; D, H, W, as PyTorch names them). An operand has
rank k + 1 (one example) or k + 2 (a batch), channels first (NCHW, CHW, ...) or channels
last (NHWC, HWC, ...); either way a *plane* is one (n, c)'s k spatial dims flattened, and
indices are flat positions inside a plane. The unpool's output size and the pool's window
(PyTorch's checks and output sizes) are computed here, at trace time, with errors naming
the function and the argument.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

import jax
import numpy as np

from jax_unpool import _args, _symbolic

RANKS = (1, 2, 3)
SPATIAL = {1: "W", 2: "HW", 3: "DHW"}  # spatial dims per rank, as PyTorch names them

# --------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------


def formats(k: int) -> dict[str, bool]:
    """The data formats of spatial rank k and whether each is channels-last:
    NCHW/CHW/NHWC/HWC for k=2 (NCW/.../WC for 1, NCDHW/.../DHWC for 3)."""
    s = SPATIAL[k]
    return {f"NC{s}": False, f"C{s}": False, f"N{s}C": True, f"{s}C": True}


def channels_last(fn: str, data_format: Any, k: int) -> bool:
    """True for the channels-last formats of rank k. A format names where C is; its
    batched and unbatched spellings (NCHW, CHW) are accepted for either operand rank."""
    table = formats(k)
    if not isinstance(data_format, str) or data_format not in table:
        raise ValueError(f"{fn}: data_format must be one of {sorted(table)}, got "
                         f"{_args.received(data_format)}")
    return table[data_format]


def data_format(k: int, channels_last: bool, batched: bool = True) -> str:
    """The format of rank k with C first or last: NCHW, NHWC, CHW or HWC for k=2."""
    s = SPATIAL[k]
    return (f"N{s}C" if batched else f"{s}C") if channels_last else (
        f"NC{s}" if batched else f"C{s}")


def spatial_axis(ndim: int, channels_last: bool, k: int) -> int:
    """Position of the first of the k spatial dims (the others follow it)."""
    return ndim - k - 1 if channels_last else ndim - k


def spatial_axes(ndim: int, channels_last: bool, k: int) -> tuple[int, ...]:
    """Positions of the k spatial dims of an operand of rank `ndim`."""
    s = spatial_axis(ndim, channels_last, k)
    return tuple(range(s, s + k))


def spatial_dims(shape: Sequence, channels_last: bool, k: int) -> tuple:
    """The k spatial sizes of `shape`."""
    return tuple(shape[a] for a in spatial_axes(len(shape), channels_last, k))


def with_spatial(shape: Sequence, sizes: Sequence, channels_last: bool) -> tuple:
    """`shape` with its len(sizes) spatial dims replaced by `sizes`."""
    s = spatial_axis(len(shape), channels_last, len(sizes))
    return (*shape[:s], *sizes, *shape[s + len(sizes):])


def plane_dims(ndim: int, channels_last: bool, k: int) -> tuple[int, ...]:
    """Positions of N and C (or C alone when unbatched): the dims that address planes."""
    s = spatial_axis(ndim, channels_last, k)
    return tuple(d for d in range(ndim) if not s <= d < s + k)


def check_rank(fn: str, name: str, shape: Sequence[int], k: int,
               channels_last: bool = False) -> None:
    """`shape` has rank k + 1 or k + 2."""
    if len(shape) not in (k + 1, k + 2):
        s = ", ".join(SPATIAL[k])
        one, batch = (f"({s}, C)", f"(N, {s}, C)") if channels_last else (f"(C, {s})",
                                                                          f"(N, C, {s})")
        raise ValueError(
            f"{fn}: {name} must have rank {k + 1} {one} or {k + 2} {batch}, got rank "
            f"{len(shape)} with shape {tuple(shape)}")


# --------------------------------------------------------------------------------------
# The unpool's window
# --------------------------------------------------------------------------------------


class Window(NamedTuple):
    """Where an unpool's indices are expected, per spatial axis: input position q's index
    lies in the box [q * stride - padding, q * stride - padding + extent) of the output
    plane, as a max pool's argmax lies in its window (extent: the dilated kernel's). The
    unpool primitives' `window` hint: it never changes a result; kernels use it to write
    each output window once (`unpool_window` says which hints they may use)."""

    extent: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]

    @property
    def k(self) -> int:
        return len(self.extent)

    @staticmethod
    def check(fn: str, window: Any, k: int) -> None:
        """A primitive's `window` parameter: None or k ints each (extent and stride
        positive, padding not negative); TypeError naming `fn` otherwise."""
        ok = window is None or (
            isinstance(window, tuple) and len(window) == 3
            and all(isinstance(w, tuple) and len(w) == k and all(map(_args.is_int, w))
                    for w in window)
            and min(window[0]) >= 1 and min(window[1]) >= 1 and min(window[2]) >= 0)
        if not ok:
            raise TypeError(f"{fn}: window must be None or (extent, stride, padding), tuples "
                            f"of {k} ints (extent and stride positive, padding not negative), "
                            f"got {_args.received(window)}")


def unpool_window(in_size: Sequence, out_size: Sequence, hint: Window | tuple | None
                  ) -> Window | None:
    """The window the unpool kernels may use for input spatial sizes `in_size` (where the
    indices are) and output sizes `out_size` (the plane they point into): the `hint` where
    it can be a max pool's window for these sizes; without one, the window of output sizes
    that are whole multiples of the input's (extent = stride = out // in, no padding);
    otherwise None (no window: the kernels' general paths). Every lowering takes its window
    from here, so no kernel infers one.

    A hint is used only where, per axis, padding < extent (each box reaches into the plane)
    and the sizes are those of a pool of that window, ceil_mode or not: (in - 2) * stride <
    out + 2 * padding - extent < in * stride (PyTorch's max_unpool rule, "within stride of
    the default size", with the extent as the kernel). Any other hint is ignored: a hint
    never changes a result."""
    sizes = (*in_size, *out_size)
    if any(_symbolic.is_symbolic(d) for d in sizes) or min(sizes, default=0) <= 0:
        return None
    if hint is None:
        if any(o % i for i, o in zip(in_size, out_size)):
            return None
        ratio = tuple(o // i for i, o in zip(in_size, out_size))
        return Window(ratio, ratio, (0,) * len(ratio))
    extent, stride, padding = (tuple(int(v) for v in w) for w in hint)
    for i, o, e, s, p in zip(in_size, out_size, extent, stride, padding):
        if not (p < e and (i - 2) * s < o + 2 * p - e < i * s):
            return None
    return Window(extent, stride, padding)


# --------------------------------------------------------------------------------------
# The unpool's output size
# --------------------------------------------------------------------------------------


def output_spatial(fn: str, output_size: Any, ndim: int, channels_last: bool,
                   k: int) -> tuple[int, ...]:
    """The k output sizes ((H_out, W_out) for k=2) from `output_size`: k ints, or a full
    shape in the data's layout. A size may be 0, as in PyTorch: the result is empty."""
    if isinstance(output_size, np.ndarray) and output_size.ndim == 1:
        output_size = output_size.tolist()
    if not isinstance(output_size, (tuple, list)):
        raise TypeError(f"{fn}: output_size must be a sequence of ints (a tuple, a list or a "
                        f"1-D integer numpy array), got {_args.received(output_size)}")
    size = tuple(output_size)
    if len(size) == ndim or (len(size) == k + 2 and not channels_last):
        size = spatial_dims(size, channels_last, k)
    elif len(size) != k:
        names = ", ".join(f"{d}_out" for d in SPATIAL[k])
        raise ValueError(
            f"{fn}: output_size must have {k} entries ({names}) or {ndim} (a full shape), "
            f"got {len(size)}: {_args.received(output_size)}")
    return _args.positive_sizes(fn, "output_size", size, k, allow_zero=True, symbolic=True)


def unpool_output_size(fn: str, shape: Sequence[int], channels_last: bool, kernel_size: Any,
                       stride: Any, padding: Any, output_size: Any,
                       k: int) -> tuple[tuple[int, ...], Window | None]:
    """torch.nn.functional.max_unpool{k}d's output size rule, with its range check, and
    the window (kernel, stride, padding) when `kernel_size` is given, else None. As in
    PyTorch an output size may be 0 (the result is empty), none negative."""
    if kernel_size is None:
        if output_size is None:
            raise ValueError(f"{fn}: one of kernel_size or output_size is required, got neither")
        if stride is not None or not (_args.is_int(padding) and padding == 0):
            raise ValueError(
                f"{fn}: stride and padding need kernel_size, got kernel_size=None with "
                f"stride={_args.received(stride)}, padding={_args.received(padding)}")
        return output_spatial(fn, output_size, len(shape), channels_last, k), None
    kernel = _args.positive_sizes(fn, "kernel_size", kernel_size, k)
    strides = kernel if stride is None else _args.positive_sizes(fn, "stride", stride, k)
    pads = _args.positive_sizes(fn, "padding", padding, k, allow_zero=True)
    window = Window(kernel, strides, pads)
    spatial = spatial_dims(shape, channels_last, k)
    default = tuple((spatial[d] - 1) * strides[d] - 2 * pads[d] + kernel[d] for d in range(k))
    if output_size is None:
        negative = [_symbolic.decided(lambda d=d: d < 0) for d in default]
        if any(negative):
            raise ValueError(
                f"{fn}: kernel_size={kernel}, stride={strides}, padding={pads} give a "
                f"negative output size {default} for input spatial size {spatial}")
        if None in negative:  # (h - 1) * 2 - 4 + 2 at h = 1, say
            raise ValueError(_args.open_sign(fn, "the default output size", "non-negative",
                                             default))
        return default, window
    size = output_spatial(fn, output_size, len(shape), channels_last, k)
    for d in range(k):
        lo, hi = default[d] - strides[d], default[d] + strides[d]
        inside = _symbolic.decided(lambda lo=lo, v=size[d], hi=hi: lo < v < hi)
        if inside is None:
            raise ValueError(
                f"{fn}: output_size {_symbolic.shape_text(size)} must lie within stride of "
                f"the default {_symbolic.shape_text(default)} for every value of the symbolic "
                f"dims, which their bounds do not decide for dim {d} ({lo} < {size[d]} < "
                f"{hi}); state it in the symbolic shape's constraints, or pass output_size "
                "without kernel_size")
        if not inside:
            raise ValueError(
                f"{fn}: invalid output_size {_args.received(output_size)}: its spatial sizes "
                f"{tuple(size)} (read as {data_format(k, channels_last, len(shape) == k + 2)}) "
                "must lie strictly within stride of the default size "
                f"{default} (dim {d} between {lo} and {hi}, exclusive) for "
                f"kernel_size={kernel}, stride={strides}, padding={pads}")
    return size, window


def unpool_result_shape(fn: str, shape: Sequence[int], output_size: Sequence[int],
                        channels_last: bool, k: int) -> tuple[int, ...]:
    """The forward's result shape: `shape` with its k spatial dims replaced by
    `output_size`."""
    s = spatial_axis(len(shape), channels_last, k)
    result = (*shape[:s], *output_size, *shape[s + k:])
    if _symbolic.exceeds(result, _args.MAX_ELEMENTS):  # open for symbolic sizes: _symbolic
        raise ValueError(
            f"{fn}: output_size {tuple(output_size)} gives a result of shape "
            f"{_symbolic.shape_text(result)} = {math.prod(result)} elements, more than the "
            f"{_args.MAX_ELEMENTS} (2**60 - 1) XLA can hold (an array's byte size must fit "
            "in int64 and elements take up to 8 bytes)")
    return result


# --------------------------------------------------------------------------------------
# The pool's window
# --------------------------------------------------------------------------------------


class PoolGeometry(NamedTuple):
    """A pool's static (hashable) window, one entry per spatial axis ((D,) H, W)."""

    in_size: tuple[int, ...]
    out_size: tuple[int, ...]
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    ceil_mode: bool
    channels_last: bool
    index_dtype: np.dtype

    @property
    def k(self) -> int:
        return len(self.in_size)

    def flat_strides(self) -> tuple[int, ...]:
        """Flat index = sum of coordinate * stride: (H*W, W, 1) for a (D, H, W) volume."""
        return tuple(math.prod(self.in_size[a + 1:]) for a in range(self.k))

    def first_in_bounds(self, axis: int, window: int) -> int:
        """PyTorch's initial argmax coordinate of `window` along `axis`: the window start,
        moved by whole dilation steps past the left padding (``while (ih0 < 0) ih0 +=
        dilationH``), i.e. the smallest non-negative position congruent to a negative start
        modulo the dilation. It lies past the right edge when a window holds only padding
        (possible with dilation, with or without ceil_mode); PyTorch then returns that
        out-of-range index and -inf, and so do we.

        Python ints, in constant time: geometry questions never list the windows (a
        W = 2**31 - 1 pool has a billion). Of the coordinates past the input, the last
        window's is the largest: a start that is not negative grows with the window, and a
        negative one moved past the input needs a dilation longer than the input, for
        which PyTorch's output size rule leaves a single window."""
        start = window * self.stride[axis] - self.padding[axis]
        return start if start >= 0 else start % self.dilation[axis]

    def last_first_in_bounds(self, axis: int) -> int:
        """The last window's `first_in_bounds` along `axis`."""
        return self.first_in_bounds(axis, self.out_size[axis] - 1)

    def argmax_in_window(self) -> bool:
        """Whether every window's argmax is an input position inside the window, whatever x
        holds: unless some window holds only padding (PyTorch then reports an index past
        the row or the plane: `first_in_bounds`)."""
        return all(self.last_first_in_bounds(a) < self.in_size[a] for a in range(self.k))

    def extent(self) -> tuple[int, ...]:
        """The dilated window's extent per axis: dilation * (kernel - 1) + 1."""
        return tuple(d * (kk - 1) + 1 for d, kk in zip(self.dilation, self.kernel))

    def argmax_is_unique(self) -> bool:
        """Whether the argmax positions of distinct windows are distinct input positions
        inside the plane, whatever x holds: then the gradient is a plain scatter (an unpool
        into the input plane), exactly equal to the scatter-add.

        Per axis: windows cannot overlap (stride >= dilated extent), and every window's
        initial argmax coordinate lies inside the input. That coordinate is a tap of its
        own window (padding <= kernel // 2 keeps it within ceil(p / d) <= k - 1 steps of
        the start), and later winners are in-bounds taps (padding never wins), so every
        index is an in-bounds position of its own window. Excluded: a window holding only
        padding, whose index lies past the row or plane (PyTorch's quirk)."""
        return (all(s >= e for s, e in zip(self.stride, self.extent()))
                and self.argmax_in_window())

    def window(self) -> Window:
        """The window of the argmax positions: each window's argmax lies in its dilated
        extent (where `argmax_in_window`)."""
        return Window(self.extent(), self.stride, self.padding)


def _pool_sizes(fn: str, value: object, name: str, k: int) -> tuple[int, ...]:
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


def _pool_output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's ``pooling_output_shape`` (aten/src/ATen/native/Pool.h)."""
    num = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = num // s + 1  # Python's // floors, like PyTorch's div_rtn
    # ceil_mode: the last window must start inside the input or the left padding.
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def index_dtype(fn: str, dtype: object, stacklevel: int = 4) -> np.dtype:
    """int32 or int64, as JAX would give it: int64 with x64 off warns and is int32."""
    try:
        if dtype is None:  # np.dtype(None) is float64
            raise TypeError
        dt = np.dtype(dtype)
    except (TypeError, ValueError):
        raise TypeError(
            f"{fn}: index_dtype must be int32 or int64, got {_args.received(dtype)}") from None
    if dt not in (np.dtype(np.int32), np.dtype(np.int64)):
        # A dtype's name; what np.dtype made of anything else ({} is "void") would puzzle.
        named = isinstance(dtype, (str, type, np.dtype)) or hasattr(dtype, "dtype")
        got = dt.name if named else _args.received(dtype)
        raise TypeError(f"{fn}: index_dtype must be int32 or int64, got {got}")
    canonical = np.dtype(jax.dtypes.canonicalize_dtype(dt))
    if canonical != dt:
        # The behaviour (and wording) of jnp functions asked for a 64-bit dtype with x64
        # disabled: warn, then use the 32-bit one.
        warnings.warn(
            f"Explicitly requested dtype {dt.name} requested in {fn} is not "
            f"available, and will be truncated to dtype {canonical.name}. To enable "
            "more dtypes, set the jax_enable_x64 configuration option or the "
            "JAX_ENABLE_X64 shell environment variable. See "
            "https://github.com/jax-ml/jax#current-gotchas for more.",
            stacklevel=stacklevel)
    return canonical


def pool_window(fn: str, k: int, kernel_size: Any, stride: Any, padding: Any, dilation: Any,
                ceil_mode: Any) -> tuple:
    """The public pools' window arguments as PyTorch takes them -> (kernel, stride,
    padding, dilation), tuples of k ints; their values are checked against the input
    by `pool_geometry`."""
    # Not bool(ceil_mode): "no" would be True, an array ambiguous. PyTorch takes bools only.
    if not isinstance(ceil_mode, (bool, np.bool_)):
        raise TypeError(f"{fn}: ceil_mode must be a bool, got {_args.received(ceil_mode)}")
    kernel = _pool_sizes(fn, kernel_size, "kernel_size", k)
    return (kernel, kernel if stride is None else _pool_sizes(fn, stride, "stride", k),
            _pool_sizes(fn, padding, "padding", k), _pool_sizes(fn, dilation, "dilation", k))


@lru_cache(maxsize=512)
def pool_geometry(fn: str, shape: tuple, kernel: tuple, stride: tuple, padding: tuple,
                  dilation: tuple, ceil_mode: bool, channels_last: bool,
                  index_dtype: np.dtype) -> PoolGeometry:
    """The pool's geometry, every value checked as PyTorch checks it (errors name `fn`):
    once per distinct window and shape (cached), whichever rule asks."""
    k = len(kernel)
    names = SPATIAL[k]
    check_rank(fn, "x", shape, k, channels_last)
    in_size = spatial_dims(shape, channels_last, k)
    if any(map(_symbolic.is_symbolic, in_size)):
        # The window geometry below is numpy, computed from the sizes at trace time.
        raise ValueError(
            f"{fn}: the spatial dims ({', '.join(names)}) must be known at trace time, got "
            f"({', '.join(names)})=({', '.join(map(str, in_size))}), symbolic (jax.export); "
            "only the batch and channel dims may be symbolic")
    for name, sizes in (("kernel_size", kernel), ("stride", stride), ("dilation", dilation)):
        if min(sizes) <= 0:
            raise ValueError(f"{fn}: {name} must be positive, got {sizes}")
    if min(padding) < 0:
        raise ValueError(f"{fn}: padding must be non-negative, got {padding}")
    # PyTorch's rule compares with the kernel size itself, not the dilated one.
    if any(p > kk // 2 for p, kk in zip(padding, kernel)):
        raise ValueError(
            f"{fn}: padding must be at most half of kernel_size (padding <= kernel_size // "
            f"2), got padding={padding} and kernel_size={kernel}")
    if min(in_size) <= 0:
        raise ValueError(
            f"{fn}: x must have non-empty spatial dimensions ({', '.join(names)}), got "
            f"({', '.join(names)})={in_size} for shape {shape} and "
            f"data_format={data_format(k, channels_last, len(shape) == k + 2)!r}")
    out_size = tuple(_pool_output_size(in_size[a], kernel[a], stride[a], padding[a],
                                       dilation[a], ceil_mode) for a in range(k))
    if min(out_size) <= 0:
        raise ValueError(
            f"{fn}: output size must be positive, got "
            f"({', '.join(f'{n}_out' for n in names)})={out_size} for input "
            f"({', '.join(names)})={in_size}, kernel_size={kernel}, stride={stride}, "
            f"padding={padding}, dilation={dilation}, ceil_mode={ceil_mode}: the input is "
            "too small")
    g = PoolGeometry(in_size, out_size, kernel, stride, padding, dilation, ceil_mode,
                     channels_last, np.dtype(index_dtype))
    check_plane_indices(fn, g)
    return g


def check_plane_indices(fn: str, g: PoolGeometry) -> None:
    """The pool's flat indices fit g.index_dtype: they would silently wrap around in a
    too-narrow integer type."""
    largest = largest_index(g)
    if largest > np.iinfo(g.index_dtype).max:
        names = ", ".join(SPATIAL[g.k])
        raise ValueError(
            f"{fn}: index_dtype {g.index_dtype.name} cannot hold the flat indices of a "
            f"({names})={g.in_size} {'plane' if g.k < 3 else 'volume'} (up to "
            f"{largest}); use index_dtype=int64 with jax_enable_x64")


def pool_geometry_of(shape, **params) -> PoolGeometry:
    """A pool primitive's geometry from its parameters (kernel_size, stride, padding,
    dilation, ceil_mode, channels_last, index_dtype), checked against x's `shape` (cached),
    errors naming the public function of its rank."""
    fn = f"max_pool{len(params['kernel_size'])}d_with_indices"
    return pool_geometry(fn, tuple(shape), *(tuple(params[name]) for name in (
        "kernel_size", "stride", "padding", "dilation")), bool(params["ceil_mode"]),
        bool(params["channels_last"]), index_dtype(fn, params["index_dtype"]))


def largest_index(g: PoolGeometry) -> int:
    """A bound on the flat indices the pool reports. Per axis: the last window's last tap
    when it lies in the input; when the input clips it, an earlier window may reach
    further, up to the input's last position; and a window holding only padding reports
    its initial index, the last window's being the largest of those past the input
    (`PoolGeometry.first_in_bounds`). Computed, not listed: kernels and inputs may be
    huge."""
    largest = 0
    for a, st in enumerate(g.flat_strides()):
        last_tap = ((g.out_size[a] - 1) * g.stride[a] - g.padding[a]
                    + (g.kernel[a] - 1) * g.dilation[a])
        reach = min(last_tap, g.in_size[a] - 1)
        largest += max(reach, g.last_first_in_bounds(a)) * st
    return largest
