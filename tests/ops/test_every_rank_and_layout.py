"""Each spatial rank (1, 2, 3) in both layouts through the public functions: unpooling,
its backward and pooling, under jit, grad and vmap, against numpy loops.

Torch-free and quick, so marked `jax_window`: they also run on the newest patch release
of every jax minor the package supports (tests/integration/test_jax_window.py)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest

import jax_unpool as ju
from jax_unpool._compat import enable_x64

pytestmark = pytest.mark.jax_window

FORMATS = ["NCW", "NWC", "NCHW", "NHWC", "NCDHW", "NDHWC"]
UNPOOL = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}
BACKWARD = {1: ju.max_unpool1d_backward, 2: ju.max_unpool2d_backward,
            3: ju.max_unpool3d_backward}
POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
# Spatial sizes of the pooled input and of the unpooled output, per rank.
SMALL = {1: (5,), 2: (3, 4), 3: (2, 3, 2)}
LARGE = {1: (9,), 2: (5, 6), 3: (3, 4, 5)}


def rank(fmt: str) -> int:
    return len(fmt) - 2


def shape(fmt: str, spatial: tuple[int, ...], n: int = 2, c: int = 3) -> tuple[int, ...]:
    dims = {"N": n, "C": c, **dict(zip("DHW"[3 - len(spatial):], spatial))}
    return tuple(dims[d] for d in fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_unpool_and_its_backward_equal_numpy_loops(rng, fmt):
    k, last = rank(fmt), fmt.endswith("C")
    x = rng.standard_normal(shape(fmt, SMALL[k])).astype(np.float32)
    idx = oracle.random_indices(rng, x.shape, math.prod(LARGE[k]))  # with duplicates
    out = jax.jit(lambda x, i: UNPOOL[k](x, i, output_size=LARGE[k], data_format=fmt))(x, idx)
    np.testing.assert_array_equal(out, oracle.unpool_nd(x, idx, LARGE[k], last))
    g = rng.standard_normal(shape(fmt, LARGE[k])).astype(np.float32)
    back = jax.jit(lambda g, i: BACKWARD[k](g, x, i, LARGE[k], data_format=fmt))(g, idx)
    np.testing.assert_array_equal(back, oracle.gather_nd(g, idx, k, last))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_float64_values_and_int64_indices_under_x64(rng, k):
    fmt = "NC" + "DHW"[3 - k:]
    x = rng.standard_normal(shape(fmt, SMALL[k]))
    idx = oracle.random_indices(rng, x.shape, math.prod(LARGE[k]), np.int64)
    with enable_x64(True):
        out = jax.jit(lambda x, i: UNPOOL[k](x, i, output_size=LARGE[k]))(x, idx)
        assert out.dtype == jnp.float64
    np.testing.assert_array_equal(out, oracle.unpool_nd(x, idx, LARGE[k]))


@pytest.mark.parametrize("fmt", ["NCW", "NHWC", "NCDHW"])
def test_vmap_of_jit_of_grad_of_both_ops_equals_numpy_loops(rng, fmt):
    # d/dx sum(unpool(x) * w) gathers w at the indices; d/dg sum(backward(g) * v)
    # scatters v to them. Each example of the batch has its own indices.
    k, last, batch = rank(fmt), fmt.endswith("C"), 3
    small, large = shape(fmt, SMALL[k]), shape(fmt, LARGE[k])
    x = rng.standard_normal((batch, *small)).astype(np.float32)
    idx = oracle.random_indices(rng, x.shape, math.prod(LARGE[k]))
    w = rng.standard_normal((batch, *large)).astype(np.float32)

    def forward(x, i, w):
        return jnp.sum(UNPOOL[k](x, i, output_size=LARGE[k], data_format=fmt) * w)

    def backward(g, i, v):
        x = jax.ShapeDtypeStruct(small, g.dtype)
        return jnp.sum(BACKWARD[k](g, x, i, LARGE[k], data_format=fmt) * v)

    grads = jax.vmap(jax.jit(jax.grad(forward)))(x, idx, w)
    np.testing.assert_array_equal(
        grads, np.stack([oracle.gather_nd(w[b], idx[b], k, last) for b in range(batch)]))
    grads = jax.vmap(jax.jit(jax.grad(backward)))(w, idx, x)
    np.testing.assert_array_equal(
        grads, np.stack([oracle.unpool_nd(x[b], idx[b], LARGE[k], last)
                         for b in range(batch)]))


@pytest.mark.parametrize("fmt", ["NWC", "NCHW", "NDHWC"])
def test_pool_values_indices_and_gradient_equal_numpy_loops(rng, fmt):
    # kernel 2, stride 2, padding 1: disjoint windows, the edge ones half padding; the
    # gradient scatters the cotangent to the argmax positions (the unpooling kernel).
    k, last = rank(fmt), fmt.endswith("C")
    spatial = {1: (7,), 2: (5, 6), 3: (4, 5, 4)}[k]
    x_shape = shape(fmt, spatial)
    x = rng.permutation(math.prod(x_shape)).reshape(x_shape).astype(np.float32)  # no ties
    values, indices = jax.jit(lambda x: POOL[k](x, 2, 2, 1, data_format=fmt))(x)
    expected_values, expected_indices = oracle.max_pool_nd(x, 2, 2, 1, k, last)
    np.testing.assert_array_equal(values, expected_values)
    np.testing.assert_array_equal(indices, expected_indices)
    w = rng.standard_normal(values.shape).astype(np.float32)
    grad = jax.jit(jax.grad(lambda x: jnp.sum(POOL[k](x, 2, 2, 1, data_format=fmt)[0] * w)))(x)
    np.testing.assert_array_equal(grad, oracle.unpool_nd(w, expected_indices, spatial, last))
