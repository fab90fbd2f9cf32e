"""The layers of Flax NNX, Flax Linen and Equinox take their arguments as the functions do:
sizes in every spelling the functions accept (1-D integer numpy arrays included), each
layer compiled under its framework's jit, with the functions' results."""

import equinox as eqx
import jax
import numpy as np
import pytest
from flax import nnx

import jax_unpool as ju
import jax_unpool.equinox as jue
import jax_unpool.linen as jul
import jax_unpool.nnx as jun

FRAMEWORKS = ["nnx", "linen", "equinox"]


# One jitted function per framework, for every layer: as a model's step that holds them,
# and so that a layer meets the cache entries of the layers before it (an Equinox layer
# that kept a numpy array broke every later one: its cache compared the array).
# Linen's and Equinox's modules are static arguments, hashed and compared.
POOL = {"nnx": nnx.jit(lambda m, x: m(x)),
        "linen": jax.jit(lambda m, x: m.apply({}, x), static_argnums=0),
        "equinox": eqx.filter_jit(lambda m, x: jax.vmap(m)(x))}
UNPOOL = {"nnx": nnx.jit(lambda m, y, i, size: m(y, i, size), static_argnums=3),
          "linen": jax.jit(lambda m, y, i, size: m.apply({}, y, i, size),
                           static_argnums=(0, 3)),
          "equinox": eqx.filter_jit(
              lambda m, y, i, size: jax.vmap(lambda a, b: m(a, b, size))(y, i))}
MODULES = {"nnx": jun, "linen": jul, "equinox": jue}


def layer(framework, name, *args, **kwargs):
    """The framework's layer `name` for NCHW data (Equinox's: one (C, H, W) example)."""
    if framework != "equinox":
        kwargs["data_format"] = "NCHW"
    return getattr(MODULES[framework], name)(*args, **kwargs)


# The spellings of a pair of sizes that the functions accept.
SPELLINGS = {"tuple": tuple, "list": list, "numpy array": np.array,
             "numpy ints": lambda sizes: tuple(map(np.int64, sizes))}


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_layers_take_sizes_as_the_functions_do(framework, spelling, rng):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    spell = SPELLINGS[spelling]
    sizes = [spell(s) for s in ((3, 2), (2, 1), (1, 0))]  # kernel_size, stride, padding
    pool = layer(framework, "MaxPool2d", *sizes)
    values, indices = POOL[framework](pool, x)
    want_values, want_indices = ju.max_pool2d_with_indices(x, (3, 2), (2, 1), (1, 0))
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    out = UNPOOL[framework](layer(framework, "MaxUnpool2d", *sizes), values, indices, (9, 8))
    np.testing.assert_array_equal(out, ju.max_unpool2d(values, indices, (3, 2), (2, 1), (1, 0),
                                                       (9, 8)))
    # Another layer of the class, with other sizes, through the same jitted function.
    other = layer(framework, "MaxPool2d", 2, dilation=spell((1, 2)))
    np.testing.assert_array_equal(POOL[framework](other, x)[0],
                                  ju.max_pool2d_with_indices(x, 2, dilation=(1, 2))[0])
