"""The aclnn handlers' device path (OnDevice in ffi/npu/aclnn_call.h), which the host
emulation never runs: each device handler called as an NPU plugin's XLA calls it, with a
stream, a device ordinal and a scratch allocator of the recording XLA runtime stand-in
(tests/fake_cann/fake_xla_ffi.cc), against the emulated CANN loaded for a device. What
must hold on a device, read back from both fakes: every launch on XLA's stream (never
CANN's default stream), the workspace from XLA's scratch memory (no aclrtMalloc, no
blocking synchronisation, no free per call), every CANN object released, a cached
workspace where XLA grants none, the device of the calling thread's context checked
against XLA's device ordinal. Each case runs in a fresh process with the extension module
alone (no jax): a process loads one CANN, in one mode.
"""

import ctypes
import json
import textwrap

import pytest
from fake_cann import fake_xla
from fake_cann.check_fake_cann import build
from fresh_process import run_code

import jax_unpool as ju

STREAM, OTHER_STREAM = 0x57EA0, 0x57EB0  # the fake streams XLA hands out

PRELUDE = """
import json, sys
import numpy as np
import numpy_oracle as oracle
import device_mode
ext, fake, xla, handlers = device_mode.setup(*sys.argv[1:4])
STREAM, OTHER_STREAM = {stream}, {other}
rng = np.random.default_rng(0)
xla.set_stream(STREAM)

def unpool2d(shape=(2, 3, 4, 5), hw=(6, 7), index=None):
    x = rng.standard_normal(shape).astype(np.float32)
    idx = oracle.random_indices(rng, shape, hw[0] * hw[1])
    if index is not None:
        idx.reshape(-1)[7] = index
    out = np.full((*shape[:-2], *hw), 7.0, np.float32)
    code, message = xla.call(handlers["max_unpool2d"], [x, idx], [out], {{"channels_last": False}})
    return code, message, code == 0 and np.array_equal(out, oracle.unpool(x, idx, hw))
"""

# Every device handler once, with the values checked against numpy loops: (name, code
# that makes the call and sets `equal`).
CALLS = {
    "max_unpool2d": """
        code, message, equal = unpool2d()""",
    "max_unpool2d_backward": """
        g = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
        idx = oracle.random_indices(rng, (2, 3, 4, 5), 42)
        out = np.full(idx.shape, 7.0, np.float32)
        code, message = xla.call(handlers["max_unpool2d_backward"], [g, idx], [out],
                                 {"channels_last": False})
        equal = np.array_equal(out, oracle.gather(g, idx))""",
    "max_unpool3d": """
        x = rng.standard_normal((2, 3, 2, 3, 4)).astype(np.float32)
        idx = oracle.random_indices(rng, x.shape, 60, np.int64)
        out = np.full((2, 3, 3, 4, 5), 7.0, np.float32)
        code, message = xla.call(handlers["max_unpool3d"], [x, idx], [out])
        equal = np.array_equal(out, oracle.unpool_nd(x, idx, (3, 4, 5)))""",
    "max_unpool3d_backward": """
        g = rng.standard_normal((2, 3, 3, 4, 5)).astype(np.float32)
        idx = oracle.random_indices(rng, (2, 3, 2, 3, 4), 60, np.int64)
        out = np.full(idx.shape, 7.0, np.float32)
        code, message = xla.call(handlers["max_unpool3d_backward"], [g, idx], [out])
        equal = np.array_equal(out, oracle.gather_nd(g, idx, 3))""",
    "max_pool2d": """
        x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
        values, indices = np.zeros((2, 3, 3, 3), np.float32), np.zeros((2, 3, 3, 3), np.int32)
        code, message = xla.call(handlers["max_pool2d"], [x], [values, indices],
                                 {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0),
                                  "dilation": (1, 1), "ceil_mode": False,
                                  "channels_last": False})
        want = oracle.max_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), False)
        equal = np.array_equal(values, want[0]) and np.array_equal(indices, want[1])""",
    "max_pool3d": """
        x = rng.standard_normal((2, 2, 5, 4, 5)).astype(np.float32)
        values = np.zeros((2, 2, 2, 2, 2), np.float32)
        indices = np.zeros(values.shape, np.int32)
        code, message = xla.call(handlers["max_pool3d"], [x], [values, indices],
                                 {"kernel_size": (2, 2, 2), "stride": (2, 2, 2),
                                  "padding": (0, 0, 0), "dilation": (1, 1, 1),
                                  "ceil_mode": False, "channels_last": False})
        want = oracle.max_pool(x, (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False)
        equal = np.array_equal(values, want[0]) and np.array_equal(indices, want[1])""",
}
RUN = {"max_unpool2d": "aclnnMaxUnpool2d", "max_unpool2d_backward": "aclnnMaxUnpool2dBackward",
       "max_unpool3d": "aclnnMaxUnpool3d", "max_unpool3d_backward": "aclnnMaxUnpool3dBackward",
       "max_pool2d": "aclnnMaxPool2dWithIndices", "max_pool3d": "aclnnMaxPool3dWithArgmax"}

EVERY_HANDLER = "records = {}\n" + "".join(
    textwrap.dedent("""
    live0, allocations0 = fake.baseline(), fake.live_allocations()
    xla.reset(); xla.set_stream(STREAM)
    """) + textwrap.dedent(code).strip() + "\n" + textwrap.dedent(f"""
    run = b"{RUN[name]}"
    records["{name}"] = {{
        "code": code, "message": message, "equal": bool(equal),
        "stream": fake.last_stream(run),
        "workspace_is_scratch": fake.last_workspace(run) == xla.last_allocation(),
        "workspace_size": fake.last_workspace_size(),
        "scratch_size": xla.last_allocation_size(),
        "scratch": [xla.count("allocate"), xla.count("free"), xla.live_scratch()],
        "cann_memory": [fake.call_count(f) for f in (b"aclrtMalloc", b"aclrtSynchronizeStream",
                                                    b"aclrtFree")],
        "objects": [fake.live_objects() - live0, fake.live_executors(), fake.bad_destroys(),
                    fake.live_allocations() - allocations0],
        "unexpected_api_calls": xla.count("unexpected"),
    }}
    """) for name, code in CALLS.items()) + "print(json.dumps(records))\n"


@pytest.fixture(scope="module")
def fake_xla_dir(tmp_path_factory):
    return fake_xla.build(tmp_path_factory.mktemp("fake_xla"))


def without_positions_note(message):
    """An unpool handler's error without the note on positions that every one ends with."""
    return message.split(" (any position named here")[0]


def run_device(code, cann_dir, xla_dir):
    """Runs PRELUDE + `code` in a fresh process, the emulated CANN in `cann_dir` loaded for
    a device; returns what the code printed, parsed as JSON."""
    script = PRELUDE.format(stream=STREAM, other=OTHER_STREAM) + textwrap.dedent(code)
    proc = run_code(script, ju._jax_unpool.__file__, str(cann_dir), str(xla_dir))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def every_handler(fake_cann_dir, fake_xla_dir):
    return run_device(EVERY_HANDLER, fake_cann_dir, fake_xla_dir)


@pytest.mark.parametrize("name", list(CALLS))
def test_device_handlers_give_the_oracles_values(every_handler, name):
    record = every_handler[name]
    assert (record["code"], record["message"]) == (0, "")
    assert record["equal"]
    assert record["unexpected_api_calls"] == 0


@pytest.mark.parametrize("name", list(CALLS))
def test_every_launch_is_on_xlas_stream(every_handler, name):
    # Never nullptr, CANN's default stream: XLA orders the call's buffers on its stream.
    assert every_handler[name]["stream"] == STREAM


@pytest.mark.parametrize("name", list(CALLS))
def test_the_workspace_is_xlas_scratch_memory_with_no_malloc_or_sync(every_handler, name):
    record = every_handler[name]
    assert record["workspace_size"] > 0  # the emulator asks for one
    assert record["workspace_is_scratch"]
    assert record["scratch_size"] == record["workspace_size"]
    assert record["scratch"] == [1, 1, 0]  # one allocation, released by XLA after the call
    assert record["cann_memory"] == [0, 0, 0]  # no aclrtMalloc, aclrtSynchronizeStream, aclrtFree


@pytest.mark.parametrize("name", list(CALLS))
def test_every_cann_object_of_a_device_call_is_released(every_handler, name):
    # [live tensors/int arrays/executors over the baseline, live executors, bad destroys,
    # aclrtMalloc'ed blocks over the baseline]
    assert every_handler[name]["objects"] == [0, 0, 0, 0]


WITHOUT_SCRATCH = """
xla.set_scratch_refused(1)
fake.reset()
records = []
for shape, stream in (((2, 3, 4, 5), STREAM), ((2, 3, 4, 5), STREAM), ((1, 3, 4, 5), STREAM),
                      ((2, 3, 4, 5), OTHER_STREAM), ((4, 3, 4, 5), STREAM),
                      ((2, 3, 4, 5), STREAM)):
    xla.set_stream(stream)
    code, message, equal = unpool2d(shape)
    records.append([code, equal, fake.last_workspace(b"aclnnMaxUnpool2d"), fake.live_allocations(),
                    *[fake.call_count(f) for f in (b"aclrtMalloc", b"aclrtSynchronizeStream",
                                                   b"aclrtFree")],
                    fake.last_stream(b"aclrtSynchronizeStream")])
print(json.dumps(records))
"""


def test_without_scratch_memory_the_workspace_is_cached_per_stream(fake_cann_dir,
                                                                    fake_xla_dir):
    # A plugin that grants no scratch memory: one aclrtMalloc'ed block per stream, reused
    # by later calls with no sync and no free; a call that needs more grows it once, after
    # draining that stream. (Per call: [code, equal, workspace, live blocks, aclrtMalloc,
    # aclrtSynchronizeStream, aclrtFree, the stream synchronised].)
    records = run_device(WITHOUT_SCRATCH, fake_cann_dir, fake_xla_dir)
    assert all(r[:2] == [0, True] for r in records), records
    first, second, smaller, other, larger, after = records
    assert first[3:7] == [1, 1, 0, 0]
    assert second[2] == first[2] and second[3:7] == [1, 1, 0, 0]
    assert smaller[2] == first[2] and smaller[3:7] == [1, 1, 0, 0]
    assert other[2] != first[2] and other[3:7] == [2, 2, 0, 0]  # the other stream's own
    assert larger[3:8] == [2, 3, 1, 1, STREAM]  # drained, freed and grown once
    assert after[2] == larger[2] and after[3:7] == [2, 3, 1, 1]


ALLOCATION_FAILS = """
xla.set_scratch_refused(1)
live0 = fake.baseline()
fake.fail_next(b"aclrtMalloc", 207001, b"injected: out of device memory")
code, message, _ = unpool2d((3, 3, 4, 5))
print(json.dumps([code, message, fake.live_executors(), fake.live_objects() - live0,
                  fake.call_count(b"aclnnMaxUnpool2d")]))
"""


def test_a_failed_workspace_allocation_destroys_the_unrun_executor(fake_cann_dir,
                                                                   fake_xla_dir):
    code, message, executors, objects, launches = run_device(ALLOCATION_FAILS, fake_cann_dir,
                                                              fake_xla_dir)
    assert code == 13 and launches == 0
    assert without_positions_note(message) == (
        "max_unpool2d: aclrtMalloc of the workspace failed with error 207001: injected: out "
        "of device memory")
    assert [executors, objects] == [0, 0]


@pytest.fixture(scope="module")
def cann_without_destroy(tmp_path_factory):
    """A CANN whose libnnopbase.so has no aclDestroyAclOpExecutor (older versions)."""
    return build(tmp_path_factory.mktemp("fake_cann_nodestroy"),
                 extra_flags=("-DFAKECANN_NO_DESTROY_EXECUTOR",))


def test_without_acldestroyaclopexecutor_the_leak_is_reported(cann_without_destroy,
                                                                fake_xla_dir):
    # CANN frees an executor only when it runs, or with aclDestroyAclOpExecutor: without
    # the latter, one that cannot run (no workspace) cannot be released. The error says so.
    nnopbase = ctypes.CDLL(str(cann_without_destroy / "libnnopbase.so"))
    assert not hasattr(nnopbase, "aclDestroyAclOpExecutor")
    code, message, executors, objects, launches = run_device(
        ALLOCATION_FAILS, cann_without_destroy, fake_xla_dir)
    assert code == 13 and launches == 0
    assert without_positions_note(message) == (
        "max_unpool2d: aclrtMalloc of the workspace failed with error 207001: injected: out "
        "of device memory; this CANN has no aclDestroyAclOpExecutor, so the executor "
        "aclnnMaxUnpool2dGetWorkspaceSize made could not be released (a host-side leak)")
    assert [executors, objects] == [1, 1]  # the executor, and nothing else


DEVICES = """
records = []
for ordinal, device, ordinal_known in ((0, 0, True), (2, 2, True), (1, 0, True), (0, 3, True),
                                       (1, 0, False)):
    fake.reset()
    fake.set_device(device)
    xla.set_device_ordinal(ordinal, not ordinal_known)
    code, message, equal = unpool2d()
    records.append([code, message, equal,
                    fake.call_count(b"aclnnMaxUnpool2dGetWorkspaceSize")])
fake.reset()
xla.set_device_ordinal(1, 0)
xla.set_api_struct_size(xla.device_ordinal_offset())  # an XLA_FFI_Api without the field
code, message, equal = unpool2d()
records.append([code, message, equal, fake.call_count(b"aclnnMaxUnpool2dGetWorkspaceSize")])
print(json.dumps(records))
"""


def test_the_contexts_device_must_be_the_calls(fake_cann_dir, fake_xla_dir):
    # CANN cannot tell a stream's device; the context's (aclrtGetDevice) must be XLA's
    # device ordinal of the call, or the launch on XLA's stream and the workspace would be
    # on different devices. Where XLA does not tell the ordinal, nothing is checked.
    records = run_device(DEVICES, fake_cann_dir, fake_xla_dir)
    same, same_2, other, other_3, unknown, old_api = records
    for record in (same, same_2, unknown, old_api):
        assert record == [0, "", True, 1], record
    for record, (ordinal, device) in ((other, (1, 0)), (other_3, (0, 3))):
        assert record[0] == 9 and record[3] == 0, record  # FAILED_PRECONDITION, before aclnn
        assert record[1] == (
            f"max_unpool2d: XLA runs this call on the stream of device {ordinal}, but the "
            f"calling thread's ACL context is device {device}'s: the launch and its "
            f"workspace would be on different devices. The PJRT plugin must set the context "
            f"of the call's device on the threads that run custom calls.")


OUT_OF_RANGE = """
fake.reset()
code, message, _ = unpool2d((1, 1, 4, 4), (4, 4), index=1000)
print(json.dumps([code, message, fake.call_count(b"aclnnMaxUnpool2dGetWorkspaceSize")]))
"""


def test_the_device_handlers_never_read_the_indices_on_the_host(fake_cann_dir, fake_xla_dir):
    # Device memory cannot be read on the host without a blocking copy per call, so a
    # direct call of a device target reaches aclnn with its indices unchecked (the NPU
    # lowering clamps them first; docs/npu.md). Here the emulator, which reads host memory,
    # is what refuses index 1000 -- real CANN does not check (hicann/ops-nn).
    code, message, gws_calls = run_device(OUT_OF_RANGE, fake_cann_dir, fake_xla_dir)
    assert gws_calls == 1 and code == 13
    assert message.startswith("max_unpool2d: aclnnMaxUnpool2d failed with status 361001 "
                              "ACLNN_ERR_RUNTIME_ERROR: aclnnMaxUnpool2d: index 1000 at ")
