"""The CUDA module where there is no GPU: every target registered with an instantiate stage
that loads the kernels (ffi/cuda/kernel_registry.h), and every kernel of the module in the
registry that stage walks -- so that none is first loaded inside a CUDA graph capture."""

from __future__ import annotations

import re

import cuda_kernels
import pytest

from jax_unpool.backends import cuda

pytestmark = [pytest.mark.release, pytest.mark.skipif(not cuda.available(),
                                reason="jax_unpool was built without its CUDA module")]


def test_every_target_loads_the_kernels_at_its_instantiate_stage():
    stages = cuda._jax_unpool_cuda.registrations()
    assert set(stages) == set(cuda.TARGETS)
    assert all(sorted(bundle) == ["execute", "instantiate"] for bundle in stages.values())
    # One loader for all, apart from every handler.
    loaders = {id(bundle["instantiate"]) for bundle in stages.values()}
    assert len(loaders) == 1
    assert loaders.isdisjoint(id(bundle["execute"]) for bundle in stages.values())


def test_every_kernel_of_the_module_is_registered():
    kernels = cuda_kernels.kernel_names(cuda._jax_unpool_cuda.__file__)
    assert cuda._jax_unpool_cuda.kernel_stats()["kernels"] == len(kernels)


def test_loading_the_kernels_reports_a_cuda_status_without_crashing():
    result = cuda._jax_unpool_cuda.load_kernels()
    assert re.fullmatch(r"cuda(Success|Error\w+)", result)
    assert cuda._jax_unpool_cuda.kernel_stats()["loads_in_capture"] == 0
