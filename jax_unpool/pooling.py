"""max_pool{1,2,3}d_with_indices: PyTorch's max pooling with argmax indices, as public
functions and primitives (one per spatial rank k, sharing one set of rules, in jax's
order: abstract evaluation, JVP, batching; each platform's lowering is a backend's,
`jax_unpool.backends`).

max_pool{k}d_with_indices_p(x; kernel_size, stride, padding, dilation, ceil_mode,
                            channels_last, index_dtype) -> (values, indices)
    kernel_size, stride, padding and dilation are tuples of k ints, index_dtype is int32
    or int64, x has rank k + 1 (unbatched) or k + 2, channels first or last. Indices are
    flat positions inside one input plane, in both layouts.

Values and indices come from one bind, so one pass over x computes both (on CPU the
jax_unpool_max_pool_v1 kernel; elsewhere XLA ops). The derivative is a pair of linear
primitives, each the other's transpose, as jax's max reduce_window has: the JVP binds
max_pool{k}d_gather_p (the tangent at the argmax), which reverse mode transposes into
max_pool{k}d_scatter_add_p (each cotangent added into its argmax position).

The window is checked once per shape and window (`_geometry.pool_geometry`, cached),
whichever rule asks for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax.interpreters import ad

from jax_unpool import _args, _compat, _geometry, _primitive, _sharding, _window
from jax_unpool._geometry import RANKS, PoolGeometry
from jax_unpool.backends import registry

__all__ = ["max_pool1d_with_indices", "max_pool1d_with_indices_p", "max_pool2d_with_indices",
           "max_pool2d_with_indices_p", "max_pool3d_with_indices", "max_pool3d_with_indices_p"]

IntOrPair = int | Sequence[int]


def checked(fn: str, k: int, x, kernel_size, stride, padding, dilation, ceil_mode,
            data_format, index_dtype) -> tuple[jax.Array, PoolGeometry]:
    """The public pools' arguments checked as PyTorch checks them (errors name `fn`):
    x as an array and its window's geometry."""
    passed = _args.passed_dtype(x)
    x = _args.as_array(fn, "x", x)
    window = _geometry.pool_window(fn, k, kernel_size, stride, padding, dilation, ceil_mode)
    last = _geometry.channels_last(fn, data_format, k)
    g = _geometry.pool_geometry(fn, tuple(x.shape), *window, bool(ceil_mode), last,
                                _geometry.index_dtype(fn, index_dtype, stacklevel=5))
    _check_real(fn, x.dtype, passed)
    return x, g


def _check_real(fn: str, dtype, passed=None) -> None:
    if jnp.issubdtype(dtype, jnp.complexfloating):
        raise TypeError(f"{fn}: x must have a real dtype (max needs an order), got "
                        f"{_args.dtype_text(dtype, passed)}")


def _max_pool(fn: str, k: int, x, *args, index_format: str = "flat"):
    x, g = checked(fn, k, x, *args)
    if _window.check_format(fn, index_format) == "window":
        _window.check_taps(fn, g)
    values, indices = max_pool_p[k].bind(
        x, kernel_size=g.kernel, stride=g.stride, padding=g.padding, dilation=g.dilation,
        ceil_mode=g.ceil_mode, channels_last=g.channels_last, index_dtype=g.index_dtype,
        index_format=index_format)
    if index_format == "window":
        return values, _window.WindowIndices(indices, g)
    return values, indices


def max_pool2d_with_indices(
    x: jax.typing.ArrayLike,
    kernel_size: IntOrPair,
    stride: IntOrPair | None = None,
    padding: IntOrPair = 0,
    dilation: IntOrPair = 1,
    ceil_mode: bool = False,
    *,
    data_format: str = "NCHW",
    index_dtype: jax.typing.DTypeLike = jnp.int32,
    index_format: str = "flat",
) -> tuple[jax.Array, Any]:
    """2-D max pooling that also returns the argmax of every window.

    Same results as ``torch.nn.functional.max_pool2d(x, kernel_size, stride,
    padding, dilation, ceil_mode, return_indices=True)``, values and indices:

    - ``kernel_size``, ``stride``, ``padding``, ``dilation``: an int or an
      ``(h, w)`` pair. ``stride`` defaults to ``kernel_size``.
    - Output size per spatial axis:
      ``floor((L + 2*p - d*(k - 1) - 1) / s) + 1``, rounded up instead with
      ``ceil_mode=True``, in which case a last window that would start beyond the
      input plus the left padding is dropped (PyTorch's rule).
    - Padding counts as -inf: it is never selected, even when the input is
      -inf or the integer dtype's minimum (then the first in-bounds element of
      the window is the index).
    - Ties: the first maximum in window scan order (row-major over the kernel
      taps) wins.
    - NaN propagates: a NaN beats every number, and among several NaNs in one
      window the LAST one in scan order wins (PyTorch's CPU and CUDA kernels
      test ``val > maxval || isnan(val)``).
    - Indices are flat positions in the unpadded input plane, ``h * W + w``, in
      both layouts. (PyTorch quirk, kept: a window that contains only padding
      -- with ``ceil_mode``, or without it when the dilation steps over the
      whole input -- returns -inf, or the dtype's minimum, and the flat index
      of its first tap right of the left padding, which lies past the end of a
      row or of the plane. In the gradient an index past a row's end gets its
      cotangent on the next row's element, as in PyTorch; one past the plane
      has its cotangent dropped, where PyTorch's CPU backward adds it unchecked
      into the next plane's gradient or past the end of the buffer:
      ``cpu_max_pool_backward`` in aten/src/ATen/native/cpu/MaxPoolKernel.cpp.)

    Args:
      x: ``(N, C, H, W)`` or ``(C, H, W)``; with ``data_format="NHWC"`` (or
        ``"HWC"``) ``(N, H, W, C)`` or ``(H, W, C)``. Any real dtype: floats
        (float16/bfloat16 included), integers and bool.
      kernel_size: the window, an int or an ``(h, w)`` pair (ints, a tuple, a list or a
        1-D integer numpy array), as in PyTorch.
      stride: the window's step, an int or a pair; defaults to ``kernel_size``.
      padding: implicit padding on both sides of each spatial axis, an int or a pair, at
        most ``kernel_size // 2``; it counts as -inf.
      dilation: the spacing of the window's taps, an int or a pair (default 1).
      ceil_mode: round the output size up instead of down (PyTorch's rule above).
      data_format: ``"NCHW"``/``"CHW"`` (channels first) or ``"NHWC"``/``"HWC"``
        (channels last); either spelling is accepted for 3-D and 4-D ``x``.
      index_dtype: ``int32`` or ``int64``. int64 needs ``jax_enable_x64``;
        without it JAX's usual rule applies (a warning, then int32).
      index_format: ``"flat"`` (default): indices as above. ``"window"``: a
        :class:`jax_unpool.WindowIndices` instead, each argmax as its position in its
        window in one byte (uint8 ``offsets``, row-major tap order), a quarter of int32
        indices' memory, for windows of at most 256 taps; ``w.to_flat(index_dtype)``
        gives the flat indices bit for bit, and the unpools take ``w`` directly.

    Returns:
      ``(values, indices)``, both shaped like ``x`` with ``(H, W)`` replaced by
      ``(H_out, W_out)``; ``values`` has ``x``'s dtype, ``indices`` has
      ``index_dtype`` (or is a ``WindowIndices``).

    Differentiation: w.r.t. ``x`` the gradient adds each output cotangent into
    its argmax position (sums where overlapping windows share an argmax); the
    indices are not differentiable (float0 tangent). Where windows cannot overlap
    (stride >= dilation * (kernel - 1) + 1 on every axis) the gradient is
    ``max_unpool2d`` of the cotangent into the input plane (the native kernel). Works
    under ``jit``, ``vmap``, ``grad``, ``jvp`` and higher orders, and under sharding of N
    and C (no communication). On CPU values and indices come from one native pass over
    ``x``; elsewhere from XLA ops.

    Raises:
      ValueError: at trace time (naming the argument and the received value): ``x``
        not 3-D/4-D; empty H or W; kernel_size, stride or dilation not positive; padding
        negative or above ``kernel_size // 2``; a size above 2**31 - 1 (PyTorch's int32
        limit); output size not positive; unknown ``data_format``; int32 indices too
        narrow for the plane.
      TypeError: at trace time: ``x`` not an array of numbers;
        kernel_size/stride/padding/dilation not ints or pairs of ints (tuples, lists or
        1-D integer numpy arrays); ``ceil_mode`` not a bool; ``index_dtype`` not
        int32/int64; complex ``x``.
    """
    return _max_pool("max_pool2d_with_indices", 2, x, kernel_size, stride, padding, dilation,
                     ceil_mode, data_format, index_dtype, index_format=index_format)


def max_pool1d_with_indices(
    x: jax.typing.ArrayLike,
    kernel_size: IntOrPair,
    stride: IntOrPair | None = None,
    padding: IntOrPair = 0,
    dilation: IntOrPair = 1,
    ceil_mode: bool = False,
    *,
    data_format: str = "NCW",
    index_dtype: jax.typing.DTypeLike = jnp.int32,
    index_format: str = "flat",
) -> tuple[jax.Array, Any]:
    """1-D max pooling with argmax indices, as ``torch.nn.functional.max_pool1d(...,
    return_indices=True)``.

    ``x`` is ``(N, C, W)`` or ``(C, W)`` (``(N, W, C)`` / ``(W, C)`` with
    ``data_format="NWC"``/``"WC"``); indices are positions ``w``. Everything else -- output
    size, ``ceil_mode``, ``dilation``, padding never selected, ties, NaN, dtypes,
    differentiation, errors -- is as in :func:`max_pool2d_with_indices`.
    """
    return _max_pool("max_pool1d_with_indices", 1, x, kernel_size, stride, padding, dilation,
                     ceil_mode, data_format, index_dtype, index_format=index_format)


def max_pool3d_with_indices(
    x: jax.typing.ArrayLike,
    kernel_size: IntOrPair,
    stride: IntOrPair | None = None,
    padding: IntOrPair = 0,
    dilation: IntOrPair = 1,
    ceil_mode: bool = False,
    *,
    data_format: str = "NCDHW",
    index_dtype: jax.typing.DTypeLike = jnp.int32,
    index_format: str = "flat",
) -> tuple[jax.Array, Any]:
    """3-D max pooling with argmax indices, as ``torch.nn.functional.max_pool3d(...,
    return_indices=True)``.

    ``x`` is ``(N, C, D, H, W)`` or ``(C, D, H, W)`` (``(N, D, H, W, C)`` / ``(D, H, W, C)``
    with ``data_format="NDHWC"``/``"DHWC"``); indices are flat positions
    ``d * H * W + h * W + w`` inside each input volume; windows are scanned in (d, h, w)
    order. Everything else is as in :func:`max_pool2d_with_indices`.
    """
    return _max_pool("max_pool3d_with_indices", 3, x, kernel_size, stride, padding, dilation,
                     ceil_mode, data_format, index_dtype, index_format=index_format)


# --------------------------------------------------------------------------------------
# max_pool{k}d_with_indices_p
# --------------------------------------------------------------------------------------

def _rank(kernel_size) -> int:
    k = len(kernel_size) if isinstance(kernel_size, tuple) else 0
    if k not in RANKS:
        raise ValueError(f"max_pool_with_indices_p: kernel_size must be a tuple of 1, 2 or 3 "
                         f"ints (the spatial rank), got {kernel_size!r}")
    return k


def _max_pool_params(primitive: str, *, kernel_size, stride, padding, dilation, ceil_mode,
                     channels_last, index_dtype, index_format) -> None:
    """The parameters' types, checked at every bind; their values are checked against
    x's shape by the abstract evaluation."""
    k = _rank(kernel_size)
    for name, value in (("kernel_size", kernel_size), ("stride", stride),
                        ("padding", padding), ("dilation", dilation)):
        if not (isinstance(value, tuple) and len(value) == k
                and all(map(_args.is_int, value))):
            raise TypeError(f"{primitive}: {name} must be a tuple of {k} ints, got "
                            f"{_args.received(value)}")
    _primitive.check_bool(primitive, "ceil_mode", ceil_mode)
    _primitive.check_bool(primitive, "channels_last", channels_last)
    _window.check_format(primitive, index_format)


# index_format: "flat" (int indices of index_dtype) or "window" (uint8 offsets, `_window`);
# binds written before it existed omit it.
max_pool_p = {k: _primitive.Primitive(f"max_pool{k}d_with_indices",
                                      partial(_max_pool_params, f"max_pool{k}d_with_indices_p"),
                                      multiple_results=True,
                                      defaults=lambda: {"index_format": "flat"})
              for k in RANKS}
max_pool1d_with_indices_p, max_pool2d_with_indices_p, max_pool3d_with_indices_p = (
    max_pool_p.values())


def _max_pool_abstract_eval(x, **params):
    k = _rank(params["kernel_size"])
    fn = f"max_pool{k}d_with_indices"
    _check_real(fn, x.dtype)
    g = _geometry.pool_geometry_of(x.shape, **params)
    window = params["index_format"] == "window"
    if window:
        _window.check_taps(fn, g)
    shape = _geometry.with_spatial(x.shape, g.out_size, g.channels_last)
    return [_sharding.result_type(fn, x, [], shape, dtype, g.channels_last, k)
            for dtype in (x.dtype, _window.OFFSET_DTYPE if window else g.index_dtype)]


def _max_pool_jvp(primals, tangents, **params):
    (x,), (t,) = primals, tangents
    values, indices = max_pool_p[len(params["kernel_size"])].bind(x, **params)
    g = _geometry.pool_geometry_of(x.shape, **params)
    t_values = _primitive.tangent_or_zero(
        t, values, lambda t: max_pool_gather_p[g.k].bind(
            t, indices, geometry=g, index_format=params["index_format"]))
    return [values, indices], [t_values, _compat.zero_tangent(indices)]


def _max_pool_batch(args, dims, **params):
    k = len(params["kernel_size"])
    (x,), unfold = _primitive.fold_batch(args, dims, k)
    results = [unfold(r) for r in max_pool_p[k].bind(x, **params)]
    return [r for r, _ in results], [d for _, d in results]


_primitive.define_rules(max_pool_p.values(), _max_pool_abstract_eval, _max_pool_jvp,
                        _max_pool_batch)
registry.declare("max_pool", max_pool_p.values())


# --------------------------------------------------------------------------------------
# The pool's derivative: two linear primitives, each the other's transpose, as jax's max
# reduce_window has select_and_gather_add_p and select_and_scatter_add_p.
#
# max_pool{k}d_gather_p(t, indices; geometry) -> t at the argmax positions (values' shape)
# max_pool{k}d_scatter_add_p(ct, indices; geometry) -> each cotangent added into its argmax
#     position (x's shape): overlapping windows add up, in increasing window position as
#     PyTorch's CPU backward does; an index past the plane (a window of padding only)
#     reads 0 and is dropped.
# `geometry` is the pool's `_geometry.PoolGeometry`, `indices` its own output, flat or
# window offsets (`index_format`): each
# backend lowers the pair with its unpool kernels where the argmaxes allow it
# (`registry.pool_derivative`), with XLA ops otherwise.
# --------------------------------------------------------------------------------------

def _derivative_params(primitive: str, *, geometry, index_format) -> None:
    if not isinstance(geometry, PoolGeometry):
        raise TypeError(f"{primitive}: geometry must be a pool's PoolGeometry, got "
                        f"{_args.received(geometry)}")
    _window.check_format(primitive, index_format)


def _check_derivative_operands(fn: str, values, indices, g: PoolGeometry, size,
                               index_format: str) -> None:
    """`values` has the shape of `indices` with spatial sizes `size`."""
    dtype = _window.OFFSET_DTYPE if index_format == "window" else g.index_dtype
    if indices.dtype != dtype or tuple(values.shape) != _geometry.with_spatial(
            indices.shape, size, g.channels_last):
        raise ValueError(f"{fn}: operands of shapes {tuple(values.shape)} and "
                         f"{tuple(indices.shape)} ({indices.dtype}) do not fit the pool "
                         f"{g.in_size} -> {g.out_size} with {g.index_dtype} indices")


def _pair_member(name: str):
    return {k: _primitive.Primitive(f"max_pool{k}d_{name}",
                                    partial(_derivative_params, f"max_pool{k}d_{name}_p"),
                                    defaults=lambda: {"index_format": "flat"})
            for k in RANKS}


max_pool_gather_p = _pair_member("gather")
max_pool_scatter_add_p = _pair_member("scatter_add")


def _gather_abstract_eval(t, indices, *, geometry, index_format):
    g = geometry
    fn = f"max_pool{g.k}d_gather"
    _check_derivative_operands(fn, t, indices, g, g.in_size, index_format)
    return _sharding.result_type(fn, indices, [t], indices.shape, t.dtype, g.channels_last, g.k)


def _scatter_add_abstract_eval(ct, indices, *, geometry, index_format):
    g = geometry
    fn = f"max_pool{g.k}d_scatter_add"
    _check_derivative_operands(fn, ct, indices, g, g.out_size, index_format)
    shape = _geometry.with_spatial(indices.shape, g.in_size, g.channels_last)
    return _sharding.result_type(fn, ct, [indices], shape, ct.dtype, g.channels_last, g.k)


def _linear_rules(primitives: dict, transposed: dict):
    """JVP, batching and transpose of one primitive of the pair (`transposed`: the other)."""
    def jvp(primals, tangents, **params):
        t, indices = primals

        def bind(values):
            return primitives[params["geometry"].k].bind(values, indices, **params)

        out = bind(t)
        return out, _primitive.tangent_or_zero(tangents[0], out, bind)

    def batch(args, dims, **params):
        (t, indices), unfold = _primitive.fold_batch(args, dims, params["geometry"].k)
        return unfold(primitives[params["geometry"].k].bind(t, indices, **params))

    def transpose(ct, t, indices, **params):
        assert ad.is_undefined_primal(t) and not ad.is_undefined_primal(indices)
        if type(ct) is ad.Zero:
            return ad.Zero(t.aval), None
        return transposed[params["geometry"].k].bind(ct, indices, **params), None

    return jvp, batch, transpose


for _op, _prims, _transposed, _abstract_eval in (
        ("max_pool_gather", max_pool_gather_p, max_pool_scatter_add_p, _gather_abstract_eval),
        ("max_pool_scatter_add", max_pool_scatter_add_p, max_pool_gather_p,
         _scatter_add_abstract_eval)):
    _primitive.define_rules(_prims.values(), _abstract_eval, *_linear_rules(_prims, _transposed))
    registry.declare(_op, _prims.values())
