"""The pools' derivatives, every rank: gradients against torch's autograd, forward mode,
higher orders, layouts and vmap; and how the gradient lowers. Where windows cannot overlap
the gradient is an unpool into the input plane (the native kernel; issue 14); elsewhere a
sum into the argmax positions (issue 36: in dense ops). Both must equal torch's.

The comparisons on random inputs need torch (`needs_torch`); tests/ops/test_golden_torch.py
covers every rank's gradient on fixed inputs without it. The 1-D and 3-D cases and the
grid run under `pytest -m slow`."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from torch_oracle import F, needs_torch, one_torch_thread, torch, torch_pool, torch_pool_grad

import jax_unpool as ju
from jax_unpool._compat import enable_x64

POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
XLA_POOL = {k: getattr(ju.reference, f"max_pool{k}d_with_indices") for k in (1, 2, 3)}
GRID_SHAPES = {1: (2, 3, 11), 2: (2, 3, 7, 8), 3: (1, 2, 5, 6, 7)}
FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
SLOW = pytest.mark.slow


def normal(shape, dtype=np.float32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# (k, x shape, pool arguments, dtype): float32 inputs of small integers (ties; the everyday
# 2-D cases), float64 normal ones (the 1-D and 3-D cases, slow).
TORCH_CASES = [
    pytest.param(2, (2, 3, 8, 8), (2, 2), "float32", id="2d-disjoint"),
    # overlapping windows: cotangents add up
    pytest.param(2, (2, 3, 9, 9), (3, 1, 1), "float32", id="2d-overlapping"),
    pytest.param(2, (1, 2, 9, 8), (3, 2, 1, 1, True), "float32", id="2d-ceil_mode"),
    pytest.param(2, (1, 2, 11, 10), ((3, 2), (2, 1), (1, 1), (2, 3), True), "float32",
                 id="2d-dilation"),
    pytest.param(2, (3, 8, 8), (3, 1, 1), "float32", id="2d-unbatched"),
    pytest.param(1, (2, 3, 14), (3, 2, 1), "float64", marks=SLOW, id="1d-0"),
    pytest.param(1, (2, 3, 14), (3, 1, 1), "float64", marks=SLOW, id="1d-1"),
    pytest.param(3, (2, 2, 4, 5, 6), (2,), "float64", marks=SLOW, id="3d-0"),
    pytest.param(3, (2, 2, 4, 5, 6), (3, 1, 1), "float64", marks=SLOW, id="3d-1"),
]


@needs_torch
@pytest.mark.parametrize("k,shape,args,dtype", TORCH_CASES)
def test_gradient_matches_torch(k, shape, args, dtype):
    if dtype == "float32":
        x = np.random.default_rng(6).integers(0, 4, shape).astype(np.float32)  # ties too
        ct = normal(POOL[k](x, *args)[0].shape, seed=7)
        # overlapping windows sum in another order than torch: float32 rounding apart
        tolerance = {"rtol": 1e-6, "atol": 1e-6}
    else:
        x = normal(shape, np.float64)
        ct = normal(torch_pool(k, x, *args)[0].shape, np.float64, seed=5)
        tolerance = {"rtol": 1e-12}
    expected = torch_pool_grad(k, x, ct, *args)
    with enable_x64(dtype == "float64"):
        for pool in (POOL[k], XLA_POOL[k]):
            if dtype == "float32":
                grad = jax.jit(jax.grad(lambda v, pool=pool: (pool(v, *args)[0] * ct).sum()))(x)
            else:
                _, vjp = jax.vjp(lambda v, pool=pool: pool(v, *args)[0], x)
                grad = vjp(ct)[0]
            np.testing.assert_allclose(np.asarray(grad), expected, **tolerance)


def test_gradient_nhwc_is_transposed_nchw_gradient():
    x = normal((2, 3, 9, 9))
    g = normal((2, 3, 9, 9), seed=8)
    loss = lambda v, fmt, gg: (ju.max_pool2d_with_indices(v, 3, 1, 1, data_format=fmt)[0]
                               * gg).sum()
    grad_first = jax.grad(loss)(x, "NCHW", g)
    grad_last = jax.grad(loss)(x.transpose(0, 2, 3, 1), "NHWC", g.transpose(0, 2, 3, 1))
    expected = np.asarray(grad_first).transpose(0, 2, 3, 1)
    np.testing.assert_allclose(np.asarray(grad_last), expected, rtol=1e-6)


def test_vmapped_gradient_equals_batched_gradient():
    x = normal((4, 2, 8, 8))
    loss = lambda v: (ju.max_pool2d_with_indices(v, 3, 1, 1)[0] ** 2).sum()
    batched = jax.vmap(jax.grad(loss))(x)
    np.testing.assert_allclose(np.asarray(batched), np.asarray(jax.grad(loss)(x)), rtol=1e-6)


def test_jvp_gathers_tangent_at_argmax_and_indices_get_float0():
    x = normal((1, 2, 6, 6))
    t = normal((1, 2, 6, 6), seed=9)
    (_, idx), (t_out, t_idx) = jax.jvp(lambda v: ju.max_pool2d_with_indices(v, 3, 1, 1),
                                         (x,), (t,))
    expected = np.take_along_axis(t.reshape(1, 2, 36), np.asarray(idx).reshape(1, 2, 36), axis=2)
    np.testing.assert_array_equal(np.asarray(t_out), expected.reshape(t_out.shape))
    assert t_idx.dtype == jax.dtypes.float0


def test_integer_input_under_jvp_has_float0_tangent():
    x = np.arange(32, dtype=np.int32).reshape(2, 4, 4)
    zero = np.zeros(x.shape, jax.dtypes.float0)
    (out, _), (t_out, _) = jax.jvp(lambda v: ju.max_pool2d_with_indices(v, 2), (x,), (zero,))
    np.testing.assert_array_equal(np.asarray(out), [[[5, 7], [13, 15]], [[21, 23], [29, 31]]])
    assert t_out.dtype == jax.dtypes.float0


@SLOW
@pytest.mark.parametrize("k", [1, 3])
def test_gradients_to_order_two(k):
    shape = (2, 2, 9) if k == 1 else (1, 2, 4, 4, 4)
    x = normal(shape, np.float64, seed=3)  # distinct values: the argmax is stable
    with enable_x64(True):
        check_grads(lambda x: POOL[k](x, 3, 2, 1)[0], (jnp.asarray(x),), order=2,
                    modes=("fwd", "rev"))


# ------------------------------------------------------------------ the grid, every rank


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


@SLOW
@needs_torch
@pytest.mark.parametrize("k,kern,s,p,d,ceil,last,index_dtype", _grid())
def test_gradient_grid_matches_torch(k, kern, s, p, d, ceil, last, index_dtype):
    args = (kern, s, p, d, ceil)
    x = normal(GRID_SHAPES[k], seed=kern * 100 + s * 10 + p + d)  # distinct: one argmax
    ct = normal(torch_pool(k, x, *args)[0].shape, seed=1)
    expected = torch_pool_grad(k, x, ct, *args)
    move = (lambda a: np.moveaxis(a, 1, -1)) if last else (lambda a: a)
    with enable_x64(index_dtype == "int64"):
        _, vjp = jax.vjp(lambda v: POOL[k](v, *args, data_format=FORMATS[k][last],
                                           index_dtype=index_dtype)[0], move(x))
        grad = vjp(move(ct))[0]
    # Overlapping windows sum in another order than torch: float32 rounding apart.
    np.testing.assert_allclose(np.asarray(grad), move(expected), rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------ disjoint windows

# (rank, x shape, kernel, stride, padding, dilation, ceil_mode): windows never overlap.
DISJOINT = [(1, (2, 3, 13), 3, 3, 1, 1, True), (1, (2, 3, 16), 2, 2, 0, 1, False),
            (2, (2, 3, 9, 10), 3, 3, 1, 1, True), (2, (2, 3, 8, 9), (2, 3), (3, 5), 1, (1, 2),
                                                   True),
            (3, (1, 2, 5, 7, 6), 2, 2, 1, 1, True), (3, (1, 2, 4, 6, 8), (1, 2, 2), None, 0, 1,
                                                     False)]


@SLOW
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
    (out, idx), vjp = jax.vjp(lambda v: POOL[k](v, *args, data_format=fmt), x)
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


@SLOW
@pytest.mark.parametrize("case", DISJOINT)
@pytest.mark.parametrize("last", [False, True])
def test_disjoint_windows_gradient_lowers_to_the_unpool_kernel(case, last):
    k, shape, *args = case
    fmt = FORMATS[k][last]
    x = jnp.zeros(np.moveaxis(np.empty(shape), 1, -1).shape if last else shape)
    loss = lambda v: POOL[k](v, *args, data_format=fmt)[0].sum()
    text = jax.jit(jax.grad(loss)).lower(x).as_text()
    assert "jax_unpool_max_unpool_v2" in text
    assert "scatter" not in text


@SLOW
@pytest.mark.parametrize("k", [1, 2, 3])
def test_overlapping_windows_gradient_is_a_dense_sum(k):
    # The counterpart of the test above: with stride < dilated extent the unpool kernel
    # would be wrong (an input position may win several windows); the gradient adds in
    # dense XLA ops instead (tests/ops/test_dense_lowering.py), no scatter-add.
    loss = lambda v: POOL[k](v, 3, 2, 1)[0].sum()
    text = jax.jit(jax.grad(loss)).lower(jnp.zeros(GRID_SHAPES[k])).as_text()
    assert "scatter" not in text and "jax_unpool_max_unpool_v2" not in text


@SLOW
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


@SLOW
@pytest.mark.parametrize("k", [1, 2, 3])
def test_float4_gradient_with_disjoint_windows(k):
    # The unpool kernels move whole bytes only: packed float4 takes XLA's gather instead.
    x = normal(GRID_SHAPES[k], seed=7).astype(jnp.float4_e2m1fn)
    (out, idx), vjp = jax.vjp(lambda v: POOL[k](v, 2), x)
    ct = normal(out.shape, seed=8).astype(jnp.float4_e2m1fn)
    (grad,) = vjp((ct, np.zeros(idx.shape, jax.dtypes.float0)))
    # Oracle: each cotangent at its window's argmax (distinct positions: disjoint windows).
    n, c = x.shape[:2]
    want = np.zeros((n, c, x[0, 0].size), np.float32)
    flat_idx, flat_ct = np.asarray(idx).reshape(n, c, -1), np.asarray(ct, np.float32)
    np.put_along_axis(want, flat_idx, flat_ct.reshape(n, c, -1), axis=2)
    assert grad.dtype == jnp.float4_e2m1fn
    np.testing.assert_array_equal(np.asarray(grad, np.float32), want.reshape(x.shape))
    _, ref_vjp = jax.vjp(lambda v: XLA_POOL[k](v, 2), x)
    np.testing.assert_array_equal(np.asarray(ref_vjp((ct, np.zeros(idx.shape,
                                                                   jax.dtypes.float0)))[0],
                                             np.float32), want.reshape(x.shape))


@SLOW
@needs_torch
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


@SLOW
@pytest.mark.parametrize("case", DISJOINT[::2])
def test_disjoint_windows_gradients_to_order_two(case):
    k, shape, *args = case
    x = normal(shape, np.float64, seed=4)
    with enable_x64(True):
        check_grads(lambda v: POOL[k](v, *args)[0] ** 2, (jnp.asarray(x),), order=2,
                    modes=("fwd", "rev"))


@SLOW
@pytest.mark.parametrize("k", [1, 2, 3])
def test_reference_pool_gradient_stays_xla_scatter_add_with_the_same_values(k):
    # jax_unpool.reference is the pure-XLA baseline: its pools' gradient is a scatter-add
    # even where the public functions go through the unpool kernel.
    x = normal(GRID_SHAPES[k], seed=6)
    ref_loss = lambda v: (XLA_POOL[k](v, 2)[0] ** 2).sum()
    loss = lambda v: (POOL[k](v, 2)[0] ** 2).sum()
    text = jax.jit(jax.grad(ref_loss)).lower(x).as_text()
    assert "scatter" in text and "jax_unpool_max_unpool_v2" not in text
    np.testing.assert_array_equal(np.asarray(jax.grad(ref_loss)(x)), np.asarray(jax.grad(loss)(x)))
