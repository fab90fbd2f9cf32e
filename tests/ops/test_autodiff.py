"""JVP, transpose and higher-order derivatives of both primitives."""

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from jax.test_util import check_grads
from torch_oracle import needs_torch, torch

import jax_unpool as ju
from jax_unpool._compat import enable_x64

LAYOUTS = ["NCHW", "NHWC"]


def _pooled(rng, layout, shape=(2, 3, 3, 4)):
    """Values and unique indices (as a 2x2 max-pool gives them) in float64."""
    if layout == "NHWC":
        shape = (shape[0], shape[2], shape[3], shape[1])
    idx, hw = oracle.pool_indices(rng, shape, channels_last=layout == "NHWC")
    return rng.standard_normal(shape), idx, hw


@pytest.mark.parametrize("layout", LAYOUTS)
def test_forward_gradients_to_order_two(rng, layout):
    x, idx, hw = _pooled(rng, layout)
    with enable_x64(True):
        f = lambda x: ju.max_unpool2d(x, idx, output_size=hw, data_format=layout)
        check_grads(f, (jnp.asarray(x),), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_backward_gradients_to_order_two(rng, layout):
    x, idx, hw = _pooled(rng, layout)
    h = 1 if layout == "NHWC" else 2
    g = rng.standard_normal((*x.shape[:h], *hw, *x.shape[h + 2:]))
    with enable_x64(True):
        f = lambda g: ju.max_unpool2d_backward(g, x, idx, hw, data_format=layout)
        check_grads(f, (jnp.asarray(g),), order=2, modes=("fwd", "rev"))


def test_linear_transpose_of_forward_is_the_gather(rng):
    x, idx, hw = _pooled(rng, "NCHW")
    x = x.astype(np.float32)
    f_t = jax.linear_transpose(lambda t: ju.max_unpool2d(t, idx, output_size=hw), x)
    ct = rng.standard_normal((*x.shape[:2], *hw)).astype(np.float32)
    np.testing.assert_array_equal(f_t(ct)[0], oracle.gather(ct, idx))


def test_linear_transpose_of_backward_is_the_scatter(rng):
    x, idx, hw = _pooled(rng, "NCHW")
    g = rng.standard_normal((*x.shape[:2], *hw)).astype(np.float32)
    f_t = jax.linear_transpose(lambda g: ju.max_unpool2d_backward(g, x, idx, hw), g)
    ct = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_array_equal(f_t(ct)[0], oracle.unpool(ct, idx, hw))


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_transpose_identity(rng, op):
    # <ct, f(t)> == <f^T(ct), t> with unique indices (a max-pool's).
    x, idx, hw = _pooled(rng, "NCHW")
    g_shape = (*x.shape[:2], *hw)
    if op == "forward":
        f = lambda t: ju.max_unpool2d(t, idx, output_size=hw)
        t, ct = rng.standard_normal(x.shape), rng.standard_normal(g_shape)
    else:
        f = lambda t: ju.max_unpool2d_backward(t, x, idx, hw)
        t, ct = rng.standard_normal(g_shape), rng.standard_normal(x.shape)
    with enable_x64(True):
        (f_t_ct,) = jax.linear_transpose(f, t)(ct)
        lhs, rhs = jnp.vdot(ct, f(t)), jnp.vdot(f_t_ct, t)
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12)


def test_hessian_through_the_unpool(rng):
    x, idx, hw = _pooled(rng, "NCHW", shape=(1, 2, 2, 2))
    with enable_x64(True):
        f = lambda x: jnp.sum(ju.max_unpool2d(x, idx, output_size=hw) ** 3)
        hess = jax.hessian(f)(jnp.asarray(x)).reshape(x.size, x.size)
    np.testing.assert_allclose(hess, np.diag(6 * x.ravel()), rtol=1e-12)


def test_jvp_is_the_op_applied_to_the_tangent(rng):
    x, idx, hw = _pooled(rng, "NCHW")
    t = rng.standard_normal(x.shape)
    with enable_x64(True):
        _, out_t = jax.jvp(lambda x: ju.max_unpool2d(x, idx, output_size=hw), (x,), (t,))
    np.testing.assert_array_equal(out_t, oracle.unpool(t, idx, hw))


def test_indices_get_a_float0_gradient(rng):
    x, idx, hw = _pooled(rng, "NCHW")
    x = x.astype(np.float32)
    f = lambda x, i: ju.max_unpool2d(x, i, output_size=hw).sum()
    gx, gi = jax.grad(f, argnums=(0, 1), allow_int=True)(x, idx)
    assert gi.dtype == jax.dtypes.float0 and gi.shape == idx.shape
    np.testing.assert_array_equal(gx, np.ones_like(x))


def test_duplicates_gradient_follows_pytorch(rng):
    # Every duplicate receives the gradient of its output position, as in PyTorch/CANN.
    x = jnp.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    idx = jnp.array([[[[0, 0], [1, 1]]]], jnp.int32)
    ct = jnp.array([[[[5.0, 7.0]]]])
    _, vjp = jax.vjp(lambda x: ju.max_unpool2d(x, idx, output_size=(1, 2)), x)
    np.testing.assert_array_equal(vjp(ct)[0].ravel(), [5.0, 5.0, 7.0, 7.0])


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_the_reference_is_differentiable(rng, op):
    x, idx, hw = _pooled(rng, "NCHW")
    g = rng.standard_normal((*x.shape[:2], *hw))
    with enable_x64(True):
        if op == "forward":
            f, arg = (lambda x: ju.reference.max_unpool2d(x, idx, output_size=hw)), x
        else:
            f, arg = (lambda g: ju.reference.max_unpool2d_backward(g, x, idx, hw)), g
        check_grads(f, (jnp.asarray(arg),), order=2, modes=("fwd", "rev"))


# Duplicated indices: positions 0, 1 and 2 of the plane all name output 0.
DUP_X = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
DUP_IDX = np.array([[[[0, 0], [0, 1]]]], np.int32)


@needs_torch
def test_reference_first_derivatives_with_duplicates_follow_pytorch():
    # Reverse mode is PyTorch's gather (every duplicate reads its output's gradient);
    # forward mode unpools the tangent, the largest position winning as in the values
    # (PyTorch's own forward mode is max_unpool2d of the tangent, whose winner among
    # duplicates PyTorch leaves unspecified, so the numpy oracle stands in for it).
    idx_torch = torch.from_numpy(DUP_IDX).long()
    t, ct = np.array([[[[1.0, 10.0], [100.0, 1000.0]]]]), np.array([[[[5.0, 7.0]]]])
    x_torch = torch.from_numpy(DUP_X).requires_grad_()
    torch.ops.aten.max_unpool2d(x_torch, idx_torch, [1, 2]).backward(torch.from_numpy(ct))
    with enable_x64(True):
        f = lambda x: ju.reference.max_unpool2d(x, DUP_IDX, output_size=(1, 2))
        vjp = jax.vjp(f, DUP_X)[1](ct)[0]
        jvp = jax.jvp(f, (DUP_X,), (t,))[1]
    np.testing.assert_array_equal(vjp, x_torch.grad.numpy())  # [5, 5, 5, 7]
    np.testing.assert_array_equal(jvp, oracle.unpool(t, DUP_IDX, (1, 2)))  # [100, 1000]


def test_reference_backward_first_derivatives_with_duplicates():
    # Reverse mode scatters with the largest position winning (the primitive's transpose is
    # max_unpool2d); forward mode is the gather of the tangent.
    g, ct = np.array([[[[5.0, 7.0]]]]), np.arange(1.0, 5.0).reshape(DUP_X.shape)
    with enable_x64(True):
        f = lambda g: ju.reference.max_unpool2d_backward(g, DUP_X, DUP_IDX, (1, 2))
        vjp = jax.vjp(f, g)[1](ct)[0]
        jvp = jax.jvp(f, (g,), (g,))[1]
    np.testing.assert_array_equal(vjp.ravel(), [3.0, 4.0])
    np.testing.assert_array_equal(jvp.ravel(), [5.0, 5.0, 5.0, 7.0])


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_reference_second_derivatives_with_duplicates_equal_the_primitives(op):
    # Forward and reverse mode differ with duplicates, so every nesting is compared.
    g = np.array([[[[5.0, 7.0]]]])
    if op == "forward":
        f = lambda m, x: m.max_unpool2d(x, DUP_IDX, output_size=(1, 2))
        arg = DUP_X
    else:
        f = lambda m, g: m.max_unpool2d_backward(g, DUP_X, DUP_IDX, (1, 2))
        arg = g
    nestings = [(jax.jacfwd, jax.jacfwd), (jax.jacfwd, jax.jacrev),
                (jax.jacrev, jax.jacfwd), (jax.jacrev, jax.jacrev)]
    with enable_x64(True):
        for outer, inner in nestings:
            want = outer(inner(lambda a: jnp.sum(f(ju, a) ** 3)))(arg)
            got = outer(inner(lambda a: jnp.sum(f(ju.reference, a) ** 3)))(arg)
            np.testing.assert_array_equal(got, want, err_msg=f"{outer.__name__} of "
                                                              f"{inner.__name__}")


@pytest.mark.parametrize("k,layout", [(1, "NCW"), (2, "NCHW"), (2, "NHWC"), (3, "NCDHW")])
def test_reference_linear_transpose_is_the_other_op_as_for_the_primitives(rng, k, layout):
    # jax.linear_transpose traces the reference's primal (custom_jvp rules are for
    # differentiation only); with duplicated indices its transposes are still the
    # primitives': the gather (every duplicate reads) and the scatter (largest position
    # wins), which the numpy oracles compute.
    last = layout.endswith("C")
    n_c, size = (2, 3), (3,) * k
    small = (2,) * k
    shape = (2, *small, 3) if last else (*n_c, *small)
    out_shape = (2, *size, 3) if last else (*n_c, *size)
    idx = oracle.random_indices(rng, shape, 3**k).astype(np.int32)
    x = rng.standard_normal(shape).astype(np.float32)
    ct = rng.standard_normal(out_shape).astype(np.float32)
    fwd, bwd = f"max_unpool{k}d", f"max_unpool{k}d_backward"
    ref_fwd_t = jax.linear_transpose(
        lambda v: getattr(ju.reference, fwd)(v, idx, output_size=size, data_format=layout), x)
    api_fwd_t = jax.linear_transpose(
        lambda v: getattr(ju, fwd)(v, idx, output_size=size, data_format=layout), x)
    want = oracle.gather_nd(ct, idx, k, last)
    np.testing.assert_array_equal(ref_fwd_t(ct)[0], want)
    np.testing.assert_array_equal(api_fwd_t(ct)[0], want)
    ref_bwd_t = jax.linear_transpose(
        lambda g: getattr(ju.reference, bwd)(g, x, idx, size, data_format=layout), ct)
    api_bwd_t = jax.linear_transpose(
        lambda g: getattr(ju, bwd)(g, x, idx, size, data_format=layout), ct)
    want = oracle.unpool_nd(x, idx, size, last)
    np.testing.assert_array_equal(jax.jit(ref_bwd_t)(x)[0], want)
    np.testing.assert_array_equal(api_bwd_t(x)[0], want)
