"""Ascend NPU path: routes the two primitives to CANN's aclnnMaxUnpool2d and
aclnnMaxUnpool2dBackward through the XLA FFI handlers of ffi/npu/.

    register(platform="ascend", library_dir=None)
        Loads CANN (dlopen at run time: importing this module never needs it), registers
        the aclnn FFI targets for `platform` and makes both primitives lower to them there.
        `platform` is the name a JAX PJRT plugin for Ascend registers (none is official;
        it is a parameter). platform="cpu" is the host-emulation mode, for testing: the
        handlers run on host memory with no stream, e.g. against the emulated CANN in
        tests/fake_cann, and both primitives' CPU lowering goes through them,
        process-wide, until unregister_cpu_emulation() (or use `cpu_emulation()`).
    is_available(library_dir=None) -> bool
        Whether CANN can be loaded (or already is); never raises.
    locate(library_dir=None) -> dict
        Where CANN would be (or was) loaded from; raises RuntimeError like register().

CANN search order: library_dir; $ASCEND_TOOLKIT_HOME/lib64; $ASCEND_HOME_PATH/lib64;
/usr/local/Ascend/ascend-toolkit/latest/lib64; /usr/local/Ascend/cann/lib64; the dynamic
loader's path. The first directory holding libascendcl.so, libnnopbase.so and libopapi.so
(or libopapi_nn.so) wins. Loading is once per process: a later register() whose
library_dir resolves to other files raises; a failed load can be retried.

Shapes aclnn refuses -- an empty input, or a forward whose output plane is smaller than
its input plane (only possible with duplicated indices) -- are lowered to the jnp
reference, which gives the same result.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

import jax
from jax.extend.core import Primitive
from jax.interpreters import mlir

from jax_unpool import _args, _ffi, _jax_unpool, _primitives, _sharding, reference
from jax_unpool._primitives import max_unpool2d_backward_p, max_unpool2d_p

__all__ = [
    "MAX_UNPOOL2D_BACKWARD_TARGET",
    "MAX_UNPOOL2D_TARGET",
    "cpu_emulation",
    "cpu_emulation_active",
    "is_available",
    "locate",
    "register",
    "unregister_cpu_emulation",
]

# Stable and versioned, like the CPU targets: jax.export artifacts record them.
MAX_UNPOOL2D_TARGET = _ffi.ACLNN_MAX_UNPOOL2D_TARGET
MAX_UNPOOL2D_BACKWARD_TARGET = _ffi.ACLNN_MAX_UNPOOL2D_BACKWARD_TARGET

_lock = threading.Lock()
_targets_registered: set[str] = set()  # platforms
_cpu_emulation = False


def _library_dir(library_dir: str | os.PathLike | None) -> str:
    return "" if library_dir is None else os.fspath(library_dir)


def is_available(library_dir: str | os.PathLike | None = None) -> bool:
    """True if the CANN runtime is already loaded (with library_dir None), or can be found
    and opened from `library_dir` or the default search; never raises."""
    try:
        _jax_unpool.probe_cann(_library_dir(library_dir))
    except Exception:  # noqa: BLE001 -- documented: never raises
        return False
    return True


def locate(library_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """The files CANN would be loaded from (or was, when already loaded and `library_dir`
    is None): {"libascendcl": ..., "libnnopbase": ..., "opapi": ...}. Raises RuntimeError
    listing every path tried and the environment variables consulted."""
    return dict(_jax_unpool.probe_cann(_library_dir(library_dir)))


# --------------------------------------------------------------------------------------
# Lowerings
# --------------------------------------------------------------------------------------

def _aclnn_takes_forward(x_shape, output_size, channels_last: bool) -> bool:
    """aclnnMaxUnpool2d refuses empty C/H/W (and leaves `out` unwritten for an empty x)
    and an output plane smaller than the input plane."""
    h = _args.spatial_axis(len(x_shape), channels_last)
    return (all(d > 0 for d in x_shape)
            and output_size[0] * output_size[1] >= x_shape[h] * x_shape[h + 1])


def _scatter_reference(x, indices, *, output_size, channels_last):
    return reference.scatter_planes(x, indices, output_size, channels_last)


def _gather_reference(grad_output, indices, *, channels_last):
    return reference.gather_planes(grad_output, indices, channels_last)


_forward_reference = mlir.lower_fun(_scatter_reference, multiple_results=False)
_backward_reference = mlir.lower_fun(_gather_reference, multiple_results=False)
_aclnn_forward = _sharding.ffi_call_lowering(MAX_UNPOOL2D_TARGET)
_aclnn_backward = _sharding.ffi_call_lowering(MAX_UNPOOL2D_BACKWARD_TARGET)


def _max_unpool2d_aclnn_lowering(ctx, x, indices, *, output_size, channels_last):
    if not _aclnn_takes_forward(ctx.avals_in[0].shape, output_size, channels_last):
        return _forward_reference(ctx, x, indices, output_size=output_size,
                                  channels_last=channels_last)
    # outputSize is read from the result's shape by the handler: one source of truth.
    return _aclnn_forward(ctx, x, indices, channels_last=channels_last)


def _max_unpool2d_backward_aclnn_lowering(ctx, grad_output, indices, *, channels_last):
    if not all(d > 0 for aval in ctx.avals_in for d in aval.shape):
        return _backward_reference(ctx, grad_output, indices, channels_last=channels_last)
    return _aclnn_backward(ctx, grad_output, indices, channels_last=channels_last)


# --------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------

# Only used to ask JAX whether it knows a platform before anything is registered for it.
_platform_probe_p = Primitive("jax_unpool_npu_platform_probe")


def _check_platform(platform: str) -> None:
    try:
        mlir.register_lowering(_platform_probe_p, lambda ctx, *args: [], platform=platform)
    except NotImplementedError as err:
        raise RuntimeError(
            f"jax_unpool.npu.register: JAX knows no platform {platform!r}: no PJRT plugin "
            f"for it is loaded. Install and import the JAX plugin for your Ascend NPU and "
            f"pass the platform name it registers (none is official today), or use "
            f"platform='cpu' for the host-emulation mode. ({err})") from None


def register(platform: str = "ascend",
             library_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """Routes max_unpool2d_p and max_unpool2d_backward_p to aclnn on `platform`.

    Loads CANN (see the module docstring for the search order), registers the FFI targets
    MAX_UNPOOL2D_TARGET and MAX_UNPOOL2D_BACKWARD_TARGET for `platform` and the primitives'
    lowerings for it. Returns where CANN was loaded from.

    platform="cpu" is the host-emulation mode (testing): the handlers get host memory and
    no stream, and the CPU lowering of both primitives goes through them for the whole
    process until unregister_cpu_emulation(). jax's compilation caches are cleared on both
    transitions so that no program compiled before keeps the other lowering.

    Raises RuntimeError if JAX knows no `platform` (no plugin loaded), or if CANN cannot be
    loaded (the message lists every path tried and the environment variables consulted).
    """
    global _cpu_emulation
    with _lock:
        _check_platform(platform)
        where = dict(_jax_unpool.load_cann(_library_dir(library_dir)))
        host = platform == "cpu"
        if platform not in _targets_registered:
            capsules = _jax_unpool.npu_registrations()
            suffix = "_host" if host else ""
            for op, target in (("max_unpool2d", MAX_UNPOOL2D_TARGET),
                               ("max_unpool2d_backward", MAX_UNPOOL2D_BACKWARD_TARGET)):
                jax.ffi.register_ffi_target(target, capsules[op + suffix], platform=platform)
                if not _targets_registered:  # platform-independent, once per target
                    jax.ffi.register_ffi_target_as_batch_partitionable(target)
            _targets_registered.add(platform)
        mlir.register_lowering(max_unpool2d_p, _max_unpool2d_aclnn_lowering, platform=platform)
        mlir.register_lowering(max_unpool2d_backward_p, _max_unpool2d_backward_aclnn_lowering,
                               platform=platform)
        if host:
            _cpu_emulation = True
            jax.clear_caches()
    return where


def unregister_cpu_emulation() -> None:
    """Ends the host-emulation mode: both primitives lower to the CPU FFI kernels again.
    A no-op when the mode is off."""
    global _cpu_emulation
    with _lock:
        if not _cpu_emulation:
            return
        mlir.register_lowering(max_unpool2d_p, _primitives._max_unpool2d_cpu_lowering,
                               platform="cpu")
        mlir.register_lowering(max_unpool2d_backward_p,
                               _primitives._max_unpool2d_backward_cpu_lowering, platform="cpu")
        _cpu_emulation = False
        jax.clear_caches()


@contextlib.contextmanager
def cpu_emulation(library_dir: str | os.PathLike | None = None) -> Iterator[dict[str, str]]:
    """Host-emulation mode for the duration of a `with` block; on exit the mode is left as
    it was found (off, unless it was on before). Yields where CANN was loaded from."""
    was_on = _cpu_emulation
    where = register("cpu", library_dir)
    try:
        yield where
    finally:
        if not was_on:
            unregister_cpu_emulation()


def cpu_emulation_active() -> bool:
    """Whether the CPU lowering currently goes through the aclnn handlers."""
    return _cpu_emulation
