"""Every spatial rank runs on the 2-D primitives through a free view.

Indices are flat positions inside one output plane or volume (``w``, ``h * W + w``,
``d * H * W + h * W + w``), so a ``(D, H, W)`` volume is exactly a ``(D * H, W)`` plane and
a ``(W,)`` row a ``(1, W)`` plane. Reshaping only the spatial dims -- never N or C, never a
transpose -- keeps every element where it is in memory (XLA compiles it to a bitcast),
in both layouts, so the 2-D primitives with all their rules (autodiff, batching,
sharding, the CPU and aclnn kernels) serve 1-D and 3-D unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from jax_unpool import _args


def plane(sizes: Sequence[int]) -> tuple[int, int]:
    """The 2-D plane of k spatial sizes: (W,) -> (1, W); (D, H, W) -> (D * H, W)."""
    return (math.prod(sizes[:-1]), sizes[-1])


def to_plane(a: jax.Array, channels_last: bool, k: int) -> jax.Array:
    """`a` with its k spatial dims viewed as a 2-D plane."""
    if k == 2:
        return a
    s = _args.spatial_axis(a.ndim, channels_last, k)
    return a.reshape(*a.shape[:s], *plane(a.shape[s:s + k]), *a.shape[s + k:])


def from_plane(a: jax.Array, sizes: Sequence[int], channels_last: bool, k: int) -> jax.Array:
    """The inverse of `to_plane`, for a result whose spatial sizes are `sizes`."""
    if k == 2:
        return a
    s = _args.spatial_axis(a.ndim, channels_last, 2)
    return a.reshape(*a.shape[:s], *sizes, *a.shape[s + 2:])


def unpool(scatter, fn: str, k: int, x, indices, kernel_size, stride, padding, output_size,
           data_format: str) -> jax.Array:
    """max_unpool{k}d: the checks, then `scatter(x, indices, plane_size, channels_last)`
    (the primitive, or the reference's) on the 2-D view."""
    x, indices = jnp.asarray(x), _args.as_indices(fn, indices)
    _args.check_unpool_operands(fn, x, indices, k)
    last = _args.channels_last(fn, data_format, x.ndim, k)
    size = _args.unpool_output_size(fn, x.shape, last, kernel_size, stride, padding,
                                    output_size, k)
    _args.check_plane_fits_indices(fn, indices.dtype, size)
    _args.unpool_result_shape(fn, x.shape, size, last, k)
    out = scatter(to_plane(x, last, k), to_plane(indices, last, k), plane(size), last)
    return from_plane(out, size, last, k)


def unpool_backward(gather, fn: str, k: int, grad_output, x, indices, output_size,
                    data_format: str) -> jax.Array:
    """max_unpool{k}d_backward: the checks, then `gather(grad_output, indices,
    channels_last)` on the 2-D view."""
    grad_output, indices = jnp.asarray(grad_output), _args.as_indices(fn, indices)
    last = _args.check_backward_arguments(fn, grad_output, x, indices, output_size,
                                          data_format, k)
    out = gather(to_plane(grad_output, last, k), to_plane(indices, last, k), last)
    h = _args.spatial_axis(indices.ndim, last, k)
    return from_plane(out, indices.shape[h:h + k], last, k)
