"""The CUDA kernels' logic without a GPU: the handlers' bodies run in the host emulation
(emulation.cc: their checks, launch plans and per-element code, the grid run as loops in a
shuffled order) and their results must equal the CPU kernels' (jax_unpool on the CPU)
bit for bit, on random cases of every rank, layout, value width and index dtype:
indices from real pools (overlapping windows, dilation, ceil_mode, padding), indices
anywhere in their box, duplicated indices anywhere (the windowed pass's fallback), no
window hint; the pool on every dtype it orders, with NaN, infinities, signed zeros,
subnormals and ties. Indices outside the plane follow their own oracles (numpy loops,
the CPU's error messages)."""

from __future__ import annotations

import emulation as emu
import jax
import numpy as np
import pytest
from cases import (
    FORMATS,
    KINDS,
    LAYOUTS,
    POOL_DTYPES,
    UNPOOL_DTYPES,
    backward_case,
    cpu_backward,
    cpu_pool,
    cpu_unpool,
    forward_case,
    indices_in_boxes,
    layout,
    out_shape_of,
    pool_geometry,
    pool_values,
    random_values,
    seeded,
    to_layout,
)
from dtypes import bits
from out_of_range import POOL_HINT

import jax_unpool as ju
from jax_unpool import _geometry
from jax_unpool._compat import enable_x64
from jax_unpool.backends import cuda

pytestmark = pytest.mark.slow

# --------------------------------------------------------------------------------------
# The forward: the windowed pass, its fallback, the general pass
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", UNPOOL_DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_forward_equals_the_cpu_kernel(emulation, kind, dtype):
    rng = seeded("forward", kind, dtype)
    for seed, (k, last) in enumerate(LAYOUTS):
        index_dtype = (np.int32, np.int64)[rng.integers(2)]
        x, idx, out_spatial, window = forward_case(rng, k, last, kind, dtype, index_dtype)
        out, _ = emulation.forward(x, idx, out_shape_of(x, out_spatial, k, last),
                                   channels_last=last, k=k, window=window, seed=seed)
        expected = cpu_unpool(x, idx, out_spatial, k, last)
        np.testing.assert_array_equal(bits(out), bits(expected),
                                      err_msg=f"k={k} last={last} window={window}")


def test_each_forward_path_is_taken_and_equals_the_cpu_kernel(emulation):
    rng = seeded("paths")
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    _, tiled = ju.max_pool2d_with_indices(rng.standard_normal((2, 3, 8, 8)), 2)
    _, odd = ju.max_pool2d_with_indices(rng.standard_normal((2, 3, 9, 9)), 2)
    _, overlapping = ju.max_pool2d_with_indices(rng.standard_normal((2, 3, 9, 9)), 3, 2)
    tiled, odd, overlapping = np.asarray(tiled), np.asarray(odd), np.asarray(overlapping)
    outside = tiled.copy()
    outside[1, 2, 3, 3] = 0  # far outside its box: the last position points at the first
    _, tiled3 = ju.max_pool2d_with_indices(rng.standard_normal((2, 3, 12, 12)), 3)
    tiled3 = np.asarray(tiled3)
    hint = ((2, 2), (2, 2), (0, 0))

    def lowered(out_size):  # the window the CUDA lowering passes for a call without a hint
        return _geometry.unpool_window((4, 4), out_size, None)

    assert lowered((8, 8)) == hint and lowered((9, 9)) is None
    cases = [(tiled, (8, 8), hint, False, emu.PLANE_TILED),  # channels first, 2x2 boxes
             (tiled, (8, 8), lowered((8, 8)), False, emu.PLANE_TILED),  # from the sizes
             (tiled, (8, 8), None, False, emu.GENERAL),  # no window: the handler infers none
             (outside, (8, 8), hint, False, emu.PLANE_TILED_THEN_GENERAL),
             (tiled3, (12, 12), lowered((12, 12)), False, emu.PLANE_TILED),  # 3x3 boxes
             (tiled, (8, 8), hint, True, emu.TILED),  # channels last
             (outside, (8, 8), hint, True, emu.TILED_THEN_GENERAL),
             (odd, (9, 9), hint, False, emu.WINDOWED),  # a row and a column that no box covers
             (overlapping, (9, 9), ((3, 3), (2, 2), (0, 0)), False, emu.WINDOWED),
             (outside, (9, 9), hint, False, emu.WINDOWED_THEN_GENERAL),
             (odd, (9, 9), lowered((9, 9)), False, emu.GENERAL)]  # 9 is no multiple of 4
    paths = []
    for idx, out_spatial, window, last, _ in cases:
        values, idx = to_layout(x, 2, last), to_layout(idx, 2, last)
        out, taken = emulation.forward(values, idx, out_shape_of(values, out_spatial, 2, last),
                                       channels_last=last, window=window)
        np.testing.assert_array_equal(out, cpu_unpool(values, idx, out_spatial, 2, last))
        paths.append(taken)
    assert paths == [case[-1] for case in cases]


@pytest.mark.parametrize("dtype", UNPOOL_DTYPES)
@pytest.mark.parametrize("size", [2, 3])
def test_the_compiled_tiled_boxes_equal_the_cpu_kernel(emulation, size, dtype):
    # PlaneTiledScatter (2x2 and 3x3 boxes, vector stores of 2x2 rows on the GPU) for every
    # value width, indices anywhere in their box or (one in three cases) some outside it.
    rng = seeded("plane tiled", size, dtype)
    for seed in range(6):
        n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
        spatial = tuple(rng.integers(1, 6, 2).tolist())
        out_spatial = (spatial[0] * size, spatial[1] * size)
        window = ((size, size), (size, size), (0, 0))
        idx = indices_in_boxes(rng, (n, c), spatial, out_spatial, window)
        if seed % 3 == 2:  # some indices anywhere: the general pass recomputes the result
            idx = np.where(rng.random(idx.shape) < 0.2,
                           rng.integers(0, out_spatial[0] * out_spatial[1], idx.shape), idx)
        x = random_values(rng, (n, c, *spatial), dtype)
        idx = idx.astype((np.int32, np.int64)[seed % 2])
        out, path = emulation.forward(x, idx, (n, c, *out_spatial), window=window, seed=seed)
        in_box = seed % 3 != 2  # else: some outside (by chance maybe none)
        assert path == emu.PLANE_TILED if in_box else path in (emu.PLANE_TILED,
                                                                emu.PLANE_TILED_THEN_GENERAL)
        np.testing.assert_array_equal(bits(out), bits(cpu_unpool(x, idx, out_spatial, 2, False)),
                                      err_msg=f"x={x.shape} seed={seed}")


def test_duplicates_anywhere_take_the_largest_input_position(emulation):
    # Independent of the CPU kernel: every position of a plane points at output 5, so the
    # last input position's value wins; the rest of the plane is 0.
    x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    idx = np.full((1, 1, 4, 4), 5, np.int32)
    for window in (((2, 2), (2, 2), (0, 0)), None):
        out, _ = emulation.forward(x, idx, (1, 1, 8, 8), window=window, seed=7)
        expected = np.zeros((1, 1, 8, 8), np.float32)
        expected[0, 0, 0, 5] = 16
        np.testing.assert_array_equal(out, expected)


# --------------------------------------------------------------------------------------
# The backward
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", UNPOOL_DTYPES)
def test_backward_equals_the_cpu_kernel(emulation, dtype):
    rng = seeded("backward", dtype)
    for seed, (k, last) in enumerate(LAYOUTS):
        index_dtype = (np.int32, np.int64)[rng.integers(2)]
        grad, idx, out_spatial = backward_case(rng, k, last, dtype, index_dtype)
        out = emulation.backward(grad, idx, channels_last=last, k=k, seed=seed)
        expected = cpu_backward(grad, idx, out_spatial, k, last)
        np.testing.assert_array_equal(bits(out), bits(expected), err_msg=f"k={k} last={last}")


@pytest.mark.parametrize("last", [False, True])
def test_the_gather_covers_every_element_of_several_tiles(emulation, last):
    # 4 elements a thread, 256 apart, in tiles of 1024: 4845 elements are 4 full tiles and
    # a partial one, each element gathered once (numpy's take_along_axis as the oracle).
    rng = seeded("gather tiles", last)
    grad = rng.standard_normal((3, 5, 34, 38)).astype(np.float32)
    idx = rng.integers(0, 34 * 38, (3, 5, 17, 19)).astype(np.int32)
    expected = np.take_along_axis(grad.reshape(3, 5, -1), idx.reshape(3, 5, -1), axis=2)
    out = emulation.backward(to_layout(grad, 2, last), to_layout(idx, 2, last),
                             channels_last=last)
    np.testing.assert_array_equal(out, to_layout(expected.reshape(idx.shape), 2, last))


# --------------------------------------------------------------------------------------
# The pool
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", POOL_DTYPES)
def test_pool_equals_the_cpu_kernel(emulation, dtype):
    rng = seeded("pool", dtype)
    for seed, ((k, last), index_dtype) in enumerate(
            (layout_, i) for layout_ in LAYOUTS for i in (np.int32, np.int64)):
        window, ceil_mode, in_spatial = pool_geometry(rng, k)
        n = None if rng.random() < 0.25 else int(rng.integers(1, 3))
        x = pool_values(rng, layout(n, int(rng.integers(1, 4)), in_spatial, last), dtype)
        values, indices = emulation.pool(x, *window, ceil_mode, channels_last=last,
                                         index_dtype=index_dtype, seed=seed)
        expected = cpu_pool(x, window, ceil_mode, k, last, index_dtype)
        case = f"k={k} last={last} window={window} ceil_mode={ceil_mode}"
        np.testing.assert_array_equal(bits(values), bits(expected[0]), err_msg=case)
        np.testing.assert_array_equal(indices, expected[1], err_msg=case)


PLANE_DTYPES = ["float32", "float16", "bfloat16", "float64", "int8", "uint16", "int64",
                "float8_e4m3fn"]


@pytest.mark.parametrize("dtype", PLANE_DTYPES)
@pytest.mark.parametrize("size", [2, 3])
def test_the_compiled_2d_windows_equal_the_cpu_kernel(emulation, size, dtype):
    # The 2x2 and 3x3 channels-first kernels (PlanePoolWindow): interior and border windows,
    # strides, padding, ceil_mode windows, NaN and ties.
    rng = seeded("plane", size, dtype)
    for seed in range(12):
        stride = tuple(rng.integers(1, 4, 2).tolist())
        padding = tuple(rng.integers(0, size // 2 + 1, 2).tolist())
        dilation = (1, 1)
        ceil_mode = bool(seed % 2)
        window = ((size, size), stride, padding, dilation)
        in_spatial = tuple(rng.integers(size, 12, 2).tolist())
        n = None if seed % 4 == 3 else int(rng.integers(1, 3))
        x = pool_values(rng, layout(n, int(rng.integers(1, 4)), in_spatial, False), dtype)
        index_dtype = (np.int32, np.int64)[seed % 2]
        path = []
        values, indices = emulation.pool(x, *window, ceil_mode, index_dtype=index_dtype,
                                         seed=seed, path=path)
        expected = cpu_pool(x, window, ceil_mode, 2, False, index_dtype)
        case = f"window={window} ceil_mode={ceil_mode} x={x.shape}"
        assert path == [emu.PLANE_2X2 if size == 2 else emu.PLANE_3X3], case
        np.testing.assert_array_equal(bits(values), bits(expected[0]), err_msg=case)
        np.testing.assert_array_equal(indices, expected[1], err_msg=case)


def test_other_windows_take_the_general_kernel(emulation):
    # What the compiled kernels do not serve: channels last, 1-D, 3-D, other window sizes,
    # dilation.
    rng = seeded("general pool")
    cases = [((2, 2), True, (1, 8, 8, 3), 1), ((3, 3), True, (1, 8, 8, 3), 1),
             ((2,), False, (1, 3, 8), 1), ((2, 3), False, (1, 3, 8, 8), 1),
             ((2, 2, 2), False, (1, 3, 4, 4, 4), 1), ((2, 2), False, (1, 3, 8, 8), 2)]
    for kernel, last, shape, dilation in cases:
        k = len(kernel)
        x = rng.standard_normal(shape).astype(np.float32)
        window = (kernel, kernel, (0,) * k, (dilation,) * k)
        path = []
        values, indices = emulation.pool(x, *window, channels_last=last, path=path)
        expected = cpu_pool(x, window, False, k, last, np.int32)
        assert path == [emu.WINDOWS_32], (kernel, last)
        np.testing.assert_array_equal(values, expected[0])
        np.testing.assert_array_equal(indices, expected[1])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_32_bit_window_arithmetic_near_its_limit(emulation, k):
    # A window of 2^30 - 1 taps whose padding covers a small input: its coordinates reach
    # 1.5 * 2^30 and still fit in int32, so the kernel computes in 32 bits (no 64-bit
    # division), with the CPU kernel's results.
    rng = seeded("near the limit", k)
    x = rng.standard_normal((1, 2, *(5,) * k)).astype(np.float32)
    kernel, padding, dilation = (2**30 - 1,) * k, (2**29 - 1,) * k, (1,) * k
    window = (kernel, (1,) * k, padding, dilation)
    path = []
    values, indices = emulation.pool(x, *window, index_dtype=np.int64, path=path)
    expected = cpu_pool(x, window, False, k, False, np.int64)
    assert path == [emu.WINDOWS_32]
    np.testing.assert_array_equal(values, expected[0])
    np.testing.assert_array_equal(indices, expected[1])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_huge_kernel_costs_its_taps_inside_the_input(emulation, k):
    # Each border window visits only its taps inside the input (issue 31 item 4 on the
    # GPU): a kernel of 2^31 - 1 whose padding covers a 5^k input is 5^k taps an output,
    # where testing every kernel tap would not finish. Results as the CPU kernel's.
    rng = seeded("huge kernel", "float32")
    x = rng.standard_normal((1, 2, *(5,) * k)).astype(np.float32)
    window = ((2**31 - 1,) * k, (1,) * k, (2**30 - 1,) * k, (1,) * k)
    path = []
    values, indices = emulation.pool(x, *window, index_dtype=np.int64, path=path)
    expected = cpu_pool(x, window, False, k, False, np.int64)
    assert path == [emu.WINDOWS_64]  # its coordinates pass 2^31: 64-bit arithmetic
    np.testing.assert_array_equal(values, expected[0])
    np.testing.assert_array_equal(indices, expected[1])
    assert values.shape == (1, 2, *(5,) * k)


def test_pool_attributes_are_checked_as_on_the_cpu(emulation):
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(emu.HandlerError) as info:
        emulation.pool(x, (2, 2), (0, 2), (0, 0), (1, 1), out_shape=(1, 1, 2, 2))
    assert info.value.code == emu.INVALID_ARGUMENT
    assert info.value.message == ("max_pool2d_with_indices: stride must be positive and at "
                                  "most 2147483647, got (0, 2)")


# --------------------------------------------------------------------------------------
# Indices outside the plane: dropped / read as 0 by default, the CPU's error when checked
# --------------------------------------------------------------------------------------

def bad_indices(rng, shape, plane: int, index_dtype=np.int32) -> np.ndarray:
    idx = rng.integers(0, plane, shape)
    bad = rng.random(shape) < 0.2
    return np.where(bad, rng.choice([-1, plane, plane + 7, -plane], shape), idx).astype(index_dtype)


@pytest.mark.parametrize("k,last", LAYOUTS)
def test_forward_drops_indices_outside_the_plane(emulation, k, last):
    rng = seeded("drop", k, last)
    spatial, out_spatial = (3,) * k, (6,) * k
    x = rng.standard_normal((2, 3, *spatial)).astype(np.float32)
    idx = bad_indices(rng, x.shape, 6**k)
    expected = np.zeros((2, 3, 6**k), np.float32)
    for n in range(2):
        for c in range(3):
            for i, v in enumerate(idx[n, c].reshape(-1)):  # flat order: the last one wins
                if 0 <= v < 6**k:
                    expected[n, c, v] = x[n, c].reshape(-1)[i]
    expected = to_layout(expected.reshape(2, 3, *out_spatial), k, last)
    for window in (((2,) * k, (2,) * k, (0,) * k), None):
        out, _ = emulation.forward(to_layout(x, k, last), to_layout(idx, k, last),
                                   expected.shape, channels_last=last, k=k, window=window)
        np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("k,last", LAYOUTS)
def test_backward_reads_zero_outside_the_plane(emulation, k, last):
    rng = seeded("zero", k, last)
    grad = rng.standard_normal((2, 3, *(5,) * k)).astype(np.float32)
    idx = bad_indices(rng, (2, 3, *(3,) * k), 5**k)
    flat = grad.reshape(2, 3, -1)
    inside = (idx >= 0) & (idx < 5**k)
    gathered = np.take_along_axis(flat, np.where(inside, idx, 0).reshape(2, 3, -1), axis=2)
    expected = np.where(inside, gathered.reshape(idx.shape), 0).astype(np.float32)
    out = emulation.backward(to_layout(grad, k, last), to_layout(idx, k, last),
                             channels_last=last, k=k)
    np.testing.assert_array_equal(out, to_layout(expected, k, last))


def cpu_error(call) -> str:
    with pytest.raises(jax.errors.JaxRuntimeError) as info:
        np.asarray(call())
    return str(info.value)


@pytest.mark.parametrize("op", ["forward", "backward"])
@pytest.mark.parametrize("k,last", LAYOUTS)
def test_checked_calls_fail_with_the_cpu_kernels_message(emulation, op, k, last):
    rng = seeded("checked", op, k, last)
    spatial, out_spatial = (3,) * k, (4,) * k
    idx = to_layout(bad_indices(rng, (2, 3, *spatial), 4**k, np.int64), k, last)
    fmt = FORMATS[k][last]
    with enable_x64(), pytest.raises(emu.HandlerError) as info:
        if op == "forward":
            x = to_layout(rng.standard_normal((2, 3, *spatial)).astype(np.float32), k, last)
            unpool = getattr(ju, f"max_unpool{k}d")
            expected = cpu_error(lambda: unpool(x, idx, output_size=out_spatial,
                                                data_format=fmt))
            emulation.forward(x, idx, out_shape_of(x, out_spatial, k, last), channels_last=last,
                              k=k, checked=True)
        else:
            grad = to_layout(rng.standard_normal((2, 3, *out_spatial)).astype(np.float32), k,
                             last)
            backward = getattr(ju, f"max_unpool{k}d_backward")
            expected = cpu_error(lambda: backward(grad, np.zeros(idx.shape, np.float32), idx,
                                                  out_spatial, data_format=fmt))
            emulation.backward(grad, idx, channels_last=last, k=k, checked=True)
    assert info.value.code == emu.OUT_OF_RANGE
    assert info.value.message in expected


def test_checked_calls_with_good_indices_equal_the_unchecked_ones(emulation):
    rng = seeded("checked-good")
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    idx = rng.integers(0, 64, x.shape).astype(np.int32)
    out, _ = emulation.forward(x, idx, (2, 3, 8, 8), checked=True)
    np.testing.assert_array_equal(out, cpu_unpool(x, idx, (8, 8), 2, False))
    grad = rng.standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.testing.assert_array_equal(emulation.backward(grad, idx, checked=True),
                                  emulation.backward(grad, idx))


# --------------------------------------------------------------------------------------
# Empty calls and the handlers' own checks
# --------------------------------------------------------------------------------------

def test_an_empty_input_plane_gives_zeros(emulation):
    x = np.zeros((2, 3, 0, 4), np.float32)
    out, path = emulation.forward(x, x.astype(np.int32), (2, 3, 4, 4))
    np.testing.assert_array_equal(out, np.zeros((2, 3, 4, 4), np.float32))
    assert path == emu.NOTHING


def test_an_empty_output_plane_drops_every_index_unless_checked(emulation):
    # (XLA replaces an op of empty result by a constant: through jax no handler sees this.)
    x = np.ones((1, 2, 2, 2), np.float32)
    idx = np.full(x.shape, 3, np.int32)
    out, _ = emulation.forward(x, idx, (1, 2, 0, 4))
    assert out.shape == (1, 2, 0, 4)
    with pytest.raises(emu.HandlerError) as info:
        emulation.forward(x, idx, (1, 2, 0, 4), checked=True)
    assert info.value.message.startswith(
        "max_unpool2d: index 3 at (n=0, c=0, i=0) of indices is out of range: valid indices "
        "are [0, 0) for an output plane of 0x4" + POOL_HINT + " (")


def test_window_attributes_of_the_wrong_length_are_refused(emulation):
    x = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(emu.HandlerError) as info:
        emulation.forward(x, x.astype(np.int32), (1, 1, 4, 4), window=((2,), (2,), (0,)))
    assert info.value.code == emu.INVALID_ARGUMENT
    assert info.value.message == (
        "max_unpool2d: window_extent, window_stride and window_padding must be empty or have 2 "
        "entries each, got window_extent=(2,), window_stride=(2,), window_padding=(0,)")


def test_a_window_of_zero_stride_is_refused(emulation):
    x = np.zeros((1, 1, 2, 2), np.float32)
    with pytest.raises(emu.HandlerError) as info:
        emulation.forward(x, x.astype(np.int32), (1, 1, 4, 4), window=((2, 2), (2, 0), (0, 0)))
    assert info.value.message == (
        "max_unpool2d: the window must have extent and stride in [1, 2^31] and padding in "
        "[0, 2^31], got window_extent=(2, 2), window_stride=(2, 0), window_padding=(0, 0)")


def test_a_workspace_too_small_is_refused(emulation):
    x = np.zeros((1, 1, 2, 2), np.int8)  # 1-byte values: positions in the workspace
    with pytest.raises(emu.HandlerError) as info:
        emulation.forward(x, x.astype(np.int32), (1, 1, 4, 4), workspace_bytes=16)
    assert info.value.code == emu.INVALID_ARGUMENT
    assert info.value.message == ("max_unpool2d: workspace has shape (16,) (16 bytes) but this "
                                  "call needs at least 80 bytes")


def test_mismatched_buffers_are_refused_with_the_shared_message(emulation):
    x = np.zeros((1, 1, 2, 3), np.float32)
    with pytest.raises(emu.HandlerError) as info:
        emulation.forward(x, np.zeros((1, 1, 2, 2), np.int32), (1, 1, 4, 4))
    assert info.value.message == ("max_unpool2d: indices has shape (1, 1, 2, 2) but x has "
                                  "shape (1, 1, 2, 3); they must be equal")


# --------------------------------------------------------------------------------------
# 64-bit offsets (calls of 2**31 elements or more), forced on small inputs
# --------------------------------------------------------------------------------------

@pytest.fixture
def wide(emulation):
    emulation.wide_offsets(True)
    yield emulation
    emulation.wide_offsets(False)


@pytest.mark.parametrize("op", [*(f"forward-{kind}" for kind in KINDS), "backward", "pool"])
def test_64_bit_offsets_give_the_cpu_kernels_results(wide, op):
    rng = seeded("wide", op)
    for seed, (k, last) in enumerate(LAYOUTS):
        dtype = ("float32", "bfloat16", "int8")[seed % 3]
        index_dtype = (np.int32, np.int64)[seed % 2]
        if op == "backward":
            grad, idx, out_spatial = backward_case(rng, k, last, dtype, index_dtype)
            out = (wide.backward(grad, idx, channels_last=last, k=k, seed=seed),)
            expected = (cpu_backward(grad, idx, out_spatial, k, last),)
        elif op == "pool":
            window, ceil_mode, in_spatial = pool_geometry(rng, k)
            x = pool_values(rng, layout(2, 3, in_spatial, last), dtype)
            out = wide.pool(x, *window, ceil_mode, channels_last=last, index_dtype=index_dtype,
                            seed=seed)
            expected = cpu_pool(x, window, ceil_mode, k, last, index_dtype)
        else:
            kind = op.removeprefix("forward-")
            x, idx, out_spatial, window = forward_case(rng, k, last, kind, dtype, index_dtype)
            out = wide.forward(x, idx, out_shape_of(x, out_spatial, k, last),
                               channels_last=last, k=k, window=window, seed=seed)[:1]
            expected = (cpu_unpool(x, idx, out_spatial, k, last),)
        for a, b in zip(out, expected, strict=True):  # (result,) or (values, indices)
            np.testing.assert_array_equal(bits(a), bits(b), err_msg=f"k={k} last={last}")


# --------------------------------------------------------------------------------------
# Arithmetic the kernels rely on
# --------------------------------------------------------------------------------------

def test_magic_number_division_equals_division(emulation):
    assert emulation.divider_mismatches(seed=1, trials=200_000) == 0


@pytest.mark.parametrize("width", [1, 2, 4, 8])
def test_the_lowering_sizes_the_workspace_by_the_handlers_rule(emulation, width):
    for plane in (1, 2, 255, 256, 65535, 65536, 2**32 - 1, 2**32):
        for out_plane in (1, 2, 3, 4, 65536, 65537):
            assert cuda.position_bytes(width, plane, out_plane) == emulation.position_bytes(
                width, plane, out_plane), (plane, out_plane)
