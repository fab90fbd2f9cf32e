"""The platforms. Each is one module that, when `load` imports it, registers its lowerings
(and FFI targets) through `registry`; adding a platform means adding its module to
`PLATFORMS` and its handlers under ffi/<platform>/, nothing else.

- `xla`: XLA's own ops, the default lowering on every platform;
- `cpu`: the C++ kernels (ffi/cpu/), on "cpu";
- `npu`: CANN's aclnn operators (ffi/npu/); installed at run time by
  ``jax_unpool.npu.register``.
"""

from __future__ import annotations

import importlib

import jax.export

PLATFORMS = ("xla", "cpu", "npu")  # in this order: the default first


def _modules():
    return [importlib.import_module(f"jax_unpool.backends.{name}") for name in PLATFORMS]


def load() -> None:
    """Imports every platform's module (once the operations are declared)."""
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
