"""What the layer modules (``nnx``, ``linen``, ``equinox``) share: each rank's data formats."""

from __future__ import annotations

from typing import Any

import numpy as np

from jax_unpool._args import received
from jax_unpool._geometry import SPATIAL
from jax_unpool._geometry import formats as layouts


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
