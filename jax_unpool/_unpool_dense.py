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
operand's size; for window offsets (`_window`; boxes with `tap_codes`) the tap
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

# Boxes of up to this many candidate positions (a pool's taps where it is known): the
# gather's select chain has one step per candidate, the forward one per shift (fewer).
# Window offsets, whose only path without XLA's gather this is, take any window their
# format holds (at most 256 taps).
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
    # A pool's (kernel, dilation): only its taps can hold an index (None: any position).
    taps: tuple | None = None
    # Whether the codes are tap numbers (window offsets) rather than flat offsets.
    tap_codes: bool = False

    def candidates(self) -> int:
        """How many box positions can hold an index."""
        return math.prod(self.taps[0]) if self.taps else math.prod(self.extent)

    @property
    def k(self) -> int:
        return len(self.in_size)

    def out_strides(self) -> tuple[int, ...]:
        return tuple(math.prod(self.out_size[a + 1:]) for a in range(self.k))


def boxes(in_size, out_size, window: _geometry.Window | None, index_dtype,
          taps: tuple | None = None) -> Boxes | None:
    """The boxes of `window` (`_geometry.unpool_window`'s) between these sizes, where only
    the pool's `taps` (kernel, dilation) can hold an index if they are known; None where
    the dense ops do not apply: no window, more than MAX_BOX candidate positions, or
    offsets that no index dtype here holds."""
    if window is None:
        return None
    extent, stride, padding = window
    b = Boxes(tuple(in_size), tuple(out_size), extent, stride, padding, np.dtype(np.int32),
              taps)
    if b.candidates() > MAX_BOX:
        return None
    strides = [math.prod(out_size[a + 1:]) for a in range(len(out_size))]
    # Corners and in-box offsets, with margin: int32 where they fit (TPUs emulate int64),
    # else int64 where jax has it.
    reach = sum((max(p, (i - 1) * s) + e + s) * st for i, e, s, p, st in
                zip(in_size, extent, stride, padding, strides)) + math.prod(out_size)
    if reach <= _args.INT32_MAX:
        return b
    if np.dtype(index_dtype) == np.int64 and reach < 2**62:
        return b._replace(offset_dtype=np.dtype(np.int64))
    return None


def _spatial(ndim: int, channels_last: bool, k: int) -> list[int]:
    return list(_geometry.spatial_axes(ndim, channels_last, k))


def window_boxes(g: _geometry.PoolGeometry) -> Boxes:
    """The boxes of a pool's window offsets: its windows, coded by tap number."""
    window = _geometry.unpool_window(g.out_size, g.in_size, g.window())
    return Boxes(g.out_size, g.in_size, *window, np.dtype(np.int32), (g.kernel, g.dilation),
                 tap_codes=True)


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
    """What an index at box position `pos` is coded as, or None where no index can be."""
    if b.taps is not None and _tap_code(b, pos) is None:
        return None
    if b.tap_codes:
        return _tap_code(b, pos)
    return sum(d * st for d, st in zip(pos, b.out_strides()))


def _iota(shape, axis: int, dtype=None) -> jax.Array:
    return lax.broadcasted_iota(dtype or np.int32, tuple(shape), axis)


def _offsets(indices: jax.Array, b: Boxes, channels_last: bool) -> jax.Array:
    """The codes: index - corner(q) at every input position q, corner(q) the flat position
    of the box's first coordinates (q * stride - padding per axis, possibly outside the
    plane); window offsets as they are."""
    if b.tap_codes:
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
            inside = _in_plane(b, a, pos[a], offsets.shape, axes[a])
            hit = hit if inside is None else hit & inside
        yield pos, hit


def _in_plane(b: Boxes, a: int, d: int, shape, ax: int) -> jax.Array | None:
    """Where position d of the boxes on axis a lies inside the plane (None: everywhere)."""
    if not _may_leave(b, a, d):
        return None
    coord = _iota(shape, ax) * b.stride[a] + (d - b.padding[a])
    return (coord >= 0) & (coord < b.out_size[a])


def _in_last_axis_run(offsets: jax.Array, b: Boxes, ax: int) -> jax.Array:
    """Per position of the boxes' other axes: where the offset, less that position's code,
    is a box position on the last axis inside the plane. Those positions are consecutive,
    [max(0, p - q * s), min(e, size + p - q * s)) at input position q: one unsigned
    compare. In wrapping arithmetic, as the offsets' own (exact: every box position's
    offset fits)."""
    e, s, p, o = b.extent[-1], b.stride[-1], b.padding[-1], b.out_size[-1]
    dt = b.offset_dtype
    unsigned = np.dtype(f"uint{8 * dt.itemsize}")
    starts = _iota((offsets.shape[ax],), 0, dt) * s
    lo = jnp.maximum(p - starts, 0)
    span = jnp.maximum(jnp.minimum(e, o + p - starts) - lo, 0)
    shape = [1] * offsets.ndim
    shape[ax] = offsets.shape[ax]
    return (lax.bitcast_convert_type(offsets - lo.reshape(shape), unsigned)
            < lax.bitcast_convert_type(span, unsigned).reshape(shape))


def in_boxes(indices: jax.Array, b: Boxes, channels_last: bool) -> jax.Array:
    """Whether every index lies in the plane and in its own box (a scalar bool), with no
    division (slow on accelerators): per position of the boxes on the axes before the
    last, one range check along the last (`_in_last_axis_run`): 3 for a 3x3 box; one
    compare per box position where the taps along the last axis are dilated."""
    axes = _spatial(indices.ndim, channels_last, b.k)
    offsets = _offsets(indices, b, channels_last)
    found = None
    if b.tap_codes or (b.taps is not None and b.taps[1][-1] != 1):
        for _, hit in _hits(offsets, b, axes, range(b.k)):
            found = hit if found is None else found | hit
    else:
        lead = [[t * dil for t in range(kk)] for kk, dil in zip(*b.taps)] if b.taps else [
            range(e) for e in b.extent]
        for pos in itertools.product(*lead[:-1]):
            code = sum(d * st for d, st in zip(pos, b.out_strides()))
            hit = _in_last_axis_run(offsets - code, b, axes[-1])
            for a, d in enumerate(pos):
                inside = _in_plane(b, a, d, offsets.shape, axes[a])
                hit = hit if inside is None else hit & inside
            found = hit if found is None else found | hit
    if np.dtype(indices.dtype).itemsize > b.offset_dtype.itemsize:  # narrowed: wraps
        found = found & (indices >= 0) & (indices < math.prod(b.out_size))
    # XLA's CPU reduces uint8 in a vectorised kernel, bools in a scalar loop (issue 47).
    return jnp.min(found.astype(np.uint8)) > 0


class _Run(NamedTuple):
    """A run of one axis's phases: output positions m * stride + f, f in `phases` (rows m
    start at the plane's origin), each held by the boxes of input positions m - j, j in
    `shifts` (decreasing: increasing input position)."""

    phases: range
    shifts: range


def _runs(b: Boxes, a: int) -> list[_Run]:
    """Axis a's phases in runs held by the same shifts: at most three per axis. Box q holds
    output position (q + j) * s + f at box position j * s + f + p, inside [0, e) for
    j in [-floor((f + p) / s), ceil((e - f - p) / s)); each bound steps once over f < s."""
    e, s, p = b.extent[a], b.stride[a], b.padding[a]
    starts = sorted({0, -p % s, (e - p) % s})
    return [_Run(range(f, end), range(-(-(e - f - p) // s) - 1, -((f + p) // s) - 1, -1))
            for f, end in zip(starts, [*starts[1:], s])]


def _with_phases(a: jax.Array, axes: list[int]) -> jax.Array:
    """A unit axis after each spatial axis: (N, C, H, 1, W, 1) for channels-first 2-D."""
    return lax.expand_dims(a, [ax + i + 1 for i, ax in enumerate(axes)])


def _run_codes(b: Boxes, runs, shift, ndim: int, axes: list[int]) -> jax.Array:
    """The code of box position shift * s + f + p at each phase f of `runs`, shaped to
    broadcast against the input with phase axes (`_with_phases`): for flat indices that
    position's offset from the corner (iotas), for window offsets its tap number, or -2
    where it is no tap (constants of the runs' small shape)."""
    shape = [1] * ndim
    for i, (ax, run) in enumerate(zip(axes, runs)):
        shape[ax + i + 1] = len(run.phases)
    phase_axes = [ax + i + 1 for i, ax in enumerate(axes)]
    first = [j * s + run.phases[0] + p for j, s, p, run in zip(shift, b.stride, b.padding, runs)]
    if not b.tap_codes:
        return sum((_iota(shape, ax, b.offset_dtype) + d) * st
                   for ax, d, st in zip(phase_axes, first, b.out_strides()))
    kernel, dilation = b.taps
    code, tap = np.zeros(shape, np.int64), np.ones(shape, bool)
    for ax, d, kk, dil in zip(phase_axes, first, kernel, dilation):
        position = (d + np.arange(shape[ax])).reshape([-1 if i == ax else 1
                                                       for i in range(ndim)])
        code = code * kk + position // dil
        tap = tap & (position % dil == 0) & (position // dil < kk)
    return jnp.asarray(np.where(tap, code, -2).astype(np.int32))


def _placed(a: jax.Array, axes: list[int], shift, rows, fill) -> jax.Array:
    """Input position q at row q + shift: padded (or cropped) to `rows` per spatial axis.
    Each call pads its own select, used once, which XLA fuses into the consumer; a pad
    of the operand sliced per shift is materialized instead (a pad with several users)."""
    config = [(0, 0, 0)] * a.ndim
    for ax, j, m in zip(axes, shift, rows):
        config[ax] = (j, m - j - a.shape[ax], 0)
    return lax.pad(a, jnp.asarray(fill, a.dtype), config)


def _interleaved(blocks: dict, runs: list[list[_Run]], axes: list[int], prefix=()
                 ) -> jax.Array:
    """The blocks of phase runs (keyed by their runs' tuple) joined along each spatial
    axis's phase axis, in phase order: (N, C, M0, s0, M1, s1) for channels-first 2-D."""
    a = len(prefix)
    if a == len(axes):
        return blocks[prefix]
    parts = [_interleaved(blocks, runs, axes, (*prefix, run)) for run in runs[a]]
    return parts[0] if len(parts) == 1 else lax.concatenate(parts, axes[a] + a + 1)


def scatter(x: jax.Array, indices: jax.Array, b: Boxes, channels_last: bool,
            add: bool = False) -> jax.Array:
    """out[..., index] = x, the largest input position winning among duplicates (or, with
    `add`, their sum, added in increasing input position as PyTorch's CPU pool backward
    does); for indices inside their boxes. x is moved as it is: select, no arithmetic.

    The output is viewed as (rows, stride) per axis from the plane's origin, and its
    phases in runs held by the same shifts (`_runs`): for 3x3/s2/p1 one box holds an
    even position and two an odd one, 9 candidates per 2x2 block of outputs rather than a
    compare and select of every shift at every phase (16). Each candidate compares the
    codes with its box position's code and selects on the input's grid, then is padded
    into place: every op is fused into one loop over the output."""
    axes = _spatial(x.ndim, channels_last, b.k)
    codes = _with_phases(_offsets(indices, b, channels_last), axes)
    moved = _with_phases(x, axes)
    grid = [ax + i for i, ax in enumerate(axes)]  # the spatial axes among the phase axes
    rows = tuple(-(-o // s) for o, s in zip(b.out_size, b.stride))
    zero = jnp.zeros((), x.dtype)
    runs = [_runs(b, a) for a in range(b.k)]
    blocks = {}
    for key in itertools.product(*runs):
        out = None
        # Increasing input position q = m - j: the last one applied wins (or is added last).
        for shift in itertools.product(*(run.shifts for run in key)):
            if any(j >= m or j <= -n for j, m, n in zip(shift, rows, b.in_size)):
                continue  # no input position reaches a row
            hit = codes == _run_codes(b, key, shift, x.ndim + b.k, axes)
            term = _placed(jnp.where(hit, moved, zero), grid, shift, rows, 0)
            if out is None:
                out = term
            elif add:
                out = out + term
            else:
                out = jnp.where(_placed(hit, grid, shift, rows, False), term, out)
        if out is None:  # phases no box reaches (a stride beyond the extent)
            shape = list(moved.shape)
            for i, (ax, run) in enumerate(zip(axes, key)):
                shape[ax + i + 1] = len(run.phases)
            out = _placed(jnp.broadcast_to(jnp.zeros_like(moved), shape), grid, (0,) * b.k,
                          rows, 0)
        blocks[key] = out
    out = _interleaved(blocks, runs, axes)
    # (rows, stride) -> rows * stride, one axis at a time: jax's explicit sharding names the
    # result of one merge next to a split dim (N or C), not of several at once.
    for ax, m, s in zip(axes, rows, b.stride):
        out = out.reshape(*out.shape[:ax], m * s, *out.shape[ax + 2:])
    limit = list(out.shape)
    for ax, o in zip(axes, b.out_size):
        limit[ax] = o
    return lax.slice(out, [0] * out.ndim, limit)


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
    wide = [] if b.tap_codes else [a for a in range(1, b.k) if b.extent[a] > b.out_size[a]]
    out = jnp.zeros_like(indices, dtype=values.dtype)  # and the indices' sharding
    for pos, hit in _hits(offsets, b, axes, wide):
        start, limit, step = [0] * padded.ndim, list(padded.shape), [1] * padded.ndim
        for ax, d, i, s in zip(axes, pos, b.in_size, b.stride):
            start[ax], limit[ax], step[ax] = d, d + (i - 1) * s + 1, s
        out = jnp.where(hit, lax.slice(padded, start, limit, step), out)
    return out
