"""Forward and backward values against independent numpy loops, the jnp reference,
PyTorch and the seed document's example, for every dtype of the contract."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from dtypes import INDEX_DTYPES, VALUE_DTYPES, assert_bits_equal, needs_x64, random_values

import jax_unpool as ju
from jax_unpool._compat import enable_x64

SHAPES = {3: (3, 4, 5), 4: (2, 3, 4, 5)}  # channels-first; NHWC moves C last
LAYOUTS = ["NCHW", "NHWC"]


def _shape(rank, layout):
    s = SHAPES[rank]
    return (*s[:-3], s[-2], s[-1], s[-3]) if layout == "NHWC" else s


# The values tests' cases: every value dtype and index dtype, batched or not, both layouts.
EVERY_DTYPE_AND_LAYOUT = pytest.mark.parametrize(
    "dtype, index_dtype, rank, layout",
    list(itertools.product(VALUE_DTYPES, INDEX_DTYPES, [3, 4], LAYOUTS)))


@EVERY_DTYPE_AND_LAYOUT
def test_forward_equals_numpy_loops_and_reference(rng, dtype, index_dtype, rank, layout):
    shape, hw = _shape(rank, layout), (6, 7)
    x = random_values(rng, shape, dtype)
    idx = oracle.random_indices(rng, shape, hw[0] * hw[1], index_dtype)  # with duplicates
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=hw, data_format=layout))(
            x, idx)
        # jitted: run op by op, each of the reference's ops compiles on its own (3x the time)
        ref = jax.jit(lambda x, i: ju.reference.max_unpool2d(
            x, i, output_size=hw, data_format=layout))(x, idx)
        assert out.dtype == jnp.dtype(dtype)
    expected = oracle.unpool(x, idx, hw, layout == "NHWC")
    assert_bits_equal(out, expected)
    assert_bits_equal(ref, expected)


@EVERY_DTYPE_AND_LAYOUT
def test_backward_equals_numpy_loops_and_reference(rng, dtype, index_dtype, rank, layout):
    shape, hw = _shape(rank, layout), (6, 7)
    h = rank - 3 if layout == "NHWC" else rank - 2
    grad_shape = (*shape[:h], *hw, *shape[h + 2:])
    g = random_values(rng, grad_shape, dtype)
    idx = oracle.random_indices(rng, shape, hw[0] * hw[1], index_dtype)
    x = jax.ShapeDtypeStruct(shape, g.dtype)
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = jax.jit(lambda g, i: ju.max_unpool2d_backward(g, x, i, hw, data_format=layout))(
            g, idx)
        ref = jax.jit(lambda g, i: ju.reference.max_unpool2d_backward(
            g, x, i, hw, data_format=layout))(g, idx)
    expected = oracle.gather(g, idx, layout == "NHWC")
    assert_bits_equal(out, expected)
    assert_bits_equal(ref, expected)


def test_seed_example_of_aclnn_max_unpool2d_backward():
    # ../shared/seeds/aclnnMaxUnpool2dBackward.md: gradOutput 0..8 (1,3,3,1), self (1,3,2,2),
    # indices [0,1,2,1,2,0,1,1,1,0,0,0], outputSize (3,1).
    grad = jnp.arange(9, dtype=jnp.float32).reshape(1, 3, 3, 1)
    x = jnp.ones((1, 3, 2, 2), jnp.float32)
    idx = jnp.array([0, 1, 2, 1, 2, 0, 1, 1, 1, 0, 0, 0], jnp.int32).reshape(1, 3, 2, 2)
    out = ju.max_unpool2d_backward(grad, x, idx, (3, 1))
    np.testing.assert_array_equal(out.ravel(), [0, 1, 2, 1, 5, 3, 4, 4, 7, 6, 6, 6])


def test_duplicates_resolve_to_the_largest_input_position():
    x = jnp.array([[[[10.0, 20.0], [30.0, 40.0]]]])
    idx = jnp.array([[[[3, 0], [3, 0]]]], jnp.int32)  # positions 0,2 -> 3 and 1,3 -> 0
    out = ju.max_unpool2d(x, idx, output_size=(2, 2))
    np.testing.assert_array_equal(out.ravel(), [40.0, 0.0, 0.0, 30.0])
    np.testing.assert_array_equal(ju.reference.max_unpool2d(x, idx, output_size=(2, 2)), out)


@pytest.mark.parametrize("shape", [(0, 3, 2, 2), (2, 0, 2, 2), (2, 3, 0, 2), (2, 3, 2, 0),
                                   (0, 2, 2)])
def test_zero_size_forward_gives_zeros(shape):
    x = jnp.ones(shape, jnp.float32)
    idx = jnp.zeros(shape, jnp.int32)
    out = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=(3, 4)))(x, idx)
    assert out.shape == (*shape[:-2], 3, 4)
    np.testing.assert_array_equal(out, np.zeros(out.shape, np.float32))


@pytest.mark.parametrize("shape", [(0, 3, 2, 2), (2, 0, 2, 2), (2, 3, 0, 2), (2, 3, 2, 0)])
def test_zero_size_backward(shape):
    g = jnp.ones((*shape[:2], 3, 4), jnp.float32)
    idx = jnp.zeros(shape, jnp.int32)
    out = ju.max_unpool2d_backward(g, jax.ShapeDtypeStruct(shape, jnp.float32), idx, (3, 4))
    assert out.shape == shape and out.size == 0


PAYLOADS = {  # NaNs with payloads, -0.0 and a signalling NaN, per width
    "float32": np.array([0x7FC12345, 0xFFA00001, 0x80000000, 0x7F800001], np.uint32),
    "bfloat16": np.array([0x7FFF, 0xFFC1, 0x8000, 0x7F81], np.uint16),
    "float16": np.array([0x7E01, 0xFE3F, 0x8000, 0x7C01], np.uint16),
}


@pytest.mark.parametrize("impl", ["jax_unpool", "reference"])
@pytest.mark.parametrize("dtype", list(PAYLOADS))
@pytest.mark.parametrize("op", ["forward", "backward"])
def test_nan_payloads_and_negative_zero_move_bit_exactly(op, dtype, impl):
    payloads = PAYLOADS[dtype]
    vals = payloads.view(jnp.dtype(dtype)).reshape(1, 1, 2, 2)
    idx = np.array([[[[3, 2], [1, 0]]]], np.int32)
    mod = ju if impl == "jax_unpool" else ju.reference
    if op == "forward":
        f = jax.jit(lambda v: mod.max_unpool2d(v, idx, output_size=(2, 2)))
    else:
        f = jax.jit(lambda v: mod.max_unpool2d_backward(v, v, idx, (2, 2)))
    out = np.asarray(f(vals))
    np.testing.assert_array_equal(out.view(payloads.dtype).ravel(), payloads[::-1])


torch = pytest.importorskip("torch")


@pytest.mark.parametrize("kernel,stride,padding", [(2, None, 0), (3, 2, 1), ((2, 3), (2, 3), 0)])
def test_forward_and_gradient_match_pytorch(rng, kernel, stride, padding):
    x = torch.from_numpy(rng.standard_normal((2, 3, 9, 10)).astype(np.float32))
    pooled, idx = torch.nn.functional.max_pool2d(x, kernel, stride, padding,
                                                 return_indices=True)
    pooled.requires_grad_(True)
    expected = torch.nn.functional.max_unpool2d(pooled, idx, kernel, stride, padding,
                                                output_size=x.shape)
    ct = torch.from_numpy(rng.standard_normal(expected.shape).astype(np.float32))
    (expected * ct).sum().backward()

    y, i = jnp.asarray(pooled.detach().numpy()), jnp.asarray(idx.numpy().astype(np.int32))
    f = lambda y: ju.max_unpool2d(y, i, kernel, stride, padding, output_size=tuple(x.shape))
    out, vjp = jax.vjp(f, y)
    np.testing.assert_array_equal(out, expected.detach().numpy())
    np.testing.assert_array_equal(vjp(jnp.asarray(ct.numpy()))[0], pooled.grad.numpy())
