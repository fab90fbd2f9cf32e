"""Window-offset indices: a pool's argmax as its position inside its window, one byte each.

A window of a pool with kernel (k_0, ..., k_{K-1}) has taps numbered in row-major order,
tap t = sum_a j_a * K_a with K_a = k_{a+1} * ... * k_{K-1}, whose coordinate on axis a is
start_a + j_a * dilation_a, start_a = window_a * stride_a - padding_a. Its offset is that
number: at most 256 taps fit a uint8 (`check_taps`). A window with no tap inside the
input (PyTorch's "window of padding only") holds offset 0: its flat index is PyTorch's
initial one (`PoolGeometry.first_in_bounds`), whatever the offset says.

`WindowIndices` is the public pytree (`offsets` and the pool's geometry); this module
also holds the conversions to and from flat indices and the XLA ops of the unpool, its
backward and the pool's derivative on offsets: `_unpool_dense`'s selects with tap
numbers for codes, no scatter, gather, division or conditional (what a TPU runs well),
for geometries whose every window has a tap inside the input (`dense_applies`). Elsewhere the lowerings
convert to flat indices first (`to_flat`), which follows PyTorch's quirks exactly.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jax_unpool import _args, _geometry, _unpool_dense
from jax_unpool._geometry import PoolGeometry

MAX_TAPS = 256  # offsets 0..255 in a uint8
OFFSET_DTYPE = np.dtype(np.uint8)
FORMATS = ("flat", "window")


def check_format(fn: str, index_format: Any) -> str:
    if not isinstance(index_format, str) or index_format not in FORMATS:
        raise ValueError(f"{fn}: index_format must be 'flat' or 'window', got "
                         f"{_args.received(index_format)}")
    return index_format


def taps(g: PoolGeometry) -> int:
    return math.prod(g.kernel)


def check_taps(fn: str, g: PoolGeometry) -> None:
    """A window of more than MAX_TAPS taps has offsets a byte cannot hold."""
    if taps(g) > MAX_TAPS:
        raise ValueError(
            f"{fn}: index_format='window' holds each argmax's position in its window in one "
            f"byte, for windows of at most {MAX_TAPS} taps; kernel_size={g.kernel} has "
            f"{taps(g)}: use index_format='flat'")


def tap_strides(g: PoolGeometry) -> tuple[int, ...]:
    """K_a: tap t's coordinate j_a along axis a is (t // K_a) % k_a."""
    return tuple(math.prod(g.kernel[a + 1:]) for a in range(g.k))


# --------------------------------------------------------------------------------------
# The public pytree
# --------------------------------------------------------------------------------------

@jax.tree_util.register_pytree_node_class
class WindowIndices:
    """A max pool's argmax as the position of each maximum inside its window: what
    ``max_pool{1,2,3}d_with_indices(..., index_format="window")`` returns beside the
    values, a quarter of int32 indices' memory (an eighth of int64's).

    ``offsets`` (uint8, the values' shape) is the argmax's tap number in its window, in
    row-major tap order (for a 2-D kernel (kh, kw): ``i * kw + j`` for tap (i, j)); the
    pool's geometry (kernel, stride, padding, dilation, ceil_mode, the input's spatial
    size, the data format) is static data of the pytree, so ``jax.jit``, ``jax.vmap`` and
    ``jax.grad`` pass it through. ``max_unpool{k}d(values, w)`` and
    ``max_unpool{k}d_backward(grad, x, w)`` take it in place of flat indices.
    """

    __slots__ = ("geometry", "offsets")

    def __init__(self, offsets: Any, geometry: PoolGeometry):
        self.offsets = offsets
        self.geometry = geometry

    def tree_flatten(self):
        return (self.offsets,), self.geometry

    @classmethod
    def tree_unflatten(cls, geometry, children):
        return cls(children[0], geometry)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(np.shape(self.offsets))

    @property
    def kernel_size(self) -> tuple[int, ...]:
        return self.geometry.kernel

    @property
    def stride(self) -> tuple[int, ...]:
        return self.geometry.stride

    @property
    def padding(self) -> tuple[int, ...]:
        return self.geometry.padding

    @property
    def dilation(self) -> tuple[int, ...]:
        return self.geometry.dilation

    @property
    def ceil_mode(self) -> bool:
        return self.geometry.ceil_mode

    @property
    def input_size(self) -> tuple[int, ...]:
        """The pool's input spatial size: the unpool's output size."""
        return self.geometry.in_size

    @property
    def data_format(self) -> str:
        g = self.geometry
        return _geometry.data_format(g.k, g.channels_last, len(self.shape) == g.k + 2)

    def to_flat(self, index_dtype: Any = jnp.int32) -> jax.Array:
        """The flat indices ``index_format="flat"`` gives for the same pool, bit for bit
        (PyTorch's quirks included: a window of padding only has PyTorch's initial
        index). An offset that names no tap of its window inside the input (possible only
        in arrays not made by the pool) becomes -1, out of range for every consumer."""
        fn = "WindowIndices.to_flat"
        dtype = _geometry.index_dtype(fn, index_dtype)
        g = self.geometry._replace(index_dtype=dtype)
        _geometry.check_plane_indices(fn, g)
        offsets = _args.as_array(fn, "offsets", self.offsets)
        return to_flat(offsets, g)

    def __repr__(self) -> str:
        g = self.geometry
        return (f"WindowIndices(offsets={self.offsets!r}, kernel_size={g.kernel}, "
                f"stride={g.stride}, padding={g.padding}, dilation={g.dilation}, "
                f"ceil_mode={g.ceil_mode}, input_size={g.in_size}, "
                f"data_format={self.data_format!r})")


# --------------------------------------------------------------------------------------
# Coordinates of windows and taps, from iotas (no per-window tables)
# --------------------------------------------------------------------------------------

def _window_numbers(shape, axes, a: int, dtype) -> jax.Array:
    return lax.broadcasted_iota(dtype, tuple(shape), axes[a])


def _starts(shape, axes, g: PoolGeometry, dtype) -> list[jax.Array]:
    return [_window_numbers(shape, axes, a, dtype) * g.stride[a] - g.padding[a]
            for a in range(g.k)]


def padding_only(shape, axes, g: PoolGeometry) -> jax.Array | None:
    """Where a window has no tap inside the input (None: nowhere, for this geometry)."""
    if g.argmax_in_window():
        return None
    found = None
    for a, start in enumerate(_starts(shape, axes, g, np.int64 if jax.config.x64_enabled
                                      else np.int32)):
        first = jnp.where(start < 0, start % g.dilation[a], start)  # first tap at >= 0
        empty = first >= g.in_size[a]
        found = empty if found is None else found | empty
    return found


def to_flat(offsets: jax.Array, g: PoolGeometry) -> jax.Array:
    """Flat indices (g.index_dtype) of `offsets` (any layout, batched or not): see
    `WindowIndices.to_flat`. Arithmetic in the index dtype, exact wherever the result
    fits it (`_geometry.check_plane_indices`)."""
    dt = g.index_dtype
    axes = _geometry.spatial_axes(offsets.ndim, g.channels_last, g.k)
    o = offsets.astype(np.int32)
    flat = jnp.zeros(offsets.shape, dt)
    valid = o < taps(g)
    strides = g.flat_strides()
    for a, (start, ks) in enumerate(zip(_starts(offsets.shape, axes, g, dt), tap_strides(g))):
        j = (o // ks) % g.kernel[a]
        coord = start + (j * g.dilation[a]).astype(dt)
        valid = valid & (coord >= 0) & (coord < g.in_size[a])
        flat = flat + coord * strides[a]
    empty = padding_only(offsets.shape, axes, g)
    if empty is not None:  # PyTorch's initial index, for offset 0 (the pool's)
        first = 0
        for a, start in enumerate(_starts(offsets.shape, axes, g, dt)):
            first = first + jnp.where(start < 0, start % g.dilation[a], start) * strides[a]
        flat = jnp.where(empty, first, flat)
        valid = jnp.where(empty, o == 0, valid)
    return jnp.where(valid, flat, jnp.asarray(-1, dt))


def from_flat(flat: jax.Array, g: PoolGeometry) -> tuple[jax.Array, jax.Array]:
    """(offsets, valid): each flat index's tap number in its window, and whether it is
    one (an in-bounds tap of its window; for a window of padding only, PyTorch's initial
    index). Invalid ones get offset min(taps, 255)."""
    dt = flat.dtype
    axes = _geometry.spatial_axes(flat.ndim, g.channels_last, g.k)
    plane = math.prod(g.in_size)
    valid = (flat >= 0) & (flat < plane)
    offset = jnp.zeros(flat.shape, np.int32)
    rest = jnp.clip(flat, 0, max(plane - 1, 0))
    starts = _starts(flat.shape, axes, g, dt)
    for a in range(g.k - 1, -1, -1):
        coord = rest % g.in_size[a]
        rest = rest // g.in_size[a]
        rel = coord - starts[a]
        j = rel // g.dilation[a]
        valid = valid & (rel >= 0) & (rel % g.dilation[a] == 0) & (j < g.kernel[a])
        offset = offset + (j * tap_strides(g)[a]).astype(np.int32)
    empty = padding_only(flat.shape, axes, g)
    if empty is not None:
        initial = to_flat(jnp.zeros(flat.shape, OFFSET_DTYPE), g._replace(index_dtype=dt))
        valid = jnp.where(empty, flat == initial, valid)
        offset = jnp.where(empty, 0, offset)
    bad = min(taps(g), 255)
    return jnp.where(valid, offset, bad).astype(OFFSET_DTYPE), valid


# --------------------------------------------------------------------------------------
# The ops on offsets in dense XLA ops
# --------------------------------------------------------------------------------------

def dense_applies(g: PoolGeometry) -> bool:
    """Whether the per-tap select ops serve this geometry: every window has a tap inside
    the input (else windows of padding only have indices the taps cannot name)."""
    return g.argmax_in_window()


def gather(values: jax.Array, offsets: jax.Array, g: PoolGeometry) -> jax.Array:
    """out[q] = values[tap offsets[q] of window q] (values: the plane, the pool's input
    shape; offsets: the windows'): a strided slice and a select per tap
    (`_unpool_dense.gather` with tap numbers for codes). A tap outside the plane, and an
    offset naming no tap, read 0 (the XLA ops' out-of-range rule)."""
    return _unpool_dense.gather(values, offsets, _unpool_dense.window_boxes(g),
                                g.channels_last)


def scatter(x: jax.Array, offsets: jax.Array, g: PoolGeometry, add: bool = False
            ) -> jax.Array:
    """The plane (the pool's input shape) with each x at its offset's tap, zeros elsewhere;
    among windows that name one position the largest window position wins, or with `add`
    their sum in increasing window position (`_unpool_dense.scatter` with tap numbers for
    codes, so that both index formats add in one order). Taps outside the plane and
    offsets naming no tap are dropped."""
    return _unpool_dense.scatter(x, offsets, _unpool_dense.window_boxes(g), g.channels_last,
                                 add=add)
