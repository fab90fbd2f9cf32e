"""The CANN loader (ffi/npu/cann_library.cc) against the emulated CANN laid out as real
installs are (tests/fake_cann/installs.py): per-file symlinks under latest/, one versioned
directory or one per package, the runtime preloaded (as a PJRT plugin would) by path or by
soname through either; and its two modes: a CANN loaded for the host emulation never serves
a device-mode load, nor the other way round. Each case runs in a fresh process (most with
the extension module alone, tests/helpers/cann_loads.py): a process loads one runtime, and this
one loads none.
"""

import json

import pytest
from fake_cann.check_fake_cann import build
from fake_cann.installs import LAYOUTS, install
from fresh_process import run, run_code

import jax_unpool as ju


def loads(steps, preload=None, env=None):
    """The answers of `steps` in a fresh process (see tests/helpers/cann_loads.py)."""
    spec = {"module": ju._jax_unpool.__file__, "preload": preload and str(preload),
            "steps": [[kind, str(where), *rest] for kind, where, *rest in steps]}
    proc = run("cann_loads.py", json.dumps(spec), env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def installs(fake_cann_dir, tmp_path_factory):
    """Copies of the session's emulator build: other files than fake_cann_dir's."""
    return {layout: install(fake_cann_dir, tmp_path_factory.mktemp(layout), layout)
            for layout in LAYOUTS}


@pytest.fixture(params=LAYOUTS)
def cann(request, installs):
    return installs[request.param]


def _env(cann, ld_library_path=""):
    # set_env.sh's variables; ASCEND_HOME_PATH empty counts as unset.
    return {"ASCEND_TOOLKIT_HOME": str(cann.root / "latest"), "ASCEND_HOME_PATH": "",
            "LD_LIBRARY_PATH": str(ld_library_path)}


def _where(cann):
    """What every load must answer: the real files, wherever they were reached from."""
    real = {name: str(path.resolve()) for name, path in cann.files.items()}
    return {"libascendcl": real["libascendcl.so"], "libnnopbase": real["libnnopbase.so"],
            "opapi": next(v for k, v in real.items() if k.startswith(("libopapi", "libaclnn")))}


# How the runtime was already loaded: not at all, by path or by soname (the loader's search
# over LD_LIBRARY_PATH), through latest/ or through the versioned directory.
PRELOADS = ["none", "path via latest", "path via versioned", "soname via latest",
            "soname via versioned"]


@pytest.mark.parametrize("preload", PRELOADS)
def test_every_install_layout_loads_through_every_path(cann, fake_cann_dir, preload):
    kind, _, through = preload.partition(" via ")
    directory = {"latest": cann.latest, "versioned": cann.runtime}.get(through)
    library = None
    if kind == "path":
        library = directory / "libascendcl.so"
    elif kind == "soname":
        library = "libascendcl.so"
    other = fake_cann_dir  # another install: other files
    steps = [("probe", ""), ("load", cann.latest, False), ("load", cann.latest_arch, False),
             ("load", "", False), ("probe", "")]
    if cann.runtime.parent.name == "cann-9.0.0":  # a complete CANN directory by itself
        steps.append(("load", cann.runtime, False))
    answers = loads([*steps, ("load", other, False)], library,
                    _env(cann, directory if kind == "soname" else ""))
    assert answers[:-1] == [{"where": _where(cann)}] * len(steps)
    # A genuinely different runtime is still refused.
    refusal = answers[-1].get("error", "")
    assert (f"library_dir='{other}' holds another libascendcl.so and would load a second "
            f"CANN runtime") in refusal, answers[-1]


def test_a_runtime_whose_directory_lacks_the_other_libraries_says_where_to_look(installs):
    # The runtime preloaded from a package directory holding only it, nothing in the
    # environment naming the install: the loader cannot guess the rest.
    cann = installs["packages"]
    (answer,) = loads([("load", "", False)], cann.runtime / "libascendcl.so",
                      {"ASCEND_TOOLKIT_HOME": "", "ASCEND_HOME_PATH": ""})
    message = answer["error"]
    assert f"{cann.runtime} (the directory libascendcl.so was loaded from): no libnnopbase.so" \
        in message, message
    assert "pass library_dir=" in message


HOST_THEN_DEVICE = "a CANN loaded for the host-emulation mode"


def test_a_host_mode_load_never_serves_a_device_mode_load(cann):
    answers = loads([("load", cann.latest, True), ("load", "", False),
                     ("load", cann.latest, False), ("probe", "")], env=_env(cann))
    assert answers[0] == {"where": _where(cann)}
    for answer in answers[1:3]:
        assert answer["error"].startswith(
            f"CANN is loaded in this process for the host-emulation mode "
            f"(register('cpu', library_dir)) from {_where(cann)['libascendcl']}"), answer
    assert answers[3] == {"where": _where(cann)}  # it is loaded: locate() says where


def test_a_device_mode_load_never_serves_the_host_emulation(cann):
    answers = loads([("load", cann.latest, False), ("load", cann.latest, True)],
                    env=_env(cann))
    assert answers[0] == {"where": _where(cann)}
    assert answers[1]["error"].startswith(
        f"CANN is loaded in this process for an NPU platform from "
        f"{_where(cann)['libascendcl']}"), answers[1]


DEVICE_AFTER_HOST = """
import sys
import jax
import jax_unpool as ju
npu = ju.npu
with npu.cpu_emulation(sys.argv[1]):
    pass  # this process's CANN is now the emulator, loaded for the host emulation
# A device platform whose plugin has devices and an FFI handler: only the load decides.
calls = []
npu._require_devices = lambda platform: None
npu._compat.platforms_with_ffi_handler = lambda names: names
jax.ffi.register_ffi_target = lambda *a, **k: calls.append(a)
npu.registry.install = lambda *a, **k: calls.append(a)
for library_dir in (None, sys.argv[1]):
    try:
        npu.register("npu_test_device", library_dir)
    except RuntimeError as err:
        print(str(err).split(" from ")[0])
print(calls)  # no target, no lowering: device pointers never reach the emulator
"""


def test_no_device_platform_is_registered_against_the_host_emulation(fake_cann_dir):
    proc = run_code(DEVICE_AFTER_HOST, str(fake_cann_dir))
    assert proc.returncode == 0, proc.stderr[-4000:]
    refusal = "CANN is loaded in this process for the host-emulation mode (register('cpu', " \
              "library_dir))"
    assert proc.stdout.splitlines() == [refusal, refusal, "[]"]


RUN_BOTH_OPS = """
import ctypes, sys
import jax, numpy as np
import jax_unpool as ju
import numpy_oracle as oracle
ctypes.CDLL(sys.argv[1])  # the runtime, through its package's own directory
print(ju.npu.register("cpu", sys.argv[2])["libnnopbase"])
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
idx = oracle.random_indices(rng, x.shape, 42)
out = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=(6, 7)))(x, idx)
np.testing.assert_array_equal(out, oracle.unpool(x, idx, (6, 7)))
np.testing.assert_array_equal(ju.max_unpool2d_backward(out, x, idx, (6, 7)),
                              oracle.gather(out, idx))
"""


def test_one_directory_per_package_runs_both_ops(installs):
    cann = installs["packages"]
    proc = run_code(RUN_BOTH_OPS, str(cann.runtime / "libascendcl.so"), str(cann.latest))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split() == [str(cann.files["libnnopbase.so"].resolve())]


AFTER_A_LOAD = """
import sys
from jax_unpool import npu
loaded, other = sys.argv[1], sys.argv[2]
npu.register("cpu", loaded)
print(npu.is_available(other), npu.is_available(loaded), npu.is_available())
try:
    npu.locate(other)
except RuntimeError as err:
    print(err)
maps = open("/proc/self/maps").read()
print(other in maps, loaded in maps)
"""


def test_probing_another_directory_after_a_load_maps_nothing(fake_cann_dir, tmp_path):
    # Issue 37 item 5: is_available(library_dir=B) after register(A) opened B's libraries
    # (and ran their initialisers) in a process that talks to A. A process uses one CANN:
    # B is compared by file and reported as unavailable, never opened.
    other = build(tmp_path / "other")
    proc = run_code(AFTER_A_LOAD, str(fake_cann_dir), str(other))
    assert proc.returncode == 0, proc.stderr[-4000:]
    files = ", ".join(str(fake_cann_dir / f) for f in ("libascendcl.so", "libnnopbase.so",
                                                        "libopapi.so"))
    assert proc.stdout.splitlines() == [
        "False True True",
        (f"CANN is already loaded in this process from {files}; library_dir='{other}' does "
         f"not hold those files, and is not opened: a process uses one CANN runtime (restart "
         f"it to use another)."),
        "False True"]
