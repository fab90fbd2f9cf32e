"""The aclnn 3-D targets (ffi/npu/max_unpool.cc: aclnnMaxUnpool3d and its backward)
against the emulated CANN in tests/fake_cann, in host-emulation mode, called directly with
jax.ffi.ffi_call: values bit-exact against numpy loops for every dtype, rank 4 and 5 and
both index dtypes; the aclDataTypes handed to aclnn; the handlers' own refusals and the
emulated op's reaching Python; a CANN without the 3-D ops.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from cann_without_ops import missing_op, run_without_ops
from dtypes import INDEX_DTYPES, VALUE_DTYPES, assert_bits_equal, needs_x64, random_values

import jax_unpool as ju
from jax_unpool._compat import enable_x64

npu = ju.npu
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)  # see docs/semantics.md: jax-ml/jax#34083

FWD_GWS, FWD_RUN = "aclnnMaxUnpool3dGetWorkspaceSize", "aclnnMaxUnpool3d"
BWD_GWS, BWD_RUN = "aclnnMaxUnpool3dBackwardGetWorkspaceSize", "aclnnMaxUnpool3dBackward"

# aclDataType values (shared/notes/cann-api.md).
ACL = {"FLOAT": 0, "FLOAT16": 1, "INT8": 2, "INT32": 3, "UINT8": 4, "INT16": 6, "INT64": 9,
       "DOUBLE": 11}
# dtype -> the aclDataType (forward, backward) it must reach aclnn as: its own where both ops
# list it and their kernels (ScatterElements, GatherElements) run it on AI Core, else one
# of its byte width, as for the 2-D ops.
PRESENTED = {
    "float16": ("FLOAT16", "FLOAT16"), "bfloat16": ("FLOAT16", "INT16"),
    "float32": ("FLOAT", "FLOAT"), "float64": ("DOUBLE", "INT64"),
    "int8": ("INT8", "INT8"), "int16": ("FLOAT16", "INT16"), "int32": ("INT32", "INT32"),
    "int64": ("INT64", "INT64"), "uint8": ("UINT8", "UINT8"), "bool": ("UINT8", "UINT8"),
}
assert sorted(PRESENTED) == sorted(VALUE_DTYPES)

# Channels first; aclnn reads a rank-4 buffer as (N, D, H, W): the same computation.
SHAPES = {5: (2, 3, 2, 3, 4), 4: (3, 2, 3, 4)}
VOLUME = (3, 4, 5)  # 60 >= 24 positions: aclnn's forward takes it
NOTE_3D = ("any position named here is in the indices buffer of this kernel call: n counts "
           "the images with the batch axes of jax.vmap folded in, i = (d * H + h) * W + w, "
           "and under sharding positions are within the shard")


def _out_shape(shape, volume=VOLUME):
    return (*shape[:-3], *volume)


def call(target, result_shape, dtype, *operands):
    """A direct, jitted call of `target` (no attributes) with a result of that shape."""
    f = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(result_shape, jnp.dtype(dtype)))
    return jax.jit(f)(*operands)


def forward(x, idx, volume=VOLUME):
    return call(npu.MAX_UNPOOL3D_TARGET, _out_shape(x.shape, volume), x.dtype, x, idx)


def backward(g, idx):
    return call(npu.MAX_UNPOOL3D_BACKWARD_TARGET, idx.shape, g.dtype, g, idx)


def _volumes(rng, rank, dtype, index_dtype="int64"):
    shape = SHAPES[rank]
    return (random_values(rng, shape, dtype),
            oracle.random_indices(rng, shape, int(np.prod(VOLUME)), index_dtype))


# --------------------------------------------------------------------------------------
# Values and the dtypes aclnn sees
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("rank", [4, 5])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_forward_equals_numpy_loops(emulated, rng, dtype, index_dtype, rank):
    x, idx = _volumes(rng, rank, dtype, index_dtype)  # duplicated indices: last writer wins
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = forward(x, idx)
    assert_bits_equal(out, oracle.unpool_nd(x, idx, VOLUME))
    assert emulated.call_count(FWD_RUN.encode()) == 1
    assert emulated.last_dtype(FWD_RUN.encode()) == ACL[PRESENTED[dtype][0]]
    assert emulated.last_indices_dtype(FWD_RUN.encode()) == ACL[index_dtype.upper()]


@pytest.mark.parametrize("rank", [4, 5])
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_backward_equals_numpy_loops(emulated, rng, dtype, rank):
    idx = oracle.random_indices(rng, SHAPES[rank], int(np.prod(VOLUME)), np.int64)
    g = random_values(rng, _out_shape(idx.shape), dtype)
    with enable_x64(True):  # int64 indices
        out = backward(g, idx)
    assert_bits_equal(out, oracle.gather_nd(g, idx, 3))
    assert emulated.call_count(BWD_RUN.encode()) == 1
    assert emulated.last_dtype(BWD_RUN.encode()) == ACL[PRESENTED[dtype][1]]
    assert emulated.last_indices_dtype(BWD_RUN.encode()) == ACL["INT64"]


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_workspace_stream_and_objects(emulated, rng, op):
    x, idx = _volumes(rng, 5, "float32")
    with enable_x64(True):
        if op == "forward":
            forward(x, idx).block_until_ready()
        else:
            backward(random_values(rng, _out_shape(x.shape), "float32"), idx).block_until_ready()
    # The launch got exactly the workspace GetWorkspaceSize asked for (the emulator refuses
    # any other size), from aclrtMalloc, freed after the stream was synchronised; so were
    # the clamped indices and the clamp's workspace (aclnnClamp, as on a device).
    assert emulated.last_workspace_size() > 0
    assert emulated.last_stream((FWD_RUN if op == "forward" else BWD_RUN).encode()) is None
    assert emulated.call_count(b"aclnnClamp") == 1
    assert [emulated.call_count(f) for f in (b"aclrtMalloc", b"aclrtSynchronizeStream",
                                             b"aclrtFree")] == [3, 3, 3]


# --------------------------------------------------------------------------------------
# Refusals: the handler's, and CANN's reaching Python
# --------------------------------------------------------------------------------------

def test_backward_refuses_int32_indices(emulated, rng):
    x, idx = _volumes(rng, 5, "float32", "int32")
    g = random_values(rng, _out_shape(x.shape), "float32")
    with pytest.raises(RUNTIME_ERRORS) as err:
        backward(g, idx)
    assert str(err.value) == ("INVALID_ARGUMENT: max_unpool3d_backward: aclnnMaxUnpool3dBackward "
                              "takes int64 indices only, got int32")
    assert emulated.call_count(BWD_GWS.encode()) == 0


@pytest.mark.parametrize("attributes", [{"channels_last": True}, {"bogus": 3},
                                        {"channels_last": False, "bogus": 3}])
@pytest.mark.parametrize("op", ["forward", "backward"])
def test_attributes_are_refused_and_named(emulated, rng, op, attributes):
    # The 3-D targets take none: channels_last=True must not read an NDHWC buffer as NCDHW.
    x, idx = _volumes(rng, 5, "float32")
    target, result, values = ((npu.MAX_UNPOOL3D_TARGET, _out_shape(x.shape), x) if op == "forward"
                              else (npu.MAX_UNPOOL3D_BACKWARD_TARGET, x.shape,
                                    random_values(rng, _out_shape(x.shape), "float32")))
    f = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(result, np.float32))
    with enable_x64(True), pytest.raises(RUNTIME_ERRORS) as err:
        jax.jit(lambda v, i: f(v, i, **attributes))(values, idx)
    names = ", ".join(f"'{name}'" for name in sorted(attributes))
    plural = "s" if len(attributes) > 1 else ""
    name = "max_unpool3d" if op == "forward" else "max_unpool3d_backward"
    assert str(err.value) == (f"INVALID_ARGUMENT: {name}: unknown attribute{plural} {names}: "
                              f"this target takes no attributes (its buffers are channels-first)")
    assert emulated.call_count((FWD_GWS if op == "forward" else BWD_GWS).encode()) == 0


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_an_empty_input_with_a_non_empty_result_is_refused(emulated, op):
    empty, full = (1, 2, 0, 2, 2), (1, 2, 2, 2, 2)
    idx = np.zeros(full if op == "backward" else empty, np.int64)
    with enable_x64(True), pytest.raises(RUNTIME_ERRORS) as err:
        if op == "forward":
            call(npu.MAX_UNPOOL3D_TARGET, full, np.float32, np.ones(empty, np.float32), idx)
        else:
            backward(np.ones(empty, np.float32), idx)
    assert str(err.value) == {
        "forward": "INVALID_ARGUMENT: max_unpool3d: aclnnMaxUnpool3d cannot take an empty x",
        "backward": "INVALID_ARGUMENT: max_unpool3d_backward: aclnnMaxUnpool3dBackward cannot "
                    "take an empty grad_output"}[op]
    assert emulated.call_count((FWD_GWS if op == "forward" else BWD_GWS).encode()) == 0


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_a_smaller_output_volume_is_refused_by_cann(emulated, rng, op):
    # The handlers pass it on; CANN's rule oD*oH*oW >= D*H*W (level2_base.h) refuses it,
    # in the backward too (the 2-D backward has no such rule).
    x, idx = _volumes(rng, 5, "float32")  # volumes of 2 x 3 x 4
    small = (1, 1, 7)
    with enable_x64(True), pytest.raises(RUNTIME_ERRORS) as err:
        if op == "forward":
            forward(x, np.minimum(idx, 6), small)
        else:
            backward(random_values(rng, _out_shape(x.shape, small), "float32"),
                     np.minimum(idx, 6))
    name, gws = ("max_unpool3d", FWD_GWS) if op == "forward" else ("max_unpool3d_backward",
                                                                    BWD_GWS)
    message = str(err.value)
    assert message.startswith(f"INVALID_ARGUMENT: {name}: {gws} failed with status 161002 "
                              f"ACLNN_ERR_PARAM_INVALID: "), message
    assert ("The output dimensions are of size 1 x 1 x 7, should be greater than or equal to "
            "self of size 2 x 3 x 4") in message  # aclGetRecentErrMsg()


@pytest.mark.parametrize("op", ["forward", "backward"])
def test_an_out_of_range_message_names_a_position_in_the_volume(emulated, rng, op):
    # A direct call of a checked target: the handler checks the indices itself, as the CPU
    # handler does, before aclnn (which does not check them); the default target clamps
    # them instead (aclnnClamp), as on a device.
    x, idx = _volumes(rng, 5, "float32")
    idx[1, 2, 1, 0, 3] = 60
    g = random_values(rng, _out_shape(x.shape), "float32")
    with enable_x64(True):
        if op == "forward":
            def checked(*operands):
                return call(npu.MAX_UNPOOL3D_CHECKED_TARGET, _out_shape(x.shape), x.dtype,
                            *operands)
            clamped = forward(x, idx)
            want = oracle.unpool_nd(x, np.clip(idx, 0, 59), VOLUME)
        else:
            def checked(*operands):
                return call(npu.MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET, idx.shape, g.dtype,
                            *operands)
            clamped = backward(g, idx)
            want = oracle.gather_nd(g, np.clip(idx, 0, 59), 3)
        np.testing.assert_array_equal(clamped, want)
        emulated.reset()
        with pytest.raises(RUNTIME_ERRORS) as err:
            jax.block_until_ready(checked(*((x, idx) if op == "forward" else (g, idx))))
    name = "max_unpool3d" if op == "forward" else "max_unpool3d_backward"
    assert str(err.value) == (  # i = (1 * 3 + 0) * 4 + 3
        f"OUT_OF_RANGE: {name}: index 60 at (n=1, c=2, i=15) of indices is out of range: "
        f"valid indices are [0, 60) for an output volume of 3x4x5"
        + ("; if the indices come from a max pool, pass the pool's input size as "
           "output_size (the default output size can be smaller, e.g. for an odd input size "
           "with stride 2)" if op == "forward" else "") + f" ({NOTE_3D})")
    assert emulated.call_count((FWD_GWS if op == "forward" else BWD_GWS).encode()) == 0


@pytest.mark.parametrize("function", [FWD_GWS, FWD_RUN, BWD_GWS, BWD_RUN])
def test_a_failing_status_reaches_python(emulated, rng, function):
    emulated.fail_next(function.encode(), 561003, b"injected: no kernel package")
    x, idx = _volumes(rng, 4, "float32")
    with enable_x64(True), pytest.raises(RUNTIME_ERRORS) as err:
        if function in (FWD_GWS, FWD_RUN):
            forward(x, idx)
        else:
            backward(random_values(rng, _out_shape(x.shape), "float32"), idx)
    message = str(err.value)
    assert f"{function} failed with status 561003 ACLNN_ERR_INNER_FIND_KERNEL_ERROR" in message
    assert "injected: no kernel package" in message
    assert emulated.live_executors() == 0


# --------------------------------------------------------------------------------------
# A CANN without the 3-D ops
# --------------------------------------------------------------------------------------

WITHOUT_3D = """
import sys
import jax, numpy as np
import jax_unpool as ju
import numpy_oracle as oracle
jax.config.update("jax_enable_x64", True)
print(ju.npu.register("cpu", sys.argv[1])["opapi"])
rng = np.random.default_rng(0)
x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
idx = oracle.random_indices(rng, x.shape, 42)
out = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=(6, 7)))(x, idx)
np.testing.assert_array_equal(out, oracle.unpool(x, idx, (6, 7)))  # the 2-D op works
for target, result in ((ju.npu.MAX_UNPOOL3D_TARGET, (2, 3, 1, 6, 7)),
                       (ju.npu.MAX_UNPOOL3D_BACKWARD_TARGET, (2, 3, 1, 4, 5))):
    operand = x[:, :, None] if target == ju.npu.MAX_UNPOOL3D_TARGET else out[:, :, None]
    f = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(result, np.float32))
    try:
        jax.jit(f)(operand, idx[:, :, None].astype(np.int64))
    except Exception as err:
        print(err)
# Through the public API, NCDHW runs on the 2-D ops' (N, C, D * H, W) view instead.
x3, size = x.reshape(2, 3, 2, 2, 5), (2, 3, 7)
idx3 = oracle.random_indices(rng, x3.shape, 42)
g3 = rng.standard_normal((2, 3, *size)).astype(np.float32)
fwd = jax.jit(lambda x, i: ju.max_unpool3d(x, i, output_size=size))
bwd = jax.jit(lambda g, i: ju.max_unpool3d_backward(g, x3, i, size))
np.testing.assert_array_equal(fwd(x3, idx3), oracle.unpool_nd(x3, idx3, size))
np.testing.assert_array_equal(bwd(g3, idx3), oracle.gather_nd(g3, idx3, 3))
for text in (fwd.lower(x3, idx3).as_text(), bwd.lower(g3, idx3).as_text()):
    assert "aclnn_max_unpool2d" in text and "aclnn_max_unpool3d" not in text
print("3-D on the 2-D view")
"""


def test_a_cann_without_the_3d_ops_loads_says_what_is_missing_and_runs_3d_as_2d(tmp_path):
    opapi, lines = run_without_ops(tmp_path, "no3d", WITHOUT_3D)
    assert lines == [opapi, missing_op("max_unpool3d", opapi, FWD_GWS, FWD_RUN),
                     missing_op("max_unpool3d_backward", opapi, BWD_GWS, BWD_RUN),
                     "3-D on the 2-D view"]
