"""The CUDA kernels on window offsets (index_format="window") without a GPU: the handlers
run in the host emulation (emulation.cc), and their results must equal the CPU window
kernels' (jax_unpool on the CPU) bit for bit -- the pool's values and offsets on random
geometries (overlapping, padded, dilated, ceil_mode) and on values full of ties, NaN and
signed zeros; the unpool and its backward on the pool's offsets and on any tap number.
An offset that names no tap in the plane is dropped (forward) or reads 0 (backward),
against numpy, and fails a checked call with the CPU kernels' message; window_indices
gives the CPU's offsets back, and an index outside its window the offset XLA's ops give."""

from __future__ import annotations

import math

import emulation as emu
import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from cases import FORMATS, LAYOUTS, pool_geometry, pool_values, seeded, to_layout
from dtypes import bits

import jax_unpool as ju
from jax_unpool._compat import enable_x64

pytestmark = pytest.mark.slow  # as test_cuda_logic.py: the emulation's build and loops

POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
UNPOOL = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}
BACKWARD = {1: ju.max_unpool1d_backward, 2: ju.max_unpool2d_backward,
            3: ju.max_unpool3d_backward}
# Every byte width of the unpools, and the pool's orders (floats with NaN, ints, bool).
UNPOOL_WIDTHS = ["uint8", "bfloat16", "float32", "float64"]
POOL_DTYPES = ["float32", "bfloat16", "float16", "float64", "int8", "uint16", "int64",
               "bool"]


def cpu_window_pool(x, window, ceil_mode, k, last):
    """The CPU's pool with window offsets: (values, WindowIndices)."""
    with enable_x64():
        return POOL[k](jnp.asarray(x), *window, ceil_mode, data_format=FORMATS[k][last],
                       index_format="window")


def draw(rng, k, last, dtype):
    window, ceil_mode, in_spatial = pool_geometry(rng, k)
    x = to_layout(pool_values(rng, (2, 3, *in_spatial), dtype), k, last)
    return x, window, ceil_mode


@pytest.mark.parametrize("dtype", POOL_DTYPES)
@pytest.mark.parametrize("k,last", LAYOUTS)
def test_the_pool_writes_the_cpus_values_and_offsets(emulation, k, last, dtype):
    rng = seeded("window pool", k, last, dtype)
    for _ in range(4):
        x, window, ceil_mode = draw(rng, k, last, dtype)
        values, w = cpu_window_pool(x, window, ceil_mode, k, last)
        got_values, got_offsets = emulation.pool_window(x, w.geometry)
        np.testing.assert_array_equal(bits(got_values), bits(np.asarray(values)))
        np.testing.assert_array_equal(got_offsets, np.asarray(w.offsets))


def any_taps(rng, pooled, g):
    """Random tap numbers wherever they name a tap inside the input; the pool's elsewhere
    (a window of padding only names its initial position through offset 0)."""
    offsets = rng.integers(0, math.prod(g.kernel), pooled.shape).astype(np.uint8)
    _, named = oracle.window_positions(offsets, g.in_size, g.kernel, g.stride, g.padding,
                                       g.dilation, g.channels_last)
    return np.where(named, offsets, pooled).astype(np.uint8)


@pytest.mark.parametrize("dtype", UNPOOL_WIDTHS)
@pytest.mark.parametrize("k,last", LAYOUTS)
def test_unpool_and_backward_equal_the_cpus(emulation, k, last, dtype):
    rng = seeded("window unpool", k, last, dtype)
    for _ in range(4):
        x, window, ceil_mode = draw(rng, k, last, "float32")
        _, w = cpu_window_pool(x, window, ceil_mode, k, last)
        g, pooled = w.geometry, np.asarray(w.offsets)
        if not g.argmax_in_window():  # a window of padding only: its index lies past x
            continue
        with enable_x64():
            values = pool_values(rng, pooled.shape, dtype)
            grad = pool_values(rng, x.shape, dtype)
            for offsets in (pooled, any_taps(rng, pooled, g)):
                wi = ju.WindowIndices(jnp.asarray(offsets), g)
                want_out = np.asarray(UNPOOL[k](jnp.asarray(values), wi))
                want_grad = np.asarray(BACKWARD[k](jnp.asarray(grad), jnp.asarray(values), wi))
                for checked in (False, True):
                    out, _ = emulation.forward_window(values, offsets, g, checked=checked)
                    np.testing.assert_array_equal(bits(out), bits(want_out))
                    back = emulation.backward_window(grad, offsets, g, checked=checked)
                    np.testing.assert_array_equal(bits(back), bits(want_grad))


def bad_offsets(rng, g, pooled):
    """The pool's offsets with about a fifth replaced by any byte: (offsets, flat, ok) where
    ok says which name a position inside the plane (numpy_oracle.window_positions)."""
    offsets = pooled.copy()
    spots = rng.random(offsets.shape) < 0.2
    offsets[spots] = rng.integers(0, 256, int(spots.sum()))
    flat, named = oracle.window_positions(offsets, g.in_size, g.kernel, g.stride, g.padding,
                                          g.dilation, g.channels_last)
    return offsets, flat, named & (flat < math.prod(g.in_size))


def unpool_kept(values, flat, ok, in_size, last):
    """numpy: each value whose offset names a position written there, the last in flat
    order winning; the others nowhere (an extra slot past the plane, then cut)."""
    plane = math.prod(in_size)
    v = np.moveaxis(values, -1, 1) if last else values
    at = np.moveaxis(np.where(ok, flat, plane), -1, 1) if last else np.where(ok, flat, plane)
    n, c = v.shape[:2]
    out = np.zeros((n, c, plane + 1), values.dtype)
    for a in range(n):
        for b in range(c):
            for value, i in zip(v[a, b].reshape(-1), at[a, b].reshape(-1)):
                out[a, b, i] = value
    out = out[:, :, :plane].reshape(n, c, *in_size)
    return np.moveaxis(out, 1, -1) if last else out


@pytest.mark.parametrize("k,last", LAYOUTS)
def test_an_offset_naming_no_tap_is_dropped_or_reads_zero(emulation, k, last):
    rng = seeded("window bad", k, last)
    x = to_layout(rng.standard_normal((2, 3, *(7,) * k)).astype(np.float32), k, last)
    values, w = cpu_window_pool(x, ((3,) * k, (2,) * k, (1,) * k, (1,) * k), True, k, last)
    g = w.geometry
    offsets, flat, ok = bad_offsets(rng, g, np.asarray(w.offsets))
    assert not ok.all() and ok.any()
    values = np.asarray(values)
    want = unpool_kept(values, flat, ok, g.in_size, last)
    out, _ = emulation.forward_window(values, offsets, g)
    np.testing.assert_array_equal(out, want)
    grad = rng.standard_normal(x.shape).astype(np.float32)
    gathered = oracle.gather_nd(grad, np.where(ok, flat, 0), k, last)
    np.testing.assert_array_equal(emulation.backward_window(grad, offsets, g),
                                  np.where(ok, gathered, 0))


@pytest.mark.parametrize("op", ["forward", "backward"])
@pytest.mark.parametrize("k,last", LAYOUTS)
def test_checked_calls_fail_with_the_cpu_kernels_message(emulation, op, k, last):
    rng = seeded("window checked", op, k, last)
    x = to_layout(rng.standard_normal((2, 3, *(6,) * k)).astype(np.float32), k, last)
    values, w = cpu_window_pool(x, ((2,) * k, (2,) * k, (0,) * k, (1,) * k), False, k, last)
    g = w.geometry
    offsets, _, ok = bad_offsets(rng, g, np.asarray(w.offsets))
    assert not ok.all()
    wi = ju.WindowIndices(jnp.asarray(offsets), g)
    with pytest.raises(jax.errors.JaxRuntimeError) as cpu:
        if op == "forward":
            np.asarray(UNPOOL[k](values, wi))
        else:
            np.asarray(BACKWARD[k](jnp.asarray(x), values, wi))
    with pytest.raises(emu.HandlerError) as info:
        if op == "forward":
            emulation.forward_window(np.asarray(values), offsets, g, checked=True)
        else:
            emulation.backward_window(x, offsets, g, checked=True)
    assert info.value.code == emu.OUT_OF_RANGE
    assert info.value.message in str(cpu.value)


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("k,last", LAYOUTS)
def test_window_indices_give_the_cpus_offsets_and_xlas_for_any_index(emulation, k, last,
                                                                     index_dtype):
    rng = seeded("window indices", k, last, index_dtype)
    for _ in range(4):
        x, window, ceil_mode = draw(rng, k, last, "float32")
        _, w = cpu_window_pool(x, window, ceil_mode, k, last)
        g = w.geometry
        flat, _ = oracle.window_positions(np.asarray(w.offsets), g.in_size, g.kernel, g.stride,
                                          g.padding, g.dilation, last)
        np.testing.assert_array_equal(emulation.window_indices(flat.astype(index_dtype), g),
                                      np.asarray(w.offsets))
        plane = math.prod(g.in_size)
        wrong = np.where(rng.random(flat.shape) < 0.2,
                         rng.integers(-plane - 2, 2 * plane + 2, flat.shape), flat)
        kw = dict(zip(("kernel_size", "stride", "padding", "dilation", "ceil_mode"),
                      (*window, ceil_mode)))
        with enable_x64(), ju.backends.use("xla"):
            want = ju.window_indices(jnp.asarray(wrong.astype(index_dtype)), **kw,
                                     input_size=g.in_size, data_format=FORMATS[k][last])
        np.testing.assert_array_equal(emulation.window_indices(wrong.astype(index_dtype), g),
                                      np.asarray(want.offsets))
