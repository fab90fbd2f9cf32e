"""The value and index dtypes of the contract, random data for each, and a bit-exact
comparison (these ops move bits: compare the bits, not the values)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

VALUE_DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32",
                "int64", "uint8", "bool"]
INDEX_DTYPES = ["int32", "int64"]


def needs_x64(*dtypes: str) -> bool:
    return any(np.dtype(jnp.dtype(d)).itemsize == 8 for d in dtypes)


def random_values(rng: np.random.Generator, shape, dtype: str) -> np.ndarray:
    dt = jnp.dtype(dtype)
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if jnp.issubdtype(dt, jnp.floating):
        return rng.standard_normal(shape).astype(dt)
    info = jnp.iinfo(dt)
    return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape,
                        endpoint=True).astype(dt)


def bits(a) -> np.ndarray:
    """The array's bits, as unsigned ints of its width (bool as uint8): NaN payloads and
    -0.0 compare exactly. Other widths (complex128) as their bytes."""
    a = np.asarray(a)
    if a.dtype.itemsize in (1, 2, 4, 8):
        return a.view(f"u{a.dtype.itemsize}")
    return np.ascontiguousarray(a).view(np.uint8)


def assert_bits_equal(actual, expected) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_array_equal(bits(actual), bits(expected))
