"""The CPU kernels' run-time error for an out-of-range index, predicted with numpy.

The kernels report the first bad index in the flat (memory) order of the indices
buffer -- for NHWC that is (n, h, w, c) order -- whichever thread found it.
"""

from __future__ import annotations

import jax
import numpy as np

# A run-time error is a JaxRuntimeError, or a plain ValueError with the same message once
# the executable already ran successfully (jaxlib 0.10.2's C++ fast path, jax-ml/jax#34083).
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)

# What every out-of-range message (CPU and aclnn) says its (n, c, i) are relative to.
POSITIONS_NOTE = ("any position named here is in the indices buffer of this kernel call: "
                  "n counts the images with the batch axes of jax.vmap folded in, "
                  "i = h * W + w, and under sharding positions are within the shard")
# What a forward's message adds for an index past the plane: the usual cause.
POOL_HINT = ("; if the indices come from a max pool, pass the pool's input size as output_size "
             "(the default output size can be smaller, e.g. for an odd input size with "
             "stride 2)")


def expected_message(op: str, indices, output_hw: tuple[int, int],
                     channels_last: bool) -> str | None:
    """The error's full text for these indices, or None when every index is in range."""
    idx = np.asarray(indices)
    ho, wo = output_hw
    plane = ho * wo
    flat = idx.reshape(-1)
    bad = np.flatnonzero((flat < 0) | (flat >= plane))
    if bad.size == 0:
        return None
    k = int(bad[0])
    shape4 = idx.shape if idx.ndim == 4 else (1, *idx.shape)
    if channels_last:
        n, h, w, c = np.unravel_index(k, shape4)
        width = shape4[2]
    else:
        n, c, h, w = np.unravel_index(k, shape4)
        width = shape4[3]
    i = h * width + w
    value = int(flat[k])
    hint = POOL_HINT if value >= plane and not op.endswith("_backward") else ""
    # Read in the other layout, the buffer's plane is C times every spatial dim but the
    # last (NCHW read as NHWC: (C, H), W the channels) or but the first (NHWC read as NCHW);
    # an index inside that plane, scaled as the output scales the input, names that layout.
    in_h, in_w = shape4[1:3] if channels_last else shape4[2:]
    channels = shape4[3] if channels_last else shape4[1]
    if hint and in_h * in_w > 0 and value < channels * (in_w if channels_last else in_h) * (
            plane / (in_h * in_w)):
        other, reading = ("NCHW", "channels-first") if channels_last else ("NHWC",
                                                                         "channels-last")
        hint = (f"; it fits the {reading} reading of these buffers: if the data is {other}, "
                f"pass data_format='{other}'")
    return (f"OUT_OF_RANGE: {op}: index {value} at (n={n}, c={c}, i={i}) of indices "
            f"is out of range: valid indices are [0, {plane}) for an output plane of "
            f"{ho}x{wo}{hint} ({POSITIONS_NOTE})")
