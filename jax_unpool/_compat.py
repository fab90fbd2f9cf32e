"""The supported jax window, every difference between its releases that we meet, and every
use of a private jax API: in this one module, so that a new jax release is adapted here.

`import jax_unpool` imports this module first: a jax older than the window is an
ImportError before any FFI handler is registered (a handler that jaxlib refuses takes its
whole CPU backend down with it). A jax newer than the newest release tested imports with
one warning: the extension is built against the oldest jaxlib's FFI headers
(`[build-system] requires` in pyproject.toml), and XLA accepts handlers of any FFI API
version from 0.1 up to its own (`kMinSupportedApiVersion` in XLA's
`xla/ffi/ffi_registry.cc`), never a newer one. So the package never pins jax from above:
pip must not downgrade a user's jax (and leave a GPU plugin of another version behind).
"""

from __future__ import annotations

import inspect
import re
import warnings

import jax
import jaxlib.version

# Keep equal to `dependencies` in pyproject.toml (tests/integration/test_jax_window.py checks). Not
# 0.7.0 and 0.7.1: their custom_partitioning has no need_replication_factors, which the
# channels-last sharding rule needs (_sharding.py).
JAX_REQUIREMENT = ">=0.7.2"
OLDEST = (0, 7, 2)
# The newest minor release tested (tests/integration/test_jax_window.py runs its newest patch).
NEWEST_TESTED = (0, 12)
TESTED = f"{'.'.join(map(str, OLDEST))} to {'.'.join(map(str, NEWEST_TESTED))}"


class UntestedJaxWarning(UserWarning):
    """jax or jaxlib is newer than the newest release jax_unpool is tested with."""


def _release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: "0.10.2" -> (0, 10, 2), "0.9.0.1" ->
    (0, 9, 0, 1), "0.11.0.dev20260101" -> (0, 11, 0)."""
    return tuple(int(part) for part in re.match(r"\d+(\.\d+)*", version).group(0).split("."))


def check_window(jax_version: str, jaxlib_version: str) -> str | None:
    """Raises ImportError, naming the oldest supported release, if jax or jaxlib is older;
    returns the warning to give if either is newer than the newest minor tested, else
    None."""
    versions = (("jax", jax_version), ("jaxlib", jaxlib_version))
    older = [f"{name} {v}" for name, v in versions if _release(v) < OLDEST]
    if older:
        raise ImportError(
            f"jax_unpool needs jax and jaxlib {JAX_REQUIREMENT} (tested with {TESTED}), but "
            f"this environment has {' and '.join(older)}. Upgrade them, e.g. "
            f"pip install -U 'jax{JAX_REQUIREMENT}' 'jaxlib{JAX_REQUIREMENT}'.")
    newer = [f"{name} {v}" for name, v in versions if _release(v)[:2] > NEWEST_TESTED]
    if newer:
        return (f"jax_unpool is tested with jax and jaxlib {TESTED}; this environment has "
                f"{' and '.join(newer)}, which it was not tested with. It should work (its "
                f"FFI handlers use an FFI API version that newer jaxlibs accept); please "
                f"report a problem.")
    return None


if (_untested := check_window(jax.__version__, jaxlib.version.__version__)) is not None:
    warnings.warn(_untested, UntestedJaxWarning, stacklevel=2)

# Private modules: imported once the window is checked, since outside it they may differ.
from jax._src import dispatch
from jax._src.lib import xla_client
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import ad, mlir

# --------------------------------------------------------------------------------------
# Varying manual axes (shard_map)
# --------------------------------------------------------------------------------------

# jax 0.10 and later keep an aval's varying manual axes in `aval.mat.varying` (a
# ManualAxisType), 0.7 to 0.9 in `aval.vma`. Both are what `jax.typeof(x)` shows; there is
# no accessor that spans the window.
_MANUAL_AXIS_TYPE = hasattr(jax.core.ShapedArray, "mat")


def varying_axes(aval) -> frozenset:
    """The manual mesh axes `aval` varies over (empty outside shard_map)."""
    return aval.mat.varying if _MANUAL_AXIS_TYPE else aval.vma


def with_varying(aval, varying: frozenset) -> dict:
    """Keyword arguments of `aval.update` that give the result these varying axes."""
    if _MANUAL_AXIS_TYPE:
        return {"manual_axis_type": aval.mat.update(varying=varying)}
    return {"vma": varying}


def cast_to_varying(x, axes: tuple):
    """`x` made varying over the manual `axes`: `jax.lax.pcast(x, axes, to="varying")`,
    which jax 0.7 has as `jax.lax.pvary(x, axes)` (deprecated in 0.8.2, removed in 0.10)."""
    if hasattr(jax.lax, "pcast"):
        return jax.lax.pcast(x, axes, to="varying")
    return jax.lax.pvary(x, axes)


# --------------------------------------------------------------------------------------
# 64-bit types
# --------------------------------------------------------------------------------------

def enable_x64(enabled: bool = True):
    """A context manager that turns 64-bit types on (or off) inside it: `jax.enable_x64`
    from jax 0.8; 0.7 has it as `jax.experimental.enable_x64` (removed in 0.9)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(enabled)
    from jax.experimental import enable_x64 as experimental_enable_x64

    return experimental_enable_x64(enabled)


# --------------------------------------------------------------------------------------
# Autodiff
# --------------------------------------------------------------------------------------

def zero_tangent(primal) -> ad.Zero:
    """The symbolic zero tangent of `primal` (`ad.Zero.from_primal_value`, which jax 0.9
    removed: this is what it did)."""
    return ad.Zero(jax.typeof(primal).to_tangent_aval())


# --------------------------------------------------------------------------------------
# Symbolic shapes (jax.export)
# --------------------------------------------------------------------------------------

# What a comparison of symbolic dims raises when their constraints leave it open:
# jax.errors has it from jax 0.10 (jax.core's is deprecated there, removed in 0.11),
# jax.core before.
InconclusiveDimensionOperation = (getattr(jax.errors, "InconclusiveDimensionOperation", None)
                                  or jax.core.InconclusiveDimensionOperation)


def emit_shape_assertion(ok: ir.Value, inputs: list[ir.Value], message: str) -> None:
    """Emits jax.export's own call-time check, which shape refinement evaluates when an
    exported function is called with concrete shapes: a side-effecting `shape_assertion`
    custom call on the boolean `ok` and the integers that `message` formats as {0}, {1},
    ... Private, no public API: the protocol of `jax._src.export.shape_poly`, which
    jax.export emits for its own shape constraints."""
    op = hlo.CustomCallOp([], [ok, *inputs], "shape_assertion", has_side_effect=True)
    op.attributes["error_message"] = ir.StringAttr.get(message)


# --------------------------------------------------------------------------------------
# Lowering
# --------------------------------------------------------------------------------------

# From jax 0.10 on, mlir.aval_to_ir_type takes the lowering's module context first.
_IR_TYPE_TAKES_CONTEXT = "ctx" in inspect.signature(mlir.aval_to_ir_type).parameters


def ir_type(ctx, aval):
    """The MLIR type of `aval` in the lowering `ctx` (a LoweringRuleContext)."""
    if _IR_TYPE_TAKES_CONTEXT:
        return mlir.aval_to_ir_type(ctx.module_context, aval)
    return mlir.aval_to_ir_type(aval)


def require_devices_during_lowering(primitive) -> None:
    """Makes a jit lowering of `primitive` see its device assignment, without which
    `jax.experimental.custom_partitioning` inside its lowering fails. Private, no public
    API: jax's own registry (`jax._src.dispatch`; its cuDNN attention registers there)."""
    dispatch.prim_requires_devices_during_lowering.add(primitive)


def lowering_for_export(ctx) -> bool:
    """Whether this lowering is for `jax.export` (a custom_partitioning callback lives in
    the tracing process and cannot be serialized). Private, no public API:
    `LoweringRuleContext.module_context` is jax-internal."""
    return ctx.module_context.lowering_parameters.for_export


# --------------------------------------------------------------------------------------
# FFI handlers of PJRT plugins (private: jax.ffi registers targets but cannot be asked)
# --------------------------------------------------------------------------------------

def platforms_with_ffi_handler(names: list[str]) -> list[str]:
    """Those of `names` under which a PJRT plugin has installed its FFI handler: a target
    registered under any other name is only queued by xla_client, and compiling then
    fails with "no registered implementation for custom call". Private, no public API:
    xla_client's handler registry (`jax._src.lib.xla_client`)."""
    handlers = xla_client._custom_callback_handler
    return [n for n in names if xla_client.xla_platform_names.get(n, n) in handlers]


def install_ffi_handler(platform: str, handler) -> None:
    """What a PJRT plugin does when it loads (`xla_client.register_custom_call_handler`,
    private): `handler(name, capsule, platform, api_version, traits)` receives every FFI
    target registered for `platform`. For tests that stand in for a plugin."""
    xla_client.register_custom_call_handler(platform, handler)
