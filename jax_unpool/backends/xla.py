"""The XLA-ops backend: the default lowering of every operation on every platform without
a native kernel (GPU other than CUDA, TPU; on CPU the dtypes the C++ pool does not
order), and of every operation everywhere with ``JAX_UNPOOL_BACKEND=xla``.

The unpool runs dense ops (broadcast, compare, select, slices: `_unpool_dense`) where its
window is known -- the primitive's `window` hint, or output sizes that are multiples of
the input's -- and every index lies in its window's box, which the device checks;
otherwise, and for other indices, XLA's scatter and gather over flattened planes
(`_unpool_xla`, also ``jax_unpool.reference``). The pool is one strided slice per kernel
tap (`_pool_xla`). They cannot fail at run time: an out-of-range index is dropped by the
forward and reads 0 in the backward."""

from __future__ import annotations

from jax.interpreters import mlir

from jax_unpool import _pool_xla, _unpool_xla, pooling
from jax_unpool.backends import registry


def _max_unpool(x, indices, *, output_size, channels_last, window=None):
    return _unpool_xla.scatter_windowed(x, indices, output_size, channels_last, window)


def _max_unpool_backward(grad_output, indices, *, channels_last, spatial_rank=2,
                         window=None):
    return _unpool_xla.gather_windowed(grad_output, indices, channels_last, spatial_rank,
                                       window)


def _max_pool(x, **params):
    return list(_pool_xla.values_and_indices(x, pooling.geometry(x.shape, **params)))


LOWERINGS = {
    "max_unpool": registry.Lowering(mlir.lower_fun(_max_unpool, multiple_results=False),
                                    "xla", "XLA ops (dense; scatter for other indices)"),
    "max_unpool_backward": registry.Lowering(
        mlir.lower_fun(_max_unpool_backward, multiple_results=False), "xla",
        "XLA ops (dense; gather for other indices)"),
    "max_pool": registry.Lowering(mlir.lower_fun(_max_pool, multiple_results=True), "xla",
                                  "XLA ops (a slice per kernel tap)"),
}
for _op, _lowering in LOWERINGS.items():
    registry.register(_op, _lowering)
