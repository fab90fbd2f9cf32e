"""What pip builds from this checkout: the license ships with it (the text of the Apache
License 2.0, named in the metadata as PEP 639 says, in the wheel that `pip install .`
installed), a second pip build from the same inputs compiles nothing, and an extra
installs on top of the installed package without building it."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import installed_build
import pytest

pytestmark = pytest.mark.release

REPO = installed_build.REPO
LICENSE = (REPO / "LICENSE").read_bytes()
# https://www.apache.org/licenses/LICENSE-2.0.txt, byte for byte (11358 bytes).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_file_is_the_apache_2_0_text():
    assert len(LICENSE) == 11358
    assert hashlib.sha256(LICENSE).hexdigest() == APACHE_2_0_SHA256


def test_the_project_metadata_names_the_license_and_its_file():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"  # an SPDX expression (PEP 639)
    assert project["license-files"] == ["LICENSE"]
    assert "[Apache-2.0](LICENSE)" in (REPO / "README.md").read_text()


def test_the_installed_wheel_ships_the_license():
    dist = installed_build.distribution()
    assert dist.metadata["License-Expression"] == "Apache-2.0"
    assert dist.metadata.get_all("License-File") == ["LICENSE"]
    shipped = [f for f in dist.files if f.parts[-2:] == ("licenses", "LICENSE")]
    assert [f.read_binary() for f in shipped] == [LICENSE]


# --------------------------------------------------------------------------------------
# A second pip build compiles nothing (cmake/kept_build.cmake)
# --------------------------------------------------------------------------------------

def _configure(source: Path, build: Path, *options: str) -> str:
    """CMake's configure step as a pip build runs it (scikit-build-core sets SKBUILD) after
    a new isolated environment made scikit-build-core clear CMake's cache and object files
    in the build directory; its output."""
    (build / "CMakeCache.txt").unlink(missing_ok=True)
    shutil.rmtree(build / "CMakeFiles", ignore_errors=True)
    done = subprocess.run(
        [shutil.which("cmake"), "-S", str(source), "-B", str(build), "-DSKBUILD=2",
         "-DSKBUILD_PROJECT_NAME=jax_unpool", f"-DPython_EXECUTABLE={sys.executable}",
         "-DCMAKE_BUILD_TYPE=Release", *options],
        capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_a_pip_build_from_unchanged_inputs_installs_the_kept_files_without_compiling(tmp_path):
    # A copy of what the extension is built from; the build's module lands next to it.
    source = tmp_path / "source"
    for part in ("ffi", "cmake"):
        shutil.copytree(REPO / part, source / part)
    shutil.copy(REPO / "CMakeLists.txt", source)
    (source / "jax_unpool").mkdir()
    build = tmp_path / "build"
    digest = re.search(r"jax_unpool: digest of the build's inputs (\w+)",
                       _configure(source, build)).group(1)
    # As an earlier pip build with these inputs left it (a stand-in for the module).
    module = f"_jax_unpool{sysconfig.get_config_var('EXT_SUFFIX')}"
    kept = build / "kept-install" / digest / "jax_unpool" / module
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"the module of the earlier build")

    out = _configure(source, build)
    assert f"installing its files from {kept.parents[1]}" in out
    compiled = subprocess.run([shutil.which("cmake"), "--build", str(build)],
                              capture_output=True, text=True, timeout=300, check=True).stdout
    assert "Building CXX" not in compiled and "Linking" not in compiled, compiled
    subprocess.run([shutil.which("cmake"), "--install", str(build), "--prefix",
                    str(tmp_path / "wheel")], capture_output=True, timeout=300, check=True)
    assert (tmp_path / "wheel" / "jax_unpool" / module).read_bytes() == kept.read_bytes()
    assert (source / "jax_unpool" / module).read_bytes() == kept.read_bytes()  # in place

    # Another source, or another option, is another build.
    with open(source / "ffi" / "module.cc", "a") as f:
        f.write("// changed\n")
    assert "installing its files from" not in _configure(source, build)
    (source / "ffi" / "module.cc").write_bytes((REPO / "ffi" / "module.cc").read_bytes())
    assert "installing its files from" not in _configure(source, build,
                                                         "-DJAX_UNPOOL_SANITIZE=ON")


def test_an_extra_of_the_installed_package_installs_without_building_it():
    # What getting-started says: after `pip install .`, `pip install 'jax-unpool[extra]'`
    # adds only the extra's packages. Offline (--no-index), pip can only answer from the
    # installed jax-unpool's metadata; here every extra's package is installed already.
    installed_build.distribution()
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-index",
                           "--quiet", "--report", "-", "jax-unpool[flax,equinox]"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["install"] == []
