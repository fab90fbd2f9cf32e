"""The XLA-ops backend: the default lowering of every operation on every platform without
a native kernel (GPU other than CUDA, TPU; on CPU the dtypes the C++ pool does not
order). The unpool is XLA's scatter and gather over flattened planes (`_unpool_xla`),
the pool one strided slice per kernel tap (`_pool_xla`); both are also
``jax_unpool.reference``. They cannot fail at run time: an out-of-range index is dropped
by the forward and reads 0 in the backward."""

from __future__ import annotations

from jax.interpreters import mlir

from jax_unpool import _pool_xla, _unpool_xla, pooling
from jax_unpool.backends import registry


def _max_unpool(x, indices, *, output_size, channels_last, window=None):
    return _unpool_xla.scatter_planes(x, indices, output_size, channels_last)


def _max_unpool_backward(grad_output, indices, *, channels_last, spatial_rank=2,
                         window=None):
    return _unpool_xla.gather_planes(grad_output, indices, channels_last, spatial_rank)


def _max_pool(x, **params):
    return list(_pool_xla.values_and_indices(x, pooling.geometry(x.shape, **params)))


LOWERINGS = {
    "max_unpool": registry.Lowering(mlir.lower_fun(_max_unpool, multiple_results=False),
                                    "xla", "XLA ops (scatter)"),
    "max_unpool_backward": registry.Lowering(
        mlir.lower_fun(_max_unpool_backward, multiple_results=False), "xla", "XLA ops (gather)"),
    "max_pool": registry.Lowering(mlir.lower_fun(_max_pool, multiple_results=True), "xla",
                                  "XLA ops (a slice per kernel tap)"),
}
for _op, _lowering in LOWERINGS.items():
    registry.register(_op, _lowering)
