"""The aclnn handlers' device path (OnDevice in ffi/npu/aclnn_call.h), which the host
emulation never runs: each device handler called as an NPU plugin's XLA calls it, with a
stream, a device ordinal and a scratch allocator of the recording XLA runtime stand-in
(tests/fake_cann/fake_xla_ffi.cc), against the emulated CANN loaded for a device. What
must hold on a device, read back from both fakes: every launch on XLA's stream (never
CANN's default stream), the workspace from XLA's scratch memory (no aclrtMalloc, no
blocking synchronisation, no free per call), every CANN object released, cached blocks
where XLA grants none, the device of the calling thread's context checked against XLA's
device ordinal, and no index outside its plane ever reaching CANN's unpool ops: clamped on
the device by the default targets (aclnnClamp into scratch memory), refused with the CPU's
message by the checked ones. Each case runs in a fresh process with the extension module
alone (no jax): a process loads one CANN, in one mode.
"""

import ctypes
import json
import textwrap

import jax
import numpy as np
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

def unpool2d(shape=(2, 3, 4, 5), hw=(6, 7)):
    x = rng.standard_normal(shape).astype(np.float32)
    idx = oracle.random_indices(rng, shape, hw[0] * hw[1])
    out = np.full((*shape[:-2], *hw), 7.0, np.float32)
    code, message = xla.call(handlers["max_unpool2d"], [x, idx], [out], {{"channels_last": False}})
    return code, message, code == 0 and np.array_equal(out, oracle.unpool(x, idx, hw))
"""

# Every device handler once, with the values checked against numpy loops: (name, code
# that makes the call and sets `equal`). The unpools' indices are in range: the clamp
# changes nothing.
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
UNPOOLS = [name for name in CALLS if name.startswith("max_unpool")]
# The position of the indices among an unpool op's tensors (fakecann_last_tensor_data).
INDICES_AT = {name: 2 if name.endswith("backward") else 1 for name in UNPOOLS}

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
        "allocations": [xla.allocation(i) for i in range(xla.count("allocate"))],
        "clamp": [fake.last_stream(b"aclnnClamp"), fake.last_workspace(b"aclnnClamp"),
                  fake.last_tensor_data(b"aclnnClamp", 1)],
        "unpool_indices": fake.last_tensor_data(run, {INDICES_AT.get(name, 0)}),
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


# XLA scratch allocations per call: the unpools' clamped indices, the clamp's workspace
# and the op's; the pools' workspace.
SCRATCH_ALLOCATIONS = {name: 3 if name in UNPOOLS else 1 for name in CALLS}


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
    if name in UNPOOLS:
        assert every_handler[name]["clamp"][0] == STREAM


@pytest.mark.parametrize("name", list(CALLS))
def test_the_workspace_is_xlas_scratch_memory_with_no_malloc_or_sync(every_handler, name):
    record = every_handler[name]
    assert record["workspace_size"] > 0  # the emulator asks for one
    assert record["workspace_is_scratch"]
    assert record["scratch_size"] == record["workspace_size"]
    n = SCRATCH_ALLOCATIONS[name]
    assert record["scratch"] == [n, n, 0]  # released by XLA after the call
    assert record["cann_memory"] == [0, 0, 0]  # no aclrtMalloc, aclrtSynchronizeStream, aclrtFree


@pytest.mark.parametrize("name", UNPOOLS)
def test_the_unpool_op_gets_the_clamped_copy_in_xlas_scratch_memory(every_handler, name):
    # aclnnClamp writes the indices into XLA's scratch memory (the first allocation, never
    # host memory nor the caller's buffer), with a scratch workspace of its own, and the
    # unpool op reads them from there.
    record = every_handler[name]
    indices, clamp_workspace = record["allocations"][:2]
    assert record["clamp"][1:] == [clamp_workspace, indices]
    assert record["unpool_indices"] == indices


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


def test_without_scratch_memory_the_blocks_are_cached_per_stream(fake_cann_dir,
                                                                  fake_xla_dir):
    # A plugin that grants no scratch memory: two aclrtMalloc'ed blocks per stream, one for
    # the clamped indices and one for the workspaces (the clamp's and the op's, which run
    # one after the other on the stream), reused by later calls with no sync and no free;
    # a call that needs more grows each block once, after draining that stream. (Per call:
    # [code, equal, workspace, live blocks, aclrtMalloc, aclrtSynchronizeStream, aclrtFree,
    # the stream synchronised].)
    records = run_device(WITHOUT_SCRATCH, fake_cann_dir, fake_xla_dir)
    assert all(r[:2] == [0, True] for r in records), records
    first, second, smaller, other, larger, after = records
    assert first[3:7] == [2, 2, 0, 0]
    assert second[2] == first[2] and second[3:7] == [2, 2, 0, 0]
    assert smaller[2] == first[2] and smaller[3:7] == [2, 2, 0, 0]
    assert other[2] != first[2] and other[3:7] == [4, 4, 0, 0]  # the other stream's own
    assert larger[3:8] == [4, 6, 2, 2, STREAM]  # both drained, freed and grown once
    assert after[2] == larger[2] and after[3:7] == [4, 6, 2, 2]


ALLOCATION_FAILS = """
xla.set_scratch_refused(1)
live0 = fake.baseline()
fake.fail_next(b"aclrtMalloc", 207001, b"injected: out of device memory")
x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
values, indices = np.zeros((2, 3, 3, 3), np.float32), np.zeros((2, 3, 3, 3), np.int32)
code, message = xla.call(handlers["max_pool2d"], [x], [values, indices],
                         {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0),
                          "dilation": (1, 1), "ceil_mode": False, "channels_last": False})
print(json.dumps([code, message, fake.live_executors(), fake.live_objects() - live0,
                  fake.call_count(b"aclnnMaxPool2dWithIndices"), fake.bad_destroys(),
                  fake.call_count(b"aclSetAclOpExecutorRepeatable")]))
"""


def test_a_failed_workspace_allocation_destroys_the_unrun_executor(fake_cann_dir,
                                                                   fake_xla_dir):
    # Issue 47: CANN's docs let aclDestroyAclOpExecutor destroy only an executor made
    # repeatable (aclSetAclOpExecutorRepeatable); the emulator refuses any other, as a
    # closed build may. The unrun executor is made repeatable, then destroyed.
    code, message, executors, objects, launches, bad_destroys, repeatable = run_device(
        ALLOCATION_FAILS, fake_cann_dir, fake_xla_dir)
    assert code == 13 and launches == 0
    assert message == ("max_pool2d_with_indices: aclrtMalloc of the workspace failed with "
                       "error 207001: injected: out of device memory")
    assert [executors, objects, bad_destroys, repeatable] == [0, 0, 0, 1]


RELEASE_FAILS = """
xla.set_scratch_refused(1)
records = []
for function in (b"aclSetAclOpExecutorRepeatable", b"aclDestroyAclOpExecutor"):
    fake.reset()
    live0 = fake.live_executors()
    fake.fail_next(b"aclrtMalloc", 207001, b"injected: out of device memory")
    fake.fail_next(function, 561103, b"injected: no release")
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    values, indices = np.zeros((2, 3, 3, 3), np.float32), np.zeros((2, 3, 3, 3), np.int32)
    code, message = xla.call(handlers["max_pool2d"], [x], [values, indices],
                             {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0),
                              "dilation": (1, 1), "ceil_mode": False, "channels_last": False})
    records.append([code, message, fake.live_executors() - live0, fake.bad_destroys(),
                    fake.call_count(b"aclDestroyAclOpExecutor")])
print(json.dumps(records))
"""


def test_a_failed_release_of_an_unrun_executor_is_reported(fake_cann_dir, fake_xla_dir):
    # Issue 47: the statuses of aclSetAclOpExecutorRepeatable and aclDestroyAclOpExecutor
    # are checked; a failure adds what leaked to the call's error. No destroy follows a
    # failed aclSetAclOpExecutorRepeatable (the docs allow none).
    repeatable, destroy = run_device(RELEASE_FAILS, fake_cann_dir, fake_xla_dir)
    cause = ("max_pool2d_with_indices: aclrtMalloc of the workspace failed with error 207001: "
             "injected: out of device memory; ")
    assert repeatable == [13, cause + (
        "the executor aclnnMaxPool2dWithIndicesGetWorkspaceSize made could not be released "
        "(a host-side leak): aclSetAclOpExecutorRepeatable failed with status 561103 "
        "ACLNN_ERR_INNER_NULLPTR: "
        "injected: no release"), 1, 0, 0]
    assert destroy == [13, cause + (
        "the executor aclnnMaxPool2dWithIndicesGetWorkspaceSize made could not be released "
        "(a host-side leak): aclDestroyAclOpExecutor failed with status 561103 "
        "ACLNN_ERR_INNER_NULLPTR: "
        "injected: no release"), 1, 0, 1]


PROBE = """
fake.reset()
dtypes = [ext.cann_pool_dtypes(2), ext.cann_pool_dtypes(3)]
print(json.dumps([dtypes, fake.live_executors(), fake.bad_destroys(),
                  fake.call_count(b"aclSetAclOpExecutorRepeatable"),
                  fake.call_count(b"aclDestroyAclOpExecutor")]))
"""


def test_the_dtype_probe_releases_its_executors_as_cann_documents(fake_cann_dir,
                                                                   fake_xla_dir):
    # Issue 47: register() asks each pool op which dtypes it takes (GetWorkspaceSize,
    # nothing runs); every executor it gets is made repeatable, then destroyed.
    dtypes, executors, bad_destroys, repeatable, destroyed = run_device(PROBE, fake_cann_dir,
                                                                        fake_xla_dir)
    assert dtypes == [["float16", "bfloat16", "float32"]] * 2
    assert [executors, bad_destroys, repeatable, destroyed] == [0, 0, 6, 6]


@pytest.fixture(scope="module")
def cann_without_repeatable(tmp_path_factory):
    """A CANN whose libnnopbase.so has aclDestroyAclOpExecutor but no
    aclSetAclOpExecutorRepeatable."""
    return build(tmp_path_factory.mktemp("fake_cann_norepeatable"),
                 extra_flags=("-DFAKECANN_NO_REPEATABLE_EXECUTOR",))


def test_without_aclsetaclopexecutorrepeatable_no_unrun_executor_is_destroyed(
        cann_without_repeatable, fake_xla_dir):
    # The docs allow destroying only repeatable executors: where none can be made so, an
    # unrun one is left (the error says so) and the dtype probe asks nothing.
    nnopbase = ctypes.CDLL(str(cann_without_repeatable / "libnnopbase.so"))
    assert not hasattr(nnopbase, "aclSetAclOpExecutorRepeatable")
    code, message, executors, objects, launches, bad_destroys, _ = run_device(
        ALLOCATION_FAILS, cann_without_repeatable, fake_xla_dir)
    assert code == 13 and launches == 0 and bad_destroys == 0
    assert message == (
        "max_pool2d_with_indices: aclrtMalloc of the workspace failed with error 207001: "
        "injected: out of device memory; the executor aclnnMaxPool2dWithIndicesGetWorkspaceSize "
        "made could not be released (a host-side leak): this CANN has no "
        "aclSetAclOpExecutorRepeatable, without which aclDestroyAclOpExecutor may destroy none")
    assert [executors, objects] == [1, 1]
    dtypes, executors, bad_destroys, _, destroyed = run_device(PROBE, cann_without_repeatable,
                                                               fake_xla_dir)
    assert dtypes == [["float32"]] * 2 and [executors, bad_destroys, destroyed] == [0, 0, 0]


INDICES_ALLOCATION_FAILS = """
xla.set_scratch_refused(1)
live0 = fake.baseline()
fake.fail_next(b"aclrtMalloc", 207001, b"injected: out of device memory")
code, message, _ = unpool2d((3, 3, 4, 5))
print(json.dumps([code, message, fake.live_objects() - live0,
                  *[fake.call_count(f) for f in (b"aclnnClampGetWorkspaceSize",
                                                 b"aclnnMaxUnpool2dGetWorkspaceSize")]]))
"""


def test_a_failed_allocation_for_the_clamped_indices_fails_before_any_op(fake_cann_dir,
                                                                         fake_xla_dir):
    code, message, objects, *first_phases = run_device(INDICES_ALLOCATION_FAILS,
                                                       fake_cann_dir, fake_xla_dir)
    assert code == 13 and first_phases == [0, 0] and objects == 0
    assert message == ("max_unpool2d: aclrtMalloc of the safe indices failed with error "
                       "207001: injected: out of device memory")


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
    code, message, executors, objects, launches, *_ = run_device(
        ALLOCATION_FAILS, cann_without_destroy, fake_xla_dir)
    assert code == 13 and launches == 0
    assert message == (
        "max_pool2d_with_indices: aclrtMalloc of the workspace failed with error 207001: "
        "injected: out of device memory; the executor aclnnMaxPool2dWithIndicesGetWorkspaceSize "
        "made could not be released (a host-side leak): this CANN has no "
        "aclDestroyAclOpExecutor")
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
            f"of the call's device on the threads that run custom calls; one that numbers its "
            f"devices otherwise than ACL does needs "
            f"jax_unpool.npu.register(..., check_device_ordinal=False).")


DEVICE_CHECK_OFF = """
records = [ext.npu_device_ordinal_check()]
fake.set_device(0)
xla.set_device_ordinal(1, 0)
ext.npu_device_ordinal_check(False)
records.append(ext.npu_device_ordinal_check())
code, message, equal = unpool2d()
records.append([code, message, equal])
ext.npu_device_ordinal_check(True)
records.append(unpool2d()[0])
print(json.dumps(records))
"""


def test_the_device_ordinal_check_can_be_turned_off(fake_cann_dir, fake_xla_dir):
    # Issue 47: a plugin whose XLA ordinals are not ACL's device numbers fails every call
    # with the check; register(check_device_ordinal=False) turns it off (process-wide).
    before, off, call, on_again = run_device(DEVICE_CHECK_OFF, fake_cann_dir, fake_xla_dir)
    assert before is True and off is False
    assert call == [0, "", True]
    assert on_again == 9  # FAILED_PRECONDITION once it is on again




# A direct call of each unpool target: (values, indices, out) shapes, the plane's size, the
# index dtype and the attributes. Index 1000 goes to flat position 7 of the indices.
DIRECT = {
    "max_unpool2d": ((1, 2, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4), 16, "int32",
                     {"channels_last": False}),
    "max_unpool2d_backward": ((1, 2, 4, 4), (1, 2, 4, 4), (1, 2, 4, 4), 16, "int32",
                              {"channels_last": False}),
    "max_unpool3d": ((1, 2, 2, 2, 4), (1, 2, 2, 2, 4), (1, 2, 2, 4, 4), 32, "int64", {}),
    "max_unpool3d_backward": ((1, 2, 2, 4, 4), (1, 2, 2, 2, 4), (1, 2, 2, 2, 4), 32, "int64",
                              {}),
}

DIRECT_CALL = """
name, checked, index = sys.argv[4], sys.argv[5] == "1", int(sys.argv[6])
values_shape, idx_shape, out_shape, plane, dtype, attrs = json.loads(sys.argv[7])
run = sys.argv[8].encode()
values = rng.standard_normal(values_shape).astype(np.float32)
idx = oracle.random_indices(rng, tuple(idx_shape), plane, dtype)
idx.reshape(-1)[7] = index
out = np.full(out_shape, 7.0, np.float32)
fake.reset()
code, message = xla.call(handlers[name + ("_checked" if checked else "")], [values, idx],
                         [out], attrs)
k = len(values_shape) - 2
clamped = np.clip(idx, 0, plane - 1)
want = (oracle.gather_nd(values, clamped, k) if name.endswith("backward")
        else oracle.unpool_nd(values, clamped, tuple(out_shape[-k:])))
print(json.dumps({
    "code": code, "message": message, "equal": bool(np.array_equal(out, want)),
    "received": fake.last_indices(run), "clamped": clamped.reshape(-1).tolist(),
    "counts": {f: fake.call_count(f.encode()) for f in (
        "aclnnClamp", "aclnnMin", "aclnnMax", "aclrtSynchronizeStream", "aclrtMemcpy",
        "aclrtMalloc", run.decode())},
    "streams": [fake.last_stream(f) for f in (b"aclnnMin", b"aclnnMax")],
    "memcpy_kind": fake.last_memcpy_kind(), "synchronised": fake.last_stream(
        b"aclrtSynchronizeStream"),
    "values": values.tolist(), "indices": idx.tolist(),
}))
"""


def direct_call(name, checked, index, cann_dir, xla_dir):
    """A hand-written call of the device target `name` (its checked variant when
    `checked`) with indices.flat[7] = index, in a fresh process."""
    script = PRELUDE.format(stream=STREAM, other=OTHER_STREAM) + textwrap.dedent(DIRECT_CALL)
    proc = run_code(script, ju._jax_unpool.__file__, str(cann_dir), str(xla_dir), name,
                    str(int(checked)), str(index), json.dumps(DIRECT[name]), RUN[name])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.mark.parametrize("index", [1000, -3])
@pytest.mark.parametrize("name", UNPOOLS)
def test_a_direct_call_never_hands_cann_an_index_outside_its_plane(fake_cann_dir,
                                                                   fake_xla_dir, name, index):
    # Issue 37 item 4: a hand-written ffi_call skips the lowering's clamp, and CANN's unpool
    # ops do not range-check (an out-of-bounds access on a device). The default device
    # handler clamps the indices on the device first: the op receives index 1000 as the
    # plane's last position (-3 as 0), and the result is the clamped indices' -- what the
    # NPU lowering gives for the same input.
    record = direct_call(name, False, index, fake_cann_dir, fake_xla_dir)
    assert (record["code"], record["message"]) == (0, "")
    assert record["received"] == record["clamped"]
    plane = DIRECT[name][3]
    assert record["received"][7] == (plane - 1 if index > 0 else 0)
    assert record["equal"]
    assert record["counts"]["aclnnClamp"] == 1 and record["counts"][RUN[name]] == 1
    assert record["counts"]["aclrtSynchronizeStream"] == 0  # no host round trip


def cpu_message(name, values, indices, out_shape):
    """What the CPU handler says of a direct call with these operands."""
    k = len(out_shape) - 2
    target = ("jax_unpool_max_unpool_backward_v2" if name.endswith("backward")
              else "jax_unpool_max_unpool_v2")
    f = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(out_shape, np.float32))
    with pytest.raises(jax.errors.JaxRuntimeError) as err:  # int32: the values fit
        jax.block_until_ready(jax.jit(lambda v, i: f(v, i, channels_last=False,
                                                     spatial_rank=k))(values,
                                                                      indices.astype(np.int32)))
    return str(err.value)


@pytest.mark.parametrize("name", UNPOOLS)
def test_a_checked_target_fails_a_direct_call_with_the_cpus_message(fake_cann_dir,
                                                                     fake_xla_dir, name):
    # check_indices=True's targets: aclnnMin and aclnnMax on XLA's stream, one
    # synchronisation of it, a copy of the two results to the host and, as one is out of
    # range, of the indices (to name the first bad one): OUT_OF_RANGE with the CPU
    # handler's very message, and CANN's unpool op never runs.
    record = direct_call(name, True, 1000, fake_cann_dir, fake_xla_dir)
    values = np.array(record["values"], np.float32)
    indices = np.array(record["indices"], DIRECT[name][4])
    assert record["code"] == 11  # OUT_OF_RANGE
    assert "OUT_OF_RANGE: " + record["message"] == cpu_message(name, values, indices,
                                                               DIRECT[name][2])
    assert record["message"].startswith(f"{name}: index 1000 at ")
    counts = record["counts"]
    assert [counts[f] for f in ("aclnnMin", "aclnnMax", "aclrtSynchronizeStream",
                                "aclrtMemcpy")] == [1, 1, 1, 2]
    assert counts["aclnnClamp"] == 0 and counts[RUN[name]] == 0
    assert record["streams"] == [STREAM, STREAM] and record["synchronised"] == STREAM
    assert record["memcpy_kind"] == 2  # ACL_MEMCPY_DEVICE_TO_HOST


@pytest.mark.parametrize("name", UNPOOLS)
def test_a_checked_target_runs_in_range_indices_with_one_sync(fake_cann_dir, fake_xla_dir,
                                                              name):
    # In range: the op gets the caller's indices as they are (no clamp), after one
    # synchronisation and one 2-element copy; no aclrtMalloc (XLA's scratch memory).
    record = direct_call(name, True, 5, fake_cann_dir, fake_xla_dir)
    assert (record["code"], record["message"]) == (0, "")
    assert record["equal"] and record["received"] == record["clamped"]
    counts = record["counts"]
    assert [counts[f] for f in ("aclnnMin", "aclnnMax", "aclrtSynchronizeStream",
                                "aclrtMemcpy", "aclrtMalloc", "aclnnClamp", RUN[name])] == [
        1, 1, 1, 1, 0, 0, 1]


WITHOUT_MATH = """
records = [ext.cann_ops(), ext.cann_index_safety()]
for name in ("max_unpool2d", "max_unpool2d_checked"):
    fake.reset()
    code, message = xla.call(handlers[name], [np.ones((1, 1, 2, 2), np.float32),
                                              np.zeros((1, 1, 2, 2), np.int32)],
                             [np.zeros((1, 1, 2, 2), np.float32)], {"channels_last": False})
    records.append([code, message, fake.call_count(b"aclnnMaxUnpool2dGetWorkspaceSize")])
print(json.dumps(records))
"""


def test_a_cann_without_ops_math_refuses_device_unpools_and_routes_none(tmp_path,
                                                                        fake_xla_dir):
    # A split install without CANN's ops-math package (no libopapi_math.so): the device
    # handlers cannot make the indices safe, so they refuse before CANN's unpool op, and
    # cann_ops() names no unpool op (register() routes them all to XLA's ops and warns).
    lib_dir = build(tmp_path, layout="nomath")
    ops, safety, unchecked, checked = run_device(WITHOUT_MATH, lib_dir, fake_xla_dir)
    assert ops == [] and safety is False
    nnopbase, opapi = lib_dir / "libnnopbase.so", lib_dir / "libopapi_nn.so"
    for (code, message, first_phases), missing, purpose in (
            (unchecked, "aclnnClampGetWorkspaceSize, aclnnClamp",
             "clamps its indices into their plane"),
            (checked, "aclnnMinGetWorkspaceSize, aclnnMin, aclnnMaxGetWorkspaceSize, aclnnMax",
             "checks its indices (check_indices=True)")):
        assert code == 9 and first_phases == 0  # FAILED_PRECONDITION
        assert message == (
            f"max_unpool2d: the loaded CANN ({nnopbase}, {opapi}, and the op library's "
            f"ops-math library where present) has no {missing}, with which a call "
            f"{purpose}: CANN's unpool ops do not range-check indices. Install CANN's "
            f"ops-math package (libopapi_math.so) beside the op library.")


OLD_CANN_INT32 = """
fake.reset()
fake.set_int64_indices_only(1)  # aclnnMaxUnpool2d before CANN 8.0.0
x = rng.standard_normal((1, 2, 3, 3)).astype(np.float32)
records = []
for dtype in ("int32", "int64"):
    idx = oracle.random_indices(rng, x.shape, 16, dtype)
    out = np.zeros((1, 2, 4, 4), np.float32)
    code, message = xla.call(handlers["max_unpool2d"], [x, idx], [out], {"channels_last": False})
    records.append([code, message, code == 0 and bool(np.array_equal(out, oracle.unpool(
        x, idx, (4, 4)))), fake.call_count(b"aclnnMaxUnpool2d"), fake.live_executors(),
                    fake.bad_destroys()])
print(json.dumps(records))
"""


def test_int32_indices_on_a_cann_that_takes_int64_only_get_a_clear_error(fake_cann_dir,
                                                                         fake_xla_dir):
    # Issue 47: aclnnMaxUnpool2d of CANN 8.0.RC1-RC3 refuses INT32 indices with 161002; a
    # direct call with them gets the project's own message (the NPU lowering converts).
    # The op is asked again with int64 to tell that from other refusals; the executor that
    # asking makes is released as CANN documents.
    int32, int64 = run_device(OLD_CANN_INT32, fake_cann_dir, fake_xla_dir)
    assert int32 == [3, ("max_unpool2d: this CANN's aclnnMaxUnpool2d takes int64 indices "
                         "only (CANN before 8.0.0), got int32: convert them to int64, as the "
                         "NPU lowering does"), False, 0, 0, 0]
    assert int64 == [0, "", True, 1, 0, 0]


CLAMP_INT32_ONLY = """
records = [ext.cann_clamp_index_dtypes()]
fake.reset()
fake.set_clamp_int32_only(1)
records.append(ext.cann_clamp_index_dtypes())
g = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
for dtype in ("int32", "int64"):
    idx = oracle.random_indices(rng, (1, 2, 3, 3), 16, dtype)
    idx.reshape(-1)[0] = 99
    out = np.zeros(idx.shape, np.float32)
    code, message = xla.call(handlers["max_unpool2d_backward"], [g, idx], [out],
                             {"channels_last": False})
    records.append([code, message, code == 0 and bool(np.array_equal(
        out, oracle.gather(g, np.clip(idx, 0, 15))))])
records.append([fake.live_executors(), fake.bad_destroys()])
print(json.dumps(records))
"""


def test_the_index_dtypes_aclnnclamp_takes_are_asked_of_cann(fake_cann_dir, fake_xla_dir):
    # Issue 47: int64 aclnnClamp on the 910B AI Core is unverified. register() asks which
    # index dtypes the loaded CANN's clamp takes (jax_unpool.npu routes by the answer); a
    # device call of one it refuses fails with CANN's refusal, one it takes runs.
    both, int32_only, int32, int64, objects = run_device(CLAMP_INT32_ONLY, fake_cann_dir,
                                                         fake_xla_dir)
    assert both == ["int32", "int64"] and int32_only == ["int32"]
    assert int32 == [0, "", True]
    assert int64[0] == 3 and int64[1].startswith(
        "max_unpool2d_backward: aclnnClampGetWorkspaceSize failed with status 161002 "
        "ACLNN_ERR_PARAM_INVALID: "), int64
    assert "INT32 only" in int64[1]
    assert objects == [0, 0]
