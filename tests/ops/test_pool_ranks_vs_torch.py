"""max_pool1d_with_indices / max_pool3d_with_indices: parity with torch's max_pool1d/3d
(return_indices=True) -- values, indices, ties, NaN, padding, ceil_mode, dilation, dtypes,
layouts -- and their gradients, for both implementations where they differ: the public
functions (on CPU the native kernel) and jax_unpool.reference's (XLA ops)."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from jax.test_util import check_grads
from torch_threads import one_torch_thread

import jax_unpool as ju
from jax_unpool._compat import enable_x64

pytestmark = pytest.mark.slow

POOL = {1: ju.max_pool1d_with_indices, 3: ju.max_pool3d_with_indices}
XLA_POOL = {1: ju.reference.max_pool1d_with_indices, 3: ju.reference.max_pool3d_with_indices}
TORCH = {1: F.max_pool1d, 3: F.max_pool3d}
NAN, INF = np.nan, np.inf


def torch_pool(k, x, *args, **kwargs):
    out, idx = TORCH[k](torch.from_numpy(np.ascontiguousarray(x)), *args,
                        return_indices=True, **kwargs)
    return out.numpy(), idx.numpy()


def assert_same_as_torch(k, x, *args, **kwargs):
    t_out, t_idx = torch_pool(k, x, *args, **kwargs)
    for pool in (POOL[k], XLA_POOL[k]):
        out, idx = pool(x, *args, **kwargs)
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
    t_out, t_idx = torch_pool(k, x, *args)
    with enable_x64(True):
        for pool in (POOL[k], XLA_POOL[k]):
            out, idx = pool(x, *args, index_dtype=jnp.int64)
            assert out.dtype == jnp.float64 and idx.dtype == jnp.int64
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
    with enable_x64(True):
        for pool in (POOL[k], XLA_POOL[k]):
            _, vjp = jax.vjp(lambda x, pool=pool: pool(x, *args)[0], x)
            np.testing.assert_allclose(vjp(ct)[0], xt.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("k", [1, 3])
def test_gradients_to_order_two(k):
    shape = (2, 2, 9) if k == 1 else (1, 2, 4, 4, 4)
    x = normal(shape, np.float64, seed=3)  # distinct values: the argmax is stable
    with enable_x64(True):
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
     r"max_pool1d_with_indices: x must have rank 2 \(C, W\) or 3 \(N, C, W\), got rank 4"),
    (ju.max_pool3d_with_indices, ((2, 3, 4), 2),
     r"max_pool3d_with_indices: x must have rank 4 \(C, D, H, W\) or 5 \(N, C, D, H, W\)"),
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
                                         r"\['CDHW', 'DHWC', 'NCDHW', 'NDHWC'\], got 'NCHW'"):
        ju.max_pool3d_with_indices(jnp.zeros((1, 1, 4, 4, 4)), 2, data_format="NCHW")


# ------------------------------------------------------------------ gradient, every rank
# Issue 14: where windows cannot overlap the gradient is an unpool into the input plane
# (the native kernel); elsewhere a sum into the argmax positions (issue 36: in dense ops).
# Both must equal torch's.

POOL_ALL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
            3: ju.max_pool3d_with_indices}
TORCH_ALL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
GRID_SHAPES = {1: (2, 3, 11), 2: (2, 3, 7, 8), 3: (1, 2, 5, 6, 7)}
FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


def _grid():
    """(rank, kernel, stride, padding, dilation, ceil_mode, channels_last, index dtype);
    the layout and index dtype cycle through the geometries so that each meets both."""
    cases = []
    for k in (1, 2, 3):
        i = 0
        for kern in (1, 2, 3):
            for s in (1, 2, 3, 5):
                for p in range(kern // 2 + 1):
                    for d in (1, 2) if kern > 1 else (1,):
                        for ceil in (False, True):
                            cases.append((k, kern, s, p, d, ceil, i % 2 == 1,
                                          "int64" if (i // 2) % 2 else "int32"))
                            i += 1
    return cases


def _torch_grad(k, x, ct, args):
    xt = torch.from_numpy(x).requires_grad_(True)
    out, _ = TORCH_ALL[k](xt, *args, return_indices=True)
    (out * torch.from_numpy(ct)).sum().backward()
    return xt.grad.numpy()


@pytest.mark.parametrize("k,kern,s,p,d,ceil,last,index_dtype", _grid())
def test_gradient_grid_matches_torch(k, kern, s, p, d, ceil, last, index_dtype):
    args = (kern, s, p, d, ceil)
    x = normal(GRID_SHAPES[k], seed=kern * 100 + s * 10 + p + d)  # distinct: one argmax
    t_out, _ = TORCH_ALL[k](torch.from_numpy(x), *args, return_indices=True)
    ct = normal(tuple(t_out.shape), seed=1)
    expected = _torch_grad(k, x, ct, args)
    move = (lambda a: np.moveaxis(a, 1, -1)) if last else (lambda a: a)
    with enable_x64(index_dtype == "int64"):
        _, vjp = jax.vjp(lambda v: POOL_ALL[k](v, *args, data_format=FORMATS[k][last],
                                               index_dtype=index_dtype)[0], move(x))
        grad = vjp(move(ct))[0]
    # Overlapping windows sum in another order than torch: float32 rounding apart.
    np.testing.assert_allclose(np.asarray(grad), move(expected), rtol=1e-6, atol=1e-6)


# (rank, x shape, kernel, stride, padding, dilation, ceil_mode): windows never overlap.
DISJOINT = [(1, (2, 3, 13), 3, 3, 1, 1, True), (1, (2, 3, 16), 2, 2, 0, 1, False),
            (2, (2, 3, 9, 10), 3, 3, 1, 1, True), (2, (2, 3, 8, 9), (2, 3), (3, 5), 1, (1, 2),
                                                   True),
            (3, (1, 2, 5, 7, 6), 2, 2, 1, 1, True), (3, (1, 2, 4, 6, 8), (1, 2, 2), None, 0, 1,
                                                     False)]


@pytest.mark.parametrize("case", DISJOINT)
@pytest.mark.parametrize("last", [False, True])
def test_disjoint_windows_gradient_is_bit_identical_to_scatter_add(case, last):
    # The oracle is what the gradient was before issue 14 (and what torch computes):
    # zeros, then each cotangent added at its argmax -- bit for bit.
    k, shape, *args = case
    x = normal(shape, seed=2)
    fmt = FORMATS[k][last]
    if last:
        x = np.moveaxis(x, 1, -1)
    (out, idx), vjp = jax.vjp(lambda v: POOL_ALL[k](v, *args, data_format=fmt), x)
    ct = normal(out.shape, seed=3)
    grad = np.asarray(vjp((ct, np.zeros(idx.shape, jax.dtypes.float0)))[0])
    c_axis = -1 if last else 1
    planes = lambda a: np.moveaxis(np.asarray(a), c_axis, 1).reshape(a.shape[0],
                                                                     a.shape[c_axis], -1)
    expected = np.zeros(planes(x).shape, np.float32)
    for n in range(expected.shape[0]):
        for c in range(expected.shape[1]):
            np.add.at(expected[n, c], planes(idx)[n, c], planes(ct)[n, c])
    np.testing.assert_array_equal(planes(grad).view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("case", DISJOINT)
@pytest.mark.parametrize("last", [False, True])
def test_disjoint_windows_gradient_lowers_to_the_unpool_kernel(case, last):
    k, shape, *args = case
    fmt = FORMATS[k][last]
    x = jnp.zeros(np.moveaxis(np.empty(shape), 1, -1).shape if last else shape)
    loss = lambda v: POOL_ALL[k](v, *args, data_format=fmt)[0].sum()
    text = jax.jit(jax.grad(loss)).lower(x).as_text()
    assert "jax_unpool_max_unpool_v2" in text
    assert "scatter" not in text


@pytest.mark.parametrize("k", [1, 2, 3])
def test_overlapping_windows_gradient_is_a_dense_sum(k):
    # The counterpart of the test above: with stride < dilated extent the unpool kernel
    # would be wrong (an input position may win several windows); the gradient adds in
    # dense XLA ops instead (tests/ops/test_dense_lowering.py), no scatter-add.
    loss = lambda v: POOL_ALL[k](v, 3, 2, 1)[0].sum()
    text = jax.jit(jax.grad(loss)).lower(jnp.zeros(GRID_SHAPES[k])).as_text()
    assert "scatter" not in text and "jax_unpool_max_unpool_v2" not in text


def test_all_padding_windows_past_the_plane_are_dropped_not_an_error():
    # Width 1, kernel 3, dilation 2, padding 1, ceil_mode: windows cannot overlap
    # (stride 5 >= extent 5), but every window holds only padding; PyTorch's quirk
    # gives indices h * 1 + 1 = 1, 2, 3 for a plane of 3 elements. The gradient adds
    # ct[0] at 1 and ct[1] at 2 and drops ct[2] (the unpool kernel would refuse 3).
    x = np.arange(3, dtype=np.float32).reshape(1, 1, 3, 1)
    args = ((1, 3), (1, 5), (0, 1), (1, 2), True)
    (out, idx), vjp = jax.vjp(lambda v: ju.max_pool2d_with_indices(v, *args), x)
    np.testing.assert_array_equal(np.asarray(idx).ravel(), [1, 2, 3])
    ct = np.array([10.0, 20.0, 30.0], np.float32).reshape(out.shape)
    grad = jax.jit(lambda c: vjp((c, np.zeros(idx.shape, jax.dtypes.float0)))[0])(ct)
    np.testing.assert_array_equal(np.asarray(grad).ravel(), [0.0, 10.0, 20.0])


@pytest.mark.parametrize("k", [1, 2, 3])
def test_float4_gradient_with_disjoint_windows(k):
    # The unpool kernels move whole bytes only: packed float4 takes XLA's gather instead.
    x = normal(GRID_SHAPES[k], seed=7).astype(jnp.float4_e2m1fn)
    (out, idx), vjp = jax.vjp(lambda v: POOL_ALL[k](v, 2), x)
    ct = normal(out.shape, seed=8).astype(jnp.float4_e2m1fn)
    (grad,) = vjp((ct, np.zeros(idx.shape, jax.dtypes.float0)))
    # Oracle: each cotangent at its window's argmax (distinct positions: disjoint windows).
    n, c = x.shape[:2]
    want = np.zeros((n, c, x[0, 0].size), np.float32)
    flat_idx, flat_ct = np.asarray(idx).reshape(n, c, -1), np.asarray(ct, np.float32)
    np.put_along_axis(want, flat_idx, flat_ct.reshape(n, c, -1), axis=2)
    assert grad.dtype == jnp.float4_e2m1fn
    np.testing.assert_array_equal(np.asarray(grad, np.float32), want.reshape(x.shape))
    ref_pool = getattr(ju.reference, f"max_pool{k}d_with_indices")
    _, ref_vjp = jax.vjp(lambda v: ref_pool(v, 2), x)
    np.testing.assert_array_equal(np.asarray(ref_vjp((ct, np.zeros(idx.shape,
                                                                   jax.dtypes.float0)))[0],
                                             np.float32), want.reshape(x.shape))


def test_torch_backward_adds_an_index_past_the_plane_into_the_next_plane():
    # What the docs say of PyTorch's CPU backward (cpu_max_pool_backward adds at each
    # index unchecked), shown without writing past a buffer: plane 0 gets the indices
    # torch's forward gives the case above (3 lies past its 3 elements), plane 1
    # in-plane ones. Plane 0's third cotangent lands on plane 1's first element.
    args = ((1, 3), (1, 5), (0, 1), (1, 2), True)
    x = torch.zeros(1, 2, 3, 1)
    assert F.max_pool2d(x, *args, return_indices=True)[1].flatten().tolist() == [1, 2, 3] * 2
    idx = torch.tensor([1, 2, 3, 0, 1, 2]).reshape(1, 2, 3, 1)
    ct = torch.tensor([10.0, 20.0, 30.0, 1.0, 2.0, 4.0]).reshape(1, 2, 3, 1)
    # One thread: torch splits the planes across threads, and two threads adding to one
    # element race (seen in CI: plane 1's own 1.0 was lost).
    with one_torch_thread():
        grad = torch.ops.aten.max_pool2d_with_indices_backward(ct, x, *args, idx)
    assert grad.flatten().tolist() == [0.0, 10.0, 20.0, 30.0 + 1.0, 2.0, 4.0]


@pytest.mark.parametrize("case", DISJOINT[::2])
def test_disjoint_windows_gradients_to_order_two(case):
    k, shape, *args = case
    x = normal(shape, np.float64, seed=4)
    with enable_x64(True):
        check_grads(lambda v: POOL_ALL[k](v, *args)[0] ** 2, (jnp.asarray(x),), order=2,
                    modes=("fwd", "rev"))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_reference_pool_gradient_stays_xla_scatter_add_with_the_same_values(k):
    # jax_unpool.reference is the pure-XLA baseline: its pools' gradient is a scatter-add
    # even where the public functions go through the unpool kernel.
    x = normal(GRID_SHAPES[k], seed=6)
    ref_loss = lambda v: (getattr(ju.reference, f"max_pool{k}d_with_indices")(v, 2)[0] ** 2).sum()
    loss = lambda v: (POOL_ALL[k](v, 2)[0] ** 2).sum()
    text = jax.jit(jax.grad(ref_loss)).lower(x).as_text()
    assert "scatter" in text and "jax_unpool_max_unpool_v2" not in text
    np.testing.assert_array_equal(np.asarray(jax.grad(ref_loss)(x)), np.asarray(jax.grad(loss)(x)))


HUGE_KERNELS = """
import sys
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import jax.numpy as jnp
sys.path.insert(0, sys.argv[1])
from numpy_oracle import max_pool
from jax_unpool import reference
rng = np.random.default_rng(0)
cases = [  # (x, kernel, padding, index dtype): windows far larger than the input
    (rng.standard_normal((2, 3, 7)), 2**20, 2**19, jnp.int32),
    (rng.standard_normal((1, 2, 5, 5)), 2**31 - 1, 2**30 - 1, jnp.int64),
    (rng.standard_normal((1, 2, 5, 5)), 2**31 - 1, 2**30 - 1, jnp.int32),
    (rng.integers(-8, 8, (1, 1, 5, 5)), 21, 10, jnp.int32),
]
for x, kernel, padding, index_dtype in cases:
    k = x.ndim - 2
    pool = getattr(reference, f"max_pool{k}d_with_indices")
    dtype = jnp.int4 if x.dtype.kind == "i" else jnp.float32
    values, indices = pool(jnp.asarray(x, dtype), kernel, 1, padding, index_dtype=index_dtype)
    want = max_pool(np.asarray(jnp.asarray(x, dtype)).astype(np.float64), (kernel,) * k,
                    (1,) * k, (padding,) * k, (1,) * k, False)
    np.testing.assert_array_equal(np.asarray(values, np.float64), want[0])
    np.testing.assert_array_equal(indices, want[1])
    assert indices.dtype == index_dtype
print("ok")
"""


def test_the_xla_ops_pool_of_a_huge_kernel_costs_the_input_not_the_kernel():
    """The XLA-ops pool (the reference, and the pools' lowering on GPU/TPU and for sub-byte
    dtypes on CPU) walks only the taps that land inside the input: a kernel of 2**31 - 1
    over a 5x5 plane traces and runs like a small one, values and indices as PyTorch's
    loop (before: a Python loop over every tap, which never finished). In a child process
    with a timeout, so that a regression fails instead of hanging the suite."""
    from fresh_process import HELPERS, child_env
    proc = subprocess.run([sys.executable, "-c", HUGE_KERNELS, str(HELPERS)], env=child_env(),
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


@pytest.mark.parametrize("fn,torch_fn,shape,args", [
    (ju.max_pool1d_with_indices, F.max_pool1d, (1, 2, 2), (2, 1, 1, 3)),
    (ju.max_pool2d_with_indices, F.max_pool2d, (1, 2, 2, 2), ((1, 2), 1, (0, 1), (1, 3))),
    (ju.max_pool3d_with_indices, F.max_pool3d, (1, 1, 2, 2, 2), ((1, 1, 2), 1, (0, 0, 1),
                                                                   (1, 1, 3))),
], ids=["1d", "2d", "3d"])
def test_windows_of_padding_only_without_ceil_mode_match_torch(rng, fn, torch_fn, shape, args):
    """A dilation that steps over the whole input makes windows of padding only without
    ceil_mode too: -inf and the index of the first tap right of the left padding (past
    the row), as PyTorch returns them; the gradient of an index inside the plane lands on
    the next row's element in both."""
    x = rng.standard_normal(shape).astype(np.float32)
    want_v, want_i = torch_fn(torch.from_numpy(x), *args, ceil_mode=False, return_indices=True)
    for pool in (fn, getattr(ju.reference, fn.__name__)):
        values, indices = pool(jnp.asarray(x), *args)
        np.testing.assert_array_equal(values, want_v.numpy())
        np.testing.assert_array_equal(indices, want_i.numpy())
    assert np.isneginf(np.asarray(values)).any()


def test_int32_indices_suffice_when_every_index_lies_in_the_plane():
    """The int32 guard counts the taps inside the input, not the last tap of a huge kernel
    that lies in the padding: a 5x5 plane's indices are below 25 whatever the kernel."""
    x = jax.ShapeDtypeStruct((1, 1, 5, 5), jnp.float32)
    values, indices = jax.eval_shape(
        lambda x: ju.max_pool2d_with_indices(x, 2**31 - 1, 1, 2**30 - 1), x)
    assert indices.dtype == jnp.int32 and indices.shape == values.shape == (1, 1, 5, 5)
    with pytest.raises(ValueError, match="index_dtype int32 cannot hold the flat indices"):
        jax.eval_shape(lambda x: ju.max_pool2d_with_indices(x, 2, 1, 1),
                       jax.ShapeDtypeStruct((1, 1, 2**16, 2**16), jnp.float32))


def test_the_int32_guard_never_undercounts_the_largest_index(rng):
    """The guard's bound on the flat indices, per axis, is at least the largest position
    any window can report: an in-bounds tap of any window (an earlier window may reach
    further than the last one when the input clips it) or the initial index of a window of
    padding only. Checked by listing every window's taps on random 1-D geometries."""
    from jax_unpool import _geometry

    checked = 0
    while checked < 500:
        n, k, d, s = (int(v) for v in rng.integers(1, [12, 6, 5, 5]))
        p, ceil_mode = int(rng.integers(0, k // 2 + 1)), bool(rng.integers(0, 2))
        try:
            g = _geometry.pool_geometry("f", (1, 1, n), (k,), (s,), (p,), (d,), ceil_mode,
                                        False, np.dtype(np.int64))
        except ValueError:  # output size not positive
            continue
        reported = 0
        for o in range(g.out_size[0]):
            taps = [o * s - p + j * d for j in range(k) if 0 <= o * s - p + j * d < n]
            reported = max(reported, max(taps) if taps else g.first_in_bounds(0, o))
        bound = _geometry.largest_index(g)
        assert bound >= reported, (n, k, d, s, p, ceil_mode, bound, reported)
        checked += 1
