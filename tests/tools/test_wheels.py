"""The release wheels (tools/build-wheels): a cp311 and a cp312-abi3 wheel, each tagged
manylinux_2_28 as `auditwheel show` confirms, each under 8 MB with the CPU and the CUDA
modules and nothing to load but glibc's own libraries, nor any symbol but glibc's and the
interpreter's; each CUDA module imports with every kernel in the registry its handlers
walk; importing one on a machine without a GPU loads no libcuda; the sdist they are built from holds every source; the release
workflow runs the same command. tests/helpers/release_wheels.py builds them once per hash
of their inputs (kept in build/wheels); tests/integration/test_jax_window.py installs them
beside jax 0.7.2 to 0.12.1 and runs the `jax_window` subset there."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import json
import re
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import cuda_kernels
import pytest
import release_wheels

pytestmark = pytest.mark.release
# auditwheel's, in the release extra (pip install '.[release]').
DynamicSection = pytest.importorskip("elftools.elf.dynamic").DynamicSection
ELFFile = pytest.importorskip("elftools.elf.elffile").ELFFile

REPO = release_wheels.REPO
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
TAGS = ("cp311-cp311-manylinux_2_28_x86_64", "cp312-abi3-manylinux_2_28_x86_64")
MODULE_SUFFIX = {TAGS[0]: ".cpython-311-x86_64-linux-gnu.so", TAGS[1]: ".abi3.so"}
# What a manylinux wheel may load from the system without grafting it (PEP 600's list,
# auditwheel's policy): of it, the modules may need only glibc's own libraries.
GLIBC_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                   "ld-linux-x86-64.so.2"}


@pytest.fixture(scope="module")
def wheels() -> dict[str, Path]:
    """The release wheels by tag, built if need be."""
    return {"-".join(w.stem.split("-")[-3:]): w for w in release_wheels.wheels()}


def test_a_release_has_a_cp311_and_a_cp312_abi3_wheel(wheels):
    assert sorted(w.name for w in wheels.values()) == [
        f"jax_unpool-{VERSION}-{tag}.whl" for tag in TAGS]


@pytest.mark.parametrize("tag", TAGS)
def test_auditwheel_confirms_manylinux_2_28_or_older(wheels, tag):
    shown = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheels[tag])],
                           capture_output=True, text=True, timeout=300, check=True).stdout
    text = " ".join(shown.split())
    found = re.search(r'is consistent with the following platform tag: "manylinux_2_(\d+)_'
                      r'x86_64"', text)
    assert found and int(found.group(1)) <= 28, shown
    # Nothing grafted or needed beyond glibc: no libstdc++, no CUDA runtime, no libcuda.
    libraries = set(re.findall(r"(lib[\w+-]+\.so(?:\.\d+)*) with versions", text))
    assert libraries and libraries <= GLIBC_LIBRARIES, shown


def _modules(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as whl:
        return {n: whl.read(n) for n in whl.namelist() if n.endswith(".so")}


def _elves(wheel: Path) -> dict[str, ELFFile]:
    """Each module of the wheel, as pyelftools reads it (from memory)."""
    return {n: ELFFile(io.BytesIO(data)) for n, data in _modules(wheel).items()}


@pytest.mark.parametrize("tag", TAGS)
def test_each_wheel_holds_the_package_and_both_modules_in_under_8_mb(wheels, tag):
    wheel = wheels[tag]
    assert wheel.stat().st_size < 8 * 1024 * 1024
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
    suffix = MODULE_SUFFIX[tag]
    assert set(_modules(wheel)) == {f"jax_unpool/_jax_unpool{suffix}",
                                    f"jax_unpool/_jax_unpool_cuda{suffix}"}
    package = {p.relative_to(REPO).as_posix() for p in (REPO / "jax_unpool").rglob("*.py")}
    assert package <= names, sorted(package - names)


@pytest.mark.parametrize("tag", TAGS)
def test_each_module_needs_only_glibc_and_no_newer_than_2_28(wheels, tag):
    # Read from the ELF files themselves: the libraries they name (DT_NEEDED) and the
    # glibc symbol versions they require.
    for name, elf in _elves(wheels[tag]).items():
        dynamic = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
        needed = {t.needed for t in dynamic.iter_tags() if t.entry.d_tag == "DT_NEEDED"}
        versions = {aux.name for section in elf.iter_sections()
                    if section.name == ".gnu.version_r"
                    for _, auxiliaries in section.iter_versions()
                    for aux in auxiliaries}
        assert needed and needed <= GLIBC_LIBRARIES, (name, needed)
        glibc = [tuple(int(p) for p in v.split("_")[1].split(".")) for v in versions
                 if v.startswith("GLIBC_")]
        assert glibc and max(glibc) <= (2, 28), (name, sorted(versions))
        assert not [v for v in versions if not v.startswith("GLIBC_")], (name, versions)


# The Python C API, which the interpreter defines.
PYTHON_SYMBOL = re.compile(r"_?Py[A-Z_]\w*")


@pytest.mark.parametrize("tag", TAGS)
def test_each_module_leaves_undefined_only_glibcs_and_pythons_symbols(wheels, tag):
    # The modules carry their C++ runtime (libc++, static): a symbol they leave undefined
    # must be glibc's (versioned) or the interpreter's. Anything else fails the import, as
    # libstdc++'s std::__throw_length_error did, left by a CUDA kernel object (nvcc's GCC)
    # that used std::vector.
    for name, elf in _elves(wheels[tag]).items():
        versions = {aux.entry["vna_other"]: aux.name
                    for _, auxiliaries in elf.get_section_by_name(".gnu.version_r")
                    .iter_versions() for aux in auxiliaries}
        versym = elf.get_section_by_name(".gnu.version")
        unresolved = [
            symbol.name for i, symbol in enumerate(elf.get_section_by_name(".dynsym")
                                                   .iter_symbols())
            if symbol.name and symbol["st_shndx"] == "SHN_UNDEF"
            and symbol["st_info"]["bind"] != "STB_WEAK"
            and not str(versions.get(versym.get_symbol(i)["ndx"], "")).startswith("GLIBC_")
            and not PYTHON_SYMBOL.fullmatch(symbol.name)]
        assert not unresolved, (name, unresolved)


@pytest.mark.parametrize("tag", TAGS)
def test_the_cpu_module_takes_memset_and_memcpy_from_glibc(wheels, tag):
    # A runtime helper the toolchain links statically (zig's compiler_rt, brought in by a
    # 128-bit division) defines its own generic memset/memcpy/memmove, and the module's
    # calls then bind to those instead of glibc's: the unpool forward's zero fill took
    # 1.25x the time. The module must leave them undefined, for glibc's.
    elf = next(e for n, e in _elves(wheels[tag]).items()
               if Path(n).name.startswith("_jax_unpool."))
    symbols = {s.name: s["st_shndx"] for s in elf.get_section_by_name(".dynsym").iter_symbols()}
    for name in ("memset", "memcpy", "memmove"):
        assert symbols.get(name) == "SHN_UNDEF", (name, symbols.get(name))
    assert "__divti3" not in symbols


# Loads a wheel's CUDA module alone (no jax): its kernel registry and targets.
LOAD_CUDA_MODULE = """\
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("_jax_unpool_cuda", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
print(json.dumps({"stats": module.kernel_stats(), "targets": sorted(module.registrations())}))
"""


@pytest.mark.parametrize("tag", TAGS)
def test_each_cuda_module_imports_with_every_kernel_in_the_handlers_registry(wheels, tag,
                                                                             tmp_path):
    # The kernels (nvcc with GCC) register themselves when the module loads, in the
    # registry that the handlers (zig's clang with libc++) walk at their instantiate stage:
    # one registry, which holds every kernel of the module's machine code (cuobjdump).
    from jax_unpool.backends import cuda

    (name,) = [n for n in _modules(wheels[tag]) if "/_jax_unpool_cuda" in n]
    path = tmp_path / Path(name).name
    path.write_bytes(_modules(wheels[tag])[name])
    python = release_wheels.interpreter("3.11" if tag.startswith("cp311") else "3.12")
    done = subprocess.run([python, "-I", "-c", LOAD_CUDA_MODULE, str(path)],
                          env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert loaded["targets"] == sorted(cuda.TARGETS)
    assert loaded["stats"] == {"kernels": len(cuda_kernels.kernel_names(path)),
                               "captured_calls": 0, "loads_in_capture": 0}


def _build_wheels_script():
    """tools/build-wheels as a module."""
    loader = importlib.machinery.SourceFileLoader("build_wheels",
                                                  str(REPO / "tools" / "build-wheels"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def test_the_build_checks_each_wheels_cuda_kernel_objects(wheels):
    # Every object of ffi/cuda/*.cu, once per wheel, before the module above was linked.
    log = (release_wheels.build() / "build-wheels.log").read_text()
    checked = re.findall(r"the CUDA kernels' (\d+) objects need nothing of the standard library",
                         log)
    assert checked == [str(len(list((REPO / "ffi" / "cuda").glob("*.cu"))))] * len(TAGS), log


def test_the_check_of_the_kernel_objects_refuses_one_that_needs_libstdcxx(tmp_path):
    # What the kernel registry's std::vector did: GCC's out-of-line error of a vector.
    sources = {"plain": "int Twice(int n) { return 2 * n; }\n",
               "vector": "#include <vector>\nint Count(int n) { std::vector<int> v; "
                         "v.reserve(n); return int(v.capacity()); }\n"}
    objects = {}
    for name, text in sources.items():
        (tmp_path / f"{name}.cc").write_text(text)
        objects[name] = tmp_path / f"{name}.o"
        subprocess.run(["g++", "-O2", "-c", str(tmp_path / f"{name}.cc"), "-o",
                        str(objects[name])], check=True, timeout=120)
    script = _build_wheels_script()
    script.check_kernel_objects([objects["plain"]])
    with pytest.raises(SystemExit, match=r"std::__throw_length_error\(char const\*\)"):
        script.check_kernel_objects([objects["plain"], objects["vector"]])


IMPORT_CHECK = """\
import ctypes, jax_unpool
from jax_unpool.backends import cuda
def libcuda():
    return [l.split()[-1] for l in open("/proc/self/maps") if "libcuda" in l]
print("from", jax_unpool.__file__)
print("cuda module", cuda.available())
print("after import", sorted(set(libcuda())))
ctypes.CDLL("libcuda.so.1")  # the control: the stub is found, and seen once loaded
print("after loading it", sorted(set(libcuda())))
"""


def test_importing_the_wheel_loads_no_libcuda(tmp_path):
    # A fresh environment on this Python (its jax) with its release wheel alone; a stub
    # libcuda.so.1 on the library path, where the CUDA runtime would find the driver. On
    # this machine without a GPU the import must not load it: the static CUDA runtime
    # loads the driver at its first call, which only running a CUDA kernel makes.
    stub = tmp_path / "stub"
    stub.mkdir()
    (stub / "stub.c").write_text("int jax_unpool_stub_libcuda(void) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(stub / "libcuda.so.1"),
                    str(stub / "stub.c")], check=True, timeout=120)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    # --ignore-installed: this Python's own jax-unpool (`pip install .`) is visible there
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-index", "--no-deps", "--ignore-installed",
                    str(release_wheels.wheel_for(f"{sys.version_info[0]}.{sys.version_info[1]}"))],
                   check=True, timeout=300, capture_output=True)
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(stub), "HOME": str(tmp_path)}
    done = subprocess.run([str(python), "-c", IMPORT_CHECK], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert Path(lines[0].split()[1]).is_relative_to(venv), done.stdout
    assert lines[1:] == ["cuda module True", "after import []",
                         f"after loading it ['{stub / 'libcuda.so.1'}']"], done.stdout


def test_the_sdist_holds_every_source_of_a_build(wheels):
    # tools/build-wheels builds the wheels from the unpacked sdist, so the wheels above are
    # its proof that it builds; here: it holds every file git has under the inputs.
    (sdist,) = release_wheels.build().glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    tracked = subprocess.run(["git", "ls-files", "--", *release_wheels.INPUTS], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
    assert tracked and set(tracked) <= names, sorted(set(tracked) - names)
    # and nothing git ignores: no build directory, no compiled module
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                           cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert names - {"PKG-INFO"} <= set(files), sorted(names - {"PKG-INFO"} - set(files))[:10]


def _requirements(lines: list[str]) -> list[str]:
    return sorted(line.split("#")[0].strip() for line in lines if line.split("#")[0].strip())


def test_the_release_extra_has_the_pinned_tools_of_build_wheels():
    tools = _requirements((REPO / "tools" / "build-wheels.txt").read_text().splitlines())
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]["release"]
    assert tools and set(tools) <= set(extra)


def test_the_release_workflow_runs_build_wheels():
    workflow = (REPO / ".github" / "workflows" / "wheels.yml").read_text()
    commands = [line.strip().removeprefix("- ").removeprefix("run: ")
                for line in workflow.splitlines()]
    assert "python -m pip install -r tools/build-wheels.txt" in commands
    assert "python tools/build-wheels dist" in commands
