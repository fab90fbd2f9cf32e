"""Ascend NPU path: routes the unpool primitives to CANN's aclnnMaxUnpool2d/3d and their
backwards, and the pools' forward to aclnnMaxPool2dWithIndices and
aclnnMaxPool3dWithArgmax where they give PyTorch's result for finite input (CANN does not
support NaN or -inf input to them on Atlas A2/A3; `register(..., aclnn_pools=False)`
keeps the pools on XLA's ops), through the XLA FFI handlers of ffi/npu/.

- `register(platform="ascend", library_dir=None, *, ffi_platform=None, aclnn_pools=True,
  check_device_ordinal=True)` loads CANN (dlopen at run time: importing this module never
  needs it), registers the aclnn FFI targets with the platform's PJRT plugin and lowers
  the primitives to them there; platform="cpu" is the host-emulation mode (tests, with an
  emulated CANN), until `unregister_cpu_emulation()` (or within `cpu_emulation()`).
- `is_available(library_dir=None)`: whether CANN can be loaded; never raises.
- `locate(library_dir=None)`: where CANN would be (or was) loaded from.

docs/npu.md is the guide: where CANN is looked for and in which order, the chips and ops
each routes to aclnn (`jax_unpool.backends.npu_chips`), the value and index dtypes asked
of the loaded CANN, how indices are kept inside their plane (clamped on the device by
default, checked with the unpool primitives' check_indices=True), layouts, sharding,
errors, and what is verified where (sources, the emulator; not hardware).
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Iterator

import jax
import numpy as np

from jax_unpool import _compat
from jax_unpool._extension import module as _jax_unpool
from jax_unpool.backends import npu as _backend
from jax_unpool.backends import npu_chips, registry

__all__ = [
    "MAX_POOL2D_TARGET",
    "MAX_POOL3D_TARGET",
    "MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET",
    "MAX_UNPOOL2D_BACKWARD_TARGET",
    "MAX_UNPOOL2D_CHECKED_TARGET",
    "MAX_UNPOOL2D_TARGET",
    "MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET",
    "MAX_UNPOOL3D_BACKWARD_TARGET",
    "MAX_UNPOOL3D_CHECKED_TARGET",
    "MAX_UNPOOL3D_TARGET",
    "cpu_emulation",
    "cpu_emulation_active",
    "is_available",
    "locate",
    "pool_lowering",
    "register",
    "unregister",
    "unregister_cpu_emulation",
]

#: FFI target of aclnnMaxUnpool2d (stable and versioned: jax.export artifacts record it).
MAX_UNPOOL2D_TARGET = _backend.MAX_UNPOOL2D_TARGET
#: FFI target of aclnnMaxUnpool2dBackward.
MAX_UNPOOL2D_BACKWARD_TARGET = _backend.MAX_UNPOOL2D_BACKWARD_TARGET
#: FFI target of aclnnMaxUnpool3d.
MAX_UNPOOL3D_TARGET = _backend.MAX_UNPOOL3D_TARGET
#: FFI target of aclnnMaxUnpool3dBackward.
MAX_UNPOOL3D_BACKWARD_TARGET = _backend.MAX_UNPOOL3D_BACKWARD_TARGET
#: FFI target of aclnnMaxPool2dWithIndices.
MAX_POOL2D_TARGET = _backend.MAX_POOL2D_TARGET
#: FFI target of aclnnMaxPool3dWithArgmax.
MAX_POOL3D_TARGET = _backend.MAX_POOL3D_TARGET
#: FFI target of aclnnMaxUnpool2d with checked indices (check_indices=True):
#: MAX_UNPOOL2D_TARGET's calling convention; an index outside its plane fails the call.
MAX_UNPOOL2D_CHECKED_TARGET = _backend.MAX_UNPOOL2D_CHECKED_TARGET
#: FFI target of aclnnMaxUnpool2dBackward with checked indices.
MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET = _backend.MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET
#: FFI target of aclnnMaxUnpool3d with checked indices.
MAX_UNPOOL3D_CHECKED_TARGET = _backend.MAX_UNPOOL3D_CHECKED_TARGET
#: FFI target of aclnnMaxUnpool3dBackward with checked indices.
MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET = _backend.MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET

_lock = threading.Lock()
_targets_registered: set[str] = set()  # platforms


def _library_dir(library_dir: str | os.PathLike | None, fn: str = "register") -> str:
    """The directory as the loader takes it ("" for the default search)."""
    if library_dir is None:
        return ""
    path = os.fspath(library_dir) if isinstance(library_dir, (str, os.PathLike)) else None
    if not isinstance(path, str):  # bytes would reach the loader's str argument
        raise TypeError(f"jax_unpool.npu.{fn}: library_dir must be a directory as a str or "
                        f"os.PathLike of str, or None, got {library_dir!r}")
    return path


def _check_arguments(platform: object, ffi_platform: object, aclnn_pools: object,
                     check_device_ordinal: object) -> None:
    if not isinstance(platform, str) or not platform:
        raise TypeError("jax_unpool.npu.register: platform must be JAX's name of the NPU "
                        f"platform, a non-empty str (e.g. 'ascend'), got {platform!r}")
    if ffi_platform is not None and (not isinstance(ffi_platform, str) or not ffi_platform):
        raise TypeError("jax_unpool.npu.register: ffi_platform must be a non-empty str or "
                        f"None, got {ffi_platform!r}")
    for name, value in (("aclnn_pools", aclnn_pools),
                        ("check_device_ordinal", check_device_ordinal)):
        if not isinstance(value, (bool, np.bool_)):  # "no" would count as True
            raise TypeError(f"jax_unpool.npu.register: {name} must be a bool, got {value!r}")


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
    return dict(_jax_unpool.probe_cann(_library_dir(library_dir, "locate")))


def _chip() -> npu_chips.Chip:
    """The chip of the loaded CANN, by its aclrtGetSocName()."""
    return npu_chips.chip(_jax_unpool.cann_soc_name())


def _routing(chip: npu_chips.Chip, aclnn_pools: bool) -> _backend.Routing:
    """How the loaded CANN routes the operations on `chip`: an operator goes to aclnn
    where the op library has it and CANN documents it for the chip; a pool only for the
    value dtypes this CANN takes (float32, listed by every version's doc, and float16 and
    bfloat16 where its GetWorkspaceSize accepts them, asked here)."""
    pools = set()
    if aclnn_pools:
        for k in frozenset(_jax_unpool.cann_pool_ranks()) & chip.pool_ranks:
            accepted = {*_jax_unpool.cann_pool_dtypes(k), "float32"}
            pools |= {(k, np.dtype(jax.numpy.bfloat16 if d == "bfloat16" else d))
                      for d in accepted}
    return _backend.Routing(frozenset(_jax_unpool.cann_ops()) & chip.unpool_ops,
                            frozenset(pools),
                            frozenset(_jax_unpool.cann_clamp_index_dtypes()),
                            frozenset(_jax_unpool.cann_unpool_index_dtypes()))


def pool_lowering(xla_lowering):
    """The NPU lowering rule of a max-pool-with-indices primitive (x -> values, indices of
    spatial rank k = len(kernel_size)) with the loaded CANN on its chip:
    aclnnMaxPool2dWithIndices (1-D and 2-D) or aclnnMaxPool3dWithArgmax where the chip has
    them and they give PyTorch's result for finite input (CANN does not support NaN or
    -inf input to them on Atlas A2/A3), else `xla_lowering`, the primitive's lowering in
    XLA ops, with the same arguments. The
    rule takes the window as the CPU pool target does -- kernel_size, stride, padding,
    dilation (k ints each), ceil_mode -- and channels_last; other parameters only go on to
    `xla_lowering`. `register` installs it for the pools."""
    return _backend.pool_lowering(_routing(_chip(), True), xla_lowering)


# JAX platforms that are never an Ascend NPU: their devices would get CANN calls.
_NOT_ASCEND = frozenset({"gpu", "cuda", "rocm", "oneapi", "tpu"})


def _require_devices(platform: str) -> None:
    if platform in _NOT_ASCEND:
        raise RuntimeError(
            f"jax_unpool.npu.register: platform {platform!r} is not an Ascend NPU platform: "
            f"the aclnn kernels cannot run on its devices. Pass the platform name your "
            f"Ascend PJRT plugin registers, or platform='cpu' for the host-emulation mode.")
    try:
        # Also initialises the backends, and with them the plugin's FFI handler.
        jax.devices(platform)
    except RuntimeError as err:
        raise RuntimeError(
            f"jax_unpool.npu.register: platform {platform!r} has no devices in this process: "
            f"no PJRT plugin for it is loaded, or it found no device. Install and import the "
            f"JAX plugin for your Ascend NPU and pass the platform name it registers (none "
            f"is official today), or use platform='cpu' for the host-emulation mode. "
            f"({err})") from None


def _ffi_platforms(platform: str, ffi_platform: str | None) -> list[str]:
    """Where a plugin may take FFI targets: JAX's platform name and XLA's (upper case, as
    "CUDA" is for "cuda"), unless the caller names it."""
    if ffi_platform is not None:
        return [ffi_platform]
    return list(dict.fromkeys([platform, platform.upper()]))


def register(platform: str = "ascend", library_dir: str | os.PathLike | None = None, *,
             ffi_platform: str | None = None, aclnn_pools: bool = True,
             check_device_ordinal: bool = True) -> dict[str, str]:
    """Routes the unpool primitives of every rank to aclnn on `platform`.

    Loads CANN (see the module docstring for the search order), registers the FFI targets
    MAX_UNPOOL2D_TARGET, MAX_UNPOOL2D_BACKWARD_TARGET, MAX_UNPOOL3D_TARGET,
    MAX_UNPOOL3D_BACKWARD_TARGET, the same four with checked indices
    (MAX_UNPOOL2D_CHECKED_TARGET, ...), MAX_POOL2D_TARGET and
    MAX_POOL3D_TARGET with the platform's plugin and the primitives' lowerings for it.
    Returns where CANN was loaded from.

    The pools' forward goes through aclnnMaxPool2dWithIndices / aclnnMaxPool3dWithArgmax
    where the loaded CANN and the chip have them and they give PyTorch's result for
    finite input (see `pool_lowering`): on Atlas A2/A3 CANN's doc of the 2-D op says NaN
    and -inf input is not supported, and the 3-D op runs the same kernel there. Each op is
    asked here (GetWorkspaceSize, nothing runs) which of float16 and bfloat16 it takes;
    float32 always goes. Call register() on a thread with the device's context for the
    answer. `aclnn_pools=False` keeps the XLA ops, and PyTorch's result for every input,
    for every pool.

    The unpools' handlers clamp their indices with aclnnClamp, whose int64 kernel on the
    910B AI Core is listed in CANN's ops-math but unverified: which index dtypes it takes
    is asked here too (and which aclnnMaxUnpool2d takes: CANN before 8.0.0 took int64
    only). Where int64 is refused, int32 indices go to aclnn as they are and int64 ones
    (and the 3-D backward, which takes int64 only) to XLA's ops.

    On a device each call checks that the calling thread's ACL device is XLA's device
    ordinal of the call (FAILED_PRECONDITION otherwise: the launch and its workspace would
    be on different devices). `check_device_ordinal=False` turns the check off, for the
    whole process, for a PJRT plugin whose device ordinals are not ACL's device numbers;
    the plugin must then set the right context itself.

    The targets go to every name among `platform` and `platform.upper()` under which the
    plugin installed its FFI handler (plugins that follow the CUDA plugin use XLA's
    upper-case name), or to `ffi_platform` when given.

    platform="cpu" is the host-emulation mode (testing): `library_dir` must name an
    emulated CANN; the handlers get host memory and no stream, and the CPU lowering of
    the primitives goes through them (the pools' as on an NPU) for the whole process until
    unregister_cpu_emulation(). jax's compilation caches are cleared on both transitions
    so that no program compiled before keeps the other lowering. A process serves one mode:
    a CANN loaded for the host emulation is never handed device memory, nor a CANN loaded
    for an NPU platform host memory.

    With ``JAX_UNPOOL_BACKEND=xla`` in the environment at import, CANN is loaded and the
    targets registered as above, but `platform` keeps XLA's ops, as every platform does
    under that variable, and a RuntimeWarning says so.

    The chip is read here, from CANN's aclrtGetSocName(), and an op goes to aclnn only
    where CANN documents its operator for it (the module docstring's table): Atlas A2/A3
    and Ascend 950 have all six; the Atlas training series (910) only
    aclnnMaxUnpool2dBackward and aclnnMaxUnpool3dBackward; the Atlas inference series
    (310P) and Atlas 200I/500 A2 none. Elsewhere the op runs XLA's ops. A chip name no
    product has (or none) is a RuntimeWarning, and every op runs XLA's ops. If the op
    library has no aclnnMaxUnpool2d entry points on a chip that should have them, a
    RuntimeWarning says so and the forward unpools lower to XLA's ops
    (channels-first 3-D to aclnnMaxUnpool3d if present); the backwards run aclnn. A CANN
    without aclnnClamp (its ops-math package) cannot keep indices inside
    their plane: a RuntimeWarning says so, and every unpool runs XLA's ops.

    Raises TypeError for a `platform` or `ffi_platform` that is not a non-empty str, a
    `library_dir` that is not None, a str or a str os.PathLike (bytes are refused), or an
    `aclnn_pools` or `check_device_ordinal` that is not a bool; ValueError
    for platform="cpu" without library_dir; RuntimeError if `platform`
    is a GPU/TPU platform or has no devices, if its plugin installed no FFI handler under
    any of the names, if CANN cannot be loaded (the message lists every path tried and
    the environment variables consulted), or if it is loaded in this process in the other
    mode.
    """
    _check_arguments(platform, ffi_platform, aclnn_pools, check_device_ordinal)
    directory = _library_dir(library_dir)
    host = platform == "cpu"
    if host and library_dir is None:
        raise ValueError(
            "jax_unpool.npu.register: platform='cpu' (the host-emulation mode) needs "
            "library_dir, the directory of an emulated CANN such as tests/fake_cann's "
            "build; got None. A real CANN found through the environment would be handed "
            "host memory as device memory.")
    with _lock:
        _require_devices(platform)
        names = _ffi_platforms(platform, ffi_platform)
        targets = _compat.platforms_with_ffi_handler(names)
        if not targets:
            raise RuntimeError(
                f"jax_unpool.npu.register: the PJRT plugin of platform {platform!r} has "
                f"installed no FFI handler under {' or '.join(map(repr, names))}, so the "
                f"aclnn targets would never reach it. Pass ffi_platform=<the XLA platform "
                f"name the plugin gives xla_client.register_custom_call_handler>.")
        where = dict(_jax_unpool.load_cann(directory, host))
        _jax_unpool.npu_device_ordinal_check(bool(check_device_ordinal))
        chip = _chip()
        if chip.product is None:
            soc = _jax_unpool.cann_soc_name()
            named = "names no chip" if soc is None else f"names the chip {soc!r}"
            warnings.warn(
                f"jax_unpool.npu.register: CANN {named} (aclrtGetSocName), not one the aclnn "
                f"operators' docs list (Atlas A2/A3: Ascend910B1..4, Ascend910_93*; Ascend "
                f"950: Ascend950*), so on platform {platform!r} every op runs XLA's ops, "
                f"none aclnn.", RuntimeWarning, stacklevel=2)
        elif chip.unpool_ops and not _jax_unpool.cann_index_safety():
            warnings.warn(
                f"jax_unpool.npu.register: the loaded CANN ({where['opapi']}) has no "
                f"aclnnClamp (CANN's ops-math package, libopapi_math.so), with which the "
                f"aclnn unpool handlers keep indices inside their plane (CANN's unpool "
                f"operators do not check them), so on platform {platform!r} every unpool "
                f"runs XLA's ops.", RuntimeWarning, stacklevel=2)
        elif "max_unpool2d" in chip.unpool_ops and "max_unpool2d" not in _jax_unpool.cann_ops():
            warnings.warn(
                f"jax_unpool.npu.register: the CANN op library {where['opapi']} has no "
                f"aclnnMaxUnpool2d, so on platform {platform!r} the forward unpools run "
                f"XLA's ops (as on a TPU; channels-first 3-D runs aclnnMaxUnpool3d if "
                f"present); the backwards run aclnn.", RuntimeWarning, stacklevel=2)
        if platform not in _targets_registered:
            capsules = _jax_unpool.npu_registrations()
            suffix = "_host" if host else ""
            for op, target in _backend.HANDLERS.items():
                for name in targets:
                    jax.ffi.register_ffi_target(target, capsules[op + suffix], platform=name)
                if not _targets_registered:  # platform-independent, once per target
                    jax.ffi.register_ffi_target_as_batch_partitionable(target)
            _targets_registered.add(platform)
        if registry.default_only():
            warnings.warn(
                f"jax_unpool.npu.register: JAX_UNPOOL_BACKEND=xla (read at import) keeps "
                f"every platform on XLA's ops, so platform {platform!r} does too; CANN is "
                f"loaded and the aclnn targets registered (exported artifacts that call them "
                f"run). Unset the variable to route the ops to aclnn.",
                RuntimeWarning, stacklevel=2)
        else:
            # Clears jax's caches: no program compiled before keeps another routing.
            registry.install(platform,
                             _backend.lowerings(_routing(chip, bool(aclnn_pools))))
    return where


def unregister(platform: str = "ascend") -> None:
    """Undoes `register(platform, ...)`: the primitives on `platform` lower as before it
    (XLA's ops on an NPU platform; the CPU FFI kernels for platform="cpu"), and jax's
    compilation caches are cleared, so no program compiled before keeps the aclnn routing.
    The FFI targets stay registered with the plugin (XLA cannot remove one); a later
    `register` routes to them again. A no-op for a platform `register` never routed.

    Raises TypeError for a `platform` that is not a non-empty str."""
    if not isinstance(platform, str) or not platform:
        raise TypeError(f"jax_unpool.npu.unregister: platform must be a non-empty str, got "
                        f"{platform!r}")
    with _lock:
        if platform in _targets_registered:
            registry.restore(platform)


def unregister_cpu_emulation() -> None:
    """Ends the host-emulation mode: the primitives lower to the CPU FFI kernels again.
    A no-op when the mode is off."""
    with _lock:
        if cpu_emulation_active():
            registry.restore("cpu")


@contextlib.contextmanager
def cpu_emulation(library_dir: str | os.PathLike) -> Iterator[dict[str, str]]:
    """Host-emulation mode, against the emulated CANN in `library_dir`, for the duration of
    a `with` block; on exit the mode is left as it was found (off, unless it was on before).
    Yields where CANN was loaded from."""
    was_on = cpu_emulation_active()
    where = register("cpu", library_dir)
    try:
        yield where
    finally:
        if not was_on:
            unregister_cpu_emulation()


def cpu_emulation_active() -> bool:
    """Whether the CPU lowering currently goes through the aclnn handlers."""
    return registry.serving("cpu", "max_unpool").backend == "npu"
