"""Checks of argument values shared by the public functions, the reference and the
primitives: arrays, dtypes and sizes (ranks, layouts and windows are `_geometry`'s).

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

_PLURAL = {1: "a 1-tuple", 2: "a pair", 3: "a triple"}
# Sub-byte dtypes: numpy gives them an itemsize of 1, XLA packs them (jax 0.12's jnp.int1
# and uint1 too, which earlier jax ran as XLA's pred).
_PACKED_DTYPES = {"int1", "uint1", "int2", "uint2", "int4", "uint4", "float4_e2m1fn"}
INT32_MAX = np.iinfo(np.int32).max
# XLA aborts the process on an array whose byte size overflows int64 ("overflow in static
# extent product"); elements (and the jnp reference's scatter positions) take up to 8 bytes.
MAX_ELEMENTS = np.iinfo(np.int64).max // 8


def is_movable(dtype: Any) -> bool:
    """Whether the unpool kernels move values of `dtype`: whole 1, 2, 4 or 8 bytes (the
    packed 4-, 2- and 1-bit dtypes report an itemsize of 1 but are not bytes in XLA)."""
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


def passed_dtype(value: Any) -> np.dtype | None:
    """The dtype of `value` as the caller passed it, before jax converts it (with x64 off,
    jax makes 64-bit dtypes 32-bit): a numpy array's or scalar's, nested sequences' as
    numpy reads them. None for jax arrays and tracers (their dtype is what was passed) and
    for what numpy cannot read as numbers."""
    if isinstance(value, jax.Array):
        return None
    try:
        dtype = np.asarray(value).dtype  # free for numpy arrays
    except (TypeError, ValueError, OverflowError):
        return None
    # Objects, strings and raw bytes are no numbers (ml_dtypes' kind is "V" too).
    return None if dtype.kind in "OSU" or dtype.name.startswith("void") else dtype


def canonical(dtype: Any) -> np.dtype:
    """The dtype jax gives an array of `dtype`: a 64-bit one is 32-bit with x64 off."""
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def dtype_text(dtype: Any, passed: Any = None) -> str:
    """A dtype for messages: the one the caller passed (`passed`, where known), and what
    jax made of it (`dtype`) where that differs, with the reason when it is x64 being off."""
    dtype = np.dtype(dtype)
    if passed is None or np.dtype(passed) == dtype:
        return dtype.name
    passed = np.dtype(passed)
    x64_off = canonical(np.int64) != np.int64
    why = ", as jax_enable_x64 is off" if x64_off and canonical(passed) == dtype else ""
    return f"{passed.name} (jax made it {dtype.name}{why})"


def as_indices(fn: str, indices: Any) -> jax.Array:
    """`indices` as a jax array of int32 or int64, or a TypeError naming the dtype that
    was passed. With x64 off, jnp.asarray wraps host int64 values into int32 (2**32 + 3
    becomes 3), so values outside int32 are refused before that."""
    passed = passed_dtype(indices)
    if passed == np.int64 and canonical(np.int64) != np.int64:
        host = np.asarray(indices)
        info = np.iinfo(np.int32)
        outside = np.argwhere((host < info.min) | (host > info.max))
        if outside.size:
            pos = tuple(int(p) for p in outside[0])
            raise ValueError(
                f"{fn}: indices must lie in int32's range with jax_enable_x64 off, got "
                f"{host[pos]} at position {pos}; enable x64 for int64 indices "
                "(jax.config.update('jax_enable_x64', True))")
    array = as_array(fn, "indices", indices)
    check_index_dtype(fn, "indices", array.dtype, passed)
    return array


def check_index_dtype(fn: str, name: str, dtype: Any, passed: Any = None) -> None:
    """int32 or int64; else a TypeError naming the dtype that was passed (`passed`, where
    known) and the cast that fixes it."""
    if np.dtype(dtype) not in (np.dtype(np.int32), np.dtype(np.int64)):
        raise TypeError(f"{fn}: {name} must be int32 or int64, got "
                        f"{dtype_text(dtype, passed)}; cast them: {name}.astype(jnp.int32)")


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


def open_sign(fn: str, name: str, bound: str, sizes: Sequence) -> str:
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
        raise ValueError(open_sign(fn, name, bound, sizes))
    if any(_symbolic.decided(lambda v=v: v > MAX_ELEMENTS) for v in sizes):
        raise ValueError(f"{fn}: {name} must be at most {MAX_ELEMENTS} (2**60 - 1, the most "
                         f"elements an array can hold), got {received(value)}")
    return sizes


