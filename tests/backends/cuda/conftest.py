import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def emulation(tmp_path_factory):
    """The CUDA handlers' host emulation (emulation.cc), built once per session;
    $JAX_UNPOOL_CUDA_EMULATION_DIR names a directory that keeps the build between runs."""
    import emulation as module

    kept = os.environ.get("JAX_UNPOOL_CUDA_EMULATION_DIR")
    return module.build(Path(kept) if kept else tmp_path_factory.mktemp("cuda_emulation"))
