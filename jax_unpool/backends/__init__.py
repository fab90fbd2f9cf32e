"""The platforms. Each is one module that, when `load` imports it, registers its lowerings
(and FFI targets) through `registry`; adding a platform means adding its module to
`PLATFORMS` and its handlers under ffi/<platform>/, nothing else.

- `xla`: XLA's own ops, the default lowering on every platform;
- `cpu`: the C++ kernels (ffi/cpu/), on "cpu";
- `cuda`: the CUDA kernels (ffi/cuda/), on "cuda", where the build has the optional
  `_jax_unpool_cuda` module (other GPU platforms keep the XLA ops);
- `npu`: CANN's aclnn operators (ffi/npu/); installed at run time by
  ``jax_unpool.npu.register``.

``JAX_UNPOOL_BACKEND=xla`` in the environment when jax_unpool is imported puts every
platform, the CPU included, on the `xla` lowerings (what TPUs run): the other modules
still register their FFI targets, so that exported artifacts naming them keep running,
but no lowering of theirs.
"""

from __future__ import annotations

import importlib
import os

import jax.export

from jax_unpool.backends.registry import default_only, keep_default_only

PLATFORMS = ("xla", "cpu", "cuda", "npu")  # in this order: the default first
SWITCH_ENV = "JAX_UNPOOL_BACKEND"
SWITCH_VALUES = ("xla",)


def _modules():
    return [importlib.import_module(f"jax_unpool.backends.{name}") for name in PLATFORMS]


def _switch_from_environment() -> str | None:
    value = os.environ.get(SWITCH_ENV, "")
    if value and value not in SWITCH_VALUES:
        raise ValueError(
            f"jax_unpool: environment variable {SWITCH_ENV} must be one of "
            f"{', '.join(map(repr, SWITCH_VALUES))} or unset (each platform's own backend), "
            f"got {value!r}")
    return value or None


def switch() -> str | None:
    """What ``JAX_UNPOOL_BACKEND`` said when jax_unpool was imported: "xla", or None
    (unset: each platform's own backend)."""
    return "xla" if default_only() else None


def load() -> None:
    """Imports every platform's module (once the operations are declared), after reading
    ``JAX_UNPOOL_BACKEND`` (a ValueError for a value it does not know)."""
    if _switch_from_environment() == "xla":
        keep_default_only()
    _modules()


def stable_targets() -> tuple[str, ...]:
    """Every FFI target of every platform: versioned names that artifacts may record."""
    return tuple(t for m in _modules() for t in getattr(m, "STABLE_TARGETS", ()))


def export_safety_checks() -> list[jax.export.DisabledSafetyCheck]:
    """The ``disabled_checks`` that ``jax.export.export`` needs for functions using these ops.

    ``jax.export`` refuses custom calls that jax itself does not guarantee to keep
    compatible. Ours are: a target's calling convention never changes under its name
    (a change gets a new ``_vN`` target), so a serialized artifact keeps running in any
    process that has imported ``jax_unpool``.
    """
    return [jax.export.DisabledSafetyCheck.custom_call(target) for target in stable_targets()]
