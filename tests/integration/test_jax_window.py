"""The supported jax window: the package metadata states it, a jax outside it is an
ImportError raised before any FFI handler is registered, and the tests marked
`jax_window` pass with the newest patch release of every jax minor in it.

Each release gets its own virtual environment -- that jax and jaxlib, pytest,
flatbuffers (for jax.export) and the wheel of this checkout's build, no torch -- in
$JAX_UNPOOL_WINDOW_DIR (default: build/jax-window in the checkout), where a later run
reuses it and reinstalls only the wheel. The wheel is the one `pip install .` built and
installed here (the extension is built once, against the oldest jaxlib's FFI headers),
repacked from the installed files. Run one release alone with
`pytest tests/integration/test_jax_window.py -k 0.8.3`. Two releases run at a time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import tomllib
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fresh_process
import installed_build
import pytest

from jax_unpool import _compat

REPO = Path(__file__).resolve().parents[2]
# The newest patch release of every minor in the window, oldest first: the extension is
# built against the first one's headers.
RELEASES = ["0.7.2", "0.8.3", "0.9.2", "0.10.2"]
SUBSET = "jax_window"


# --------------------------------------------------------------------------------------
# The window
# --------------------------------------------------------------------------------------

def test_metadata_states_the_window_and_the_build_uses_the_oldest_headers():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    dependencies = project["project"]["dependencies"]
    assert f"jax{_compat.JAX_WINDOW}" in dependencies
    assert f"jaxlib{_compat.JAX_WINDOW}" in dependencies
    requires = project["build-system"]["requires"]
    assert f"jax=={RELEASES[0]}" in requires and f"jaxlib=={RELEASES[0]}" in requires
    assert [r.split(".")[:2] for r in RELEASES] == [["0", str(m)] for m in range(7, 11)]


@pytest.mark.parametrize("version,inside", [
    ("0.6.2", False), ("0.7.1", False), ("0.7.2", True), ("0.9.0.1", True), ("0.10.2", True),
    ("0.10.3", True), ("0.11.0", False), ("0.11.0.dev20260101", False), ("1.0.0", False),
])
def test_versions_outside_the_window_are_refused(version, inside):
    for jax_version, jaxlib_version in ((version, "0.10.2"), ("0.10.2", version)):
        if inside:
            _compat.check_window(jax_version, jaxlib_version)
        else:
            with pytest.raises(ImportError) as err:
                _compat.check_window(jax_version, jaxlib_version)
            assert str(err.value).startswith(
                f"jax_unpool supports jax and jaxlib {_compat.JAX_WINDOW} (0.7.2 to 0.10), but "
                f"this environment has {'jax' if jax_version == version else 'jaxlib'} "
                f"{version}.")


def test_a_jax_outside_the_window_is_an_import_error_before_any_handler():
    # As if jax 0.6.2 were installed: the ImportError comes before the extension module
    # is loaded (so before any handler is registered), and jax's CPU backend still works.
    proc = fresh_process.run_code(
        "import sys, jax\n"
        "jax.__version__ = '0.6.2'\n"
        "try:\n"
        "    import jax_unpool\n"
        "except ImportError as err:\n"
        "    print('ImportError:', err)\n"
        "print('extension loaded:', 'jax_unpool._jax_unpool' in sys.modules)\n"
        "print('cpu:', float(jax.numpy.arange(4.0).sum()))\n")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"ImportError: jax_unpool supports jax and jaxlib "
                               f"{_compat.JAX_WINDOW} (0.7.2 to 0.10), but this environment "
                               f"has jax 0.6.2.")
    assert lines[1:] == ["extension loaded: False", "cpu: 6.0"]


# --------------------------------------------------------------------------------------
# The subset on every release of the window
# --------------------------------------------------------------------------------------

def _window_dir() -> Path:
    return Path(os.environ.get("JAX_UNPOOL_WINDOW_DIR", REPO / "build" / "jax-window"))


@pytest.fixture(scope="module")
def wheel() -> Path:
    """This checkout's installed build, repacked as a wheel (the same files)."""
    return installed_build.repack(_window_dir())


@pytest.fixture(scope="module")
def fake_cann() -> Path:
    """The emulated CANN, built once for every release."""
    from fake_cann import build

    return build(_window_dir() / "fake_cann")


_pip_lock = threading.Lock()  # one pip at a time: they share pip's cache


def _pip(python: Path, *args: str) -> None:
    """`pip args...` on the environment of `python`, with this process's pip."""
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python),
                           "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed for {python}:\n{proc.stdout}\n"
                           f"{proc.stderr}")


def _environment(release: str, wheel: Path) -> Path:
    """The virtual environment of `release` (made once), with `wheel` installed."""
    venv = _window_dir() / f"jax-{release}"
    python = venv / "bin" / "python"
    ready = venv / "ready"
    install = ("install", "-q", "--no-compile")  # compiling all of jax costs more than it saves
    with _pip_lock:
        if not ready.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)],
                           check=True)
            _pip(python, *install, f"jax=={release}", f"jaxlib=={release}", "pytest",
                 "flatbuffers")
            ready.touch()
        _pip(python, *install, "--no-deps", "--force-reinstall", str(wheel))
        _pip(python, "check")  # the wheel's requirements (the window) hold for this jax
    return python


SUBSET_RUN = """\
import sys
import jax, jaxlib.version, jax_unpool, pytest
print("jax", jax.__version__, "jaxlib", jaxlib.version.__version__, "jax_unpool from",
      jax_unpool.__file__, flush=True)
sys.exit(pytest.main(sys.argv[1:]))
"""


def _run_subset(release: str, wheel: Path, fake_cann: Path, work: Path) -> dict:
    """Runs the tests marked `jax_window` in the environment of `release`, from an empty
    directory (so that the wheel is imported, not this source tree)."""
    python = _environment(release, wheel)
    files = sorted(str(p) for p in (REPO / "tests").rglob("test_*.py")
                   if p.name != Path(__file__).name and f"mark.{SUBSET}" in p.read_text())
    work.mkdir(parents=True)
    report = work / "report.xml"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["JAX_UNPOOL_FAKE_CANN_DIR"] = str(fake_cann)
    # -o addopts=: no xdist there (pyproject's -n), one process per release.
    proc = subprocess.run([str(python), "-c", SUBSET_RUN, "-m", SUBSET, "-q", "-o", "addopts=",
                           "-p", "no:cacheprovider", f"--basetemp={work / 'tmp'}",
                           f"--junitxml={report}", *files],
                          cwd=work, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    suite = ET.parse(report).getroot().find("testsuite") if report.is_file() else None
    return {"python": python, "returncode": proc.returncode,
            "header": proc.stdout.splitlines()[0].split() if proc.stdout else [],
            "output": f"{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}",
            "counts": {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
            if suite is not None else {}}


@pytest.fixture(scope="module")
def subset_runs(request, wheel, fake_cann, tmp_path_factory) -> dict:
    """The run of every selected release, two at a time (one per core of CI's two); an
    exception (e.g. an environment that could not be built) is that release's result."""
    releases = [item.callspec.params["release"] for item in request.session.items
                if item.originalname == "test_the_subset_passes_with_every_jax_of_the_window"]
    work = tmp_path_factory.mktemp("jax_window")
    with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
        futures = {r: pool.submit(_run_subset, r, wheel, fake_cann, work / r) for r in releases}
    return {r: f.exception() or f.result() for r, f in futures.items()}


@pytest.mark.parametrize("release", RELEASES)
def test_the_subset_passes_with_every_jax_of_the_window(release, subset_runs):
    run = subset_runs[release]
    if isinstance(run, BaseException):
        raise run
    output = run["output"]
    assert run["returncode"] == 0, output
    assert run["header"][:4] == ["jax", release, "jaxlib", release], output
    assert Path(run["header"][-1]).is_relative_to(run["python"].parent.parent), output
    counts = run["counts"]
    assert counts["tests"] > 0 and counts["failures"] == counts["errors"] == 0, output
    assert counts["skipped"] == 0, output
