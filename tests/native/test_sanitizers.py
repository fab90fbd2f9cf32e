"""The native code under AddressSanitizer and UndefinedBehaviorSanitizer.

Builds the extension with -DJAX_UNPOOL_SANITIZE=ON (cached across runs in pytest's cache
directory, so a rerun only recompiles what changed), puts it next to a copy of the
package's Python sources, and runs, in subprocesses with the sanitizer runtimes preloaded,
tests/helpers/exercise_kernels.py and the test files that drive the native code hardest.
The interpreter itself is not instrumented, so ASan must be loaded before anything else
(LD_PRELOAD) for its allocator to see every buffer XLA hands the kernels. Any report
aborts the run; a test fails on a non-zero exit or on a report in the output. The build
is a Debug one with the kernels at -Og: the sanitizers check every access the source
makes at any optimisation level, and an instrumented -O3 build took four minutes. Cold
this takes about 5 minutes on 2 cores, warm about 4.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from cpu_features import cpu_has_avx2

pytestmark = pytest.mark.release

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "helpers" / "exercise_kernels.py"
REPORTS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


def _runtime(cxx: str, name: str) -> str | None:
    """The compiler's own sanitizer runtime (it must match the one the module links)."""
    path = subprocess.run([cxx, f"-print-file-name={name}"], capture_output=True, text=True,
                          check=True).stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.fixture(scope="module")
def toolchain() -> dict[str, str]:
    cxx, cmake = shutil.which("g++"), shutil.which("cmake")
    if cxx is None or cmake is None or importlib.util.find_spec("nanobind") is None:
        pytest.skip("building the sanitizer extension needs g++, cmake and nanobind "
                    "(pip install nanobind cmake)")
    runtimes = [_runtime(cxx, name) for name in ("libasan.so", "libubsan.so")]
    if None in runtimes:
        pytest.skip(f"{cxx} has no shared ASan/UBSan runtime (libasan.so, libubsan.so)")
    return {"cxx": cxx, "cmake": cmake, "preload": " ".join(runtimes)}


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)


@pytest.fixture(scope="module")
def sanitized_package(request, tmp_path_factory, toolchain) -> Path:
    """A directory holding jax_unpool (this checkout's sources) with the sanitized module."""
    cache = getattr(request.config, "cache", None)
    root = cache.mkdir("jax_unpool_sanitize") if cache else tmp_path_factory.mktemp("sanitize")
    build = Path(root) / "build"
    configure = [toolchain["cmake"], "-S", str(REPO), "-B", str(build),
                 # The CPU module only: the CUDA one cannot run here (no GPU).
                 "-DJAX_UNPOOL_SANITIZE=ON", "-DJAX_UNPOOL_CUDA=OFF", "-DCMAKE_BUILD_TYPE=Debug",
                 "-DSKBUILD_PROJECT_NAME=jax_unpool", f"-DPython_EXECUTABLE={sys.executable}",
                 f"-DCMAKE_CXX_COMPILER={toolchain['cxx']}"]
    compile_ = [toolchain["cmake"], "--build", str(build), "-j", "2"]
    if _run(configure).returncode != 0:  # e.g. a cache left by a checkout at another path
        shutil.rmtree(build, ignore_errors=True)
    for cmd in (configure, compile_):
        done = _run(cmd)
        assert done.returncode == 0, f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}"
    (module,) = build.glob("_jax_unpool.*.so")
    package = Path(root) / "pkg" / "jax_unpool"
    shutil.rmtree(package.parent, ignore_errors=True)
    shutil.copytree(REPO / "jax_unpool", package,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy2(module, package / module.name)
    return package.parent


def test_sanitized_module_is_instrumented(sanitized_package):
    # Guards the CMake option: a build that silently dropped the flags would pass below.
    (module,) = (sanitized_package / "jax_unpool").glob("_jax_unpool.*.so")
    data = module.read_bytes()
    assert b"__asan_report_store" in data and b"__ubsan_handle_" in data


# A healthy child prints at every test (pytest -q) or phase (the exercise script) within
# seconds, under ASan within a minute or two; only a hang stays silent this long. No limit
# on the whole run: on a loaded machine a healthy run takes as long as it takes.
SILENCE_LIMIT_S = 20 * 60


def run_until_silent(cmd: list[str], silence_limit_s: float, **popen) -> tuple[int, str, str]:
    """Runs `cmd` to its end, unless it prints nothing (stdout or stderr) for
    `silence_limit_s`: then it is killed. Returns (exit status, stdout, stderr); the exit
    status is None for a killed child."""
    # Files, not pipes: the child never blocks on a full pipe while we watch it.
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = subprocess.Popen(cmd, stdout=out, stderr=err, **popen)
        printed, last_output = 0, time.monotonic()
        while (status := child.poll()) is None:
            time.sleep(min(2.0, silence_limit_s / 4))
            size = os.fstat(out.fileno()).st_size + os.fstat(err.fileno()).st_size
            if size != printed:
                printed, last_output = size, time.monotonic()
            elif time.monotonic() - last_output > silence_limit_s:
                child.kill()
                child.wait()
                break  # status stays None
        out.seek(0)
        err.seek(0)
        return status, out.read().decode(errors="replace"), err.read().decode(errors="replace")


def run_sanitized(args: list[str], package: Path, preload: str,
                  extra_env: dict[str, str] | None = None) -> str:
    """Runs `python *args` with the sanitizer runtimes preloaded and `package` first on the
    path (also as the working directory, which `python -m` puts first), and `extra_env`;
    returns the output after asserting a clean exit without any sanitizer report."""
    env = dict(os.environ, **(extra_env or {}), LD_PRELOAD=preload,
               PYTHONUNBUFFERED="1",  # progress as it comes
               PYTHONPATH=os.pathsep.join([str(package), os.environ.get("PYTHONPATH", "")]),
               # CPython and jaxlib keep allocations alive until exit by design: no leak check.
               ASAN_OPTIONS="detect_leaks=0:halt_on_error=1",
               UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    status, stdout, stderr = run_until_silent([sys.executable, *args], SILENCE_LIMIT_S,
                                              env=env, cwd=package)
    output = stdout + stderr
    assert status is not None, f"no output for {SILENCE_LIMIT_S} s, stopped:\n{output[-20000:]}"
    assert status == 0, output[-20000:]
    assert not [r for r in REPORTS if r in output], output[-20000:]
    return stdout


def test_a_slow_child_that_keeps_printing_runs_to_its_end():
    # 3 s in all, never 1 s silent: a whole-run limit of 2 s would have stopped it.
    code = "import time\nfor i in range(12):\n    print(i, flush=True)\n    time.sleep(0.25)"
    status, stdout, _ = run_until_silent([sys.executable, "-c", code], 2.0)
    assert (status, stdout.split()) == (0, [str(i) for i in range(12)])


def test_a_silent_child_is_stopped():
    code = "import time\nprint('started', flush=True)\ntime.sleep(60)\nprint('late')"
    start = time.monotonic()
    status, stdout, _ = run_until_silent([sys.executable, "-c", code], 1.0)
    assert (status, stdout) == (None, "started\n")
    assert time.monotonic() - start < 30


def test_kernel_exercise_runs_clean_under_asan_and_ubsan(sanitized_package, toolchain):
    # Both ops, every byte width, int32/int64, NCHW/NHWC, rank 3/4, zero sizes, errors,
    # thread-pool splits and Python threads: see the script. Its backward gathers with
    # AVX2 wherever the CPU has it (the default on Intel); the pytest run below takes the
    # CPU's default, scalar loads on AMD, so both gather loops run sanitized.
    out = run_sanitized([str(SCRIPT)], sanitized_package, toolchain["preload"],
                        {"JAX_UNPOOL_CPU_GATHER": "vector"})
    # the module that ran is the sanitized one, not an installed copy
    assert f"extension: {sanitized_package / 'jax_unpool'}" in out, out
    assert f"gathers: {'avx2' if cpu_has_avx2() else 'scalar'}" in out, out
    assert "checks passed" in out


# Tests that drive the native code hard: the kernels' own tests (thread splits, large
# results, first bad index across chunks; the window offsets' kernels), the aclnn handlers against the emulated CANN,
# hand-built calls (the pool's too) and an edited artifact at the FFI boundary (their
# child processes inherit the preloaded runtimes and the sanitized package),
# concurrency, deterministic errors, and the bitwise properties on random shapes.
SANITIZED_TESTS = [
    "native/test_cpu_kernels.py", "backends/npu/test_aclnn_unpool.py",
    "backends/npu/test_aclnn_unpool3d.py", "backends/npu/test_aclnn_pools.py",
    "native/test_concurrency.py", "native/test_error_determinism.py",
    "native/test_ffi_boundary.py", "native/test_pool_ffi_boundary.py",
    "native/test_window_kernels.py",
    "ops/test_properties.py::test_forward_ffi_oracle_and_reference_agree_bitwise",
    "ops/test_properties.py::test_backward_ffi_oracle_and_reference_agree_bitwise"]
# Left out, as CI time is budgeted: the loader tests that start a fresh interpreter to
# load an emulated CANN a particular way (their handler calls are the ones the tests above
# make; under ASan each child costs tens of seconds), the grid of thread-pool splits
# per dtype (a minute under ASan: the exercise script splits every byte width), and the
# backward tests rerun with the other gather loop (the exercise script runs that one).
NOT_SANITIZED = ("not (in_a_fresh_process or already_loaded_runtime or a_cann_without "
                 "or split_across_threads or other_gather_loop)")


def test_native_code_tests_run_clean_under_asan_and_ubsan(sanitized_package, toolchain):
    paths = [str(REPO / "tests" / t) for t in SANITIZED_TESTS]
    # -o addopts=: one process (no xdist workers) under the sanitizers.
    out = run_sanitized(["-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider",
                         "-k", NOT_SANITIZED, *paths], sanitized_package,
                        toolchain["preload"])
    assert " passed" in out and " failed" not in out, out[-5000:]
