"""What the layer modules (``nnx``, ``linen``, ``equinox``) share: each rank's data formats."""

from __future__ import annotations

from typing import Any

import numpy as np

from jax_unpool._args import SPATIAL


def channels_last_format(k: int) -> str:
    """The batched channels-last format of spatial rank k (NWC, NHWC, NDHWC): Flax's layout."""
    return f"N{SPATIAL[k]}C"


def channels_first_example(k: int) -> str:
    """The unbatched channels-first format of spatial rank k (CW, CHW, CDHW): Equinox's."""
    return f"C{SPATIAL[k]}"


def unbatched(data_format: str, x: Any, k: int) -> str:
    """A layer built for batches also takes one example: NHWC -> HWC, NCHW -> CHW."""
    if len(data_format) == k + 2 and np.ndim(x) == k + 1:
        return data_format[1:]
    return data_format
