"""Self-check of the emulated CANN runtime, through ctypes (no pytest needed).

Run: ``python tests/fake_cann/check_fake_cann.py [LIB_DIR]`` (without LIB_DIR it builds
into a temporary directory).
Each ``check_*`` function takes a ``FakeCann`` and raises AssertionError on failure;
``ALL_CHECKS`` lists them, so a pytest file can parametrize over it::

    @pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
    def test_fake_cann(fake_cann, check):
        check(fake_cann)
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import pathlib
import sys
import tempfile
import threading
import traceback
from ctypes import POINTER, c_char_p, c_int32, c_int64, c_size_t, c_uint64, c_void_p

import numpy as np


def _load_build():
    # By path: works as a script, as part of a package, and whatever else is named "build".
    path = pathlib.Path(__file__).resolve().parent / "build.py"
    spec = importlib.util.spec_from_file_location("fake_cann_build", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_BUILD = _load_build()
build, LAYOUTS = _BUILD.build, _BUILD.LAYOUTS
FWD2D, BWD2D, FWD3D, BWD3D = _BUILD.FWD2D, _BUILD.BWD2D, _BUILD.FWD3D, _BUILD.BWD3D
POOL2D, POOL3D, MATH = _BUILD.POOL2D, _BUILD.POOL3D, _BUILD.MATH

FLOAT, FLOAT16, INT8, INT32, UINT8, INT16, INT64, DOUBLE, BOOL, BF16 = (
    0,
    1,
    2,
    3,
    4,
    6,
    9,
    11,
    12,
    27,
)
NCHW, ND = 0, 2
OK, NULLPTR, INVALID, RUNTIME, INNER_NULLPTR = 0, 161001, 161002, 361001, 561103
FWD_GWS = "aclnnMaxUnpool2dGetWorkspaceSize"
FWD_RUN = "aclnnMaxUnpool2d"
BWD_GWS = "aclnnMaxUnpool2dBackwardGetWorkspaceSize"
BWD_RUN = "aclnnMaxUnpool2dBackward"
FWD3D_GWS = "aclnnMaxUnpool3dGetWorkspaceSize"
FWD3D_RUN = "aclnnMaxUnpool3d"
BWD3D_GWS = "aclnnMaxUnpool3dBackwardGetWorkspaceSize"
BWD3D_RUN = "aclnnMaxUnpool3dBackward"
POOL2D_GWS = "aclnnMaxPool2dWithIndicesGetWorkspaceSize"
POOL2D_RUN = "aclnnMaxPool2dWithIndices"
POOL3D_GWS = "aclnnMaxPool3dWithArgmaxGetWorkspaceSize"
POOL3D_RUN = "aclnnMaxPool3dWithArgmax"
CLAMP_GWS, CLAMP_RUN = "aclnnClampGetWorkspaceSize", "aclnnClamp"
MAX_GWS, MAX_RUN = "aclnnMaxGetWorkspaceSize", "aclnnMax"
MIN_GWS, MIN_RUN = "aclnnMinGetWorkspaceSize", "aclnnMin"
ACL_DTYPE = {
    np.dtype(np.float32): FLOAT,
    np.dtype(np.float16): FLOAT16,
    np.dtype(np.int8): INT8,
    np.dtype(np.int32): INT32,
    np.dtype(np.uint8): UINT8,
    np.dtype(np.int16): INT16,
    np.dtype(np.int64): INT64,
    np.dtype(np.float64): DOUBLE,
    np.dtype(np.bool_): BOOL,
}


def _i64s(values):
    values = list(values)
    return (c_int64 * max(len(values), 1))(*values)


def _sig(lib, name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)
    return fn


class FakeCann:
    """The three libraries of one build directory, with typed entry points."""

    def __init__(self, lib_dir: pathlib.Path, opapi_name: str | None = None):
        """`opapi_name`: the op library, by default libopapi.so, else libopapi_nn.so."""
        self.lib_dir = pathlib.Path(lib_dir)
        if opapi_name is None:
            opapi_name = next((n for n in ("libopapi.so", "libopapi_nn.so")
                               if (self.lib_dir / n).is_file()), "libopapi.so")
        self.nnopbase = ctypes.CDLL(str(self.lib_dir / "libnnopbase.so"))
        self.ascendcl = ctypes.CDLL(str(self.lib_dir / "libascendcl.so"))
        self.opapi = ctypes.CDLL(str(self.lib_dir / opapi_name))
        n, a, o = self.nnopbase, self.ascendcl, self.opapi
        P = POINTER(c_int64)
        self.aclCreateTensor = _sig(
            n,
            "aclCreateTensor",
            c_void_p,
            P,
            c_uint64,
            c_int32,
            P,
            c_int64,
            c_int32,
            P,
            c_uint64,
            c_void_p,
        )
        self.aclDestroyTensor = _sig(n, "aclDestroyTensor", c_int32, c_void_p)
        self.aclCreateIntArray = _sig(n, "aclCreateIntArray", c_void_p, P, c_uint64)
        self.aclDestroyIntArray = _sig(n, "aclDestroyIntArray", c_int32, c_void_p)
        self.aclCreateScalar = _sig(n, "aclCreateScalar", c_void_p, c_void_p, c_int32)
        self.aclDestroyScalar = _sig(n, "aclDestroyScalar", c_int32, c_void_p)
        # Absent from a -DFAKECANN_NO_DESTROY_EXECUTOR build, as from older CANN (and the
        # first from a -DFAKECANN_NO_REPEATABLE_EXECUTOR one).
        self.aclSetAclOpExecutorRepeatable = (
            _sig(n, "aclSetAclOpExecutorRepeatable", c_int32, c_void_p)
            if hasattr(n, "aclSetAclOpExecutorRepeatable") else None)
        self.aclDestroyAclOpExecutor = (
            _sig(n, "aclDestroyAclOpExecutor", c_int32, c_void_p)
            if hasattr(n, "aclDestroyAclOpExecutor") else None)
        self.aclGetRecentErrMsg = _sig(a, "aclGetRecentErrMsg", c_char_p)
        self.aclrtMalloc = _sig(a, "aclrtMalloc", c_int32, POINTER(c_void_p), c_size_t, c_int32)
        self.aclrtFree = _sig(a, "aclrtFree", c_int32, c_void_p)
        self.aclrtSynchronizeStream = _sig(a, "aclrtSynchronizeStream", c_int32, c_void_p)
        self.aclrtGetCurrentContext = _sig(a, "aclrtGetCurrentContext", c_int32,
                                           POINTER(c_void_p))
        self.aclrtGetDevice = _sig(a, "aclrtGetDevice", c_int32, POINTER(c_int32))
        self.aclrtMemcpy = _sig(a, "aclrtMemcpy", c_int32, c_void_p, c_size_t, c_void_p,
                                c_size_t, c_int32)
        PU, PE = POINTER(c_uint64), POINTER(c_void_p)
        self.fwd_gws = _sig(o, FWD_GWS, c_int32, c_void_p, c_void_p, c_void_p, c_void_p, PU, PE)
        self.fwd_run = _sig(o, FWD_RUN, c_int32, c_void_p, c_uint64, c_void_p, c_void_p)
        self.bwd_gws = _sig(
            o, BWD_GWS, c_int32, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, PU, PE
        )
        self.bwd_run = _sig(o, BWD_RUN, c_int32, c_void_p, c_uint64, c_void_p, c_void_p)
        # 3-D: (self, indices, outputSize, stride, padding, outRef, ...) and
        # (gradOutput, self, indices, outputSize, stride, padding, out, ...)
        self.fwd3d_gws = _sig(o, FWD3D_GWS, c_int32, *[c_void_p] * 6, PU, PE)
        self.fwd3d_run = _sig(o, FWD3D_RUN, c_int32, c_void_p, c_uint64, c_void_p, c_void_p)
        self.bwd3d_gws = _sig(o, BWD3D_GWS, c_int32, *[c_void_p] * 7, PU, PE)
        self.bwd3d_run = _sig(o, BWD3D_RUN, c_int32, c_void_p, c_uint64, c_void_p, c_void_p)
        # Pools: (self, kernelSize, stride, padding, dilation, ceilMode, out, indices, ...)
        pool = [*[c_void_p] * 5, ctypes.c_bool, c_void_p, c_void_p, PU, PE]
        self.pool_gws = {2: _sig(o, POOL2D_GWS, c_int32, *pool),
                         3: _sig(o, POOL3D_GWS, c_int32, *pool)}
        self.pool_run = {k: _sig(o, name, c_int32, c_void_p, c_uint64, c_void_p, c_void_p)
                         for k, name in ((2, POOL2D_RUN), (3, POOL3D_RUN))}
        # ops-math: Clamp (self, clipValueMin, clipValueMax, out, ...), Max/Min (self, out,
        # ...); absent from the "nomath" layout's op library.
        if hasattr(o, CLAMP_GWS):
            self.clamp_gws = _sig(o, CLAMP_GWS, c_int32, *[c_void_p] * 4, PU, PE)
            self.reduce_gws = {name: _sig(o, gws, c_int32, c_void_p, c_void_p, PU, PE)
                               for name, gws in (("max", MAX_GWS), ("min", MIN_GWS))}
            self.math_run = {name: _sig(o, run, c_int32, c_void_p, c_uint64, c_void_p,
                                        c_void_p)
                             for name, run in (("clamp", CLAMP_RUN), ("max", MAX_RUN),
                                               ("min", MIN_RUN))}
        for name in (
            "live_objects",
            "live_tensors",
            "live_int_arrays",
            "live_executors",
            "live_scalars",
            "live_allocations",
            "bad_destroys",
            "bad_frees",
        ):
            setattr(self, name, _sig(n, "fakecann_" + name, c_int64))
        self.fail_next = _sig(n, "fakecann_fail_next", None, c_char_p, c_int32, c_char_p)
        self.reset = _sig(n, "fakecann_reset", None)
        self.call_count = _sig(n, "fakecann_call_count", c_int64, c_char_p)
        self.last_workspace_size = _sig(n, "fakecann_last_workspace_size", c_uint64)
        self.last_dtype = _sig(n, "fakecann_last_dtype", c_int32, c_char_p)
        self.last_indices_dtype = _sig(n, "fakecann_last_indices_dtype", c_int32, c_char_p)
        self.last_stream = _sig(n, "fakecann_last_stream", c_void_p, c_char_p)
        self.last_workspace = _sig(n, "fakecann_last_workspace", c_void_p, c_char_p)
        self.last_error_message = _sig(n, "fakecann_last_error_message", c_char_p)
        self._last_indices = _sig(n, "fakecann_last_indices", c_int64, c_char_p, P, c_int64)
        self.last_tensor_data = _sig(n, "fakecann_last_tensor_data", c_void_p, c_char_p,
                                     c_int64)
        self.last_memcpy_kind = _sig(n, "fakecann_last_memcpy_kind", c_int32)
        self.set_int64_indices_only = _sig(n, "fakecann_set_int64_indices_only", None, c_int32)
        self.set_no_context = _sig(n, "fakecann_set_no_context", None, c_int32)
        self.aclrtGetSocName = _sig(a, "aclrtGetSocName", c_char_p)
        self.set_soc_name = _sig(n, "fakecann_set_soc_name", None, c_char_p)
        self.set_device = _sig(n, "fakecann_set_device", None, c_int32)
        self.set_pool2d_float_only = _sig(n, "fakecann_set_pool2d_float_only", None, c_int32)
        self.set_clamp_int32_only = _sig(n, "fakecann_set_clamp_int32_only", None, c_int32)
        self._keep = []  # numpy buffers referenced by tensors

    # -- object helpers ---------------------------------------------------------------
    def tensor(self, arr, dtype=None, fmt=ND, base=None, data=True):
        """aclTensor over numpy array ``arr`` (a view into ``base`` when given)."""
        base = arr if base is None else base
        item = base.itemsize
        if base is arr:
            assert arr.flags.c_contiguous
            offset, storage = 0, list(arr.shape)
        else:
            offset = (arr.__array_interface__["data"][0] - base.ctypes.data) // item
            storage = [base.size]
        strides = [s // item for s in arr.strides]
        self._keep.append(base)
        return self.aclCreateTensor(
            _i64s(arr.shape),
            arr.ndim,
            ACL_DTYPE[base.dtype] if dtype is None else dtype,
            _i64s(strides),
            offset,
            fmt,
            _i64s(storage),
            len(storage),
            base.ctypes.data if data else None,
        )

    def int_array(self, values):
        return self.aclCreateIntArray(_i64s(values), len(values))

    def scalar(self, value, dtype=INT64):
        """aclScalar of `value` as aclDataType `dtype` (INT64, INT32 or DOUBLE)."""
        ctype = {INT64: ctypes.c_int64, INT32: ctypes.c_int32, DOUBLE: ctypes.c_double}[dtype]
        return Scalar(self.aclCreateScalar(ctypes.byref(ctype(value)), dtype))

    def release(self, executor):
        """Releases an executor that will not run, as CANN's docs allow: made repeatable,
        then destroyed."""
        assert self.aclSetAclOpExecutorRepeatable(executor) == OK, self.err()
        assert self.aclDestroyAclOpExecutor(executor) == OK, self.err()

    def destroy(self, *objs):
        for o in objs:
            if o is not None:
                rc = (
                    self.aclDestroyIntArray
                    if getattr(o, "is_array", False)
                    else self.aclDestroyScalar
                    if getattr(o, "is_scalar", False)
                    else self.aclDestroyTensor
                )(o)
                assert rc == OK, rc

    def last_indices(self, run: str | bytes) -> list[int] | None:
        """The indices the last execution of the unpool entry point `run` received, in
        (n, c, i) order; None if it never ran since the last reset."""
        run = run.encode() if isinstance(run, str) else run
        count = self._last_indices(run, None, 0)
        if count < 0:
            return None
        values = (c_int64 * max(count, 1))()
        self._last_indices(run, values, count)
        return list(values[:count])

    def err(self):
        m = self.aclGetRecentErrMsg()
        return m.decode() if m else None

    def baseline(self):
        self.reset()
        self.err()  # drop stale messages of this thread
        return self.live_objects()

    @contextlib.contextmanager
    def soc(self, name: str | None):
        """The emulated chip is SoC `name` (None: aclrtGetSocName names none) inside the
        block, the one before it after."""
        before = self.aclrtGetSocName()
        self.set_soc_name(None if name is None else name.encode())
        try:
            yield
        finally:
            self.set_soc_name(before)


class IntArray(int):
    is_array = True


class Scalar(int):
    is_scalar = True


def _int_array(fc, values):
    return IntArray(fc.int_array(values))


def forward_ref(x, idx, osz):
    lead = x.shape[:-2]
    out = np.zeros(lead + tuple(osz), x.dtype).reshape(-1, osz[0] * osz[1])
    xf, jf = x.reshape(-1, x.shape[-2] * x.shape[-1]), idx.reshape(-1, x.shape[-2] * x.shape[-1])
    for p in range(xf.shape[0]):
        for i in range(xf.shape[1]):
            out[p, jf[p, i]] = xf[p, i]
    return out.reshape(lead + tuple(osz))


def backward_ref(g, idx):
    gf = g.reshape(-1, g.shape[-2] * g.shape[-1])
    jf = idx.reshape(gf.shape[0], -1)
    return np.take_along_axis(gf, jf.astype(np.int64), axis=1).reshape(idx.shape)


def _cycle(fc, gws, run, tensors, stream=None):
    """An op's two phases: ``gws(workspace_size_ref, executor_ref)``, then ``run`` on a
    workspace of the size asked for (nullptr for 0); destroys `tensors` either way. Returns
    the status of the first phase that fails, else the run's."""
    ws, ex = c_uint64(0), c_void_p()
    try:
        rc = gws(ctypes.byref(ws), ctypes.byref(ex))
        if rc != OK:
            return rc
        buf = np.zeros(max(ws.value, 1), np.uint8)
        return run(buf.ctypes.data if ws.value else None, ws.value, ex, stream)
    finally:
        fc.destroy(*tensors)


def run_fwd(fc, x, idx, osz, out=None, *, x_t=None, out_t=None, out_base=None, stream=None):
    """Full forward cycle; returns (status at first failure, out array)."""
    if out is None:
        out = np.full(x.shape[:-2] + tuple(osz), 77, x.dtype)
    ts = [x_t or fc.tensor(x), fc.tensor(idx), None]
    ts[2] = out_t or fc.tensor(out, base=out_base)
    arr = _int_array(fc, osz)
    rc = _cycle(fc, lambda ws, ex: fc.fwd_gws(ts[0], ts[1], arr, ts[2], ws, ex), fc.fwd_run,
                [*ts, arr], stream)
    return rc, out


def run_bwd(fc, g, x, idx, osz, out=None, *, stream=None):
    if out is None:
        out = np.full(x.shape, 77, g.dtype)
    ts = [fc.tensor(g), fc.tensor(x), fc.tensor(idx), fc.tensor(out)]
    arr = _int_array(fc, osz)
    rc = _cycle(fc, lambda ws, ex: fc.bwd_gws(ts[0], ts[1], ts[2], arr, ts[3], ws, ex),
                fc.bwd_run, [*ts, arr], stream)
    return rc, out


SEED_GRAD = np.arange(9, dtype=np.float32).reshape(1, 3, 3, 1)
SEED_SELF = np.ones((1, 3, 2, 2), np.float32)
SEED_IDX = np.array([0, 1, 2, 1, 2, 0, 1, 1, 1, 0, 0, 0], np.int32).reshape(1, 3, 2, 2)
SEED_OUT = [0, 1, 2, 1, 5, 3, 4, 4, 7, 6, 6, 6]


# ---- checks -----------------------------------------------------------------------------


def check_seed_example(fc):
    live0 = fc.baseline()
    rc, out = run_bwd(fc, SEED_GRAD, SEED_SELF, SEED_IDX, (3, 1))
    assert rc == OK, (rc, fc.err())
    assert out.ravel().tolist() == SEED_OUT, out.ravel()
    assert fc.call_count(BWD_GWS.encode()) == 1 and fc.call_count(BWD_RUN.encode()) == 1
    assert fc.last_dtype(BWD_GWS.encode()) == FLOAT and fc.last_dtype(BWD_RUN.encode()) == FLOAT
    assert fc.last_indices_dtype(BWD_GWS.encode()) == INT32
    assert fc.last_workspace_size() > 0
    assert fc.live_objects() == live0 and fc.bad_destroys() == 0
    assert fc.err() is None


# (self shape, outputSize, indices dtype, dtype) of the 2-D ops' value checks.
FORWARD_CASES = [
    ((2, 3, 2, 2), (4, 4), np.int32, np.float32),
    ((3, 2, 3), (3, 4), np.int64, np.float64),
    ((1, 2, 2, 3), (2, 3), np.int64, np.int8),  # oH*oW == H*W
    ((2, 1, 3, 3), (5, 5), np.int32, np.uint8),
    ((1, 1, 2, 2), (3, 3), np.int32, np.bool_),  # bool presented as UINT8 (see below)
]
BACKWARD_CASES = [
    ((2, 3, 2, 2), (4, 4), np.int64, np.float16),
    ((3, 2, 3), (3, 4), np.int32, np.int64),
    ((2, 2, 3, 3), (2, 2), np.int32, np.bool_),  # oH*oW < H*W is fine for the backward
    ((1, 1, 2, 2), (1, 1), np.int32, np.int16),
]


def check_forward_values(fc):
    live0 = fc.baseline()
    rng = np.random.default_rng(0)
    for shape, osz, idt, dt in FORWARD_CASES:
        x = (rng.standard_normal(shape) * 50).astype(dt)
        idx = rng.integers(0, osz[0] * osz[1], size=shape).astype(idt)
        if dt == np.bool_:
            # BOOL is not a forward dtype: the caller moves its bytes as UINT8, and out must
            # say UINT8 too.
            rc, _ = run_fwd(fc, x, idx, osz, x_t=fc.tensor(x, dtype=UINT8))
            assert rc == INVALID and "out dtype" in fc.err()
            xt = fc.tensor(x, dtype=UINT8)
            out = np.full((1, 1) + osz, True)
            ot = fc.tensor(out, dtype=UINT8)
            rc, out = run_fwd(fc, x, idx, osz, out, x_t=xt, out_t=ot)
            assert fc.last_dtype(FWD_GWS.encode()) == UINT8
        else:
            rc, out = run_fwd(fc, x, idx, osz)
        assert rc == OK, (shape, rc, fc.err())
        np.testing.assert_array_equal(out, forward_ref(x, idx, osz))
    # Duplicates: the last flat position wins, unwritten positions are zero.
    x = np.array([[[[1, 2], [3, 4]]]], np.float32)
    idx = np.array([[[[5, 0], [5, 5]]]], np.int32)
    rc, out = run_fwd(fc, x, idx, (3, 3))
    assert rc == OK and out.ravel().tolist() == [2, 0, 0, 0, 0, 4, 0, 0, 0], out
    assert fc.live_objects() == live0 and fc.bad_destroys() == 0


def check_backward_values(fc):
    live0 = fc.baseline()
    rng = np.random.default_rng(1)
    for shape, osz, idt, dt in BACKWARD_CASES:
        g = (rng.standard_normal(shape[:-2] + osz) * 50).astype(dt)
        x = np.zeros(shape, dt)
        idx = rng.integers(0, osz[0] * osz[1], size=shape).astype(idt)
        rc, out = run_bwd(fc, g, x, idx, osz)
        assert rc == OK, (shape, rc, fc.err())
        np.testing.assert_array_equal(out, backward_ref(g, idx))
    assert fc.live_objects() == live0


def check_bits_survive(fc):
    """NaN payloads, -0.0 and bf16 bit patterns (presented as INT16) move unchanged."""
    fc.baseline()
    bits = np.array([0x7FC00001, 0xFFF00F0F, 0x80000000, 0x7F800000], np.uint32)
    x = bits.view(np.float32).reshape(1, 1, 2, 2)
    idx = np.array([3, 2, 1, 0], np.int32).reshape(1, 1, 2, 2)
    rc, out = run_fwd(fc, x, idx, (2, 2))
    assert rc == OK
    assert out.view(np.uint32).ravel().tolist() == bits[::-1].tolist()
    bf16 = np.array([0x7FC1, 0xFF81, 0x8000, 0x3F80], np.uint16).view(np.int16).reshape(1, 1, 2, 2)
    rc, out = run_bwd(fc, bf16, np.zeros_like(bf16), idx, (2, 2))
    assert rc == OK and out.view(np.uint16).ravel().tolist() == [0x3F80, 0x8000, 0xFF81, 0x7FC1]
    assert fc.last_dtype(BWD_GWS.encode()) == INT16


def check_strided_views(fc):
    """Non-contiguous inputs and outputs with offsets: strides and offset are honoured."""
    live0 = fc.baseline()
    rng = np.random.default_rng(2)
    xbase = rng.standard_normal((2, 5, 3, 6)).astype(np.float32)
    x = xbase[:, 1:4, :, ::2].transpose(1, 0, 2, 3)  # shape (3, 2, 3, 3), offset 18
    idx = rng.integers(0, 20, size=x.shape).astype(np.int64)
    obase = np.full((3, 2, 4, 11), -7, np.float32)
    out = obase[:, :, :, 1:11:2]  # (3, 2, 4, 5), offset 1
    xt = fc.tensor(x, base=xbase)
    ot = fc.tensor(out, base=obase)
    rc, _ = run_fwd(fc, x, idx, (4, 5), x_t=xt, out_t=ot)  # destroys xt, ot
    assert rc == OK, fc.err()
    np.testing.assert_array_equal(out, forward_ref(np.ascontiguousarray(x), idx, (4, 5)))
    mask = np.ones(obase.shape, bool)
    mask[:, :, :, 1:11:2] = False
    assert (obase[mask] == -7).all(), "wrote outside the out view"

    # Backward with a strided gradOutput and a strided out.
    gbase = rng.standard_normal((4, 5, 6)).astype(np.float64)
    g = gbase[1:4, ::2, 1:5]  # (3, 3, 4)
    idx3 = rng.integers(0, 12, size=(3, 2, 2)).astype(np.int32)
    x3 = np.zeros((3, 2, 2), np.float64)
    obase = np.full((3, 2, 4), -1.0)
    out = obase[:, :, ::2]
    ts = [fc.tensor(g, base=gbase), fc.tensor(x3), fc.tensor(idx3), fc.tensor(out, base=obase)]
    arr = _int_array(fc, (3, 4))
    ws, ex = c_uint64(), c_void_p()
    assert fc.bwd_gws(*ts[:3], arr, ts[3], ctypes.byref(ws), ctypes.byref(ex)) == OK, fc.err()
    buf = np.zeros(ws.value, np.uint8)
    fc.destroy(*ts, arr)  # allowed right after GetWorkspaceSize: the executor has copies
    assert fc.bwd_run(buf.ctypes.data, ws.value, ex, None) == OK, fc.err()
    np.testing.assert_array_equal(out, backward_ref(np.ascontiguousarray(g), idx3))
    assert (obase[:, :, 1::2] == -1).all()
    assert fc.live_objects() == live0


def _nullptr_messages(fc, gws, args):
    """Calls gws once per argument, that one None: each call must fail with
    ACLNN_ERR_PARAM_NULLPTR. Returns the error messages, in argument order."""
    messages = []
    for i in range(len(args)):
        assert gws(*args[:i], None, *args[i + 1:]) == NULLPTR, i
        messages.append(fc.err())
    return messages


def check_nullptr_161001(fc):
    live0 = fc.baseline()
    x, idx = SEED_SELF, SEED_IDX
    ws, ex = c_uint64(), c_void_p()
    outs = [ctypes.byref(ws), ctypes.byref(ex)]
    fwd = [fc.tensor(x), fc.tensor(idx), _int_array(fc, (3, 3)),
           fc.tensor(np.zeros((1, 3, 3, 3), np.float32))]
    for msg in _nullptr_messages(fc, fc.fwd_gws, fwd + outs):
        assert msg and "nullptr" in msg and "161001" in msg, msg
    bwd = [fc.tensor(SEED_GRAD), fc.tensor(x), fc.tensor(idx), _int_array(fc, (3, 1)),
           fc.tensor(np.zeros((1, 3, 2, 2), np.float32))]
    names = ["gradOutput", "self", "indices", "outputSize", "out", "workspaceSize", "executor"]
    for name, msg in zip(names, _nullptr_messages(fc, fc.bwd_gws, bwd + outs), strict=True):
        assert name + " is nullptr" in msg
    assert fc.live_executors() == 0
    assert fc.fwd_run(None, 0, None, None) == NULLPTR and "executor is nullptr" in fc.err()
    assert fc.bwd_run(None, 0, None, None) == NULLPTR
    fc.destroy(*fwd, *bwd)
    assert fc.live_objects() == live0


def _fwd_invalid(fc, x, idx, osz, out, *, x_dtype=None, idx_dtype=None, out_dtype=None, fmt=ND):
    ts = [
        fc.tensor(x, dtype=x_dtype, fmt=fmt),
        fc.tensor(idx, dtype=idx_dtype),
        fc.tensor(out, dtype=out_dtype),
    ]
    arr = _int_array(fc, osz)
    ws, ex = c_uint64(12345), c_void_p()
    rc = fc.fwd_gws(ts[0], ts[1], arr, ts[2], ctypes.byref(ws), ctypes.byref(ex))
    msg = fc.err()
    if rc == OK:
        fc.release(ex)
    fc.destroy(*ts, arr)
    return rc, msg, ws.value, ex.value


def _bwd_invalid(
    fc, g, x, idx, osz, out, *, g_dtype=None, x_dtype=None, idx_dtype=None, out_dtype=None, fmt=ND
):
    ts = [
        fc.tensor(g, dtype=g_dtype),
        fc.tensor(x, dtype=x_dtype),
        fc.tensor(idx, dtype=idx_dtype),
        fc.tensor(out, dtype=out_dtype, fmt=fmt),
    ]
    arr = _int_array(fc, osz)
    ws, ex = c_uint64(12345), c_void_p()
    rc = fc.bwd_gws(*ts[:3], arr, ts[3], ctypes.byref(ws), ctypes.byref(ex))
    msg = fc.err()
    if rc == OK:
        fc.release(ex)
    fc.destroy(*ts, arr)
    return rc, msg, ws.value, ex.value


def check_forward_param_invalid_161002(fc):
    live0 = fc.baseline()
    f32, i32 = np.float32, np.int32
    z = np.zeros
    cases = [
        ("rank 2", (z((2, 2), f32), z((2, 2), i32), (3, 3), z((3, 3), f32)), {}, "3-D"),
        (
            "rank 5",
            (z((1, 1, 1, 2, 2), f32), z((1, 1, 1, 2, 2), i32), (3, 3), z((1, 1, 1, 3, 3), f32)),
            {},
            "4-D",
        ),
        (
            "outputSize len 1",
            (z((1, 2, 2), f32), z((1, 2, 2), i32), (9,), z((1, 3, 3), f32)),
            {},
            "exactly 2",
        ),
        (
            "outputSize len 3",
            (z((1, 2, 2), f32), z((1, 2, 2), i32), (1, 3, 3), z((1, 3, 3), f32)),
            {},
            "exactly 2",
        ),
        (
            "outputSize 0",
            (z((1, 2, 2), f32), z((1, 2, 2), i32), (0, 3), z((1, 0, 3), f32)),
            {},
            "> 0",
        ),
        (
            "outputSize <0",
            (z((1, 2, 2), f32), z((1, 2, 2), i32), (3, -3), z((1, 3, 3), f32)),
            {},
            "> 0",
        ),
        (
            "indices shape",
            (z((1, 2, 2), f32), z((1, 2, 3), i32), (3, 3), z((1, 3, 3), f32)),
            {},
            "indices shape",
        ),
        (
            "out H,W",
            (z((1, 2, 2), f32), z((1, 2, 2), i32), (3, 3), z((1, 3, 4), f32)),
            {},
            "out shape",
        ),
        (
            "out lead",
            (z((2, 1, 2, 2), f32), z((2, 1, 2, 2), i32), (3, 3), z((1, 2, 3, 3), f32)),
            {},
            "out shape",
        ),
        (
            "oH*oW < H*W",
            (z((1, 3, 3), f32), z((1, 3, 3), i32), (2, 4), z((1, 2, 4), f32)),
            {},
            "oH*oW",
        ),
        (
            "bf16",
            (z((1, 2, 2), np.int16), z((1, 2, 2), i32), (3, 3), z((1, 3, 3), np.int16)),
            {"x_dtype": BF16, "out_dtype": BF16},
            "BF16",
        ),
        (
            "bool",
            (z((1, 2, 2), np.bool_), z((1, 2, 2), i32), (3, 3), z((1, 3, 3), np.bool_)),
            {},
            "BOOL",
        ),
        (
            "indices float",
            (z((1, 2, 2), f32), z((1, 2, 2), f32), (3, 3), z((1, 3, 3), f32)),
            {},
            "INT32 or INT64",
        ),
        (
            "indices int16",
            (z((1, 2, 2), f32), z((1, 2, 2), np.int16), (3, 3), z((1, 3, 3), f32)),
            {},
            "INT32 or INT64",
        ),
        (
            "out dtype",
            (z((1, 2, 2), f32), z((1, 2, 2), i32), (3, 3), z((1, 3, 3), np.float64)),
            {},
            "out dtype",
        ),
        (
            "format NCHW",
            (z((1, 1, 2, 2), f32), z((1, 1, 2, 2), i32), (3, 3), z((1, 1, 3, 3), f32)),
            {"fmt": NCHW},
            "format must be ND",
        ),
    ]
    for name, args, kw, word in cases:
        rc, msg, ws, ex = _fwd_invalid(fc, *args, **kw)
        assert rc == INVALID, (name, rc, msg)
        assert msg and word in msg and "161002" in msg, (name, msg)
        assert ws == 12345 and ex is None, name  # outputs untouched on failure
    assert fc.live_objects() == live0 and fc.live_executors() == 0
    # Accepted: every documented forward dtype, INT32 and INT64 indices, 3-D and 4-D.
    for dt in (np.float32, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.float64):
        for it in (np.int32, np.int64):
            rc, msg, _, _ = _fwd_invalid(
                fc, z((1, 2, 2), dt), z((1, 2, 2), it), (2, 3), z((1, 2, 3), dt)
            )
            assert rc == OK, (dt, it, msg)
    assert fc.live_objects() == live0


def check_backward_param_invalid_161002(fc):
    live0 = fc.baseline()
    f32, i32 = np.float32, np.int32
    z = np.zeros
    g = z((1, 3, 3, 1), f32)
    x = z((1, 3, 2, 2), f32)
    ix = z((1, 3, 2, 2), i32)
    o = z((1, 3, 2, 2), f32)  # out must not alias self
    cases = [
        (
            "rank 2",
            (z((3, 1), f32), z((2, 2), f32), z((2, 2), i32), (3, 1), z((2, 2), f32)),
            {},
            "3-D",
        ),
        ("grad rank", (z((3, 3, 1), f32), x, ix, (3, 1), o), {}, "rank"),
        ("outputSize len", (g, x, ix, (3,), o), {}, "exactly 2"),
        ("outputSize 0", (z((1, 3, 0, 1), f32), x, ix, (0, 1), o), {}, "> 0"),
        ("indices shape", (g, x, z((1, 3, 2, 1), i32), (3, 1), o), {}, "indices shape"),
        ("out shape", (g, x, ix, (3, 1), z((1, 3, 2, 1), f32)), {}, "out shape"),
        ("grad H,W != outputSize", (g, x, ix, (1, 3), o), {}, "gradOutput shape"),
        ("grad lead", (z((1, 2, 3, 1), f32), x, ix, (3, 1), o), {}, "gradOutput shape"),
        (
            "bf16",
            (g.astype(np.int16), x.astype(np.int16), ix, (3, 1), o.astype(np.int16)),
            {"g_dtype": BF16, "x_dtype": BF16, "out_dtype": BF16},
            "BF16",
        ),
        ("self dtype", (g, x.astype(np.float64), ix, (3, 1), o), {}, "self dtype"),
        ("indices dtype", (g, x, ix.astype(np.uint8), (3, 1), o), {}, "INT32 or INT64"),
        ("out dtype", (g, x, ix, (3, 1), o.astype(np.float16)), {}, "out dtype"),
        ("format", (g, x, ix, (3, 1), o), {"fmt": NCHW}, "format must be ND"),
    ]
    for name, args, kw, word in cases:
        rc, msg, ws, ex = _bwd_invalid(fc, *args, **kw)
        assert rc == INVALID, (name, rc, msg)
        assert msg and word in msg and "161002" in msg, (name, msg)
        assert ws == 12345 and ex is None, name
    assert fc.live_objects() == live0 and fc.live_executors() == 0
    for dt in (
        np.float32,
        np.float16,
        np.float64,
        np.int32,
        np.int64,
        np.int16,
        np.int8,
        np.uint8,
        np.bool_,
    ):
        rc, msg, _, _ = _bwd_invalid(
            fc, g.astype(dt), x.astype(dt), ix.astype(np.int64), (3, 1), o.astype(dt)
        )
        assert rc == OK, (dt, msg)
    assert fc.live_objects() == live0


def check_memory_extras(fc):
    """Null data, a view outside its storage, out aliasing an input, destroyed arguments."""
    live0 = fc.baseline()
    x, idx, out = SEED_SELF, SEED_IDX, np.zeros((1, 3, 3, 3), np.float32)
    ws, ex = c_uint64(), c_void_p()
    arr = _int_array(fc, (3, 3))
    ti, to = fc.tensor(idx), fc.tensor(out)
    # null data pointer
    tx = fc.tensor(x, data=False)
    assert fc.fwd_gws(tx, ti, arr, to, ctypes.byref(ws), ctypes.byref(ex)) == NULLPTR
    assert "null data" in fc.err()
    fc.destroy(tx)
    # view larger than its storage
    tx = fc.aclCreateTensor(
        _i64s(x.shape), 4, FLOAT, _i64s([12, 4, 2, 1]), 1, ND, _i64s([12]), 1, x.ctypes.data
    )
    assert fc.fwd_gws(tx, ti, arr, to, ctypes.byref(ws), ctypes.byref(ex)) == INVALID
    assert "outside its storage" in fc.err()
    fc.destroy(tx)
    # out overlapping self
    buf = np.zeros(64, np.float32)
    tx = fc.aclCreateTensor(
        _i64s(x.shape), 4, FLOAT, _i64s([4, 4, 2, 1]), 0, ND, _i64s([64]), 1, buf.ctypes.data
    )
    tob = fc.aclCreateTensor(
        _i64s(out.shape), 4, FLOAT, _i64s([27, 9, 3, 1]), 10, ND, _i64s([64]), 1, buf.ctypes.data
    )
    assert fc.fwd_gws(tx, ti, arr, tob, ctypes.byref(ws), ctypes.byref(ex)) == INVALID
    assert "overlaps" in fc.err()
    fc.destroy(tob)
    # a destroyed tensor is refused without being read
    fc.destroy(tx)
    assert fc.fwd_gws(tx, ti, arr, to, ctypes.byref(ws), ctypes.byref(ex)) == INVALID
    assert "already destroyed" in fc.err()
    # an int array passed where a tensor is expected
    assert fc.fwd_gws(arr, ti, arr, to, ctypes.byref(ws), ctypes.byref(ex)) == INVALID
    assert "not an aclTensor" in fc.err()
    fc.destroy(ti, to, arr)
    assert fc.live_objects() == live0 and fc.live_executors() == 0 and fc.bad_destroys() == 0


def _fwd_executor(fc, keep):
    x, idx = SEED_SELF, SEED_IDX
    out = np.full((1, 3, 3, 3), 9, np.float32)
    ts = [fc.tensor(x), fc.tensor(idx), fc.tensor(out)]
    arr = _int_array(fc, (3, 3))
    ws, ex = c_uint64(), c_void_p()
    assert fc.fwd_gws(ts[0], ts[1], arr, ts[2], ctypes.byref(ws), ctypes.byref(ex)) == OK
    fc.destroy(*ts, arr)
    keep.append(out)
    return ws.value, ex, out


def _bwd_executor(fc, keep):
    out = np.full((1, 3, 2, 2), 9, np.float32)
    ts = [fc.tensor(SEED_GRAD), fc.tensor(SEED_SELF), fc.tensor(SEED_IDX), fc.tensor(out)]
    arr = _int_array(fc, (3, 1))
    ws, ex = c_uint64(), c_void_p()
    assert fc.bwd_gws(*ts[:3], arr, ts[3], ctypes.byref(ws), ctypes.byref(ex)) == OK
    fc.destroy(*ts, arr)
    keep.append(out)
    return ws.value, ex, out


def check_single_use_executor(fc):
    live0 = fc.baseline()
    keep = []
    ws, ex, out = _fwd_executor(fc, keep)
    assert fc.live_executors() == 1
    buf = np.zeros(ws, np.uint8)
    assert fc.fwd_run(buf.ctypes.data, ws, ex, None) == OK
    assert fc.live_executors() == 0
    assert fc.fwd_run(buf.ctypes.data, ws, ex, None) == INVALID
    assert "already destroyed" in fc.err()
    # wrong op: consumed anyway
    ws, ex, out = _fwd_executor(fc, keep)
    buf = np.zeros(ws, np.uint8)
    assert fc.bwd_run(buf.ctypes.data, ws, ex, None) == INVALID
    msg = fc.err()
    assert FWD_GWS in msg and "cannot run" in msg, msg
    assert fc.live_executors() == 0 and (out == 9).all()
    ws, ex, out = _bwd_executor(fc, keep)
    buf = np.zeros(ws, np.uint8)
    assert fc.fwd_run(buf.ctypes.data, ws, ex, None) == INVALID and BWD_GWS in fc.err()
    # not an executor at all
    t = fc.tensor(SEED_SELF)
    assert (
        fc.fwd_run(buf.ctypes.data, ws, t, None) == INVALID and "not an aclOpExecutor" in fc.err()
    )
    fc.destroy(t)
    # an unused executor can be released once made repeatable (CANN's docs); a plain one
    # cannot: aclDestroyAclOpExecutor refuses it, counts a bad destroy, and it stays alive
    _, ex, _ = _bwd_executor(fc, keep)
    assert fc.aclDestroyAclOpExecutor(ex) == INVALID and "not made repeatable" in fc.err()
    assert fc.bad_destroys() == 1 and fc.live_executors() == 1
    fc.release(ex)
    assert fc.aclDestroyAclOpExecutor(ex) == INVALID and "already destroyed" in fc.err()
    assert fc.aclDestroyAclOpExecutor(None) == 561103 and fc.aclSetAclOpExecutorRepeatable(
        None) == 561103
    assert fc.live_objects() == live0 and fc.bad_destroys() == 2
    # a repeatable executor runs as often as asked, and is released after
    ws, ex, out = _fwd_executor(fc, keep)
    assert fc.aclSetAclOpExecutorRepeatable(ex) == OK
    buf = np.zeros(max(ws, 1), np.uint8)
    for _ in range(2):
        out[...] = 9
        assert fc.fwd_run(buf.ctypes.data, ws, ex, None) == OK
        assert out.ravel().tolist()[:3] == [1, 1, 1]
    assert fc.live_executors() == 1
    assert fc.aclDestroyAclOpExecutor(ex) == OK and fc.live_objects() == live0


def check_workspace(fc):
    live0 = fc.baseline()
    keep = []
    ws, ex, out = _fwd_executor(fc, keep)
    assert ws > 0 and ws == fc.last_workspace_size()
    buf = np.zeros(ws + 8, np.uint8)
    assert fc.fwd_run(buf.ctypes.data, ws + 8, ex, None) == INVALID  # wrong size
    assert "workspaceSize" in fc.err() and fc.live_executors() == 0 and (out == 9).all()
    ws, ex, out = _fwd_executor(fc, keep)
    assert fc.fwd_run(None, ws, ex, None) == INVALID and "workspace is nullptr" in fc.err()
    ws, ex, out = _fwd_executor(fc, keep)
    assert fc.fwd_run(out.ctypes.data, ws, ex, None) == INVALID and "overlaps" in fc.err()
    # success writes a canary over the whole workspace, passes the stream through
    ws, ex, out = _fwd_executor(fc, keep)
    buf = np.zeros(ws + 16, np.uint8)
    assert fc.fwd_run(buf.ctypes.data, ws, ex, c_void_p(0x1234)) == OK
    assert (buf[:ws] == (0xA5 ^ (np.arange(ws) & 0xFF))).all() and (buf[ws:] == 0).all()
    assert fc.last_stream(FWD_RUN.encode()) == 0x1234
    assert out.ravel().tolist()[:9] == [1, 1, 1, 0, 0, 0, 0, 0, 0]
    # sizes depend on the op and on the size of the problem
    ws_b, ex, _ = _bwd_executor(fc, keep)
    assert ws_b != ws
    fc.release(ex)
    assert fc.live_objects() == live0


def check_index_out_of_range(fc):
    live0 = fc.baseline()
    x = np.arange(8, dtype=np.float32).reshape(2, 1, 2, 2)
    for bad in (9, -1):
        idx = np.array([0, 1, 2, 3, 4, 5, bad, 7], np.int64).reshape(2, 1, 2, 2)
        rc, out = run_fwd(fc, x, idx, (3, 3))
        assert rc == RUNTIME, rc
        msg = fc.err()
        assert f"index {bad}" in msg and "(n=1, c=0, i=2)" in msg and "[0, 9)" in msg, msg
        assert (out == 77).all(), "forward wrote despite a bad index"
        g = np.ones((2, 1, 3, 3), np.float32)
        rc, out = run_bwd(fc, g, x, idx, (3, 3))
        assert rc == RUNTIME and f"index {bad}" in fc.err()
        assert (out == 77).all(), "backward wrote despite a bad index"
    assert fc.live_objects() == live0 and fc.live_executors() == 0


def check_fail_next(fc):
    live0 = fc.baseline()
    fc.fail_next(FWD_GWS.encode(), 561003, b"EZ9999: kernel package not found")
    rc, out = run_fwd(fc, SEED_SELF, SEED_IDX, (3, 3))
    assert rc == 561003 and fc.err() == "EZ9999: kernel package not found"
    assert fc.live_executors() == 0 and fc.call_count(FWD_GWS.encode()) == 1
    assert fc.call_count(FWD_RUN.encode()) == 0
    rc, out = run_fwd(fc, SEED_SELF, SEED_IDX, (3, 3))  # only the next call fails
    assert rc == OK
    fc.fail_next(BWD_RUN.encode(), 361001, b"device lost")
    rc, out = run_bwd(fc, SEED_GRAD, SEED_SELF, SEED_IDX, (3, 1))
    assert rc == 361001 and fc.err() == "device lost" and (out == 77).all()
    assert fc.live_executors() == 0  # the executor is consumed by a failed execution too
    fc.fail_next(b"aclCreateTensor", 1, b"no memory")
    assert fc.tensor(SEED_SELF) is None and fc.err() == "no memory"
    fc.fail_next(b"aclrtSynchronizeStream", 507011, None)
    assert fc.aclrtSynchronizeStream(None) == 507011 and "injected" in fc.err()
    assert fc.aclrtSynchronizeStream(None) == OK
    fc.fail_next(BWD_GWS.encode(), 1, b"x")
    fc.reset()  # reset drops pending injections
    assert run_bwd(fc, SEED_GRAD, SEED_SELF, SEED_IDX, (3, 1))[0] == OK
    assert fc.live_objects() == live0


def check_destroy(fc):
    live0 = fc.baseline()
    assert fc.aclDestroyTensor(None) == OK and fc.aclDestroyIntArray(None) == OK
    t = fc.tensor(SEED_SELF)
    a = fc.int_array((1, 2))
    assert fc.live_tensors() >= 1 and fc.live_int_arrays() >= 1
    assert fc.aclDestroyTensor(a) == INVALID and "not an aclTensor" in fc.err()
    assert fc.aclDestroyTensor(t) == OK
    assert fc.aclDestroyTensor(t) == INVALID and "already destroyed" in fc.err()
    assert fc.aclDestroyIntArray(a) == OK
    assert fc.aclDestroyIntArray(a) == INVALID
    assert fc.aclDestroyTensor(c_void_p(0x10)) == INVALID
    assert fc.bad_destroys() == 4
    # aclCreateTensor rejects nonsense
    assert fc.aclCreateTensor(None, 2, FLOAT, _i64s([1, 1]), 0, ND, None, 0, None) is None
    assert (
        fc.aclCreateTensor(_i64s([2, -1]), 2, FLOAT, _i64s([1, 1]), 0, ND, _i64s([2]), 1, None)
        is None
    )
    assert fc.aclCreateTensor(_i64s([2]), 1, 99, _i64s([1]), 0, ND, _i64s([2]), 1, None) is None
    assert "unknown dataType 99" in fc.err()
    assert fc.live_objects() == live0


def check_error_messages(fc):
    fc.baseline()
    assert fc.aclGetRecentErrMsg() is None  # documented: nullptr when there is no message
    run_fwd(fc, np.zeros((2, 2), np.float32), np.zeros((2, 2), np.int32), (3, 3))
    assert "161002" in fc.last_error_message().decode()
    assert fc.err() is not None and fc.err() is None  # obtained and cleared
    # thread-level: another thread's failure is not reported here
    th = threading.Thread(target=lambda: fc.aclDestroyTensor(c_void_p(0x20)))
    th.start()
    th.join()
    assert fc.err() is None and "aclDestroyTensor" in fc.last_error_message().decode()
    # stacked, newest first
    fc.aclDestroyTensor(c_void_p(0x30))
    fc.aclDestroyTensor(c_void_p(0x40))
    lines = fc.err().splitlines()
    assert len(lines) == 2 and "0x40" in lines[0] and "0x30" in lines[1], lines


def check_rt_memory(fc):
    fc.baseline()
    n0 = fc.live_allocations()
    p = c_void_p()
    assert fc.aclrtMalloc(ctypes.byref(p), 100, 0) == OK and p.value
    assert fc.live_allocations() == n0 + 1
    assert ctypes.string_at(p, 4) == b"\xcd" * 4  # garbage, not zeros
    assert fc.aclrtFree(p) == OK and fc.live_allocations() == n0
    assert fc.aclrtFree(p) != OK and fc.bad_frees() == 1
    assert fc.aclrtMalloc(ctypes.byref(p), 0, 0) != OK
    assert fc.aclrtSynchronizeStream(None) == OK


def check_zero_size(fc):
    live0 = fc.baseline()
    x = np.zeros((0, 3, 2, 2), np.float32)
    rc, out = run_fwd(fc, x, np.zeros(x.shape, np.int32), (3, 3))
    assert rc == OK and out.shape == (0, 3, 3, 3) and fc.last_workspace_size() > 0
    rc, out = run_bwd(
        fc,
        np.zeros((2, 3, 3, 3), np.float32),
        np.zeros((2, 3, 0, 2), np.float32),
        np.zeros((2, 3, 0, 2), np.int64),
        (3, 3),
    )
    assert rc == OK
    assert fc.live_objects() == live0


def check_threads(fc):
    live0 = fc.baseline()
    errors = []

    def worker(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(50):
                g = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
                idx = rng.integers(0, 16, size=(2, 3, 2, 2)).astype(np.int32)
                rc, out = run_bwd(fc, g, np.zeros(idx.shape, np.float32), idx, (4, 4))
                assert rc == OK, rc
                np.testing.assert_array_equal(out, backward_ref(g, idx))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert fc.call_count(BWD_RUN.encode()) == 400
    assert fc.live_objects() == live0 and fc.bad_destroys() == 0


def check_opapi_nn_variant(fc):
    """libopapi_nn.so build: no libopapi.so; each library exports only its own symbols;
    its state is separate from the first build's."""
    with tempfile.TemporaryDirectory() as tmp:
        d = build(pathlib.Path(tmp), opapi_name="libopapi_nn.so")
        assert (d / "libopapi_nn.so").is_file() and not (d / "libopapi.so").exists()
        nn = FakeCann(d, opapi_name="libopapi_nn.so")
        base = ctypes.CDLL(str(d / "libnnopbase.so"))
        for sym in (FWD_GWS, FWD_RUN, BWD_GWS, BWD_RUN):
            assert hasattr(nn.opapi, sym) and not hasattr(base, sym)
        assert not hasattr(nn.ascendcl, "aclCreateTensor") and not hasattr(base, "aclrtMalloc")
        nn.reset()
        fc.reset()
        rc, out = run_bwd(nn, SEED_GRAD, SEED_SELF, SEED_IDX, (3, 1))
        assert rc == OK and out.ravel().tolist() == SEED_OUT
        assert nn.call_count(BWD_RUN.encode()) == 1 and fc.call_count(BWD_RUN.encode()) == 0
        # cached: a second build is a no-op
        stamp = (d / ".fakecann-build").stat().st_mtime_ns
        build(d, opapi_name="libopapi_nn.so")
        assert (d / ".fakecann-build").stat().st_mtime_ns == stamp


def check_int64_indices_only(fc):
    """Legacy mode (CANN before 8.0.0): the forward refuses INT32 indices with 161002 and
    takes INT64; the backward still takes INT32; fakecann_reset() ends the mode."""
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    idx = np.array([3, 0, 8, 5]).reshape(1, 1, 2, 2)
    expected = np.zeros((1, 1, 3, 3), np.float32)
    expected.ravel()[[3, 0, 8, 5]] = [0, 1, 2, 3]
    fc.reset()
    fc.set_int64_indices_only(1)
    rc, _ = run_fwd(fc, x, idx.astype(np.int32), (3, 3))
    assert rc == INVALID and "must be INT64 (legacy mode" in fc.last_error_message().decode()
    rc, out = run_fwd(fc, x, idx.astype(np.int64), (3, 3))
    assert rc == OK and np.array_equal(out, expected)
    rc, _ = run_bwd(fc, SEED_GRAD, SEED_SELF, SEED_IDX, (3, 1))
    assert rc == OK
    fc.reset()
    rc, out = run_fwd(fc, x, idx.astype(np.int32), (3, 3))
    assert rc == OK and np.array_equal(out, expected)


def check_current_context(fc):
    """aclrtGetCurrentContext: a non-null context by default; with fakecann_set_no_context
    error 107002 (ACL_ERROR_RT_CONTEXT_NULL) and a message; 100000 for a null argument."""
    fc.reset()
    ctx = c_void_p()
    assert fc.aclrtGetCurrentContext(ctypes.byref(ctx)) == 0 and ctx.value
    fc.set_no_context(1)
    ctx = c_void_p()
    assert fc.aclrtGetCurrentContext(ctypes.byref(ctx)) == 107002 and not ctx.value
    assert b"no ACL context" in fc.aclGetRecentErrMsg()
    assert fc.aclrtGetCurrentContext(None) == 100000
    fc.reset()
    assert fc.aclrtGetCurrentContext(ctypes.byref(ctx)) == 0 and ctx.value


def check_current_device(fc):
    """aclrtGetDevice: device 0 by default, what fakecann_set_device says, 107002 for -1 and
    without a context, 100000 for a null argument; reset gives device 0 again."""
    fc.reset()
    device = c_int32(-5)
    assert fc.aclrtGetDevice(ctypes.byref(device)) == 0 and device.value == 0
    fc.set_device(3)
    assert fc.aclrtGetDevice(ctypes.byref(device)) == 0 and device.value == 3
    for off in (lambda: fc.set_device(-1), lambda: fc.set_no_context(1)):
        off()
        device = c_int32(-5)
        assert fc.aclrtGetDevice(ctypes.byref(device)) == 107002 and device.value == -5
        assert b"no ACL context" in fc.aclGetRecentErrMsg()
        fc.set_device(3)
        fc.set_no_context(0)
    assert fc.aclrtGetDevice(None) == 100000
    fc.reset()
    assert fc.aclrtGetDevice(ctypes.byref(device)) == 0 and device.value == 0


def check_launch_records(fc):
    """fakecann_last_stream and fakecann_last_workspace record what an execution got, and
    aclrtSynchronizeStream's stream is recorded under its name."""
    fc.reset()
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2)
    idx = np.array([[[[0, 5], [2, 8]]]], np.int32)
    tensors = [fc.tensor(x), fc.tensor(idx), fc.tensor(np.zeros((1, 1, 3, 3), np.float32))]
    osz = fc.int_array((3, 3))
    ws, ex = c_uint64(), c_void_p()
    assert fc.fwd_gws(tensors[0], tensors[1], osz, tensors[2], ctypes.byref(ws),
                      ctypes.byref(ex)) == OK
    memory = np.zeros(ws.value, np.uint8)
    stream = c_void_p(0x5EA0)
    assert fc.fwd_run(memory.ctypes.data, ws.value, ex, stream) == OK
    assert fc.last_stream(FWD_RUN.encode()) == 0x5EA0
    assert fc.last_workspace(FWD_RUN.encode()) == memory.ctypes.data
    assert fc.aclrtSynchronizeStream(c_void_p(0x5EA1)) == OK
    assert fc.last_stream(b"aclrtSynchronizeStream") == 0x5EA1
    for t in tensors:
        fc.aclDestroyTensor(t)
    fc.aclDestroyIntArray(osz)
    fc.reset()
    assert fc.last_workspace(FWD_RUN.encode()) is None


def check_pool2d_float_only(fc):
    """CANN 8.0.RC2's aclnnMaxPool2dWithIndices (fakecann_set_pool2d_float_only): FLOAT
    values with INT32 indices only; FLOAT16, BF16 and INT64 indices are 161002. The 3-D op
    is unchanged."""
    live0 = fc.baseline()
    x = np.zeros((1, 2, 4, 4), np.float32)
    window = ((2, 2), (2, 2), (0, 0), (1, 1))
    try:
        fc.set_pool2d_float_only(1)
        assert run_pool(fc, 2, x, window, index_dtype=np.int32)[0] == OK
        assert run_pool(fc, 2, x, window, index_dtype=np.int64)[0] == INVALID
        assert "must be INT32" in fc.err()
        assert run_pool(fc, 2, x.astype(np.float16), window, index_dtype=np.int32)[0] == INVALID
        assert "supported: FLOAT" in fc.err()
        rc = run_pool(fc, 3, np.zeros((1, 1, 4, 4, 4), np.float16), (*[(2,) * 3] * 2,
                                                                    (0,) * 3, (1,) * 3),
                      index_dtype=np.int32)[0]
        assert rc == OK, fc.err()
        fc.reset()
        assert run_pool(fc, 2, x.astype(np.float16), window, index_dtype=np.int64)[0] == OK
    finally:
        fc.reset()
    assert fc.live_objects() == live0 and fc.bad_destroys() == 0


def check_layouts(fc):
    """The split (CANN 9.x) and --feature (8.x) packagings: which library exports which
    aclnn entry points; every library's SONAME is its file name."""
    del fc
    symbols = {FWD2D: (FWD_GWS, FWD_RUN), BWD2D: (BWD_GWS, BWD_RUN),
               FWD3D: (FWD3D_GWS, FWD3D_RUN), BWD3D: (BWD3D_GWS, BWD3D_RUN),
               POOL2D: (POOL2D_GWS, POOL2D_RUN), POOL3D: (POOL3D_GWS, POOL3D_RUN),
               MATH: (CLAMP_GWS, CLAMP_RUN, MAX_GWS, MAX_RUN, MIN_GWS, MIN_RUN)}
    with tempfile.TemporaryDirectory() as tmp:
        for layout, libs in LAYOUTS.items():
            d = build(pathlib.Path(tmp) / layout, layout=layout)
            present = sorted(p.name for p in d.glob("*.so"))
            assert present == sorted([*libs, "libascendcl.so", "libnnopbase.so"]), present
            for name, ops in libs.items():
                lib = ctypes.CDLL(str(d / name))
                for bit, names in symbols.items():
                    assert all(hasattr(lib, s) == bool(ops & bit) for s in names), (name, bit)
                # DT_SONAME: dlopen by bare name with RTLD_NOLOAD finds the loaded copy.
                assert b"\x00" + name.encode() + b"\x00" in (d / name).read_bytes()


# ---- the MaxUnpool3d ops ----------------------------------------------------------------
# Their checks, as aclnn_max_unpool3d{,_backward}.cpp and level2_base.h of hicann/ops-nn
# make them: each refusal the real op makes is a 161002 (161001 for a null) here too.

def forward_ref3d(x, idx, osz):
    """Zeros, then out[v, idx[v, i]] = x[v, i] per leading index v, i flat over (D, H, W)."""
    lead = x.shape[:-3]
    out = np.zeros((int(np.prod(lead)), int(np.prod(osz))), x.dtype)
    xf, jf = x.reshape(out.shape[0], -1), idx.reshape(out.shape[0], -1)
    for p in range(xf.shape[0]):
        for i in range(xf.shape[1]):
            out[p, jf[p, i]] = xf[p, i]
    return out.reshape(lead + tuple(osz))


def backward_ref3d(g, idx):
    gf = g.reshape(int(np.prod(g.shape[:-3])), -1)
    jf = idx.reshape(gf.shape[0], -1)
    return np.take_along_axis(gf, jf.astype(np.int64), axis=1).reshape(idx.shape)


def _gws3d(fc, op, tensors, osz, stride, padding, ws, ex):
    arrays = [_int_array(fc, a) for a in (osz, stride, padding)]
    try:
        if op == "forward":
            return fc.fwd3d_gws(tensors[0], tensors[1], *arrays, tensors[2], ws, ex)
        return fc.bwd3d_gws(*tensors[:3], *arrays, tensors[3], ws, ex)
    finally:
        fc.destroy(*arrays)


def run_fwd3d(fc, x, idx, osz, out=None, *, stride=(1, 1, 1), padding=(0, 0, 0), x_t=None,
              idx_t=None):
    """Full 3-D forward cycle; returns (status at first failure, out array)."""
    if out is None:
        out = np.full(x.shape[:-3] + tuple(osz), 77, x.dtype)
    ts = [x_t or fc.tensor(x), idx_t or fc.tensor(idx), fc.tensor(out)]
    rc = _cycle(fc, lambda ws, ex: _gws3d(fc, "forward", ts, osz, stride, padding, ws, ex),
                fc.fwd3d_run, ts)
    return rc, out


def broadcast_self(fc, shape, memory, dtype=None):
    """`self` as jax-unpool's backward hands it over: `shape` over the first element of
    `memory`, all strides 0 (the real op reads only its shape and dtype)."""
    fc._keep.append(memory)
    return fc.aclCreateTensor(_i64s(shape), len(shape),
                              ACL_DTYPE[memory.dtype] if dtype is None else dtype,
                              _i64s([0] * len(shape)), 0, ND, _i64s(memory.shape),
                              memory.ndim, memory.ctypes.data)


def run_bwd3d(fc, g, idx, osz=None, out=None, *, x=None, g_t=None):
    """Full 3-D backward cycle, `self` a broadcast view of g unless x is given."""
    osz = g.shape[-3:] if osz is None else osz
    if out is None:
        out = np.full(idx.shape, 77, g.dtype)
    x_t = fc.tensor(x) if x is not None else broadcast_self(fc, idx.shape, g)
    ts = [g_t or fc.tensor(g), x_t, fc.tensor(idx), fc.tensor(out)]
    rc = _cycle(fc, lambda ws, ex: _gws3d(fc, "backward", ts, osz, (1, 1, 1), (0, 0, 0), ws, ex),
                fc.bwd3d_run, ts)
    return rc, out


def check_3d_forward_values(fc):
    live0 = fc.baseline()
    rng = np.random.default_rng(3)
    for shape, osz, idt, dt in [
        ((2, 3, 2, 2, 3), (3, 4, 2), np.int32, np.float32),  # (N, C, D, H, W)
        ((3, 2, 2, 3), (2, 2, 4), np.int64, np.float64),  # (N, D, H, W)
        ((1, 2, 2, 2, 2), (2, 2, 2), np.int64, np.int8),  # oD*oH*oW == D*H*W
        ((2, 1, 3, 1), (5, 1, 2), np.int32, np.uint8),
        ((1, 2, 1, 2, 2), (2, 3, 1), np.int64, np.int16),
    ]:
        x = (rng.standard_normal(shape) * 50).astype(dt)
        idx = rng.integers(0, np.prod(osz), size=shape).astype(idt)
        rc, out = run_fwd3d(fc, x, idx, osz)
        assert rc == OK, (shape, rc, fc.err())
        np.testing.assert_array_equal(out, forward_ref3d(x, idx, osz))
        assert fc.last_dtype(FWD3D_RUN.encode()) == ACL_DTYPE[np.dtype(dt)]
        assert fc.last_indices_dtype(FWD3D_RUN.encode()) == ACL_DTYPE[np.dtype(idt)]
    # Duplicates: the last flat position wins, unwritten positions are zero; stride and
    # padding are validated only, so any valid values give the same result.
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 1, 2, 2, 2)
    idx = np.array([5, 0, 5, 5, 1, 1, 8, 2], np.int64).reshape(x.shape)
    expected = [2, 6, 8, 0, 0, 4, 0, 0, 7]
    for stride, padding in [((1, 1, 1), (0, 0, 0)), ((2, 3, 4), (-1, 7, 0))]:
        rc, out = run_fwd3d(fc, x, idx, (1, 3, 3), stride=stride, padding=padding)
        assert rc == OK and out.ravel().tolist() == expected, (rc, fc.err(), out)
    # Inputs may be strided views (outRef may not, see the 161002 checks).
    xbase = rng.standard_normal((2, 3, 2, 2, 6)).astype(np.float32)
    xs = xbase[:, 1:, :, :, ::2].transpose(1, 0, 2, 3, 4)  # (2, 2, 2, 2, 3)
    ibase = rng.integers(0, 30, size=(2, 2, 2, 2, 3, 2)).astype(np.int32)
    ids = ibase[..., 1]
    rc, out = run_fwd3d(fc, xs, ids, (2, 3, 5), x_t=fc.tensor(xs, base=xbase),
                        idx_t=fc.tensor(ids, base=ibase))
    assert rc == OK, fc.err()
    np.testing.assert_array_equal(out, forward_ref3d(np.ascontiguousarray(xs), ids, (2, 3, 5)))
    assert fc.live_objects() == live0 and fc.bad_destroys() == 0


def check_3d_backward_values(fc):
    live0 = fc.baseline()
    rng = np.random.default_rng(4)
    for shape, osz, dt in [
        ((2, 3, 2, 2, 2), (3, 2, 4), np.float16),
        ((3, 2, 1, 3), (2, 2, 4), np.int64),
        ((1, 2, 2, 2, 2), (2, 2, 2), np.float64),
        ((2, 1, 2, 2), (1, 3, 3), np.uint8),
    ]:
        g = (rng.standard_normal(shape[:-3] + osz) * 50).astype(dt)
        idx = rng.integers(0, np.prod(osz), size=shape).astype(np.int64)
        rc, out = run_bwd3d(fc, g, idx)
        assert rc == OK, (shape, rc, fc.err())
        np.testing.assert_array_equal(out, backward_ref3d(g, idx))
    # A self of its own memory gives the same: its data is never read.
    g = rng.standard_normal((1, 2, 2, 2, 3)).astype(np.float32)
    idx = rng.integers(0, 12, size=(1, 2, 1, 2, 2)).astype(np.int64)
    rc, out = run_bwd3d(fc, g, idx, x=np.full(idx.shape, np.nan, np.float32))
    assert rc == OK and np.array_equal(out, backward_ref3d(g, idx))
    # A strided gradOutput.
    gbase = rng.standard_normal((2, 2, 3, 2, 8)).astype(np.float32)
    gs = gbase[..., 1::2]  # (2, 2, 3, 2, 4)
    idx = rng.integers(0, 24, size=(2, 2, 2, 1, 2)).astype(np.int64)
    rc, out = run_bwd3d(fc, gs, idx, x=np.zeros(idx.shape, np.float32),
                        g_t=fc.tensor(gs, base=gbase))
    assert rc == OK, fc.err()
    np.testing.assert_array_equal(out, backward_ref3d(np.ascontiguousarray(gs), idx))
    assert fc.live_objects() == live0 and fc.bad_destroys() == 0


def check_3d_nullptr_161001(fc):
    live0 = fc.baseline()
    x, idx = np.zeros((1, 1, 2, 2, 2), np.float32), np.zeros((1, 1, 2, 2, 2), np.int64)
    out, g = np.zeros((1, 1, 2, 2, 3), np.float32), np.zeros((1, 1, 2, 2, 3), np.float32)
    ws, ex = c_uint64(), c_void_p()
    arrays = [_int_array(fc, a) for a in ((2, 2, 3), (1, 1, 1), (0, 0, 0))]
    fwd = [fc.tensor(x), fc.tensor(idx), *arrays, fc.tensor(out), ctypes.byref(ws),
           ctypes.byref(ex)]
    names = ["self", "indices", "outputSize", "stride", "padding", "outRef"]
    for i, name in enumerate(names):
        args = list(fwd)
        args[i] = None
        assert fc.fwd3d_gws(*args) == NULLPTR, i
        assert name + " is nullptr" in fc.err()
    bwd = [fc.tensor(g), fc.tensor(x), fc.tensor(idx), *arrays, fc.tensor(np.zeros_like(x)),
           ctypes.byref(ws), ctypes.byref(ex)]
    for i, name in enumerate(["gradOutput", *names[:5], "out"]):
        args = list(bwd)
        args[i] = None
        assert fc.bwd3d_gws(*args) == NULLPTR, i
        assert name + " is nullptr" in fc.err()
    # workspaceSize and executor are checked first (OP_CHECK_COMM_INPUT).
    for gws, args in ((fc.fwd3d_gws, fwd), (fc.bwd3d_gws, bwd)):
        for k in (-1, -2):
            bad = [None, *args[1:]]
            bad[k] = None
            assert gws(*bad) == NULLPTR and "workspaceSize or executor" in fc.err()
    assert fc.live_executors() == 0
    assert fc.fwd3d_run(None, 0, None, None) == NULLPTR and "executor is nullptr" in fc.err()
    assert fc.bwd3d_run(None, 0, None, None) == NULLPTR
    fc.destroy(*fwd[:2], fwd[5], *bwd[:3], bwd[6], *arrays)
    assert fc.live_objects() == live0


def _gws3d_invalid(fc, op, arrays, osz, stride=(1, 1, 1), padding=(0, 0, 0), *, dtypes=(),
                   out_view=None, fmt=ND):
    """GetWorkspaceSize of `op` on numpy arrays (forward: x, idx, out; backward: g, x, idx,
    out); `dtypes` overrides their aclDataTypes (None keeps one); `out_view` = (view,
    base) describes out as a strided view. Returns (status, message, ws, executor)."""
    dtypes = list(dtypes) + [None] * (len(arrays) - len(dtypes))
    ts = [fc.tensor(a, dtype=d, fmt=fmt if k == 0 else ND)
          for k, (a, d) in enumerate(zip(arrays[:-1], dtypes))]
    view, base = out_view if out_view else (arrays[-1], None)
    ts.append(fc.tensor(view, dtype=dtypes[-1], base=base))
    ws, ex = c_uint64(12345), c_void_p()
    rc = _gws3d(fc, op, ts, osz, stride, padding, ctypes.byref(ws), ctypes.byref(ex))
    msg = fc.err()
    if rc == OK:
        fc.release(ex)
    fc.destroy(*ts)
    return rc, msg, ws.value, ex.value


def _assert_refused(fc, op, cases):
    for name, arrays, osz, kw, word in cases:
        rc, msg, ws, ex = _gws3d_invalid(fc, op, arrays, osz, **kw)
        assert rc == INVALID, (name, rc, msg)
        assert msg and word in msg and "161002" in msg, (name, msg)
        assert ws == 12345 and ex is None, name  # outputs untouched on failure


def check_3d_forward_param_invalid_161002(fc):
    live0 = fc.baseline()
    f32, i32, i64 = np.float32, np.int32, np.int64
    z = np.zeros
    X, O = (1, 2, 2, 2, 2), (1, 2, 2, 2, 3)  # indices: X
    osz = (2, 2, 3)
    obase = z((1, 2, 2, 2, 6), f32)
    cases = [
        ("outRef strided", (z(X, f32), z(X, i32), None), osz,
         {"out_view": (obase[..., ::2], obase)}, "outRef must be contiguous"),
        ("outRef strided before dtype", (z(X, f32), z(X, i32), None), osz,
         {"dtypes": (BOOL, None, BOOL), "out_view": (obase[..., ::2], obase)},
         "contiguous"),
        ("bool", (z(X, np.bool_), z(X, i32), z(O, np.bool_)), osz, {}, "BOOL"),
        ("bf16", (z(X, np.int16), z(X, i32), z(O, np.int16)), osz,
         {"dtypes": (BF16, None, BF16)}, "BF16"),
        ("outRef dtype", (z(X, f32), z(X, i32), z(O, np.float64)), osz, {}, "outRef dtype"),
        ("indices int16", (z(X, f32), z(X, np.int16), z(O, f32)), osz, {}, "INT32 or INT64"),
        ("indices float", (z(X, f32), z(X, f32), z(O, f32)), osz, {}, "INT32 or INT64"),
        ("dtype before rank", (z((2, 2, 2), np.bool_), z((2, 2, 2), i32),
                               z((2, 2, 3), np.bool_)), osz, {}, "BOOL"),
        ("rank 3", (z((2, 2, 2), f32), z((2, 2, 2), i32), z((2, 2, 3), f32)), osz, {},
         "4d or 5d"),
        ("rank 6", (z((1, *X), f32), z((1, *X), i32), z((1, *O), f32)), osz, {}, "4d or 5d"),
        ("indices rank", (z(X, f32), z(X[1:], i32), z(O, f32)), osz, {}, "indices rank"),
        ("indices shape", (z(X, f32), z((1, 2, 2, 2, 1), i32), z(O, f32)), osz, {},
         "indices shape"),
        ("C empty", (z((1, 0, 2, 2, 2), f32), z((1, 0, 2, 2, 2), i32), z((1, 0, 2, 2, 3), f32)),
         osz, {}, "non-zero size for non-batch"),
        ("D empty rank 4", (z((2, 0, 2, 2), f32), z((2, 0, 2, 2), i32), z((2, 2, 2, 3), f32)),
         osz, {}, "non-zero size for non-batch"),
        ("outputSize len 2", (z(X, f32), z(X, i32), z(O, f32)), (4, 3), {},
         "three elements (depth, height, width) in outputSize"),
        ("outputSize len 4", (z(X, f32), z(X, i32), z(O, f32)), (1, 2, 2, 3), {},
         "in outputSize"),
        ("stride len 2", (z(X, f32), z(X, i32), z(O, f32)), osz, {"stride": (1, 1)},
         "in stride"),
        ("padding len 4", (z(X, f32), z(X, i32), z(O, f32)), osz, {"padding": (0,) * 4},
         "in padding"),
        ("stride 0", (z(X, f32), z(X, i32), z(O, f32)), osz, {"stride": (1, 0, 1)},
         "stride[1] should be greater than zero"),
        ("stride < 0", (z(X, f32), z(X, i32), z(O, f32)), osz, {"stride": (-2, 1, 1)},
         "stride[0]"),
        ("outputSize 0", (z(X, f32), z(X, i32), z((1, 2, 2, 0, 3), f32)), (2, 0, 3), {},
         "outputSize[1] should be greater than zero"),
        ("smaller volume", (z(X, f32), z(X, i32), z((1, 2, 1, 1, 7), f32)), (1, 1, 7), {},
         "should be greater than or equal to self of size 2 x 2 x 2"),
        ("outRef rank", (z(X, f32), z(X, i32), z(O[1:], f32)), osz, {}, "outRef rank"),
        ("outRef N", (z(X, f32), z(X, i32), z((2, *O[1:]), f32)), osz, {}, "outRef N and C"),
        ("outRef C", (z(X, f32), z(X, i32), z((1, 3, *O[2:]), f32)), osz, {},
         "outRef N and C"),
        ("outRef C rank 4", (z(X[1:], f32), z(X[1:], i32), z((3, *O[2:]), f32)), osz, {},
         "outRef N and C"),
        ("outRef volume", (z(X, f32), z(X, i32), z((1, 2, 3, 2, 2), f32)), osz, {},
         "outRef D, H, W [3, 2, 2] must equal outputSize [2, 2, 3]"),
        ("format NCHW", (z(X, f32), z(X, i32), z(O, f32)), osz, {"fmt": NCHW},
         "format must be ND"),
    ]
    _assert_refused(fc, "forward", [(n, a[:2] + (a[2] if a[2] is not None else z(O, f32),), o,
                                     kw, w) for n, a, o, kw, w in cases])
    assert fc.live_objects() == live0 and fc.live_executors() == 0
    # Accepted: every listed dtype, INT32 and INT64 indices, ranks 4 and 5, any padding
    # values (only their count is checked), a one-element outRef of any strides.
    for dt in (np.float32, np.float16, np.int8, np.uint8, np.int16, np.int32, np.int64,
               np.float64):
        for it in (i32, i64):
            for x, o in ((X, O), (X[1:], O[1:])):
                rc, msg, _, _ = _gws3d_invalid(fc, "forward", (z(x, dt), z(x, it), z(o, dt)),
                                               osz, padding=(-3, 9, 0))
                assert rc == OK, (dt, it, x, msg)
    assert fc.live_objects() == live0


def check_3d_backward_param_invalid_161002(fc):
    live0 = fc.baseline()
    f32, i64 = np.float32, np.int64
    z = np.zeros
    G, X = (1, 2, 2, 2, 3), (1, 2, 2, 2, 2)
    osz = (2, 2, 3)
    obase = z((1, 2, 2, 2, 4), f32)

    def ok(**over):  # a valid call's arrays with some replaced: g, x, idx, out
        a = {"g": z(G, f32), "x": z(X, f32), "idx": z(X, i64), "out": z(X, f32), **over}
        return (a["g"], a["x"], a["idx"], a["out"])

    cases = [
        ("out strided", ok(), osz, {"out_view": (obase[..., ::2], obase)},
         "out must be contiguous"),
        ("gradOutput bool", ok(g=z(G, np.bool_), x=z(X, np.bool_), out=z(X, np.bool_)), osz,
         {}, "gradOutput dtype BOOL"),
        ("gradOutput bf16", ok(g=z(G, np.int16), x=z(X, np.int16), out=z(X, np.int16)), osz,
         {"dtypes": (BF16, BF16, None, BF16)}, "BF16"),
        ("self bool", ok(x=z(X, np.bool_)), osz, {}, "self dtype BOOL"),
        ("out uint16", ok(out=z(X, np.int16)), osz, {"dtypes": (None, None, None, 7)},
         "out dtype UINT16"),
        ("self dtype", ok(x=z(X, np.float64)), osz, {}, "self dtype DOUBLE (11) must equal"),
        ("out dtype", ok(out=z(X, np.float16)), osz, {}, "out dtype FLOAT16 (1) must equal"),
        ("indices int32", ok(idx=z(X, np.int32)), osz, {}, "must be INT64"),
        ("indices float", ok(idx=z(X, f32)), osz, {}, "must be INT64"),
        ("rank 3", ok(g=z(G[2:], f32), x=z(X[2:], f32), idx=z(X[2:], i64), out=z(X[2:], f32)),
         osz, {}, "4d or 5d"),
        ("indices rank", ok(idx=z(X[1:], i64)), osz, {}, "indices rank 4"),
        ("out rank", ok(out=z(X[1:], f32)), osz, {}, "out rank 4"),
        ("indices shape", ok(idx=z((1, 2, 2, 1, 2), i64)), osz, {}, "indices shape"),
        ("out shape", ok(out=z((1, 2, 2, 1, 2), f32)), osz, {}, "out shape"),
        ("H empty", ok(x=z((1, 2, 2, 0, 2), f32), idx=z((1, 2, 2, 0, 2), i64),
                       out=z((1, 2, 2, 0, 2), f32)), osz, {}, "non-zero size for non-batch"),
        ("outputSize len", ok(), (2, 6), {}, "in outputSize"),
        ("stride len", ok(), osz, {"stride": (1, 1, 1, 1)}, "in stride"),
        ("padding len", ok(), osz, {"padding": (0,)}, "in padding"),
        ("stride 0", ok(), osz, {"stride": (1, 1, 0)}, "stride[2]"),
        # Unlike the 2-D backward, the 3-D one shares the forward's volume rule.
        ("smaller volume", ok(g=z((1, 2, 1, 1, 7), f32)), (1, 1, 7), {},
         "greater than or equal to self"),
        ("gradOutput rank", ok(g=z(G[1:], f32)), osz, {}, "gradOutput rank 4"),
        ("gradOutput N", ok(g=z((2, *G[1:]), f32)), osz, {}, "gradOutput N and C"),
        ("gradOutput C", ok(g=z((1, 1, *G[2:]), f32)), osz, {}, "gradOutput N and C"),
        ("gradOutput volume", ok(g=z((1, 2, 3, 2, 2), f32)), osz, {}, "gradOutput D, H, W"),
        ("format", ok(), osz, {"fmt": NCHW}, "format must be ND"),
    ]
    _assert_refused(fc, "backward", cases)
    assert fc.live_objects() == live0 and fc.live_executors() == 0
    for dt in (np.float32, np.float16, np.int8, np.uint8, np.int16, np.int32, np.int64,
               np.float64):
        for g, x in ((G, X), (G[1:], X[1:])):
            arrays = (z(g, dt), z(x, dt), z(x, i64), z(x, dt))
            rc, msg, _, _ = _gws3d_invalid(fc, "backward", arrays, osz)
            assert rc == OK, (dt, x, msg)
    assert fc.live_objects() == live0


def check_3d_empty_and_workspace(fc):
    """An empty batch: workspace 0, and the launch takes a null workspace. Otherwise the
    size depends on the problem and differs from every other op's."""
    live0 = fc.baseline()
    x = np.zeros((0, 2, 2, 2, 2), np.float32)
    rc, out = run_fwd3d(fc, x, np.zeros(x.shape, np.int64), (2, 2, 2))
    assert rc == OK and out.shape == (0, 2, 2, 2, 2) and fc.last_workspace_size() == 0
    g = np.zeros((0, 2, 2, 2, 2), np.float32)
    rc, out = run_bwd3d(fc, g, np.zeros(x.shape, np.int64), x=x)
    assert rc == OK and fc.last_workspace_size() == 0
    sizes = set()
    for shape in ((1, 1, 2, 2, 2), (2, 3, 2, 2, 2)):
        x = np.ones(shape, np.float32)
        assert run_fwd3d(fc, x, np.zeros(shape, np.int64), (2, 2, 2))[0] == OK
        sizes.add(fc.last_workspace_size())
        g = np.ones(shape, np.float32)
        assert run_bwd3d(fc, g, np.zeros(shape, np.int64))[0] == OK
        sizes.add(fc.last_workspace_size())
    assert run_fwd(fc, SEED_SELF, SEED_IDX, (3, 3))[0] == OK
    sizes.add(fc.last_workspace_size())
    assert len(sizes) == 5 and 0 not in sizes, sizes
    assert fc.live_objects() == live0


def check_3d_index_out_of_range(fc):
    live0 = fc.baseline()
    x = np.arange(16, dtype=np.float32).reshape(2, 1, 2, 2, 2)
    for bad in (18, -1):
        idx = np.arange(16, dtype=np.int64).reshape(x.shape) % 8
        idx[1, 0, 1, 0, 1] = bad
        rc, out = run_fwd3d(fc, x, idx, (2, 3, 3))
        assert rc == RUNTIME, rc
        msg = fc.err()
        assert f"index {bad}" in msg and "(n=1, c=0, i=5)" in msg, msg
        assert "[0, 18) for outputSize (2, 3, 3)" in msg and (out == 77).all(), msg
        rc, out = run_bwd3d(fc, np.ones((2, 1, 2, 3, 3), np.float32), idx)
        assert rc == RUNTIME and f"index {bad}" in fc.err() and (out == 77).all()
    assert fc.live_objects() == live0 and fc.live_executors() == 0


def check_3d_executors_are_their_own(fc):
    """A 3-D executor runs only under its own op's launch, and the reverse."""
    live0 = fc.baseline()
    x, idx = np.ones((1, 1, 2, 2, 2), np.float32), np.zeros((1, 1, 2, 2, 2), np.int64)
    out = np.zeros((1, 1, 2, 2, 2), np.float32)
    for wrong_run in (fc.fwd_run, fc.bwd3d_run):
        ts = [fc.tensor(x), fc.tensor(idx), fc.tensor(out)]
        ws, ex = c_uint64(), c_void_p()
        rc = _gws3d(fc, "forward", ts, (2, 2, 2), (1, 1, 1), (0, 0, 0), ctypes.byref(ws),
                    ctypes.byref(ex))
        fc.destroy(*ts)
        assert rc == OK
        buf = np.zeros(ws.value, np.uint8)
        assert wrong_run(buf.ctypes.data, ws.value, ex, None) == INVALID
        assert FWD3D_GWS in fc.err() and fc.live_executors() == 0
    ws, ex, _ = _fwd_executor(fc, [])
    buf = np.zeros(ws, np.uint8)
    assert fc.fwd3d_run(buf.ctypes.data, ws, ex, None) == INVALID and FWD_GWS in fc.err()
    assert fc.live_objects() == live0


# ---- the MaxPool ops ----------------------------------------------------------------------
# aclnnMaxPool2dWithIndices and aclnnMaxPool3dWithArgmax as an Atlas A2/A3 runs them
# (hicann/ops-nn pooling/max_pool3d_with_argmax_v2/op_api): PyTorch's values and flat
# indices; FLOAT16, FLOAT, BF16; dilation 1; 3-D indices INT32 only.

def pool_ref(x, k, kernel, stride, padding, ceil_mode=False, dilation=None):
    """PyTorch's max pooling with indices by loops over channels-first x (rank k + 1 or
    k + 2): start from the first in-bounds tap with -inf, take `v > best or isnan(v)`."""
    lead, spatial = x.shape[:-k], x.shape[-k:]
    dilation = dilation or (1,) * k

    def size(n, kk, s, p, d):
        out = (n + 2 * p - d * (kk - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
        return out - 1 if ceil_mode and (out - 1) * s >= n + p else out

    osz = tuple(size(*a) for a in zip(spatial, kernel, stride, padding, dilation))
    flat = x.reshape(-1, int(np.prod(spatial)))
    values = np.empty((flat.shape[0], int(np.prod(osz))), x.dtype)
    indices = np.empty(values.shape, np.int64)
    for j, o in enumerate(np.ndindex(*osz)):
        start = [oo * s - p for oo, s, p in zip(o, stride, padding)]
        taps = [[st + t * d for t in range(kk) if 0 <= st + t * d < n]
                for st, kk, n, d in zip(start, kernel, spatial, dilation)]
        positions = [int(np.ravel_multi_index(tuple(t[i] for t, i in zip(taps, c)), spatial))
                     for c in np.ndindex(*map(len, taps))]
        for r in range(flat.shape[0]):
            best, arg = -np.inf, positions[0]
            for q in positions:
                v = float(flat[r, q])
                if v > best or np.isnan(v):
                    best, arg = v, q
            values[r, j], indices[r, j] = flat[r, arg], arg
    return values.reshape(*lead, *osz), indices.reshape(*lead, *osz)


def _bf16(a):
    """float32 values exactly representable in bfloat16 -> their bf16 bits (uint16)."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32)
    assert not (bits & 0xFFFF).any()
    return (bits >> 16).astype(np.uint16)


def _pool_gws(fc, k, tensors, window, ceil_mode, ws, ex):
    arrays = [_int_array(fc, a) for a in window]
    try:
        return fc.pool_gws[k](tensors[0], *arrays, ceil_mode, tensors[1], tensors[2], ws, ex)
    finally:
        fc.destroy(*arrays)


def run_pool(fc, k, x, window, ceil_mode=False, *, index_dtype=np.int32, dtype=None,
             out_shape=None, x_t=None, views=None):
    """Full cycle of the k-D pool on x with window (kernel, stride, padding, dilation);
    `dtype` overrides x's aclDataType (BF16 on uint16 bits); `views` = (out, indices,
    out_base, indices_base) for strided outputs. Returns (status, values, indices)."""
    if views is None:
        shape = out_shape or pool_ref(x, k, *window[:3], ceil_mode, window[3])[0].shape
        out, idx = np.full(shape, 77, x.dtype), np.full(shape, -7, index_dtype)
        out_t, idx_t = fc.tensor(out, dtype=dtype), fc.tensor(idx)
    else:
        out, idx, obase, ibase = views
        out_t, idx_t = fc.tensor(out, dtype=dtype, base=obase), fc.tensor(idx, base=ibase)
    ts = [x_t or fc.tensor(x, dtype=dtype), out_t, idx_t]
    rc = _cycle(fc, lambda ws, ex: _pool_gws(fc, k, ts, window, ceil_mode, ws, ex),
                fc.pool_run[k], ts)
    return rc, out, idx


def check_pool_values(fc):
    """Values and indices equal PyTorch's rule for both ops, every dtype, ties (first
    wins), NaN (last wins), -inf windows next to padding, ceil_mode, unbatched, strided
    outputs, and the arrays' short forms (one element, or stride empty)."""
    live0 = fc.baseline()
    rng = np.random.default_rng(7)
    cases = [  # k, shape, window, ceil_mode, index dtype
        (2, (2, 3, 5, 6), ((2, 2), (2, 2), (0, 0), (1, 1)), False, np.int32),
        (2, (3, 7, 5), ((3, 2), (2, 1), (1, 1), (1, 1)), True, np.int64),
        (2, (1, 2, 5, 5), ((3,), (), (1,), (1,)), True, np.int32),  # short forms
        (3, (2, 2, 3, 4, 5), ((2, 2, 2), (2, 2, 2), (0, 1, 1), (1, 1, 1)), False, np.int32),
        (3, (2, 5, 4, 3), ((3, 2, 3), (2, 2, 1), (1, 1, 0), (1, 1, 1)), True, np.int32),
        (3, (1, 1, 4, 4, 4), ((2,), (3,), (1,), (1,)), True, np.int32),
    ]
    for k, shape, window, ceil_mode, idt in cases:
        full = [tuple(w) * (k if len(w) == 1 else 1) for w in window]
        full[1] = full[1] or full[0]
        x = rng.integers(-3, 3, shape).astype(np.float32)  # many ties
        x.reshape(-1)[::7] = np.nan
        x.reshape(-1)[3::11] = np.nan  # some windows hold several NaNs
        x[..., 0, :] = -np.inf  # -inf rows beside the padding
        want_v, want_i = pool_ref(x, k, *full[:3], ceil_mode)
        for dt in (np.float32, np.float16, "bf16"):
            arr = _bf16(x) if dt == "bf16" else x.astype(dt)
            rc, out, idx = run_pool(fc, k, arr, window, ceil_mode, index_dtype=idt,
                                    dtype=BF16 if dt == "bf16" else None,
                                    out_shape=want_v.shape)
            assert rc == OK, (shape, dt, rc, fc.err())
            np.testing.assert_array_equal(idx, want_i.astype(idt))
            # The values are the elements at the indices (which determine them), bit for bit.
            gathered = np.take_along_axis(arr.reshape(*shape[:-k], -1),
                                          idx.reshape(*shape[:-k], -1).astype(np.int64), -1)
            assert gathered.tobytes() == out.reshape(gathered.shape).tobytes()
            run = (POOL2D_RUN if k == 2 else POOL3D_RUN).encode()
            assert fc.last_dtype(run) == (BF16 if dt == "bf16" else ACL_DTYPE[np.dtype(dt)])
            assert fc.last_indices_dtype(run) == ACL_DTYPE[np.dtype(idt)]
    # Strided input and outputs: NHWC buffers described as NCHW views.
    x = rng.standard_normal((2, 5, 6, 3)).astype(np.float32)  # N, H, W, C
    want_v, want_i = pool_ref(x.transpose(0, 3, 1, 2), 2, (2, 3), (2, 2), (1, 1))
    obase = np.zeros((2, 3, 3, 3), np.float32)  # N, oH, oW, C
    ibase = np.zeros((2, 3, 3, 3), np.int64)
    views = (obase.transpose(0, 3, 1, 2), ibase.transpose(0, 3, 1, 2), obase, ibase)
    xv = x.transpose(0, 3, 1, 2)
    rc, out, idx = run_pool(fc, 2, xv, ((2, 3), (2, 2), (1, 1), (1, 1)),
                            x_t=fc.tensor(xv, base=x), views=views)
    assert rc == OK, fc.err()
    np.testing.assert_array_equal(out, want_v)
    np.testing.assert_array_equal(idx, want_i)
    assert fc.live_objects() == live0 and fc.bad_destroys() == 0


def _pool_invalid(fc, k, arrays, window, ceil_mode=False, *, dtypes=(), fmts=(),
                  nulls=()):
    """GetWorkspaceSize of the k-D pool on numpy (x, out, indices); `dtypes`/`fmts`
    override their aclDataTypes/formats; `nulls` names arguments passed as nullptr.
    Returns (status, message, ws, executor)."""
    dtypes = list(dtypes) + [None] * 3
    fmts = list(fmts) + [ND] * 3
    ts = [fc.tensor(a, dtype=d, fmt=f) for a, d, f in zip(arrays, dtypes, fmts)]
    arrs = [_int_array(fc, a) for a in window]
    args = dict(zip(("self", "out", "indices"), ts))
    args.update(zip(("kernelSize", "stride", "padding", "dilation"), arrs))
    for name in nulls:
        args[name] = None
    ws, ex = c_uint64(12345), c_void_p()
    rc = fc.pool_gws[k](args["self"], args["kernelSize"], args["stride"], args["padding"],
                        args["dilation"], ceil_mode, args["out"], args["indices"],
                        None if "workspaceSize" in nulls else ctypes.byref(ws),
                        None if "executor" in nulls else ctypes.byref(ex))
    msg = fc.err()
    if rc == OK:
        fc.release(ex)
    fc.destroy(*ts, *arrs)
    return rc, msg, ws.value, ex.value


def check_pool_refusals(fc):
    """Each check of the two ops, in their order, with its status; nothing is written to
    workspaceSize or executor on failure."""
    live0 = fc.baseline()
    z, f32, i32, i64 = np.zeros, np.float32, np.int32, np.int64
    W2, W3 = ((2, 2), (2, 2), (0, 0), (1, 1)), ((2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1))
    X2, O2 = (1, 2, 4, 4), (1, 2, 2, 2)
    X3, O3 = (1, 2, 4, 4, 4), (1, 2, 2, 2, 2)
    ok2 = (z(X2, f32), z(O2, f32), z(O2, i64))
    ok3 = (z(X3, f32), z(O3, f32), z(O3, i32))
    for k, ok, window in ((2, ok2, W2), (3, ok3, W3)):
        rc, msg, ws, ex = _pool_invalid(fc, k, ok, window)
        assert rc == OK and ws > 0, (k, rc, msg)
        for name in ("self", "kernelSize", "stride", "padding", "dilation", "out", "indices",
                     "workspaceSize", "executor"):
            rc, msg, ws, ex = _pool_invalid(fc, k, ok, window, nulls=(name, "indices"))
            first = "indices" if name in ("workspaceSize", "executor") else name
            assert rc == NULLPTR and f"{first} is nullptr" in msg, (k, name, msg)
            assert ws == 12345 and ex is None
    cases2 = [  # arrays, window, ceil_mode, overrides, word
        ((z(X2, np.float64), z(O2, np.float64), z(O2, i64)), W2, {}, "DOUBLE"),
        ((z(X2, i32), z(O2, i32), z(O2, i64)), W2, {}, "INT32 (3) is not supported"),
        ((z(X2, f32), z(O2, np.float16), z(O2, i64)), W2, {}, "out dtype"),
        ((z(X2, f32), z(O2, f32), z(O2, np.int16)), W2, {}, "INT64 or INT32"),
        ((z(X2, f32), z(O2, f32), z(O2, i64)), W2, {"fmts": (ND, NCHW)}, "Format of input"),
        ((z((2, 4), f32), z((2, 2), f32), z((2, 2), i64)), W2, {}, "3D or 4D"),
        ((z((1, *X2), f32), z((1, *O2), f32), z((1, *O2), i64)), W2, {}, "3D or 4D"),
        ((z((2, 4), np.float64), z((2, 2), f32), z((2, 2), i64)), W2, {}, "DOUBLE"),  # order
        (ok2, ((2, 2, 2), (2, 2), (0, 0), (1, 1)), {}, "kernelSize must be one or two"),
        (ok2, ((2, 2), (2, 2, 2), (0, 0), (1, 1)), {}, "stride must be zero, one or two"),
        (ok2, ((2, 2), (2, 2), (), (1, 1)), {}, "padding must be one or two"),
        (ok2, ((2, 2), (2, 2), (0, 0), ()), {}, "dilation must be one or two"),
        (ok2, ((0, 2), (2, 2), (0, 0), (1, 1)), {}, "kernel should be greater than 0"),
        (ok2, ((2, 2), (2, 0), (0, 0), (1, 1)), {}, "stride should be greater than 0"),
        (ok2, ((2, 2), (2, 2), (2, 0), (1, 1)), {}, "half of kernel size"),
        (ok2, ((2, 2), (2, 2), (-1, 0), (1, 1)), {}, "half of kernel size"),
        (ok2, ((2, 2), (2, 2), (0, 0), (2, 1)), {}, "dilation only support 1"),
        ((z((1, 2, 0, 4), f32), z((1, 2, 0, 2), f32), z((1, 2, 0, 2), i64)), W2, {},
         "optional 0 dim batch size"),
        ((z((1, 2, 1, 4), f32), z((1, 2, 0, 2), f32), z((1, 2, 0, 2), i64)), W2, {},
         "calc out size"),
        ((z(X2, f32), z((1, 2, 2, 3), f32), z((1, 2, 2, 3), i64)), W2, {}, "out shape"),
        ((z(X2, f32), z(O2, f32), z((1, 2, 2, 1), i64)), W2, {}, "indices shape"),
    ]
    cases3 = [
        ((z(X3, np.float64), z(O3, np.float64), z(O3, i32)), W3, {}, "DOUBLE"),
        ((z(X3, f32), z(O3, f32), z(O3, i64)), W3, {}, "INT64 (9) is not supported"),
        ((z(X3, f32), z(O3, np.float16), z(O3, i32)), W3, {}, "out dtype"),
        ((z(X3, f32), z(O3, f32), z(O3, i32)), W3, {"fmts": (ND, NCHW)}, "input and output"),
        ((z(X3, f32), z(O3, f32), z(O3, i32)), W3, {"fmts": (ND, ND, NCHW)}, "and indices"),
        ((z((2, 4, 4), f32), z((2, 2, 2), f32), z((2, 2, 2), i32)), W3, {}, "4D or 5D"),
        (ok3, ((2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1)), {}, "kernelSize can be only 1 or 3"),
        (ok3, ((0, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1)), {}, "kernel should be greater"),
        (ok3, ((2, 2, 2), (2, 2), (0, 0, 0), (1, 1, 1)), {}, "stride can be only 1 or 3"),
        (ok3, ((2, 2, 2), (2, 2, -1), (0, 0, 0), (1, 1, 1)), {}, "stride should be greater"),
        (ok3, ((2, 2, 2), (2, 2, 2), (0, 0), (1, 1, 1)), {}, "padding can be only 1 or 3"),
        (ok3, ((2, 2, 2), (2, 2, 2), (0, 0, 2), (1, 1, 1)), {}, "half of kernel size"),
        (ok3, ((2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1)), {}, "dilation can be only 1 or 3"),
        (ok3, ((2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 2)), {}, "dilation only support 1"),
        ((z(X3, f32), z((1, 2, 2, 2, 3), f32), z(O3, i32)), W3, {}, "The out tensor's shape"),
        ((z(X3, f32), z(O3, f32), z((1, 2, 2, 2, 1), i32)), W3, {},
         "The indices tensor's shape"),
    ]
    for k, cases in ((2, cases2), (3, cases3)):
        for arrays, window, kw, word in cases:
            rc, msg, ws, ex = _pool_invalid(fc, k, arrays, window, **kw)
            assert rc == INVALID and word in msg and "161002" in msg, (k, word, rc, msg)
            assert ws == 12345 and ex is None, word
    # The 3-D op returns before its shape checks when self or out is empty.
    rc, msg, ws, ex = _pool_invalid(fc, 3, (z((0, 2, 4, 4, 4), f32), z((0, 9, 9, 9, 9), f32),
                                            z((0, 1, 1, 1, 1), i32)), W3)
    assert rc == OK and ws == 0, (rc, msg)
    assert fc.live_objects() == live0 and fc.bad_destroys() == 0


def check_pool_empty_workspace_and_volume(fc):
    """An empty batch: workspace 0 and a null workspace at launch; otherwise a size that
    depends on the problem and differs between the ops. A plane or volume over INT_MAX
    positions: the l0op gives no tensor, ACLNN_ERR_INNER_NULLPTR."""
    live0 = fc.baseline()
    for k, shape in ((2, (0, 2, 4, 4)), (3, (0, 2, 4, 4, 4))):
        x = np.zeros(shape, np.float32)
        rc, out, _ = run_pool(fc, k, x, ((2,) * k, (2,) * k, (0,) * k, (1,) * k))
        assert rc == OK and fc.last_workspace_size() == 0 and out.shape[0] == 0, (k, rc)
    sizes = set()
    for k, shape in ((2, (1, 1, 4, 4)), (2, (2, 2, 4, 4)), (3, (1, 1, 4, 4, 4))):
        x = np.ones(shape, np.float32)
        assert run_pool(fc, k, x, ((2,) * k, (2,) * k, (0,) * k, (1,) * k))[0] == OK
        sizes.add(fc.last_workspace_size())
    assert len(sizes) == 3 and 0 not in sizes, sizes
    # Stride-0 views of one element: the shapes without the memory.
    one, small = np.zeros(1, np.float32), np.zeros(1, np.int32)
    for k, spatial in ((2, (65536, 32769)), (3, (1024, 1024, 2049))):
        out_sp = tuple(n // 2 for n in spatial)
        ts = [fc.aclCreateTensor(_i64s((1, 1, *s)), k + 2, d, _i64s([0] * (k + 2)), 0, ND,
                                 _i64s((1,)), 1, m.ctypes.data)
              for s, d, m in ((spatial, FLOAT, one), (out_sp, FLOAT, one),
                              (out_sp, INT32, small))]
        ws, ex = c_uint64(12345), c_void_p()
        rc = _pool_gws(fc, k, ts, ((2,) * k, (2,) * k, (0,) * k, (1,) * k), False,
                       ctypes.byref(ws), ctypes.byref(ex))
        msg = fc.err()
        fc.destroy(*ts)
        assert rc == INNER_NULLPTR and "INT_MAX" in msg and ws.value == 12345, (k, rc, msg)
    assert fc.live_objects() == live0


# SoC names as aclrtGetSocName returns them (hicann/runtime
# src/platform/platform_config/{cann,cann-dev}/*.ini: SoC_version) -> the Short_SoC_version
# the 2-D op names in "support for ... is not implemented" (hicann/opbase
# src/nnopbase/composite_op/utils/platform.cpp, ToString), for chips without the pool ops.
# "Ascend910B" is the first 910's 30-core bin (NpuArch 1001), not an Atlas A2.
CHIPS_WITHOUT_POOLS = {"Ascend910": "Ascend910", "Ascend910A": "Ascend910",
                       "Ascend910B": "Ascend910",
                       "Ascend910ProB": "Ascend910", "Ascend310P3": "Ascend310P",
                       "Ascend310B1": "Ascend310B", "Ascend999": "UnknownSocVersion",
                       None: "UnknownSocVersion"}
# Atlas A2 (NpuArch 2201), Atlas A3 (2201), Ascend 950 (3510, regbase).
CHIPS_WITH_POOLS = ("Ascend910B1", "Ascend910B4-1", "Ascend910_9391", "Ascend950PR_9599",
                    "Ascend950DT_9591")


def check_pool_chips(fc):
    """aclrtGetSocName names the emulated chip (Ascend910B1 by default) and the pool ops
    check it as CANN's sources do: on chips without them the 2-D op's dtype list is empty
    after its nullptr checks (161002 "support for <short SoC name> is not implemented") and
    the 3-D op's CheckPlatform refuses before every other check; the Ascend 950 (regbase)
    takes dilation > 1 and INT64 3-D indices, an Atlas A2/A3 neither. The unpool ops do not
    look at the chip (no SoC check in aclnn_max_unpool*.cpp)."""
    live0 = fc.baseline()
    assert fc.aclrtGetSocName() == b"Ascend910B1"
    z, f32, i32, i64 = np.zeros, np.float32, np.int32, np.int64
    W2, W3 = ((2, 2), (2, 2), (0, 0), (1, 1)), ((2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1))
    ok2 = (z((1, 2, 4, 4), f32), z((1, 2, 2, 2), f32), z((1, 2, 2, 2), i64))
    ok3 = (z((1, 2, 4, 4, 4), f32), z((1, 2, 2, 2, 2), f32), z((1, 2, 2, 2, 2), i32))
    rng = np.random.default_rng(11)
    try:
        for name, short in CHIPS_WITHOUT_POOLS.items():
            fc.set_soc_name(None if name is None else name.encode())
            assert fc.aclrtGetSocName() == (None if name is None else name.encode())
            rc, msg, ws, ex = _pool_invalid(fc, 2, ok2, W2)
            assert rc == INVALID and f"support for {short} is not implemented" in msg, (name, msg)
            assert ws == 12345 and ex is None
            rc, msg, _, _ = _pool_invalid(fc, 2, ok2, W2, nulls=("self",))
            assert rc == NULLPTR and "self is nullptr" in msg, (name, msg)
            for nulls in ((), ("self",)):
                rc, msg, ws, ex = _pool_invalid(fc, 3, ok3, W3, nulls=nulls)
                assert rc == INVALID and ws == 12345 and ex is None, (name, nulls, rc)
                assert "aclnnMaxPool3dWithArgmax is not supported on this platform" in msg, msg
            x = rng.standard_normal((1, 1, 2, 2)).astype(f32)
            idx = np.array([[[[0, 5], [2, 8]]]], i32)
            rc, out = run_fwd(fc, x, idx, (3, 3))
            assert rc == OK and (out == forward_ref(x, idx, (3, 3))).all(), (name, fc.err())
        for name in CHIPS_WITH_POOLS:
            fc.set_soc_name(name.encode())
            regbase = name.startswith("Ascend950")
            for k, shape, window in (
                (2, (2, 3, 7, 6), ((2, 3), (1, 2), (1, 1), (2, 1))),
                (3, (1, 2, 5, 4, 6), ((2, 2, 3), (1, 2, 2), (1, 0, 1), (2, 1, 2))),
            ):
                x = rng.standard_normal(shape).astype(f32)
                for dilation, idt in (((1,) * k, i32), (window[3], i64 if k == 3 else i32)):
                    want_v, want_i = pool_ref(x, k, *window[:3], dilation=dilation)
                    rc, out, idx = run_pool(fc, k, x, (*window[:3], dilation),
                                            index_dtype=idt)
                    if dilation == (1,) * k or regbase:
                        assert rc == OK, (name, k, dilation, fc.err())
                        np.testing.assert_array_equal(out, want_v)
                        np.testing.assert_array_equal(idx, want_i.astype(idt))
                    else:  # Atlas A2/A3: dilation 1 only; 3-D indices INT32 only
                        assert rc == INVALID, (name, k, rc)
                        word = "INT64 (9) is not supported" if k == 3 else "dilation only"
                        assert word in fc.err()
            rc, msg, _, _ = _pool_invalid(fc, 2, ok2, (*W2[:3], (0, 1)))
            assert rc == INVALID, (name, rc)
            assert ("greater than 0" if regbase else "dilation only support 1") in msg, msg
    finally:
        fc.reset()
    assert fc.aclrtGetSocName() == b"Ascend910B1"  # reset restores the default chip
    assert fc.live_objects() == live0 and fc.bad_destroys() == 0


# ---- the ops-math ops --------------------------------------------------------------------
# aclnnClamp, aclnnMax and aclnnMin, as the handlers use them on indices (INT32, INT64).

def run_clamp(fc, x, lo, hi, out=None, *, bound_dtype=None, stream=None):
    """Full aclnnClamp cycle over INT32/INT64 array x; returns (status, out)."""
    if out is None:
        out = np.full_like(x, 77)
    dtype = ACL_DTYPE[x.dtype] if bound_dtype is None else bound_dtype
    ts = [fc.tensor(x), fc.tensor(out)]
    bounds = [None if b is None else fc.scalar(b, dtype) for b in (lo, hi)]
    rc = _cycle(fc, lambda ws, ex: fc.clamp_gws(ts[0], bounds[0], bounds[1], ts[1], ws, ex),
                fc.math_run["clamp"], [*ts, *bounds], stream)
    return rc, out


def run_reduce(fc, which, x, out=None, *, base=None):
    """Full aclnnMax / aclnnMin cycle over x (a view into `base` when given) into a 0-d
    out; returns (status, out)."""
    if out is None:
        out = np.full((), 77, x.dtype)
    ts = [fc.tensor(x, base=base), fc.tensor(out)]
    rc = _cycle(fc, lambda ws, ex: fc.reduce_gws[which](ts[0], ts[1], ws, ex),
                fc.math_run[which], ts)
    return rc, out


def check_math_values(fc):
    """Clamp, Max and Min give numpy's values for INT32 and INT64, strided views too."""
    rng = np.random.default_rng(3)
    for dtype in (np.int32, np.int64):
        x = rng.integers(-50, 80, (3, 4, 5)).astype(dtype)
        live0 = fc.baseline()
        rc, out = run_clamp(fc, x, 0, 41)
        assert rc == OK, fc.err()
        np.testing.assert_array_equal(out, np.clip(x, 0, 41))
        rc, out = run_clamp(fc, x, None, 9)  # one bound: the other is the dtype's limit
        assert rc == OK and np.array_equal(out, np.minimum(x, 9)), fc.err()
        for which, ref in (("max", np.max), ("min", np.min)):
            rc, out = run_reduce(fc, which, x)
            assert rc == OK and out == ref(x), (which, fc.err())
        base = rng.integers(-9, 9, (4, 6)).astype(dtype)
        view = base[:, ::2]
        rc, out = run_reduce(fc, "max", view, base=base)
        assert rc == OK and out == view.max(), fc.err()
        assert fc.live_objects() == live0, "objects leaked"


def check_math_refusals(fc):
    """The documented refusals and the emulator's own: a bound out's dtype cannot hold
    (the real op would wrap it), floats (not emulated), mismatched dtypes or shapes, an
    out overlapping self, a reduction into more than one element."""
    x32 = np.arange(12, dtype=np.int32).reshape(3, 4)
    cases = [
        ("does not fit out's INT32", lambda: run_clamp(fc, x32, 0, 2**31, bound_dtype=INT64)),
        ("must not be None", lambda: run_clamp(fc, x32, None, None)),
        ("is not emulated", lambda: run_clamp(fc, x32.astype(np.float32), 0, 3,
                                              bound_dtype=INT64)),
        ("must equal self dtype", lambda: run_clamp(fc, x32, 0, 3,
                                                    out=np.zeros((3, 4), np.int64))),
        ("must equal self shape", lambda: run_clamp(fc, x32, 0, 3,
                                                    out=np.zeros((4, 3), np.int32))),
        ("integer bounds", lambda: run_clamp(fc, x32, 0, 3, bound_dtype=DOUBLE)),
        ("overlaps", lambda: run_clamp(fc, x32, 0, 3, out=x32)),
        ("must hold one element", lambda: run_reduce(fc, "max", x32,
                                                      out=np.zeros(2, np.int32))),
    ]
    for what, call in cases:
        fc.baseline()
        rc, _ = call()
        message = fc.last_error_message().decode()
        assert rc in (INVALID, NULLPTR) and what in message, (what, rc, message)


def check_clamp_int32_only(fc):
    """fakecann_set_clamp_int32_only: aclnnClampGetWorkspaceSize refuses INT64 with 161002
    and takes INT32 as before; fakecann_reset ends it."""
    x = np.arange(-3, 9, dtype=np.int64).reshape(3, 4)
    fc.baseline()
    fc.set_clamp_int32_only(1)
    rc, _ = run_clamp(fc, x, 0, 5)
    assert rc == INVALID and "INT32 only" in fc.last_error_message().decode()
    rc, out = run_clamp(fc, x.astype(np.int32), 0, 5)
    assert rc == OK and np.array_equal(out, np.clip(x, 0, 5)), fc.err()
    fc.reset()
    rc, out = run_clamp(fc, x, 0, 5)
    assert rc == OK and np.array_equal(out, np.clip(x, 0, 5)), fc.err()


def check_scalars(fc):
    """aclCreateScalar copies the value; scalars are tracked like the other objects."""
    live0 = fc.baseline()
    a = fc.scalar(7, INT32)
    assert a and fc.live_scalars() == 1 and fc.live_objects() == live0 + 1
    fc.destroy(a)
    assert fc.aclDestroyScalar(a) == INVALID  # a second destroy is caught
    assert fc.live_objects() == live0
    fc.reset()


def check_memcpy(fc):
    """aclrtMemcpy copies (host memory here), refuses more than destMax, records its kind."""
    fc.reset()
    src, dst = np.arange(4, dtype=np.int64), np.zeros(4, np.int64)
    assert fc.aclrtMemcpy(dst.ctypes.data, 32, src.ctypes.data, 32, 2) == OK
    assert np.array_equal(dst, src) and fc.last_memcpy_kind() == 2
    assert fc.aclrtMemcpy(dst.ctypes.data, 8, src.ctypes.data, 32, 2) != OK
    assert fc.call_count(b"aclrtMemcpy") == 2


def check_last_indices(fc):
    """An unpool execution records the indices it received, an out-of-range one too."""
    x = np.ones((1, 1, 2, 2), np.float32)
    idx = np.array([0, 3, 5, 1], np.int32).reshape(1, 1, 2, 2)
    fc.reset()
    assert fc.last_indices(FWD_RUN) is None
    assert run_fwd(fc, x, idx, (2, 3))[0] == OK
    assert fc.last_indices(FWD_RUN) == [0, 3, 5, 1]
    idx.reshape(-1)[2] = 1000
    assert run_fwd(fc, x, idx, (2, 3))[0] == RUNTIME
    assert fc.last_indices(FWD_RUN) == [0, 3, 1000, 1]


ALL_CHECKS = [
    check_seed_example,
    check_forward_values,
    check_backward_values,
    check_bits_survive,
    check_strided_views,
    check_nullptr_161001,
    check_forward_param_invalid_161002,
    check_backward_param_invalid_161002,
    check_memory_extras,
    check_single_use_executor,
    check_workspace,
    check_index_out_of_range,
    check_fail_next,
    check_destroy,
    check_error_messages,
    check_rt_memory,
    check_zero_size,
    check_threads,
    check_opapi_nn_variant,
    check_int64_indices_only,
    check_current_context,
    check_current_device,
    check_launch_records,
    check_pool2d_float_only,
    check_layouts,
    check_3d_forward_values,
    check_3d_backward_values,
    check_3d_nullptr_161001,
    check_3d_forward_param_invalid_161002,
    check_3d_backward_param_invalid_161002,
    check_3d_empty_and_workspace,
    check_3d_index_out_of_range,
    check_3d_executors_are_their_own,
    check_pool_values,
    check_pool_refusals,
    check_pool_empty_workspace_and_volume,
    check_pool_chips,
    check_math_values,
    check_math_refusals,
    check_clamp_int32_only,
    check_scalars,
    check_memcpy,
    check_last_indices,
]


def main(argv: list[str]) -> int:
    """``check_fake_cann.py [LIB_DIR]``: checks an existing build in LIB_DIR (e.g. one made
    with ``extra_flags=("-fsanitize=address",)``), else a fresh build in a temp dir."""
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = pathlib.Path(argv[1]) if len(argv) > 1 else build(pathlib.Path(tmp))
        fc = FakeCann(lib_dir)
        failed = 0
        for check in ALL_CHECKS:
            try:
                check(fc)
                print(f"ok    {check.__name__}")
            except Exception as e:  # noqa: BLE001
                failed += 1
                traceback.print_exc()
                print(f"FAIL  {check.__name__}: {e!r}")
        fc.reset()
        leaked = fc.live_objects()
        print(f"live objects at exit: {leaked}; bad destroys: {fc.bad_destroys()}")
        return 1 if failed or leaked else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
