"""The recording XLA runtime stand-in (fake_xla_ffi.cc): builds it against jax's FFI
headers and calls FFI handlers through it with ctypes.

    lib_dir = build(out_dir)             # libfakexlaffi.so, a stamp skips an up-to-date build
    xla = FakeXla(lib_dir)
    xla.set_stream(0x57EA)               # what XLA_FFI_Stream_Get hands out
    code, message = xla.call(handler, [x, indices], [out], {"channels_last": False})

`handler` is a handler's address (`handler_address(capsule)` of the extension's
npu_registrations()); arguments and results are numpy arrays (results are written in
place); attributes are bools or tuples of ints (int64 arrays). The code is XLA's error
code, 0 on success. The emulated CANN must be loaded in the same process for the aclnn
handlers to run (the extension's load_cann).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import pathlib
import subprocess
import tempfile
from ctypes import POINTER, c_char_p, c_int32, c_int64, c_size_t, c_uint64, c_void_p

import numpy as np

from fake_cann.build import _compiler  # the same compiler choice

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE / "fake_xla_ffi.cc"
# The package's own FFI headers (jaxlib 0.7.2's, vendored), never the installed jaxlib's:
# the handlers under test were compiled against these.
FFI_INCLUDE = HERE.parents[1] / "ffi" / "third_party"
LIBRARY = "libfakexlaffi.so"
CXXFLAGS = ("-std=c++17", "-O1", "-g", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall",
            "-Wextra", "-pthread")

# XLA_FFI_DataType of the numpy dtypes the tests pass.
XLA_DTYPE = {"bool": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint8": 6,
             "uint16": 7, "uint32": 8, "uint64": 9, "float16": 10, "float32": 11,
             "float64": 12, "bfloat16": 16}
# XLA_FFI_Error_Code
CODES = {0: "OK", 3: "INVALID_ARGUMENT", 8: "RESOURCE_EXHAUSTED", 9: "FAILED_PRECONDITION",
         11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED", 13: "INTERNAL"}


def build(out_dir: pathlib.Path) -> pathlib.Path:
    """Compiles libfakexlaffi.so into `out_dir` against the package's FFI headers; returns
    it."""
    include = FFI_INCLUDE
    header = pathlib.Path(include) / "xla" / "ffi" / "api" / "c_api.h"
    out_dir = pathlib.Path(out_dir).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    cxx = _compiler()
    key = hashlib.sha256(b"\0".join([SOURCE.read_bytes(), header.read_bytes(), cxx.encode(),
                                     *map(str.encode, CXXFLAGS)])).hexdigest()
    stamp = out_dir / ".fakexla-build"
    if stamp.is_file() and stamp.read_text() == key and (out_dir / LIBRARY).is_file():
        return out_dir
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".fakexla-tmp-") as tmp:
        target = pathlib.Path(tmp) / LIBRARY
        cmd = [cxx, *CXXFLAGS, f"-I{include}", "-o", str(target), str(SOURCE)]
        proc = subprocess.run(cmd, check=False, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building {LIBRARY} failed:\n{' '.join(cmd)}\n{proc.stderr}")
        os.replace(target, out_dir / LIBRARY)
        (pathlib.Path(tmp) / "stamp").write_text(key)
        os.replace(pathlib.Path(tmp) / "stamp", stamp)
    return out_dir


def handler_address(capsule) -> int:
    """The address in a capsule of the extension's handler dicts."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = c_void_p, [ctypes.py_object, c_char_p]
    return get(capsule, None)


class _Buffer(ctypes.Structure):
    _fields_ = [("dtype", c_int32), ("data", c_void_p), ("rank", c_int64),
                ("dims", POINTER(c_int64))]


class _Attr(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("kind", c_int32), ("size", c_int64),
                ("values", POINTER(c_int64))]


class FakeXla:
    """libfakexlaffi.so with typed entry points."""

    def __init__(self, lib_dir: pathlib.Path):
        lib = ctypes.CDLL(str(pathlib.Path(lib_dir) / LIBRARY))
        self._call = lib.fx_call
        self._call.restype = c_int32
        self._call.argtypes = [c_void_p, c_int64, POINTER(_Buffer), c_int64, POINTER(_Buffer),
                               c_int64, POINTER(_Attr), c_char_p, c_size_t]
        for name, restype, argtypes in (
                ("set_stream", None, [c_void_p, c_int32]),
                ("set_device_ordinal", None, [c_int32, c_int32]),
                ("set_scratch_refused", None, [c_int32]),
                ("set_api_struct_size", None, [c_size_t]),
                ("device_ordinal_offset", c_size_t, []),
                ("count", c_int64, [c_char_p]),
                ("live_scratch", c_int64, []),
                ("last_allocation", c_void_p, []),
                ("allocation", c_void_p, [c_int64]),
                ("last_allocation_size", c_uint64, []),
                ("last_alignment", c_uint64, []),
                ("reset", None, [])):
            fn = getattr(lib, "fx_" + name)
            fn.restype, fn.argtypes = restype, argtypes
            setattr(self, "_" + name if name in ("set_stream", "count") else name, fn)

    def set_stream(self, stream: int | None, fails: bool = False) -> None:
        self._set_stream(stream, int(fails))

    def count(self, what: str) -> int:
        return self._count(what.encode())

    def call(self, handler: int, args, rets, attrs=None) -> tuple[int, str]:
        """Calls `handler` with numpy arrays `args` and `rets` (written in place) and
        `attrs` ({name: bool or tuple of ints}); returns (XLA error code, message)."""
        keep = []

        def buffers(arrays):
            out = (_Buffer * max(len(arrays), 1))()
            for b, a in zip(out, arrays):
                assert a.flags.c_contiguous
                dims = (c_int64 * max(a.ndim, 1))(*a.shape)
                keep.append(dims)
                b.dtype, b.data, b.rank = XLA_DTYPE[a.dtype.name], a.ctypes.data, a.ndim
                b.dims = ctypes.cast(dims, POINTER(c_int64))
            return out

        attrs = attrs or {}
        attr_array = (_Attr * max(len(attrs), 1))()
        for a, (name, value) in zip(attr_array, attrs.items()):
            values = [int(value)] if isinstance(value, (bool, np.bool_)) else list(value)
            storage = (c_int64 * max(len(values), 1))(*values)
            keep.append(storage)
            a.name, a.size = name.encode(), len(values)
            a.kind = 0 if isinstance(value, (bool, np.bool_)) else 1
            a.values = ctypes.cast(storage, POINTER(c_int64))
        message = ctypes.create_string_buffer(8192)
        code = self._call(handler, len(args), buffers(args), len(rets), buffers(rets),
                          len(attrs), attr_array, message, len(message))
        return code, message.value.decode()
