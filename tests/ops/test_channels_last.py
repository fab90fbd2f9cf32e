"""Channels-last data: NHWC (and HWC) results are the NCHW results moved, for values and
gradients of all three ops; and the CPU kernels take NHWC natively (no transpose in HLO)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_unpool as ju
from jax_unpool import reference
from jax_unpool.backends import cpu as cpu_backend


def to_last(a):
    return jnp.moveaxis(a, -3, -1)  # (N)CHW -> (N)HWC


def to_first(a):
    return jnp.moveaxis(a, -1, -3)  # (N)HWC -> (N)CHW


LAYOUTS = [("NCHW", "NHWC", lambda a: a), ("CHW", "HWC", lambda a: a[0])]  # rank 4, rank 3
LAYOUT_IDS = ["NHWC", "HWC"]


def random_indices(rng, shape, plane):
    """Flat positions drawn with replacement: duplicates included, which the layout must
    not change (the largest flat input position wins in both)."""
    return jnp.asarray(rng.integers(0, plane, size=shape), jnp.int32)


def values(rng, shape, dtype):
    return jnp.asarray(rng.standard_normal(shape) * 10, dtype)


# --------------------------------------------------------------------------------------
# max_unpool2d
# --------------------------------------------------------------------------------------

UNPOOL_CASES = [  # NCHW input shape, keyword arguments, the output plane they give
    ((2, 3, 4, 5), {"kernel_size": 2}, (8, 10)),
    ((2, 3, 4, 5), {"output_size": (7, 9)}, (7, 9)),
    ((1, 5, 3, 3), {"kernel_size": 3, "stride": 2, "padding": 1}, (5, 5)),
]


@pytest.mark.parametrize("first, last, unbatch", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("shape, size, out_hw", UNPOOL_CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32])
def test_max_unpool2d(first, last, unbatch, shape, size, out_hw, dtype, rng):
    x = unbatch(values(rng, shape, dtype))
    idx = unbatch(random_indices(rng, shape, out_hw[0] * out_hw[1]))
    want = ju.max_unpool2d(x, idx, **size, data_format=first)
    got = ju.max_unpool2d(to_last(x), to_last(idx), **size, data_format=last)
    np.testing.assert_array_equal(got, to_last(want))


@pytest.mark.parametrize("first, last, unbatch", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("shape, size, out_hw", UNPOOL_CASES)
def test_max_unpool2d_grad(first, last, unbatch, shape, size, out_hw, rng):
    x = unbatch(values(rng, shape, jnp.float32))
    idx = unbatch(random_indices(rng, shape, out_hw[0] * out_hw[1]))
    # Random weights make every output position count differently.
    weights = unbatch(values(rng, (*shape[:2], *out_hw), jnp.float32))

    def loss(x, idx, weights, data_format):
        return jnp.sum(weights * ju.max_unpool2d(x, idx, **size, data_format=data_format))

    want = jax.grad(loss)(x, idx, weights, first)
    got = jax.grad(loss)(to_last(x), to_last(idx), to_last(weights), last)
    np.testing.assert_array_equal(got, to_last(want))
    assert np.any(want != 0)


# --------------------------------------------------------------------------------------
# max_unpool2d_backward
# --------------------------------------------------------------------------------------

BACKWARD_CASES = [((2, 3, 4, 5), (8, 10)), ((1, 4, 3, 3), (5, 7)), ((2, 2, 6, 1), (6, 2))]


@pytest.mark.parametrize("first, last, unbatch", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("shape, out_hw", BACKWARD_CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32])
def test_max_unpool2d_backward(first, last, unbatch, shape, out_hw, dtype, rng):
    grad = unbatch(values(rng, (*shape[:2], *out_hw), dtype))
    idx = unbatch(random_indices(rng, shape, out_hw[0] * out_hw[1]))
    x = jax.ShapeDtypeStruct(idx.shape, dtype)
    x_last = jax.ShapeDtypeStruct(to_last(idx).shape, dtype)
    want = ju.max_unpool2d_backward(grad, x, idx, out_hw, data_format=first)
    got = ju.max_unpool2d_backward(to_last(grad), x_last, to_last(idx), out_hw,
                                   data_format=last)
    np.testing.assert_array_equal(got, to_last(want))


@pytest.mark.parametrize("first, last, unbatch", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("shape, out_hw", BACKWARD_CASES)
def test_max_unpool2d_backward_grad(first, last, unbatch, shape, out_hw, rng):
    grad = unbatch(values(rng, (*shape[:2], *out_hw), jnp.float32))
    idx = unbatch(random_indices(rng, shape, out_hw[0] * out_hw[1]))
    weights = values(rng, idx.shape, jnp.float32)

    def loss(grad, idx, weights, data_format):
        x = jax.ShapeDtypeStruct(idx.shape, grad.dtype)
        return jnp.sum(weights * ju.max_unpool2d_backward(grad, x, idx, out_hw,
                                                          data_format=data_format))

    want = jax.grad(loss)(grad, idx, weights, first)
    got = jax.grad(loss)(to_last(grad), to_last(idx), to_last(weights), last)
    np.testing.assert_array_equal(got, to_last(want))
    assert np.any(want != 0)


# --------------------------------------------------------------------------------------
# max_pool2d_with_indices
# --------------------------------------------------------------------------------------

POOL_CASES = [  # NCHW input shape, kernel_size, stride, padding, dilation, ceil_mode
    ((2, 3, 8, 7), 2, None, 0, 1, False),
    ((2, 3, 9, 8), 3, 2, 1, 1, False),  # overlapping windows
    ((1, 4, 10, 9), (3, 2), (2, 1), (1, 1), (2, 1), True),
]


@pytest.mark.parametrize("first, last, unbatch", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.int32])
def test_max_pool2d_with_indices(first, last, unbatch, case, dtype, rng):
    shape, *config = case
    x = unbatch(values(rng, shape, dtype))  # bfloat16/int32 rounding makes ties: first wins
    want_values, want_indices = ju.max_pool2d_with_indices(x, *config, data_format=first)
    got_values, got_indices = ju.max_pool2d_with_indices(to_last(x), *config,
                                                         data_format=last)
    np.testing.assert_array_equal(got_values, to_last(want_values))
    np.testing.assert_array_equal(got_indices, to_last(want_indices))


@pytest.mark.parametrize("first, last, unbatch", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool2d_with_indices_grad(first, last, unbatch, case, rng):
    shape, *config = case
    x = unbatch(values(rng, shape, jnp.float32))
    weights = values(rng, ju.max_pool2d_with_indices(x, *config, data_format=first)[0].shape,
                     jnp.float32)

    def loss(x, weights, data_format):
        pooled, _ = ju.max_pool2d_with_indices(x, *config, data_format=data_format)
        return jnp.sum(weights * pooled)

    want = jax.grad(loss)(x, weights, first)
    got = jax.grad(loss)(to_last(x), to_last(weights), last)
    np.testing.assert_array_equal(got, to_last(want))
    assert np.any(want != 0)


# --------------------------------------------------------------------------------------
# Compiled HLO: the CPU kernels read and write NHWC as it is
# --------------------------------------------------------------------------------------

# An HLO instruction `%name = type opcode(`; the word also appears in metadata such as
# op_name="jit(f)/transpose(jvp())/...", which this does not match.
INSTRUCTION = r"^\s*(?:ROOT\s+)?%\S+\s*=\s*\S+\s+{}\("


def compiled_nhwc_forward_and_grad(module):
    x = jnp.ones((2, 4, 5, 3), jnp.float32)
    idx = jnp.zeros((2, 4, 5, 3), jnp.int32)
    weights = jnp.ones((2, 8, 10, 3), jnp.float32)

    def loss(x):
        return jnp.sum(weights * module.max_unpool2d(x, idx, 2, data_format="NHWC"))

    return jax.jit(jax.value_and_grad(loss)).lower(x).compile().as_text()


def instructions(hlo, opcode):
    return re.findall(INSTRUCTION.format(opcode), hlo, re.MULTILINE)


def test_nhwc_forward_and_grad_compile_without_transposes():
    hlo = compiled_nhwc_forward_and_grad(ju)
    assert instructions(hlo, "transpose") == []
    assert instructions(hlo, "copy") == []  # nor a layout-changing copy in its place
    targets = re.findall(r'custom_call_target="(\w+)"', hlo)
    assert sorted(targets) == sorted([cpu_backend.MAX_UNPOOL_TARGET,
                                      cpu_backend.MAX_UNPOOL_BACKWARD_TARGET])


def test_the_transpose_check_finds_the_references_transposes():
    # The jnp reference moves NHWC to planes and back: the same check must see that.
    assert instructions(compiled_nhwc_forward_and_grad(reference), "transpose")


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_format_names_where_c_is_for_either_rank(rng, k):
    """The unpools and the pools take a format's batched or unbatched spelling (NCHW, CHW)
    for a batch or one example alike: the format says where C is, the rank whether there
    is a batch."""
    s = {1: "W", 2: "HW", 3: "DHW"}[k]
    unpool, pool = getattr(ju, f"max_unpool{k}d"), getattr(ju, f"max_pool{k}d_with_indices")
    for batched in (True, False):
        shape = (2, 3, *[4] * k) if batched else (3, *[4] * k)
        x = jnp.asarray(rng.standard_normal(shape), jnp.float32)
        y, idx = pool(x, 2, data_format=f"NC{s}")
        for first in (f"NC{s}", f"C{s}"):
            got_y, got_idx = pool(x, 2, data_format=first)
            np.testing.assert_array_equal(got_y, y)
            np.testing.assert_array_equal(got_idx, idx)
            np.testing.assert_array_equal(unpool(y, idx, 2, data_format=first),
                                          unpool(y, idx, 2, data_format=f"NC{s}"))
        moved = jnp.moveaxis(x, -k - 1, -1)
        y_last, idx_last = pool(moved, 2, data_format=f"N{s}C")
        for last in (f"N{s}C", f"{s}C"):
            got_y, _ = pool(moved, 2, data_format=last)
            np.testing.assert_array_equal(got_y, y_last)
            np.testing.assert_array_equal(jnp.moveaxis(got_y, -1, -k - 1), y)
