"""Error messages that point the right way (issue 47): an unpool of channels-last data read
as channels-first (the default data_format) says so where the index fits the other
reading, instead of suggesting output_size; output_size's range names its axis (H_out)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_unpool as ju

ERRORS = (jax.errors.JaxRuntimeError, ValueError)  # ValueError: jax's fast path


@pytest.mark.parametrize("k", [1, 2, 3])
def test_channels_last_data_unpooled_as_channels_first_names_data_format(rng, k):
    # (N, *spatial, C): read as channels-first its planes are smaller than its own.
    shape = (2, 8, *(6,) * (k - 1), 3)
    x = jnp.asarray(rng.standard_normal(shape).astype(np.float32))
    pool = getattr(ju, f"max_pool{k}d_with_indices")
    unpool = getattr(ju, f"max_unpool{k}d")
    formats = {1: "NWC", 2: "NHWC", 3: "NDHWC"}
    values, idx = pool(x, 2, data_format=formats[k])
    np.testing.assert_array_equal(  # right: the data's own layout
        unpool(values, idx, 2, output_size=shape[1:-1], data_format=formats[k]).shape, shape)
    with pytest.raises(ERRORS) as err:
        jax.block_until_ready(unpool(values, idx, 2))  # wrong: read as channels-first
    message = str(err.value)
    assert (f"it fits the channels-last reading of these buffers: if the data is "
            f"{formats[k]}, pass data_format='{formats[k]}'") in message, message
    assert "pass the pool's input size as output_size" not in message


def test_an_index_past_the_plane_of_either_reading_still_suggests_output_size():
    x = jnp.ones((1, 1, 3, 3))
    idx = jnp.full((1, 1, 3, 3), 40, jnp.int32)  # past 6x6 = 36, and past 1 * 3 * 4 = 12
    with pytest.raises(ERRORS) as err:
        jax.block_until_ready(ju.max_unpool2d(x, idx, 2))
    message = str(err.value)
    assert "pass the pool's input size as output_size" in message
    assert "reading of these buffers" not in message


def test_the_output_size_range_names_its_axis():
    x = jnp.ones((1, 1, 3, 3))
    idx = jnp.zeros((1, 1, 3, 3), jnp.int32)
    with pytest.raises(ValueError, match=r"\(W_out between 4 and 8, exclusive\)"):
        ju.max_unpool2d(x, idx, 2, output_size=(6, 9))
