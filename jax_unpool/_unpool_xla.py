"""XLA's scatter and gather on planes: what ``jax_unpool.reference`` computes, and the
unpool primitives' lowering on every platform without a native kernel (`backends.xla`),
which, where the window is known, runs dense ops instead (`scatter_windowed`,
`gather_windowed`, `_unpool_dense`) and keeps the scatter or gather for indices outside
their windows, chosen on the device.

Operands are already validated, of spatial rank k, channels-first or channels-last; each
is viewed as (N, C, plane) with the plane flattened, which is where an index points. Being
XLA ops, they cannot fail at run time: an out-of-range index is dropped by the forward and
reads 0 in the backward.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

from jax_unpool import _args, _geometry, _symbolic, _unpool_dense, _window

__all__ = ["gather_planes", "gather_windowed", "scatter_planes", "scatter_windowed"]


def _plane(sizes) -> int:
    """The length of a flattened plane of `sizes`. With symbolic sizes (jax.export) jax's
    shape rules need it provably >= 0, which jax's reasoning cannot show for a product
    with negative terms, such as (2*h - 1)*(2*w - 1) = 4*h*w - 2*w - 2*h + 1: that is
    refused here, naming the sizes, instead of deep in a reshape."""
    plane = math.prod(sizes)
    if _symbolic.decided(lambda: plane >= 0) is None:
        raise ValueError(
            f"max_unpool: the jnp lowering (platforms without a native kernel, and "
            f"jax_unpool.reference) flattens planes of size {_symbolic.shape_text(sizes)}, "
            f"whose product {plane} jax cannot prove non-negative for every value of the "
            "symbolic dims; export for platforms=('cpu',) only, or use symbolic sizes whose "
            "product has no negative terms (output sizes such as 2*h or 2*h + 1)")
    return plane


def _to_planes(a: jax.Array, channels_last: bool, k: int) -> jax.Array:
    """(N, C, *spatial) / (N, *spatial, C) / unbatched, k spatial dims -> (N, C, plane)."""
    a = a if a.ndim == k + 2 else a[None]
    plane = _plane(_geometry.spatial_dims(a.shape, channels_last, k))  # not -1: zero sizes
    if channels_last:
        return a.reshape(a.shape[0], plane, a.shape[-1]).transpose(0, 2, 1)
    return a.reshape(a.shape[0], a.shape[1], plane)


def _from_planes(p: jax.Array, like_ndim: int, sizes: tuple[int, ...],
                 channels_last: bool) -> jax.Array:
    """(N, C, plane) -> the layout and rank `like_ndim`, with spatial dims `sizes`."""
    n, c, _ = p.shape
    out = p.transpose(0, 2, 1).reshape(n, *sizes, c) if channels_last else p.reshape(n, c, *sizes)
    return out if like_ndim == len(sizes) + 2 else out[0]


_UINT = {1: jnp.uint8, 2: jnp.uint16, 4: jnp.uint32, 8: jnp.uint64}


def _as_bits(a: jax.Array) -> jax.Array:
    # Move unsigned integers of the same width: XLA's CPU backend computes bf16/f16
    # selects in f32, which would quiet NaN payloads; integers keep every bit.
    if a.dtype == jnp.bool_ or jnp.issubdtype(a.dtype, jnp.complexfloating):
        return a
    return lax.bitcast_convert_type(a, _UINT[a.dtype.itemsize])


def _drop_outside(indices: jax.Array, plane: int) -> jax.Array:
    # jnp indexing wraps negative indices, and take_along_axis narrows int64 ones to int32
    # where the plane fits (2**32 + p would read p): send both past the end, to be dropped.
    return jnp.where((indices < 0) | (indices >= plane), jnp.asarray(plane, indices.dtype),
                     indices)


def _scatter(x, indices, output_size, channels_last, exact_bits):
    k = len(output_size)
    xp, ip = _to_planes(x, channels_last, k), _to_planes(indices, channels_last, k)
    plane = _plane(output_size)
    length = xp.shape[-1]
    # Otherwise, or when a symbolic length leaves it open, int64 (int32 without x64, to
    # which jnp would truncate it anyway).
    fits = _symbolic.decided(lambda: length < _args.INT32_MAX)
    pos_dtype = jnp.int32 if fits else jax.dtypes.canonicalize_dtype(jnp.int64)
    pos = lax.broadcasted_iota(pos_dtype, ip.shape, 2) + 1
    # N and C are batching dims of the scatter: each plane scatters on its own, so XLA
    # can split planes across devices without gathering (and type explicit shardings).
    planes = lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(2,), scatter_dims_to_operand_dims=(2,),
        operand_batching_dims=(0, 1), scatter_indices_batching_dims=(0, 1))
    winner = lax.scatter_max(jnp.zeros_like(pos, shape=(*ip.shape[:2], plane)),
                             _drop_outside(ip, plane)[..., None], pos, planes, mode="drop")
    vals = _as_bits(xp) if exact_bits else xp
    moved = jnp.take_along_axis(vals, jnp.maximum(winner - 1, 0), axis=-1)
    out = jnp.where(winner > 0, moved, jnp.zeros((), vals.dtype))
    if exact_bits:
        out = lax.bitcast_convert_type(out, x.dtype)
    return _from_planes(out, x.ndim, tuple(output_size), channels_last)


def _gather(grad_output, indices, channels_last, k, exact_bits):
    plane = _plane(_grad_size(grad_output, channels_last, k))
    gp, ip = _to_planes(grad_output, channels_last, k), _to_planes(indices, channels_last, k)
    vals = _as_bits(gp) if exact_bits else gp
    out = jnp.take_along_axis(vals, _drop_outside(ip, plane), axis=-1,
                              mode="fill", fill_value=0)
    if exact_bits:
        out = lax.bitcast_convert_type(out, grad_output.dtype)
    return _from_planes(out, indices.ndim, _geometry.spatial_dims(indices.shape, channels_last, k),
                        channels_last)


def _tangent(tangent, out, move, transpose):
    # Bit moves have no derivative, so tangents take the value path: XLA's own gather and
    # scatter, linear (move, with `transpose` as its transpose). Integer primals have float0
    # tangents.
    if tangent.dtype == jax.dtypes.float0:
        return _symbolic.no_tangent(out.shape)
    return _paired(tangent, out.shape, move, transpose)


def _paired(tangent, out_shape, move, transpose):
    """move(tangent), a linear map that reverse mode transposes to `transpose`.

    With duplicated indices the primitives' transposes (scatter <-> gather, as PyTorch and
    CANN) are not the mechanical transposes of "largest position wins" and its gather;
    custom_linear_solve is JAX's public way to give a linear map a chosen transpose. It
    needs a square map, so the map runs on the input and the output laid end to end.
    """
    n, in_shape = tangent.size, tangent.shape

    def solve(_, v):  # (t, 0) -> (0, move(t))
        return jnp.concatenate([jnp.zeros(n, v.dtype), move(v[:n].reshape(in_shape)).ravel()])

    def transpose_solve(_, v):  # (0, ct) -> (transpose(ct), 0)
        back = transpose(v[n:].reshape(out_shape)).ravel()
        return jnp.concatenate([back, jnp.zeros(v.size - n, v.dtype)])

    padded = jnp.concatenate([tangent.ravel(), jnp.zeros(math.prod(out_shape), tangent.dtype)])
    out = lax.custom_linear_solve(lambda v: v, padded, solve, transpose_solve)
    return out[n:].reshape(out_shape)


def _exact(values, out_shape, move, transpose):
    """move(values), moving bits exactly, as a linear map whose transpose is `transpose`.

    `jax.linear_transpose` traces the primal (a custom_jvp rule is for differentiation
    only), and bit moves (bitcast_convert_type) have no transpose rule: the primal is
    therefore the paired map below, which XLA compiles to the move alone (a slice of a
    concatenation is the concatenated operand). Bools have no linear transpose at all.
    """
    if values.dtype == jnp.bool_:
        return move(values)
    return _paired(values, out_shape, move, transpose)


def _moves(indices, output_size, channels_last: bool, exact_bits: bool):
    """The scatter of values into `output_size` at `indices`, and the gather back: each is
    the other's transpose (the forward's and the backward's)."""
    k = len(output_size)
    return (lambda v: _scatter(v, indices, output_size, channels_last, exact_bits),
            lambda ct: _gather(ct, indices, channels_last, k, exact_bits))


@partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def scatter_planes(x: jax.Array, indices: jax.Array, output_size: tuple[int, ...],
                   channels_last: bool = False) -> jax.Array:
    """The forward on already-validated operands of spatial rank len(output_size): zeros,
    then out[..., idx] = x.

    Duplicates resolve deterministically to the largest input position: scatter-max
    each element's (position + 1), then gather the winners (0 marks an empty slot).
    Values move as same-width unsigned ints, bit-exactly. `jax.linear_transpose` gives
    gather_planes, as for the primitive (see _exact).
    """
    _plane(output_size)  # before _exact's flattening, for its message
    return _exact(x, _geometry.with_spatial(x.shape, output_size, channels_last),
                  *_moves(indices, output_size, channels_last, True))


@scatter_planes.defjvp
def _scatter_planes_jvp(output_size, channels_last, primals, tangents):
    x, indices = primals
    out = scatter_planes(x, indices, output_size, channels_last)
    return out, _tangent(tangents[0], out, *_moves(indices, output_size, channels_last, False))


@partial(jax.custom_jvp, nondiff_argnums=(2, 3))
def gather_planes(grad_output: jax.Array, indices: jax.Array, channels_last: bool = False,
                  spatial_rank: int = 2) -> jax.Array:
    """The backward on already-validated operands: out[..., i] = grad_output[..., idx[i]].
    `jax.linear_transpose` gives scatter_planes, as for the primitive (see _exact)."""
    output_size = _grad_size(grad_output, channels_last, spatial_rank)
    _plane(output_size)  # before _exact's flattening, for its message
    scatter, gather = _moves(indices, output_size, channels_last, True)
    return _exact(grad_output, indices.shape, gather, scatter)


@gather_planes.defjvp
def _gather_planes_jvp(channels_last, k, primals, tangents):
    grad_output, indices = primals
    out = gather_planes(grad_output, indices, channels_last, k)
    scatter, gather = _moves(indices, _grad_size(grad_output, channels_last, k), channels_last,
                             False)
    return out, _tangent(tangents[0], out, gather, scatter)


def _grad_size(grad_output, channels_last: bool, k: int) -> tuple[int, ...]:
    """The spatial size of the backward's grad_output: the forward's output_size."""
    return _geometry.spatial_dims(grad_output.shape, channels_last, k)


# --------------------------------------------------------------------------------------
# The lowering of the primitives (backends.xla): dense ops where the window is known
# --------------------------------------------------------------------------------------

def _dense_or_general(dense, general, values, indices, b, channels_last: bool):
    """`dense` where every index lies in its box (the check and the choice run on the
    device: an HLO conditional, whose predicate XLA keeps on a TPU; on a GPU its
    conditional copies the predicate to the host), else `general`. Both take and give
    batched operands. Each branch moves `values` as same-width unsigned ints of its own:
    converted outside, they would be copies of their own on CPU."""
    unbatched = indices.ndim == b.k + 1
    vb, ib = (values[None], indices[None]) if unbatched else (values, indices)

    out = lax.cond(_unpool_dense.in_boxes(ib, b, channels_last),
                   lambda v, i: _bits_moved(dense, v, i), general, vb, ib)
    return out[0] if unbatched else out


def _empty(shape) -> bool:
    return any(not _symbolic.is_symbolic(d) and d == 0 for d in shape)


def _bits_moved(fn, values: jax.Array, *args) -> jax.Array:
    """fn(values as same-width unsigned ints, *args) as `values`' dtype: selects move the
    bits (XLA's CPU backend computes bf16/f16 selects in f32, quieting NaN payloads)."""
    out = fn(_as_bits(values), *args)
    return out if out.dtype == values.dtype else lax.bitcast_convert_type(out, values.dtype)


def scatter_windowed(x: jax.Array, indices: jax.Array, output_size: tuple[int, ...],
                     channels_last: bool, window=None, index_window=None) -> jax.Array:
    """The forward for the primitive's lowering: `scatter_planes`' result, with dense ops
    where `window` (extent, stride, padding) is given or output sizes are multiples of
    the input's, and every index lies in its window's box; XLA's scatter otherwise.
    With window offsets (`index_window`, their pool): a select per tap where every window
    has a tap in the input (`_window.scatter`), else their flat indices' path."""
    if index_window is not None:
        if _window.dense_applies(index_window):
            return _bits_moved(_window.scatter, x, indices, index_window)
        indices, window = _window.to_flat(indices, index_window), index_window.window()
    in_size = _geometry.spatial_dims(x.shape, channels_last, len(output_size))
    b = _unpool_dense.boxes(in_size, output_size,
                            _geometry.unpool_window(in_size, output_size, window), indices.dtype)
    if b is None or _empty(x.shape):
        return _scatter(x, indices, output_size, channels_last, exact_bits=True)

    def dense(v, i):
        return _unpool_dense.scatter(v, i, b, channels_last)

    def general(v, i):
        return _scatter(v, i, output_size, channels_last, exact_bits=True)

    return _dense_or_general(dense, general, x, indices, b, channels_last)


def gather_windowed(grad_output: jax.Array, indices: jax.Array, channels_last: bool,
                    spatial_rank: int, window=None, index_window=None) -> jax.Array:
    """The backward for the primitive's lowering: `gather_planes`' result, with dense ops
    where the window is known (as `scatter_windowed`) and every index lies in its box.
    With window offsets: a select per tap (`_window.gather`), or their flat indices."""
    if index_window is not None:
        if _window.dense_applies(index_window):
            return _bits_moved(_window.gather, grad_output, indices, index_window)
        indices, window = _window.to_flat(indices, index_window), index_window.window()
    k = spatial_rank
    in_size = _geometry.spatial_dims(indices.shape, channels_last, k)
    out_size = _grad_size(grad_output, channels_last, k)
    b = _unpool_dense.boxes(in_size, out_size, _geometry.unpool_window(in_size, out_size, window),
                            indices.dtype)
    if b is None or _empty(indices.shape) or _empty(grad_output.shape):
        return _gather(grad_output, indices, channels_last, k, exact_bits=True)

    def dense(g, i):
        return _unpool_dense.gather(g, i, b, channels_last)

    def general(g, i):
        return _gather(g, i, channels_last, k, exact_bits=True)

    return _dense_or_general(dense, general, grad_output, indices, b, channels_last)
