"""max_pool1d_with_indices / max_pool3d_with_indices: parity with torch's max_pool1d/3d
(return_indices=True) -- values, indices, ties, NaN, padding, ceil_mode, dilation, dtypes,
layouts -- and their gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from jax.test_util import check_grads

import jax_unpool as ju

POOL = {1: ju.max_pool1d_with_indices, 3: ju.max_pool3d_with_indices}
TORCH = {1: F.max_pool1d, 3: F.max_pool3d}
NAN, INF = np.nan, np.inf


def torch_pool(k, x, *args, **kwargs):
    out, idx = TORCH[k](torch.from_numpy(np.ascontiguousarray(x)), *args,
                        return_indices=True, **kwargs)
    return out.numpy(), idx.numpy()


def assert_same_as_torch(k, x, *args, **kwargs):
    out, idx = POOL[k](x, *args, **kwargs)
    t_out, t_idx = torch_pool(k, x, *args, **kwargs)
    assert out.dtype == x.dtype and idx.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(out), t_out)  # NaNs compare equal here
    np.testing.assert_array_equal(np.asarray(idx), t_idx)


def normal(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# (x shape, kernel_size, stride, padding, dilation, ceil_mode)
CONFIGS = {
    1: [((2, 3, 16), 2, None, 0, 1, False),
        ((2, 3, 17), 3, 2, 1, 1, False),
        ((2, 3, 17), 3, 2, 1, 1, True),
        ((2, 2, 15), 3, 1, 1, 1, False),  # overlapping windows
        ((2, 2, 20), 3, 2, 1, 3, True),  # dilation
        ((1, 1, 5), 2, 2, 1, 1, True),  # ceil_mode drops a window starting in right padding
        ((1, 1, 3), 5, 1, 2, 1, False),  # window larger than the input
        ((3, 12), (4,), [3], (2,), (1,), True),  # unbatched, 1-tuples and lists
        ((3, 12), 1, 2, 0, 1, True)],
    3: [((2, 3, 4, 6, 6), 2, None, 0, 1, False),
        ((2, 2, 5, 7, 6), 3, 2, 1, 1, False),
        ((2, 2, 5, 7, 6), 3, 2, 1, 1, True),
        ((1, 2, 6, 7, 8), (1, 2, 3), (1, 2, 2), (0, 1, 1), 1, False),
        ((1, 2, 7, 8, 9), (2, 3, 2), (2, 1, 3), (1, 1, 0), (2, 1, 2), True),
        ((1, 2, 5, 5, 5), 3, 1, 1, 1, False),  # overlapping windows
        ((1, 1, 3, 5, 5), 2, 2, 1, 1, True),
        ((2, 4, 5, 6), 2, None, 0, 1, False),  # unbatched (C, D, H, W)
        ((2, 4, 5, 6), (3,), [2], 1, 1, True)],
}


@pytest.mark.parametrize("k,case", [(k, c) for k in (1, 3) for c in CONFIGS[k]])
def test_matches_torch_float32(k, case):
    shape, *args = case
    assert_same_as_torch(k, normal(shape), *args)


@pytest.mark.parametrize("k,case", [(k, c) for k in (1, 3) for c in CONFIGS[k][1:3]])
def test_matches_torch_float64_with_int64_indices(k, case):
    shape, *args = case
    x = normal(shape, np.float64)
    with jax.enable_x64(True):
        out, idx = POOL[k](x, *args, index_dtype=jnp.int64)
        assert out.dtype == jnp.float64 and idx.dtype == jnp.int64
        t_out, t_idx = torch_pool(k, x, *args)
        np.testing.assert_array_equal(np.asarray(out), t_out)
        np.testing.assert_array_equal(np.asarray(idx), t_idx)


@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("dtype", [np.float16, np.int8, np.uint8, np.int16, np.int32])
def test_other_dtypes_match_torch(k, dtype):
    shape = (2, 3, 11) if k == 1 else (2, 2, 5, 6, 5)
    rng = np.random.default_rng(1)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
        x[0, 0] = info.min  # a plane of dtype-min values next to the padding
    else:
        x = normal(shape, dtype)
    assert_same_as_torch(k, x, 3, 2, 1, 1, True)


@pytest.mark.parametrize("k", [1, 3])
def test_ties_nan_and_infinities_match_torch(k):
    shape = (1, 2, 12) if k == 1 else (1, 2, 4, 4, 4)
    x = np.zeros(shape, np.float32)  # all ties: the first of each window wins
    flat = x.reshape(-1)
    flat[[1, 5, 6, 9]] = [NAN, -INF, NAN, INF]
    x[0, 1] = -INF  # a plane of -inf next to the padding: padding is never selected
    assert_same_as_torch(k, x, 3, 2, 1)
    assert_same_as_torch(k, x, 2, 2, 0, 1, True)


@pytest.mark.parametrize("fmt", ["NWC", "WC", "NDHWC", "DHWC"])
def test_channels_last_equals_moved_channels_first(fmt):
    k = 1 if "D" not in fmt else 3
    first = "NC" + fmt[1:-1] if fmt.startswith("N") else "C" + fmt[:-1]
    shape = (2, 3, 13) if k == 1 else (2, 3, 5, 6, 7)
    x = normal(shape if fmt.startswith("N") else shape[1:])
    out, idx = POOL[k](x, 3, 2, 1, 1, True, data_format=first)
    last_x = np.moveaxis(x, -k - 1, -1)
    l_out, l_idx = POOL[k](last_x, 3, 2, 1, 1, True, data_format=fmt)
    np.testing.assert_array_equal(l_out, np.moveaxis(np.asarray(out), -k - 1, -1))
    np.testing.assert_array_equal(l_idx, np.moveaxis(np.asarray(idx), -k - 1, -1))


@pytest.mark.parametrize("k,args", [(1, (3, 2, 1)), (1, (3, 1, 1)), (3, (2,)),
                                    (3, (3, 1, 1))])
def test_gradient_matches_torch(k, args):
    shape = (2, 3, 14) if k == 1 else (2, 2, 4, 5, 6)
    x = normal(shape, np.float64)
    xt = torch.from_numpy(x).requires_grad_(True)
    t_out, _ = TORCH[k](xt, *args, return_indices=True)
    ct = normal(tuple(t_out.shape), np.float64, seed=5)
    (t_out * torch.from_numpy(ct)).sum().backward()
    with jax.enable_x64(True):
        _, vjp = jax.vjp(lambda x: POOL[k](x, *args)[0], x)
        np.testing.assert_allclose(vjp(ct)[0], xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("k", [1, 3])
def test_gradients_to_order_two(k):
    shape = (2, 2, 9) if k == 1 else (1, 2, 4, 4, 4)
    x = normal(shape, np.float64, seed=3)  # distinct values: the argmax is stable
    with jax.enable_x64(True):
        check_grads(lambda x: POOL[k](x, 3, 2, 1)[0], (jnp.asarray(x),), order=2,
                    modes=("fwd", "rev"))


@pytest.mark.parametrize("k", [1, 3])
def test_pool_then_unpool_round_trip_under_jit_and_vmap(k):
    unpool = {1: ju.max_unpool1d, 3: ju.max_unpool3d}[k]
    shape = (3, 2, 2, 8) if k == 1 else (3, 2, 2, 4, 4, 4)
    x = normal(shape)

    def f(x):
        y, i = POOL[k](x, 2)
        return unpool(y, i, 2)

    out = jax.jit(jax.vmap(f))(x)
    # Each kept value is the max of its window, and it sits where it came from.
    want = np.stack([np.asarray(f(x[b])) for b in range(3)])
    np.testing.assert_array_equal(out, want)
    kept = np.asarray(out) != 0
    np.testing.assert_array_equal(np.asarray(out)[kept], x[kept])
    assert kept.sum() == x.size // 2 ** k


@pytest.mark.parametrize("fn,args,message", [
    (ju.max_pool1d_with_indices, ((2, 3, 4, 5), 2),
     r"max_pool1d_with_indices: x must be 2-D or 3-D \(C, W\) or \(N, C, W\), got a 4-D"),
    (ju.max_pool3d_with_indices, ((2, 3, 4), 2),
     r"max_pool3d_with_indices: x must be 4-D or 5-D \(C, D, H, W\) or \(N, C, D, H, W\)"),
    (ju.max_pool3d_with_indices, ((1, 1, 4, 4, 4), (2, 2)),
     r"max_pool3d_with_indices: kernel_size must be an int or a triple of ints \(d, h, w\), "
     r"got \(2, 2\)"),
    (ju.max_pool1d_with_indices, ((1, 1, 8), (2, 2)),
     r"max_pool1d_with_indices: kernel_size must be an int or a 1-tuple \(w,\), got \(2, 2\)"),
    (ju.max_pool3d_with_indices, ((1, 1, 4, 4, 4), 2, None, 2),
     r"max_pool3d_with_indices: padding must be at most half of kernel_size"),
])
def test_errors_name_the_function_and_argument(fn, args, message):
    shape, *rest = args
    with pytest.raises((ValueError, TypeError), match=message):
        fn(jnp.zeros(shape), *rest)


def test_data_format_of_another_rank_is_refused():
    with pytest.raises(ValueError, match=r"max_pool3d_with_indices: data_format must be one of "
                                         r"'NCDHW', 'CDHW', 'NDHWC', 'DHWC', got 'NCHW'"):
        ju.max_pool3d_with_indices(jnp.zeros((1, 1, 4, 4, 4)), 2, data_format="NCHW")
