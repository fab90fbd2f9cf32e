"""TensorFlow's ``tf.nn.max_pool_with_argmax`` in numpy loops, without TensorFlow.

Its CPU kernel (``SpatialMaxPoolWithArgMaxHelper`` in
tensorflow/core/kernels/maxpooling_op.cc), spelt as it is: every output starts at the
type's lowest value with argmax -1; the input positions are visited in row-major order
(b, y, x), and each one updates every window that holds it where ``output < input`` or
the window has no argmax yet. The argmax is ``(y * W + x) * C + c``, or ``((b * H + y) *
W + x) * C + c`` with ``include_batch_in_index`` (TensorFlow's docs). Padding: "VALID",
or "SAME" with ``ceil(size / stride)`` windows and the padding split with
``pad_before = total // 2`` (tensorflow/core/framework/kernel_shape_util.cc). NHWC only,
as TensorFlow's op; any number of spatial dims (TensorFlow's has two).
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def _geometry(size: int, pool: int, stride: int, padding: str) -> tuple[int, int]:
    """(windows, pad_before) of one axis."""
    if padding == "VALID":
        return (size - pool) // stride + 1, 0
    out = -(-size // stride)
    return out, max((out - 1) * stride + pool - size, 0) // 2


def max_pool_with_argmax(x: np.ndarray, ksize, strides, padding: str,
                         include_batch_in_index: bool = False):
    """x (N, *spatial, C) -> (values, int64 argmax), TensorFlow's CPU kernel's."""
    n, *size, c = x.shape
    k = len(size)
    geometry = [_geometry(s, p, st, padding) for s, p, st in zip(size, ksize, strides)]
    out_size = [g[0] for g in geometry]
    lowest = (np.finfo(x.dtype).min if np.issubdtype(x.dtype, np.floating)
              else np.iinfo(x.dtype).min)
    values = np.full((n, *out_size, c), lowest, x.dtype)
    argmax = np.full((n, *out_size, c), -1, np.int64)
    for b in range(n):
        for pos in itertools.product(*map(range, size)):
            # the windows that hold pos along each axis (kernel's h_start, h_end)
            ranges = []
            for p, (out, pad), pool, st in zip(pos, geometry, ksize, strides):
                padded = p + pad
                start = 0 if padded < pool else (padded - pool) // st + 1
                ranges.append(range(start, min(padded // st + 1, out)))
            flat = sum(p * math.prod(size[a + 1:]) for a, p in enumerate(pos))
            for window in itertools.product(*ranges):
                for d in range(c):
                    v = x[(b, *pos, d)]
                    if values[(b, *window, d)] < v or argmax[(b, *window, d)] == -1:
                        values[(b, *window, d)] = v
                        plane = (b * math.prod(size) + flat) if include_batch_in_index else flat
                        argmax[(b, *window, d)] = plane * c + d
    assert k >= 1
    return values, argmax
