"""The platforms. Each is one module that, when imported here, registers its lowerings
(and FFI targets) through `registry`; adding a platform means adding its module to the
imports below and its handlers under ffi/<platform>/, nothing else.

- `xla`: XLA's own ops, the default lowering on every platform;
- `cpu`: the C++ kernels (ffi/cpu/), on "cpu";
- `cuda`: the CUDA kernels (ffi/cuda/), on "cuda", where the build has the optional
  `_jax_unpool_cuda` module (other GPU platforms keep the XLA ops);
- `npu`: CANN's aclnn operators (ffi/npu/); installed at run time by
  ``jax_unpool.npu.register``.

``JAX_UNPOOL_BACKEND=xla`` in the environment when jax_unpool is imported puts every
platform, the CPU included, on the `xla` lowerings (what TPUs run), and ``with
jax_unpool.backends.use("xla"):`` does so for what is lowered inside the block: the other
modules still register their FFI targets, so that exported artifacts naming them keep
running, but their lowerings are not used.
"""

from __future__ import annotations

import re

import jax.export

from jax_unpool import _settings
from jax_unpool.backends import cpu, cuda, npu, registry, xla
from jax_unpool.backends.registry import use

__all__ = ["custom_calls", "export_safety_checks", "stable_targets", "switch", "use"]

_MODULES = (xla, cpu, cuda, npu)

if _settings.BACKEND == "xla":
    registry.keep_default_only()


def switch() -> str | None:
    """What ``JAX_UNPOOL_BACKEND`` said when jax_unpool was imported: "xla", or None
    (unset: each platform's own backend)."""
    return "xla" if registry.default_only() else None


def stable_targets() -> tuple[str, ...]:
    """Every FFI target of every platform: versioned names that artifacts may record."""
    return tuple(t for m in _MODULES for t in getattr(m, "STABLE_TARGETS", ()))


def export_safety_checks() -> list[jax.export.DisabledSafetyCheck]:
    """The ``disabled_checks`` that ``jax.export.export`` needs for functions using these ops.

    ``jax.export`` refuses custom calls that jax itself does not guarantee to keep
    compatible. Ours are: a target's calling convention never changes under its name
    (a change gets a new ``_vN`` target), so a serialized artifact keeps running in any
    process that has imported ``jax_unpool``. (Inside ``with jax_unpool.backends.use(
    "xla"):`` an export holds no custom call of ours and needs none of these.)
    """
    return [jax.export.DisabledSafetyCheck.custom_call(target) for target in stable_targets()]


_CUSTOM_CALL = re.compile(r'custom_call\s*@"?([^\s("]+)')


def custom_calls(exported: jax.export.Exported | str) -> tuple[str, ...]:
    """The jax-unpool FFI targets that a ``jax.export`` artifact (or its MLIR text) calls,
    sorted: empty for one exported inside ``with jax_unpool.backends.use("xla"):``, which
    runs where only jax is installed. An artifact that calls any of them runs only in a
    process that has imported ``jax_unpool``; elsewhere XLA refuses it when it compiles
    ("No FFI handler registered for <target>"). jax's own custom calls (such as the
    ``shape_assertion`` of symbolic shapes) are not listed."""
    text = exported if isinstance(exported, str) else exported.mlir_module()
    ours = set(stable_targets())
    return tuple(sorted({t for t in _CUSTOM_CALL.findall(text)
                         if t in ours or t.startswith("jax_unpool_")}))
