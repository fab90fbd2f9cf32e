"""The CPU pool's fast path against torch: windows of 2 with stride 2 on every spatial
axis, no padding or dilation, channels first (ffi/cpu/max_pool.cc: a pass per input slice
over a run of output rows, each row a vectorised loop in whole 16-byte blocks, the last
block overlapping the others where the row is not a whole number of them; even rows of
fewer than 16 windows: each pair's winner over a block of rows, then each window's). Every row
length around the block of each value size (2 to 16 values), odd sizes under ceil_mode
(windows half outside, left to the generic code), ties, NaN, signed zeros and -inf, int64
indices (computed in int32, widened), runs of rows split across XLA's thread pool, and the
windows beside the fast path (padding, dilation, other strides), which must not take it;
and channels last with int64 indices (also computed in int32 over the channels). Values
are compared bit for bit (-0.0 against 0.0, NaN payloads)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch_oracle
from dtypes import bits
from torch_oracle import assert_same_as_torch, torch_pool

import jax_unpool as ju
from jax_unpool._compat import enable_x64

# Every test here compares with torch on random inputs; the golden file's fast-path cases
# (tests/ops/test_golden_torch.py) cover it without torch.
pytest.importorskip("torch", reason=torch_oracle.MISSING)

POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
CHANNELS_LAST = {1: "NWC", 2: "NHWC", 3: "NDHWC"}
DTYPES = ["float32", "float64", "float16", "bfloat16", "uint8", "int16"]


def mixed_values(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    """Small integers (many ties), and for floats NaN, -inf, inf and both zeros too."""
    dt = jnp.dtype(dtype)
    if jnp.issubdtype(dt, jnp.integer):
        info = jnp.iinfo(dt)
        x = rng.integers(-3, 4, shape)
        x[rng.random(shape) < 0.05] = info.min  # the dtype's lowest value, tied
        return x.astype(dt)
    x = rng.integers(-3, 4, shape).astype(np.float32)
    special = rng.choice([np.nan, -np.inf, np.inf, -0.0, 0.0], shape)
    x = np.where(rng.random(shape) < 0.15, special, x)
    return x.astype(dt)


def assert_same_as_native(x: np.ndarray, k: int, *args, index_dtype=jnp.int32) -> None:
    """The native pool (the public function) gives torch's values, bit for bit, and its
    indices."""
    with enable_x64(x.dtype.itemsize == 8 or index_dtype == jnp.int64):
        assert_same_as_torch(k, x, *args, pools=(POOL[k],), index_dtype=index_dtype)


def fast_window(k: int, ceil_mode: bool) -> tuple:
    return (2, 2, 0, 1, ceil_mode)


# Per value dtype (block of 16 bytes: 4, 2, 8, 8, 16, 8 values), input widths W whose rows
# of W // 2 full windows are: shorter than a block, a block less one, a block, one more,
# and several blocks and a part, and 15 and 16 (even rows of fewer than 16 windows take
# the pair winners' loops, kNarrow); odd W adds a window half outside under ceil_mode.
def widths(block: int) -> list[int]:
    full = sorted({1, block - 1, block, block + 1, 3 * block + 1, 15, 16} - {0})
    return [w for f in full for w in (2 * f, 2 * f + 1)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_row_length_around_the_vector_block_matches_torch(k, dtype):
    rng = np.random.default_rng(k)
    block = 16 // jnp.dtype(dtype).itemsize
    for w in widths(block):
        # D and H odd: under ceil_mode the last window row and slice are half outside.
        x = mixed_values(rng, (2, 3, *(5,) * (k - 1), w), dtype)
        for ceil_mode in (False, True):
            assert_same_as_native(x, k, *fast_window(k, ceil_mode))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_int64_indices_match_torch(k, dtype):
    # The kernel counts indices in int32 where the plane fits and widens them.
    x = mixed_values(np.random.default_rng(10 + k), (2, 3, *(7,) * (k - 1), 29), dtype)
    for ceil_mode in (False, True):
        assert_same_as_native(x, k, *fast_window(k, ceil_mode), index_dtype=jnp.int64)


@pytest.mark.parametrize("k,shape", [(3, (2, 7, 9, 67, 63)), (2, (4, 9, 131, 126)),
                                     (1, (16, 9, 4101))])
def test_runs_split_across_the_thread_pool_match_torch(k, shape):
    # Over 2 MB moved: the calls are cut into chunks of output rows, which start and end
    # inside the runs of rows of one (plane, d), and under ceil_mode next to the windows
    # half outside.
    x = mixed_values(np.random.default_rng(20 + k), shape, "float32")
    for ceil_mode in (False, True):
        want_values, want_indices = torch_pool(k, x, *fast_window(k, ceil_mode))
        values, indices = jax.jit(lambda v, c=ceil_mode: POOL[k](v, *fast_window(k, c)))(x)
        np.testing.assert_array_equal(bits(values), bits(want_values))
        np.testing.assert_array_equal(np.asarray(indices), want_indices)


@pytest.mark.parametrize("window", [
    (2, 2, 1, 1, False),  # padding
    (2, 2, 1, 1, True),
    (2, 2, 0, 2, False),  # dilation
    (2, 1, 0, 1, False),  # overlapping windows
    (2, 3, 0, 1, True),  # gaps between windows
])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_windows_beside_the_fast_path_match_torch(k, window):
    x = mixed_values(np.random.default_rng(30 + k), (2, 3, *(6,) * (k - 1), 21), "float32")
    assert_same_as_native(x, k, *window)


def test_per_axis_windows_of_2_only_on_some_axes_match_torch():
    # A 3-D window of 1 along D (or a stride of 1 along H) is not the fast path.
    x = mixed_values(np.random.default_rng(40), (2, 3, 4, 6, 18), "float32")
    for window in (((1, 2, 2), (1, 2, 2), 0, 1, False), ((2, 2, 2), (2, 1, 2), 0, 1, True)):
        assert_same_as_native(x, 3, *window)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_channels_last_with_int64_indices_matches_torch(k):
    # Indices chosen in int32 over the channels (block of 4), widened after.
    rng = np.random.default_rng(50 + k)
    for channels in (2, 3, 4, 5, 13):
        x = mixed_values(rng, (2, channels, *(5,) * (k - 1), 7), "float32")
        last = np.ascontiguousarray(np.moveaxis(x, 1, -1))
        for ceil_mode in (False, True):
            want_values, want_indices = torch_pool(k, x, *fast_window(k, ceil_mode))
            with enable_x64(True):
                values, indices = POOL[k](last, *fast_window(k, ceil_mode),
                                          data_format=CHANNELS_LAST[k], index_dtype=jnp.int64)
            assert indices.dtype == jnp.int64
            np.testing.assert_array_equal(bits(values), bits(np.moveaxis(want_values, 1, -1)))
            np.testing.assert_array_equal(np.asarray(indices), np.moveaxis(want_indices, 1, -1))
