"""The out-of-range error is deterministic: with several bad indices spread over planes that
different thread-pool chunks check, every run reports the same one -- the first bad
element in the flat (memory) order of the indices buffer, as numpy finds it -- whichever
chunk finishes first.

Inputs of a few MB, so the kernels split their 32 planes into several chunks. The first
bad index sits at the very end of an early chunk and later chunks have bad indices at
their very start, so the later chunks find theirs first.
"""

from __future__ import annotations

import jax
import numpy as np
import numpy_oracle
import pytest
from out_of_range import RUNTIME_ERRORS, expected_message

import jax_unpool as ju

N, C, H, W = 2, 16, 64, 64   # 32 planes; ~3 MB moved per call
RUNS = 20

forward = jax.jit(ju.max_unpool2d, static_argnames=("output_size", "data_format"))
backward = jax.jit(ju.max_unpool2d_backward, static_argnames=("output_size", "data_format"))


def messages(call) -> set[str]:
    seen = set()
    for _ in range(RUNS):
        with pytest.raises(RUNTIME_ERRORS) as e:
            jax.block_until_ready(call())
        seen.add(str(e.value))
    return seen


def operands(rng, channels_last):
    shape = (N, H, W, C) if channels_last else (N, C, H, W)
    idx, hw = numpy_oracle.pool_indices(rng, shape, 2, channels_last)
    x = rng.standard_normal(shape).astype(np.float32)
    grad = rng.standard_normal((N, *hw, C) if channels_last else (N, C, *hw)).astype(np.float32)
    return x, idx, hw, grad


def put(idx, channels_last, bad: dict[tuple[int, int, int], int]):
    """indices with idx[n, c, i] = value for each (n, c, i) -> value of `bad`."""
    out = idx.copy()
    for (n, c, i), value in bad.items():
        h, w = divmod(i, W)
        out[(n, h, w, c) if channels_last else (n, c, h, w)] = value
    return out


# (n, c, i) -> value. Planes 3 / 4 / 9 / 17 / 31 belong to different chunks (of 32 planes);
# the first in flat order is at the end of plane 3.
SPREAD = {(0, 3, H * W - 1): -3, (0, 4, 0): -4, (0, 9, 0): 10**6, (1, 1, 0): 2**31 - 1,
          (1, 15, 17): -2**31}
# NHWC orders (n, h, w, c): position 0 of channel 12 comes before position 5 of channel 1,
# though channel 1's chunk precedes channel 12's.
INTERLEAVED = {(0, 1, 5): -1, (0, 12, 0): 99999, (1, 0, 0): -5}


# Each op on operands()'s x, indices and gradient (the forward has no use for it).
CALLS = {"max_unpool2d": lambda x, idx, grad, **kw: forward(x, idx, **kw),
         "max_unpool2d_backward": lambda x, idx, grad, **kw: backward(grad, x, idx, **kw)}


@pytest.mark.parametrize("op", CALLS)
@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "NHWC"])
@pytest.mark.parametrize("bad", [SPREAD, INTERLEAVED], ids=["spread", "interleaved"])
def test_reports_the_first_bad_index_every_run(rng, op, channels_last, bad):
    x, idx, hw, grad = operands(rng, channels_last)
    idx = put(idx, channels_last, bad)
    fmt = "NHWC" if channels_last else "NCHW"
    want = expected_message(op, idx, hw, channels_last)
    assert messages(lambda: CALLS[op](x, idx, grad, output_size=hw, data_format=fmt)) == {want}


def test_expected_first_bad_index_is_the_flat_order_one(rng):
    # The oracle itself, on the two layouts: NCHW's first is (n=0, c=3, i=H*W-1), NHWC's
    # interleaved case picks channel 12 at position 0.
    _, idx, hw, _ = operands(rng, False)
    assert "index -3 at (n=0, c=3, i=4095)" in expected_message(
        "op", put(idx, False, SPREAD), hw, False)
    _, idx, hw, _ = operands(rng, True)
    assert "index 99999 at (n=0, c=12, i=0)" in expected_message(
        "op", put(idx, True, INTERLEAVED), hw, True)
