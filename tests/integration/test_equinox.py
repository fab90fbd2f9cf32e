"""Equinox layers: one channels-first example per call (jax.vmap for a batch), the oracles'
values, indices and gradients (numpy loops, and PyTorch where installed), through
eqx.filter_jit and eqx.filter_value_and_grad; a small SegNet trains; `import jax_unpool`
never needs Equinox."""

import equinox as eqx
import jax
import jax.numpy as jnp
import layer_oracle as oracle
import numpy as np
import optax
import pytest
from layer_oracle import normal

import jax_unpool as ju
from jax_unpool.equinox import (
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    MaxUnpool1d,
    MaxUnpool2d,
    MaxUnpool3d,
)

LAYERS = {1: (MaxPool1d, MaxUnpool1d), 2: (MaxPool2d, MaxUnpool2d), 3: (MaxPool3d, MaxUnpool3d)}


@pytest.mark.parametrize("which", oracle.ORACLES)
@pytest.mark.parametrize("k, config", oracle.CASES)
def test_vmapped_layers_match_the_oracle(rng, k, config, which):
    kernel_size, stride, padding, _, _ = config
    pool, unpool = LAYERS[k][0](*config), LAYERS[k][1](kernel_size, stride, padding)
    x = normal(rng, (2, 3, *oracle.SPATIAL[k]))  # a batch: the layers see one example each
    values, indices = jax.vmap(pool)(x)
    out = jax.vmap(lambda v, i: unpool(v, i, output_size=oracle.SPATIAL[k]))(values, indices)
    want_values, want_indices, want_out = oracle.pool_unpool(which, k, x, *config)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(out, want_out)


def test_pool_is_the_functions_unbatched_call(rng):
    x = normal(rng, (3, 9, 8))
    config = ((3, 2), (2, 1), (1, 0), (1, 2), False)  # positional, dilation included
    values, indices = MaxPool2d(*config)(x, key=jax.random.key(0))
    want_values, want_indices = ju.max_pool2d_with_indices(x, *config)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


@pytest.mark.parametrize("output_size", [None, (8, 8), (3, 8, 8)])
def test_unpool_output_size_spellings(rng, output_size):
    values, indices = MaxPool2d(2)(normal(rng, (3, 8, 8)))
    out = MaxUnpool2d(2)(values, indices, output_size)
    assert out.shape == (3, 8, 8)
    np.testing.assert_array_equal(out, ju.max_unpool2d(values, indices, 2, output_size=(8, 8)))


def loss(x, pool, unpool, weights):
    """Both layers on one example: its gradient crosses the pool and the unpool."""
    values, indices = pool(x)
    return jnp.sum(weights * unpool(values**2, indices, output_size=x.shape))


@pytest.mark.parametrize("which", oracle.ORACLES)
def test_filter_value_and_grad_matches_the_oracle(rng, which):
    # Overlapping windows (kernel 3, stride 2): an input can be the argmax of two windows.
    pool, unpool = MaxPool2d(3, 2, 1), MaxUnpool2d(3, 2, 1)
    x, weights = normal(rng, (3, 9, 8)), normal(rng, (3, 9, 8))
    value, grad = eqx.filter_jit(eqx.filter_value_and_grad(loss))(x, pool, unpool, weights)
    want_value, want_grad = oracle.unpool_loss(which, x, weights)
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(grad) > 0


def test_layers_have_no_array_leaves():
    assert jax.tree.leaves(MaxPool2d(3, 2, 1, 1, True)) == []
    assert jax.tree.leaves(MaxUnpool2d(3, 2, 1)) == []


def test_list_hyperparameters_become_tuples():
    # An eqx.Module is Hashable (a static jit argument, a cache key): a list field is not.
    pool = MaxPool2d([3, 2], [2, 1], [1, 0], [1, 2])
    assert pool == MaxPool2d((3, 2), (2, 1), (1, 0), (1, 2))
    assert hash(pool) == hash(MaxPool2d((3, 2), (2, 1), (1, 0), (1, 2)))
    assert hash(MaxUnpool2d([3, 2], [2, 1], [1, 0])) == hash(MaxUnpool2d((3, 2), (2, 1), (1, 0)))


@pytest.mark.parametrize("shape", [(2, 3, 8, 8), (8, 8)])
def test_pool_refuses_anything_but_one_example(shape):
    with pytest.raises(ValueError, match=(
            r"jax_unpool.equinox.MaxPool2d: x must be one example \(C, H, W\) of rank 3, got "
            rf"rank {len(shape)} with shape \({', '.join(map(str, shape))}\); Equinox layers "
            r"take one example: for a batch use jax.vmap\(layer\)\(x\)")):
        MaxPool2d(2)(jnp.zeros(shape))


def test_unpool_refuses_a_batch():
    y = jnp.zeros((2, 3, 4, 4, 4))
    with pytest.raises(ValueError, match=(
            r"jax_unpool.equinox.MaxUnpool3d: y must be one example \(C, D, H, W\) of rank 4, "
            r"got rank 5 .* for a batch use jax.vmap\(layer\)\(y, indices\)")):
        MaxUnpool3d(2)(y, y.astype(jnp.int32))


def test_a_bad_argument_reaches_the_function_error():
    with pytest.raises(ValueError, match=r"max_pool1d_with_indices: padding must be at most "
                                         r"half of kernel_size"):
        MaxPool1d(2, padding=2)(jnp.zeros((3, 8)))
    with pytest.raises(ValueError, match=r"max_unpool1d: indices must have the shape of x"):
        MaxUnpool1d(2)(jnp.zeros((3, 4)), jnp.zeros((3, 5), jnp.int32))


class SegNet(eqx.Module):
    """conv -> pool -> conv -> unpool -> conv on one (C, H, W) example."""

    enc: eqx.nn.Conv2d
    mid: eqx.nn.Conv2d
    dec: eqx.nn.Conv2d
    pool: MaxPool2d
    unpool: MaxUnpool2d

    def __init__(self, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.enc = eqx.nn.Conv2d(1, 8, 3, padding=1, key=k1)
        self.mid = eqx.nn.Conv2d(8, 8, 3, padding=1, key=k2)
        self.dec = eqx.nn.Conv2d(8, 1, 3, padding=1, key=k3)
        self.pool, self.unpool = MaxPool2d(2), MaxUnpool2d(2)

    def __call__(self, x):
        h = jax.nn.relu(self.enc(x))
        values, indices = self.pool(h)
        up = self.unpool(jax.nn.relu(self.mid(values)), indices, output_size=h.shape)
        return self.dec(up)


def test_segnet_trains(rng):
    x = normal(rng, (8, 1, 16, 16))
    target = (x > 0.5).astype(jnp.float32)  # a per-pixel mask to segment
    # An rbg key: threefry's random bits take seconds to compile on CPU, per shape.
    model = SegNet(jax.random.key(0, impl="rbg"))
    optimizer = optax.adam(1e-2)
    state = optimizer.init(eqx.filter(model, eqx.is_array))

    def batch_loss(model, x, target):
        logits = jax.vmap(model)(x)
        return optax.sigmoid_binary_cross_entropy(logits, target).mean()

    @eqx.filter_jit
    def step(model, state):
        value, grads = eqx.filter_value_and_grad(batch_loss)(model, x, target)
        updates, state = optimizer.update(grads, state, model)
        return eqx.apply_updates(model, updates), state, value, grads

    losses = []
    for i in range(20):
        model, state, value, grads = step(model, state)
        if i == 0:  # the encoder's gradient crosses both layers
            assert np.abs(grads.enc.weight).max() > 0
        losses.append(float(value))
    assert losses[-1] < 0.8 * losses[0], losses


def test_import_jax_unpool_neither_imports_nor_needs_equinox():
    assert oracle.import_error_without("equinox", "equinox") == (
        "jax_unpool.equinox needs Equinox, an optional extra: pip install 'jax-unpool[equinox]'")
