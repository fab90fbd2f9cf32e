"""Independent oracles: plain numpy loops over planes, in the order PyTorch CPU runs them.

Layout is handled by transposing NHWC to NCHW around the loops, so the loops themselves
are written once, for the contiguous-plane layout.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np


def _as_nchw4(a: np.ndarray, channels_last: bool) -> np.ndarray:
    a4 = a if a.ndim == 4 else a[None]
    return a4.transpose(0, 3, 1, 2) if channels_last else a4


def _from_nchw4(a: np.ndarray, ndim: int, channels_last: bool) -> np.ndarray:
    out = a.transpose(0, 2, 3, 1) if channels_last else a
    return out if ndim == 4 else out[0]


def unpool(x: np.ndarray, indices: np.ndarray, output_hw: tuple[int, int],
           channels_last: bool = False) -> np.ndarray:
    """Zeros, then out[n, c, idx] = x[n, c, i] for i in flat order: the last writer wins."""
    x4, i4 = _as_nchw4(np.asarray(x), channels_last), _as_nchw4(np.asarray(indices), channels_last)
    n, c, h, w = x4.shape
    out = np.zeros((n, c, output_hw[0] * output_hw[1]), x4.dtype)
    xs, js = x4.reshape(n, c, h * w), i4.reshape(n, c, h * w)
    for a in range(n):
        for b in range(c):
            for i in range(h * w):
                out[a, b, js[a, b, i]] = xs[a, b, i]
    return _from_nchw4(out.reshape(n, c, *output_hw), x.ndim, channels_last)


def gather(grad_output: np.ndarray, indices: np.ndarray, channels_last: bool = False
           ) -> np.ndarray:
    """out[n, c, i] = grad_output[n, c, indices[n, c, i]]."""
    g4 = _as_nchw4(np.asarray(grad_output), channels_last)
    i4 = _as_nchw4(np.asarray(indices), channels_last)
    n, c, ho, wo = g4.shape
    _, _, h, w = i4.shape
    gs, js = g4.reshape(n, c, ho * wo), i4.reshape(n, c, h * w)
    out = np.zeros((n, c, h * w), g4.dtype)
    for a in range(n):
        for b in range(c):
            for i in range(h * w):
                out[a, b, i] = gs[a, b, js[a, b, i]]
    return _from_nchw4(out.reshape(n, c, h, w), indices.ndim, channels_last)


def pool_indices(rng: np.random.Generator, shape: tuple[int, ...], kernel: int = 2,
                 channels_last: bool = False) -> tuple[np.ndarray, tuple[int, int]]:
    """Unique in-plane indices as a kernel x kernel, stride-kernel max-pool produces them
    for an input of spatial size (H * kernel, W * kernel); returns (indices, output_hw)."""
    # work channels-first: move C in front of (H, W)
    s = (*shape[:-3], shape[-1], shape[-3], shape[-2]) if channels_last else tuple(shape)
    *_, h, w = s
    ho, wo = h * kernel, w * kernel
    dh = rng.integers(0, kernel, size=s)
    dw = rng.integers(0, kernel, size=s)
    rows = np.arange(h)[:, None] * kernel + dh
    cols = np.arange(w)[None, :] * kernel + dw
    idx = rows * wo + cols
    if channels_last:
        idx = np.moveaxis(idx, -3, -1)
    return idx.astype(np.int32), (ho, wo)


def random_indices(rng: np.random.Generator, shape: tuple[int, ...], plane: int,
                   dtype=np.int32) -> np.ndarray:
    """Indices drawn with replacement from [0, plane): duplicates are likely."""
    return rng.integers(0, plane, size=shape).astype(dtype)


def _spatial_first(a: np.ndarray, k: int, channels_last: bool) -> np.ndarray:
    """Any rank-(k+1)/(k+2) array -> (N, C, *spatial), channels first."""
    a = a if a.ndim == k + 2 else a[None]
    return np.moveaxis(a, -1, 1) if channels_last else a


def _spatial_back(a: np.ndarray, ndim: int, k: int, channels_last: bool) -> np.ndarray:
    a = np.moveaxis(a, 1, -1) if channels_last else a
    return a if ndim == k + 2 else a[0]


def unpool_nd(x: np.ndarray, indices: np.ndarray, output_size: tuple[int, ...],
              channels_last: bool = False) -> np.ndarray:
    """`unpool` for any spatial rank k = len(output_size): flat positions inside an output
    volume (d * H * W + h * W + w), the last writer in flat input order wins."""
    k = len(output_size)
    xs = _spatial_first(np.asarray(x), k, channels_last)
    js = _spatial_first(np.asarray(indices), k, channels_last)
    n, c = xs.shape[:2]
    xs, js = xs.reshape(n, c, -1), js.reshape(n, c, -1)
    out = np.zeros((n, c, int(np.prod(output_size))), xs.dtype)
    for a in range(n):
        for b in range(c):
            for i in range(xs.shape[2]):
                out[a, b, js[a, b, i]] = xs[a, b, i]
    return _spatial_back(out.reshape(n, c, *output_size), np.ndim(x), k, channels_last)


def gather_nd(grad_output: np.ndarray, indices: np.ndarray, k: int,
              channels_last: bool = False) -> np.ndarray:
    """`gather` for any spatial rank k."""
    gs = _spatial_first(np.asarray(grad_output), k, channels_last)
    js = _spatial_first(np.asarray(indices), k, channels_last)
    n, c = js.shape[:2]
    spatial = js.shape[2:]
    gs, js = gs.reshape(n, c, -1), js.reshape(n, c, -1)
    out = np.zeros(js.shape, gs.dtype)
    for a in range(n):
        for b in range(c):
            for i in range(js.shape[2]):
                out[a, b, i] = gs[a, b, js[a, b, i]]
    return _spatial_back(out.reshape(n, c, *spatial), np.ndim(indices), k, channels_last)


def scatter_add_nd(x: np.ndarray, indices: np.ndarray, output_size: tuple[int, ...],
                   channels_last: bool = False) -> np.ndarray:
    """Zeros, then out[n, c, idx] += x[n, c, i] in flat input order: a pool's backward
    (every window adds its cotangent at its argmax), for spatial rank len(output_size)."""
    k = len(output_size)
    xs = _spatial_first(np.asarray(x), k, channels_last)
    js = _spatial_first(np.asarray(indices), k, channels_last)
    n, c = xs.shape[:2]
    xs, js = xs.reshape(n, c, -1), js.reshape(n, c, -1)
    out = np.zeros((n, c, int(np.prod(output_size))), xs.dtype)
    for a in range(n):
        for b in range(c):
            np.add.at(out[a, b], js[a, b], xs[a, b])
    return _spatial_back(out.reshape(n, c, *output_size), np.ndim(x), k, channels_last)


def pool_output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling_output_shape (aten/src/ATen/native/Pool.h)."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    return out - 1 if ceil_mode and (out - 1) * s >= size + p else out


def lowest(dtype) -> float:
    """What an empty window reports: -inf, or the most negative value of a dtype without
    it (ints, bool, float8 formats with no inf), as PyTorch (for its dtypes) and the
    package document."""
    dtype = np.dtype(dtype)
    if dtype.kind in "biu":
        return int(np.iinfo(dtype).min) if dtype.kind != "b" else 0
    neg_inf = np.array(-np.inf).astype(dtype)
    # ml_dtypes.finfo, not np.finfo: numpy's takes the float8 types only with some
    # ml_dtypes releases (ml_dtypes 0.6.0 under numpy 2.5.2 refuses them).
    return float(neg_inf.astype(np.float64)) if np.isinf(neg_inf.astype(np.float64)) else \
        float(np.array(ml_dtypes.finfo(dtype).min, dtype).astype(np.float64))


def max_pool(x: np.ndarray, kernel, stride, padding, dilation, ceil_mode: bool,
             channels_last: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's CPU max pool loop (aten/src/ATen/native/cpu/MaxPoolKernel.cpp) for
    k = len(kernel) spatial dims: per window, start from (-inf, the first in-bounds
    position: `while (ih0 < 0) ih0 += dilationH`), and let an in-bounds tap replace the max
    iff `val > maxval || isnan(val)`, in row-major scan order. Values are compared as
    float64 (exact for every float dtype) or Python ints; the result holds the winning
    element itself (bit for bit), or the dtype's lowest value when nothing won. Returns
    (values, int64 indices)."""
    k = len(kernel)
    xs = _spatial_first(np.asarray(x), k, channels_last)
    n, c, *size = xs.shape
    out_size = [pool_output_size(size[a], kernel[a], stride[a], padding[a], dilation[a],
                                 ceil_mode) for a in range(k)]
    def as_number(v):
        if xs.dtype.kind in "biu":
            return int(v)
        with np.errstate(invalid="ignore"):  # a signaling NaN becomes a quiet one
            return float(np.asarray(v).astype(np.float64))
    flat_strides = [int(np.prod(size[a + 1:])) for a in range(k)]
    values = np.empty((n, c, *out_size), xs.dtype)
    indices = np.empty((n, c, *out_size), np.int64)
    empty = np.array(lowest(xs.dtype)).astype(xs.dtype)
    for a in range(n):
        for b in range(c):
            for o in np.ndindex(*out_size):
                first, ranges = [], []
                for d in range(k):
                    start = o[d] * stride[d] - padding[d]
                    end = min(start + (kernel[d] - 1) * dilation[d] + 1, size[d])
                    # `while (ih0 < 0) ih0 += dilationH`, in one step: the taps visited
                    # are the in-bounds ones alone, however large the kernel.
                    if start < 0:
                        start += -(start // dilation[d]) * dilation[d]
                    first.append(start)
                    ranges.append(range(start, end, dilation[d]))
                best, best_index = -np.inf, sum(f * s for f, s in zip(first, flat_strides))
                winner = None
                for taps in np.ndindex(*[len(r) for r in ranges]):
                    pos = tuple(r[t] for r, t in zip(ranges, taps))
                    v = as_number(xs[(a, b, *pos)])
                    if v > best or math.isnan(v):
                        best, winner = v, pos
                        best_index = sum(p * s for p, s in zip(pos, flat_strides))
                values[(a, b, *o)] = empty if winner is None else xs[(a, b, *winner)]
                indices[(a, b, *o)] = best_index
    return (_spatial_back(values, np.ndim(x), k, channels_last),
            _spatial_back(indices, np.ndim(x), k, channels_last))


def max_pool_nd(x: np.ndarray, kernel: int, stride: int, padding: int, k: int,
                channels_last: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling of spatial rank k with the same kernel, stride and padding on every
    axis (padding is never selected): (values, flat indices of the maxima in the input
    plane); the first maximum in window scan order wins."""
    xs = _spatial_first(np.asarray(x), k, channels_last)
    n, c, *size = xs.shape
    out_size = [(s + 2 * padding - kernel) // stride + 1 for s in size]
    values = np.zeros((n, c, *out_size), xs.dtype)
    indices = np.zeros((n, c, *out_size), np.int64)
    taps = list(np.ndindex(*(kernel,) * k))
    for a, b in np.ndindex(n, c):
        for o in np.ndindex(*out_size):
            best = None
            for t in taps:
                p = [oi * stride - padding + ti for oi, ti in zip(o, t)]
                if all(0 <= pi < si for pi, si in zip(p, size)):
                    v = xs[(a, b, *p)]
                    if best is None or v > best[0]:
                        best = (v, np.ravel_multi_index(p, size))
            values[(a, b, *o)], indices[(a, b, *o)] = best
    return (_spatial_back(values, np.ndim(x), k, channels_last),
            _spatial_back(indices, np.ndim(x), k, channels_last))


def window_positions(offsets: np.ndarray, in_size, kernel, stride, padding, dilation,
                     channels_last: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Window offsets (a pool's argmax as its tap number in its window, row-major over the
    kernel) -> (flat, named): the flat position in the input plane of the tap each names,
    and whether it names one -- a tap inside the input; for a window with no tap inside
    (PyTorch's window of padding only), offset 0, which names PyTorch's initial position
    (`while (ih0 < 0) ih0 += dilation`), possibly past the plane."""
    k = len(in_size)
    o = _spatial_first(np.asarray(offsets), k, channels_last).astype(np.int64)
    windows = o.shape[2:]
    grid = np.indices(windows) if windows else np.zeros((k,), np.int64)
    flat_strides = [math.prod(in_size[a + 1:]) for a in range(k)]
    flat, first = np.zeros(o.shape, np.int64), np.zeros(windows, np.int64)
    named, empty = o < math.prod(kernel), np.zeros(windows, bool)
    for a in range(k):
        start = grid[a] * stride[a] - padding[a]
        j = o // math.prod(kernel[a + 1:]) % kernel[a]
        coordinate = start + j * dilation[a]
        named &= (coordinate >= 0) & (coordinate < in_size[a])
        flat += coordinate * flat_strides[a]
        inside = [(start + t * dilation[a] >= 0) & (start + t * dilation[a] < in_size[a])
                  for t in range(kernel[a])]
        empty |= ~np.any(inside, axis=0)
        first += np.where(start < 0, start + (-start + dilation[a] - 1) // dilation[a]
                          * dilation[a], start) * flat_strides[a]
    flat = np.where(empty, first, flat)
    named = np.where(empty, o == 0, named)
    ndim = np.ndim(offsets)
    return (_spatial_back(flat, ndim, k, channels_last),
            _spatial_back(named, ndim, k, channels_last))


def window_offsets(flat: np.ndarray, in_size, kernel, stride, padding, dilation,
                   channels_last: bool = False) -> np.ndarray:
    """Flat indices -> each one's tap number in its window (the inverse of
    `window_positions`, by search over the taps), or -1 where it is none."""
    flat = np.asarray(flat)
    out = np.full(flat.shape, -1, np.int64)
    for tap in range(math.prod(kernel)):
        position, named = window_positions(np.full(flat.shape, tap), in_size, kernel, stride,
                                           padding, dilation, channels_last)
        out = np.where(named & (position == flat) & (out < 0), tap, out)
    return out
