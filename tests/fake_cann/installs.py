"""CANN install trees around an emulator build, laid out as CANN's installers lay them out,
symlinks included, for testing how a loader finds and compares libraries.

- ``versioned``: CANN 9.x open-source packages (runtime, opbase, ops-nn) all install into
  ``<root>/cann-9.0.0/<arch>-linux/lib64`` (hicann/runtime ``RuntimeSo.xml``, hicann/opbase
  ``opbase.xml``, hicann/ops-nn ``OpsNNInfo.xml``), with ``cann-9.0.0/lib64`` a link to
  that directory (``install_softlink="lib64"`` in hicann/ops-nn
  ``scripts/package/module/ascend/EngineeringCommon.xml``). The op library there is itself a
  relative link into ``opp/built-in/op_impl/ai_core/tbe/op_api/lib/linux/<arch>``
  (``createOpapiSoftlink`` in hicann/ops-nn ``scripts/package/ops_nn/scripts/opp_common.sh``).
- ``packages``: one versioned directory per package (``runtime-9.0.0``, ``opbase-9.0.0``,
  ``ops-nn-9.0.0``), so the three libraries' real directories all differ.

Both get ``<root>/latest/<arch>-linux/lib64`` holding one relative symlink per library into
the versioned directory (``createOpapiLatestSoftlink`` in ``opp_common.sh``: ``ln -s`` of
``realpath --relative-to``), and ``latest/lib64`` linking to it, the directory that
``$ASCEND_TOOLKIT_HOME/lib64`` names.
"""

from __future__ import annotations

import os
import pathlib
import platform
import shutil
from dataclasses import dataclass

ARCH_DIR = f"{platform.machine()}-linux"
LIBRARIES = ("libascendcl.so", "libnnopbase.so")
LAYOUTS = ("versioned", "packages")


@dataclass(frozen=True)
class Install:
    root: pathlib.Path
    latest: pathlib.Path       # <root>/latest/lib64, what $ASCEND_TOOLKIT_HOME/lib64 names
    latest_arch: pathlib.Path  # <root>/latest/<arch>-linux/lib64, the per-file links
    runtime: pathlib.Path      # a versioned directory holding libascendcl.so (not via latest)
    files: dict[str, pathlib.Path]  # library name -> the real file


def _link(target: pathlib.Path, link: pathlib.Path) -> None:
    """A relative symlink at `link` to `target`, as the installers make them."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def install(build_dir: pathlib.Path, root: pathlib.Path, layout: str) -> Install:
    """Copies the emulator libraries of `build_dir` (libascendcl.so, libnnopbase.so and one
    op library) into `root` in `layout` (LAYOUTS)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    opapi = [p.name for p in build_dir.glob("lib*.so") if p.name not in LIBRARIES]
    if len(opapi) != 1:
        raise ValueError(f"{build_dir} must hold exactly one op library, has {opapi}")
    names = (*LIBRARIES, opapi[0])
    files: dict[str, pathlib.Path] = {}
    listed: dict[str, pathlib.Path] = {}  # name -> its entry in a versioned <arch>-linux/lib64
    if layout == "versioned":
        version = root / "cann-9.0.0"
        lib64 = version / ARCH_DIR / "lib64"
        lib64.mkdir(parents=True)
        (version / "lib64").symlink_to(pathlib.Path(ARCH_DIR) / "lib64")
        opp = version / "opp/built-in/op_impl/ai_core/tbe/op_api/lib/linux" / platform.machine()
        opp.mkdir(parents=True)
        for name in names:
            files[name] = (opp if name == opapi[0] else lib64) / name
            shutil.copy2(build_dir / name, files[name])
            if name == opapi[0]:
                _link(files[name], lib64 / name)
            listed[name] = lib64 / name
        runtime = version / "lib64"
    else:
        package = {"libascendcl.so": "runtime", "libnnopbase.so": "opbase"}
        for name in names:
            lib64 = root / f"{package.get(name, 'ops-nn')}-9.0.0" / ARCH_DIR / "lib64"
            lib64.mkdir(parents=True)
            files[name] = listed[name] = lib64 / name
            shutil.copy2(build_dir / name, files[name])
        runtime = files["libascendcl.so"].parent
    latest_arch = root / "latest" / ARCH_DIR / "lib64"
    for name in names:
        _link(listed[name], latest_arch / name)
    (root / "latest" / "lib64").symlink_to(pathlib.Path(ARCH_DIR) / "lib64")
    return Install(root, root / "latest" / "lib64", latest_arch, runtime, files)
