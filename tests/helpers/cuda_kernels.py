"""The kernels a built CUDA module holds, as the CUDA toolkit's cuobjdump lists them: what
its kernel registry (ffi/cuda/kernel_registry.h) must count. tests/backends/cuda/
test_cuda_module.py reads the source build's module, tests/tools/test_wheels.py the
wheels'."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


def cuobjdump() -> str:
    """The CUDA toolkit's cuobjdump, else the test extra's (nvidia-cuda-cuobjdump): where the
    module was built with nvcc, one of them is there."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    import nvidia

    copies = [p for base in nvidia.__path__ for p in Path(base).glob("*/bin/cuobjdump")]
    assert copies, "cuobjdump: neither on PATH nor from the test extra's nvidia-cuda-cuobjdump"
    return str(copies[0])


def kernel_names(module: str | Path) -> set[str]:
    """The (mangled) names of the kernels in `module`'s machine code, of one architecture:
    its cubin lists each kernel once."""
    usage = subprocess.run([cuobjdump(), "--dump-resource-usage", str(module)],
                           capture_output=True, text=True, check=True, timeout=300).stdout
    arch = re.findall(r"arch = (sm_\d+)", usage) or [None]
    kernels = set()
    for block in re.split(r"Fatbin elf code:", usage)[1:]:
        if arch[0] is None or f"arch = {arch[0]}" in block:
            kernels |= set(re.findall(r"Function (\S+):", block))
    assert kernels, usage[:2000]
    return kernels
