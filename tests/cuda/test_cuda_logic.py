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

import zlib

import emulation as emu
import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from dtypes import bits

import jax_unpool as ju
from jax_unpool._compat import enable_x64
from jax_unpool.backends import cuda

FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
LAYOUTS = [(k, last) for k in (1, 2, 3) for last in (False, True)]
FLOAT8 = [d for d in ("float8_e5m2", "float8_e4m3", "float8_e3m4", "float8_e4m3fn",
                      "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz",
                      "float8_e8m0fnu") if hasattr(jnp, d)]
# Every width the unpool kernels move: 1 (with its workspace), 2 (in place for even
# planes, else in the workspace), 4 and 8 (in place).
UNPOOL_DTYPES = ["bool", "int8", "uint8", "float8_e4m3fn", "float16", "bfloat16", "int16",
                 "float32", "int32", "uint32", "float64", "int64", "uint64"]
POOL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "float16", "bfloat16", "float32", "float64", *FLOAT8]
KINDS = ["pool", "in_box", "anywhere", "no_hint"]


def seeded(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def layout(n, c, spatial, last: bool) -> tuple[int, ...]:
    """(n, c, *spatial) or (n, *spatial, c); without n when n is None (unbatched)."""
    lead = () if n is None else (n,)
    return (*lead, *spatial, c) if last else (*lead, c, *spatial)


def random_values(rng, shape, dtype: str) -> np.ndarray:
    """Any bit pattern (NaN payloads, -0.0: the unpool ops move bits); bools 0 or 1."""
    if dtype == "bool":
        return rng.random(shape) > 0.5
    dt = np.dtype(jnp.dtype(dtype))
    raw = rng.integers(0, 256, size=(*shape, dt.itemsize), dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def clipped_boxes(in_spatial, out_spatial, window):
    """Per axis, for each input coordinate q, its box [lo, hi) clipped to the output."""
    extent, stride, padding = window
    boxes = []
    for a in range(len(in_spatial)):
        start = np.arange(in_spatial[a]) * stride[a] - padding[a]
        boxes.append((np.maximum(start, 0), np.minimum(start + extent[a], out_spatial[a])))
    return boxes


def indices_in_boxes(rng, lead, in_spatial, out_spatial, window):
    """For every input position of every plane, a random output position in its box;
    shape (*lead, *in_spatial) with lead = (n, c)."""
    coords = []
    for a, (lo, hi) in enumerate(clipped_boxes(in_spatial, out_spatial, window)):
        shape = [1] * len(in_spatial)
        shape[a] = in_spatial[a]
        lo, hi = lo.reshape(shape), hi.reshape(shape)
        u = rng.random((*lead, *in_spatial))
        coords.append(lo + np.floor(u * (hi - lo)).astype(np.int64))
    return np.ravel_multi_index(coords, out_spatial)


def to_layout(a: np.ndarray, k: int, last: bool) -> np.ndarray:
    """(n, c, *spatial) -> the layout's order."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if last else a


def random_window(rng, k: int):
    extent = rng.integers(1, 5, k)
    stride = rng.integers(1, 4, k)
    padding = np.array([rng.integers(0, e) for e in extent])
    return tuple(map(tuple, (extent.tolist(), stride.tolist(), padding.tolist())))


def forward_case(rng, k: int, last: bool, kind: str, dtype: str, index_dtype):
    """(x, indices, output spatial sizes, window hint) of one random forward call."""
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    while True:
        if kind == "pool":  # a CPU pool's indices, unpooled back into its input
            kernel = rng.integers(1, 4, k)
            stride = rng.integers(1, 4, k)
            padding = np.array([rng.integers(0, kk // 2 + 1) for kk in kernel])
            dilation = rng.integers(1, 3, k)
            ceil_mode = bool(rng.random() < 0.5)
            in_spatial = tuple(rng.integers(1, 9, k).tolist())
            sizes = [oracle.pool_output_size(*v, ceil_mode)
                     for v in zip(in_spatial, kernel, stride, padding, dilation)]
            if min(sizes) < 1:
                continue
            x = rng.integers(-2, 3, (n, c, *in_spatial)).astype(np.float32)  # ties
            pool = getattr(ju, f"max_pool{k}d_with_indices")
            _, idx = pool(x, tuple(kernel.tolist()), tuple(stride.tolist()),
                          tuple(padding.tolist()), tuple(dilation.tolist()), ceil_mode)
            idx = np.asarray(idx)
            if idx.max() >= np.prod(in_spatial):  # PyTorch's index past a padding-only window
                continue
            extent = dilation * (kernel - 1) + 1
            window = (tuple(extent.tolist()), tuple(stride.tolist()), tuple(padding.tolist()))
            out_spatial, spatial = in_spatial, tuple(sizes)
        else:
            spatial = tuple(rng.integers(1, 6, k).tolist())
            if kind == "no_hint" and rng.random() < 0.7:  # sizes from which the hint is inferred
                scale = tuple(rng.integers(1, 4, k).tolist())
                out_spatial = tuple(s * m for s, m in zip(spatial, scale))
                window = (scale, scale, (0,) * k)
            else:
                window = random_window(rng, k)
                # every box keeps a position in the output
                out_spatial = tuple(int(max(1, (s - 1) * st - p + 1) + rng.integers(0, e + st))
                                    for s, (e, st, p) in zip(spatial, zip(*window)))
            if kind == "anywhere" or (kind == "no_hint" and rng.random() < 0.5):
                plane = int(np.prod(out_spatial))
                pool_of_positions = rng.integers(0, plane, max(1, plane // 3))
                idx = rng.choice(pool_of_positions, (n, c, *spatial))  # many duplicates
            else:
                idx = indices_in_boxes(rng, (n, c), spatial, out_spatial, window)
            if kind == "no_hint":
                window = None
        values = random_values(rng, (n, c, *spatial), dtype)
        return (to_layout(values, k, last), to_layout(idx.astype(index_dtype), k, last),
                out_spatial, window)


def cpu_unpool(x, idx, out_spatial, k: int, last: bool) -> np.ndarray:
    with enable_x64():
        unpool = getattr(ju, f"max_unpool{k}d")
        return np.asarray(unpool(jnp.asarray(x), jnp.asarray(idx), output_size=out_spatial,
                                 data_format=FORMATS[k][last]))


def out_shape_of(x: np.ndarray, out_spatial, k: int, last: bool) -> tuple[int, ...]:
    s = x.ndim - k - (1 if last else 0)
    return (*x.shape[:s], *out_spatial, *x.shape[s + k:])


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
    hint = ((2, 2), (2, 2), (0, 0))
    cases = [(tiled, (8, 8), hint, emu.TILED),
             (tiled, (8, 8), None, emu.TILED),  # the hint inferred from the sizes
             (outside, (8, 8), hint, emu.TILED_THEN_GENERAL),
             (odd, (9, 9), hint, emu.WINDOWED),  # a row and a column that no box covers
             (overlapping, (9, 9), ((3, 3), (2, 2), (0, 0)), emu.WINDOWED),
             (outside, (9, 9), hint, emu.WINDOWED_THEN_GENERAL),
             (odd, (9, 9), None, emu.GENERAL)]  # 9 is no multiple of 4: no hint inferred
    paths = []
    for idx, out_spatial, window, _ in cases:
        out, taken = emulation.forward(x, idx, (2, 3, *out_spatial), window=window)
        np.testing.assert_array_equal(out, cpu_unpool(x, idx, out_spatial, 2, False))
        paths.append(taken)
    assert paths == [case[-1] for case in cases]


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
        n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
        spatial = tuple(rng.integers(1, 5, k).tolist())
        out_spatial = tuple(rng.integers(1, 9, k).tolist())
        grad = to_layout(random_values(rng, (n, c, *out_spatial), dtype), k, last)
        idx = to_layout(rng.integers(0, np.prod(out_spatial), (n, c, *spatial))
                        .astype(index_dtype), k, last)
        out = emulation.backward(grad, idx, channels_last=last, k=k, seed=seed)
        with enable_x64():
            backward = getattr(ju, f"max_unpool{k}d_backward")
            expected = backward(jnp.asarray(grad), jnp.zeros(idx.shape, grad.dtype),
                                jnp.asarray(idx), out_spatial, data_format=FORMATS[k][last])
        np.testing.assert_array_equal(bits(out), bits(expected), err_msg=f"k={k} last={last}")


# --------------------------------------------------------------------------------------
# The pool
# --------------------------------------------------------------------------------------

def pool_values(rng, shape, dtype: str) -> np.ndarray:
    """Values full of ties and the edge cases of each dtype's order."""
    dt = np.dtype(jnp.dtype(dtype))
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype in FLOAT8:  # every code, NaNs and both zeros included
        return rng.integers(0, 256, shape, dtype=np.uint8).view(dt)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        specials = np.array([info.min, info.max, 0, 1, info.min + 1], dtype=dt)
    else:
        info = jnp.finfo(dt)
        tiny = float(info.smallest_subnormal) if hasattr(info, "smallest_subnormal") else 0.0
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, tiny, -tiny,
                             float(info.max), float(info.min)]).astype(dt)
    out = rng.choice(specials, shape)
    small = rng.integers(-3, 4, shape).astype(dt)
    return np.where(rng.random(shape) < 0.5, out, small)


@pytest.mark.parametrize("dtype", POOL_DTYPES)
def test_pool_equals_the_cpu_kernel(emulation, dtype):
    rng = seeded("pool", dtype)
    seed = 0
    for k, last in LAYOUTS:
        for index_dtype in (np.int32, np.int64):
            while True:
                kernel = rng.integers(1, 4, k)
                stride = rng.integers(1, 4, k)
                padding = np.array([rng.integers(0, kk // 2 + 1) for kk in kernel])
                dilation = rng.integers(1, 3, k)
                ceil_mode = bool(rng.random() < 0.5)
                in_spatial = tuple(rng.integers(1, 8, k).tolist())
                if min(oracle.pool_output_size(*v, ceil_mode) for v in
                       zip(in_spatial, kernel, stride, padding, dilation)) >= 1:
                    break
            n = None if rng.random() < 0.25 else int(rng.integers(1, 3))
            x = pool_values(rng, layout(n, int(rng.integers(1, 4)), in_spatial, last), dtype)
            window = [tuple(v.tolist()) for v in (kernel, stride, padding, dilation)]
            seed += 1
            values, indices = emulation.pool(x, *window, ceil_mode, channels_last=last,
                                             index_dtype=index_dtype, seed=seed)
            with enable_x64():
                pool = getattr(ju, f"max_pool{k}d_with_indices")
                expected = pool(jnp.asarray(x), *window, ceil_mode, data_format=FORMATS[k][last],
                                index_dtype=index_dtype)
            case = f"k={k} last={last} window={window} ceil_mode={ceil_mode}"
            np.testing.assert_array_equal(bits(values), bits(expected[0]), err_msg=case)
            np.testing.assert_array_equal(indices, expected[1], err_msg=case)


def test_pool_attributes_are_checked_as_on_the_cpu(emulation):
    x = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(emu.HandlerError) as info:
        emulation.pool(x, (2, 2), (0, 2), (0, 0), (1, 1), out_shape=(1, 1, 2, 2))
    assert info.value.code == emu.INVALID_ARGUMENT
    assert info.value.message == ("max_pool2d_with_indices: stride must be positive (and at "
                                  "most 2^31), got (0, 2)")


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
    with enable_x64():
        if op == "forward":
            x = to_layout(rng.standard_normal((2, 3, *spatial)).astype(np.float32), k, last)
            fn = getattr(ju, f"max_unpool{k}d")
            expected = cpu_error(lambda: fn(x, idx, output_size=out_spatial, data_format=fmt))
            call = lambda: emulation.forward(x, idx, out_shape_of(x, out_spatial, k, last),  # noqa: E731
                                             channels_last=last, k=k, checked=True)
        else:
            grad = to_layout(rng.standard_normal((2, 3, *out_spatial)).astype(np.float32), k,
                             last)
            fn = getattr(ju, f"max_unpool{k}d_backward")
            expected = cpu_error(lambda: fn(grad, np.zeros(idx.shape, np.float32), idx,
                                            out_spatial, data_format=fmt))
            call = lambda: emulation.backward(grad, idx, channels_last=last, k=k, checked=True)  # noqa: E731
    with pytest.raises(emu.HandlerError) as info:
        call()
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
        "are [0, 0) for an output plane of 0x4 (")


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
