"""window_indices: flat indices to window offsets (`jax_unpool.WindowIndices`), the way back
of ``WindowIndices.to_flat``, as a public function and a primitive.

window_offsets{k}d_p(indices; geometry, check_indices) -> offsets
    each flat index's tap number in its window (uint8, the indices' shape), for the pool
    `geometry` (a `_geometry.PoolGeometry`). An index that is not an in-bounds tap of its
    window (for a window of padding only: PyTorch's initial index) follows the unpools'
    out-of-range policy: on CPU the call fails naming its position; on the XLA ops it
    becomes an offset naming no tap (min(taps, 255)), which the unpools drop -- but for a
    window of 256 taps, where every byte names a tap: there it becomes the last tap.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from jax_unpool import _args, _compat, _geometry, _primitive, _settings, _sharding, _window
from jax_unpool._geometry import RANKS, PoolGeometry
from jax_unpool.backends import registry

__all__ = ["window_indices", "window_offsets_p"]


def window_indices(indices: Any, kernel_size: Any, stride: Any = None, padding: Any = 0,
                   dilation: Any = 1, ceil_mode: bool = False, *, input_size: Any,
                   data_format: str | None = None) -> _window.WindowIndices:
    """Flat indices of a max pool (``index_format="flat"``, or PyTorch's) as window offsets.

    Args:
      indices: int32 or int64 flat indices of the pool, shaped like its values.
      kernel_size, stride, padding, dilation, ceil_mode: the pool's, as
        :func:`max_pool2d_with_indices` takes them.
      input_size: the pool's input spatial size, k ints ((H, W) for 2-D): the spatial rank.
      data_format: the indices' layout; default channels-first (``"NCHW"``/``"CHW"`` for
        2-D), as PyTorch's.

    Returns:
      A :class:`WindowIndices` whose ``to_flat(indices.dtype)`` gives `indices` back.

    Raises:
      ValueError, TypeError: at trace time, for arguments the pool would refuse, or
        indices whose shape is not the pool's output shape.
      jax.errors.JaxRuntimeError: at run time on CPU, for an index that is not a position
        of its window inside the input, naming it and its position. On the XLA ops
        (GPU, TPU) such an index becomes an offset that the unpools drop.
    """
    fn = "window_indices"
    size = _args.int_tuple(input_size, (1, 2, 3))
    if size is None:
        raise TypeError(f"{fn}: input_size must be the pool's input spatial size, 1 to 3 ints, "
                        f"got {_args.received(input_size)}")
    k = len(size)
    indices = _args.as_indices(fn, indices)
    if data_format is None:
        data_format = _geometry.data_format(k, False, indices.ndim == k + 2)
    last = _geometry.channels_last(fn, data_format, k)
    _geometry.check_rank(fn, "indices", indices.shape, k, last)
    window = _geometry.pool_window(fn, k, kernel_size, stride, padding, dilation, ceil_mode)
    shape = _geometry.with_spatial(indices.shape, size, last)
    g = _geometry.pool_geometry(fn, tuple(shape), *window, bool(ceil_mode), last,
                                np.dtype(indices.dtype))
    _window.check_taps(fn, g)
    if _geometry.spatial_dims(indices.shape, last, k) != tuple(g.out_size):
        raise ValueError(f"{fn}: indices of shape {tuple(indices.shape)} are not the pool's "
                         f"output: pooling {size} with kernel_size={g.kernel}, stride="
                         f"{g.stride}, padding={g.padding}, dilation={g.dilation}, "
                         f"ceil_mode={g.ceil_mode} gives {g.out_size}")
    offsets = window_offsets_p[k].bind(indices, geometry=g)
    return _window.WindowIndices(offsets, g._replace(index_dtype=_geometry.index_dtype(
        fn, np.int32)))


def _params(primitive: str, *, geometry, check_indices) -> None:
    if not isinstance(geometry, PoolGeometry):
        raise TypeError(f"{primitive}: geometry must be a pool's PoolGeometry, got "
                        f"{_args.received(geometry)}")
    _primitive.check_bool(primitive, "check_indices", check_indices)


window_offsets_p = {
    k: _primitive.Primitive(f"window_offsets{k}d", partial(_params, f"window_offsets{k}d_p"),
                            defaults=lambda: {"check_indices": _settings.CHECK_INDICES})
    for k in RANKS}


def _abstract_eval(indices, *, geometry, check_indices):
    g = geometry
    fn = "window_indices"
    _args.check_index_dtype(fn, "indices", indices.dtype)
    if _geometry.spatial_dims(indices.shape, g.channels_last, g.k) != tuple(g.out_size):
        raise ValueError(f"{fn}: indices of shape {tuple(indices.shape)} are not the output "
                         f"of the pool {g.in_size} -> {g.out_size}")
    return _sharding.result_type(fn, indices, [], indices.shape, _window.OFFSET_DTYPE,
                                 g.channels_last, g.k)


def _jvp(primals, tangents, **params):  # integers in, integers out: no tangent
    (indices,) = primals
    out = window_offsets_p[params["geometry"].k].bind(indices, **params)
    return out, _compat.zero_tangent(out)


def _batch(args, dims, **params):
    (indices,), unfold = _primitive.fold_batch(args, dims, params["geometry"].k)
    return unfold(window_offsets_p[params["geometry"].k].bind(indices, **params))


_primitive.define_rules(window_offsets_p.values(), _abstract_eval, _jvp, _batch)
registry.declare("window_offsets", window_offsets_p.values())
