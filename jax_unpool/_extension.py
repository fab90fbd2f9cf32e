"""Loads the compiled extension `_jax_unpool`: the CPU handlers' capsules
(`ffi/cpu/module.cc`), and the NPU handlers' capsules and the CANN loader
(`ffi/npu/module.cc`). The backends register its handlers."""

from __future__ import annotations

from pathlib import Path

# How the CPU unpool backward gathers 4- and 8-byte values (ffi/cpu/simd.h): the kernel
# reads JAX_UNPOOL_CPU_GATHER itself, once; `_settings` refuses a typo first.
from jax_unpool import _settings  # noqa: F401

try:
    from jax_unpool import _jax_unpool as module  # noqa: F401 -- the backends' handlers
except ImportError:
    _package = Path(__file__).resolve().parent
    if not list(_package.glob("_jax_unpool*.so")):
        # A source tree that was never built: say so instead of "circular import".
        raise ImportError(
            f"jax_unpool at {_package} has no compiled extension module _jax_unpool (this is "
            f"a source tree that was not built): run `pip install .` in {_package.parent}"
        ) from None
    raise
