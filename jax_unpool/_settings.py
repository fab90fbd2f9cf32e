"""The environment variables jax_unpool reads: here only, once, when it is imported. Each
value is checked here, so that a typo is an error naming the variable instead of being
ignored; everything else takes its settings from this module (lowerings read none).

- ``JAX_UNPOOL_BACKEND``: "xla" puts every platform, the CPU included, on the XLA-ops
  lowering (what TPUs run); unset or empty, each platform's own backend.
- ``JAX_UNPOOL_CHECK_INDICES``: "1" makes ``check_indices=True`` the default of the unpool
  ops (an out-of-range index fails the call on CUDA and Ascend NPUs too, at the cost of a
  synchronisation per call: docs/semantics.md); "0" or unset, False. The older names
  ``JAX_UNPOOL_CUDA_CHECK_INDICES`` and ``JAX_UNPOOL_NPU_CHECK_INDICES`` say the same.
- ``JAX_UNPOOL_CUDA_OPS``: the ops the CUDA kernels serve (comma-separated; empty for none),
  where the build has them; unset, all three.
- ``JAX_UNPOOL_CPU_GATHER``: "vector" or "scalar", how the CPU gather loads 4- and 8-byte
  values; unset, by CPU. The C++ kernel reads it (ffi/cpu/simd.h); it is checked here.
"""

from __future__ import annotations

import os
import sys

BACKEND_ENV = "JAX_UNPOOL_BACKEND"
CHECK_INDICES_ENV = "JAX_UNPOOL_CHECK_INDICES"
CHECK_INDICES_ALIASES = ("JAX_UNPOOL_CUDA_CHECK_INDICES", "JAX_UNPOOL_NPU_CHECK_INDICES")
CUDA_OPS_ENV = "JAX_UNPOOL_CUDA_OPS"
CPU_GATHER_ENV = "JAX_UNPOOL_CPU_GATHER"

OPS = ("max_unpool", "max_unpool_backward", "max_pool")


class SettingError(ImportError, ValueError):
    """An environment variable of jax_unpool's has a value it does not know: `import
    jax_unpool` fails with it (an ImportError, and a ValueError: a bad value)."""


def _choice(name: str, allowed: tuple[str, ...], environ) -> str:
    value = environ.get(name, "")
    if value not in ("", *allowed):
        raise SettingError(f"jax_unpool: environment variable {name} must be "
                           f"{' or '.join(map(repr, allowed))} or unset, got {value!r}")
    return value


def read(environ=os.environ) -> dict:
    """The settings that `environ` gives, each checked (SettingError otherwise)."""
    backend = _choice(BACKEND_ENV, ("xla",), environ) or None
    checks = [_choice(name, ("1", "0"), environ)
              for name in (CHECK_INDICES_ENV, *CHECK_INDICES_ALIASES)]
    cuda_ops = environ.get(CUDA_OPS_ENV)
    if cuda_ops is not None:
        ops = tuple(op for op in (v.strip() for v in cuda_ops.split(",")) if op)
        if set(ops) - set(OPS):
            raise SettingError(f"jax_unpool: environment variable {CUDA_OPS_ENV} must name ops "
                               f"among {', '.join(OPS)} (comma-separated), got {cuda_ops!r}")
        cuda_ops = ops
    return {"backend": backend, "check_indices": "1" in checks,
            "cuda_ops": OPS if cuda_ops is None else cuda_ops,
            "cpu_gather": _choice(CPU_GATHER_ENV, ("vector", "scalar"), environ) or None}


def _command_line() -> bool:
    """Whether this process is jax_unpool's command line (`python -m jax_unpool`, whose
    argv[0] is "-m" while the package is imported, or the jax-unpool script): it reports a
    bad value itself, as a usage error, after reading the settings again."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "jax-unpool":
        return True
    after = sys.orig_argv[sys.orig_argv.index("-m") + 1:] if "-m" in sys.orig_argv else []
    return argv0 == "-m" and after[:1] == ["jax_unpool"]


try:
    _settings = read()
except SettingError:
    if not _command_line():
        raise
    _settings = read({})  # the defaults, for the command line to get as far as saying so
#: "xla", or None: each platform's own backend.
BACKEND: str | None = _settings["backend"]
#: The default of the unpool ops' `check_indices`.
CHECK_INDICES: bool = _settings["check_indices"]
#: The ops the CUDA kernels serve (where the build has them).
CUDA_OPS: tuple[str, ...] = _settings["cuda_ops"]
#: "vector", "scalar", or None (by CPU).
CPU_GATHER: str | None = _settings["cpu_gather"]
