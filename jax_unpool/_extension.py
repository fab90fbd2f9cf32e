"""Loads the compiled extension `_jax_unpool`: the CPU and NPU handlers' capsules and the
CANN loader (`ffi/module.cc`). The backends register its handlers."""

from __future__ import annotations

import os
from pathlib import Path

# How the CPU unpool backward gathers 4- and 8-byte values (ffi/cpu/simd.h): unset, by
# CPU (AVX2 gathers, but scalar loads on AMD, whose gathers are slower); "vector" or
# "scalar" to choose. The kernel reads it once; a typo would be ignored there, so it is
# refused here.
GATHER_ENV = "JAX_UNPOOL_CPU_GATHER"
if os.environ.get(GATHER_ENV, "") not in ("", "vector", "scalar"):
    raise ImportError(f"jax_unpool: environment variable {GATHER_ENV} must be 'vector', "
                      f"'scalar' or unset, got {os.environ[GATHER_ENV]!r}")

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
