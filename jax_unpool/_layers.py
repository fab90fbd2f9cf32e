"""What the layer modules (``nnx``, ``linen``, ``equinox``) share: each rank's functions and
data formats, and the sizes as a layer keeps them."""

from __future__ import annotations

from typing import Any

import numpy as np

import jax_unpool as ju
from jax_unpool._args import received
from jax_unpool._geometry import SPATIAL
from jax_unpool._geometry import formats as layouts

# The function each rank's pooling and unpooling layer calls.
POOLS = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
         3: ju.max_pool3d_with_indices}
UNPOOLS = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}


def static_size(value: Any) -> Any:
    """A kernel_size, stride, padding or dilation as a layer keeps it. The functions take
    ints, tuples, lists and 1-D integer numpy arrays; a layer keeps tuples of ints (and
    ints), so that it is hashable and comparable (a static argument of jit, a cache key)
    and holds no array that a framework would trace. Anything else is kept as it is, for
    the function to refuse with its own error."""
    if (isinstance(value, np.ndarray) and value.ndim == 1
            and np.issubdtype(value.dtype, np.integer)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(int(v) if isinstance(v, np.integer) else v for v in value)
    return int(value) if isinstance(value, np.integer) else value


def channels_last_format(k: int) -> str:
    """The batched channels-last format of spatial rank k (NWC, NHWC, NDHWC): Flax's layout."""
    return f"N{SPATIAL[k]}C"


def layer_data_format(layer: str, data_format: Any, k: int) -> str:
    """A layer's format, checked when the layer is built rather than at its first call:
    one of rank k's formats, or None for the channels-last default ("" or 0 is not None)."""
    if data_format is None:
        return channels_last_format(k)
    formats = layouts(k)
    if not isinstance(data_format, str) or data_format not in formats:
        raise ValueError(f"{layer}: data_format must be one of {sorted(formats)} or None, got "
                         f"{received(data_format)}")
    return data_format


def channels_first_example(k: int) -> str:
    """The unbatched channels-first format of spatial rank k (CW, CHW, CDHW): Equinox's."""
    return f"C{SPATIAL[k]}"


def unbatched(data_format: str, x: Any, k: int) -> str:
    """A layer built for batches also takes one example: NHWC -> HWC, NCHW -> CHW."""
    if len(data_format) == k + 2 and np.ndim(x) == k + 1:
        return data_format[1:]
    return data_format
