"""The Keras layers' pool and unpool in ``keras.ops`` alone, for the backends that cannot
run our primitives (torch, tensorflow): the same results as the primitives, bit for bit,
on every input.

- `max_pool_with_argmax`: PyTorch's loop over a window's taps in row-major order, as
  ``numpy_oracle.max_pool`` spells it: the first in-bounds tap starts, a later one wins
  iff ``value > best or isnan(value)``; padding is the dtype's lowest value and never
  wins (nothing wins by being equal). Values are selected, never computed.
- `max_unpool`: a scatter in which, among duplicated indices, the largest input position
  wins: sorting ``target * positions + position`` puts each target's winner last in its
  group, and only those are written (so no write depends on a backend's order); indices
  outside their plane are dropped, as the XLA ops drop them.

Both take and return one layout: `channels_last` says which; indices are per-plane flat
positions (``jax_unpool``'s, PyTorch's).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import keras
import numpy as np
from keras import ops

__all__ = ["lowest", "max_pool_with_argmax", "max_unpool"]


def lowest(dtype: str):
    """The value padding takes: -inf, or the smallest integer (False for bool)."""
    dtype = np.dtype(keras.backend.standardize_dtype(dtype))
    if dtype.kind == "f" or dtype.name == "bfloat16":
        return -np.inf
    if dtype.kind == "b":
        return False
    return int(np.iinfo(dtype).min)


def _spatial_axes(ndim: int, k: int, channels_last: bool) -> list[int]:
    return list(range(1, k + 1)) if channels_last else list(range(2, k + 2))


def _out_shape(sizes: Sequence[int], k: int, channels_last: bool) -> tuple[int, ...]:
    """A per-window constant's shape, broadcasting against (N, C, *out) or (N, *out, C)."""
    return (*sizes, 1) if channels_last else tuple(sizes)


def max_pool_with_argmax(x, pool_size: Sequence[int], strides: Sequence[int],
                         pads: Sequence[tuple[int, int]], channels_last: bool,
                         index_dtype: str):
    """Max pooling of x's k = len(pool_size) spatial axes with padding `pads` ((before,
    after) per axis): (values, per-plane flat indices into the unpadded input)."""
    k = len(pool_size)
    axes = _spatial_axes(len(x.shape), k, channels_last)
    size = [int(x.shape[a]) for a in axes]
    out = [(n + b + a - p) // s + 1 for n, p, s, (b, a) in zip(size, pool_size, strides, pads)]
    flat_strides = [math.prod(size[a + 1:]) for a in range(k)]
    widths = [(0, 0)] * len(x.shape)
    for axis, pad in zip(axes, pads):
        widths[axis] = pad
    padded = ops.pad(x, widths, constant_values=lowest(x.dtype)) if any(map(any, pads)) else x
    # Each window's first in-bounds position (along each axis, the first tap at or past
    # the left padding), where the loop starts, and each tap's position.
    grids = [np.arange(o) * s - b for o, s, (b, _) in zip(out, strides, pads)]
    first = sum(np.ix_(*[np.maximum(g, 0) * f for g, f in zip(grids, flat_strides)]))
    best = ops.full(tuple(ops.shape(padded)[:axes[0]]) + tuple(out)
                    + tuple(ops.shape(padded)[axes[-1] + 1:]), lowest(x.dtype), dtype=x.dtype)
    index = ops.broadcast_to(ops.convert_to_tensor(first.reshape(_out_shape(out, k,
                                                                            channels_last)),
                                                   dtype=index_dtype), ops.shape(best))
    floating = np.dtype(keras.backend.standardize_dtype(x.dtype)).kind == "f" or \
        keras.backend.standardize_dtype(x.dtype) == "bfloat16"
    for tap in itertools.product(*[range(p) for p in pool_size]):
        value = padded
        for axis, t, o, s in zip(axes, tap, out, strides):
            value = ops.take(value, np.arange(o) * s + t, axis=axis)
        position = sum(np.ix_(*[(g + t) * f for g, t, f in zip(grids, tap, flat_strides)]))
        wins = ops.greater(value, best)
        if floating:
            wins = ops.logical_or(wins, ops.isnan(value))
        best = ops.where(wins, value, best)
        index = ops.where(wins, ops.convert_to_tensor(
            position.reshape(_out_shape(out, k, channels_last)), dtype=index_dtype), index)
    return best, index


def max_unpool(x, indices, output_size: Sequence[int], channels_last: bool):
    """out = zeros with x's spatial sizes replaced by `output_size`, then each value at
    its per-plane index; the largest input position wins among duplicates; indices
    outside the plane are dropped."""
    k = len(output_size)
    if channels_last:  # to (N, C, *spatial) and back: planes are then contiguous
        perm = [0, k + 1, *range(1, k + 1)]
        x, indices = ops.transpose(x, perm), ops.transpose(indices, perm)
    n, c = ops.shape(x)[0], int(x.shape[1])  # the batch may be unknown (TensorFlow's graphs)
    plane_in, plane_out = math.prod(x.shape[2:]), math.prod(output_size)
    total_in, total_out = n * c * plane_in, n * c * plane_out
    flat = ops.reshape(ops.cast(indices, "int64"), (-1, plane_in))  # (n * c, plane_in)
    inside = ops.logical_and(ops.greater_equal(flat, 0), ops.less(flat, plane_out))
    target = ops.where(inside, flat + ops.expand_dims(
        ops.arange(n * c, dtype="int64") * plane_out, 1), total_out)  # total_out: dropped
    key = ops.sort(ops.reshape(target, (-1,)) * total_in + ops.arange(total_in, dtype="int64"))
    target, position = key // total_in, key % total_in
    last = ops.not_equal(target, ops.concatenate([target[1:], ops.full((1,), -1, "int64")]))
    target = ops.where(last, target, total_out)  # a duplicate's loser goes to the spare slot
    values = ops.take(ops.reshape(x, (-1,)), position)
    out = ops.scatter_update(ops.zeros((total_out + 1,), dtype=x.dtype),
                             ops.expand_dims(target, 1), values)
    out = ops.reshape(out[:total_out], (-1, c, *output_size))
    if channels_last:
        out = ops.transpose(out, [0, *range(2, k + 2), 1])
    return out
