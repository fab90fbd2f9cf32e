"""Argument handling shared by the public functions, the reference and the primitives.

Every check raises at trace time with a message naming the function, the argument, what
was expected and what was received.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jax_unpool import _symbolic

SPATIAL = {1: "W", 2: "HW", 3: "DHW"}  # spatial dims per rank, as PyTorch names them
_PLURAL = {1: "a 1-tuple", 2: "a pair", 3: "a triple"}
_PACKED_DTYPES = {"int2", "uint2", "int4", "uint4", "float4_e2m1fn"}
INT32_MAX = np.iinfo(np.int32).max
# XLA aborts the process on an array whose byte size overflows int64 ("overflow in static
# extent product"); elements (and the jnp reference's scatter positions) take up to 8 bytes.
MAX_ELEMENTS = np.iinfo(np.int64).max // 8


def layouts(k: int = 2) -> dict[str, bool]:
    """The data formats of spatial rank k and whether each is channels-last:
    NCHW/CHW/NHWC/HWC for k=2 (NCW/.../WC for 1, NCDHW/.../DHWC for 3)."""
    s = SPATIAL[k]
    return {f"NC{s}": False, f"C{s}": False, f"N{s}C": True, f"{s}C": True}


def channels_last(fn: str, data_format: str, ndim: int, k: int = 2) -> bool:
    """True for NHWC/HWC, False for NCHW/CHW (per rank k); the unbatched formats (CHW,
    HWC) name rank-(k+1) data only."""
    formats = layouts(k)
    if not isinstance(data_format, str) or data_format not in formats:
        raise ValueError(
            f"{fn}: data_format must be one of {sorted(formats)}, got {data_format!r}")
    if len(data_format) == k + 1 and ndim != k + 1:
        raise ValueError(
            f"{fn}: data_format {data_format!r} describes rank-{k + 1} input, got rank {ndim}")
    return formats[data_format]


def spatial_axis(ndim: int, channels_last: bool, k: int = 2) -> int:
    """Position of the first of the k spatial dims (the others follow it)."""
    return ndim - k - 1 if channels_last else ndim - k


def check_rank(fn: str, name: str, shape: Sequence[int], k: int = 2) -> None:
    s = ", ".join(SPATIAL[k])
    if len(shape) not in (k + 1, k + 2):
        raise ValueError(
            f"{fn}: {name} must have rank {k + 1} (C, {s}) or {k + 2} (N, C, {s}), "
            f"got rank {len(shape)} with shape {tuple(shape)}")


def is_movable(dtype: Any) -> bool:
    """Whether the unpool kernels move values of `dtype`: whole 1, 2, 4 or 8 bytes (the
    packed 4- and 2-bit dtypes report an itemsize of 1 but are not bytes in XLA)."""
    dtype = np.dtype(dtype)
    return dtype.itemsize in (1, 2, 4, 8) and dtype.name not in _PACKED_DTYPES


def check_movable_dtype(fn: str, name: str, dtype: Any) -> None:
    dtype = np.dtype(dtype)
    if not is_movable(dtype):
        raise TypeError(
            f"{fn}: {name} must have a 1-, 2-, 4- or 8-byte dtype, got {dtype.name}")


def received(value: Any) -> str:
    """A short description of a received value for messages: its repr when it is short,
    its type (and dtype) otherwise -- never a whole array."""
    if isinstance(getattr(value, "shape", None), tuple) and hasattr(value, "dtype"):
        return f"{type(value).__name__} of dtype {value.dtype} and shape {value.shape}"
    text = repr(value)
    return text if len(text) <= 80 else f"{type(value).__name__} {text[:60]}..."


def as_array(fn: str, name: str, value: Any) -> jax.Array:
    """`value` as a jax array: a TypeError naming the function and the argument for what
    is not an array of numbers (None, strings, bytes, dicts, object arrays, ragged lists),
    a ValueError for Python ints outside the dtype JAX gives them."""
    try:
        return jnp.asarray(value)
    except OverflowError as error:
        raise ValueError(f"{fn}: {name} holds a value its dtype cannot represent: "
                         f"{error}") from error
    except (TypeError, ValueError) as error:
        raise TypeError(f"{fn}: {name} must be an array of numbers (a jax or numpy array, "
                        f"or nested sequences of numbers), got {received(value)}") from error


def as_indices(fn: str, indices: Any) -> jax.Array:
    """`indices` as a jax array. With x64 off, jnp.asarray wraps host int64 values into
    int32 (2**32 + 3 becomes 3), so values outside int32 are refused before that."""
    if not isinstance(indices, jax.Array) and jax.dtypes.canonicalize_dtype(np.int64) != np.int64:
        try:
            host = np.asarray(indices)
        except (TypeError, ValueError, OverflowError):
            host = None  # not an array of numbers: as_array says so below
        if host is not None and host.dtype == np.int64:
            info = np.iinfo(np.int32)
            outside = np.argwhere((host < info.min) | (host > info.max))
            if outside.size:
                pos = tuple(int(p) for p in outside[0])
                raise ValueError(
                    f"{fn}: indices must lie in int32's range with jax_enable_x64 off, got "
                    f"{host[pos]} at position {pos}; enable x64 for int64 indices "
                    "(jax.config.update('jax_enable_x64', True))")
    return as_array(fn, "indices", indices)


def check_index_dtype(fn: str, name: str, dtype: Any) -> None:
    if np.dtype(dtype) not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"{fn}: {name} must be int32 or int64, got {np.dtype(dtype).name}")


def _dims(sizes: Sequence) -> tuple:
    """Sizes as Python ints (numpy's overflow silently in products), symbolic ones as
    they are."""
    return tuple(v if _symbolic.is_symbolic(v) else int(v) for v in sizes)


def check_plane_fits_indices(fn: str, index_dtype: Any, output_hw: Sequence[int]) -> None:
    """int32 indices cannot address an output plane of more than 2**31 - 1 positions.
    With symbolic sizes: refused when proven for every size, otherwise checked at call
    time by the primitives' lowering (_symbolic)."""
    output_hw = _dims(output_hw)
    if np.dtype(index_dtype) == np.int32 and _symbolic.exceeds(output_hw, INT32_MAX):
        raise ValueError(
            f"{fn}: an output plane of {'x'.join(map(str, output_hw))} = "
            f"{math.prod(output_hw)} positions cannot be addressed by int32 indices (at most "
            f"{INT32_MAX}); use int64 indices (jax.config.update('jax_enable_x64', True))")


def unpool_result_shape(fn: str, shape: Sequence[int], output_size: Sequence[int],
                        channels_last: bool, k: int = 2) -> tuple[int, ...]:
    """The forward's result shape: `shape` with its k spatial dims replaced by
    `output_size`."""
    h = spatial_axis(len(shape), channels_last, k)
    result = (*shape[:h], *output_size, *shape[h + k:])
    if _symbolic.exceeds(result, MAX_ELEMENTS):  # open for symbolic sizes: see _symbolic
        raise ValueError(
            f"{fn}: output_size {tuple(output_size)} gives a result of shape "
            f"{_symbolic.shape_text(result)} = {math.prod(result)} elements, more than the "
            f"{MAX_ELEMENTS} (2**60 - 1) XLA can hold (an array's byte size must fit in int64 "
            "and elements take up to 8 bytes)")
    return result


def is_int(value: Any) -> bool:
    """A Python or numpy integer; bools are not sizes (kernel_size=True is a bug)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def int_tuple(value: Any, lengths: Sequence[int]) -> tuple[int, ...] | None:
    """The ints of a tuple, a list or a 1-D integer numpy array whose length is one of
    `lengths` (as PyTorch takes sequences of ints); None for anything else: other
    iterables (a dict or a set would give arbitrary sizes), floats, bools, strings."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or not np.issubdtype(value.dtype, np.integer):
            return None
        value = value.tolist()
    if not isinstance(value, (tuple, list)) or len(value) not in lengths:
        return None
    if not all(map(is_int, value)):
        return None
    return tuple(int(v) for v in value)


def _symbolic_tuple(value: Any, k: int) -> tuple | None:
    """k sizes of which some are symbolic dims (jax.export), the others ints; else None."""
    if (not isinstance(value, (tuple, list)) or len(value) != k
            or not any(map(_symbolic.is_symbolic, value))
            or not all(is_int(v) or _symbolic.is_symbolic(v) for v in value)):
        return None
    return _dims(value)


def _open_sign(fn: str, name: str, bound: str, sizes: Sequence) -> str:
    return (f"{fn}: {name} {_symbolic.shape_text(sizes)} must be {bound} for every value of "
            "the symbolic dims, which their bounds do not decide; state it in the symbolic "
            "shape's constraints (jax.export.symbolic_shape(..., constraints=...))")


def positive_sizes(fn: str, name: str, value: Any, k: int = 2, *, allow_zero: bool = False,
                   symbolic: bool = False) -> tuple[int, ...]:
    """An int or k ints (a pair for k=2; a tuple, list or 1-D integer numpy array), each
    > 0 (>= 0 with allow_zero) and at most MAX_ELEMENTS: a size past it could never give
    an array XLA can hold, and would only fail later, less clearly. With `symbolic`,
    entries may be symbolic dims (jax.export), refused when provably out of range and
    otherwise checked at call time (_symbolic)."""
    sizes = (int(value),) * k if is_int(value) else int_tuple(value, (k,))
    if sizes is None and symbolic:
        sizes = _symbolic_tuple(value, k)
    if sizes is None:
        raise TypeError(
            f"{fn}: {name} must be an int or {_PLURAL[k]} of ints, got {received(value)}")
    lo = 0 if allow_zero else 1
    bound = "non-negative" if allow_zero else "positive"
    below = [_symbolic.decided(lambda v=v: v < lo) for v in sizes]
    if any(below):
        raise ValueError(f"{fn}: {name} must be {bound}, got {received(value)}")
    if None in below:
        # A negative dim fails jax's shape refinement before any call-time check runs.
        raise ValueError(_open_sign(fn, name, bound, sizes))
    if any(_symbolic.decided(lambda v=v: v > MAX_ELEMENTS) for v in sizes):
        raise ValueError(f"{fn}: {name} must be at most {MAX_ELEMENTS} (2**60 - 1, the most "
                         f"elements an array can hold), got {received(value)}")
    return sizes


def output_spatial(fn: str, output_size: Any, ndim: int, channels_last: bool,
                   k: int = 2) -> tuple[int, ...]:
    """The k output sizes ((H_out, W_out) for k=2) from `output_size`: k ints, or a full
    shape in the data's layout. A size may be 0, as in PyTorch: the result is empty."""
    if isinstance(output_size, np.ndarray) and output_size.ndim == 1:
        output_size = output_size.tolist()
    if not isinstance(output_size, (tuple, list)):
        raise TypeError(f"{fn}: output_size must be a sequence of ints (a tuple, a list or a "
                        f"1-D integer numpy array), got {received(output_size)}")
    size = tuple(output_size)
    if len(size) == ndim or (len(size) == k + 2 and not channels_last):
        h = spatial_axis(len(size), channels_last, k)
        size = size[h:h + k]
    elif len(size) != k:
        names = ", ".join(f"{d}_out" for d in SPATIAL[k])
        raise ValueError(
            f"{fn}: output_size must have {k} entries ({names}) or {ndim} (a full shape), "
            f"got {len(size)}: {received(output_size)}")
    return positive_sizes(fn, "output_size", size, k, allow_zero=True, symbolic=True)


def unpool_output_size(fn: str, shape: Sequence[int], channels_last: bool, kernel_size: Any,
                       stride: Any, padding: Any, output_size: Any,
                       k: int = 2) -> tuple[int, ...]:
    """torch.nn.functional.max_unpool{k}d's output size rule, with its range check. As in
    PyTorch an output size may be 0 (the result is empty), none negative."""
    if kernel_size is None:
        if output_size is None:
            raise ValueError(f"{fn}: one of kernel_size or output_size is required, got neither")
        if stride is not None or not (is_int(padding) and padding == 0):
            raise ValueError(
                f"{fn}: stride and padding need kernel_size, got kernel_size=None with "
                f"stride={received(stride)}, padding={received(padding)}")
        return output_spatial(fn, output_size, len(shape), channels_last, k)
    kernel = positive_sizes(fn, "kernel_size", kernel_size, k)
    strides = kernel if stride is None else positive_sizes(fn, "stride", stride, k)
    pads = positive_sizes(fn, "padding", padding, k, allow_zero=True)
    h = spatial_axis(len(shape), channels_last, k)
    default = tuple((shape[h + d] - 1) * strides[d] - 2 * pads[d] + kernel[d] for d in range(k))
    if output_size is None:
        negative = [_symbolic.decided(lambda d=d: d < 0) for d in default]
        if any(negative):
            raise ValueError(
                f"{fn}: kernel_size={kernel}, stride={strides}, padding={pads} give a "
                f"negative output size {default} for input spatial size "
                f"{tuple(shape[h:h + k])}")
        if None in negative:  # (h - 1) * 2 - 4 + 2 at h = 1, say
            raise ValueError(_open_sign(fn, "the default output size", "non-negative",
                                        default))
        return default
    size = output_spatial(fn, output_size, len(shape), channels_last, k)
    for d in range(k):
        lo, hi = default[d] - strides[d], default[d] + strides[d]
        inside = _symbolic.decided(lambda lo=lo, v=size[d], hi=hi: lo < v < hi)
        if inside is None:
            raise ValueError(
                f"{fn}: output_size {_symbolic.shape_text(size)} must lie within stride of "
                f"the default {_symbolic.shape_text(default)} for every value of the symbolic "
                f"dims, which their bounds do not decide for dim {d} ({lo} < {size[d]} < "
                f"{hi}); state it in the symbolic shape's constraints, or pass output_size "
                "without kernel_size")
        if not inside:
            raise ValueError(
                f"{fn}: invalid output_size {tuple(size)} (dim {d} must be between {lo} and "
                f"{hi}, exclusive, for kernel_size={kernel}, stride={strides}, "
                f"padding={pads})")
    return size


def check_unpool_operands(fn: str, x: Any, indices: Any, k: int = 2) -> None:
    """x and indices of the forward: same rank-(k+1)/(k+2) shape, movable values, integer
    indices."""
    check_rank(fn, "x", x.shape, k)
    check_movable_dtype(fn, "x", x.dtype)
    check_index_dtype(fn, "indices", indices.dtype)
    if tuple(indices.shape) != tuple(x.shape):
        raise ValueError(
            f"{fn}: indices must have the shape of x, {tuple(x.shape)}, got "
            f"{tuple(indices.shape)}")


def check_gather_operands(fn: str, grad_output: Any, indices: Any, channels_last: bool,
                          k: int = 2) -> None:
    """grad_output (N, C, H_out, W_out) and indices (N, C, H, W) of the backward (k=2)."""
    check_rank(fn, "grad_output", grad_output.shape, k)
    check_movable_dtype(fn, "grad_output", grad_output.dtype)
    check_index_dtype(fn, "indices", indices.dtype)
    g, i = tuple(grad_output.shape), tuple(indices.shape)
    h = spatial_axis(len(g), channels_last, k)
    keep = [d for d in range(len(g)) if not h <= d < h + k]
    if len(i) != len(g) or [g[d] for d in keep] != [i[d] for d in keep]:
        raise ValueError(
            f"{fn}: grad_output {g} and indices {i} must have the same rank and the same "
            "batch and channel dims")


def check_backward_arguments(fn: str, grad_output: Any, x: Any, indices: Any,
                             output_size: Any, data_format: str, k: int = 2) -> bool:
    """All checks of max_unpool{k}d_backward's arguments; returns channels_last."""
    # A tuple shape: a class such as np.float32 has .shape and .dtype attributes too.
    if not (isinstance(getattr(x, "shape", None), tuple) and hasattr(x, "dtype")):
        raise TypeError(
            f"{fn}: x must be an array or have .shape and .dtype (a jax.ShapeDtypeStruct; "
            f"only its shape and dtype are used), got {type(x).__name__}")
    check_rank(fn, "x", x.shape, k)
    last = channels_last(fn, data_format, len(x.shape), k)
    if tuple(indices.shape) != tuple(x.shape):
        raise ValueError(
            f"{fn}: indices must have the shape of x, {tuple(x.shape)}, got "
            f"{tuple(indices.shape)}")
    check_gather_operands(fn, grad_output, indices, last, k)
    # x may be a numpy array or a ShapeDtypeStruct: compare the dtype JAX would give it.
    x_dtype = jax.dtypes.canonicalize_dtype(x.dtype)
    if np.dtype(grad_output.dtype) != x_dtype:
        raise TypeError(
            f"{fn}: grad_output must have the dtype of x, {x_dtype.name}, got "
            f"{np.dtype(grad_output.dtype).name}")
    hw = output_spatial(fn, output_size, len(x.shape), last, k)
    h = spatial_axis(len(grad_output.shape), last, k)
    grad_hw = tuple(grad_output.shape[h:h + k])
    if hw != grad_hw:
        raise ValueError(
            f"{fn}: output_size {hw} must match grad_output's spatial dims {grad_hw}")
    check_plane_fits_indices(fn, indices.dtype, hw)
    return last


def unpool_operands(fn: str, k: int, x: Any, indices: Any, kernel_size: Any, stride: Any,
                    padding: Any, output_size: Any, data_format: str):
    """max_unpool{k}d's arguments checked: (x, indices, output_size, channels_last)."""
    x, indices = as_array(fn, "x", x), as_indices(fn, indices)
    check_unpool_operands(fn, x, indices, k)
    last = channels_last(fn, data_format, x.ndim, k)
    size = unpool_output_size(fn, x.shape, last, kernel_size, stride, padding, output_size, k)
    check_plane_fits_indices(fn, indices.dtype, size)
    unpool_result_shape(fn, x.shape, size, last, k)
    return x, indices, size, last


def unpool_backward_operands(fn: str, k: int, grad_output: Any, x: Any, indices: Any,
                             output_size: Any, data_format: str):
    """max_unpool{k}d_backward's arguments checked: (grad_output, indices, channels_last)."""
    grad_output, indices = as_array(fn, "grad_output", grad_output), as_indices(fn, indices)
    last = check_backward_arguments(fn, grad_output, x, indices, output_size, data_format, k)
    return grad_output, indices, last
