"""The CUDA module where there is no GPU: every target registered with an instantiate stage
that loads the kernels (ffi/cuda/kernel_registry.h), and every kernel of the module in the
registry that stage walks -- so that none is first loaded inside a CUDA graph capture."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from jax_unpool.backends import cuda

pytestmark = pytest.mark.skipif(not cuda.available(),
                                reason="jax_unpool was built without its CUDA module")


def test_every_target_loads_the_kernels_at_its_instantiate_stage():
    stages = cuda._jax_unpool_cuda.registrations()
    assert set(stages) == set(cuda.TARGETS)
    assert all(sorted(bundle) == ["execute", "instantiate"] for bundle in stages.values())
    # One loader for all, apart from every handler.
    loaders = {id(bundle["instantiate"]) for bundle in stages.values()}
    assert len(loaders) == 1
    assert loaders.isdisjoint(id(bundle["execute"]) for bundle in stages.values())


def _cuobjdump() -> str:
    """The CUDA toolkit's cuobjdump, else the test extra's (nvidia-cuda-cuobjdump): where the
    module was built with nvcc, one of them is there."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    import nvidia

    copies = [p for base in nvidia.__path__ for p in Path(base).glob("*/bin/cuobjdump")]
    assert copies, "cuobjdump: neither on PATH nor from the test extra's nvidia-cuda-cuobjdump"
    return str(copies[0])


def test_every_kernel_of_the_module_is_registered():
    cuobjdump = _cuobjdump()
    usage = subprocess.run([cuobjdump, "--dump-resource-usage", cuda._jax_unpool_cuda.__file__],
                           capture_output=True, text=True, check=True).stdout
    # One architecture's cubin lists each kernel once.
    arch = re.findall(r"arch = (sm_\d+)", usage) or [None]
    kernels = set()
    for block in re.split(r"Fatbin elf code:", usage)[1:]:
        if arch[0] is None or f"arch = {arch[0]}" in block:
            kernels |= set(re.findall(r"Function (\S+):", block))
    assert kernels, usage[:2000]
    assert cuda._jax_unpool_cuda.kernel_stats()["kernels"] == len(kernels)


def test_loading_the_kernels_reports_a_cuda_status_without_crashing():
    result = cuda._jax_unpool_cuda.load_kernels()
    assert re.fullmatch(r"cuda(Success|Error\w+)", result)
    assert cuda._jax_unpool_cuda.kernel_stats()["loads_in_capture"] == 0
