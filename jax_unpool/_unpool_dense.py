"""The unpool's moves in dense XLA ops, for indices that lie inside their windows' boxes:
broadcast, iota, compare, select, pad, (strided) slices, reshape and add; no scatter, no
gather, which XLA runs as a serial loop on TPUs (openxla/xla#12982).

Input position q (per spatial axis, of the operand that holds the indices) owns the box
[q * stride - padding, q * stride - padding + extent) of the plane its index points
into: a pool's window, whose argmax it holds. When every index lies in its own box,

- the forward (`scatter`) computes each output position from the at most ceil(extent /
  stride) boxes per axis that hold it: viewed as (rows, stride) per axis, output row m
  phase f is held by input positions m - j, j < ceil(extent / stride). Each shift j is
  one compare of the shifted indices with an iota-derived position, and one select;
- the backward (`gather`) reads each input position's box: one strided slice per box
  position, one compare and one select each;
- `scatter(..., add=True)` (the pools' gradient over overlapping windows) adds where the
  forward selects.

Positions are compared as codes: for flat indices the offset from each box's corner,
`index - corner(q)`, which for a position in the box depends only on where in the box it
is (the shift and the phase): an iota over that small shape, never a table of the
operand's size; for window offsets (`_window`, a pool's boxes with `taps` set) the tap
number itself, which a box position has where it is a tap (a multiple of the dilation
from the corner): small constants, no arithmetic on the operand at all.

`in_boxes` is the check that chooses this path on the device for indices of unknown
origin (`_unpool_xla`); `boxes` says, at trace time, whether it can apply at all. Operands here are batched (N first),
channels-first or channels-last, of spatial rank k.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_unpool import _args, _geometry

# Boxes of up to this many positions: the gather's select chain has one step per box
# position, the forward one per shift (fewer).
MAX_BOX = 64


class Boxes(NamedTuple):
    """Per spatial axis: the size of the operand holding the indices (`in_size`), of the
    plane they point into (`out_size`), and each box's extent, stride and padding."""

    in_size: tuple[int, ...]
    out_size: tuple[int, ...]
    extent: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    offset_dtype: np.dtype  # of `index - corner`: int32 where every value fits
    # Window offsets: the pool's (kernel, dilation), whose tap numbers are the codes.
    taps: tuple | None = None

    @property
    def k(self) -> int:
        return len(self.in_size)

    def out_strides(self) -> tuple[int, ...]:
        return tuple(math.prod(self.out_size[a + 1:]) for a in range(self.k))

    def shifts(self) -> tuple[int, ...]:
        """Per axis, how many boxes can hold an output position: ceil(extent / stride)."""
        return tuple(-(-e // s) for e, s in zip(self.extent, self.stride))

    def rows(self) -> tuple[int, ...]:
        """Per axis, rows of `stride` phases that cover padding + out_size positions."""
        return tuple(-(-(o + p) // s) for o, p, s in zip(self.out_size, self.padding,
                                                         self.stride))


def boxes(in_size, out_size, window: _geometry.Window | None, index_dtype) -> Boxes | None:
    """The boxes of `window` (`_geometry.unpool_window`'s) between these sizes; None where
    the dense ops do not apply: no window, boxes of more than MAX_BOX positions, or
    offsets that no index dtype here holds."""
    if window is None:
        return None
    extent, stride, padding = window
    if math.prod(extent) > MAX_BOX:
        return None
    strides = [math.prod(out_size[a + 1:]) for a in range(len(out_size))]
    # Corners and in-box offsets, with margin: int32 where they fit (TPUs emulate int64),
    # else int64 where jax has it.
    reach = sum((max(p, (i - 1) * s) + e + s) * st for i, e, s, p, st in
                zip(in_size, extent, stride, padding, strides)) + math.prod(out_size)
    if reach <= _args.INT32_MAX:
        dtype = np.dtype(np.int32)
    elif np.dtype(index_dtype) == np.int64 and reach < 2**62:
        dtype = np.dtype(np.int64)
    else:
        return None
    return Boxes(tuple(in_size), tuple(out_size), extent, stride, padding, dtype)


def _spatial(ndim: int, channels_last: bool, k: int) -> list[int]:
    return list(_geometry.spatial_axes(ndim, channels_last, k))


def window_boxes(g: _geometry.PoolGeometry) -> Boxes:
    """The boxes of a pool's window offsets: the windows, coded by tap number. Along an
    axis of one window the stride means nothing: the extent stands in for it, so that the
    forward's (rows, stride) view stays the plane's size whatever the stride."""
    stride = tuple(s if o > 1 else e for s, o, e in zip(g.stride, g.out_size, g.extent()))
    return Boxes(g.out_size, g.in_size, g.extent(), stride, g.padding, np.dtype(np.int32),
                 (g.kernel, g.dilation))


def _tap_code(b: Boxes, pos) -> int | None:
    """The code of box position `pos`: its tap number, or None where it is no tap."""
    kernel, dilation = b.taps
    code = 0
    for d, kk, dil in zip(pos, kernel, dilation):
        if d % dil or d // dil >= kk:
            return None
        code = code * kk + d // dil
    return code


def _position_code(b: Boxes, pos) -> int | None:
    if b.taps is not None:
        return _tap_code(b, pos)
    return sum(d * st for d, st in zip(pos, b.out_strides()))


def _iota(shape, axis: int, dtype=None) -> jax.Array:
    return lax.broadcasted_iota(dtype or np.int32, tuple(shape), axis)


def _offsets(indices: jax.Array, b: Boxes, channels_last: bool) -> jax.Array:
    """The codes: index - corner(q) at every input position q, corner(q) the flat position
    of the box's first coordinates (q * stride - padding per axis, possibly outside the
    plane); window offsets as they are."""
    if b.taps is not None:
        return indices.astype(np.int32)
    dt = b.offset_dtype
    corner = -sum(p * st for p, st in zip(b.padding, b.out_strides()))
    for a, ax in enumerate(_spatial(indices.ndim, channels_last, b.k)):
        corner = corner + _iota(indices.shape, ax, dt) * (b.stride[a] * b.out_strides()[a])
    return indices.astype(dt) - corner


def _may_leave(b: Boxes, a: int, d: int) -> bool:
    """Whether position d of some box on axis a lies outside the plane."""
    first = d - b.padding[a]
    return first < 0 or first + (b.in_size[a] - 1) * b.stride[a] >= b.out_size[a]


def _hits(offsets: jax.Array, b: Boxes, axes: list[int], masked_axes):
    """(d, hit) for each position d of the boxes, hit where an index is that position of
    its box: its offset is d's, and d lies inside the plane on each of `masked_axes`
    where some box can leave it (elsewhere a position outside the plane has the offset
    of an inside one only in a box wider than the plane: see `gather`)."""
    for pos in itertools.product(*map(range, b.extent)):
        code = _position_code(b, pos)
        if code is None:  # no tap: no window offset names it
            continue
        hit = offsets == code
        for a in masked_axes:
            if _may_leave(b, a, pos[a]):
                coord = _iota(offsets.shape, axes[a]) * b.stride[a] + (pos[a] - b.padding[a])
                hit = hit & (coord >= 0) & (coord < b.out_size[a])
        yield pos, hit


def in_boxes(indices: jax.Array, b: Boxes, channels_last: bool) -> jax.Array:
    """Whether every index lies in the plane and in its own box (a scalar bool): one
    compare per box position, no division (slow on accelerators)."""
    axes = _spatial(indices.ndim, channels_last, b.k)
    found = None
    for _, hit in _hits(_offsets(indices, b, channels_last), b, axes, range(b.k)):
        found = hit if found is None else found | hit
    if np.dtype(indices.dtype).itemsize > b.offset_dtype.itemsize:  # narrowed: wraps
        found = found & (indices >= 0) & (indices < math.prod(b.out_size))
    return jnp.all(found)


def _padded_for_shifts(a: jax.Array, axes: list[int], shifts, rows, fill) -> jax.Array:
    """a padded once for every shift: `shifts - 1` positions before it, and after it up to
    `rows` (or trimmed to them), so that shift j is the slice from shifts - 1 - j."""
    config = [(0, 0, 0)] * a.ndim
    for ax, j, m in zip(axes, shifts, rows):
        config[ax] = (j - 1, m - a.shape[ax], 0)
    return lax.pad(a, jnp.asarray(fill, a.dtype), config)


def _shifted(padded: jax.Array, axes: list[int], shifts, shift, rows) -> jax.Array:
    """Row m holds the operand's position m - shift (or the fill)."""
    start, limit = [0] * padded.ndim, list(padded.shape)
    for ax, n, j, m in zip(axes, shifts, shift, rows):
        start[ax], limit[ax] = n - 1 - j, n - 1 - j + m
    return lax.slice(padded, start, limit)


def _with_phases(a: jax.Array, axes: list[int]) -> jax.Array:
    """A unit axis after each spatial axis: (N, C, M0, 1, M1, 1) for channels-first 2-D."""
    return lax.expand_dims(a, [ax + i + 1 for i, ax in enumerate(axes)])


def _phase_codes(b: Boxes, shift, phase_axes, phase_shape) -> jax.Array:
    """The code of output position (m, f) in box m - shift, at box position shift * s + f:
    for flat indices that position's offset from the corner (an iota); for window offsets
    its tap number, or -2 where it is no tap (constants of the phases' small shape)."""
    if b.taps is None:
        strides = b.out_strides()
        return sum((_iota(phase_shape, ax, b.offset_dtype) + j * s) * st
                   for ax, j, s, st in zip(phase_axes, shift, b.stride, strides))
    kernel, dilation = b.taps
    code, tap = np.zeros(phase_shape, np.int64), np.ones(phase_shape, bool)
    for ax, j, s, kk, dil in zip(phase_axes, shift, b.stride, kernel, dilation):
        position = j * s + np.arange(s)
        shape = [1] * len(phase_shape)
        shape[ax] = s
        code = code * kk + (position // dil).reshape(shape)
        tap = tap & ((position % dil == 0) & (position // dil < kk)).reshape(shape)
    return jnp.asarray(np.where(tap, code, -2).astype(np.int32))


def scatter(x: jax.Array, indices: jax.Array, b: Boxes, channels_last: bool,
            add: bool = False) -> jax.Array:
    """out[..., index] = x, the largest input position winning among duplicates (or, with
    `add`, their sum, added in increasing input position as PyTorch's CPU pool backward
    does); for indices inside their boxes. x is moved as it is: select, no arithmetic."""
    axes = _spatial(x.ndim, channels_last, b.k)
    offsets = _offsets(indices, b, channels_last)
    rows = b.rows()
    # The output as (N, C, M0, s0, M1, s1) for NCHW: rows and phases; the phases' iotas
    # have shape (1, 1, 1, s0, 1, s1).
    phase_axes = [ax + i + 1 for i, ax in enumerate(axes)]
    phase_shape = [1] * (x.ndim + b.k)
    for ax, s in zip(phase_axes, b.stride):
        phase_shape[ax] = s
    shifts = b.shifts()
    zero = jnp.zeros((), x.dtype)
    # One pad each, sliced per shift: XLA then pads once, not once per shift and element.
    x_padded = _padded_for_shifts(x, axes, shifts, rows, 0)
    # -1: no box (before the first or after the last input position); offsets are >= 0.
    offsets_padded = _padded_for_shifts(offsets, axes, shifts, rows, -1)
    out = None
    # Increasing input position q = m - j: decreasing shifts, the last one applied wins.
    # Shift 0 is always applied, so `out` has every row and phase.
    for shift in itertools.product(*(range(j - 1, -1, -1) for j in shifts)):
        if any(j >= m for j, m in zip(shift, rows)):  # no input position reaches a row
            continue
        moved = _with_phases(_shifted(x_padded, axes, shifts, shift, rows), axes)
        held = _with_phases(_shifted(offsets_padded, axes, shifts, shift, rows), axes)
        hit = held == _phase_codes(b, shift, phase_axes, phase_shape)
        if add:
            term = jnp.where(hit, moved, zero)
            out = term if out is None else out + term
        else:
            out = jnp.where(hit, moved, zero if out is None else out)
    # (rows, stride) -> rows * stride, one axis at a time: jax's explicit sharding names the
    # result of one merge next to a split dim (N or C), not of several at once.
    for ax, m, s in zip(axes, rows, b.stride):
        out = out.reshape(*out.shape[:ax], m * s, *out.shape[ax + 2:])
    start, limit = [0] * out.ndim, list(out.shape)
    for ax, p, o in zip(axes, b.padding, b.out_size):
        start[ax], limit[ax] = p, p + o
    return lax.slice(out, start, limit)


def gather(values: jax.Array, indices: jax.Array, b: Boxes, channels_last: bool
           ) -> jax.Array:
    """out[q] = values[..., index at q], for indices inside their boxes: a select per box
    position, each a strided slice of the padded plane. Moves bits: select only."""
    axes = _spatial(indices.ndim, channels_last, b.k)
    offsets = _offsets(indices, b, channels_last)
    config = [(0, 0, 0)] * values.ndim
    for ax, i, e, s, p, o in zip(axes, b.in_size, b.extent, b.stride, b.padding, b.out_size):
        config[ax] = (p, (i - 1) * s + e - p - o, 0)
    padded = lax.pad(values, jnp.zeros((), values.dtype), config)
    # A box wider than the plane on an axis after the first reaches, outside the plane,
    # positions whose offsets equal inside ones' (with W = 2 and extent 3: (h + 1, -1)
    # and (h, 1)): there, positions outside the plane are masked.
    # (Tap numbers name each axis's position exactly: nothing to mask.)
    wide = [] if b.taps else [a for a in range(1, b.k) if b.extent[a] > b.out_size[a]]
    out = jnp.zeros_like(indices, dtype=values.dtype)  # and the indices' sharding
    for pos, hit in _hits(offsets, b, axes, wide):
        start, limit, step = [0] * padded.ndim, list(padded.shape), [1] * padded.ndim
        for ax, d, i, s in zip(axes, pos, b.in_size, b.stride):
            start[ax], limit[ax], step[ax] = d, d + (i - 1) * s + 1, s
        out = jnp.where(hit, lax.slice(padded, start, limit, step), out)
    return out
