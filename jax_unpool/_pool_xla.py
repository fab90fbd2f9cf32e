"""Max pooling with PyTorch's argmax indices in XLA ops, on a checked window
(`_geometry.PoolGeometry`): the pool primitives' lowering wherever there is no native
kernel (`backends.xla`), and ``jax_unpool.reference``'s pools (`pool`).
"""

from __future__ import annotations

import itertools
import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_unpool import _args, _geometry, _symbolic, _unpool_dense, _window
from jax_unpool._geometry import PoolGeometry

# Up to this many kernel taps inside the input the taps are a Python loop, whose dense
# steps XLA fuses into one pass; beyond it a fori_loop, whose trace and compile time do
# not grow with the kernel.
_UNROLLED_TAPS = 64


def _tap_range(g: PoolGeometry, axis: int) -> tuple[int, int]:
    """(first, count): the taps of `axis` that land inside the input in some window. Every
    other tap is padding in every window, so a kernel far larger than the input costs no
    more than the input (at least one tap, for windows of padding only)."""
    s, p, d = g.stride[axis], g.padding[axis], g.dilation[axis]
    # Positions o * s - p + t * d grow with o and t: the last window has the first
    # in-bounds tap, the first window the last one.
    first = max(0, -((-(p - (g.out_size[axis] - 1) * s)) // d))
    last = min(g.kernel[axis] - 1, (g.in_size[axis] - 1 + p) // d)
    return first, max(1, last - first + 1)


def _plane(a, g: PoolGeometry):
    """An array of the output's spatial shape -> broadcastable against the batched output
    in either layout."""
    return a[..., None] if g.channels_last else a


def _wrapped(value: int, dtype: np.dtype) -> np.ndarray:
    """`value` as a scalar of the integer `dtype`, modulo 2**bits, as XLA's integer
    arithmetic wraps. Sums and products of wrapped terms are exact wherever the true result
    fits the dtype, which the int32 guard (`_geometry.largest_index`) ensures for every
    index the pool reports; positions of taps in the padding may wrap, and never win."""
    half = 2 ** (8 * dtype.itemsize - 1)
    return np.array((value + half) % (2 * half) - half, dtype)


def _window_numbers(g: PoolGeometry, axis: int) -> jax.Array:
    """0, 1, ..., out_size[axis] - 1 along `axis` of the output's spatial shape (size 1
    along the others), in the index dtype: an iota, whose program size does not grow with
    the output."""
    shape = [1] * g.k
    shape[axis] = g.out_size[axis]
    return lax.broadcasted_iota(g.index_dtype, shape, axis)


def _first_in_bounds(g: PoolGeometry) -> jax.Array:
    """The flat positions of `PoolGeometry.first_in_bounds` for every window: the start,
    or, left of the input, the smallest position >= 0 a whole number of dilation steps
    further. A start is at most its window's coordinate, which the int32 guard bounds, so
    it is exact though computed modulo 2**bits."""
    flat = 0
    for a, st in enumerate(g.flat_strides()):
        start = _window_numbers(g, a) * g.stride[a] - g.padding[a]
        first = jnp.where(start < 0, start % g.dilation[a], start)  # jnp's % floors
        flat = flat + first * _wrapped(st, g.index_dtype)
    return jnp.broadcast_to(flat, g.out_size)


def _padded(x: jax.Array, g: PoolGeometry, taps, fill: jax.Array) -> jax.Array:
    """x padded (or trimmed: lax.pad takes negative widths) so that relative tap j of each
    axis is one strided slice starting at j * dilation."""
    config = [(0, 0, 0)] * x.ndim
    for a, ax in enumerate(_geometry.spatial_axes(x.ndim, g.channels_last, g.k)):
        first, count = taps[a]
        lo = g.padding[a] - first * g.dilation[a]
        span = (g.out_size[a] - 1) * g.stride[a] + (count - 1) * g.dilation[a] + 1
        config[ax] = (lo, span - lo - g.in_size[a], 0)
    return lax.pad(x, fill, config)


def _tap(xp: jax.Array, g: PoolGeometry, rel) -> jax.Array:
    """Relative tap `rel` (one per axis, static ints or traced scalars) of every window, as
    one (dynamic) slice strided by the pool's stride: the output's shape."""
    start, size, strides = [0] * xp.ndim, list(xp.shape), [1] * xp.ndim
    for a, ax, j in zip(range(g.k), _geometry.spatial_axes(xp.ndim, g.channels_last, g.k), rel):
        start[ax] = j * g.dilation[a]
        size[ax] = (g.out_size[a] - 1) * g.stride[a] + 1
        strides[ax] = g.stride[a]
    window = lax.dynamic_slice(xp, start, size)
    return lax.slice(window, [0] * xp.ndim, window.shape, strides)


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


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


def _first_offsets(g: PoolGeometry) -> jax.Array:
    """The window offset of `_first_in_bounds` (int32, the output's spatial shape): the
    first tap at or past the input's start, 0 for a window starting inside the input or
    holding padding only (`_window`'s rule). Only windows that start left of the input
    (fewer than padding / stride + 1 of them per axis) differ from 0: a select each, with
    numbers computed here, so the program has no division."""
    total = jnp.zeros((1,) * g.k, np.int32)
    for a, ks in enumerate(_window.tap_strides(g)):
        s, p, d = g.stride[a], g.padding[a], g.dilation[a]
        shape = [1] * g.k
        shape[a] = g.out_size[a]
        column = jnp.zeros(shape, np.int32)
        for o in range(min(-(-p // s), g.out_size[a])):  # windows with start < 0
            j = -(-(p - o * s) // d)
            if j < g.kernel[a] and o * s - p + j * d < g.in_size[a] and j:
                column = jnp.where(lax.broadcasted_iota(np.int32, shape, a) == o, j * ks,
                                   column)
        total = total + column
    empty = _window.padding_only(g.out_size, tuple(range(g.k)), g)
    return jnp.broadcast_to(total if empty is None else jnp.where(empty, 0, total), g.out_size)


def pool_values_and_indices(x: jax.Array, g: PoolGeometry, window: bool = False
                            ) -> tuple[jax.Array, jax.Array]:
    """The pool (batched x): values and flat indices of g.index_dtype, or with `window`
    the argmaxes' window offsets (uint8, `_window`)."""
    taps = [_tap_range(g, a) for a in range(g.k)]
    xp = _padded(x, g, taps, jnp.asarray(_lowest(x.dtype)))
    is_float = jnp.issubdtype(x.dtype, jnp.inexact)
    dt = np.dtype(np.int32) if window else g.index_dtype
    # Flat positions (or offsets) from iotas and scalars, never tables: the program's size
    # is the same for every input size. `origin` is relative tap 0 of every window;
    # relative tap j of axis a lies j * steps[a] further.
    if window:
        origin = sum(first * ks for (first, _), ks in zip(taps, _window.tap_strides(g)))
        steps = list(_window.tap_strides(g))
    else:
        origin = 0
        for a, st in enumerate(g.flat_strides()):
            origin = origin + (_window_numbers(g, a) * _wrapped(g.stride[a] * st, dt)
                               + _wrapped((taps[a][0] * g.dilation[a] - g.padding[a]) * st,
                                          dt))
        steps = [d * st for d, st in zip(g.dilation, g.flat_strides())]

    def tap_index(rel):
        if all(isinstance(j, int) for j in rel):  # unrolled: one scalar per tap
            return origin + _wrapped(sum(j * s for j, s in zip(rel, steps)), dt)
        return origin + sum(jnp.asarray(j, dt) * _wrapped(s, dt) for j, s in zip(rel, steps))

    # Floats: the winner's bits are carried beside the value that is compared, and moved
    # by a select on same-width unsigned ints: XLA's CPU backend selects bf16/f16 through
    # f32 (quieting a signalling NaN's payload) and flushes f32 subnormals in a float
    # select; the bits come back as x holds them, as the native kernels' and PyTorch's do.
    # (Packed sub-byte floats, which no select moves apart, keep the float select.)
    by_bits = is_float and _args.is_movable(x.dtype)
    xp_bits = lax.bitcast_convert_type(xp, _UINT[x.dtype.itemsize]) if by_bits else None

    def step(rel, best, bits, idx):
        # PyTorch CPU and CUDA: `val > maxval || isnan(val)`; every later NaN replaces an
        # earlier one, so the LAST NaN in scan order wins.
        v = _tap(xp, g, rel)
        take = (v > best) | jnp.isnan(v) if is_float else v > best
        if by_bits:
            bits = jnp.where(take, _tap(xp_bits, g, rel), bits)
        return (jnp.where(take, v, best), bits,
                jnp.where(take, _plane(tap_index(rel), g), idx))

    # Like PyTorch's loop: start from (lowest value, first in-bounds position) and let
    # only a strictly greater element or a NaN replace it. The first relevant tap is that
    # start: in each window it is the first in-bounds element or padding (= lowest, which
    # loses every later comparison, so the index stays the first in-bounds one). Padding
    # is never selected, even against an all -inf / all dtype-min input.
    best = _tap(xp, g, (0,) * g.k)
    bits = _tap(xp_bits, g, (0,) * g.k) if by_bits else jnp.zeros((), np.uint8)
    first = _first_offsets(g) if window else _first_in_bounds(g)
    idx = jnp.broadcast_to(_plane(first, g), best.shape)
    counts = [count for _, count in taps]
    # The taps in PyTorch's scan order (row-major), not positions: each step is dense
    # elementwise work over every window.
    if math.prod(counts) <= _UNROLLED_TAPS:
        for rel in itertools.product(*map(range, counts)):
            if any(rel):
                best, bits, idx = step(rel, best, bits, idx)
    else:
        def body(j, carry):
            return step(jnp.unravel_index(j, counts), *carry)

        best, bits, idx = lax.fori_loop(1, math.prod(counts), body, (best, bits, idx))
    if by_bits:
        best = lax.bitcast_convert_type(bits, x.dtype)
    return best, idx.astype(_window.OFFSET_DTYPE) if window else idx


def gather_at_argmax(t: jax.Array, idx: jax.Array, g: PoolGeometry) -> jax.Array:
    """t at the argmax positions (batched t and idx), on the flattened (D*H*W, H*W or W)
    plane, with XLA's gather: linear in t, and reverse mode transposes it into XLA's
    scatter-add of each output cotangent to its argmax position (overlapping windows sum
    up). The reference's pool gradient, and the derivative's lowering (`gather`) where the
    dense ops do not apply."""
    n = t.shape[0]
    plane = int(np.prod(g.in_size))
    out_plane = int(np.prod(g.out_size))  # explicit: -1 fails for N=0 or C=0
    # Indices of all-padding windows (see first_in_bounds): past a row's end
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
    # Indices past the plane read 0: a mask and lax's clamped gather, not jnp's
    # take_along_axis, which writes the plane size in the index dtype (2**31 does not fit
    # int32, though every index of such a plane does). N and C are batching dims: each
    # plane gathers on its own.
    inside = flat_i >= 0
    if plane <= np.iinfo(flat_i.dtype).max:
        inside = inside & (flat_i < plane)
    batch = (0, 3 - axis)
    dims = lax.GatherDimensionNumbers(offset_dims=(), collapsed_slice_dims=(axis,),
                                      start_index_map=(axis,), operand_batching_dims=batch,
                                      start_indices_batching_dims=batch)
    out = lax.gather(flat_t, jnp.where(inside, flat_i, 0)[..., None], dims, (1, 1, 1),
                     mode=lax.GatherScatterMode.CLIP)
    return jnp.where(inside, out, jnp.zeros((), out.dtype)).reshape(idx.shape)


# --------------------------------------------------------------------------- #
# The derivative's pair (pooling.max_pool_gather_p, max_pool_scatter_add_p)
# --------------------------------------------------------------------------- #

def _dense_boxes(g: PoolGeometry, dtype, shape) -> _unpool_dense.Boxes | None:
    """The boxes of the dense ops where they apply to the pool's own indices, decided at
    trace time (the indices are the pool's, so every one lies in its window wherever
    `argmax_in_window`: no check on the device); None for XLA's gather and scatter-add:
    windows of padding only, packed sub-byte dtypes, empty operands, boxes too large."""
    if not (g.argmax_in_window() and _args.is_movable(dtype)) or any(
            not _symbolic.is_symbolic(d) and d == 0 for d in shape):
        return None
    window = _geometry.unpool_window(g.out_size, g.in_size, g.window())
    # Only the taps hold argmaxes: a dilated window's box has more positions than taps.
    return _unpool_dense.boxes(g.out_size, g.in_size, window, g.index_dtype,
                               taps=(g.kernel, g.dilation))


def _batched(fn, a: jax.Array, idx: jax.Array, g: PoolGeometry) -> jax.Array:
    if idx.ndim == g.k + 1:  # unbatched
        return fn(a[None], idx[None])[0]
    return fn(a, idx)


def gather(t: jax.Array, idx: jax.Array, g: PoolGeometry, index_format: str = "flat"
           ) -> jax.Array:
    """max_pool_gather_p's XLA ops: dense selects where `_dense_boxes` applies, XLA's
    gather otherwise; for window offsets, a select per tap (`_window.gather`) where every
    window has a tap in the input, the flat path otherwise."""
    if index_format == "window":
        if _window.dense_applies(g) and _args.is_movable(t.dtype):
            return _window.gather(t, idx, g)
        return gather(t, _window.to_flat(idx, g), g)
    b = _dense_boxes(g, t.dtype, t.shape)
    if b is None:
        return _batched(lambda t, i: gather_at_argmax(t, i, g), t, idx, g)
    return _unpool_dense.gather(t, idx, b, g.channels_last)


def scatter_add(ct: jax.Array, idx: jax.Array, g: PoolGeometry, index_format: str = "flat"
                ) -> jax.Array:
    """max_pool_scatter_add_p's XLA ops: dense sums where `_dense_boxes` applies (in
    increasing window position, as PyTorch's CPU backward adds), XLA's scatter-add (the
    transpose of `gather_at_argmax`) otherwise; for window offsets, a pad and an add per
    tap (`_window.scatter`) where every window has a tap in the input."""
    if index_format == "window":
        if _window.dense_applies(g) and _args.is_movable(ct.dtype):
            return _window.scatter(ct, idx, g, add=True)
        return scatter_add(ct, _window.to_flat(idx, g), g)
    b = _dense_boxes(g, ct.dtype, ct.shape)
    if b is not None:
        return _unpool_dense.scatter(ct, idx, b, g.channels_last, add=True)

    def general(ct, idx):
        t_shape = _geometry.with_spatial(idx.shape, g.in_size, g.channels_last)
        transposed = jax.linear_transpose(lambda t: gather_at_argmax(t, idx, g),
                                          jax.ShapeDtypeStruct(t_shape, ct.dtype))
        return transposed(ct)[0]

    return _batched(general, ct, idx, g)


# custom_jvp rather than differentiating the select chain: the tangent is one gather at
# the argmax (not kh*kw selects), and integer x (float0 tangent) and the indices (no
# gradient) are handled explicitly.
@partial(jax.custom_jvp, nondiff_argnums=(1,))
def _pool(x: jax.Array, g: PoolGeometry) -> tuple[jax.Array, jax.Array]:
    return pool_values_and_indices(x, g)


# One compiled computation per geometry, so that eager calls do not dispatch the
# kh*kw tap loop op by op (under an outer jit this is simply inlined).
_pool_jit = jax.jit(_pool, static_argnums=(1,))


@_pool.defjvp
def _pool_jvp(g: PoolGeometry, primals: tuple, tangents: tuple) -> tuple:
    (x,), (t,) = primals, tangents
    out, idx = _pool(x, g)
    if t.dtype == jax.dtypes.float0:  # integer x: nothing to differentiate
        t_out = _symbolic.no_tangent(out.shape)
    else:
        t_out = gather_at_argmax(t, idx, g)
    return (out, idx), (t_out, _symbolic.no_tangent(idx.shape))


def _on_batches(pool_fn, x: jax.Array, g: PoolGeometry) -> tuple[jax.Array, jax.Array]:
    """`pool_fn` on a batched or unbatched `x` of any ordered dtype."""
    unbatched = x.ndim == g.k + 1
    xb = x[None] if unbatched else x
    if x.dtype == jnp.bool_:  # compares on bool are awkward in XLA; uint8 orders the same
        values, indices = pool_fn(xb.astype(jnp.uint8), g)
        values = values.astype(jnp.bool_)
    else:
        values, indices = pool_fn(xb, g)
    return (values[0], indices[0]) if unbatched else (values, indices)


def values_and_indices(x: jax.Array, g: PoolGeometry, index_format: str = "flat"
                       ) -> tuple[jax.Array, jax.Array]:
    """The pool in XLA ops (the primitives' lowering; their own JVP differentiates it)."""
    return _on_batches(partial(pool_values_and_indices, window=index_format == "window"),
                       x, g)


def pool(x: jax.Array, g: PoolGeometry) -> tuple[jax.Array, jax.Array]:
    """The pool in XLA ops with XLA's scatter-add as its gradient (the reference's pools),
    one compiled computation per geometry."""
    return _on_batches(_pool_jit, x, g)
