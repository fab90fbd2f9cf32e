"""The release files of this checkout, as tools/build-wheels leaves them: the sdist and the
cp311 and cp312-abi3 manylinux wheels. They are built once per hash of every file they are
made from, and kept in build/wheels/<hash> (or $JAX_UNPOOL_WHEELS_DIR/<hash>; only the
newest build is kept) for the next run. tests/tools/test_wheels.py checks them,
tests/integration/test_jax_window.py installs them; on two pytest workers one builds while
the other waits (a file lock)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.tags import cpython_tags
from packaging.utils import parse_wheel_filename

REPO = Path(__file__).resolve().parents[2]  # tests/helpers/ -> the checkout
# What the sdist and the wheels are made from: the build files, the native sources, the
# package, the metadata's readme and license, and the build script with its pinned tools.
INPUTS = ("pyproject.toml", "CMakeLists.txt", "README.md", "LICENSE", "cmake", "ffi",
          "jax_unpool", "tools/build-wheels", "tools/build-wheels.txt")


def root() -> Path:
    return Path(os.environ.get("JAX_UNPOOL_WHEELS_DIR", REPO / "build" / "wheels"))


def inputs_hash() -> str:
    """The hash of the files of INPUTS that git tracks or would track (not the ignored
    ones: the compiled modules next to the sources, __pycache__), as scikit-build-core
    chooses the sdist's files."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                            "--exclude-standard", "--", *INPUTS], cwd=REPO, check=True,
                           capture_output=True).stdout.split(b"\0")
    digest = hashlib.sha256()
    for name in sorted(n.decode() for n in names if n):
        path = REPO / name
        if path.is_file():
            digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build() -> Path:
    """The folder of this checkout's release files, built (tools/build-wheels, with this
    Python's ziglang and auditwheel) unless a build of the same inputs is kept. Its log
    is build-wheels.log there."""
    out = root() / inputs_hash()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "done").is_file():
            for old in out.parent.iterdir():
                if old.is_dir():
                    shutil.rmtree(old)
            out.mkdir()
            with open(out / "build-wheels.log", "w") as log:
                done = subprocess.run([sys.executable, str(REPO / "tools" / "build-wheels"),
                                       str(out)], stdout=log, stderr=subprocess.STDOUT,
                                      timeout=3600, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"tools/build-wheels failed (exit {done.returncode}):\n"
                                   f"{(out / 'build-wheels.log').read_text()[-6000:]}")
            (out / "done").touch()
    return out


def wheels() -> list[Path]:
    """The release wheels, built if need be."""
    return sorted(build().glob("*.whl"))


def sdist() -> Path:
    (found,) = build().glob("*.tar.gz")
    return found


def interpreter(version: str) -> str:
    """A CPython `version` ("3.12"): this one, pyenv's newest, or python<version> on PATH
    (where tools/build-wheels finds it too)."""
    if sys.version.startswith(f"{version}."):
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(pyenv.glob(f"versions/{version}.*/bin/python{version}"), reverse=True,
                   key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.parent.name)])
    for candidate in [*found, shutil.which(f"python{version}")]:
        if candidate:
            return str(candidate)
    raise RuntimeError(f"no Python {version}: pyenv install {version}, or put "
                       f"python{version} on PATH")


def wheel_for(python: str) -> Path:
    """The release wheel that installs on CPython `python` ("3.13"): its own tag, or the
    abi3 one of an older Python."""
    major, minor = (int(p) for p in python.split("."))
    supported = set(cpython_tags((major, minor), abis=[f"cp{major}{minor}"]))
    (wheel,) = [w for w in wheels() if parse_wheel_filename(w.name)[3] & supported]
    return wheel
