"""Where each op runs: the FFI custom call on CPU, the jnp reference elsewhere."""

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest

import jax_unpool as ju


def _step(idx, hw, data_format="NCHW"):
    def loss(x):
        return jnp.sum(ju.max_unpool2d(x, idx, output_size=hw, data_format=data_format) ** 2)
    return jax.value_and_grad(loss)


@pytest.mark.jax_window
def test_cpu_forward_and_grad_lower_to_the_ffi_calls_only(rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    idx, hw = oracle.pool_indices(rng, x.shape)
    text = jax.jit(_step(idx, hw)).lower(x).as_text()
    assert "jax_unpool_max_unpool_v2" in text
    assert "jax_unpool_max_unpool_backward_v2" in text
    assert "stablehlo.scatter" not in text and "stablehlo.gather" not in text


@pytest.mark.jax_window
def test_other_platforms_lower_to_the_reference(rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    idx, hw = oracle.pool_indices(rng, x.shape)
    exported = jax.export.export(jax.jit(_step(idx, hw)), platforms=("cuda",))(
        jax.ShapeDtypeStruct(x.shape, x.dtype))
    text = exported.mlir_module()
    assert "custom_call" not in text
    assert "stablehlo.scatter" in text and "stablehlo.gather" in text


def test_jit_equals_eager(rng):
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    idx, hw = oracle.pool_indices(rng, x.shape)
    eager = _step(idx, hw)(x)
    jitted = jax.jit(_step(idx, hw))(x)
    np.testing.assert_allclose(eager[0], jitted[0], rtol=1e-6)  # XLA may fuse the sum
    np.testing.assert_array_equal(eager[1], jitted[1])
    np.testing.assert_array_equal(jitted[1], oracle.gather(2 * oracle.unpool(x, idx, hw), idx))


@pytest.mark.jax_window
@pytest.mark.parametrize("op", ["forward", "backward"])
def test_eager_primitive_bind_runs(rng, op):
    x = rng.standard_normal((1, 2, 2, 2)).astype(np.float32)
    idx, hw = oracle.pool_indices(rng, x.shape)
    if op == "forward":
        out = ju.max_unpool2d_p.bind(jnp.asarray(x), jnp.asarray(idx), output_size=hw,
                                     channels_last=False)
        np.testing.assert_array_equal(out, oracle.unpool(x, idx, hw))
    else:
        g = rng.standard_normal((1, 2, *hw)).astype(np.float32)
        out = ju.max_unpool2d_backward_p.bind(jnp.asarray(g), jnp.asarray(idx),
                                              channels_last=False)
        np.testing.assert_array_equal(out, oracle.gather(g, idx))
