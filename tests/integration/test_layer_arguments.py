"""The layers of Flax NNX, Flax Linen and Equinox take their arguments as the functions do:
sizes in every spelling the functions accept (1-D integer numpy arrays included) and the
pools' index_dtype (int64 indices equal to numpy's transcription of PyTorch's loop, and to
PyTorch's where installed), each layer compiled under its framework's jit, with the
functions' results."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle
import pytest
from flax import nnx
from torch_oracle import needs_torch, torch_pool

import jax_unpool as ju
import jax_unpool.equinox as jue
import jax_unpool.linen as jul
import jax_unpool.nnx as jun
from jax_unpool._compat import enable_x64

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


CHANNELS_FIRST = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


def layer(framework, name, *args, **kwargs):
    """The framework's layer `name` (e.g. "MaxPool2d") for channels-first batches (Equinox's
    takes one example, and POOL and UNPOOL vmap it)."""
    if framework != "equinox":
        kwargs["data_format"] = CHANNELS_FIRST[int(name[-2])]
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


SPATIAL = {1: (13,), 2: (9, 8), 3: (5, 7, 6)}
FUNCTIONS = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
             3: ju.max_pool3d_with_indices}


def pool_3_2_1(which: str, k: int, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The oracle's pool of x with kernel 3, stride 2, padding 1: int64 indices."""
    if which == "torch":
        return torch_pool(k, x, 3, 2, 1)
    return numpy_oracle.max_pool(x, (3,) * k, (2,) * k, (1,) * k, (1,) * k, False)


@pytest.mark.parametrize("which", ["numpy", pytest.param("torch", marks=needs_torch)])
@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_pool_layers_take_index_dtype_as_the_functions_do(framework, k, rng, which):
    x = rng.standard_normal((2, 3, *SPATIAL[k])).astype(np.float32)
    # The default is the functions': int32.
    _, indices = POOL[framework](layer(framework, f"MaxPool{k}d", 3, 2, 1), x)
    assert indices.dtype == np.int32
    np.testing.assert_array_equal(indices, FUNCTIONS[k](x, 3, 2, 1)[1])
    # int64 with x64, as a PyTorch port keeps them: PyTorch's indices, dtype included.
    with enable_x64(True):
        pool = layer(framework, f"MaxPool{k}d", 3, 2, 1, index_dtype=jnp.int64)
        values, indices = POOL[framework](pool, x)
    want_values, want_indices = pool_3_2_1(which, k, x)
    assert indices.dtype == np.int64 and want_indices.dtype == np.int64
    np.testing.assert_array_equal(indices, want_indices)
    np.testing.assert_array_equal(values, want_values)
