"""PyTorch as the oracle on random inputs: the one module of the suite that imports torch,
and the mark of the tests that need it.

torch is in the `torch` extra, not the test extra: without it, `needs_torch` skips those
tests, saying why, and the comparisons run on fixed inputs from the golden files
(tests/ops/test_golden_torch.py). A file made only of torch comparisons skips whole:

    torch = pytest.importorskip("torch", reason=torch_oracle.MISSING)

Everything here takes and returns numpy arrays in jax_unpool's layouts (channels first,
or last with channels_last=True; batched or not): bfloat16 crosses as its bits, bool as
uint8 (torch pools no bool; False < True as in uint8).
"""

from __future__ import annotations

from contextlib import contextmanager

import jax.numpy as jnp
import numpy as np
import pytest
from dtypes import bits

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the everyday environment: pip install '.[test]'
    torch = F = None

MISSING = ("PyTorch is not installed: pip install '.[torch]' (the golden files, "
           "tests/ops/test_golden_torch.py, compare with it on fixed inputs)")
needs_torch = pytest.mark.skipif(torch is None, reason=MISSING)


@contextmanager
def one_torch_thread():
    """PyTorch on one thread, for oracles of duplicated positions: its CPU max_unpool
    splits a plane's input positions between threads that store without order, and its
    pool backward adds from several threads into one element
    (aten/src/ATen/native/cpu/MaxUnpoolKernel.cpp, MaxPoolKernel.cpp), so on more threads
    which duplicate wins, or the order of a sum, is unspecified. On one thread both follow
    the input order."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def to_torch(a: np.ndarray) -> torch.Tensor:
    """A numpy array as torch's (bfloat16 through its bits, bool as uint8)."""
    a = np.ascontiguousarray(np.asarray(a))
    if a.dtype == jnp.bfloat16:
        return torch.from_numpy(bits(a).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a.astype(np.uint8) if a.dtype == np.bool_ else a)


def to_numpy(t: torch.Tensor, dtype) -> np.ndarray:
    """torch's tensor as numpy in `dtype` (bfloat16 through its bits)."""
    t = t.detach().contiguous()
    if np.dtype(dtype) == jnp.bfloat16:
        return t.view(torch.int16).numpy().view(jnp.bfloat16)
    return t.numpy().astype(dtype)


def _channels_first(k: int, channels_last: bool, a: np.ndarray):
    """(a with channels first, the function that gives a result back its layout)."""
    if not channels_last:
        return a, lambda r: r
    axis = 1 if a.ndim == k + 2 else 0
    return (np.moveaxis(a, -1, axis),
            lambda r: np.ascontiguousarray(np.moveaxis(r, axis, -1)))


def torch_pool(k: int, x: np.ndarray, *args, channels_last: bool = False, **kwargs
               ) -> tuple[np.ndarray, np.ndarray]:
    """torch.nn.functional.max_pool{k}d(x, *args, return_indices=True): values in x's
    dtype, int64 indices, in x's layout."""
    first, back = _channels_first(k, channels_last, np.asarray(x))
    values, indices = getattr(F, f"max_pool{k}d")(to_torch(first), *args, return_indices=True,
                                                  **kwargs)
    return back(to_numpy(values, first.dtype)), back(indices.numpy())


def torch_pool_grad(k: int, x: np.ndarray, ct: np.ndarray, *args,
                    channels_last: bool = False, **kwargs) -> np.ndarray:
    """The gradient of sum(max_pool{k}d(x, *args) * ct) w.r.t. x, by torch's autograd."""
    first, back = _channels_first(k, channels_last, np.asarray(x))
    ct_first, _ = _channels_first(k, channels_last, np.asarray(ct))
    xt = to_torch(first).requires_grad_(True)
    values, _ = getattr(F, f"max_pool{k}d")(xt, *args, return_indices=True, **kwargs)
    (values * to_torch(ct_first)).sum().backward()
    return back(to_numpy(xt.grad, first.dtype))


def assert_same_as_torch(k: int, x: np.ndarray, *args, pools, index_dtype=jnp.int32,
                         data_format: str | None = None, **kwargs) -> None:
    """Each of `pools` (e.g. the public pool and jax_unpool.reference's) gives torch's
    values, bit for bit, and its indices, in x's dtype and index_dtype; data_format
    (channels last or not) is the pools' argument."""
    last = data_format is not None and data_format.endswith("C")
    want_values, want_indices = torch_pool(k, x, *args, channels_last=last, **kwargs)
    ours = {} if data_format is None else {"data_format": data_format}
    for pool in pools:
        values, indices = pool(x, *args, index_dtype=index_dtype, **ours, **kwargs)
        assert values.dtype == x.dtype and indices.dtype == index_dtype
        np.testing.assert_array_equal(bits(values), bits(want_values))
        np.testing.assert_array_equal(np.asarray(indices), want_indices)
