"""Flax Linen layers: channels-last by default, batched or one example, the oracles' values,
indices and gradients (numpy loops, and PyTorch where installed), through jax.jit on
init/apply, nn.jit and jax.vmap; a small SegNet trains; `import jax_unpool` never needs
Flax."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import layer_oracle as oracle
import numpy as np
import optax
import pytest
from layer_oracle import normal

import jax_unpool as ju
from jax_unpool.linen import MaxPool1d, MaxPool2d, MaxPool3d, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d

LAYERS = {1: (MaxPool1d, MaxUnpool1d), 2: (MaxPool2d, MaxUnpool2d), 3: (MaxPool3d, MaxUnpool3d)}


def rbg_key():
    """threefry's random bits take seconds to compile on CPU, per shape; rbg's do not."""
    return jax.random.key(0, impl="rbg")


first = lambda a: np.moveaxis(np.asarray(a), -1, 1)  # channels last -> first (batched)
last = lambda a: np.moveaxis(np.asarray(a), 1, -1)


@pytest.mark.parametrize("which", oracle.ORACLES)
@pytest.mark.parametrize("k, config", oracle.CASES)
def test_layers_are_channels_last_and_match_the_oracle(rng, k, config, which):
    kernel_size, stride, padding, _, _ = config
    pool, unpool = LAYERS[k][0](*config), LAYERS[k][1](kernel_size, stride, padding)
    x = normal(rng, (2, *oracle.SPATIAL[k], 3))  # (N, *spatial, C)
    values, indices = pool.apply({}, x)
    out = unpool.apply({}, values, indices, output_size=oracle.SPATIAL[k])
    want_values, want_indices, want_out = oracle.pool_unpool(which, k, first(x), *config)
    np.testing.assert_array_equal(values, last(want_values))
    np.testing.assert_array_equal(indices, last(want_indices))
    np.testing.assert_array_equal(out, last(want_out))


def test_one_example(rng):
    x = normal(rng, (2, 9, 8, 3))
    values, indices = MaxPool2d(2).apply({}, x[0])  # (H, W, C)
    want_values, want_indices = MaxPool2d(2).apply({}, x)
    np.testing.assert_array_equal(values, want_values[0])
    np.testing.assert_array_equal(indices, want_indices[0])
    np.testing.assert_array_equal(MaxUnpool2d(2).apply({}, values, indices, (9, 8)),
                                  MaxUnpool2d(2).apply({}, want_values, want_indices, (9, 8))[0])


def test_channels_first_data_format(rng):
    x = normal(rng, (2, 3, 9, 8))
    config = ((3, 2), (2, 1), (1, 0), (1, 2), False)  # positional, dilation included
    values, indices = MaxPool2d(*config, data_format="NCHW").apply({}, x)
    want_values, want_indices = ju.max_pool2d_with_indices(x, *config)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(
        MaxUnpool2d(2, data_format="NCHW").apply({}, values, indices),
        ju.max_unpool2d(values, indices, 2))


def test_init_has_no_variables_and_apply_jits(rng):
    x = normal(rng, (2, 8, 8, 3))
    pool = MaxPool2d(2)
    assert jax.jit(pool.init)(jax.random.key(0), x) == {}
    values, indices = jax.jit(pool.apply)({}, x)
    want_values, want_indices = pool.apply({}, x)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


class PoolUnpool(nn.Module):
    """conv -> pool -> unpool, channels last."""

    @nn.compact
    def __call__(self, x):
        h = nn.Conv(4, (3, 3))(x)
        values, indices = MaxPool2d(2)(h)
        return MaxUnpool2d(2)(values, indices, output_size=h.shape)


def test_nn_jit_and_vmap_over_examples(rng):
    x = normal(rng, (3, 8, 8, 2))
    model = PoolUnpool()
    params = jax.jit(model.init)(rbg_key(), x)
    want = model.apply(params, x)
    np.testing.assert_array_equal(nn.jit(PoolUnpool)().apply(params, x), want)
    one_at_a_time = jax.vmap(lambda example: model.apply(params, example))(x)
    np.testing.assert_allclose(one_at_a_time, want, rtol=1e-6, atol=1e-6)
    assert np.count_nonzero(want) == want.size // 4  # one maximum per 2x2 window, kept


@pytest.mark.parametrize("which", oracle.ORACLES)
def test_gradient_under_jax_jit_matches_the_oracle(rng, which):
    # Overlapping windows (kernel 3, stride 2): an input can be the argmax of two windows.
    pool, unpool = MaxPool2d(3, 2, 1), MaxUnpool2d(3, 2, 1)
    x, weights = normal(rng, (2, 9, 8, 3)), normal(rng, (2, 9, 8, 3))

    def loss(x):
        values, indices = pool.apply({}, x)
        return jnp.sum(weights * unpool.apply({}, values**2, indices, output_size=x.shape))

    value, grad = jax.jit(jax.value_and_grad(loss))(x)
    want_value, want_grad = oracle.unpool_loss(which, first(x), first(weights))
    np.testing.assert_allclose(value, want_value, rtol=1e-5)
    np.testing.assert_allclose(grad, last(want_grad), rtol=1e-5, atol=1e-6)
    assert np.count_nonzero(grad) > 0


def test_a_bad_argument_reaches_the_function_error(rng):
    x = normal(rng, (2, 8, 8, 3))
    with pytest.raises(ValueError, match="max_pool3d_with_indices: x must have rank 4 .* or 5 "):
        MaxPool3d(2).apply({}, x[0])  # a 3-D array


@pytest.mark.parametrize("data_format", ["NCWH", 7, "", ["NHWC"]])
def test_a_bad_data_format_is_refused_when_the_layer_is_built(data_format):
    # As the NNX layers: not at the first call (7 gave "object of type 'int' has no
    # len()"), and "" is not the default.
    for layer in (MaxPool2d, MaxUnpool2d):
        with pytest.raises(ValueError, match=rf"^{layer.__name__}: data_format must be one "
                                             r"of \['CHW', 'HWC', 'NCHW', 'NHWC'\] or None"):
            layer(2, data_format=data_format)


class SegNet(nn.Module):
    """conv -> pool -> conv -> unpool -> conv, channels last."""

    @nn.compact
    def __call__(self, x):
        h = nn.relu(nn.Conv(8, (3, 3))(x))
        values, indices = MaxPool2d(2)(h)
        up = MaxUnpool2d(2)(nn.relu(nn.Conv(8, (3, 3))(values)), indices, output_size=h.shape)
        return nn.Conv(1, (3, 3))(up)


def test_segnet_trains(rng):
    x = normal(rng, (8, 16, 16, 1))
    target = (x > 0.5).astype(jnp.float32)  # a per-pixel mask to segment
    model = SegNet()
    params = jax.jit(model.init)(rbg_key(), x)
    optimizer = optax.adam(1e-2)
    state = optimizer.init(params)

    def loss(params):
        return optax.sigmoid_binary_cross_entropy(model.apply(params, x), target).mean()

    @jax.jit
    def step(params, state):
        value, grads = jax.value_and_grad(loss)(params)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value, grads

    losses = []
    for i in range(20):
        params, state, value, grads = step(params, state)
        if i == 0:  # the first convolution's gradient crosses both layers
            assert np.abs(grads["params"]["Conv_0"]["kernel"]).max() > 0
        losses.append(float(value))
    assert losses[-1] < 0.8 * losses[0], losses


def test_import_jax_unpool_neither_imports_nor_needs_flax():
    assert oracle.import_error_without("flax", "linen") == (
        "jax_unpool.linen needs Flax, an optional extra: pip install 'jax-unpool[flax]'")
