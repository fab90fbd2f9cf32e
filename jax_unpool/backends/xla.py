"""The XLA-ops backend: the default lowering of every operation on every platform without
a native kernel (GPU other than CUDA, TPU; on CPU the dtypes the C++ pool does not
order), and of every operation everywhere with ``JAX_UNPOOL_BACKEND=xla`` or inside
``with jax_unpool.backends.use("xla"):``.

The unpool runs dense ops (broadcast, compare, select, slices: `_unpool_dense`) where its
window is known -- `_geometry.unpool_window`: the primitive's `window` hint, or output
sizes that are multiples of the input's -- and every index lies in its window's box,
which the device checks; otherwise, and for other indices, XLA's scatter and gather over
flattened planes (`_unpool_xla`, also ``jax_unpool.reference``). The pool is one strided
slice per kernel tap, and its derivative's pair runs the dense ops wherever the pool's
own argmaxes lie in their windows, which the geometry decides at trace time (`_pool_xla`).
They cannot fail at run time: an out-of-range index is dropped by the forward and reads
0 in the backward."""

from __future__ import annotations

from jax.interpreters import mlir

from jax_unpool import _geometry, _pool_xla, _unpool_xla, _window
from jax_unpool.backends import registry


# XLA's ops cannot fail at run time: check_indices changes nothing here.
def _max_unpool(x, indices, *, output_size, channels_last, window=None, check_indices=False,
                index_window=None):
    return _unpool_xla.scatter_windowed(x, indices, output_size, channels_last, window,
                                        index_window)


def _max_unpool_backward(grad_output, indices, *, channels_last, spatial_rank=2, window=None,
                         check_indices=False, index_window=None):
    return _unpool_xla.gather_windowed(grad_output, indices, channels_last, spatial_rank,
                                       window, index_window)


def _max_pool(x, **params):
    return list(_pool_xla.values_and_indices(x, _geometry.pool_geometry_of(x.shape, **params),
                                             params["index_format"]))


def _max_pool_gather(t, indices, *, geometry, index_format):
    return _pool_xla.gather(t, indices, geometry, index_format)


def _max_pool_scatter_add(ct, indices, *, geometry, index_format):
    return _pool_xla.scatter_add(ct, indices, geometry, index_format)


def _window_offsets(indices, *, geometry, check_indices):
    return _window.from_flat(indices, geometry)[0]


def _rule(fn, multiple_results: bool = False):
    return mlir.lower_fun(fn, multiple_results=multiple_results)


LOWERINGS = {
    "max_unpool": registry.Lowering(_rule(_max_unpool), "xla",
                                    "XLA ops (dense; scatter for other indices)"),
    "max_unpool_backward": registry.Lowering(_rule(_max_unpool_backward), "xla",
                                             "XLA ops (dense; gather for other indices)"),
    "max_pool": registry.Lowering(_rule(_max_pool, multiple_results=True), "xla",
                                  "XLA ops (a slice per kernel tap)"),
    "max_pool_gather": registry.Lowering(_rule(_max_pool_gather), "xla",
                                         "XLA ops (dense where the argmaxes are in their "
                                         "windows; gather otherwise)"),
    "max_pool_scatter_add": registry.Lowering(_rule(_max_pool_scatter_add), "xla",
                                              "XLA ops (dense sums where the argmaxes are in "
                                              "their windows; scatter-add otherwise)"),
    "window_offsets": registry.Lowering(_rule(_window_offsets), "xla",
                                        "XLA ops (an index outside its window: an offset the "
                                        "unpools drop)"),
}
for _op, _lowering in LOWERINGS.items():
    registry.register(_op, _lowering)
