import os
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(scope="session")
def fake_cann_dir(tmp_path_factory):
    """The emulated CANN (tests/fake_cann) of every test file that loads it in this
    process: a process loads one CANN runtime, once. $JAX_UNPOOL_FAKE_CANN_DIR names a
    directory to build it in (a build that is there already is kept): test_jax_window.py
    builds it once for every jax it runs the subset with."""
    from fake_cann import build

    prebuilt = os.environ.get("JAX_UNPOOL_FAKE_CANN_DIR")
    return build(Path(prebuilt) if prebuilt else tmp_path_factory.mktemp("fake_cann_npu"))


# Files that take minutes. They start first: under xdist (a file per worker, in collection
# order with pyproject's --no-loadscope-reorder) one started last would leave the other
# workers idle while it runs alone. They carry the `slow` marker, which the quick run
# `pytest -m "not slow"` leaves out.
SLOW_FILES_FIRST = ("test_sanitizers.py", "test_jax_window.py", "test_docs.py",
                    "test_unpool_ranks.py", "test_notebook.py", "test_aclnn_unpool.py",
                    "test_sharding.py")
# Also slow for the quick run: files of a minute or so of CPU each (builds, child
# processes, the CUDA host emulation's compile, the torch sweeps), measured on 2 cores.
SLOW_FILES = (*SLOW_FILES_FIRST, "test_multiprocess.py", "test_large_offsets.py",
              "test_memory.py", "test_doc_examples.py", "test_demo.py",
              "test_cuda_logic.py", "test_packaging.py", "test_properties.py", "test_cli.py",
              "test_bench.py", "test_pool_ranks_vs_torch.py", "test_ffi_boundary.py",
              "test_pool_dtypes.py", "test_gpu_tools.py", "test_dense_lowering.py",
              "test_wheels.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    for item in items:
        if item.path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable otherwise
