"""The CPU kernels on window offsets (jax_unpool_max_unpool_window_v1 and its backward,
jax_unpool_window_offsets_v1) against numpy: offsets drawn at random over every tap
number, for windows that tile the input (their fast paths, ceil_mode windows past the
input and rows no window covers included) and any other (overlapping, padded, dilated,
windows of padding only), every rank, layout and value width. Each call equals numpy's
unpool and gather of the flat positions the offsets name -- decoded here by numpy, apart
from `_window.to_flat` -- or fails naming the first bad element in buffer order; so does
window_indices, the way back. Calls of several MB, which the kernels split across
threads, against the flat kernels on the same positions."""

from __future__ import annotations

import math
import re
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from dtypes import assert_bits_equal, needs_x64, random_values
from out_of_range import POSITIONS_NOTE, RUNTIME_ERRORS

import jax_unpool as ju
from jax_unpool._compat import enable_x64

POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
UNPOOL = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}
BACKWARD = {1: ju.max_unpool1d_backward, 2: ju.max_unpool2d_backward,
            3: ju.max_unpool3d_backward}
FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}

# (input size, kernel, stride, padding, dilation, ceil_mode), one entry per axis.
TILING = [
    ((8, 8), (2, 2), (2, 2), (0, 0), (1, 1), False),
    ((7, 9), (2, 2), (2, 2), (0, 0), (1, 1), True),  # the last windows reach past x
    ((7, 11), (3, 3), (3, 3), (0, 0), (1, 1), False),  # rows and columns no window covers
    ((10,), (3,), (3,), (0,), (1,), True),
    ((5, 4, 7), (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), True),
    ((6, 5, 4), (1, 2, 4), (1, 2, 4), (0, 0, 0), (1, 1, 1), False),
    ((6, 9), (1, 5), (1, 5), (0, 0), (1, 1), True),  # a width the kernel has no loop for
]
OTHER = [
    ((9, 8), (3, 3), (2, 2), (1, 1), (1, 1), False),  # overlapping, padded
    ((7, 9), (2, 3), (2, 1), (0, 1), (1, 1), True),
    ((11,), (3,), (1,), (1,), (2,), False),  # dilated
    ((1, 6), (2, 2), (1, 2), (1, 0), (2, 1), False),  # windows of padding only
    ((2,), (2,), (2,), (1,), (3,), True),  # a window of padding only past the row
    ((5, 6, 7), (3, 2, 3), (2, 2, 1), (1, 0, 1), (1, 1, 1), True),
]
GEOMETRIES = TILING + OTHER
IDS = [f"{'x'.join(map(str, g[0]))}-k{'x'.join(map(str, g[1]))}-s{'x'.join(map(str, g[2]))}"
       f"-p{''.join(map(str, g[3]))}-d{''.join(map(str, g[4]))}{'-ceil' if g[5] else ''}"
       for g in GEOMETRIES]
WIDTHS = ["uint8", "bfloat16", "float32", "float64"]  # every byte width


def decode(offsets, in_size, kernel, stride, padding, dilation, channels_last):
    """(flat, ok, named): the positions the offsets name (numpy_oracle.window_positions),
    whether each is one the unpools take (named, inside the plane), and whether named."""
    flat, named = oracle.window_positions(offsets, in_size, kernel, stride, padding, dilation,
                                          channels_last)
    return flat, named & (flat < math.prod(in_size)), named


def positions_note(k: int) -> str:
    flat = {1: "i = w", 2: "i = h * W + w", 3: "i = (d * H + h) * W + w"}[k]
    return POSITIONS_NOTE.replace("i = h * W + w", flat)


def first_bad_message(op, offsets, flat, ok, named, in_size, geometry, channels_last,
                      flat_error):
    """The message of the first bad element in buffer order, or None; `flat_error` is the
    message of the same call on the flat positions the offsets name."""
    bad = np.flatnonzero(~np.asarray(ok).reshape(-1))
    if bad.size == 0:
        return None
    at = int(bad[0])
    k = len(in_size)
    shape = np.shape(offsets) if np.ndim(offsets) == k + 2 else (1, *np.shape(offsets))
    coordinates = np.unravel_index(at, shape)
    n, c = coordinates[0], coordinates[-1 if channels_last else 1]
    spatial = coordinates[1:-1] if channels_last else coordinates[2:]
    i = int(np.ravel_multi_index(spatial, shape[1:-1] if channels_last else shape[2:]))
    sizes = "x".join(map(str, in_size))
    what = {1: "row", 2: "plane", 3: "volume"}[k]
    if not np.asarray(named).reshape(-1)[at]:
        _, kernel, stride, padding, dilation, _ = geometry
        window = (f"(kernel_size={kernel}, stride={stride}, padding={padding}, "
                  f"dilation={dilation})")
        return (f"OUT_OF_RANGE: {op}: window offset {int(np.asarray(offsets).reshape(-1)[at])}"
                f" at (n={n}, c={c}, i={i}) of indices is out of range: valid offsets are "
                f"[0, {math.prod(kernel)}), the taps of its window {window} that lie inside "
                f"the output {what} of {sizes} ({positions_note(k)})")
    # A window of padding only names PyTorch's initial index past the plane: the message is
    # the one the same call on flat indices gives (the first bad element is the same).
    return flat_error


def _pool(x, geometry, channels_last):
    in_size, kernel, stride, padding, dilation, ceil_mode = geometry
    k = len(in_size)
    return POOL[k](x, kernel, stride, padding, dilation, ceil_mode,
                   data_format=FORMATS[k][channels_last], index_format="window")


def _outcome(f):
    try:
        return np.asarray(jax.block_until_ready(f())), None
    except RUNTIME_ERRORS as e:
        return None, str(e).split("\n")[0]


def _layout_shape(n, c, spatial, last):
    return (n, *spatial, c) if last else (n, c, *spatial)


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
@pytest.mark.parametrize("last", [False, True], ids=["first", "last"])
@pytest.mark.parametrize("dtype", WIDTHS)
def test_random_offsets_give_numpys_unpool_and_gather_or_the_first_bad_one(rng, geometry,
                                                                          last, dtype):
    in_size, kernel = geometry[0], geometry[1]
    k, taps = len(in_size), math.prod(kernel)
    with enable_x64(needs_x64(dtype)):
        x = jnp.asarray(random_values(rng, _layout_shape(2, 3, in_size, last), dtype))
        values, w = _pool(x, geometry, last)
        grad = jnp.asarray(random_values(rng, x.shape, dtype))
        pooled = np.asarray(w.offsets)
        for case in ("pool", "any tap", "bad"):
            if case == "pool":
                offsets = pooled
            else:
                # Every tap number; where it names nothing, the pool's (overlapping windows
                # then name one position several times: the largest input position wins).
                offsets = rng.integers(0, taps, pooled.shape).astype(np.uint8)
                _, named, _ = decode(offsets, in_size, *geometry[1:5], last)
                offsets = np.where(named, offsets, pooled).astype(np.uint8)
                if case == "bad":
                    spots = rng.random(offsets.shape) < 0.05
                    offsets[spots] = rng.integers(0, 256, int(spots.sum()))
            flat, ok, named = decode(offsets, in_size, *geometry[1:5], last)
            w_case = ju.WindowIndices(jnp.asarray(offsets), w.geometry)
            fmt, positions = FORMATS[k][last], jnp.asarray(flat.astype(np.int64))
            for op, call, flat_call, want in (
                    (f"max_unpool{k}d", partial(UNPOOL[k], values, w_case),
                     partial(UNPOOL[k], values, positions, output_size=in_size,
                             data_format=fmt),
                     lambda f: oracle.unpool_nd(np.asarray(values), f, in_size, last)),
                    (f"max_unpool{k}d_backward", partial(BACKWARD[k], grad, values, w_case),
                     partial(BACKWARD[k], grad, values, positions, in_size, data_format=fmt),
                     lambda f: oracle.gather_nd(np.asarray(grad), f, k, last))):
                got, error = _outcome(call)
                with enable_x64():
                    flat_error = _outcome(flat_call)[1]
                message = first_bad_message(op, offsets, flat, ok, named, in_size, geometry,
                                            last, flat_error)
                assert error == message, (case, op)
                if message is None:
                    assert_bits_equal(got, want(flat))
            if case == "pool":
                assert ok.all() or not w.geometry.argmax_in_window()


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=IDS)
@pytest.mark.parametrize("last", [False, True], ids=["first", "last"])
def test_window_indices_gives_the_offsets_back_or_names_the_first_bad_index(rng, geometry,
                                                                            last):
    in_size = geometry[0]
    k = len(in_size)
    x = jnp.asarray(rng.standard_normal(_layout_shape(2, 3, in_size, last)).astype(np.float32))
    _, w = _pool(x, geometry, last)
    offsets = np.asarray(w.offsets)
    flat, _, _ = decode(offsets, in_size, *geometry[1:5], last)
    kw = dict(zip(("kernel_size", "stride", "padding", "dilation", "ceil_mode"), geometry[1:]))

    def call(f):
        return ju.window_indices(f, **kw, input_size=in_size,
                                 data_format=FORMATS[k][last]).offsets

    np.testing.assert_array_equal(call(flat.astype(np.int32)), offsets)
    # Indices anywhere: one that is not a tap of its window (or its initial index) fails.
    plane = math.prod(in_size)
    wrong = np.where(rng.random(flat.shape) < 0.1, rng.integers(-2, plane + 2, flat.shape), flat)
    back = oracle.window_offsets(wrong, in_size, *geometry[1:5], last)
    shape = flat.shape if flat.ndim == k + 2 else (1, *flat.shape)
    first = np.flatnonzero(back.reshape(-1) < 0)
    got, error = _outcome(lambda: call(wrong.astype(np.int32)))
    if first.size == 0:
        np.testing.assert_array_equal(got, back)
        return
    at = np.unravel_index(int(first[0]), shape)
    n, c = at[0], at[-1 if last else 1]
    i = int(np.ravel_multi_index(at[1:-1] if last else at[2:], w.offsets.shape[-k - 1:-1]
                                 if last else w.offsets.shape[-k:]))
    assert error is not None and error.startswith(
        f"OUT_OF_RANGE: window_indices: index {int(wrong.reshape(-1)[first[0]])} at (n={n}, "
        f"c={c}, i={i}) of indices is not in its window"), error
    assert error.endswith(f"({positions_note(k)})")


# Calls of several MB (NCHW: planes in different chunks; NHWC: channel spans of one image).
BIG = [((2, 37, 128, 96), (2, 2), (2, 2), (0, 0)), ((1, 16, 130, 126), (3, 3), (2, 2), (1, 1))]


@pytest.mark.parametrize("shape, kernel, stride, padding", BIG, ids=["tiling", "overlapping"])
@pytest.mark.parametrize("last", [False, True], ids=["first", "last"])
def test_calls_split_across_threads_equal_the_flat_kernels(rng, shape, kernel, stride, padding,
                                                         last):
    n, c, *in_size = shape
    fmt = FORMATS[2][last]
    x = jnp.asarray(random_values(rng, _layout_shape(n, c, in_size, last), "float32"))
    values, w = ju.max_pool2d_with_indices(x, kernel, stride, padding, data_format=fmt,
                                           index_format="window")
    offsets = np.asarray(w.offsets)
    geometry = (tuple(in_size), kernel, stride, padding, (1, 1), False)
    for spots in (None, [0.6, 0.3, 0.9]):  # bad offsets placed at these fractions
        bad = offsets.copy()
        if spots is not None:
            for s, value in zip(spots, (200, 9, 4)):
                bad.reshape(-1)[int(s * bad.size)] = value
        flat, ok, named = decode(bad, tuple(in_size), *geometry[1:5], last)
        w_bad = ju.WindowIndices(jnp.asarray(bad), w.geometry)
        for op, call, flat_call in (
                ("max_unpool2d", partial(ju.max_unpool2d, values, w_bad),
                 lambda f: ju.max_unpool2d(values, f, output_size=in_size, data_format=fmt)),
                ("max_unpool2d_backward", partial(ju.max_unpool2d_backward, x, values, w_bad),
                 lambda f: ju.max_unpool2d_backward(x, values, f, in_size, data_format=fmt))):
            got, error = _outcome(call)
            with enable_x64():
                flat_error = _outcome(lambda: flat_call(jnp.asarray(flat.astype(np.int64))))[1]
            assert error == first_bad_message(op, bad, flat, ok, named, tuple(in_size),
                                              geometry, last, flat_error), op
            if spots is None:
                assert_bits_equal(got, flat_call(jnp.asarray(flat.astype(np.int32))))


def test_the_native_kernels_take_the_offsets_with_no_conversion():
    # The CPU lowering calls the window targets on the uint8 offsets themselves.
    x = jnp.zeros((2, 3, 8, 8))

    def step(x):
        values, w = ju.max_pool2d_with_indices(x, 2, index_format="window")
        return ju.max_unpool2d(values, w).sum() + ju.max_unpool2d_backward(x, values, w).sum()

    text = jax.jit(jax.grad(step)).lower(x).as_text()
    calls = re.findall(r"custom_call @(\w+)", text)
    assert set(calls) == {"jax_unpool_max_pool_window_v1", "jax_unpool_max_unpool_window_v1",
                          "jax_unpool_max_unpool_backward_window_v1"}, calls
    assert "xi32>" not in text  # no int32 array: the offsets are never widened
