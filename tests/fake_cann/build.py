"""Builds the emulated CANN runtime (tests/fake_cann) with the system C++ compiler.

``build(out_dir)`` writes into ``out_dir``, under the real CANN library names:

- ``libnnopbase.so``: aclCreateTensor, aclDestroyTensor, aclCreateIntArray,
  aclDestroyIntArray, aclCreateScalar, aclDestroyScalar, aclDestroyAclOpExecutor, the
  shared state and the ``fakecann_*`` test controls;
- ``libascendcl.so``: aclGetRecentErrMsg, aclrtMalloc, aclrtFree, aclrtMemcpy,
  aclrtSynchronizeStream, aclrtGetCurrentContext, aclrtGetDevice, aclrtGetSocName;
- ``libopapi.so`` (or ``opapi_name``, e.g. ``libopapi_nn.so``): the eight
  aclnnMaxUnpool{2,3}d* entry points, the four of aclnnMaxPool2dWithIndices and
  aclnnMaxPool3dWithArgmax and the six of the ops-math ops aclnnClamp, aclnnMax and
  aclnnMin; or, with ``layout``, the libraries of another CANN packaging, or of a CANN
  without some of the ops (LAYOUTS).

Every library carries its file name as its SONAME, as real CANN's do, so that
``dlopen(name, RTLD_NOLOAD)`` finds an already loaded copy.

libascendcl.so and the opapi library forward to the libnnopbase.so of their own
directory, so all three share one state per output directory. A build is skipped when a
stamp in ``out_dir`` matches the hash of the sources and options, and each library
already compiled from the same sources and options (in ``$FAKECANN_CACHE``, default a
directory under the system's temp dir) is copied instead of compiled again. Usable as a script:
``python tests/fake_cann/build.py OUT_DIR [OPAPI_NAME | LAYOUT]``.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

HERE = pathlib.Path(__file__).resolve().parent
SOURCES = ("fake_cann.h", "forward_to_core.h", "core.cc", "ascendcl.cc", "opapi.cc")
CXXFLAGS = (
    "-std=c++17",
    "-O2",
    "-fPIC",
    "-shared",
    "-fvisibility=hidden",
    "-fvisibility-inlines-hidden",
    "-Wall",
    "-Wextra",
    "-pthread",
)
# Only the CANN API and the test controls are exported.
VERSION_SCRIPT = "{ global: acl*; fakecann_*; local: *; };\n"
STAMP = ".fakecann-build"

# Which aclnn entry points an opapi library exports, as bits: the two functions of
# aclnnMaxUnpool2d, of its backward, of aclnnMaxUnpool3d, of its backward, of
# aclnnMaxPool2dWithIndices, of aclnnMaxPool3dWithArgmax; MATH: the six of the ops-math
# ops aclnnClamp, aclnnMax and aclnnMin (`@domain aclnn_math`).
FWD2D, BWD2D, FWD3D, BWD3D, POOL2D, POOL3D, MATH = 1, 2, 4, 8, 16, 32, 64
ALL_OPS = FWD2D | BWD2D | FWD3D | BWD3D | POOL2D | POOL3D  # the ops-nn ones
# Opapi libraries per CANN packaging: file name -> the entry points it exports.
LAYOUTS = {
    # CANN 9.x: the ops split by domain, next to the deprecated all-in-one libopapi.so.
    "split": {"libopapi.so": ALL_OPS | MATH, "libopapi_math.so": MATH,
              "libopapi_nn.so": ALL_OPS, "libopapi_cv.so": 0, "libopapi_transformer.so": 0},
    # CANN 8.x installed with --feature: a train/infer pair and the math library, no
    # libopapi*.so. (The pools are forwards: `@domain aclnn_ops_infer`.)
    "feature": {"libaclnn_ops_infer.so": FWD2D | FWD3D | POOL2D | POOL3D,
                "libaclnn_ops_train.so": BWD2D | BWD3D, "libaclnn_math.so": MATH},
    # A CANN whose op library has the 2-D unpool ops only: no aclnnMaxUnpool3d(Backward),
    # no pools.
    "no3d": {"libopapi.so": FWD2D | BWD2D | MATH},
    # A CANN with the four unpool ops but neither aclnnMaxPool2dWithIndices nor
    # aclnnMaxPool3dWithArgmax.
    "nopool": {"libopapi.so": FWD2D | BWD2D | FWD3D | BWD3D | MATH},
    # A CANN whose op library has the two backwards but neither forward.
    "noforward": {"libopapi.so": BWD2D | BWD3D | MATH},
    # A split install without the ops-math package: no aclnnClamp, aclnnMax, aclnnMin.
    "nomath": {"libopapi_nn.so": ALL_OPS},
}
OPAPI_FILES = sorted({"libopapi.so", "libopapi_nn.so", *(n for v in LAYOUTS.values() for n in v)})


# Every library a build compiles, by the hash of everything it is made from: the test
# suite builds the emulator some twenty times (per worker, per packaging, per fresh
# process), and core.cc, the same in each, takes seconds to compile.
_CACHE = pathlib.Path(os.environ.get("FAKECANN_CACHE")
                      or pathlib.Path(tempfile.gettempdir()) / f"fakecann-cache-{os.getuid()}")


def _target_key(build_key: str, lib: str, args: Sequence[str]) -> str:
    return hashlib.sha256("\0".join([build_key, lib, *args]).encode()).hexdigest()[:32]


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    raise RuntimeError("no C++ compiler found (set CXX, or install g++)")


def build(
    out_dir: pathlib.Path,
    opapi_name: str = "libopapi.so",
    *,
    layout: str | None = None,
    extra_flags: Sequence[str] = (),
) -> pathlib.Path:
    """Compiles the emulated CANN libraries into ``out_dir`` and returns it.

    ``opapi_name`` names the library holding the aclnn symbols ("libopapi.so", or
    "libopapi_nn.so" to test a loader's fallback; only that one is written).
    ``layout`` ("split", "feature", "no3d", "nopool", "noforward" or "nomath", see LAYOUTS)
    writes
    that packaging's libraries instead.
    ``extra_flags`` go to every compile, e.g. ``("-fsanitize=address",)`` or ``("-g",)``.
    """
    if "/" in opapi_name or not opapi_name.endswith(".so"):
        raise ValueError(f"opapi_name must be a plain .so file name, got {opapi_name!r}")
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {sorted(LAYOUTS)} or None, got {layout!r}")
    opapis = LAYOUTS[layout] if layout else {opapi_name: ALL_OPS | MATH}
    out_dir = pathlib.Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    cxx = _compiler()

    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (HERE / name).read_bytes() + b"\0")
    for item in (cxx, *CXXFLAGS, *extra_flags, VERSION_SCRIPT):
        digest.update(item.encode() + b"\0")
    sources_key = digest.hexdigest()  # what every library is made from
    digest.update(repr(sorted(opapis.items())).encode())
    key = digest.hexdigest()  # and which libraries

    targets = {
        "libnnopbase.so": ["core.cc"],
        "libascendcl.so": ["ascendcl.cc", "-ldl"],
        **{name: ["opapi.cc", f"-DFAKECANN_OPS={ops}", "-ldl"] for name, ops in opapis.items()},
    }
    stamp = out_dir / STAMP
    if (
        stamp.is_file()
        and stamp.read_text() == key
        and all((out_dir / lib).is_file() for lib in targets)
    ):
        return out_dir

    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".fakecann-tmp-") as tmp:
        version_script = pathlib.Path(tmp) / "exports.map"
        version_script.write_text(VERSION_SCRIPT)
        for lib, args in targets.items():
            tmp_lib = pathlib.Path(tmp) / lib
            cached = _CACHE / f"{lib}-{_target_key(sources_key, lib, args)}"
            if cached.is_file():  # built before, by this or another process
                shutil.copy2(cached, tmp_lib)
                continue
            cmd = [
                cxx,
                *CXXFLAGS,
                *extra_flags,
                f"-Wl,--version-script={version_script}",
                f"-Wl,-soname,{lib}",
                "-Wl,-Bsymbolic",
                "-o",
                str(tmp_lib),
                str(HERE / args[0]),
                *args[1:],
            ]
            proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(
                    f"building fake CANN {lib} failed:\n{' '.join(cmd)}\n{proc.stderr}"
                )
            _CACHE.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=_CACHE, prefix=".tmp-", delete=False) as part:
                shutil.copyfile(tmp_lib, part.name)
            os.replace(part.name, cached)  # atomic: a reader sees no half-written file
        # Atomic replacement: a process that already loaded an older build keeps its
        # mapping; concurrent builders into one directory end with a complete set.
        for lib in targets:
            os.replace(pathlib.Path(tmp) / lib, out_dir / lib)
        stale = [p for p in OPAPI_FILES if p not in opapis]
        for name in stale:
            (out_dir / name).unlink(missing_ok=True)
        (pathlib.Path(tmp) / STAMP).write_text(key)
        os.replace(pathlib.Path(tmp) / STAMP, stamp)
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(f"usage: build.py OUT_DIR [OPAPI_NAME | {' | '.join(LAYOUTS)}]")
    arg = sys.argv[2] if len(sys.argv) == 3 else "libopapi.so"
    out = pathlib.Path(sys.argv[1])
    print(build(out, layout=arg) if arg in LAYOUTS else build(out, arg))
