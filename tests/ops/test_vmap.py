"""vmap folds batch axes into N: every in_axes combination, nested, without a loop."""

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest

import jax_unpool as ju

HW = (4, 6)
BASE = (2, 3, 2, 3)  # (N, C, H, W)


def _data(rng, batch_x, batch_i, x_axis, i_axis, rank):
    base = BASE if rank == 4 else BASE[1:]
    x = rng.standard_normal(base).astype(np.float32)
    idx = oracle.random_indices(rng, base, HW[0] * HW[1])
    if batch_x:
        x = np.stack([x * (k + 1) for k in range(5)], axis=x_axis)
    if batch_i:
        idx = np.stack([np.roll(idx, k, axis=-1) for k in range(5)], axis=i_axis)
    return x, idx


def _take(a, axis, k):
    return a if axis is None else np.take(a, k, axis=axis)


def _primitive_count_and_loops(jaxpr, name):
    text = str(jaxpr)
    return text.count(f" {name}["), ("while" in text or "scan" in text)


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("in_axes", [(0, 0), (0, None), (None, 0), (1, 2), (-1, None),
                                     (None, -1)])
def test_forward_vmap_in_axes(rng, in_axes, rank):
    xa, ia = in_axes
    x, idx = _data(rng, xa is not None, ia is not None, xa or 0, ia or 0, rank)
    f = lambda x, i: ju.max_unpool2d(x, i, output_size=HW)
    out = jax.vmap(f, in_axes=in_axes)(x, idx)
    for k in range(5):
        np.testing.assert_array_equal(
            out[k], oracle.unpool(_take(x, xa, k), _take(idx, ia, k), HW))
    count, loops = _primitive_count_and_loops(jax.make_jaxpr(jax.vmap(f, in_axes))(x, idx),
                                              "max_unpool2d")
    assert count == 1 and not loops


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("in_axes", [(0, 0), (0, None), (None, 0), (2, 1)])
def test_backward_vmap_in_axes(rng, in_axes, rank):
    ga, ia = in_axes
    base = BASE if rank == 4 else BASE[1:]
    gbase = (*base[:-2], *HW)
    g = rng.standard_normal(gbase).astype(np.float32)
    idx = oracle.random_indices(rng, base, HW[0] * HW[1])
    if ga is not None:
        g = np.stack([g * (k + 1) for k in range(5)], axis=ga)
    if ia is not None:
        idx = np.stack([np.roll(idx, k, axis=-1) for k in range(5)], axis=ia)
    x = jax.ShapeDtypeStruct(base, jnp.float32)
    f = lambda g, i: ju.max_unpool2d_backward(g, x, i, HW)
    out = jax.vmap(f, in_axes=in_axes)(g, idx)
    for k in range(5):
        np.testing.assert_array_equal(out[k], oracle.gather(_take(g, ga, k), _take(idx, ia, k)))
    count, loops = _primitive_count_and_loops(jax.make_jaxpr(jax.vmap(f, in_axes))(g, idx),
                                              "max_unpool2d_backward")
    assert count == 1 and not loops


def test_nested_vmap_with_unbatched_indices_inside(rng):
    x = rng.standard_normal((4, 3, *BASE)).astype(np.float32)
    idx = oracle.random_indices(rng, (3, *BASE), HW[0] * HW[1])
    f = lambda x, i: ju.max_unpool2d(x, i, output_size=HW)
    g = jax.vmap(jax.vmap(f, in_axes=(0, 0)), in_axes=(0, None))
    out = jax.jit(g)(x, idx)
    for a in range(4):
        for b in range(3):
            np.testing.assert_array_equal(out[a, b], oracle.unpool(x[a, b], idx[b], HW))
    count, loops = _primitive_count_and_loops(jax.make_jaxpr(g)(x, idx), "max_unpool2d")
    assert count == 1 and not loops


def test_vmap_of_grad(rng):
    x = rng.standard_normal((5, *BASE)).astype(np.float32)
    idx, hw = oracle.pool_indices(rng, BASE)
    ct = rng.standard_normal((*BASE[:2], *hw)).astype(np.float32)
    f = lambda x: jnp.vdot(ct, ju.max_unpool2d(x, idx, output_size=hw))
    grads = jax.vmap(jax.grad(f))(x)
    for k in range(5):
        np.testing.assert_array_equal(grads[k], oracle.gather(ct, idx))


# vmap over an empty axis: the result is empty too, with every other dim in place.
EMPTY = (0, *BASE)  # (B=0, N, C, H, W)


def test_forward_vmap_over_an_empty_axis():
    f = lambda x, i: ju.max_unpool2d(x, i, output_size=HW)
    out = jax.vmap(f)(jnp.zeros(EMPTY), jnp.zeros(EMPTY, jnp.int32))
    assert out.shape == (0, *BASE[:2], *HW) and out.dtype == jnp.float32


def test_backward_vmap_over_an_empty_axis():
    x = jax.ShapeDtypeStruct(BASE, jnp.float32)
    f = lambda g, i: ju.max_unpool2d_backward(g, x, i, HW)
    out = jax.vmap(f)(jnp.zeros((0, *BASE[:2], *HW)), jnp.zeros(EMPTY, jnp.int32))
    assert out.shape == EMPTY and out.dtype == jnp.float32


def test_vmap_of_grad_over_an_empty_axis():
    f = lambda x, i: ju.max_unpool2d(x, i, output_size=HW).sum()
    grads = jax.vmap(jax.grad(f))(jnp.zeros(EMPTY), jnp.zeros(EMPTY, jnp.int32))
    assert grads.shape == EMPTY and grads.dtype == jnp.float32
