"""Where each op runs: the FFI custom call on CPU, the jnp reference elsewhere."""

import re

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


# Every rank and layout of the pools, and an x pooled by 2 per axis.
POOL_CASES = [(1, "NCW", (2, 3, 8)), (1, "NWC", (2, 8, 3)), (2, "NCHW", (2, 3, 8, 8)),
              (2, "HWC", (8, 8, 3)), (3, "NCDHW", (1, 2, 4, 4, 4)), (3, "NDHWC", (1, 4, 4, 4, 2))]


def _pool_step(pool, fmt):
    return jax.value_and_grad(lambda v: pool(v, 2, data_format=fmt)[0].sum())


@pytest.mark.parametrize("k,fmt,shape", POOL_CASES)
def test_cpu_pools_compile_to_the_native_pool(k, fmt, shape):
    # Compiled, not lowered: channels last is partitioned per shard (custom_partitioning)
    # and gets its FFI call when XLA partitions it.
    pool = getattr(ju, f"max_pool{k}d_with_indices")
    hlo = jax.jit(_pool_step(pool, fmt)).lower(jnp.zeros(shape)).compile().as_text()
    targets = re.findall(r'custom_call_target="([^"]+)"', hlo)
    assert [t for t in targets if t.startswith("jax_unpool_max_pool")] == [
        "jax_unpool_max_pool_v1"]
    assert "jax_unpool_max_unpool_v2" in targets  # the gradient, windows being disjoint


@pytest.mark.parametrize("k,fmt,shape", POOL_CASES)
def test_reference_pools_stay_xla_ops(k, fmt, shape):
    pool = getattr(ju.reference, f"max_pool{k}d_with_indices")
    text = jax.jit(_pool_step(pool, fmt)).lower(jnp.zeros(shape)).as_text()
    assert "custom_call" not in text


def test_other_platforms_lower_the_pools_to_xla_ops():
    exported = jax.export.export(jax.jit(_pool_step(ju.max_pool2d_with_indices, "NCHW")),
                                 platforms=("cuda",))(jax.ShapeDtypeStruct((2, 3, 8, 8),
                                                                           jnp.float32))
    assert "custom_call" not in exported.mlir_module()
