"""The aclnn pool targets (ffi/npu/max_pool.cc: aclnnMaxPool2dWithIndices and
aclnnMaxPool3dWithArgmax) against the emulated CANN in tests/fake_cann, in host-emulation
mode, called directly with jax.ffi.ffi_call: values and indices bit-exact against PyTorch
for every dtype the ops take, both layouts, both ranks of x, ties, NaN, -inf planes,
padding and ceil_mode; the aclDataTypes handed to aclnn; the handler's refusals and
CANN's reaching Python; a CANN without the pool ops. Then the NPU lowering of the pool
primitives (jax_unpool.npu.pool_lowering, which register() installs): the aclnn call where
the ops give PyTorch's result, the XLA ops elsewhere, values and indices equal to the
XLA-ops path; the native CPU pool back when the emulation ends.
"""

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle
import pytest
from cann_without_ops import missing_op, run_without_ops
from dtypes import assert_bits_equal
from fresh_process import run_code
from torch_oracle import needs_torch, torch, torch_pool

import jax_unpool as ju
from jax_unpool._compat import enable_x64
from jax_unpool.backends import cpu as cpu_backend

npu = ju.npu
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)  # see README: jax-ml/jax#34083
TARGET = {2: npu.MAX_POOL2D_TARGET, 3: npu.MAX_POOL3D_TARGET}
GWS = {2: "aclnnMaxPool2dWithIndicesGetWorkspaceSize",
       3: "aclnnMaxPool3dWithArgmaxGetWorkspaceSize"}
RUN = {2: "aclnnMaxPool2dWithIndices", 3: "aclnnMaxPool3dWithArgmax"}
OP = {2: "max_pool2d_with_indices", 3: "max_pool3d_with_indices"}
ACL = {"float32": 0, "float16": 1, "bfloat16": 27, "int32": 3, "int64": 9}
DTYPES = ["float16", "bfloat16", "float32"]  # what both ops take (Atlas A2/A3 and 950)

# (kernel, stride, padding, ceil_mode) per rank: non-overlapping windows, and overlapping
# ones with padding and ceil_mode (a last window hanging over the edge). dilation is 1:
# Atlas A2/A3 take no other.
WINDOWS = {2: [((2, 2), (2, 2), (0, 0), False), ((3, 2), (2, 1), (1, 1), True)],
           3: [((2, 2, 2), (2, 2, 2), (0, 0, 0), False), ((3, 2, 3), (2, 1, 2), (1, 1, 0), True)]}
SHAPES = {2: (2, 3, 7, 6), 3: (2, 2, 5, 4, 5)}  # channels first, batched


def window_attributes(kernel, stride, padding, ceil_mode, *, dilation=None,
                      channels_last=False) -> dict:
    k = len(kernel)
    return {"kernel_size": np.asarray(kernel, np.int64), "stride": np.asarray(stride, np.int64),
            "padding": np.asarray(padding, np.int64),
            "dilation": np.asarray(dilation or (1,) * k, np.int64),
            "ceil_mode": ceil_mode, "channels_last": channels_last}


def call(k, x, result_shape, index_dtype, **attributes):
    """A direct, jitted call of the k-D pool target."""
    f = jax.ffi.ffi_call(TARGET[k], (jax.ShapeDtypeStruct(result_shape, x.dtype),
                                     jax.ShapeDtypeStruct(result_shape, np.dtype(index_dtype))))
    return jax.jit(lambda x: f(x, **attributes))(x)


def pytorch(x, kernel, stride, padding, ceil_mode):
    """PyTorch's values and indices, channels first, batched or not (float32 compute: the
    values are exact in it, so the order and the winners are the same)."""
    values, indices = torch_pool(len(kernel), np.asarray(x, np.float32), kernel, stride,
                                 padding, 1, ceil_mode)
    return values.astype(x.dtype), indices


def pooled_shape(shape, kernel):
    """The result's shape of a pool with stride kernel, no padding (channels first)."""
    k = len(kernel)
    return (*shape[:-k], *(numpy_oracle.pool_output_size(n, w, w, 0, 1, False)
                           for n, w in zip(shape[-k:], kernel)))


def hard_values(rng, shape, dtype):
    """Few distinct values (many ties), NaNs (some windows with several), a -inf plane
    next to the padding."""
    x = rng.integers(-3, 4, shape).astype(np.float32)
    x.reshape(-1)[::7] = np.nan
    x.reshape(-1)[2::13] = np.nan
    x[..., 0, :] = -np.inf
    return x.astype(jnp.dtype(dtype))


def to_channels_last(a, k):
    return np.moveaxis(a, -k - 1, -1)


# --------------------------------------------------------------------------------------
# Values, indices and the dtypes aclnn sees
# --------------------------------------------------------------------------------------

@needs_torch
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("layout", ["first", "last"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [2, 3])
def test_values_and_indices_equal_pytorch(emulated, rng, k, dtype, layout, batched):
    x = hard_values(rng, SHAPES[k] if batched else SHAPES[k][1:], dtype)
    last = layout == "last"
    # The 3-D op takes INT32 indices only on Atlas A2/A3; the 2-D one both.
    for (kernel, stride, padding, ceil_mode), index_dtype in zip(WINDOWS[k],
                                                                 ["int32", "int64"]):
        index_dtype = "int32" if k == 3 else index_dtype
        want_v, want_i = pytorch(x, kernel, stride, padding, ceil_mode)
        if last:
            want_v, want_i = to_channels_last(want_v, k), to_channels_last(want_i, k)
        with enable_x64(index_dtype == "int64"):
            values, indices = call(k, to_channels_last(x, k) if last else x, want_v.shape,
                                   index_dtype, **window_attributes(
                                       kernel, stride, padding, ceil_mode, channels_last=last))
        assert_bits_equal(values, want_v)
        assert_bits_equal(indices, want_i.astype(index_dtype))
        assert emulated.last_dtype(RUN[k].encode()) == ACL[dtype]
        assert emulated.last_indices_dtype(RUN[k].encode()) == ACL[index_dtype]
    assert emulated.call_count(RUN[k].encode()) == 2


def test_workspace_stream_and_objects(emulated, rng):
    x = hard_values(rng, SHAPES[2], "float32")
    jax.block_until_ready(call(2, x, (2, 3, 3, 3), "int32",
                               **window_attributes((2, 2), (2, 2), (0, 0), False)))
    # The launch got exactly the workspace GetWorkspaceSize asked for (the emulator refuses
    # any other size), from aclrtMalloc, freed after the stream was synchronised.
    assert emulated.last_workspace_size() > 0
    assert emulated.last_stream(RUN[2].encode()) is None
    assert [emulated.call_count(f) for f in (b"aclrtMalloc", b"aclrtSynchronizeStream",
                                             b"aclrtFree")] == [1, 1, 1]


# --------------------------------------------------------------------------------------
# Refusals: the handler's, and CANN's reaching Python
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [2, 3])
def test_values_the_ops_do_not_take_are_refused_before_cann(emulated, k):
    x = np.zeros(SHAPES[k], np.int32)
    kernel = (2,) * k
    out = pooled_shape(x.shape, kernel)
    with pytest.raises(RUNTIME_ERRORS) as err:
        call(k, x, out, "int32", **window_attributes(kernel, kernel, (0,) * k, False))
    assert str(err.value) == (f"INVALID_ARGUMENT: {OP[k]}: {RUN[k]} takes float16, bfloat16 "
                              f"or float32 values, got int32")
    assert emulated.call_count(GWS[k].encode()) == 0


def test_padding_over_half_the_kernel_is_refused_with_the_cpus_message_before_cann(emulated):
    # PyTorch's rule, which every platform's handler checks (CheckPoolCall): the aclnn
    # target answers as the CPU target does, and CANN never sees the call.
    x = np.zeros((2, 3, 7, 6), np.float32)
    attributes = window_attributes((2, 2), (2, 2), (2, 0), False)
    with pytest.raises(RUNTIME_ERRORS) as err:
        call(2, x, (2, 3, 5, 3), "int32", **attributes)
    cpu = jax.ffi.ffi_call(cpu_backend.MAX_POOL_TARGET,
                           (jax.ShapeDtypeStruct((2, 3, 5, 3), np.float32),
                            jax.ShapeDtypeStruct((2, 3, 5, 3), np.int32)))
    with pytest.raises(RUNTIME_ERRORS) as cpu_err:
        jax.block_until_ready(jax.jit(lambda x: cpu(x, **attributes))(x))
    assert str(err.value) == str(cpu_err.value) == (
        "INVALID_ARGUMENT: max_pool2d_with_indices: padding must be non-negative and at most "
        "half of kernel_size (padding <= kernel_size // 2), got padding=(2, 0) and "
        "kernel_size=(2, 2)")
    assert emulated.call_count(GWS[2].encode()) == 0


# Geometries CANN refuses on Atlas A2/A3 and the handler passes on (other chips may take
# them): dilation 2, int64 3-D indices; with the result shape of PyTorch's formula.
CANN_REFUSES = [
    (2, (2, 3, 7, 6), ((2, 2), (1, 1), (0, 0), (2, 1)), (2, 3, 5, 5), "int32",
     "dilation only support 1"),
    (3, SHAPES[3], ((2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1)), (2, 2, 2, 2, 2), "int64",
     "INT64 (9) is not supported; supported: INT32"),
]


@pytest.mark.parametrize("case", CANN_REFUSES, ids=["dilation", "int64 3-D"])
def test_what_cann_refuses_reaches_python_with_its_message(emulated, case):
    k, shape, (kernel, stride, padding, dilation), out, index_dtype, cann_says = case
    x = np.zeros(shape, np.float32)
    with enable_x64(index_dtype == "int64"), pytest.raises(RUNTIME_ERRORS) as err:
        call(k, x, out, index_dtype,
             **window_attributes(kernel, stride, padding, False, dilation=dilation))
    message = str(err.value)
    assert message.startswith(f"INVALID_ARGUMENT: {OP[k]}: {GWS[k]} failed with status "
                              f"161002 ACLNN_ERR_PARAM_INVALID: "), message
    assert cann_says in message  # aclGetRecentErrMsg()


@pytest.mark.parametrize("function", [GWS[2], RUN[2], GWS[3], RUN[3]])
def test_a_failing_status_reaches_python(emulated, rng, function):
    emulated.fail_next(function.encode(), 561003, b"injected: no kernel package")
    k = 2 if "2d" in function else 3
    kernel = (2,) * k
    x = hard_values(rng, SHAPES[k], "float32")
    out = pooled_shape(x.shape, kernel)
    with pytest.raises(RUNTIME_ERRORS) as err:
        call(k, x, out, "int32", **window_attributes(kernel, kernel, (0,) * k, False))
    message = str(err.value)
    assert f"{function} failed with status 561003 ACLNN_ERR_INNER_FIND_KERNEL_ERROR" in message
    assert "injected: no kernel package" in message
    assert emulated.live_executors() == 0


# --------------------------------------------------------------------------------------
# The NPU lowering: aclnn where it gives PyTorch's result, the XLA ops elsewhere
# --------------------------------------------------------------------------------------

def bind_pool(x, kernel, stride, padding, dilation=None, ceil_mode=False,
              channels_last=False, index_dtype="int32"):
    """The pool primitive of rank len(kernel), bound directly."""
    k = len(kernel)
    return getattr(ju, f"max_pool{k}d_with_indices_p").bind(
        jnp.asarray(x), kernel_size=tuple(kernel), stride=tuple(stride),
        padding=tuple(padding), dilation=tuple(dilation or (1,) * k), ceil_mode=ceil_mode,
        channels_last=channels_last, index_dtype=np.dtype(index_dtype))


F32, BF16, F16 = "float32", "bfloat16", "float16"
# (name, x shape, dtype, (kernel, stride, padding, dilation, ceil_mode), channels_last,
# index dtype, the target the lowering calls or None for the XLA ops)
ROUTES = [
    ("2-D", (2, 3, 7, 6), F32, ((2, 2), (2, 2), (0, 0), (1, 1), False), False, "int32",
     npu.MAX_POOL2D_TARGET),
    ("2-D NHWC int64 ceil_mode", (2, 7, 6, 3), BF16, ((3, 2), (2, 1), (1, 1), (1, 1), True),
     True, "int64", npu.MAX_POOL2D_TARGET),
    ("2-D unbatched", (3, 7, 6), F16, ((3, 3), (2, 2), (1, 1), (1, 1), False), False, "int32",
     npu.MAX_POOL2D_TARGET),
    ("1-D", (2, 3, 9), F32, ((3,), (2,), (1,), (1,), True), False, "int32",
     npu.MAX_POOL2D_TARGET),
    ("1-D NWC int64", (2, 9, 3), F16, ((2,), (2,), (0,), (1,), False), True, "int64",
     npu.MAX_POOL2D_TARGET),
    ("3-D int64", (2, 2, 5, 4, 5), F16, ((2, 2, 2), (2, 2, 2), (0, 1, 1), (1, 1, 1), False),
     False, "int64", npu.MAX_POOL3D_TARGET),
    ("3-D NDHWC unbatched", (5, 4, 5, 2), F32,
     ((3, 2, 3), (2, 1, 2), (1, 1, 0), (1, 1, 1), True), True, "int32", npu.MAX_POOL3D_TARGET),
    ("dilation 2", (2, 3, 7, 6), F32, ((2, 2), (1, 1), (0, 0), (2, 1), False), False, "int32",
     None),
    ("int32 values", (2, 3, 7, 6), "int32", ((2, 2), (2, 2), (0, 0), (1, 1), False), False,
     "int32", None),
    ("float64 values", (2, 2, 5, 4, 5), "float64",
     ((2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1), False), False, "int32", None),
    ("empty batch", (0, 3, 7, 6), F32, ((2, 2), (2, 2), (0, 0), (1, 1), False), False,
     "int32", None),
]


def _route_input(rng, shape, dtype):
    if jnp.issubdtype(jnp.dtype(dtype), jnp.floating):
        return hard_values(rng, shape, dtype) if 0 not in shape else np.zeros(shape, dtype)
    return rng.integers(-3, 4, shape).astype(dtype)


@pytest.mark.parametrize("case", ROUTES, ids=[c[0] for c in ROUTES])
def test_the_lowering_calls_aclnn_where_it_gives_pytorchs_result(emulated, rng, case):
    _, shape, dtype, (kernel, stride, padding, dilation, ceil_mode), last, index_dtype, target \
        = case
    x = _route_input(rng, shape, dtype)

    def pool(x):
        return bind_pool(x, kernel, stride, padding, dilation, ceil_mode, last, index_dtype)

    with enable_x64(index_dtype == "int64" or dtype == "float64"):
        text = jax.jit(pool).lower(x).as_text()
        values, indices = jax.jit(pool)(x)
        data_format = {1: "NCW", 2: "NCHW", 3: "NCDHW"}[len(kernel)]
        if last:
            data_format = data_format[:2].replace("C", "") + data_format[2:] + "C"
        reference = getattr(ju.reference, f"max_pool{len(kernel)}d_with_indices")
        want_v, want_i = reference(x, kernel, stride, padding, dilation, ceil_mode,
                                   data_format=data_format, index_dtype=index_dtype)
    for t in (npu.MAX_POOL2D_TARGET, npu.MAX_POOL3D_TARGET):
        assert (t in text) == (t == target), (t, text[:3000])
    assert_bits_equal(values, want_v)
    assert_bits_equal(indices, want_i)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_both_ops_are_asked_for_int32_indices_and_widened(emulated, rng, k):
    # Issue 37 item 2: the 3-D op takes INT32 indices only on Atlas A2/A3, and so does the
    # 2-D op in CANN 8.0.RC2 (its doc): int64 indices are asked as int32 and widened (exact:
    # a plane holds at most INT_MAX positions there).
    x = hard_values(rng, {1: (2, 3, 9), 2: SHAPES[2], 3: SHAPES[3]}[k], "float32")
    with enable_x64(True):
        values, indices = jax.jit(lambda x: bind_pool(x, (2,) * k, (2,) * k, (0,) * k,
                                                      index_dtype="int64"))(x)
        want = getattr(ju.reference, f"max_pool{k}d_with_indices")(x, 2, index_dtype="int64")
    assert indices.dtype == np.int64
    assert_bits_equal(values, want[0])
    assert_bits_equal(indices, want[1])
    assert emulated.last_indices_dtype(RUN[max(k, 2)].encode()) == ACL["int32"]


@needs_torch
@pytest.mark.parametrize("k", [2, 3])
def test_the_public_pool_and_its_gradient_run_on_aclnn(emulated, rng, k):
    # What a user's code reaches: ju.max_pool{k}d_with_indices, jitted, and its gradient
    # (the aclnn unpool: 2x2 stride 2 windows cannot overlap), against PyTorch.
    x = hard_values(rng, SHAPES[k], "float32")
    x[np.isnan(x)] = 0.5  # a finite gradient to compare
    pool = getattr(ju, OP[k])
    text = jax.jit(lambda x: pool(x, 2)).lower(x).as_text()
    assert TARGET[k] in text and "jax_unpool_max_pool_v1" not in text
    values, indices = jax.jit(lambda x: pool(x, 2))(x)
    grad = jax.jit(jax.grad(lambda x: (pool(x, 2)[0] ** 2).sum()))(x)
    assert emulated.call_count(RUN[k].encode()) == 2  # the forward, and again in the grad
    t = torch.from_numpy(x).requires_grad_(True)
    t_pool = getattr(torch.nn.functional, f"max_pool{k}d")
    want_v, want_i = t_pool(t, 2, return_indices=True)
    (want_g,) = torch.autograd.grad((want_v ** 2).sum(), t)
    assert_bits_equal(values, want_v.detach().numpy())
    assert_bits_equal(indices, want_i.numpy().astype(np.int32))
    assert_bits_equal(grad, want_g.numpy())


def test_unregister_checks_its_platform_and_ignores_one_never_registered():
    with pytest.raises(TypeError, match=r"jax_unpool.npu.unregister: platform must be a "
                                        r"non-empty str, got 3"):
        npu.unregister(3)
    npu.unregister("never-registered")  # nothing to undo
    assert not npu.cpu_emulation_active()


def test_a_second_register_reroutes_programs_compiled_before(emulated, fake_cann_dir, rng):
    # Issue 31 item 3: register() again with another aclnn_pools clears jax's caches, so the
    # same jitted function, compiled and run before, lowers and runs the other way.
    x = hard_values(rng, SHAPES[2], "float32")
    want = numpy_oracle.max_pool(x, (2, 2), (2, 2), (0, 0), (1, 1), False)
    pool = jax.jit(lambda x: ju.max_pool2d_with_indices(x, 2))
    runs = RUN[2].encode()
    for aclnn_pools, calls in ((True, 1), (False, 1), (True, 2)):
        npu.register("cpu", fake_cann_dir, aclnn_pools=aclnn_pools)
        assert (npu.MAX_POOL2D_TARGET in pool.lower(x).as_text()) == aclnn_pools
        values, indices = pool(x)
        assert emulated.call_count(runs) == calls, aclnn_pools
        assert_bits_equal(values, want[0])
        assert_bits_equal(indices, want[1].astype(np.int32))


# The device mode, in a process of its own (a CANN loaded for a device never serves the host
# emulation): a stand-in for an Ascend plugin's platform -- one jax knows, so lowerings can
# be registered and programs lowered for it, with an FFI handler that takes the targets and
# devices assumed. The programs are lowered for it, never run.
DEVICE_MODE_REREGISTER = """
import sys
import jax, numpy as np
import jax_unpool as ju
from jax_unpool import _compat, npu

platform = "tpu"
npu._NOT_ASCEND = npu._NOT_ASCEND - {platform}
npu._require_devices = lambda platform: None
_compat.install_ffi_handler(platform.upper(), lambda *args: None)
x = np.zeros((1, 2, 4, 4), np.float32)
pool = jax.jit(lambda x: ju.max_pool2d_with_indices(x, 2))
for aclnn_pools in (True, False, True):
    npu.register(platform, sys.argv[1], aclnn_pools=aclnn_pools)
    text = pool.trace(x).lower(lowering_platforms=(platform,)).as_text()
    print(aclnn_pools, ju.npu.MAX_POOL2D_TARGET in text)
npu.unregister(platform)  # back to XLA's ops, for programs lowered before too
i = np.zeros((1, 2, 4, 4), np.int32)
unpool = jax.jit(lambda x, i: ju.max_unpool2d(x, i, 2))
for f, args in ((pool, (x,)), (unpool, (x, i))):
    text = f.trace(*args).lower(lowering_platforms=(platform,)).as_text()
    print("unregistered", "custom_call" in text)
"""


def test_a_second_register_in_device_mode_reroutes_programs_lowered_before(fake_cann_dir):
    # Issue 31 item 3 as found: before the registry cleared jax's caches on every
    # register(), only the host emulation cleared them, and a device platform's second
    # register(aclnn_pools=False) left the program lowered before on aclnn ("False True").
    # unregister() then routes every op back to XLA's ops, the pool lowered before too.
    proc = run_code(DEVICE_MODE_REREGISTER, str(fake_cann_dir))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.split() == ["True", "True", "False", "False", "True", "True",
                                   "unregistered", "False", "unregistered", "False"]


# --------------------------------------------------------------------------------------
# The chip: aclnn only where CANN documents the pool ops
# --------------------------------------------------------------------------------------

# SoC names as aclrtGetSocName returns them (hicann/runtime platform configs). The pool ops
# are documented for Atlas A2/A3 and Ascend 950 only (hicann/ops-nn
# pooling/max_pool3d_with_argmax_v2/docs), and their sources refuse every other chip.
WITHOUT_POOLS = ["Ascend910ProB", "Ascend910B", "Ascend310P3"]  # training 910, 310P
WITH_POOLS = ["Ascend910B1", "Ascend910_9391", "Ascend950PR_9599"]  # A2, A3, 950
PUBLIC_SHAPES = {1: (2, 3, 9), 2: SHAPES[2], 3: SHAPES[3]}


def _public_pool_against_the_oracle(k, x):
    """The public k-D pool, jitted, and its gradient, against numpy's loops (PyTorch's CPU
    loop, transcribed; 2-wide windows do not overlap: the gradient adds nothing up);
    returns the lowered program's text."""
    pool = getattr(ju, f"max_pool{k}d_with_indices")
    values, indices = jax.jit(lambda x: pool(x, 2))(x)
    grad = jax.jit(jax.grad(lambda x: (pool(x, 2)[0] ** 2).sum()))(x)
    want_v, want_i = numpy_oracle.max_pool(x, (2,) * k, (2,) * k, (0,) * k, (1,) * k, False)
    want_g = numpy_oracle.scatter_add_nd(2 * want_v, want_i, x.shape[-k:])
    assert_bits_equal(values, want_v)
    assert_bits_equal(indices, want_i.astype(np.int32))
    assert_bits_equal(grad, want_g)
    return jax.jit(lambda x: pool(x, 2)).lower(x).as_text()


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("soc", WITHOUT_POOLS)
def test_pools_keep_xla_ops_on_chips_without_the_aclnn_pools(fake, fake_cann_dir, rng, soc,
                                                            k):
    # On a 910 the 2-D op says "support for Ascend910 is not implemented" and the 3-D op's
    # CheckPlatform refuses: the routing must not reach them there (issue 31 item 1).
    x = hard_values(rng, PUBLIC_SHAPES[k], "float32")
    x[np.isnan(x)] = 0.5  # a finite gradient to compare
    calls = [fake.call_count(f.encode()) for f in (*GWS.values(), *RUN.values())]
    with fake.soc(soc), npu.cpu_emulation(fake_cann_dir):
        text = _public_pool_against_the_oracle(k, x)
    assert "aclnn" not in text and "custom_call" not in text, text[:3000]
    assert [fake.call_count(f.encode()) for f in (*GWS.values(), *RUN.values())] == calls


@pytest.mark.parametrize("soc", WITH_POOLS)
def test_pools_go_to_aclnn_on_chips_with_them(fake, fake_cann_dir, rng, soc):
    for k in (1, 2, 3):
        x = hard_values(rng, PUBLIC_SHAPES[k], "float32")
        x[np.isnan(x)] = 0.5
        runs = fake.call_count(RUN[max(k, 2)].encode())
        with fake.soc(soc), npu.cpu_emulation(fake_cann_dir):
            text = _public_pool_against_the_oracle(k, x)
        assert TARGET[max(k, 2)] in text, (soc, k)
        assert fake.call_count(RUN[max(k, 2)].encode()) == runs + 2  # forward, and in grad


# --------------------------------------------------------------------------------------
# What the installed CANN takes: asked of its GetWorkspaceSize at register()
# --------------------------------------------------------------------------------------

def test_register_asks_the_pool_ops_which_dtypes_they_take(fake, fake_cann_dir):
    # Three probes per op (float16, bfloat16, float32), every object and executor released.
    live = fake.baseline()
    with npu.cpu_emulation(fake_cann_dir):
        assert [fake.call_count(GWS[k].encode()) for k in (2, 3)] == [3, 3]
        assert fake.live_objects() == live and fake.bad_destroys() == 0
        assert [fake.call_count(RUN[k].encode()) for k in (2, 3)] == [0, 0]
        assert sorted(ju._jax_unpool.cann_pool_dtypes(2)) == ["bfloat16", "float16", "float32"]


# CANN 8.0.RC2's aclnnMaxPool2dWithIndices takes FLOAT values and INT32 indices only on
# Atlas A2 (hiascend.com, canncommercial/80RC22, aclnnMaxPool2dWithIndices: "数据类型仅支持
# FLOAT"); newer versions take FLOAT16 and BF16 too (hicann/ops-nn).
LEGACY_ROUTES = [(1, F16, None), (1, F32, npu.MAX_POOL2D_TARGET), (2, F16, None),
                 (2, BF16, None), (2, F32, npu.MAX_POOL2D_TARGET),
                 (3, F16, npu.MAX_POOL3D_TARGET), (3, BF16, npu.MAX_POOL3D_TARGET)]


@pytest.mark.parametrize("k,dtype,target", LEGACY_ROUTES)
def test_a_cann_whose_2d_pool_takes_float32_only_keeps_xla_ops_for_the_rest(fake,
                                                                           fake_cann_dir,
                                                                           rng, k, dtype,
                                                                           target):
    # Issue 37 item 2: such a CANN refuses float16/bfloat16 with 161002 at run time; the
    # routing asks it first, and keeps XLA's ops for what it refuses.
    x = hard_values(rng, {1: (2, 3, 9), 2: SHAPES[2], 3: SHAPES[3]}[k], dtype)
    pool = jax.jit(lambda x: bind_pool(x, (2,) * k, (2,) * k, (0,) * k, index_dtype="int64"))
    fake.set_pool2d_float_only(1)
    try:
        with npu.cpu_emulation(fake_cann_dir), enable_x64(True):
            text = pool.lower(x).as_text()
            values, indices = pool(x)
            want = getattr(ju.reference, f"max_pool{k}d_with_indices")(x, 2,
                                                                       index_dtype="int64")
    finally:
        fake.reset()
    for t in TARGET.values():
        assert (t in text) == (t == target), (t, text[:3000])
    assert_bits_equal(values, want[0])
    assert_bits_equal(indices, want[1])


# --------------------------------------------------------------------------------------
# A CANN without the pool ops
# --------------------------------------------------------------------------------------

WITHOUT_POOLS = """
import sys
import jax, numpy as np
import jax_unpool as ju
from jax_unpool import _jax_unpool
print(ju.npu.register("cpu", sys.argv[1])["opapi"])
print(_jax_unpool.cann_pool_ranks())
for k, target in ((2, ju.npu.MAX_POOL2D_TARGET), (3, ju.npu.MAX_POOL3D_TARGET)):
    ones = np.ones(k, np.int64)
    f = jax.ffi.ffi_call(target, (jax.ShapeDtypeStruct((1, 1) + (2,) * k, np.float32),
                                  jax.ShapeDtypeStruct((1, 1) + (2,) * k, np.int32)))
    try:
        jax.jit(lambda x: f(x, kernel_size=ones, stride=ones, padding=0 * ones, dilation=ones,
                            ceil_mode=False, channels_last=False))(
            np.zeros((1, 1) + (2,) * k, np.float32))
    except Exception as err:
        print(err)
# The pools' NPU lowering (installed by register) keeps the XLA ops, with their answer.
x = np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32)
pool = jax.jit(lambda x: ju.max_pool2d_with_indices(x, 2))
text = pool.lower(x).as_text()
assert "aclnn" not in text and "custom_call" not in text, text
values, indices = pool(x)
want = ju.reference.max_pool2d_with_indices(x, 2)
assert np.array_equal(values, want[0]) and np.array_equal(indices, want[1])
print("XLA ops")
"""


def test_a_cann_without_the_pool_ops_loads_says_what_is_missing_and_keeps_xla_ops(tmp_path):
    opapi, lines = run_without_ops(tmp_path, "nopool", WITHOUT_POOLS)
    assert lines == [opapi, "[]", missing_op(OP[2], opapi, GWS[2], RUN[2]),
                     missing_op(OP[3], opapi, GWS[3], RUN[3]), "XLA ops"]


def test_the_native_cpu_pool_is_back_when_the_emulation_ends(fake_cann_dir):
    x = np.zeros(SHAPES[2], np.float32)

    def pool(x):
        return ju.max_pool2d_with_indices(x, 2)

    with npu.cpu_emulation(fake_cann_dir):
        text = jax.jit(pool).lower(x).as_text()
        assert npu.MAX_POOL2D_TARGET in text and "jax_unpool_max_pool_v1" not in text
    text = jax.jit(pool).lower(x).as_text()
    assert "jax_unpool_max_pool_v1" in text and npu.MAX_POOL2D_TARGET not in text
