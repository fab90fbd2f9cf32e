"""max_pool2d_with_indices: parity with torch.nn.functional.max_pool2d(return_indices=True),
for both implementations: the public function (on CPU the native kernel) and
jax_unpool.reference's (XLA ops)."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import jax_unpool as ju
from jax_unpool._compat import enable_x64
from jax_unpool.pooling import max_pool2d_with_indices

NAN, INF = np.nan, np.inf
# The native pool (the public function) and the XLA-ops one (the reference): every parity
# check below holds for both.
IMPLS = (max_pool2d_with_indices, ju.reference.max_pool2d_with_indices)


def torch_pool(x: np.ndarray, *args, **kwargs) -> tuple[np.ndarray, np.ndarray]:
    xt = torch.from_numpy(np.ascontiguousarray(x))
    out, idx = F.max_pool2d(xt, *args, return_indices=True, **kwargs)
    return out.numpy(), idx.numpy()


def assert_same_as_torch(x: np.ndarray, *args, **kwargs) -> None:
    t_out, t_idx = torch_pool(x, *args, **kwargs)
    for pool in IMPLS:
        out, idx = pool(x, *args, **kwargs)
        assert out.dtype == x.dtype and idx.dtype == jnp.int32
        np.testing.assert_array_equal(np.asarray(out), t_out)  # NaNs compare equal here
        np.testing.assert_array_equal(np.asarray(idx), t_idx)


def normal(shape, dtype=np.float32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# (x shape, kernel_size, stride, padding, dilation, ceil_mode)
CONFIGS = [
    ((2, 3, 8, 8), 2, None, 0, 1, False),
    ((2, 3, 9, 7), 3, 2, 1, 1, False),
    ((2, 3, 9, 7), 3, 2, 1, 1, True),
    ((1, 2, 10, 11), (2, 3), (1, 2), (1, 0), 1, False),
    ((1, 2, 10, 11), (3, 2), (2, 3), (0, 1), (2, 1), True),
    ((2, 2, 9, 9), 3, 1, 1, 1, False),  # overlapping windows
    ((2, 2, 12, 10), 3, 2, 1, 2, False),  # dilation
    ((1, 2, 12, 10), (3, 2), 2, (1, 1), (2, 3), True),
    ((1, 1, 5, 5), 2, 2, 1, 1, True),  # ceil_mode drops a window starting in right padding
    ((1, 1, 7, 6), (4, 5), (3, 2), (2, 2), 1, True),
    ((1, 1, 6, 6), 1, 2, 0, 1, True),
    ((1, 1, 3, 3), 5, 1, 2, 1, False),  # window larger than the input
    ((3, 9, 8), 2, None, 0, 1, False),  # unbatched (C, H, W)
    ((3, 9, 8), 3, 2, 1, 1, True),
    ((4, 5, 5), (1, 1), [2, 1], 0, [1, 1], False),  # lists and length-1 windows
]


@pytest.mark.parametrize("shape,k,s,p,d,ceil", CONFIGS)
def test_matches_torch_float32(shape, k, s, p, d, ceil):
    assert_same_as_torch(normal(shape), k, s, p, d, ceil)


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
@pytest.mark.parametrize("shape,k,s,p,d,ceil", CONFIGS[1:3] + CONFIGS[6:7])
def test_matches_torch_half_precision(shape, k, s, p, d, ceil, dtype):
    x = normal(shape)
    if dtype == "bfloat16":  # numpy has no bfloat16: compare through float32, exact
        xt = torch.from_numpy(x).bfloat16()
        t_out, t_idx = F.max_pool2d(xt, k, s, p, d, ceil, return_indices=True)
        for pool in IMPLS:
            out, idx = pool(jnp.asarray(x, jnp.bfloat16), k, s, p, d, ceil)
            assert out.dtype == jnp.bfloat16
            np.testing.assert_array_equal(np.asarray(out, np.float32), t_out.float().numpy())
            np.testing.assert_array_equal(np.asarray(idx), t_idx.numpy())
    else:
        assert_same_as_torch(x.astype(dtype), k, s, p, d, ceil)


@pytest.mark.parametrize("shape,k,s,p,d,ceil", CONFIGS[1:3] + CONFIGS[7:8])
def test_matches_torch_float64_with_int64_indices(shape, k, s, p, d, ceil):
    x = normal(shape, np.float64)
    t_out, t_idx = torch_pool(x, k, s, p, d, ceil)
    with enable_x64(True):
        for pool in IMPLS:
            out, idx = pool(x, k, s, p, d, ceil, index_dtype=jnp.int64)
            assert out.dtype == jnp.float64 and idx.dtype == jnp.int64
            np.testing.assert_array_equal(np.asarray(out), t_out)
            np.testing.assert_array_equal(np.asarray(idx), t_idx)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32])
def test_integer_dtypes_match_torch(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    x = rng.integers(info.min, info.max, (2, 3, 9, 8), endpoint=True, dtype=dtype)
    x[0, 0] = info.min  # a plane of dtype-min values next to the padding
    assert_same_as_torch(x, 3, 2, 1, 1, True)


def test_int64_matches_torch_under_x64():
    x = np.random.default_rng(2).integers(-5, 5, (2, 2, 7, 7)).astype(np.int64)
    x[0, 0] = np.iinfo(np.int64).min
    t_out, t_idx = torch_pool(x, 3, 2, 1)
    with enable_x64(True):
        for pool in IMPLS:
            out, idx = pool(x, 3, 2, 1)
            assert out.dtype == jnp.int64
            np.testing.assert_array_equal(np.asarray(out), t_out)
            np.testing.assert_array_equal(np.asarray(idx), t_idx)


def test_bool_pools_like_uint8():
    # PyTorch has no bool max_pool2d; bool must order False < True like uint8.
    x = np.random.default_rng(3).random((2, 2, 7, 7)) < 0.2
    t_out, t_idx = torch_pool(x.astype(np.uint8), 3, 2, 1)
    for pool in IMPLS:
        out, idx = pool(x, 3, 2, 1)
        assert out.dtype == jnp.bool_
        np.testing.assert_array_equal(np.asarray(out), t_out.astype(bool))
        np.testing.assert_array_equal(np.asarray(idx), t_idx)
    assert t_out.any() and not t_out.all()


# ------------------------------------------------------------------ ties, NaN, padding


def test_constant_input_picks_first_in_bounds_element():
    x = np.ones((1, 1, 4, 4), np.float32)
    _, idx = max_pool2d_with_indices(x, 3, 2, 1)
    # windows start at rows/cols -1 and 1; the first in-bounds tap is (0|1, 0|1)
    np.testing.assert_array_equal(np.asarray(idx)[0, 0], [[0, 1], [4, 5]])
    assert_same_as_torch(x, 3, 2, 1)


@pytest.mark.parametrize(
    "k,s,p,d,ceil", [(2, 2, 0, 1, False), (3, 1, 1, 1, False), (3, 2, 1, 2, True)]
)
def test_many_ties_first_maximum_wins(k, s, p, d, ceil):
    x = np.random.default_rng(4).integers(0, 3, (2, 3, 11, 10)).astype(np.float32)
    assert_same_as_torch(x, k, s, p, d, ceil)


def test_tie_resolved_in_row_major_kernel_order():
    # Maximum 5 at (0, 1) and (1, 0) of the window: (0, 1) comes first in the scan.
    x = np.array([[[[1, 5], [5, 2]]]], np.float32)
    for pool in IMPLS:
        out, idx = pool(x, 2)
        assert out.item() == 5 and idx.item() == 1


@pytest.mark.parametrize(
    "row,expected_value,expected_index",
    [
        ([NAN, 1.0, 2.0, 3.0], NAN, 0),
        ([1.0, 2.0, 3.0, NAN], NAN, 3),
        ([4.0, NAN, 9.0, 1.0], NAN, 1),
        ([NAN, 5.0, NAN, 2.0], NAN, 2),  # several NaNs: PyTorch keeps the LAST one
        ([NAN, NAN, NAN, NAN], NAN, 3),
        ([-INF, NAN, INF, 1.0], NAN, 1),
        ([-INF, -INF, INF, INF], INF, 2),
    ],
)
def test_nan_propagates_with_its_index(row, expected_value, expected_index):
    x = np.array(row, np.float32).reshape(1, 1, 4)
    out, idx = max_pool2d_with_indices(x, (1, 4))
    np.testing.assert_array_equal(np.asarray(out), [[[expected_value]]])
    assert idx.item() == expected_index
    assert_same_as_torch(x, (1, 4))


def test_random_nans_match_torch():
    x = normal((2, 3, 10, 9))
    rng = np.random.default_rng(5)
    x[rng.random(x.shape) < 0.15] = NAN
    x[rng.random(x.shape) < 0.1] = -INF
    assert_same_as_torch(x, 3, 1, 1)
    assert_same_as_torch(x, (2, 3), 2, (1, 1), (2, 1), True)


@pytest.mark.parametrize("fill", [-INF, -1e30, -3.0])
def test_padding_is_never_selected(fill):
    x = np.full((1, 2, 5, 6), fill, np.float32)
    out, idx = max_pool2d_with_indices(x, 3, 2, 1, 1, True)
    idx = np.asarray(idx)
    assert (idx >= 0).all() and (idx < 5 * 6).all()
    np.testing.assert_array_equal(np.asarray(out), np.full(out.shape, fill, np.float32))
    assert_same_as_torch(x, 3, 2, 1, 1, True)


def test_window_of_only_padding_keeps_pytorch_quirk():
    # ceil_mode + dilation: window cols -1 and 2 of a width-2 input hold no element.
    # PyTorch returns -inf and its start index (h*W + 2, past the row's end).
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 3, 2)
    args = ((1, 2), (1, 2), (0, 1), (1, 3), True)
    out, idx = max_pool2d_with_indices(x, *args)
    np.testing.assert_array_equal(np.asarray(out).ravel(), [-INF] * 3)
    np.testing.assert_array_equal(np.asarray(idx).ravel(), [2, 4, 6])
    assert_same_as_torch(x, *args)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    hw=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    d=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pad_frac=st.tuples(st.booleans(), st.booleans()),
    ceil=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_geometry_matches_torch_or_both_reject(hw, k, s, d, pad_frac, ceil, seed):
    p = tuple(kk // 2 if f else 0 for kk, f in zip(k, pad_frac))
    x = np.random.default_rng(seed).integers(-2, 3, (1, 2, *hw)).astype(np.float32)
    x[x == 2] = NAN
    try:
        t_out, t_idx = torch_pool(x, k, s, p, d, ceil)
    except RuntimeError:  # PyTorch rejects (output size <= 0): so must we, as ValueError
        with pytest.raises(ValueError, match="output size must be positive"):
            max_pool2d_with_indices(x, k, s, p, d, ceil)
        return
    for pool in IMPLS:
        out, idx = pool(x, k, s, p, d, ceil)
        np.testing.assert_array_equal(np.asarray(out), t_out)
        np.testing.assert_array_equal(np.asarray(idx), t_idx)


# ------------------------------------------------------------------ layout, shapes


@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize(
    "k,s,p,d,ceil", [(2, 2, 0, 1, False), ((3, 2), (1, 2), (1, 1), (1, 2), True)]
)
def test_nhwc_equals_transposed_nchw(batched, k, s, p, d, ceil):
    x = normal((2, 3, 9, 8) if batched else (3, 9, 8))
    perm = (0, 2, 3, 1) if batched else (1, 2, 0)
    out, idx = max_pool2d_with_indices(x, k, s, p, d, ceil)
    fmt = "NHWC" if batched else "HWC"
    out_l, idx_l = max_pool2d_with_indices(x.transpose(perm), k, s, p, d, ceil, data_format=fmt)
    np.testing.assert_array_equal(np.asarray(out_l), np.asarray(out).transpose(perm))
    np.testing.assert_array_equal(np.asarray(idx_l), np.asarray(idx).transpose(perm))


def test_output_shape_ceil_mode_drops_window_starting_in_padding():
    # H=5, k=2, s=2, p=1: ceil gives 4 windows, but the 4th would start at row 5
    # (right padding), so PyTorch keeps 3.
    out, idx = max_pool2d_with_indices(np.zeros((1, 5, 5), np.float32), 2, 2, 1, ceil_mode=True)
    assert out.shape == idx.shape == (1, 3, 3)


@pytest.mark.parametrize("shape", [(0, 3, 4, 4), (2, 0, 4, 4)])
def test_empty_batch_or_channels_give_empty_results(shape):
    out, idx = max_pool2d_with_indices(jnp.zeros(shape), 2)
    assert out.shape == idx.shape == shape[:2] + (2, 2)


# ------------------------------------------------------------------ transformations


def test_jit_equals_eager():
    x = normal((2, 3, 9, 9))
    f = jax.jit(max_pool2d_with_indices, static_argnums=(1, 2, 3, 4, 5))
    for a, b in zip(f(x, 3, 2, 1, 1, True), max_pool2d_with_indices(x, 3, 2, 1, 1, True)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("in_axes", [0, 1, 3])
def test_vmap_equals_loop(in_axes):
    x = normal((3, 2, 7, 6))  # vmapped slices are 3-D (C, H, W)
    out, idx = jax.vmap(lambda v: max_pool2d_with_indices(v, 2, 1, 1), in_axes=in_axes)(x)
    for i in range(x.shape[in_axes]):
        o, ix = max_pool2d_with_indices(np.take(x, i, axis=in_axes), 2, 1, 1)
        np.testing.assert_array_equal(np.asarray(out[i]), np.asarray(o))
        np.testing.assert_array_equal(np.asarray(idx[i]), np.asarray(ix))


def test_nested_vmap_under_jit_equals_batched_call():
    x = normal((2, 3, 4, 8, 8))
    f = jax.jit(jax.vmap(jax.vmap(lambda v: max_pool2d_with_indices(v, 3, 2, 1, 1, True))))
    out, idx = f(x)
    o, ix = max_pool2d_with_indices(x.reshape(6, 4, 8, 8), 3, 2, 1, 1, True)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(o).reshape(out.shape))
    np.testing.assert_array_equal(np.asarray(idx), np.asarray(ix).reshape(idx.shape))


# ------------------------------------------------------------------ gradients


def torch_grad(x: np.ndarray, g: np.ndarray, *args) -> np.ndarray:
    xt = torch.from_numpy(x).requires_grad_()
    out, _ = F.max_pool2d(xt, *args, return_indices=True)
    (out * torch.from_numpy(g)).sum().backward()
    return xt.grad.numpy()


@pytest.mark.parametrize(
    "shape,args",
    [
        ((2, 3, 8, 8), (2, 2)),
        ((2, 3, 9, 9), (3, 1, 1)),  # overlapping windows: cotangents add up
        ((1, 2, 9, 8), (3, 2, 1, 1, True)),  # ceil_mode
        ((1, 2, 11, 10), ((3, 2), (2, 1), (1, 1), (2, 3), True)),
        ((3, 8, 8), (3, 1, 1)),
    ],
)
def test_gradient_matches_torch(shape, args):
    x = np.random.default_rng(6).integers(0, 4, shape).astype(np.float32)  # ties too
    out_shape = max_pool2d_with_indices(x, *args)[0].shape
    g = normal(out_shape, seed=7)
    for pool in IMPLS:
        grad = jax.jit(jax.grad(lambda v, pool=pool: (pool(v, *args)[0] * g).sum()))(x)
        np.testing.assert_allclose(np.asarray(grad), torch_grad(x, g, *args), rtol=1e-6,
                                   atol=1e-6)


def test_gradient_nhwc_is_transposed_nchw_gradient():
    x = normal((2, 3, 9, 9))
    g = normal((2, 3, 9, 9), seed=8)
    loss = lambda v, fmt, gg: (max_pool2d_with_indices(v, 3, 1, 1, data_format=fmt)[0] * gg).sum()
    grad_first = jax.grad(loss)(x, "NCHW", g)
    grad_last = jax.grad(loss)(x.transpose(0, 2, 3, 1), "NHWC", g.transpose(0, 2, 3, 1))
    expected = np.asarray(grad_first).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(np.asarray(grad_last), expected, rtol=1e-6)


def test_vmapped_gradient_equals_batched_gradient():
    x = normal((4, 2, 8, 8))
    loss = lambda v: (max_pool2d_with_indices(v, 3, 1, 1)[0] ** 2).sum()
    batched = jax.vmap(jax.grad(loss))(x)
    np.testing.assert_allclose(np.asarray(batched), np.asarray(jax.grad(loss)(x)), rtol=1e-6)


def test_jvp_gathers_tangent_at_argmax_and_indices_get_float0():
    x = normal((1, 2, 6, 6))
    t = normal((1, 2, 6, 6), seed=9)
    (out, idx), (t_out, t_idx) = jax.jvp(lambda v: max_pool2d_with_indices(v, 3, 1, 1), (x,), (t,))
    expected = np.take_along_axis(t.reshape(1, 2, 36), np.asarray(idx).reshape(1, 2, 36), axis=2)
    np.testing.assert_array_equal(np.asarray(t_out), expected.reshape(t_out.shape))
    assert t_idx.dtype == jax.dtypes.float0


def test_integer_input_under_jvp_has_float0_tangent():
    x = np.arange(32, dtype=np.int32).reshape(2, 4, 4)
    zero = np.zeros(x.shape, jax.dtypes.float0)
    (out, _), (t_out, _) = jax.jvp(lambda v: max_pool2d_with_indices(v, 2), (x,), (zero,))
    np.testing.assert_array_equal(np.asarray(out), [[[5, 7], [13, 15]], [[21, 23], [29, 31]]])
    assert t_out.dtype == jax.dtypes.float0


# ------------------------------------------------------------------ index dtype, errors


def test_index_dtype_int32_by_default():
    assert max_pool2d_with_indices(normal((1, 4, 4)), 2)[1].dtype == jnp.int32


def test_index_dtype_int64_under_x64():
    x = normal((2, 5, 4))
    with enable_x64(True):
        _, idx = max_pool2d_with_indices(x, 2, index_dtype=jnp.int64)
        assert idx.dtype == jnp.int64
    np.testing.assert_array_equal(np.asarray(idx), torch_pool(x, 2)[1])


def test_index_dtype_int64_without_x64_warns_and_truncates_like_jax():
    match = "int64 requested in max_pool2d_with_indices"
    with enable_x64(False), pytest.warns(UserWarning, match=match):
        _, idx = max_pool2d_with_indices(normal((1, 4, 4)), 2, index_dtype=jnp.int64)
    assert idx.dtype == jnp.int32


X4 = np.zeros((1, 1, 6, 6), np.float32)


@pytest.mark.parametrize(
    "x,kwargs,exc,fragment",
    [
        (np.zeros((6, 6)), {}, ValueError, "x must have rank 3 (C, H, W) or 4"),
        (np.zeros((1, 1, 1, 6, 6)), {}, ValueError, "got rank 5 with shape"),
        (X4, {"kernel_size": 0}, ValueError, "kernel_size must be positive, got (0, 0)"),
        (X4, {"kernel_size": (2, -1)}, ValueError, "kernel_size must be positive"),
        (X4, {"stride": 0}, ValueError, "stride must be positive, got (0, 0)"),
        (X4, {"dilation": (1, 0)}, ValueError, "dilation must be positive, got (1, 0)"),
        (X4, {"padding": -1}, ValueError, "padding must be non-negative"),
        (X4, {"padding": 2}, ValueError, "padding must be at most half of kernel_size"),
        # PyTorch's rule uses the kernel size, not the dilated (effective) one:
        (X4, {"padding": 2, "dilation": 3}, ValueError, "padding=(2, 2) and kernel_size=(2, 2)"),
        (X4, {"kernel_size": 7}, ValueError, "output size must be positive, got (H_out, W_out)=(0"),
        (np.zeros((1, 1, 0, 6)), {}, ValueError, "non-empty spatial dimensions"),
        (X4, {"data_format": "NCWH"}, ValueError, "data_format must be one of"),
        (X4, {"kernel_size": (2, 2, 2)}, TypeError, "kernel_size must be an int or a pair of ints"),
        (X4, {"stride": 1.5}, TypeError, "stride must be an int or a pair of ints (h, w), got 1.5"),
        (X4, {"index_dtype": jnp.float32}, TypeError, "must be int32 or int64, got float32"),
        (X4, {"index_dtype": jnp.int16}, TypeError, "must be int32 or int64, got int16"),
        (X4.astype(np.complex64), {}, TypeError, "real dtype"),
    ],
)
def test_invalid_arguments_raise(x, kwargs, exc, fragment):
    kwargs = {"kernel_size": 2, **kwargs}
    with pytest.raises(exc, match="max_pool2d_with_indices") as info:
        max_pool2d_with_indices(x, **kwargs)
    assert fragment in str(info.value)


def test_int32_indices_too_narrow_for_plane_raise():
    huge = jax.ShapeDtypeStruct((1, 1, 50_000, 50_000), jnp.float32)  # traced, never allocated
    with pytest.raises(ValueError, match="index_dtype int32 cannot hold the flat indices"):
        jax.eval_shape(lambda v: max_pool2d_with_indices(v, 2), huge)


def test_errors_are_raised_at_trace_time_under_jit():
    with pytest.raises(ValueError, match="padding must be at most half"):
        jax.jit(lambda v: max_pool2d_with_indices(v, 2, 1, 3)).lower(X4)


def test_no_warning_for_default_arguments():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        max_pool2d_with_indices(X4, 2)
