"""Flax NNX layers: NHWC by default, the same results as the functions, through nnx.jit and
nnx.grad; and `import jax_unpool` never needs Flax."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jax_unpool as ju
import jax_unpool.nnx
from jax_unpool import reference
from jax_unpool.nnx import MaxPool2d, MaxUnpool2d

to_nchw = lambda a: jnp.moveaxis(a, -1, -3)  # (N)HWC -> (N)CHW
to_nhwc = lambda a: jnp.moveaxis(a, -3, -1)  # (N)CHW -> (N)HWC

POOLINGS = [  # kernel_size, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    ((3, 2), (2, 1), (1, 0), (1, 2), True),
]


@pytest.fixture
def x(rng):
    return jnp.asarray(rng.standard_normal((2, 9, 8, 3)), jnp.float32)  # N, H, W, C


@pytest.mark.parametrize("config", POOLINGS)
def test_max_pool_is_nhwc_by_default(config, x):
    values, indices = MaxPool2d(*config)(x)
    # The oracle: the NCHW function on the channels-first view, moved back.
    want_values, want_indices = ju.max_pool2d_with_indices(to_nchw(x), *config)
    np.testing.assert_array_equal(values, to_nhwc(want_values))
    np.testing.assert_array_equal(indices, to_nhwc(want_indices))


@pytest.mark.parametrize("kernel_size, stride, padding", [(2, None, 0), (3, 2, 1)])
def test_max_unpool_is_nhwc_by_default(kernel_size, stride, padding, x):
    values, indices = ju.max_pool2d_with_indices(x, kernel_size, stride, padding,
                                                 data_format="NHWC")
    out = MaxUnpool2d(kernel_size, stride, padding)(values, indices, output_size=(9, 8))
    want = reference.max_unpool2d(to_nchw(values), to_nchw(indices), kernel_size, stride,
                                  padding, output_size=(9, 8))
    np.testing.assert_array_equal(out, to_nhwc(want))


def test_max_unpool_default_output_size(x):
    values, indices = MaxPool2d(2)(x[:, :8])  # (2, 8, 8, 3) -> (2, 4, 4, 3)
    out = MaxUnpool2d(2)(values, indices)
    assert out.shape == (2, 8, 8, 3)
    np.testing.assert_array_equal(
        out, to_nhwc(reference.max_unpool2d(to_nchw(values), to_nchw(indices), 2)))


def test_layers_take_one_unbatched_example(x):
    values, indices = MaxPool2d(2)(x[0])  # (H, W, C)
    want_values, want_indices = MaxPool2d(2)(x[:1])
    np.testing.assert_array_equal(values, want_values[0])
    np.testing.assert_array_equal(indices, want_indices[0])
    np.testing.assert_array_equal(MaxUnpool2d(2)(values, indices, (9, 8)),
                                  MaxUnpool2d(2)(want_values, want_indices, (9, 8))[0])


def test_layers_nchw(x):
    nchw = to_nchw(x)
    values, indices = MaxPool2d(2, data_format="NCHW")(nchw)
    want_values, want_indices = ju.max_pool2d_with_indices(nchw, 2)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(
        MaxUnpool2d(2, data_format="NCHW")(values, indices, (9, 8)),
        reference.max_unpool2d(values, indices, 2, output_size=(9, 8)))


def test_layers_have_no_parameters():
    assert not jax.tree.leaves(nnx.state(MaxPool2d(2)))
    assert not jax.tree.leaves(nnx.state(MaxUnpool2d(2)))


@pytest.mark.parametrize("data_format,shown", [
    ("NCWH", "'NCWH'"), (["NHWC"], r"\['NHWC'\]"), (7, "7"), ("", "''"), (0, "0")])
@pytest.mark.parametrize("layer", ["MaxPool1d", "MaxPool2d", "MaxPool3d", "MaxUnpool1d",
                                   "MaxUnpool2d", "MaxUnpool3d"])
def test_a_bad_data_format_is_refused_when_the_layer_is_built(layer, data_format, shown):
    # Not at the first call (where 7 gave "object of type 'int' has no len()"), and an
    # empty or false value is not the default.
    with pytest.raises(ValueError, match=rf"^{layer}: data_format must be one of \[.*\] or "
                                         rf"None, got {shown}$"):
        getattr(jax_unpool.nnx, layer)(2, data_format=data_format)


def test_host_int64_indices_outside_int32_reach_the_function_error(x):
    idx = np.zeros(x.shape, np.int64)
    idx[0, 0, 0, 0] = 2**32 + 3
    with pytest.raises(ValueError, match=r"max_unpool2d: indices must lie in int32's range .*"
                                         r"got 4294967299 at position \(0, 0, 0, 0\)"):
        MaxUnpool2d(2)(x, idx)


class PoolUnpool(nnx.Module):
    """conv -> pool -> unpool -> weighted sum: a loss whose gradient crosses both layers."""

    def __init__(self, rngs):
        self.conv = nnx.Conv(3, 4, (3, 3), padding="SAME", rngs=rngs)
        # Non-overlapping windows: no duplicated index, as reference_loss assumes.
        self.pool = MaxPool2d(2)
        self.unpool = MaxUnpool2d(2)

    def __call__(self, x, weights):
        h = self.conv(x)
        values, indices = self.pool(h)
        return jnp.sum(weights * self.unpool(values, indices, output_size=h.shape))


def reference_loss(kernel, bias, x, weights):
    """The same loss from lax.conv and the pure-jnp reference ops, written so that its
    gradient needs no autodiff rule of the pooling ops: with non-overlapping windows,
    unpool(pool(h)) is h where h has its window's maximum and 0 elsewhere."""
    h = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC")) + bias
    values, indices = reference.max_pool2d_with_indices(h, 2, data_format="NHWC")
    at_max = reference.max_unpool2d(jnp.ones_like(values), indices, 2, output_size=h.shape,
                                    data_format="NHWC")
    return jnp.sum(weights * h * jax.lax.stop_gradient(at_max))


def test_model_under_nnx_jit_and_grad(x, rng):
    model = PoolUnpool(nnx.Rngs(0))
    weights = jnp.asarray(rng.standard_normal((2, 9, 8, 4)), jnp.float32)
    kernel, bias = model.conv.kernel[...], model.conv.bias[...]

    loss = nnx.jit(lambda model, x, w: model(x, w))(model, x, weights)
    np.testing.assert_allclose(loss, reference_loss(kernel, bias, x, weights), rtol=1e-5)

    grads = nnx.jit(nnx.grad(lambda model, x, w: model(x, w)))(model, x, weights)
    want_kernel, want_bias = jax.grad(reference_loss, argnums=(0, 1))(kernel, bias, x, weights)
    np.testing.assert_allclose(grads.conv.kernel[...], want_kernel, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grads.conv.bias[...], want_bias, rtol=1e-5, atol=1e-5)
    assert np.abs(want_kernel).max() > 0  # the gradient does reach the convolution


def run_python(code, tmp_path):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=tmp_path,
                          env=dict(os.environ), capture_output=True, text=True, check=False,
                          timeout=120)


def test_import_jax_unpool_does_not_import_flax(tmp_path):
    result = run_python("""
        import sys
        import jax_unpool
        assert "flax" not in sys.modules, "import jax_unpool imported flax"
        jax_unpool.nnx.MaxPool2d  # the attribute imports it on first use
        assert "flax" in sys.modules
        """, tmp_path)
    assert result.returncode == 0, result.stderr


def test_missing_flax_names_the_extra(tmp_path):
    result = run_python("""
        import sys
        sys.modules["flax"] = None  # what an environment without Flax looks like to import
        import jax_unpool
        try:
            jax_unpool.nnx
        except ImportError as error:
            print(error)
        else:
            raise SystemExit("no ImportError")
        """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == (
        "jax_unpool.nnx needs Flax, an optional extra: pip install 'jax-unpool[flax]'")


@pytest.mark.parametrize("k", [1, 3])
def test_1d_and_3d_layers_are_channels_last_and_round_trip(rng, k):
    from jax_unpool.nnx import MaxPool1d, MaxPool3d, MaxUnpool1d, MaxUnpool3d

    pool, unpool = (MaxPool1d, MaxUnpool1d) if k == 1 else (MaxPool3d, MaxUnpool3d)
    fn_pool = ju.max_pool1d_with_indices if k == 1 else ju.max_pool3d_with_indices
    fn_unpool = ju.max_unpool1d if k == 1 else ju.max_unpool3d
    spatial = (12,) if k == 1 else (4, 6, 4)
    x = jnp.asarray(rng.standard_normal((2, *spatial, 3)), jnp.float32)  # channels last
    values, indices = pool(2)(x)
    # The oracle: the channels-first functions on the moved data, moved back.
    first = lambda a: jnp.moveaxis(a, -1, 1)
    last = lambda a: jnp.moveaxis(a, 1, -1)
    want_values, want_indices = fn_pool(first(x), 2)
    np.testing.assert_array_equal(values, last(want_values))
    np.testing.assert_array_equal(indices, last(want_indices))
    out = unpool(2)(values, indices)
    np.testing.assert_array_equal(out, last(fn_unpool(want_values, want_indices, 2)))
    # one example (no N) works too, and the gradient flows through nnx.grad
    one, one_idx = pool(2)(x[0])
    np.testing.assert_array_equal(one, values[0])
    grad = nnx.grad(lambda v: (unpool(2)(v, indices) ** 2).sum())(values)
    np.testing.assert_array_equal(grad, 2 * values)


def test_a_channels_first_output_size_given_to_a_channels_last_layer_is_quoted_as_given():
    """An NHWC layer reads a full output_size as NHWC: an NCHW shape gives it the wrong
    spatial sizes, and the message quotes the shape as the user passed it and says how it
    was read, not only the dims sliced out of it."""
    y, indices = MaxPool2d(2)(jnp.zeros((1, 8, 14, 3)))  # NHWC
    with pytest.raises(ValueError, match=r"max_unpool2d: invalid output_size \(1, 3, 8, 14\): "
                                         r"its spatial sizes \(3, 8\) \(read as NHWC\)"):
        MaxUnpool2d(2)(y, indices, output_size=(1, 3, 8, 14))
