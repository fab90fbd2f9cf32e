"""What docs/semantics.md says of duplicated indices against PyTorch: the largest input
position wins, which is PyTorch's CPU result on one thread. (On several threads its
at::parallel_for splits a plane's input positions between threads that store without
order, aten/src/ATen/native/cpu/MaxUnpoolKernel.cpp: which duplicate wins is then
unspecified, so no test compares that.)"""

import numpy as np
import pytest
import torch_oracle

import jax_unpool as ju

# Every test here compares with torch on random inputs; the golden file's duplicates cases
# (tests/ops/test_golden_torch.py) cover it without torch.
torch = pytest.importorskip("torch", reason=torch_oracle.MISSING)


@pytest.fixture
def one_thread():
    with torch_oracle.one_torch_thread():
        yield


@pytest.mark.parametrize("k", [1, 2, 3])
def test_duplicates_give_single_threaded_pytorchs_result(k, one_thread):
    # 1,000 values per plane, unpooled with a 1-wide window (the output plane is the
    # input's), every one at one of the first 3 output positions: each of those holds
    # the value of the largest input position that names it, the others zero.
    rng = np.random.default_rng(k)
    spatial = {1: (1000,), 2: (10, 100), 3: (10, 10, 10)}[k]
    x = rng.standard_normal((2, 3, *spatial)).astype(np.float32)
    idx = rng.integers(0, 3, x.shape)
    unpool = getattr(torch.nn.functional, f"max_unpool{k}d")
    expected = unpool(torch.from_numpy(x), torch.from_numpy(idx), 1).numpy()
    out = np.asarray(getattr(ju, f"max_unpool{k}d")(x, idx.astype(np.int32), 1))
    np.testing.assert_array_equal(out, expected)
    planes, where = x.reshape(6, -1), idx.reshape(6, -1)
    last = [[planes[p][np.flatnonzero(where[p] == j)[-1]] for j in range(3)] for p in range(6)]
    np.testing.assert_array_equal(out.reshape(6, -1)[:, :3], last)
    assert not out.reshape(6, -1)[:, 3:].any()
