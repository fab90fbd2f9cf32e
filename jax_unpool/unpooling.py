"""max_unpool{1,2,3}d and max_unpool{1,2,3}d_backward: PyTorch's max-unpooling and its
gradient (CANN's aclnnMaxUnpool2dBackward), as public functions and primitives.

Each operation has one primitive per spatial rank k, so that a jaxpr names its rank
(`max_unpool3d[...]`), and one set of rank-generic rules that all of them share, in
jax's order: abstract evaluation, JVP, transpose (each binds the other), batching; each
platform's lowering is a backend's (`jax_unpool.backends`):

max_unpool{k}d_p(x, indices; output_size, channels_last, window, check_indices) -> out
    scatter: zeros of x's shape with its k spatial dims -> output_size (k = its length),
    then out[n, c, idx] = x; among duplicated indices the largest input position wins.
max_unpool{k}d_backward_p(grad_output, indices; channels_last, spatial_rank, window,
                          check_indices) -> out
    gather: out[n, c, i] = grad_output[n, c, indices[n, c, i]]; out has indices' shape.

`window` is a hint that never changes a result: None, or a `_geometry.Window` (extent,
stride, padding; k ints each), saying that input position p's index is expected in the
box [p * stride - padding, p * stride - padding + extent) of each axis (a max pool's
argmax is). Every lowering takes the window it may use from `_geometry.unpool_window`
(which ignores a hint that cannot be a pool's window for the shapes); an index outside
its box only takes a slower path.

`check_indices` is the out-of-range policy, in the jaxpr (docs/semantics.md has it per
platform): an index outside its plane always fails the call on CPU (the check is free
there); with True it fails it on CUDA and Ascend NPUs too (a synchronisation per call),
which otherwise drop such an element (CUDA; the forward, or read 0 in the backward) or
clamp it into the plane (NPU). XLA's ops cannot fail at run time: they drop it. Its
default is ``JAX_UNPOOL_CHECK_INDICES`` (`_settings`); binds that omit it get that.

The rank is in the parameters (len(output_size), spatial_rank), not in the primitive:
`max_unpool2d_p` and `max_unpool2d_backward_p`, which served every rank before the
per-rank ones existed, still accept binds of any rank (spatial_rank defaults to 2), and
their rules bind the primitives of the bound rank.

Operands have rank k + 1 (unbatched) or k + 2, channels-first (NCHW, NCW, NCDHW;
channels_last=False) or channels-last (NHWC, ...). Indices are flat positions inside one
output plane -- w, h * W_out + w, (d * H_out + h) * W_out + w -- in both layouts.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import numpy as np
from jax.interpreters import ad

from jax_unpool import _args, _geometry, _primitive, _settings, _sharding, _symbolic, _window
from jax_unpool._geometry import RANKS, PoolGeometry
from jax_unpool.backends import registry

__all__ = [
    "max_unpool1d", "max_unpool1d_backward", "max_unpool1d_backward_p", "max_unpool1d_p",
    "max_unpool2d", "max_unpool2d_backward", "max_unpool2d_backward_p", "max_unpool2d_p",
    "max_unpool3d", "max_unpool3d_backward", "max_unpool3d_backward_p", "max_unpool3d_p",
]

IntOrPair = int | tuple[int, int]
IntOrTuple = int | tuple[int, ...]


# --------------------------------------------------------------------------------------
# The arguments of the public functions
# --------------------------------------------------------------------------------------

def check_unpool_operands(fn: str, x: Any, indices: Any, k: int) -> None:
    """x and indices of the forward: same rank-(k+1)/(k+2) shape, movable values, integer
    indices."""
    _geometry.check_rank(fn, "x", x.shape, k)
    _args.check_movable_dtype(fn, "x", x.dtype)
    _args.check_index_dtype(fn, "indices", indices.dtype)
    if tuple(indices.shape) != tuple(x.shape):
        raise ValueError(
            f"{fn}: indices must have the shape of x, {tuple(x.shape)}, got "
            f"{tuple(indices.shape)}")


def check_gather_operands(fn: str, grad_output: Any, indices: Any, channels_last: bool,
                          k: int) -> None:
    """grad_output (N, C, *output_size) and indices (N, C, *spatial) of the backward."""
    _geometry.check_rank(fn, "grad_output", grad_output.shape, k)
    _args.check_movable_dtype(fn, "grad_output", grad_output.dtype)
    _args.check_index_dtype(fn, "indices", indices.dtype)
    g, i = tuple(grad_output.shape), tuple(indices.shape)
    keep = _geometry.plane_dims(len(g), channels_last, k)
    if len(i) != len(g) or [g[d] for d in keep] != [i[d] for d in keep]:
        raise ValueError(
            f"{fn}: grad_output {g} and indices {i} must have the same rank and the same "
            "batch and channel dims")


_DEFAULT_FORMATS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def window_geometry(fn: str, k: int, w: _window.WindowIndices, *, kernel_size: Any = None,
                    stride: Any = None, padding: Any = 0, output_size: Any = None,
                    data_format: str | None = None) -> PoolGeometry:
    """The pool geometry of window offsets `w`, with every argument the caller also passed
    checked against it: a conflict is a ValueError naming both (an argument left at its
    default takes `w`'s)."""
    g = w.geometry
    if g.k != k:
        raise ValueError(f"{fn}: indices are the window offsets of a {g.k}-D pool "
                         f"(kernel_size={g.kernel}); {fn} unpools {k}-D")
    given = {"kernel_size": (kernel_size, None, g.kernel), "stride": (stride, None, g.stride),
             "padding": (padding, 0, g.padding)}
    for name, (value, default, own) in given.items():
        if value is None or (value is default) or (_args.is_int(value) and value == default
                                                    and name == "padding"):
            continue
        sizes = _args.positive_sizes(fn, name, value, k, allow_zero=name == "padding")
        if tuple(sizes) != tuple(own):
            raise ValueError(f"{fn}: {name}={_args.received(value)} conflicts with the window "
                             f"offsets' pool, whose {name} is {own}; leave it out")
    if (data_format is not None and data_format != _DEFAULT_FORMATS[k]
            and _geometry.channels_last(fn, data_format, k) != g.channels_last):
        raise ValueError(f"{fn}: data_format={data_format!r} conflicts with the window "
                         f"offsets' pool, whose data format is channels-"
                         f"{'last' if g.channels_last else 'first'}; leave it out")
    if output_size is not None:
        size = _geometry.output_spatial(fn, output_size, len(w.shape), g.channels_last, k)
        if tuple(size) != tuple(g.in_size):
            raise ValueError(f"{fn}: output_size {_args.received(output_size)} conflicts with "
                             f"the window offsets' pool, whose input size is {g.in_size}; "
                             "leave it out")
    return g


def check_window_operands(fn: str, name: str, values: Any, offsets: Any, g: PoolGeometry,
                          spatial) -> None:
    """`values` of rank k+1 or k+2 with spatial sizes `spatial` and the pool's N and C
    layout; `offsets` uint8 of the pool's output shape."""
    _geometry.check_rank(fn, name, values.shape, g.k, g.channels_last)
    _args.check_movable_dtype(fn, name, values.dtype)
    if np.dtype(offsets.dtype) != _window.OFFSET_DTYPE:
        raise TypeError(f"{fn}: window offsets must be uint8, got {offsets.dtype}")
    if _geometry.spatial_dims(offsets.shape, g.channels_last, g.k) != tuple(g.out_size):
        raise ValueError(f"{fn}: window offsets of shape {tuple(offsets.shape)} do not fit "
                         f"their pool: its output's spatial size is {g.out_size}")
    if tuple(_geometry.spatial_dims(values.shape, g.channels_last, g.k)) != tuple(spatial):
        raise ValueError(f"{fn}: {name} of shape {tuple(values.shape)} does not fit the window "
                         f"offsets' pool ({g.in_size} -> {g.out_size}): its spatial size must "
                         f"be {tuple(spatial)}")
    keep = _geometry.plane_dims(values.ndim, g.channels_last, g.k)
    if values.ndim != offsets.ndim or [values.shape[d] for d in keep] != [
            offsets.shape[d] for d in keep]:
        raise ValueError(f"{fn}: {name} {tuple(values.shape)} and the window offsets "
                         f"{tuple(offsets.shape)} must have the same rank and the same batch "
                         "and channel dims")


def unpool_operands(fn: str, k: int, x: Any, indices: Any, kernel_size: Any, stride: Any,
                    padding: Any, output_size: Any, data_format: str):
    """max_unpool{k}d's arguments checked: (x, indices, output_size, channels_last,
    window)."""
    x, indices = _args.as_array(fn, "x", x), _args.as_indices(fn, indices)
    check_unpool_operands(fn, x, indices, k)
    last = _geometry.channels_last(fn, data_format, k)
    size, window = _geometry.unpool_output_size(fn, x.shape, last, kernel_size, stride,
                                                padding, output_size, k)
    _args.check_plane_fits_indices(fn, indices.dtype, size)
    _geometry.unpool_result_shape(fn, x.shape, size, last, k)
    return x, indices, size, last, window


def _check_x(fn: str, x: Any, k: int) -> None:
    # A tuple shape: a class such as np.float32 has .shape and .dtype attributes too.
    if not (isinstance(getattr(x, "shape", None), tuple) and hasattr(x, "dtype")):
        raise TypeError(
            f"{fn}: x must be an array or have .shape and .dtype (a jax.ShapeDtypeStruct; "
            f"only its shape and dtype are used), got {type(x).__name__}")
    _geometry.check_rank(fn, "x", x.shape, k)


def _check_like_x(fn: str, grad_output: Any, x: Any, indices_shape, passed) -> None:
    """The backward's x (only its shape and dtype matter): the indices' shape, and
    grad_output's dtype."""
    if tuple(indices_shape) != tuple(x.shape):
        raise ValueError(
            f"{fn}: indices must have the shape of x, {tuple(x.shape)}, got "
            f"{tuple(indices_shape)}")
    # x may be a numpy array or a ShapeDtypeStruct: compare the dtype JAX would give it.
    x_dtype = jax.dtypes.canonicalize_dtype(x.dtype)
    if np.dtype(grad_output.dtype) != x_dtype:
        raise TypeError(
            f"{fn}: grad_output must have the dtype of x, {_args.dtype_text(x_dtype, x.dtype)}"
            f", got {_args.dtype_text(grad_output.dtype, passed)}")


def unpool_backward_operands(fn: str, k: int, grad_output: Any, x: Any, indices: Any,
                             output_size: Any, data_format: str):
    """max_unpool{k}d_backward's arguments checked: (grad_output, indices, channels_last)."""
    passed = _args.passed_dtype(grad_output)
    grad_output, indices = _args.as_array(fn, "grad_output", grad_output), \
        _args.as_indices(fn, indices)
    _check_x(fn, x, k)
    last = _geometry.channels_last(fn, data_format, k)
    check_gather_operands(fn, grad_output, indices, last, k)
    _check_like_x(fn, grad_output, x, indices.shape, passed)
    size = _geometry.output_spatial(fn, output_size, len(x.shape), last, k)
    grad_size = _geometry.spatial_dims(grad_output.shape, last, k)
    if size != grad_size:
        raise ValueError(
            f"{fn}: output_size {_args.received(output_size)} must match grad_output's "
            f"spatial dims {grad_size}")
    _args.check_plane_fits_indices(fn, indices.dtype, size)
    return grad_output, indices, last


# --------------------------------------------------------------------------------------
# The public functions, one per spatial rank as PyTorch's
# --------------------------------------------------------------------------------------

def _unpool(fn: str, k: int, x, indices, kernel_size, stride, padding, output_size,
            data_format) -> jax.Array:
    if isinstance(indices, _window.WindowIndices):
        g = window_geometry(fn, k, indices, kernel_size=kernel_size, stride=stride,
                            padding=padding, output_size=output_size, data_format=data_format)
        x = _args.as_array(fn, "x", x)
        offsets = _args.as_array(fn, "indices.offsets", indices.offsets)
        check_window_operands(fn, "x", x, offsets, g, g.out_size)
        _geometry.unpool_result_shape(fn, x.shape, g.in_size, g.channels_last, k)
        return max_unpool_p[k].bind(x, offsets, output_size=g.in_size,
                                    channels_last=g.channels_last, window=g.window(),
                                    index_window=g)
    x, indices, size, last, window = unpool_operands(
        fn, k, x, indices, kernel_size, stride, padding, output_size, data_format)
    return max_unpool_p[k].bind(x, indices, output_size=size, channels_last=last,
                                window=window)


def _unpool_backward(fn: str, k: int, grad_output, x, indices, output_size,
                     data_format) -> jax.Array:
    if isinstance(indices, _window.WindowIndices):
        g = window_geometry(fn, k, indices, output_size=output_size, data_format=data_format)
        passed = _args.passed_dtype(grad_output)
        grad_output = _args.as_array(fn, "grad_output", grad_output)
        offsets = _args.as_array(fn, "indices.offsets", indices.offsets)
        check_window_operands(fn, "grad_output", grad_output, offsets, g, g.in_size)
        _check_x(fn, x, k)
        _check_like_x(fn, grad_output, x, offsets.shape, passed)
        return max_unpool_backward_p[k].bind(grad_output, offsets, channels_last=g.channels_last,
                                             spatial_rank=k, index_window=g)
    if output_size is None:
        raise TypeError(f"{fn}: output_size is required with flat indices (only window "
                        "offsets, a WindowIndices, know it)")
    grad_output, indices, last = unpool_backward_operands(fn, k, grad_output, x, indices,
                                                          output_size, data_format)
    return max_unpool_backward_p[k].bind(grad_output, indices, channels_last=last,
                                         spatial_rank=k)


def max_unpool2d(x: Any, indices: Any, kernel_size: IntOrPair | None = None,
                 stride: IntOrPair | None = None, padding: IntOrPair = 0,
                 output_size: Any = None, *, data_format: str = "NCHW") -> jax.Array:
    """Max-unpooling: the partial inverse of a max-pool, as ``torch.nn.functional.max_unpool2d``.

    ``out = zeros(N, C, H_out, W_out)``, then ``out[n, c, indices[n, c, i]] = x[n, c, i]``
    where each plane is flattened (``index = h * W_out + w``).

    Args:
      x: values, ``(N, C, H, W)`` or ``(C, H, W)`` (``(N, H, W, C)`` / ``(H, W, C)`` with
        ``data_format="NHWC"``). Any 1-, 2-, 4- or 8-byte dtype: bits are moved as they are.
      indices: int32 or int64, the shape of ``x``; flat positions inside an output plane.
      kernel_size: the pooling window, an int or an ``(h, w)`` pair (ints, a tuple, a list
        or a 1-D integer numpy array). Required unless ``output_size`` is given.
      stride: the pooling stride, an int or a pair; defaults to ``kernel_size``.
      padding: the pooling padding, an int or a pair (default 0). Without
        ``output_size``: ``H_out = (H - 1) * stride - 2 * padding + kernel_size``, and the
        same for ``W_out``.
      output_size: ``(H_out, W_out)`` or a full shape; with ``kernel_size`` it must lie
        strictly within ``stride`` of the default size (PyTorch's rule). A size may be 0
        (as in PyTorch): the result is empty.
      data_format: ``"NCHW"`` (default), ``"NHWC"``, or ``"CHW"`` / ``"HWC"`` for rank 3.

    Returns:
      ``x``'s layout with ``(H, W)`` replaced by ``(H_out, W_out)`` and ``x``'s dtype.
      Positions no index names are zero. Among duplicated indices in a plane the element
      with the largest flat input position wins, deterministically, on CPU, on NVIDIA
      GPUs (the CUDA kernels) and wherever XLA's ops run (other GPUs, TPU), as
      PyTorch's CPU kernel does on one thread (on several its winner is unspecified);
      on an Ascend NPU through aclnn the result is deterministic but which duplicate
      wins is unspecified (CANN names no winner).

    Raises:
      ValueError: at trace time, for a bad rank, shape or size (each message names the
        function, the argument, what was expected and what was received).
      TypeError: at trace time, for a bad dtype or an argument of the wrong type.
      jax.errors.JaxRuntimeError: at run time on CPU, for an index outside
        ``[0, H_out * W_out)``, naming the index, its position ``(n, c, i)`` and the
        valid range. A compiled function that has run before raises the same message as
        a ``ValueError`` (jax's fast dispatch path): catch both. If the indices come
        from a pool whose input the default ``H_out`` does not give back (an odd size
        with stride 2), pass ``output_size``. On a GPU the CUDA kernels raise it only
        with ``JAX_UNPOOL_CUDA_CHECK_INDICES=1``; otherwise they, like the XLA ops used
        on other platforms, drop such an element.
    """
    return _unpool("max_unpool2d", 2, x, indices, kernel_size, stride,
                   padding, output_size, data_format)


def max_unpool1d(x: Any, indices: Any, kernel_size: IntOrTuple | None = None,
                 stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
                 output_size: Any = None, *, data_format: str = "NCW") -> jax.Array:
    """:func:`max_unpool2d` for 1-D signals, as ``torch.nn.functional.max_unpool1d``.

    ``x`` and ``indices`` are ``(N, C, W)`` or ``(C, W)`` (``(N, W, C)`` / ``(W, C)`` with
    ``data_format="NWC"``/``"WC"``); indices are positions ``w`` in ``[0, W_out)``;
    ``W_out = (W - 1) * stride - 2 * padding + kernel_size`` without ``output_size``.
    Everything else (dtypes, duplicates, errors, autodiff, vmap) is as in 2-D.
    """
    return _unpool("max_unpool1d", 1, x, indices, kernel_size, stride,
                   padding, output_size, data_format)


def max_unpool3d(x: Any, indices: Any, kernel_size: IntOrTuple | None = None,
                 stride: IntOrTuple | None = None, padding: IntOrTuple = 0,
                 output_size: Any = None, *, data_format: str = "NCDHW") -> jax.Array:
    """:func:`max_unpool2d` for volumes, as ``torch.nn.functional.max_unpool3d``.

    ``x`` and ``indices`` are ``(N, C, D, H, W)`` or ``(C, D, H, W)`` (``(N, D, H, W, C)`` /
    ``(D, H, W, C)`` with ``data_format="NDHWC"``/``"DHWC"``); indices are flat positions
    ``d * H_out * W_out + h * W_out + w`` inside an output volume. Everything else is as
    in 2-D.
    """
    return _unpool("max_unpool3d", 3, x, indices, kernel_size, stride,
                   padding, output_size, data_format)


def max_unpool2d_backward(grad_output: Any, x: Any, indices: Any, output_size: Any = None,
                          *, data_format: str = "NCHW") -> jax.Array:
    """The gradient of :func:`max_unpool2d` w.r.t. ``x``: CANN's aclnnMaxUnpool2dBackward.

    ``out[n, c, i] = grad_output[n, c, indices[n, c, i]]`` (planes flattened).

    Args:
      grad_output: ``(N, C, H_out, W_out)`` or ``(C, H_out, W_out)``, ``x``'s dtype.
      x: the forward's input ("self" in CANN); only its shape and dtype are used, so a
        ``jax.ShapeDtypeStruct`` will do.
      indices: int32 or int64, ``x``'s shape.
      output_size: ``(H_out, W_out)`` or a full shape; must equal grad_output's spatial dims.
      data_format: as in :func:`max_unpool2d`.

    Returns:
      ``x``'s shape, ``grad_output``'s dtype. Every duplicate index reads its position
      (as PyTorch and CANN do).

    Raises:
      ValueError: at trace time, for a bad rank, shape or size, or an ``output_size``
        that is not ``grad_output``'s.
      TypeError: at trace time, for a bad dtype (``grad_output``'s must be ``x``'s).
      jax.errors.JaxRuntimeError: at run time on CPU, for an out-of-range index, as
        :func:`max_unpool2d` (a ``ValueError`` from a compiled function that has run
        before). Where no error is raised (the XLA ops, CUDA by default) it reads 0.
    """
    return _unpool_backward("max_unpool2d_backward", 2, grad_output, x,
                            indices, output_size, data_format)


def max_unpool1d_backward(grad_output: Any, x: Any, indices: Any, output_size: Any = None,
                          *, data_format: str = "NCW") -> jax.Array:
    """The gradient of :func:`max_unpool1d` w.r.t. ``x`` (a gather, as in 2-D)."""
    return _unpool_backward("max_unpool1d_backward", 1, grad_output, x,
                            indices, output_size, data_format)


def max_unpool3d_backward(grad_output: Any, x: Any, indices: Any, output_size: Any = None,
                          *, data_format: str = "NCDHW") -> jax.Array:
    """The gradient of :func:`max_unpool3d` w.r.t. ``x``: CANN's aclnnMaxUnpool3dBackward."""
    return _unpool_backward("max_unpool3d_backward", 3, grad_output, x,
                            indices, output_size, data_format)


# --------------------------------------------------------------------------------------
# Shared by both primitives
# --------------------------------------------------------------------------------------

def _plane_guard(ctx, fn: str, plane) -> None:
    if ctx.avals_in[1].dtype == np.int32:
        _symbolic.assert_at_most(
            ctx, plane, _args.INT32_MAX,
            f"{fn}: int32 indices cannot address an output plane of more than "
            f"{_args.INT32_MAX} positions (use int64 indices)")


# --------------------------------------------------------------------------------------
# max_unpool{k}d_p: the scatter
# --------------------------------------------------------------------------------------

def _check_index_window(fn: str, index_window, k: int, channels_last) -> None:
    if index_window is None:
        return
    if not isinstance(index_window, PoolGeometry) or index_window.k != k:
        raise TypeError(f"{fn}: index_window must be None (flat indices) or the "
                        f"PoolGeometry of a {k}-D pool, got {_args.received(index_window)}")
    if index_window.channels_last != channels_last:
        raise ValueError(f"{fn}: index_window's layout (channels_last="
                         f"{index_window.channels_last}) is not the call's ({channels_last})")


def _max_unpool_params(primitive: str, *, output_size, channels_last, window=None,
                       check_indices=False, index_window=None) -> None:
    k = len(output_size) if isinstance(output_size, tuple) else 0
    if k not in RANKS:
        raise ValueError(f"{primitive}: output_size must be a tuple of 1, 2 or 3 sizes "
                         f"(the spatial rank), got {_args.received(output_size)}")
    fn = f"max_unpool{k}d"
    _primitive.check_bool(fn, "channels_last", channels_last)
    _geometry.Window.check(fn, window, k)
    _primitive.check_bool(fn, "check_indices", check_indices)
    _args.positive_sizes(fn, "output_size", output_size, k, allow_zero=True, symbolic=True)
    _check_index_window(fn, index_window, k, channels_last)
    if index_window is not None and tuple(output_size) != tuple(index_window.in_size):
        raise ValueError(f"{fn}: output_size {output_size} is not the input size "
                         f"{index_window.in_size} of index_window's pool")


def _defaults() -> dict:
    """What a bind may omit (binds written before these parameters existed)."""
    return {"window": None, "check_indices": _settings.CHECK_INDICES, "index_window": None}


max_unpool_p = {k: _primitive.Primitive(f"max_unpool{k}d",
                                        partial(_max_unpool_params, f"max_unpool{k}d_p"),
                                        defaults=_defaults)
                for k in RANKS}
max_unpool1d_p, max_unpool2d_p, max_unpool3d_p = max_unpool_p.values()


# The parameters are checked at bind (_max_unpool_params), the operands here.
def _max_unpool_abstract_eval(x, indices, *, output_size, channels_last, index_window, **_):
    k = len(output_size)
    fn = f"max_unpool{k}d"
    if index_window is None:
        check_unpool_operands(fn, x, indices, k)
        _args.check_plane_fits_indices(fn, indices.dtype, output_size)
    else:
        check_window_operands(fn, "x", x, indices, index_window, index_window.out_size)
    shape = _geometry.unpool_result_shape(fn, x.shape, output_size, channels_last, k)
    return _sharding.result_type(fn, x, [indices], shape, x.dtype, channels_last, k)


def _max_unpool_jvp(primals, tangents, **params):
    x, indices = primals

    def bind(values):
        return max_unpool_p[len(params["output_size"])].bind(values, indices, **params)

    out = bind(x)
    return out, _primitive.tangent_or_zero(tangents[0], out, bind)  # indices: no tangent


def _max_unpool_transpose(ct, x, indices, *, output_size, **params):
    # Linear in x only: its cotangent gathers ct at the indices.
    assert ad.is_undefined_primal(x) and not ad.is_undefined_primal(indices)
    if type(ct) is ad.Zero:
        return ad.Zero(x.aval), None
    k = len(output_size)
    return max_unpool_backward_p[k].bind(ct, indices, spatial_rank=k, **params), None


def _max_unpool_batch(args, dims, **params):
    k = len(params["output_size"])
    (x, indices), unfold = _primitive.fold_batch(args, dims, k)
    return unfold(max_unpool_p[k].bind(x, indices, **params))


def _max_unpool_call_guards(ctx, *, output_size, **_):
    fn = f"max_unpool{len(output_size)}d"
    _symbolic.assert_at_most(
        ctx, ctx.avals_out[0].shape, _args.MAX_ELEMENTS,
        f"{fn}: the result must have at most {_args.MAX_ELEMENTS} (2**60 - 1) elements, what "
        "XLA can hold")
    _plane_guard(ctx, fn, output_size)


_primitive.define_rules(max_unpool_p.values(), _max_unpool_abstract_eval, _max_unpool_jvp,
                        _max_unpool_batch, transpose=_max_unpool_transpose)
registry.declare("max_unpool", max_unpool_p.values(), _max_unpool_call_guards)


# --------------------------------------------------------------------------------------
# max_unpool{k}d_backward_p: the gather (CANN's aclnnMaxUnpool2dBackward)
# --------------------------------------------------------------------------------------

def _max_unpool_backward_params(primitive: str, *, channels_last, spatial_rank=2,
                                window=None, check_indices=False, index_window=None) -> None:
    # Integral numpy ints count as ints (they hash and index as ints do); floats do not.
    if not _args.is_int(spatial_rank):
        raise TypeError(f"{primitive}: spatial_rank must be an int (1, 2 or 3), got "
                        f"{_args.received(spatial_rank)}")
    if spatial_rank not in RANKS:
        raise ValueError(f"{primitive}: spatial_rank must be 1, 2 or 3, got {spatial_rank!r}")
    fn = f"max_unpool{spatial_rank}d_backward"
    _primitive.check_bool(fn, "channels_last", channels_last)
    _geometry.Window.check(fn, window, spatial_rank)
    _primitive.check_bool(fn, "check_indices", check_indices)
    _check_index_window(fn, index_window, spatial_rank, channels_last)


max_unpool_backward_p = {
    k: _primitive.Primitive(f"max_unpool{k}d_backward",
                            partial(_max_unpool_backward_params, f"max_unpool{k}d_backward_p"),
                            defaults=lambda: {**_defaults(), "spatial_rank": 2})
    for k in RANKS}
max_unpool1d_backward_p, max_unpool2d_backward_p, max_unpool3d_backward_p = (
    max_unpool_backward_p.values())


# spatial_rank defaults to 2 at bind: binds written before 1-D and 3-D omit it.
def _max_unpool_backward_abstract_eval(grad_output, indices, *, channels_last, spatial_rank,
                                       index_window, **_):
    k = spatial_rank  # checked at bind (_max_unpool_backward_params), as channels_last
    fn = f"max_unpool{k}d_backward"
    if index_window is None:
        check_gather_operands(fn, grad_output, indices, channels_last, k)
        _args.check_plane_fits_indices(
            fn, indices.dtype, _geometry.spatial_dims(grad_output.shape, channels_last, k))
    else:
        check_window_operands(fn, "grad_output", grad_output, indices, index_window,
                              index_window.in_size)
    return _sharding.result_type(fn, indices, [grad_output], indices.shape,
                                 grad_output.dtype, channels_last, k)


def _max_unpool_backward_jvp(primals, tangents, **params):
    grad_output, indices = primals

    def bind(values):
        return max_unpool_backward_p[params["spatial_rank"]].bind(values, indices, **params)

    out = bind(grad_output)
    return out, _primitive.tangent_or_zero(tangents[0], out, bind)


def _max_unpool_backward_transpose(ct, grad_output, indices, *, spatial_rank, **params):
    # Linear in grad_output only: its cotangent scatters ct to the indices.
    assert ad.is_undefined_primal(grad_output) and not ad.is_undefined_primal(indices)
    if type(ct) is ad.Zero:
        return ad.Zero(grad_output.aval), None
    size = _geometry.spatial_dims(grad_output.aval.shape, params["channels_last"], spatial_rank)
    return max_unpool_p[spatial_rank].bind(ct, indices, output_size=size, **params), None


def _max_unpool_backward_batch(args, dims, **params):
    (grad_output, indices), unfold = _primitive.fold_batch(args, dims, params["spatial_rank"])
    return unfold(max_unpool_backward_p[params["spatial_rank"]].bind(grad_output, indices,
                                                                     **params))


def _max_unpool_backward_call_guards(ctx, *, channels_last, spatial_rank, **_):
    _plane_guard(ctx, f"max_unpool{spatial_rank}d_backward",
                 _geometry.spatial_dims(ctx.avals_in[0].shape, channels_last, spatial_rank))


_primitive.define_rules(max_unpool_backward_p.values(), _max_unpool_backward_abstract_eval,
                        _max_unpool_backward_jvp, _max_unpool_backward_batch,
                        transpose=_max_unpool_backward_transpose)
registry.declare("max_unpool_backward", max_unpool_backward_p.values(),
                 _max_unpool_backward_call_guards)
