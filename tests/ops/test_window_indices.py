"""index_format="window": each argmax as its tap number in its window (uint8), through every
op, rank, layout and transformation, bit-equal to the flat indices' path, on the native
kernels and on the XLA ops (`jax_unpool.backends.use("xla")`, what TPUs run); the offsets
themselves against the numpy pool oracle (PyTorch's CPU loop), PyTorch's quirks included."""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from dtypes import assert_bits_equal, needs_x64, random_values

import jax_unpool as ju
from jax_unpool._compat import enable_x64

POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
UNPOOL = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}
BACKWARD = {1: ju.max_unpool1d_backward, 2: ju.max_unpool2d_backward,
            3: ju.max_unpool3d_backward}
FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}

# (rank, input spatial size, pool arguments): SegNet's 2x2/s2, overlapping windows,
# padding, dilation, ceil_mode, and windows of padding only (an axis of size 1 whose
# kernel's taps, 2 apart, straddle it: PyTorch reports an index past the row).
GEOMETRIES = [
    (1, (9,), {"kernel_size": 3, "stride": 2, "padding": 1}),
    (1, (11,), {"kernel_size": 3, "stride": 1, "padding": 1, "dilation": 2}),
    (1, (1,), {"kernel_size": 2, "stride": 1, "padding": 1, "dilation": 2}),
    (2, (8, 8), {"kernel_size": 2}),
    (2, (7, 9), {"kernel_size": 3, "stride": 2, "padding": 1}),
    (2, (5, 7), {"kernel_size": (2, 3), "stride": (2, 1), "ceil_mode": True}),
    (2, (1, 6), {"kernel_size": (2, 2), "stride": (1, 2), "padding": (1, 0), "dilation": (2, 1)}),
    (3, (4, 4, 4), {"kernel_size": 2}),
    (3, (5, 6, 7), {"kernel_size": (3, 2, 3), "stride": (2, 2, 1), "padding": 1, "ceil_mode": True}),
    # SegNet's 2x2 past odd edges (a last window row and column half outside), and in 3-D
    (2, (7, 9), {"kernel_size": 2, "ceil_mode": True}),
    (2, (4, 37), {"kernel_size": 2, "ceil_mode": True}),  # rows of 18 full windows: vectors
    (3, (3, 5, 6), {"kernel_size": (1, 2, 2), "ceil_mode": True}),
]
IDS = [f"{k}d-{'x'.join(map(str, size))}-{i}" for i, (k, size, _) in enumerate(GEOMETRIES)]
BACKENDS = {"native": contextlib.nullcontext, "xla": lambda: ju.backends.use("xla")}


def _sizes(k, value):
    return tuple(value) if isinstance(value, tuple) else (value,) * k


def expected_offsets(flat, size, kw, k):
    """The numpy oracle's flat indices (channels-first) as tap numbers in their windows;
    0 for a window with no tap inside the input (its index is PyTorch's initial one)."""
    kernel, stride = _sizes(k, kw["kernel_size"]), _sizes(k, kw.get("stride", kw["kernel_size"]))
    padding, dilation = _sizes(k, kw.get("padding", 0)), _sizes(k, kw.get("dilation", 1))
    out = np.zeros(flat.shape, np.uint8)
    for pos in np.ndindex(*flat.shape):
        window = pos[-k:]
        coords = np.unravel_index(int(flat[pos]), size) if flat[pos] < np.prod(size) else None
        tap, inside = 0, coords is not None
        for a in range(k):
            start = window[a] * stride[a] - padding[a]
            taps = [start + j * dilation[a] for j in range(kernel[a])]
            if not any(0 <= t < size[a] for t in taps):
                inside = False  # a window of padding only
                break
            j = taps.index(int(coords[a]))
            tap = tap * kernel[a] + j
        out[pos] = tap if inside else 0
    return out


def _layout(a, k, last):
    return np.moveaxis(a, 1, -1) if last else a


@pytest.mark.parametrize("k, size, kw", GEOMETRIES, ids=IDS)
@pytest.mark.parametrize("last", [False, True], ids=["first", "last"])
def test_offsets_are_the_oracles_argmax_taps_and_to_flat_its_indices(rng, k, size, kw, last):
    x = rng.standard_normal((2, 3, *size)).astype(np.float32)
    x[0, 0].flat[::3] = np.nan  # NaN wins (the last in scan order)
    x[1, 1] = 0.5  # ties: the first maximum in scan order
    values, flat = oracle.max_pool(x, _sizes(k, kw["kernel_size"]),
                                   _sizes(k, kw.get("stride", kw["kernel_size"])),
                                   _sizes(k, kw.get("padding", 0)),
                                   _sizes(k, kw.get("dilation", 1)), kw.get("ceil_mode", False))
    got_values, w = POOL[k](_layout(x, k, last), data_format=FORMATS[k][last],
                            index_format="window", **kw)
    assert isinstance(w, ju.WindowIndices) and w.offsets.dtype == np.uint8
    assert_bits_equal(got_values, _layout(values, k, last))
    np.testing.assert_array_equal(w.offsets, _layout(expected_offsets(flat, size, kw, k), k,
                                                     last))
    np.testing.assert_array_equal(w.to_flat(), _layout(flat, k, last).astype(np.int32))


DTYPES = ["float32", "bfloat16", "int8", "float64"]


def _every_op_cases():
    """Every geometry, backend and dtype; the everyday run takes one dtype per geometry and
    backend, in turn (each dtype meets every rank and both backends), the rest `-m slow`."""
    for g, (geometry, name) in enumerate(zip(GEOMETRIES, IDS)):
        for b, backend in enumerate(BACKENDS):
            for d, dtype in enumerate(DTYPES):
                everyday = d == (g + 2 * b) % len(DTYPES)
                yield pytest.param(*geometry, backend, dtype, id=f"{dtype}-{backend}-{name}",
                                   marks=() if everyday else pytest.mark.slow)


@pytest.mark.parametrize("k, size, kw, backend, dtype", list(_every_op_cases()))
def test_every_op_with_offsets_is_bit_equal_to_the_flat_path(rng, k, size, kw, backend, dtype):
    last = dtype == "bfloat16"  # both layouts over the dtypes
    fmt = FORMATS[k][last]
    x = _layout(random_values(rng, (2, 3, *size), dtype), k, last)
    with enable_x64(needs_x64(dtype)), BACKENDS[backend]():
        x = jnp.asarray(x)
        values, flat = POOL[k](x, data_format=fmt, **kw)
        w_values, w = POOL[k](x, data_format=fmt, index_format="window", **kw)
        assert_bits_equal(w_values, values)
        np.testing.assert_array_equal(w.to_flat(), flat)
        in_size = w.input_size
        pairs = [(lambda: UNPOOL[k](values, w),
                  lambda: UNPOOL[k](values, flat, output_size=in_size, data_format=fmt)),
                 (lambda: BACKWARD[k](x, values, w),
                  lambda: BACKWARD[k](x, values, flat, in_size, data_format=fmt))]
        if jnp.issubdtype(x.dtype, jnp.floating):
            def pooled(x, index_format):
                return POOL[k](x, data_format=fmt, index_format=index_format, **kw)[0]

            ct = jnp.asarray(random_values(rng, values.shape, dtype))
            weights = jnp.asarray(random_values(rng, x.shape, dtype))

            def unpool_grad(indices, **flat_args):
                return jax.grad(lambda v: (UNPOOL[k](v, indices, **flat_args) * weights)
                                .astype(jnp.float32).sum())(values)

            pairs += [(lambda: jax.vjp(lambda x: pooled(x, "window"), x)[1](ct)[0],
                       lambda: jax.vjp(lambda x: pooled(x, "flat"), x)[1](ct)[0]),
                      (lambda: jax.jvp(lambda x: pooled(x, "window"), (x,), (x,))[1],
                       lambda: jax.jvp(lambda x: pooled(x, "flat"), (x,), (x,))[1]),
                      (lambda: unpool_grad(w),
                       lambda: unpool_grad(flat, output_size=in_size, data_format=fmt))]
        for got, want in pairs:
            assert _outcome(got) == _outcome(want)


def _outcome(f):
    """f's result as bits, or the error it raised (a flat index past the plane of a window
    of padding only fails the call on CPU with either format)."""
    try:
        out = np.asarray(jax.block_until_ready(f()))
    except jax.errors.JaxRuntimeError as e:
        return "error", str(e).split("\n")[0]
    return out.dtype.str, out.shape, out.view(f"u{out.dtype.itemsize}").tobytes()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_second_order_vmap_scan_remat_and_jit_follow_the_flat_path(rng, backend):
    x = jnp.asarray(rng.standard_normal((3, 2, 4, 6, 6)).astype(np.float32))  # (B, N, C, H, W)

    def loss(x, index_format):
        values, idx = ju.max_pool2d_with_indices(x, 3, 2, 1, index_format=index_format)
        up = ju.max_unpool2d(values ** 2, idx) if index_format == "window" else \
            ju.max_unpool2d(values ** 2, idx, 3, 2, 1, output_size=x.shape[-2:])
        return (jnp.sin(up) * x).sum()

    def step(index_format):
        body = jax.checkpoint(lambda c, x: (c + loss(x, index_format), None))
        scanned = lambda x: jax.lax.scan(body, 0.0, x)[0]
        return jax.jit(jax.vmap(jax.vmap(jax.hessian(lambda x: loss(x, index_format)))))(
            x[:, :, :1, :3, :3].reshape(3, 2, 1, 1, 3, 3)), jax.jit(jax.grad(scanned))(x)

    def step_both():
        return step("window"), step("flat")

    with BACKENDS[backend]():
        (hessian_w, grad_w), (hessian_f, grad_f) = step_both()
    hessians, grads = (hessian_w, hessian_f), (grad_w, grad_f)
    # Op by op the formats are bit-equal (above); compiled into one program with the
    # arithmetic around them, XLA may fuse the two programs differently (the flat unpool
    # chooses its path on the device) and round a multiply-add once differently.
    np.testing.assert_array_max_ulp(hessians[0], hessians[1], maxulp=2)
    np.testing.assert_array_equal(grads[0], grads[1])


def test_vmap_over_every_in_axes_of_the_unpool(rng):
    x = jnp.asarray(rng.standard_normal((4, 2, 3, 6, 6)).astype(np.float32))
    values, w = jax.vmap(lambda x: ju.max_pool2d_with_indices(x, 2, index_format="window"))(x)
    _, flat = jax.vmap(lambda x: ju.max_pool2d_with_indices(x, 2))(x)
    for in_axes in [(0, 0), (0, None), (None, 0)]:
        v = values if in_axes[0] == 0 else values[0]
        ww = w if in_axes[1] == 0 else jax.tree.map(lambda o: o[0], w)
        ff = flat if in_axes[1] == 0 else flat[0]
        got = jax.vmap(ju.max_unpool2d, in_axes=in_axes)(v, ww)
        want = jax.vmap(lambda v, i: ju.max_unpool2d(v, i, 2), in_axes=in_axes)(v, ff)
        np.testing.assert_array_equal(got, want)


def test_the_offsets_are_a_quarter_of_int32_indices(rng):
    x = jnp.asarray(rng.standard_normal((2, 3, 8, 8)).astype(np.float32))
    _, flat = ju.max_pool2d_with_indices(x, 2)
    _, w = ju.max_pool2d_with_indices(x, 2, index_format="window")
    assert w.offsets.nbytes * 4 == flat.nbytes
    leaves, treedef = jax.tree.flatten(w)
    assert len(leaves) == 1 and leaves[0] is w.offsets
    assert jax.tree.unflatten(treedef, leaves).geometry == w.geometry


@pytest.mark.parametrize("k, size, kw", GEOMETRIES, ids=IDS)
def test_window_indices_converts_flat_indices_back(rng, k, size, kw):
    x = jnp.asarray(rng.standard_normal((2, 3, *size)).astype(np.float32))
    _, flat = POOL[k](x, **kw)
    _, w = POOL[k](x, index_format="window", **kw)
    back = ju.window_indices(flat, input_size=size, **kw)
    np.testing.assert_array_equal(back.offsets, w.offsets)
    assert back.geometry == w.geometry


# --------------------------------------------------------------------------------------
# Bad input: a clear error, never a wrong result
# --------------------------------------------------------------------------------------

def test_a_window_of_more_than_256_taps_names_the_flat_format():
    x = jnp.zeros((1, 1, 20, 20))
    with pytest.raises(ValueError, match=r"at most 256 taps; kernel_size=\(17, 17\) has 289: "
                                         r"use index_format='flat'"):
        ju.max_pool2d_with_indices(x, 17, index_format="window")
    _, w = ju.max_pool2d_with_indices(jnp.zeros((1, 1, 16, 16)), 16, index_format="window")
    assert w.offsets.shape == (1, 1, 1, 1)  # 256 taps: the largest offset is 255


def test_an_unknown_index_format_is_refused():
    with pytest.raises(ValueError, match="index_format must be 'flat' or 'window', got "
                                         "'offsets'"):
        ju.max_pool2d_with_indices(jnp.zeros((1, 1, 4, 4)), 2, index_format="offsets")


@pytest.mark.parametrize("argument, message", [
    ({"kernel_size": 3}, (r"kernel_size=3 conflicts with the window offsets' pool, whose "
                          r"kernel_size is \(2, 2\)")),
    ({"kernel_size": 2, "stride": 1}, r"stride=1 conflicts"),
    ({"padding": 1}, r"padding=1 conflicts"),
    ({"output_size": (9, 8)}, (r"output_size \(9, 8\) conflicts with the window offsets' "
                               r"pool, whose input size is \(8, 8\)")),
    ({"data_format": "NHWC"}, r"data_format='NHWC' conflicts"),
])
def test_a_conflicting_explicit_argument_is_an_error(argument, message):
    values, w = ju.max_pool2d_with_indices(jnp.zeros((1, 2, 8, 8)), 2, index_format="window")
    with pytest.raises(ValueError, match=f"max_unpool2d: {message}"):
        ju.max_unpool2d(values, w, **argument)
    # The same arguments, agreeing, are accepted.
    np.testing.assert_array_equal(ju.max_unpool2d(values, w, 2, 2, 0, (8, 8)),
                                  ju.max_unpool2d(values, w))


def test_offsets_of_another_shape_than_the_values_are_an_error():
    values, w = ju.max_pool2d_with_indices(jnp.zeros((1, 2, 8, 8)), 2, index_format="window")
    with pytest.raises(ValueError, match=r"max_unpool2d: x of shape \(1, 2, 5, 4\) does not "
                                         r"fit the window offsets' pool"):
        ju.max_unpool2d(jnp.zeros((1, 2, 5, 4)), w)
    other = ju.WindowIndices(jnp.zeros((1, 2, 3, 3), jnp.uint8), w.geometry)
    with pytest.raises(ValueError, match=r"window offsets of shape \(1, 2, 3, 3\) do not fit "
                                         r"their pool: its output's spatial size is \(4, 4\)"):
        ju.max_unpool2d(values, other)


def test_a_uint8_array_where_flat_indices_are_expected_is_an_error():
    values, w = ju.max_pool2d_with_indices(jnp.zeros((1, 2, 8, 8)), 2, index_format="window")
    with pytest.raises(TypeError, match="max_unpool2d: indices must be int32 or int64, got "
                                        "uint8"):
        ju.max_unpool2d(values, w.offsets, 2)


def _bad_offsets():
    """A pool's offsets, and the same with one offset past the 4 taps of a 2x2 window."""
    values, w = ju.max_pool2d_with_indices(jnp.arange(64.0).reshape(1, 1, 8, 8), 2,
                                           index_format="window")
    return values, w, ju.WindowIndices(w.offsets.at[0, 0, 1, 2].set(4), w.geometry)


def test_an_offset_past_the_taps_fails_the_call_on_cpu():
    values, _, bad = _bad_offsets()
    message = (r"max_unpool2d: window offset 4 at \(n=0, c=0, i=6\) of indices is out of "
               r"range: valid offsets are \[0, 4\), the taps of its window \(kernel_size="
               r"\(2, 2\), stride=\(2, 2\), padding=\(0, 0\), dilation=\(1, 1\)\) that lie "
               r"inside the output plane of 8x8")
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError), match=message):
        jax.block_until_ready(ju.max_unpool2d(values, bad))
    x = jnp.zeros((1, 1, 8, 8))
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError),
                       match=message.replace("max_unpool2d", "max_unpool2d_backward")):
        jax.block_until_ready(ju.max_unpool2d_backward(x, values, bad))


def test_an_offset_past_the_taps_is_dropped_by_the_xla_ops():
    values, good, bad = _bad_offsets()
    with ju.backends.use("xla"):
        out = ju.max_unpool2d(values, bad)
    # As if that element were not there: its output position keeps 0.
    np.testing.assert_array_equal(out, ju.max_unpool2d(values.at[0, 0, 1, 2].set(0), good))


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_export_with_a_symbolic_batch_runs_at_every_batch_size(rng, backend):
    def step(x):
        def loss(x):
            values, w = ju.max_pool2d_with_indices(x, 3, 2, 1, index_format="window")
            return (ju.max_unpool2d(jnp.tanh(values), w) * x).sum()
        return jax.value_and_grad(loss)(x)

    (b,) = jax.export.symbolic_shape("b")
    with BACKENDS[backend]():
        exported = jax.export.export(jax.jit(step), disabled_checks=ju.export_safety_checks())(
            jax.ShapeDtypeStruct((b, 3, 7, 9), jnp.float32))
        restored = jax.export.deserialize(exported.serialize())
        for n in (1, 4):
            x = jnp.asarray(rng.standard_normal((n, 3, 7, 9)).astype(np.float32))
            # The same program, compiled here (op by op, XLA could round a multiply-add
            # of the gradient differently).
            for got, want in zip(restored.call(x), jax.jit(step)(x)):
                np.testing.assert_array_equal(got, want)
