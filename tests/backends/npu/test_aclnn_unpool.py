"""The aclnn path (ffi/npu, jax_unpool.npu) against the emulated CANN runtime in
tests/fake_cann, in host-emulation mode: jax.jit programs whose CPU lowering goes through
the aclnn handlers, compared bit-exactly with numpy loops; what the handlers hand to
aclnn (dtypes, call counts, stream, workspace) read back from the emulator; errors from
every phase reaching Python with no CANN object leaked; loading and registration errors.

Every emulated test runs inside `npu.cpu_emulation()`, so the mode never outlives a test,
and the module checks on teardown that the normal CPU lowering is back.
"""

import ctypes.util
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from dtypes import INDEX_DTYPES, VALUE_DTYPES, assert_bits_equal, needs_x64, random_values
from fake_cann.check_fake_cann import build

import jax_unpool as ju
from jax_unpool import _compat, unpooling
from jax_unpool._compat import enable_x64
from jax_unpool.backends import npu_chips

npu = ju.npu
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)  # see docs/semantics.md: jax-ml/jax#34083

FWD_GWS, FWD_RUN = "aclnnMaxUnpool2dGetWorkspaceSize", "aclnnMaxUnpool2d"
BWD_GWS, BWD_RUN = "aclnnMaxUnpool2dBackwardGetWorkspaceSize", "aclnnMaxUnpool2dBackward"
CPU_TARGET = "jax_unpool_max_unpool_v2"

# aclDataType values (shared/notes/cann-api.md).
ACL = {"FLOAT": 0, "FLOAT16": 1, "INT8": 2, "INT32": 3, "UINT8": 4, "INT16": 6, "INT64": 9,
       "DOUBLE": 11}
# Issue 12 item 9: what each op's AI Core kernel takes, by byte width, for dtypes moved as
# bits: the forward's ScatterElements has FLOAT16 (not INT16), the backward's GatherElements
# no BOOL.
SAME_WIDTH = {"forward": {1: "UINT8", 2: "FLOAT16", 4: "INT32", 8: "INT64"},
              "backward": {1: "UINT8", 2: "INT16", 4: "INT32", 8: "INT64"}}
OWN_NAME = {"float32": "FLOAT", "float16": "FLOAT16", "int8": "INT8", "int32": "INT32",
            "int64": "INT64"}


def presented(op: str, dtype: str) -> int:
    """The aclDataType aclnn must see: float64 as DOUBLE in the forward; the dtypes both
    kernels list as themselves; everything else as the op's type of that width."""
    if op == "forward" and dtype == "float64":
        return ACL["DOUBLE"]
    name = OWN_NAME.get(dtype) or SAME_WIDTH[op][jnp.dtype(dtype).itemsize]
    return ACL[name]


SHAPES = {3: (3, 4, 5), 4: (2, 3, 4, 5)}  # channels-first; NHWC moves C last
HW = (6, 7)  # output plane 42 >= input plane 20: aclnn's forward takes it


def _shape(rank, layout):
    s = SHAPES[rank]
    return (*s[:-3], s[-2], s[-1], s[-3]) if layout == "NHWC" else s


def _grad_shape(shape, layout, hw=HW):
    h = len(shape) - 3 if layout == "NHWC" else len(shape) - 2
    return (*shape[:h], *hw, *shape[h + 2:])


def _forward(layout="NCHW", hw=HW):
    return jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=hw, data_format=layout))


def _backward(shape, dtype, layout="NCHW", hw=HW):
    x = jax.ShapeDtypeStruct(shape, dtype)
    return jax.jit(lambda g, i: ju.max_unpool2d_backward(g, x, i, hw, data_format=layout))


# --------------------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def normal_cpu_lowering_afterwards():
    yield
    assert not npu.cpu_emulation_active()
    x = np.ones((1, 1, 2, 2), np.float32)
    text = _forward(hw=(2, 2)).lower(x, np.zeros(x.shape, np.int32)).as_text()
    assert CPU_TARGET in text and npu.MAX_UNPOOL2D_TARGET not in text


# --------------------------------------------------------------------------------------
# Values, dtypes, layouts
# --------------------------------------------------------------------------------------

def every_value_case(test):
    """Parametrizes `test` over every value dtype and index dtype, ranks 3 and 4 and both
    layouts."""
    for name, values in (("dtype", VALUE_DTYPES), ("index_dtype", INDEX_DTYPES),
                         ("rank", [3, 4]), ("layout", ["NCHW", "NHWC"])):
        test = pytest.mark.parametrize(name, values)(test)
    return test


def assert_ran_once(fake, run, dtype, index_dtype):
    """aclnn ran `run` once, presented with these aclDataTypes, and no CANN object is left."""
    assert fake.call_count(run.encode()) == 1
    assert fake.last_dtype(run.encode()) == dtype
    assert fake.last_indices_dtype(run.encode()) == index_dtype
    assert fake.live_objects() == fake.live0


@every_value_case
def test_forward_through_aclnn_equals_numpy_loops(emulated, rng, dtype, index_dtype, rank,
                                                  layout):
    shape = _shape(rank, layout)
    x = random_values(rng, shape, dtype)
    idx = oracle.random_indices(rng, shape, HW[0] * HW[1], index_dtype)  # with duplicates
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = _forward(layout)(x, idx)
    assert_bits_equal(out, oracle.unpool(x, idx, HW, layout == "NHWC"))
    # int64 indices always: CANN before 8.0.0 took no INT32 indices in the forward.
    assert_ran_once(emulated, FWD_RUN, presented("forward", dtype), ACL["INT64"])


@every_value_case
def test_backward_through_aclnn_equals_numpy_loops(emulated, rng, dtype, index_dtype, rank,
                                                   layout):
    shape = _shape(rank, layout)
    g = random_values(rng, _grad_shape(shape, layout), dtype)
    idx = oracle.random_indices(rng, shape, HW[0] * HW[1], index_dtype)
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = _backward(shape, g.dtype, layout)(g, idx)
    assert_bits_equal(out, oracle.gather(g, idx, layout == "NHWC"))
    assert_ran_once(emulated, BWD_RUN, presented("backward", dtype), ACL[index_dtype.upper()])


@pytest.mark.parametrize("op", ["forward", "backward"])
@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64", "float8_e4m3fn"])
def test_dtypes_beyond_the_lists_move_as_integers_of_their_width(emulated, rng, op, dtype):
    shape = SHAPES[4]
    idx = oracle.random_indices(rng, shape, HW[0] * HW[1])
    with enable_x64(needs_x64(dtype)):
        if op == "forward":
            x = random_values(rng, shape, dtype)
            out, expected = _forward()(x, idx), oracle.unpool(x, idx, HW)
        else:
            g = random_values(rng, _grad_shape(shape, "NCHW"), dtype)
            out, expected = _backward(shape, g.dtype)(g, idx), oracle.gather(g, idx)
    assert_bits_equal(out, expected)
    run = FWD_RUN if op == "forward" else BWD_RUN
    assert emulated.last_dtype(run.encode()) == presented(op, dtype)


def test_channels_last_is_a_strided_view_not_a_transpose(emulated, rng):
    shape = _shape(4, "NHWC")
    x = random_values(rng, shape, "float32")
    idx = oracle.random_indices(rng, shape, HW[0] * HW[1])
    text = _forward("NHWC").lower(x, idx).as_text()
    assert npu.MAX_UNPOOL2D_TARGET in text
    assert "stablehlo.transpose" not in text


FWD3_RUN, BWD3_RUN = "aclnnMaxUnpool3d", "aclnnMaxUnpool3dBackward"


@pytest.mark.jax_window
@pytest.mark.parametrize("fmt", ["NCW", "NWC", "CW", "NCDHW", "NDHWC", "CDHW", "DHWC"])
def test_1d_and_3d_reach_aclnn(emulated, rng, fmt):
    # Issue 13: channels-first 3-D unpooling (and its gradient) goes through
    # aclnnMaxUnpool3d(Backward); 1-D through aclnnMaxUnpool2d(Backward) on the
    # (N, C, 1, W) view, and so does channels-last 3-D on the (N, D*H, W, C) view
    # (aclnnMaxUnpool3d wants a contiguous NCDHW out). Bit-exact with numpy loops.
    k = 1 if "D" not in fmt else 3
    dims = {"N": 2, "C": 3, "D": 2, "H": 3, "W": 4}
    out_dims = {"D": 3, "H": 4, "W": 5} if k == 3 else {"W": 9}
    shape = tuple(dims[d] for d in fmt)
    size = tuple(out_dims[d] for d in "DHW"[3 - k:])
    last = fmt.endswith("C")
    unpool, unpool_bwd = ((ju.max_unpool1d, ju.max_unpool1d_backward) if k == 1 else
                          (ju.max_unpool3d, ju.max_unpool3d_backward))
    x = random_values(rng, shape, "float32")
    idx = oracle.random_indices(rng, shape, int(np.prod(size)))
    w = random_values(rng, tuple({**dims, **out_dims}[d] for d in fmt), "float32")

    def f(x):
        return jnp.sum(unpool(x, idx, output_size=size, data_format=fmt) * w)

    forward = jax.jit(lambda x: unpool(x, idx, output_size=size, data_format=fmt))
    out = forward(x)
    assert_bits_equal(out, oracle.unpool_nd(x, idx, size, last))
    np.testing.assert_array_equal(jax.jit(jax.grad(f))(x), oracle.gather_nd(w, idx, k, last))
    back = jax.jit(lambda g: unpool_bwd(g, x, idx, size, data_format=fmt))(w)
    np.testing.assert_array_equal(back, oracle.gather_nd(w, idx, k, last))
    volume = k == 3 and not last
    text = forward.lower(x).as_text()
    assert (npu.MAX_UNPOOL3D_TARGET in text) == volume
    assert (npu.MAX_UNPOOL2D_TARGET in text) != volume
    runs = {name: emulated.call_count(name.encode())
            for name in (FWD_RUN, BWD_RUN, FWD3_RUN, BWD3_RUN)}
    assert runs == ({FWD_RUN: 0, BWD_RUN: 0, FWD3_RUN: 1, BWD3_RUN: 2} if volume else
                    {FWD_RUN: 1, BWD_RUN: 2, FWD3_RUN: 0, BWD3_RUN: 0})


# --------------------------------------------------------------------------------------
# Autodiff and batching through aclnn
# --------------------------------------------------------------------------------------

@pytest.mark.jax_window
def test_grad_runs_both_aclnn_ops(emulated, rng):
    x = random_values(rng, SHAPES[4], "float32")
    idx = oracle.random_indices(rng, x.shape, HW[0] * HW[1])
    w = random_values(rng, (*x.shape[:2], *HW), "float32")
    f = jax.jit(jax.grad(lambda x: jnp.sum(ju.max_unpool2d(x, idx, output_size=HW) * w)))
    text = f.lower(x).as_text()
    assert npu.MAX_UNPOOL2D_BACKWARD_TARGET in text
    assert CPU_TARGET not in text and "jax_unpool_max_unpool_backward_v2" not in text
    # d/dx sum(unpool(x) * w) gathers w at the indices
    np.testing.assert_array_equal(f(x), oracle.gather(w, idx))
    assert emulated.call_count(BWD_RUN.encode()) == 1


def test_second_order_grad_runs_aclnn_forward(emulated, rng):
    # The transpose of the backward is the forward: grad of grad goes through both.
    g = random_values(rng, (*SHAPES[4][:2], *HW), "float32")
    idx = oracle.random_indices(rng, SHAPES[4], HW[0] * HW[1])
    x = jax.ShapeDtypeStruct(SHAPES[4], jnp.float32)
    v = random_values(rng, SHAPES[4], "float32")

    def inner(g):
        return jnp.sum(ju.max_unpool2d_backward(g, x, idx, HW) * v)

    out = jax.jit(jax.grad(inner))(g)
    np.testing.assert_array_equal(out, oracle.unpool(v, idx, HW))
    assert emulated.call_count(FWD_RUN.encode()) == 1


@pytest.mark.jax_window
@pytest.mark.parametrize("op", ["forward", "backward"])
def test_vmap_is_one_aclnn_call(emulated, rng, op):
    batch, shape = 4, SHAPES[3]
    idx = oracle.random_indices(rng, (batch, *shape), HW[0] * HW[1])
    if op == "forward":
        x = random_values(rng, (batch, *shape), "float32")
        f = jax.jit(jax.vmap(lambda x, i: ju.max_unpool2d(x, i, output_size=HW)))
        out, target, run = f(x, idx), npu.MAX_UNPOOL2D_TARGET, FWD_RUN
        expected = np.stack([oracle.unpool(x[b], idx[b], HW) for b in range(batch)])
        text = f.lower(x, idx).as_text()
    else:
        g = random_values(rng, (batch, shape[0], *HW), "float32")
        xs = jax.ShapeDtypeStruct(shape, jnp.float32)
        f = jax.jit(jax.vmap(lambda g, i: ju.max_unpool2d_backward(g, xs, i, HW)))
        out, target, run = f(g, idx), npu.MAX_UNPOOL2D_BACKWARD_TARGET, BWD_RUN
        expected = np.stack([oracle.gather(g[b], idx[b]) for b in range(batch)])
        text = f.lower(g, idx).as_text()
    np.testing.assert_array_equal(out, expected)
    assert text.count(target) == 1
    assert emulated.call_count(run.encode()) == 1


# --------------------------------------------------------------------------------------
# What the handlers hand to CANN
# --------------------------------------------------------------------------------------

def _run_op(op, rng, idx=None, checked=False):
    """The 2-D unpool `op` through the public function, or, `checked`, through the primitive
    with check_indices=True (the checked target: no clamp, no memory of its own)."""
    shape = SHAPES[4]
    idx = oracle.random_indices(rng, shape, HW[0] * HW[1]) if idx is None else idx
    if checked:
        values = random_values(rng, shape if op == "forward" else (*shape[:2], *HW), "float32")
        return _checked(2, op == "forward", HW)(values, idx).block_until_ready()
    if op == "forward":
        return _forward()(random_values(rng, shape, "float32"), idx).block_until_ready()
    g = random_values(rng, _grad_shape(shape, "NCHW"), "float32")
    return _backward(shape, g.dtype)(g, idx).block_until_ready()


# aclrtMalloc'ed blocks of a host-emulation call: the op's workspace, and unless checked
# the clamped indices and the clamp's workspace.
BLOCKS = {False: 3, True: 1}


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("op", ["forward", "backward"])
def test_workspace_stream_and_objects(emulated, rng, op, checked):
    _run_op(op, rng, checked=checked)
    run = FWD_RUN if op == "forward" else BWD_RUN
    # The emulator asks for a non-zero workspace and refuses a launch whose workspace
    # size differs from what GetWorkspaceSize returned: the success proves it was honoured.
    assert emulated.last_workspace_size() > 0
    # Host emulation: no stream (CANN's default), each block from aclrtMalloc, freed once
    # the stream is synchronised.
    assert emulated.last_stream(run.encode()) is None
    assert emulated.call_count(b"aclnnClamp") == (0 if checked else 1)
    n = BLOCKS[checked]
    assert [emulated.call_count(f) for f in (b"aclrtMalloc", b"aclrtSynchronizeStream",
                                             b"aclrtFree")] == [n, n, n]
    assert emulated.live_allocations() == 0 and emulated.bad_frees() == 0
    assert emulated.live_objects() == emulated.live0 and emulated.bad_destroys() == 0


# --------------------------------------------------------------------------------------
# Errors from CANN reach Python; nothing leaks
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("status,name", [
    (161001, "ACLNN_ERR_PARAM_NULLPTR"), (161002, "ACLNN_ERR_PARAM_INVALID"),
    (361001, "ACLNN_ERR_RUNTIME_ERROR"), (561003, "ACLNN_ERR_INNER_FIND_KERNEL_ERROR"),
    (561107, "ACLNN_ERR_INNER_OPP_PATH_NOT_FOUND")])
@pytest.mark.parametrize("function", [FWD_GWS, FWD_RUN, BWD_GWS, BWD_RUN])
def test_failing_status_reaches_python(emulated, rng, function, status, name):
    op = "forward" if function in (FWD_GWS, FWD_RUN) else "backward"
    emulated.fail_next(function.encode(), status, b"injected: the device is on fire")
    with pytest.raises(RUNTIME_ERRORS) as err:
        _run_op(op, rng)
    message = str(err.value)
    assert f"{function} failed with status {status} {name}" in message
    assert "injected: the device is on fire" in message  # aclGetRecentErrMsg()
    assert emulated.live_objects() == emulated.live0 and emulated.live_executors() == 0


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_object_creation_failure_destroys_what_was_created(emulated, rng, op):
    # The int array is created after the three or four tensors.
    emulated.fail_next(b"aclCreateIntArray", 161001, b"injected: no int array")
    with pytest.raises(RUNTIME_ERRORS, match="aclCreateIntArray failed: injected: no int"):
        _run_op(op, rng)
    assert emulated.live_objects() == emulated.live0 and emulated.bad_destroys() == 0


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_workspace_allocation_failure_destroys_the_unrun_executor(emulated, rng, op):
    # The checked target's first allocation is the op's workspace; the executor, which
    # cannot run, is released as CANN documents (made repeatable, then destroyed).
    emulated.fail_next(b"aclrtMalloc", 207001, b"injected: out of device memory")
    with pytest.raises(RUNTIME_ERRORS) as err:
        _run_op(op, rng, checked=True)
    assert ("aclrtMalloc of the workspace failed with error 207001: injected: out of device "
            "memory") in str(err.value)
    assert emulated.call_count((FWD_RUN if op == "forward" else BWD_RUN).encode()) == 0
    assert emulated.live_executors() == 0 and emulated.live_objects() == emulated.live0
    assert emulated.call_count(b"aclSetAclOpExecutorRepeatable") == 1


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_a_failed_allocation_for_the_clamped_indices_fails_before_any_op(emulated, rng, op):
    emulated.fail_next(b"aclrtMalloc", 207001, b"injected: out of device memory")
    with pytest.raises(RUNTIME_ERRORS) as err:
        _run_op(op, rng)
    assert str(err.value) == (
        f"INTERNAL: max_unpool2d{'' if op == 'forward' else '_backward'}: aclrtMalloc of the "
        f"safe indices failed with error 207001: injected: out of device memory")
    assert [emulated.call_count(f) for f in (b"aclnnClampGetWorkspaceSize",
                                             (FWD_GWS if op == "forward" else BWD_GWS).encode())
            ] == [0, 0]
    assert emulated.live_objects() == emulated.live0


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("op", ["forward", "backward"])
def test_failed_synchronisation_reaches_python_and_frees_the_workspace(emulated, rng, op,
                                                                       checked):
    # The first synchronisation is the op's (checked) or the clamp's, which fails the call
    # before the op: every block allocated by then is freed all the same.
    emulated.fail_next(b"aclrtSynchronizeStream", 507000, b"injected: stream broke")
    with pytest.raises(RUNTIME_ERRORS) as err:
        _run_op(op, rng, checked=checked)
    assert "aclrtSynchronizeStream failed with error 507000: injected: stream broke" in str(
        err.value)
    assert emulated.live_allocations() == 0
    assert emulated.call_count(b"aclrtFree") == (1 if checked else 2)


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("op", ["forward", "backward"])
def test_failed_launch_synchronises_before_freeing_the_workspace(emulated, rng, op, checked):
    run = FWD_RUN if op == "forward" else BWD_RUN
    emulated.fail_next(run.encode(), 361001, b"injected: launch failed")
    with pytest.raises(RUNTIME_ERRORS, match=f"{run} failed with status 361001"):
        _run_op(op, rng, checked=checked)
    n = BLOCKS[checked]
    assert [emulated.call_count(f) for f in (b"aclrtMalloc", b"aclrtSynchronizeStream",
                                             b"aclrtFree")] == [n, n, n]
    assert emulated.live_allocations() == 0


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_out_of_range_indices_are_clamped_into_the_plane(emulated, rng, op):
    # The emulator refuses any index outside [0, 42), as real CANN would write/read out of
    # bounds instead: the handler clamps them first, with aclnnClamp as on a device -- once
    # (issue 47): the lowered program clamps nothing itself.
    x = random_values(rng, SHAPES[4], "float32")
    idx = oracle.random_indices(rng, SHAPES[4], HW[0] * HW[1])
    idx[1, 2, 3, 4], idx[0, 0, 0, 0] = HW[0] * HW[1] + 5, -3
    clamped = np.clip(idx, 0, HW[0] * HW[1] - 1)
    if op == "forward":
        f, operands, expected = _forward(), (x, idx), oracle.unpool(x, clamped, HW)
    else:
        g = random_values(rng, _grad_shape(SHAPES[4], "NCHW"), "float32")
        f, operands = _backward(SHAPES[4], g.dtype), (g, idx)
        expected = oracle.gather(g, clamped)
    assert "clamp" not in f.lower(*operands).as_text()
    np.testing.assert_array_equal(f(*operands), expected)
    assert emulated.call_count((FWD_RUN if op == "forward" else BWD_RUN).encode()) == 1
    assert emulated.call_count(b"aclnnClamp") == 1


@pytest.mark.parametrize("op", ["forward", "backward"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_a_direct_call_with_an_index_out_of_its_plane_fails_as_on_the_cpu(emulated, rng, op,
                                                                          layout):
    # Issue 37 item 4: a hand-written call of an aclnn target gets no lowering's help, and
    # aclnn does not range-check (an out-of-range index is an out-of-bounds access on a
    # device). The checked target checks the indices as the CPU handler does, and says the
    # same, before any aclnn call; the default one clamps them (aclnnClamp), as a device's.
    last = layout == "NHWC"
    shape = (1, 4, 4, 2) if last else (1, 2, 4, 4)
    idx = oracle.random_indices(rng, shape, 16)
    idx.reshape(-1)[5] = 1000
    values = random_values(rng, shape, "float32")
    forward = op == "forward"
    cpu, checked, default = (
        ("jax_unpool_max_unpool_v2", npu.MAX_UNPOOL2D_CHECKED_TARGET, npu.MAX_UNPOOL2D_TARGET)
        if forward else ("jax_unpool_max_unpool_backward_v2",
                         npu.MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET,
                         npu.MAX_UNPOOL2D_BACKWARD_TARGET))

    def call(target, **attributes):
        f = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(shape, np.float32))
        return jax.block_until_ready(jax.jit(lambda v, i: f(v, i, channels_last=last,
                                                            **attributes))(values, idx))

    messages = []
    for target, attributes in ((cpu, {"spatial_rank": 2}), (checked, {})):
        with pytest.raises(RUNTIME_ERRORS) as err:
            call(target, **attributes)
        messages.append(str(err.value))
    assert messages[1] == messages[0]
    assert messages[1].startswith(
        f"OUT_OF_RANGE: max_unpool2d{'' if forward else '_backward'}: index 1000 at "
        f"(n=0, c={1 if last else 0}, i={2 if last else 5}) of indices is out of range: "
        f"valid indices are [0, 16) for an output plane of 4x4")
    assert emulated.call_count((FWD_GWS if forward else BWD_GWS).encode()) == 0
    clamped = np.clip(idx, 0, 15)
    want = (oracle.unpool_nd(values, clamped, (4, 4), last) if forward
            else oracle.gather_nd(values, clamped, 2, last))
    np.testing.assert_array_equal(call(default), want)
    assert emulated.call_count(b"aclnnClamp") == 1
    assert emulated.call_count((FWD_RUN if forward else BWD_RUN).encode()) == 1


def test_a_direct_int32_call_of_a_cann_that_takes_only_int64_gets_a_clear_error(emulated,
                                                                               rng):
    # Issue 47: CANN 8.0.RC1-RC3 refuse INT32 indices in aclnnMaxUnpool2d with 161002.
    emulated.set_int64_indices_only(1)
    x = random_values(rng, SHAPES[4], "float32")
    idx = oracle.random_indices(rng, x.shape, HW[0] * HW[1], "int32")
    f = jax.ffi.ffi_call(npu.MAX_UNPOOL2D_TARGET,
                         jax.ShapeDtypeStruct((*SHAPES[4][:2], *HW), np.float32))
    with pytest.raises(RUNTIME_ERRORS) as err:
        jax.block_until_ready(jax.jit(lambda v, i: f(v, i, channels_last=False))(x, idx))
    assert str(err.value) == (
        "INVALID_ARGUMENT: max_unpool2d: this CANN's aclnnMaxUnpool2d takes int64 indices "
        "only (CANN before 8.0.0), got int32: convert them to int64, as the NPU lowering does")
    assert emulated.call_count(FWD_RUN.encode()) == 0


def test_register_can_turn_the_device_ordinal_check_off(fake_cann_dir):
    # Issue 47: the check of the calling thread's ACL device against XLA's device ordinal
    # has a documented escape, for a plugin that numbers devices otherwise than ACL.
    try:
        npu.register("cpu", fake_cann_dir, check_device_ordinal=False)
        assert npu._jax_unpool.npu_device_ordinal_check() is False
        npu.register("cpu", fake_cann_dir)
        assert npu._jax_unpool.npu_device_ordinal_check() is True
        with pytest.raises(TypeError, match="check_device_ordinal must be a bool, got 'no'"):
            npu.register("cpu", fake_cann_dir, check_device_ordinal="no")
        assert npu._jax_unpool.npu_device_ordinal_check() is True
    finally:
        npu.unregister_cpu_emulation()


def test_a_clamp_that_refuses_int64_keeps_int32_indices_or_the_xla_ops(fake, fake_cann_dir,
                                                                       rng):
    # Issue 47: int64 aclnnClamp on the 910B AI Core is unverified. Where its
    # GetWorkspaceSize refuses INT64 at register(), int32 indices go to aclnn as they are
    # (clamped in int32) and int64 ones, and the 3-D backward (INT64 only), to XLA's ops:
    # the right values everywhere, no call that would fail.
    fake.reset()
    fake.set_clamp_int32_only(1)
    try:
        with npu.cpu_emulation(fake_cann_dir):
            x = random_values(rng, SHAPES[4], "float32")
            g = random_values(rng, _grad_shape(SHAPES[4], "NCHW"), "float32")
            idx = oracle.random_indices(rng, SHAPES[4], HW[0] * HW[1], "int32")
            idx[0, 0, 0, 0] = 99
            clamped = np.clip(idx, 0, HW[0] * HW[1] - 1)
            np.testing.assert_array_equal(_forward()(x, idx), oracle.unpool(x, clamped, HW))
            assert fake.last_indices_dtype(FWD_RUN.encode()) == ACL["INT32"]
            np.testing.assert_array_equal(_backward(SHAPES[4], g.dtype)(g, idx),
                                          oracle.gather(g, clamped))
            assert fake.last_indices_dtype(BWD_RUN.encode()) == ACL["INT32"]
            assert fake.last_dtype(b"aclnnClamp") == ACL["INT32"]
            runs = [fake.call_count(f.encode()) for f in (FWD_RUN, BWD_RUN, BWD3_RUN)]
            with enable_x64():
                wide = clamped.astype(np.int64)
                for f, operands in ((_forward(), (x, wide)),
                                    (_backward(SHAPES[4], g.dtype), (g, wide))):
                    assert npu.MAX_UNPOOL2D_TARGET not in f.lower(*operands).as_text()
                np.testing.assert_array_equal(_forward()(x, wide), oracle.unpool(x, wide, HW))
                np.testing.assert_array_equal(_backward(SHAPES[4], g.dtype)(g, wide),
                                              oracle.gather(g, wide))
            volume = int(np.prod(SIZE3))
            idx3 = oracle.random_indices(rng, SHAPE3, volume, "int32")
            g3 = random_values(rng, (*SHAPE3[:2], *SIZE3), "float32")
            np.testing.assert_array_equal(_backward3(SHAPE3)(g3, idx3),
                                          oracle.gather_nd(g3, idx3, 3))
            assert [fake.call_count(f.encode()) for f in (FWD_RUN, BWD_RUN, BWD3_RUN)] == runs
    finally:
        fake.set_clamp_int32_only(0)


def test_int32_indices_reach_a_cann_that_takes_only_int64(emulated, rng):
    emulated.set_int64_indices_only(1)  # aclnnMaxUnpool2d before CANN 8.0.0
    x = random_values(rng, SHAPES[4], "float32")
    idx = oracle.random_indices(rng, x.shape, HW[0] * HW[1], "int32")
    np.testing.assert_array_equal(_forward()(x, idx), oracle.unpool(x, idx, HW))
    assert emulated.last_indices_dtype(FWD_RUN.encode()) == ACL["INT64"]


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_missing_acl_context_is_a_failed_precondition(emulated, rng, op):
    emulated.set_no_context(1)
    with pytest.raises(RUNTIME_ERRORS) as err:
        _run_op(op, rng)
    message = str(err.value)
    assert "FAILED_PRECONDITION" in message
    assert "the calling thread has no ACL context (aclrtGetCurrentContext failed with error " \
           "107002 ACL_ERROR_RT_CONTEXT_NULL)" in message
    assert emulated.call_count((FWD_GWS if op == "forward" else BWD_GWS).encode()) == 0


# --------------------------------------------------------------------------------------
# Shapes aclnn refuses go to the jnp reference
# --------------------------------------------------------------------------------------

def test_forward_with_a_smaller_output_plane_uses_the_reference(emulated, rng):
    x = random_values(rng, SHAPES[4], "float32")
    idx = oracle.random_indices(rng, x.shape, 6)  # plane 2x3 < 4x5: duplicates
    f = _forward(hw=(2, 3))
    assert npu.MAX_UNPOOL2D_TARGET not in f.lower(x, idx).as_text()
    np.testing.assert_array_equal(f(x, idx), oracle.unpool(x, idx, (2, 3)))
    assert emulated.call_count(FWD_GWS.encode()) == 0


@pytest.mark.parametrize("shape", [(0, 3, 4, 5), (2, 3, 0, 5), (3, 4, 0)])
def test_empty_input_forward_gives_zeros_without_aclnn(emulated, shape):
    x, idx = np.ones(shape, np.float32), np.zeros(shape, np.int32)
    out = _forward()(x, idx)
    np.testing.assert_array_equal(out, np.zeros((*shape[:-2], *HW), np.float32))
    assert emulated.call_count(FWD_GWS.encode()) == 0


def test_empty_backward_without_aclnn(emulated):
    shape = (2, 0, 4, 5)
    out = _backward(shape, np.float32)(np.ones((2, 0, *HW), np.float32),
                                       np.zeros(shape, np.int32))
    assert out.shape == shape
    assert emulated.call_count(BWD_GWS.encode()) == 0


@pytest.mark.parametrize("k", [1, 2, 3])
def test_zero_output_size_without_aclnn(emulated, k):
    # An empty output plane (allowed, as in PyTorch): the forward's result is empty, the
    # backward on the jnp reference reads 0 for every index (none lies in the plane).
    shape, size = (2, 3, *[2] * k), (0, *[3] * (k - 1))
    x, idx = np.ones(shape, np.float32), np.zeros(shape, np.int32)
    out = jax.jit(lambda x, i: getattr(ju, f"max_unpool{k}d")(x, i, output_size=size))(x, idx)
    assert out.shape == (2, 3, *size)
    xs = jax.ShapeDtypeStruct(shape, jnp.float32)
    back = jax.jit(lambda g, i: getattr(ju, f"max_unpool{k}d_backward")(g, xs, i, size))(
        np.ones((2, 3, *size), np.float32), idx)
    np.testing.assert_array_equal(back, np.zeros(shape, np.float32))
    for op in (FWD_RUN, BWD_RUN, "aclnnMaxUnpool3d", "aclnnMaxUnpool3dBackward"):
        assert emulated.call_count(op.encode()) == 0, op


# 3-D (NCDHW) through aclnnMaxUnpool3d(Backward): the same lowering rules.
SHAPE3, SIZE3 = (2, 3, 2, 3, 4), (3, 4, 5)


def _forward3(size=SIZE3):
    return jax.jit(lambda x, i: ju.max_unpool3d(x, i, output_size=size))


def _backward3(shape, size=SIZE3):
    xs = jax.ShapeDtypeStruct(shape, jnp.float32)
    return jax.jit(lambda g, i: ju.max_unpool3d_backward(g, xs, i, size))


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_3d_out_of_range_indices_are_clamped_and_int64(emulated, rng, op):
    # The emulator refuses out-of-range indices, and int32 ones in the backward (CANN's
    # aclnnMaxUnpool3dBackward takes INT64 only): the lowering converts and clamps.
    volume = int(np.prod(SIZE3))
    idx = oracle.random_indices(rng, SHAPE3, volume, "int32")
    idx[1, 2, 1, 2, 3], idx[0, 0, 0, 0, 0] = volume + 5, -3
    clamped = np.clip(idx, 0, volume - 1)
    if op == "forward":
        x = random_values(rng, SHAPE3, "float32")
        out, expected = _forward3()(x, idx), oracle.unpool_nd(x, clamped, SIZE3)
    else:
        g = random_values(rng, (*SHAPE3[:2], *SIZE3), "float32")
        out, expected = _backward3(SHAPE3)(g, idx), oracle.gather_nd(g, clamped, 3)
    np.testing.assert_array_equal(out, expected)
    run = FWD3_RUN if op == "forward" else BWD3_RUN
    assert emulated.call_count(run.encode()) == 1
    assert emulated.last_indices_dtype(run.encode()) == ACL["INT64"]


def _checked(k: int, forward: bool, size):
    """The primitive of rank k bound with check_indices=True."""
    if forward:
        return jax.jit(lambda x, i: unpooling.max_unpool_p[k].bind(
            x, i, output_size=size, channels_last=False, check_indices=True))
    return jax.jit(lambda g, i: unpooling.max_unpool_backward_p[k].bind(
        g, i, channels_last=False, spatial_rank=k, check_indices=True))


# check_indices=True: the checked targets, and no clamp in the program.
CHECKED_CASES = {  # (k, op): (function maker, values shape, plane, the targets)
    (2, "forward"): (lambda: _checked(2, True, HW), SHAPES[4], HW,
                     npu.MAX_UNPOOL2D_CHECKED_TARGET, npu.MAX_UNPOOL2D_TARGET),
    (2, "backward"): (lambda: _checked(2, False, HW), (*SHAPES[4][:2], *HW), HW,
                      npu.MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET,
                      npu.MAX_UNPOOL2D_BACKWARD_TARGET),
    (3, "forward"): (lambda: _checked(3, True, SIZE3), SHAPE3, SIZE3,
                     npu.MAX_UNPOOL3D_CHECKED_TARGET, npu.MAX_UNPOOL3D_TARGET),
    (3, "backward"): (lambda: _checked(3, False, SIZE3), (*SHAPE3[:2], *SIZE3), SIZE3,
                      npu.MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET,
                      npu.MAX_UNPOOL3D_BACKWARD_TARGET),
}


@pytest.mark.parametrize("case", list(CHECKED_CASES))
def test_check_indices_lowers_to_the_checked_targets(emulated, rng, case):
    # The NPU lowering calls the checked targets, and hands them the indices unclamped: an
    # index out of range fails the call with the CPU kernels' message (index, position,
    # plane) instead of landing on the plane's end; in-range indices give the values.
    k, op = case
    make, values_shape, size, checked, default = CHECKED_CASES[case]
    idx_shape = SHAPES[4] if k == 2 else SHAPE3
    idx = oracle.random_indices(rng, idx_shape, int(np.prod(size)))
    values = random_values(rng, values_shape, "float32")
    f = make()
    text = f.lower(values, idx).as_text()
    assert checked in text and f"@{default}(" not in text and "clamp" not in text
    want = (oracle.unpool_nd(values, idx, size) if op == "forward"
            else oracle.gather_nd(values, idx, k))
    np.testing.assert_array_equal(f(values, idx), want)
    idx[1, 2, 1, 2] = int(np.prod(size)) + 5
    with pytest.raises(RUNTIME_ERRORS) as err:
        jax.block_until_ready(make()(values, idx))
    name = f"max_unpool{k}d{'' if op == 'forward' else '_backward'}"
    cpu = jax.ffi.ffi_call(CPU_TARGET if op == "forward" else "jax_unpool_max_unpool_backward_v2",
                           jax.ShapeDtypeStruct((*idx_shape[:2], *size) if op == "forward"
                                                else idx_shape, np.float32))
    with pytest.raises(RUNTIME_ERRORS) as cpu_err:
        jax.block_until_ready(jax.jit(lambda v, i: cpu(v, i, channels_last=False,
                                                       spatial_rank=k))(values, idx))
    assert str(err.value) == str(cpu_err.value)
    assert str(err.value).startswith(f"OUT_OF_RANGE: {name}: index {int(np.prod(size)) + 5} ")


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_3d_smaller_output_volume_uses_the_reference(emulated, rng, op):
    # Both 3-D ops refuse oD*oH*oW < D*H*W (CheckIntArrayShapeMaxUnPool3D).
    size = (1, 2, 3)  # 6 < 24 positions: duplicates
    idx = oracle.random_indices(rng, SHAPE3, 6)
    if op == "forward":
        x = random_values(rng, SHAPE3, "float32")
        f, args, expected = _forward3(size), (x, idx), oracle.unpool_nd(x, idx, size)
    else:
        g = random_values(rng, (*SHAPE3[:2], *size), "float32")
        f, args, expected = _backward3(SHAPE3, size), (g, idx), oracle.gather_nd(g, idx, 3)
    assert "aclnn" not in f.lower(*args).as_text()
    np.testing.assert_array_equal(f(*args), expected)
    assert emulated.call_count(b"aclnnMaxUnpool3dGetWorkspaceSize") == 0
    assert emulated.call_count(b"aclnnMaxUnpool3dBackwardGetWorkspaceSize") == 0


@pytest.mark.parametrize("shape", [(0, 3, 2, 3, 4), (2, 0, 2, 3, 4), (3, 2, 0, 4)])
def test_3d_empty_input_without_aclnn(emulated, shape):
    x, idx = np.ones(shape, np.float32), np.zeros(shape, np.int32)
    out = _forward3()(x, idx)
    np.testing.assert_array_equal(out, np.zeros((*shape[:-3], *SIZE3), np.float32))
    back = _backward3(shape)(np.ones(out.shape, np.float32), idx)
    assert back.shape == shape
    assert emulated.call_count(b"aclnnMaxUnpool3dGetWorkspaceSize") == 0
    assert emulated.call_count(b"aclnnMaxUnpool3dBackwardGetWorkspaceSize") == 0


# --------------------------------------------------------------------------------------
# Loading and registration
# --------------------------------------------------------------------------------------

DEFAULT_DIRS = ["/usr/local/Ascend/ascend-toolkit/latest/lib64", "/usr/local/Ascend/cann/lib64"]
real_cann = any(os.path.isdir(d) for d in DEFAULT_DIRS) or ctypes.util.find_library("ascendcl")


def test_is_available_finds_the_emulator(fake_cann_dir):
    assert npu.is_available(fake_cann_dir)
    assert npu.locate(fake_cann_dir)["opapi"] == str(fake_cann_dir / "libopapi.so")


@pytest.mark.skipif(bool(real_cann), reason="a real CANN is installed where the search ends")
def test_missing_library_error_lists_every_path_and_variable(tmp_path, monkeypatch):
    toolkit = tmp_path / "toolkit"
    (toolkit / "lib64").mkdir(parents=True)
    (toolkit / "lib64" / "libascendcl.so").write_bytes(b"")  # incomplete install
    monkeypatch.delenv("ASCEND_HOME_PATH", raising=False)
    script = """
        from jax_unpool import npu
        try:
            npu.locate()
        except RuntimeError as err:
            print(err)
    """
    # A fresh process: in this one the emulator is already loaded, and would be reused.
    message = _fresh_process(script, env={"ASCEND_TOOLKIT_HOME": str(toolkit)})
    lines = [f"{toolkit}/lib64", "$ASCEND_HOME_PATH/lib64: not set", *DEFAULT_DIRS,
             "the dynamic loader's search path"]
    positions = [message.find(line) for line in lines]
    assert -1 not in positions and positions == sorted(positions), message  # in order
    assert ("no libnnopbase.so, no libopapi_nn.so, libopapi.so or libaclnn_ops_train.so + "
            "libaclnn_ops_infer.so") in message
    for variable in ("ASCEND_TOOLKIT_HOME=", "ASCEND_HOME_PATH=<unset>", "LD_LIBRARY_PATH="):
        assert variable in message


def test_an_explicit_library_dir_is_the_only_place_looked_at(tmp_path, fake_cann_dir,
                                                            monkeypatch):
    # A complete CANN where the environment points must not stand in for a wrong
    # library_dir (in host emulation it would be handed host memory).
    (tmp_path / "toolkit").mkdir()
    (tmp_path / "toolkit" / "lib64").symlink_to(fake_cann_dir)
    monkeypatch.setenv("ASCEND_TOOLKIT_HOME", str(tmp_path / "toolkit"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(RuntimeError) as err:
        npu.register("cpu", tmp_path / "empty")
    message = str(err.value)
    assert f"{tmp_path / 'empty'} (library_dir argument): no libascendcl.so" in message
    assert "$ASCEND_TOOLKIT_HOME/lib64" not in message and "dynamic loader" not in message
    assert not npu.cpu_emulation_active()


def test_host_emulation_needs_an_explicit_library_dir():
    with pytest.raises(ValueError, match="platform='cpu' .* needs library_dir"):
        npu.register("cpu")
    assert not npu.cpu_emulation_active()


@pytest.mark.parametrize("platform", ["npu_without_plugin", "ascend"])
def test_platform_without_devices_is_named(fake_cann_dir, platform):
    if platform == "ascend" and _platform_known("ascend"):
        pytest.skip("an ascend plugin is loaded")  # a fact of the machine, not a failure
    with pytest.raises(RuntimeError, match=f"platform '{platform}' has no devices"):
        npu.register(platform, fake_cann_dir)


@pytest.mark.parametrize("platform", ["cuda", "rocm", "gpu", "tpu"])
def test_gpu_and_tpu_platforms_are_never_routed_to_cann(fake_cann_dir, platform):
    with pytest.raises(RuntimeError, match=f"platform '{platform}' is not an Ascend NPU"):
        npu.register(platform, fake_cann_dir)
    # Nothing was registered: the primitive still lowers to the CPU kernel.
    text = _forward(hw=(2, 2)).lower(np.ones((1, 1, 2, 2), np.float32),
                                     np.zeros((1, 1, 2, 2), np.int32)).as_text()
    assert npu.MAX_UNPOOL2D_TARGET not in text


@pytest.mark.jax_window
def test_ffi_targets_go_to_the_name_the_plugin_handles(monkeypatch):
    # A plugin following the CUDA plugin installs its handler under XLA's upper-case name.
    seen = []
    _compat.install_ffi_handler(
        "NPU_TEST_XLA", lambda name, fn, platform, *args: seen.append((name, platform)))
    assert _compat.platforms_with_ffi_handler(npu._ffi_platforms("npu_test_xla", None)) == \
        ["NPU_TEST_XLA"]
    assert _compat.platforms_with_ffi_handler(npu._ffi_platforms("npu_test_xla", "OTHER")) == []
    monkeypatch.setattr(npu, "_require_devices", lambda platform: None)
    monkeypatch.setattr(npu, "_targets_registered", set())
    monkeypatch.setattr(npu.registry, "install", lambda *args, **kwargs: None)
    monkeypatch.setattr(npu._jax_unpool, "load_cann", lambda library_dir, host: {})
    npu.register("npu_test_xla")
    assert sorted(seen) == sorted((target, "NPU_TEST_XLA") for target in (
        npu.MAX_UNPOOL2D_BACKWARD_TARGET, npu.MAX_UNPOOL2D_TARGET,
        npu.MAX_UNPOOL3D_BACKWARD_TARGET, npu.MAX_UNPOOL3D_TARGET,
        npu.MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET, npu.MAX_UNPOOL2D_CHECKED_TARGET,
        npu.MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET, npu.MAX_UNPOOL3D_CHECKED_TARGET,
        npu.MAX_POOL2D_TARGET, npu.MAX_POOL3D_TARGET))
    with pytest.raises(RuntimeError, match="installed no FFI handler under 'npu_test_none' or "
                                           "'NPU_TEST_NONE'.*ffi_platform="):
        npu.register("npu_test_none")


def _platform_known(name):
    try:
        jax.devices(name)
    except RuntimeError:
        return False
    return True


@pytest.fixture(scope="module")
def opapi_nn_dir(tmp_path_factory):
    return build(tmp_path_factory.mktemp("fake_cann_nn"), opapi_name="libopapi_nn.so")


def test_opapi_nn_is_the_fallback(opapi_nn_dir):
    # In a fresh process: once this one has loaded a CANN, locate() opens no other.
    assert not (opapi_nn_dir / "libopapi.so").exists()
    spec = {"module": ju._jax_unpool.__file__, "preload": None,
            "steps": [["probe", str(opapi_nn_dir)]]}
    proc = fresh_process.run("cann_loads.py", json.dumps(spec))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout)[0]["where"]["opapi"] == str(opapi_nn_dir / "libopapi_nn.so")


def test_a_second_runtime_in_one_process_is_refused(emulated, opapi_nn_dir, fake_cann_dir):
    with pytest.raises(RuntimeError, match="CANN is already loaded in this process from"):
        npu.register("cpu", opapi_nn_dir)
    assert npu.register("cpu", fake_cann_dir)["opapi"] == str(fake_cann_dir / "libopapi.so")


def _fresh_process(script, *args, env=None):
    # cwd: `python -c` puts it first on sys.path; the repo root would shadow the
    # installed package (with its compiled extension) by the bare sources.
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)],
                          env=fresh_process.child_env(**(env or {})), cwd=fresh_process.TESTS,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc.stdout


# Every opapi file name a layout may hold.
PROVIDER_FILES = ("libopapi.so", "libopapi_nn.so", "libopapi_math.so", "libopapi_cv.so",
                  "libopapi_transformer.so", "libaclnn_ops_train.so", "libaclnn_ops_infer.so",
                  "libaclnn_math.so")


@pytest.mark.parametrize("layout,opapi_name,loaded", [
    (None, "libopapi_nn.so", ["libopapi_nn.so"]),
    # CANN 9.x: the split libraries next to the deprecated libopapi.so: only _nn opens,
    # with its ops-math library (aclnnClamp, aclnnMax, aclnnMin).
    ("split", None, ["libopapi_math.so", "libopapi_nn.so"]),
    # CANN 8.x --feature install: the train/infer pair is one provider, and its math
    # library.
    ("feature", None, ["libaclnn_math.so", "libaclnn_ops_infer.so", "libaclnn_ops_train.so"]),
])
def test_both_ops_run_through_exactly_one_provider_in_a_fresh_process(tmp_path, layout,
                                                                      opapi_name, loaded):
    lib_dir = (build(tmp_path, layout=layout) if layout
               else build(tmp_path, opapi_name=opapi_name))
    script = """
        import os, sys
        import jax, numpy as np
        import jax_unpool as ju
        import numpy_oracle as oracle
        ju.npu.register("cpu", sys.argv[1])
        rng = np.random.default_rng(0)
        x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
        idx = oracle.random_indices(rng, x.shape, 42)
        out = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=(6, 7)))(x, idx)
        np.testing.assert_array_equal(out, oracle.unpool(x, idx, (6, 7)))
        g = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
        back = ju.max_unpool2d_backward(g, x, idx, (6, 7))
        np.testing.assert_array_equal(back, oracle.gather(g, idx))
        maps = open("/proc/self/maps").read().split()
        print(" ".join(sorted({os.path.basename(m) for m in maps if m.startswith(sys.argv[1])})))
    """
    mapped = _fresh_process(script, lib_dir).split()
    assert [m for m in mapped if m in PROVIDER_FILES] == loaded
    assert "libascendcl.so" in mapped and "libnnopbase.so" in mapped


def test_an_already_loaded_runtime_is_reused(tmp_path):
    # A PJRT plugin loaded libascendcl.so from one install; the environment points at
    # another: the search must take the loaded one, not load a second runtime.
    loaded = build(tmp_path / "plugin" / "lib64")
    other = build(tmp_path / "env" / "lib64")
    script = """
        import ctypes, sys
        from jax_unpool import npu
        ctypes.CDLL(sys.argv[1] + "/libascendcl.so")
        where = npu.locate()
        print(where["libascendcl"], where["libnnopbase"])
    """
    found = _fresh_process(script, loaded,
                           env={"ASCEND_TOOLKIT_HOME": str(other.parent)}).split()
    assert found == [str(loaded / "libascendcl.so"), str(loaded / "libnnopbase.so")]


def test_cpu_emulation_context_restores_the_cpu_ffi_lowering(fake, fake_cann_dir, rng):
    x = random_values(rng, SHAPES[4], "float32")
    idx = oracle.random_indices(rng, x.shape, HW[0] * HW[1])
    f = _forward()
    with npu.cpu_emulation(fake_cann_dir):
        assert npu.MAX_UNPOOL2D_TARGET in f.lower(x, idx).as_text()
        fake.reset()
        np.testing.assert_array_equal(f(x, idx), oracle.unpool(x, idx, HW))
        assert fake.call_count(FWD_RUN.encode()) == 1
    text = f.lower(x, idx).as_text()
    assert CPU_TARGET in text and npu.MAX_UNPOOL2D_TARGET not in text
    np.testing.assert_array_equal(f(x, idx), oracle.unpool(x, idx, HW))
    assert fake.call_count(FWD_RUN.encode()) == 1  # the compiled aclnn program is gone
    npu.unregister_cpu_emulation()  # a no-op when the mode is off
    assert not npu.cpu_emulation_active()


WITHOUT_FORWARD = """
import sys, warnings
import jax, numpy as np
import jax_unpool as ju
import numpy_oracle as oracle
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ju.npu.register("cpu", sys.argv[1])
print(*[f"{w.category.__name__}: {w.message}" for w in caught], sep="\\n")
rng = np.random.default_rng(0)
for small, size in (((4,), (7,)), ((4, 5), (6, 7)), ((2, 2, 5), (2, 3, 7))):
    k = len(size)
    x = rng.standard_normal((2, 3, *small)).astype(np.float32)
    idx = oracle.random_indices(rng, x.shape, int(np.prod(size)))  # with duplicates
    g = rng.standard_normal((2, 3, *size)).astype(np.float32)
    fwd = jax.jit(lambda x, i: getattr(ju, f"max_unpool{k}d")(x, i, output_size=size))
    bwd = jax.jit(lambda g, i: getattr(ju, f"max_unpool{k}d_backward")(g, x, i, size))
    np.testing.assert_array_equal(fwd(x, idx), oracle.unpool_nd(x, idx, size))
    np.testing.assert_array_equal(bwd(g, idx), oracle.gather_nd(g, idx, k))
    print(k, "aclnn" in fwd.lower(x, idx).as_text(), "aclnn" in bwd.lower(g, idx).as_text())
f = jax.ffi.ffi_call(ju.npu.MAX_UNPOOL2D_TARGET, jax.ShapeDtypeStruct((1, 1, 2, 2), np.float32))
try:
    jax.jit(lambda x, i: f(x, i, channels_last=False))(np.ones((1, 1, 2, 2), np.float32),
                                                     np.zeros((1, 1, 2, 2), np.int32))
except Exception as err:
    print(err)
"""


def test_a_cann_without_the_forward_ops_runs_them_on_the_reference_and_says_so(tmp_path):
    # CANN lists both forwards for Atlas A2/A3 and Ascend 950 only, the backwards also for
    # the Atlas training series (hicann/ops-nn index/*/docs/aclnnMaxUnpool*.md).
    lib_dir = build(tmp_path, layout="noforward")
    opapi = lib_dir / "libopapi.so"
    assert _fresh_process(WITHOUT_FORWARD, lib_dir).splitlines() == [
        (f"RuntimeWarning: jax_unpool.npu.register: the CANN op library {opapi} has no "
         f"aclnnMaxUnpool2d, so on platform 'cpu' the forward unpools run XLA's ops "
         f"(as on a TPU; channels-first 3-D runs aclnnMaxUnpool3d if present); the "
         f"backwards run aclnn."),
        "1 False True", "2 False True", "3 False True",  # k, forward / backward on aclnn
        (f"FAILED_PRECONDITION: max_unpool2d: the loaded CANN op library ({opapi}) has no "
         f"aclnnMaxUnpool2dGetWorkspaceSize, aclnnMaxUnpool2d: this CANN has no forward "
         f"unpool op; the NPU lowering runs the jnp reference instead"),
    ]


def test_the_docs_promise_the_duplicate_winner_only_where_it_holds():
    # The forwards are l0op::ScatterElements(..., "none") (hicann/ops-nn
    # aclnn_max_unpool{2,3}d.cpp): deterministic by CANN's docs, no winner named anywhere.
    root = ROOT
    pages = {str(f.relative_to(root)): " ".join(f.read_text().split())
             for f in [root / "README.md", *sorted((root / "docs").glob("*.md"))]}
    docs = {f"{f.__module__}.{f.__name__}": " ".join(f.__doc__.split())
            for module in (ju, ju.reference) for name in dir(module)
            if name.startswith("max_unpool") and callable(f := getattr(module, name))
            and f.__doc__}
    assert len(docs) >= 12, sorted(docs)  # every public unpool function of both modules
    for name, text in {**pages, **docs}.items():
        assert "wins, deterministically, on every backend" not in text, name
        assert "deterministically on every backend" not in text, name
    bullet = pages["docs/semantics.md"].split("- Duplicated indices in a plane:")[1].split(" - ")[0]
    for text in (bullet, docs["jax_unpool.unpooling.max_unpool2d"]):
        assert "which duplicate wins is unspecified" in text, text


# Which unpool ops CANN documents per product (hicann/ops-nn index/*/docs/aclnnMaxUnpool*.md):
# all four on Atlas A2/A3 and Ascend 950, the backwards only on the Atlas training series
# (910), none on the Atlas inference series (310P) and Atlas 200I/500 A2 (310B). The ops
# check no chip, so there the routing keeps XLA's ops. (SoC name, forward on aclnn,
# backward on aclnn.)
CHIP_UNPOOLS = [("Ascend910ProA", False, True), ("Ascend310P3", False, False),
                ("Ascend310B1", False, False), ("Ascend910B2", True, True),
                ("Ascend950DT_9591", True, True)]


@pytest.mark.parametrize("soc,forward_on_aclnn,backward_on_aclnn", CHIP_UNPOOLS)
@pytest.mark.parametrize("fmt", ["NCW", "NCHW", "NCDHW"])
def test_unpools_run_aclnn_only_where_the_chip_has_the_op(fake, fake_cann_dir, rng, soc,
                                                          forward_on_aclnn, backward_on_aclnn,
                                                          fmt):
    k = len(fmt) - 2
    small, size = {1: ((4,), (9,)), 2: ((3, 4), (5, 6)), 3: ((2, 2, 3), (3, 3, 4))}[k]
    x = random_values(rng, (2, 3, *small), "float32")
    idx = oracle.random_indices(rng, x.shape, int(np.prod(size)))  # with duplicates
    g = random_values(rng, (2, 3, *size), "float32")
    unpool = getattr(ju, f"max_unpool{k}d")
    unpool_bwd = getattr(ju, f"max_unpool{k}d_backward")
    forward = jax.jit(lambda x, i: unpool(x, i, output_size=size))
    backward = jax.jit(lambda g, i: unpool_bwd(g, x, i, size))
    with fake.soc(soc), npu.cpu_emulation(fake_cann_dir):
        out, back = forward(x, idx), backward(g, idx)
        forward_text, backward_text = forward.lower(x, idx).as_text(), backward.lower(
            g, idx).as_text()
    assert_bits_equal(out, oracle.unpool_nd(x, idx, size))
    assert_bits_equal(back, oracle.gather_nd(g, idx, k))
    assert ("aclnn" in forward_text) == forward_on_aclnn, forward_text[:3000]
    assert ("aclnn" in backward_text) == backward_on_aclnn, backward_text[:3000]
    assert CPU_TARGET not in forward_text  # the jnp reference, not the CPU kernel


@pytest.mark.parametrize("soc", ["Ascend999", "Ascend350_354f", None])
def test_a_chip_no_doc_lists_runs_xla_ops_and_says_so(fake, fake_cann_dir, rng, soc):
    named = "names no chip" if soc is None else f"names the chip '{soc}'"
    x = random_values(rng, SHAPES[4], "float32")
    idx = oracle.random_indices(rng, x.shape, HW[0] * HW[1])
    g = random_values(rng, (*SHAPES[4][:2], *HW), "float32")
    calls = {
        "forward": (_forward(), (x, idx), oracle.unpool(x, idx, HW)),
        "backward": (_backward(x.shape, x.dtype), (g, idx), oracle.gather(g, idx)),
        "pool": (jax.jit(lambda x: ju.max_pool2d_with_indices(x, 2)), (x,),
                 ju.reference.max_pool2d_with_indices(x, 2)),
    }
    warning = (rf"CANN {named} \(aclrtGetSocName\), not one the aclnn operators' docs list "
               rf".* every op runs XLA's ops, none aclnn")
    with fake.soc(soc), pytest.warns(RuntimeWarning, match=warning), \
            npu.cpu_emulation(fake_cann_dir):
        results = {op: (f(*args), f.lower(*args).as_text())
                   for op, (f, args, _) in calls.items()}
    for op, (result, text) in results.items():
        assert "aclnn" not in text, (op, text[:3000])
        jax.tree.map(assert_bits_equal, result, calls[op][2])


ROOT = Path(__file__).resolve().parents[3]
OP_COLUMNS = {  # the chip table's operator columns -> what the routing must send to aclnn
    "`aclnnMaxUnpool2d`, `aclnnMaxUnpool3d`": ("unpool_ops", {"max_unpool2d", "max_unpool3d"}),
    "`aclnnMaxUnpool2dBackward`, `aclnnMaxUnpool3dBackward`": (
        "unpool_ops", {"max_unpool2d_backward", "max_unpool3d_backward"}),
    "`aclnnMaxPool2dWithIndices`, `aclnnMaxPool3dWithArgmax`": ("pool_ranks", {2, 3}),
}


def test_the_chip_tables_list_every_op_as_the_routing_decides_it():
    # Issue 31 item 2: the NPU page's table lists the pool ops per chip too, and says what
    # register() does on each chip (jax_unpool.backends.npu_chips).
    section = (ROOT / "docs" / "npu.md").read_text().split("## Supported chips")[1]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.split("\n## ")[0].splitlines() if line.startswith("| ")]
    header, body = rows[0], rows[1:]
    assert header[2:] == list(OP_COLUMNS), header
    assert len(body) == 7, body
    for product, names, *cells in body:
        socs = [n.rstrip("*") for n in re.findall(r"`([^`]+)`", names)] or ["Ascend999", None]
        for soc in socs:
            chip = npu_chips.chip(soc)
            want = ["aclnn" if ops <= getattr(chip, field) else "XLA ops"
                    for field, ops in OP_COLUMNS.values()]
            assert cells == want, (product, soc, cells)


def test_the_docs_promise_pytorchs_pools_on_aclnn_for_finite_input_only():
    # Issue 31 item 2: CANN's doc of aclnnMaxPool2dWithIndices says NaN and -inf input is not
    # supported on Atlas A2/A3 ("输入数据暂不支持NaN、-Inf", hicann/ops-nn
    # pooling/max_pool3d_with_argmax_v2/docs), and the 3-D op runs the same kernel there.
    def flat(text):
        return " ".join(text.split())

    npu_page = flat((ROOT / "docs" / "npu.md").read_text())
    differs = npu_page.split("## What differs from the CPU backend")[1].split(" ## ")[0]
    bullet = differs.split("- **NaN and -inf in the pools' input.**")[1].split(" - **")[0]
    for words in ("输入数据暂不支持NaN、-Inf", "Atlas A2/A3", "aclnnMaxPool3dWithArgmax",
                  "for finite input only", "aclnn_pools=False"):
        assert words in bullet, words
    pooling = flat((ROOT / "docs" / "pooling.md").read_text())
    ascend = pooling.split("- **Ascend NPU**")[1].split(" - **")[0]
    docstrings = {"docs/pooling.md": ascend, "npu": flat(npu.__doc__),
                  "npu.register": flat(npu.register.__doc__),
                  "npu.pool_lowering": flat(npu.pool_lowering.__doc__),
                  "backends.npu.pool_lowering": flat(npu._backend.pool_lowering.__doc__)}
    for name, text in docstrings.items():
        assert "for finite input" in text, name
        assert "NaN or -inf" in text or "NaN and -inf" in text, name
