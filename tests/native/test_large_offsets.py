"""Large tensors: element offsets past 2**31 land in the right place.

The kernels compute offsets in 64 bits; these tests make them exceed 2**31 cheaply, with
int8 values and tiny x / indices: the forward scatters into two output planes of 1.2e9
positions each (offsets up to 2.4e9), the backward gathers from such planes, and with
int64 indices a single plane of more than 2**31 positions is addressed directly. Each
test holds one ~2.2-2.4 GB array at a time and reads it in place through numpy views; it
is skipped only when the machine does not have the memory available.
"""

from __future__ import annotations

import functools
import gc

import jax
import jax.numpy as jnp
import numpy as np
import psutil
import pytest
from out_of_range import RUNTIME_ERRORS, expected_message

import jax_unpool as ju
from jax_unpool._compat import enable_x64

pytestmark = pytest.mark.slow

GB = 2**30
HW = (30000, 40000)          # 1.2e9 positions per plane: two planes pass 2**31
HUGE_HW = (46341, 46341)     # 2_147_488_281 positions: one plane past 2**31 - 1
# Positions near the end of a plane, one row up, and the start.
FAR = [HW[0] * HW[1] - 1, HW[0] * HW[1] - 2, (HW[0] - 1) * HW[1] - 1, 0]


def require_memory(nbytes: int) -> None:
    """Skips when the machine lacks room for the test's arrays (plus a margin)."""
    need = 2 * nbytes + GB
    available = psutil.virtual_memory().available
    if available < need:
        pytest.skip(f"needs {need / GB:.1f} GiB of available memory, "
                    f"this machine has {available / GB:.1f} GiB")


@pytest.fixture(autouse=True)
def _free_memory():
    yield
    gc.collect()  # drop this test's multi-GB arrays before the next one allocates


def far_values(out, planes: np.ndarray, channels_last: bool) -> np.ndarray:
    """out's values at positions planes[c] of each plane c (N = 1). np.asarray of a CPU
    array is a view, so this and np.count_nonzero read `out` in place (XLA's reductions
    would materialise a 4-byte copy of every element)."""
    a, c = np.asarray(out), np.arange(planes.shape[0])[:, None]
    if channels_last:
        return a.reshape(-1, a.shape[-1])[planes, c]
    return a.reshape(a.shape[1], -1)[c, planes]


def in_layout(per_plane: np.ndarray, channels_last: bool) -> np.ndarray:
    """(C, 4) values per plane as a (1, C, 1, 4) / (1, 1, 4, C) array."""
    c, k = per_plane.shape
    return per_plane.T.reshape(1, 1, k, c) if channels_last else per_plane.reshape(1, c, 1, k)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def grad_planes(channels: int, hw: tuple[int, int], channels_last: bool):
    """A (1, C, H, W) / (1, H, W, C) int8 array whose every value is pattern(c, h*W + w):
    any position's expected value is known without reading the array."""
    shape = (1, *hw, channels) if channels_last else (1, channels, *hw)
    axes = (3, 1, 2) if channels_last else (1, 2, 3)
    c, h, w = (jax.lax.broadcasted_iota(jnp.int32, shape, d) for d in axes)
    return ((3 * h + 5 * w + 7 * c) & 127).astype(jnp.int8)


def pattern(c: int, flat: int, width: int) -> int:
    h, w = divmod(flat, width)
    return (3 * h + 5 * w + 7 * c) & 127


@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "NHWC"])
def test_forward_writes_past_2_31_elements(channels_last):
    require_memory(2 * HW[0] * HW[1])
    planes = np.array([FAR, FAR[::-1]], np.int32)                 # (C=2, 4 positions)
    x = np.array([[11, 22, 33, 44], [-55, -66, -77, -88]], np.int8)
    fmt = "NHWC" if channels_last else "NCHW"
    out = ju.max_unpool2d(in_layout(x, channels_last), in_layout(planes, channels_last),
                          output_size=HW, data_format=fmt)
    assert out.shape == ((1, *HW, 2) if channels_last else (1, 2, *HW))
    # plane c holds x[c] at its indices: plane 1's last positions are offsets ~2.4e9
    np.testing.assert_array_equal(far_values(out, planes, channels_last), x)
    assert np.count_nonzero(np.asarray(out)) == 8  # everything else is zero
    del out


@pytest.mark.parametrize("channels_last", [False, True], ids=["NCHW", "NHWC"])
def test_backward_reads_past_2_31_elements(channels_last):
    require_memory(2 * HW[0] * HW[1])
    grad = grad_planes(2, HW, channels_last)
    planes = np.array([FAR, FAR[::-1]], np.int32)
    idx = in_layout(planes, channels_last)
    x = jax.ShapeDtypeStruct(idx.shape, jnp.int8)
    fmt = "NHWC" if channels_last else "NCHW"
    out = np.asarray(ju.max_unpool2d_backward(grad, x, idx, HW, data_format=fmt))
    del grad
    got = out.reshape(4, 2).T if channels_last else out.reshape(2, 4)
    want = [[pattern(c, int(i), HW[1]) for i in planes[c]] for c in range(2)]
    np.testing.assert_array_equal(got, np.array(want, np.int8))


def test_int32_indices_reject_a_plane_past_int32_at_trace_time():
    # No memory is needed: the check runs in abstract evaluation.
    x = jax.ShapeDtypeStruct((1, 1, 1, 4), jnp.int8)
    idx = jax.ShapeDtypeStruct((1, 1, 1, 4), jnp.int32)
    grad = jax.ShapeDtypeStruct((1, 1, *HUGE_HW), jnp.int8)
    plane = HUGE_HW[0] * HUGE_HW[1]
    with pytest.raises(ValueError, match=rf"max_unpool2d: an output plane of 46341x46341 = "
                                         rf"{plane} positions cannot be addressed by int32"):
        jax.eval_shape(lambda x, i: ju.max_unpool2d(x, i, output_size=HUGE_HW), x, idx)
    with pytest.raises(ValueError, match=r"max_unpool2d_backward: an output plane of "
                                         r"46341x46341 .* cannot be addressed by int32"):
        jax.eval_shape(lambda g, i: ju.max_unpool2d_backward(g, x, i, HUGE_HW), grad, idx)


HUGE_FAR = [HUGE_HW[0] * HUGE_HW[1] - 1, HUGE_HW[0] * HUGE_HW[1] - 2, 2**31 + 7, 2**31 - 1]


def test_int64_indices_scatter_into_a_plane_past_int32():
    require_memory(HUGE_HW[0] * HUGE_HW[1])
    x = np.array([1, 2, 3, 4], np.int8).reshape(1, 1, 1, 4)
    with enable_x64(True):
        idx = np.array(HUGE_FAR, np.int64).reshape(1, 1, 1, 4)
        out = ju.max_unpool2d(x, idx, output_size=HUGE_HW)
    np.testing.assert_array_equal(far_values(out, np.array([HUGE_FAR]), False), x.reshape(1, 4))
    assert np.count_nonzero(np.asarray(out)) == 4
    del out


def test_int64_indices_gather_from_a_plane_past_int32():
    require_memory(HUGE_HW[0] * HUGE_HW[1])
    with enable_x64(True):
        grad = grad_planes(1, HUGE_HW, False)
        idx = np.array(HUGE_FAR, np.int64).reshape(1, 1, 1, 4)
        x = jax.ShapeDtypeStruct((1, 1, 1, 4), jnp.int8)
        out = np.asarray(ju.max_unpool2d_backward(grad, x, idx, HUGE_HW))
        del grad
    want = [pattern(0, i, HUGE_HW[1]) for i in HUGE_FAR]
    np.testing.assert_array_equal(out.reshape(-1), np.array(want, np.int8))


@pytest.mark.parametrize("bad", [HUGE_HW[0] * HUGE_HW[1], -1], ids=["one_past_end", "negative"])
def test_int64_index_out_of_a_plane_past_int32_is_reported(bad):
    require_memory(HUGE_HW[0] * HUGE_HW[1])
    x = np.array([1, 2, 3, 4], np.int8).reshape(1, 1, 1, 4)
    with enable_x64(True):
        idx = np.array([0, 2**31 + 1, bad, 5], np.int64).reshape(1, 1, 1, 4)
        with pytest.raises(RUNTIME_ERRORS) as e:
            jax.block_until_ready(ju.max_unpool2d(x, idx, output_size=HUGE_HW))
    assert str(e.value) == expected_message("max_unpool2d", idx, HUGE_HW, False)


HUGE_DHW = (2, 32802, 32802)  # 2_151_942_408 positions: one 3-D plane past 2**31 - 1


def test_int64_indices_of_a_pool_over_a_plane_past_int32():
    # The CPU pool counts indices in int32 wherever a plane's positions fit; here they do
    # not. Maxima planted past 2**31 (in slice 1, and the plane's last position) and near
    # slice 0's end, which slice 1's zeros must not replace; every other window is zeros
    # and reports its first tap.
    d, h, w = HUGE_DHW
    positions = d * h * w
    # x and the int64 indices of `positions` bytes each, the values an eighth: twice this
    require_memory(positions + positions // 16)
    planted = np.array([2**31 + 7, positions - 1, h * w - 3], np.int64)
    coords = np.unravel_index(planted, HUGE_DHW)
    with enable_x64(True):
        x = jax.jit(lambda: jnp.zeros((1, 1, *HUGE_DHW), jnp.int8)
                    .at[(0, 0, *coords)].set(jnp.array([1, 2, 3], jnp.int8)))()
        values, indices = ju.max_pool3d_with_indices(x, 2, index_dtype=jnp.int64)
        del x
    idx = np.asarray(indices).reshape(h // 2, w // 2)  # one window slice: D = 2
    rows, cols = coords[1] // 2, coords[2] // 2
    np.testing.assert_array_equal(idx[rows, cols], planted)
    np.testing.assert_array_equal(np.asarray(values).reshape(h // 2, w // 2)[rows, cols],
                                  [1, 2, 3])
    assert np.count_nonzero(np.asarray(values)) == 3
    for row in rows:  # whole rows, windows of zeros around the planted ones
        want = 2 * row * w + 2 * np.arange(w // 2, dtype=np.int64)
        hit = cols[rows == row]
        want[hit] = planted[rows == row]
        np.testing.assert_array_equal(idx[row], want)
    del values, indices
