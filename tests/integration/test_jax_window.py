"""The supported jax window: the package metadata states it with no upper bound, a jax older
than it is an ImportError raised before any FFI handler is registered, a newer one than
tested imports with one warning, and the tests marked `jax_window` pass with the newest
patch release of every jax minor in it.

Each release gets its own virtual environment -- that jax and jaxlib, pytest, flatbuffers
(for jax.export) and a wheel of this checkout, no torch -- in $JAX_UNPOOL_WINDOW_DIR
(default: build/jax-window in the checkout), where a later run reuses it and reinstalls
only the wheel. jax 0.11 and 0.12 need Python 3.12 or newer (3.11's pip stops at 0.10.2),
so they run on Python 3.12 and 3.13 (pyenv's, or python3.12/python3.13 on PATH).

The wheel is the release wheel for that Python (tools/build-wheels: cp311 for Python 3.11,
cp312-abi3 for 3.12 and 3.13; both manylinux_2_28, with the CPU and CUDA kernels, built
against the oldest jaxlib's FFI headers as for users), built once per hash of the files it
is made from (tests/helpers/release_wheels.py, shared with tests/tools/test_wheels.py) and
installed with `pip install --no-index --no-deps`, so that nothing can be built there. Run
one release alone with `pytest tests/integration/test_jax_window.py -k 0.8.3`. Two releases
run at a time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import fresh_process
import pytest
import release_wheels

from jax_unpool import _compat

pytestmark = pytest.mark.release

REPO = Path(__file__).resolve().parents[2]
# The newest patch release of every minor in the window, oldest first, and the Python it
# runs on: the extension is built against the first one's headers.
RELEASES = {"0.7.2": "3.11", "0.8.3": "3.11", "0.9.2": "3.11", "0.10.2": "3.11",
            "0.11.2": "3.12", "0.12.1": "3.13"}
SUBSET = "jax_window"
THIS_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


# --------------------------------------------------------------------------------------
# The window
# --------------------------------------------------------------------------------------

def test_metadata_states_the_window_without_an_upper_bound():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    dependencies = project["project"]["dependencies"]
    # No upper bound: pip would downgrade a user's jax to satisfy one.
    assert f"jax{_compat.JAX_REQUIREMENT}" in dependencies
    assert f"jaxlib{_compat.JAX_REQUIREMENT}" in dependencies
    assert not [d for d in dependencies if d.startswith("jax") and "<" in d]
    requires = project["build-system"]["requires"]
    oldest = next(iter(RELEASES))
    # The build takes the oldest jaxlib's FFI headers from ffi/third_party, not from pip.
    assert not [r for r in requires if r.startswith("jax")]
    vendored = (REPO / "ffi" / "third_party" / "xla" / "README.md").read_text()
    assert f"jaxlib **{oldest}**" in vendored
    assert _compat.JAX_REQUIREMENT == f">={oldest}"
    minors = [tuple(int(p) for p in r.split(".")[:2]) for r in RELEASES]
    assert minors == [(0, m) for m in range(7, _compat.NEWEST_TESTED[1] + 1)]


@pytest.mark.parametrize("version,expected", [
    ("0.6.2", "older"), ("0.7.1", "older"), ("0.7.2", None), ("0.9.0.1", None),
    ("0.10.2", None), ("0.11.2", None), ("0.12.0.1", None), ("0.12.1", None), ("0.12.7", None),
    ("0.13.0", "newer"), ("0.13.0.dev20270101", "newer"), ("1.0.0", "newer"),
])
def test_older_releases_are_refused_and_newer_ones_warned_about(version, expected):
    for jax_version, jaxlib_version in ((version, "0.10.2"), ("0.10.2", version)):
        which = "jax" if jax_version == version else "jaxlib"
        if expected == "older":
            with pytest.raises(ImportError) as err:
                _compat.check_window(jax_version, jaxlib_version)
            assert str(err.value).startswith(
                f"jax_unpool needs jax and jaxlib >=0.7.2 (tested with 0.7.2 to 0.12), but "
                f"this environment has {which} {version}.")
        elif expected == "newer":
            assert _compat.check_window(jax_version, jaxlib_version).startswith(
                f"jax_unpool is tested with jax and jaxlib 0.7.2 to 0.12; this environment "
                f"has {which} {version}, which it was not tested with.")
        else:
            assert _compat.check_window(jax_version, jaxlib_version) is None


def test_an_older_jax_is_an_import_error_before_any_handler():
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
    assert lines[0].startswith("ImportError: jax_unpool needs jax and jaxlib >=0.7.2 (tested "
                               "with 0.7.2 to 0.12), but this environment has jax 0.6.2.")
    assert lines[1:] == ["extension loaded: False", "cpu: 6.0"]


def test_a_newer_jax_than_tested_imports_with_one_warning_and_runs():
    # As if jax and jaxlib 0.13.0 were installed: one warning naming both and the tested
    # range, and the native pool gives numpy's answer.
    proc = fresh_process.run_code(
        "import warnings, jax, jaxlib.version, numpy as np, numpy_oracle\n"
        "jax.__version__ = jaxlib.version.__version__ = '0.13.0'\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import jax_unpool as ju\n"
        "for w in caught:\n"
        "    print(w.category.__name__, w.message)\n"
        "x = np.random.default_rng(0).normal(size=(2, 3, 6, 6)).astype(np.float32)\n"
        "values, indices = ju.max_pool2d_with_indices(x, 2)\n"
        "want = numpy_oracle.max_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), False)\n"
        "print('pool:', np.array_equal(values, want[0]) and np.array_equal(indices, want[1]))\n")
    assert proc.returncode == 0, proc.stderr
    *warned, pool = proc.stdout.splitlines()
    assert warned == [(
        "UntestedJaxWarning jax_unpool is tested with jax and jaxlib 0.7.2 to 0.12; this "
        "environment has jax 0.13.0 and jaxlib 0.13.0, which it was not tested with. It "
        "should work (its FFI handlers use an FFI API version that newer jaxlibs accept); "
        "please report a problem.")]
    assert pool == "pool: True"


# --------------------------------------------------------------------------------------
# The subset on every release of the window
# --------------------------------------------------------------------------------------

def _window_dir() -> Path:
    return Path(os.environ.get("JAX_UNPOOL_WINDOW_DIR", REPO / "build" / "jax-window"))


@pytest.fixture(scope="module")
def fake_cann() -> Path:
    """The emulated CANN, built once for every release."""
    from fake_cann import build

    return build(_window_dir() / "fake_cann")


_pip_lock = threading.Lock()  # one pip install at a time: they share pip's cache


def _pip(python: Path, *args: str, timeout: int = 900) -> None:
    """`pip args...` on the environment of `python`, with this process's pip."""
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python),
                           "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pip {' '.join(args)} failed for {python}:\n{proc.stdout}\n"
                           f"{proc.stderr}")


def _interpreter(version: str) -> str:
    """A Python `version` ("3.12") interpreter: this one, pyenv's newest patch release of
    it, or python<version> on PATH."""
    if version == THIS_PYTHON:
        return sys.executable
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    found = sorted(root.glob(f"versions/{version}.*/bin/python{version}"), reverse=True,
                   key=lambda p: [int(n) for n in re.findall(r"\d+", p.parent.parent.name)])
    for candidate in [*found, shutil.which(f"python{version}")]:
        if candidate and subprocess.run(
                [str(candidate), "-c", f"import sys; assert sys.version.startswith('{version}.')"],
                capture_output=True, check=False).returncode == 0:
            return str(candidate)
    raise RuntimeError(f"jax {'/'.join(r for r, p in RELEASES.items() if p == version)} runs "
                       f"on Python {version}, which is not installed: e.g. `pyenv install "
                       f"{version}`, or put python{version} on PATH")


def _environment(release: str) -> Path:
    """The virtual environment of `release` (made once): that jax and jaxlib, pytest and
    flatbuffers; its Python."""
    venv = _window_dir() / f"jax-{release}"
    python = venv / "bin" / "python"
    ready = venv / "ready"
    with _pip_lock:
        if not ready.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([_interpreter(RELEASES[release]), "-m", "venv", "--without-pip",
                            str(venv)], check=True)
            # --no-compile: compiling all of jax costs more than it saves
            _pip(python, "install", "-q", "--no-compile", f"jax=={release}",
                 f"jaxlib=={release}", "pytest", "flatbuffers")
            ready.touch()
    return python


def _install_release_wheel(release: str) -> Path:
    """The environment of `release` with the release wheel for its Python installed as a
    user would, but offline and without dependencies, so that nothing can be built."""
    python = _environment(release)
    wheel = release_wheels.wheel_for(RELEASES[release])  # built first if need be
    with _pip_lock:
        _pip(python, "install", "-q", "--no-compile", "--no-index", "--no-deps",
             "--force-reinstall", str(wheel))
        _pip(python, "check")  # the wheel's requirements (the window) hold for this jax
    return python


SUBSET_RUN = """\
import importlib.metadata, re, sys
import jax, jaxlib.version, jax_unpool, pytest
tag = re.search(r"^Tag: (\\S+)$", importlib.metadata.distribution("jax-unpool").read_text(
    "WHEEL"), re.M).group(1)
print("jax", jax.__version__, "jaxlib", jaxlib.version.__version__, "python",
      sys.version.split()[0], "wheel", tag, "jax_unpool from", jax_unpool.__file__, flush=True)
sys.exit(pytest.main(sys.argv[1:]))
"""


def _run_subset(release: str, fake_cann: Path, work: Path) -> dict:
    """Runs the tests marked `jax_window` in the environment of `release`, from an empty
    directory (so that the wheel is imported, not this source tree)."""
    python = _install_release_wheel(release)
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
            "wheel": release_wheels.wheel_for(RELEASES[release]),
            "header": proc.stdout.splitlines()[0].split() if proc.stdout else [],
            "output": f"{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}",
            "counts": {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
            if suite is not None else {}}


@pytest.fixture(scope="module")
def subset_runs(request, fake_cann, tmp_path_factory) -> dict:
    """The run of every selected release, two at a time (one per core of CI's two); an
    exception (e.g. an environment that could not be built) is that release's result."""
    releases = [item.callspec.params["release"] for item in request.session.items
                if item.originalname == "test_the_subset_passes_with_every_jax_of_the_window"]
    work = tmp_path_factory.mktemp("jax_window")
    with ThreadPoolExecutor(max(1, min(2, os.cpu_count() or 1))) as pool:
        # The wheels' build first, while the other thread makes the environments; their
        # errors show in the runs.
        pool.submit(release_wheels.build)
        for release in releases:
            pool.submit(_environment, release)
        futures = {r: pool.submit(_run_subset, r, fake_cann, work / r) for r in releases}
    return {r: f.exception() or f.result() for r, f in futures.items()}


@pytest.mark.parametrize("release", RELEASES)
def test_the_subset_passes_with_every_jax_of_the_window(release, subset_runs):
    run = subset_runs[release]
    if isinstance(run, BaseException):
        raise run
    output = run["output"]
    assert run["returncode"] == 0, output
    header = run["header"]
    assert header[:4] == ["jax", release, "jaxlib", release], output
    assert header[4] == "python" and header[5].startswith(f"{RELEASES[release]}."), output
    # the release wheel, by its tag, imported from the environment
    assert header[6:8] == ["wheel", "-".join(run["wheel"].stem.split("-")[-3:])], output
    assert Path(header[-1]).is_relative_to(run["python"].parent.parent), output
    counts = run["counts"]
    assert counts["tests"] > 0 and counts["failures"] == counts["errors"] == 0, output
    assert counts["skipped"] == 0, output
