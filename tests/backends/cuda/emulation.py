"""The CUDA handlers' host emulation (emulation.cc): built with the system C++ compiler
against the headers of ffi/ and the package's vendored XLA FFI headers (ffi/third_party), and called through
ctypes with numpy arrays. See emulation.cc for what it runs and what it does not.

``build(out_dir)`` compiles it (skipped when a stamp matches the sources' hash) and returns
an ``Emulation``, whose methods take and return numpy arrays and raise ``HandlerError``
(the ffi::Error code and message) when the handler fails the call.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
import pathlib
import shutil
import subprocess
import tempfile

import jax
import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
FFI = HERE.parents[2] / "ffi"
HEADERS = sorted([*FFI.glob("cuda/*.h"), *FFI.glob("common/*.h")])
CXXFLAGS = ("-std=c++17", "-O2", "-fPIC", "-shared", "-Wall", "-Wextra", "-Werror")
LIBRARY = "libcuda_emulation.so"

# ffi::ErrorCode values (xla/ffi/api/c_api.h): what a failed call reports.
INVALID_ARGUMENT, OUT_OF_RANGE = 3, 11
# The forward's path (Path in emulation.cc).
(NOTHING, GENERAL, WINDOWED, WINDOWED_THEN_GENERAL, TILED, TILED_THEN_GENERAL, PLANE_TILED,
 PLANE_TILED_THEN_GENERAL) = range(8)
# The pool's kernel (PoolPath in emulation.cc).
NO_POOL, WINDOWS_32, WINDOWS_64, PLANE_2X2, PLANE_3X3 = range(5)


class HandlerError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(f"[{code}] {message}")
        self.code, self.message = code, message


class _Buffer(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_char_p), ("data", ctypes.c_void_p), ("rank", ctypes.c_int64),
                ("dims", ctypes.POINTER(ctypes.c_int64))]


def _compiler() -> str:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return name
    raise RuntimeError("no C++ compiler found (set CXX, or install g++)")


def build(out_dir: pathlib.Path) -> Emulation:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cxx = _compiler()
    # The package's FFI headers (vendored), as the handlers are built with.
    command = [cxx, *CXXFLAGS, f"-I{FFI}", "-isystem", str(FFI / "third_party"), "-o"]
    digest = hashlib.sha256(" ".join(command).encode())
    for path in (HERE / "emulation.cc", *HEADERS):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    library, stamp = out_dir / LIBRARY, out_dir / f"{LIBRARY}.stamp"
    if not (library.is_file() and stamp.is_file() and stamp.read_text() == digest.hexdigest()):
        with tempfile.TemporaryDirectory(dir=out_dir) as tmp:
            built = pathlib.Path(tmp) / LIBRARY
            proc = subprocess.run([*command, str(built), str(HERE / "emulation.cc")],
                                  capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise RuntimeError(f"building the CUDA emulation failed:\n{proc.stderr}")
            os.replace(built, library)
        stamp.write_text(digest.hexdigest())
    return Emulation(ctypes.CDLL(str(library)))


def _buffer(a: np.ndarray) -> _Buffer:
    dims = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
    buffer = _Buffer(np.dtype(a.dtype).name.encode(), a.ctypes.data, a.ndim, dims)
    buffer._keep = (a, dims)  # alive as long as the struct
    return buffer


def _pool_input_shape(shape, g) -> tuple:
    s = len(shape) - g.k - (1 if g.channels_last else 0)
    return (*shape[:s], *g.in_size, *shape[s + g.k:])


def _pool_output_shape(shape, g) -> tuple:
    s = len(shape) - g.k - (1 if g.channels_last else 0)
    return (*shape[:s], *g.out_size, *shape[s + g.k:])


def _longs(values) -> ctypes.Array:
    values = [int(v) for v in values]
    return (ctypes.c_int64 * max(len(values), 1))(*values)


class Emulation:
    """The three handlers on the host. Results are allocated filled with a pattern
    (0xA5 bytes), so that an element a kernel forgets to write shows."""

    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib
        buffer, i64, u64 = _Buffer, ctypes.c_int64, ctypes.c_uint64
        text, longs = ctypes.c_char_p, ctypes.POINTER(ctypes.c_int64)
        lib.ju_forward.argtypes = [buffer, buffer, buffer, buffer, ctypes.c_int, ctypes.c_int, i64,
                                   longs, i64, u64, ctypes.POINTER(ctypes.c_int), text, i64]
        lib.ju_backward.argtypes = [buffer, buffer, buffer, buffer, ctypes.c_int, i64, u64, text,
                                    i64]
        lib.ju_pool.argtypes = [buffer, buffer, buffer, ctypes.c_int, longs, longs, longs, longs,
                                i64, ctypes.c_int, u64, ctypes.POINTER(ctypes.c_int), text, i64]
        window = [ctypes.c_int, longs, longs, longs, longs, i64, ctypes.c_int]
        lib.ju_forward_window.argtypes = [buffer, buffer, buffer, buffer, ctypes.c_int, *window,
                                          u64, ctypes.POINTER(ctypes.c_int), text, i64]
        lib.ju_backward_window.argtypes = [buffer, buffer, buffer, buffer, *window, u64, text,
                                           i64]
        lib.ju_pool_window.argtypes = [buffer, buffer, buffer, *window, u64,
                                       ctypes.POINTER(ctypes.c_int), text, i64]
        lib.ju_window_indices.argtypes = [buffer, buffer, *window, longs, u64, text, i64]
        lib.ju_set_wide_offsets.argtypes = [ctypes.c_int]
        lib.ju_position_bytes.argtypes = [i64, i64, i64]
        lib.ju_position_bytes.restype = i64
        lib.ju_divider_mismatches.argtypes = [u64, i64]
        lib.ju_divider_mismatches.restype = i64

    @staticmethod
    def _check(code: int, message: ctypes.Array) -> None:
        if code != 0:
            raise HandlerError(code, message.value.decode())

    @staticmethod
    def _result(shape, dtype) -> np.ndarray:
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return np.frombuffer(b"\xa5" * size, np.uint8).view(dtype).reshape(shape).copy()

    def forward(self, x, indices, out_shape, *, channels_last=False, k=2, window=None,
                checked=False, workspace_bytes=None, seed=0):
        """The forward handler; returns (out, path). `window` is (extent, stride, padding)
        or None; the workspace is sized as the CUDA lowering sizes it, or
        `workspace_bytes`."""
        from jax_unpool.backends import cuda
        x, indices = np.ascontiguousarray(x), np.ascontiguousarray(indices)
        out = self._result(out_shape, x.dtype)
        if workspace_bytes is None:
            aval = jax.core.ShapedArray(tuple(out_shape), x.dtype)
            s = len(out_shape) - k - (1 if channels_last else 0)
            per_element = cuda.position_bytes(x.dtype.itemsize, int(np.prod(x.shape[s:s + k])),
                                              int(np.prod(out_shape[s:s + k])))
            workspace_bytes = int(np.prod(cuda._workspace(aval, channels_last, k,
                                                          per_element).shape))
        workspace = self._result((workspace_bytes,), np.uint8)
        flat = [] if window is None else [v for part in window for v in part]
        path, message = ctypes.c_int(-1), ctypes.create_string_buffer(4096)
        code = self._lib.ju_forward(_buffer(x), _buffer(indices), _buffer(out), _buffer(workspace),
                                    int(checked), int(channels_last), k, _longs(flat), len(flat),
                                    seed, ctypes.byref(path), message, len(message))
        self._check(code, message)
        return out, path.value

    def backward(self, grad, indices, *, channels_last=False, k=2, checked=False, seed=0):
        grad, indices = np.ascontiguousarray(grad), np.ascontiguousarray(indices)
        out = self._result(indices.shape, grad.dtype)
        lead = indices.ndim - k - (1 if channels_last else 0)
        workspace = (self._result((*indices.shape[:lead], 16), np.uint8) if checked
                     else np.zeros((0,), np.uint8))
        ws = _buffer(workspace)
        if not checked:
            ws.data = None
        message = ctypes.create_string_buffer(4096)
        code = self._lib.ju_backward(_buffer(grad), _buffer(indices), _buffer(out), ws,
                                     int(channels_last), k, seed, message, len(message))
        self._check(code, message)
        return out

    def pool(self, x, kernel, stride, padding, dilation, ceil_mode=False, *,
             channels_last=False, index_dtype=np.int32, out_shape=None, seed=0, path=None):
        """The pool handler; `out_shape` defaults to PyTorch's output size. `path`, a list,
        receives the kernel taken (WINDOWS_32 ... PLANE_3X3)."""
        x = np.ascontiguousarray(x)
        k = len(kernel)
        if out_shape is None:
            from numpy_oracle import pool_output_size
            s = x.ndim - k - (1 if channels_last else 0)
            sizes = [pool_output_size(x.shape[s + a], kernel[a], stride[a], padding[a],
                                      dilation[a], ceil_mode) for a in range(k)]
            out_shape = (*x.shape[:s], *sizes, *x.shape[s + k:])
        values = self._result(out_shape, x.dtype)
        indices = self._result(out_shape, index_dtype)
        message, taken = ctypes.create_string_buffer(4096), ctypes.c_int(-1)
        code = self._lib.ju_pool(_buffer(x), _buffer(values), _buffer(indices), int(channels_last),
                                 _longs(kernel), _longs(stride), _longs(padding), _longs(dilation),
                                 k, int(ceil_mode), seed, ctypes.byref(taken), message,
                                 len(message))
        self._check(code, message)
        if path is not None:
            path.append(taken.value)
        return values, indices

    # The handlers on window offsets (uint8): `g` is the pool's geometry
    # (jax_unpool._geometry.PoolGeometry), whose window the calls take as attributes.
    @staticmethod
    def _window(g) -> list:
        return [int(g.channels_last), _longs(g.kernel), _longs(g.stride), _longs(g.padding),
                _longs(g.dilation), g.k, int(g.ceil_mode)]

    def forward_window(self, x, offsets, g, *, checked=False, workspace_bytes=None, seed=0):
        """The forward on window offsets; returns (out, path). The output is the pool's
        input shape; the workspace is sized as the CUDA lowering sizes it."""
        from jax_unpool.backends import cuda
        x, offsets = np.ascontiguousarray(x), np.ascontiguousarray(offsets)
        out_shape = _pool_input_shape(x.shape, g)
        out = self._result(out_shape, x.dtype)
        if workspace_bytes is None:
            aval = jax.core.ShapedArray(out_shape, x.dtype)
            per_element = cuda.position_bytes(x.dtype.itemsize, math.prod(g.out_size),
                                              math.prod(g.in_size))
            workspace_bytes = int(np.prod(cuda._workspace(aval, g.channels_last, g.k,
                                                          per_element).shape))
        workspace = self._result((workspace_bytes,), np.uint8)
        path, message = ctypes.c_int(-1), ctypes.create_string_buffer(4096)
        code = self._lib.ju_forward_window(_buffer(x), _buffer(offsets), _buffer(out),
                                           _buffer(workspace), int(checked), *self._window(g),
                                           seed, ctypes.byref(path), message, len(message))
        self._check(code, message)
        return out, path.value

    def backward_window(self, grad, offsets, g, *, checked=False, seed=0):
        grad, offsets = np.ascontiguousarray(grad), np.ascontiguousarray(offsets)
        out = self._result(offsets.shape, grad.dtype)
        lead = offsets.ndim - g.k - (1 if g.channels_last else 0)
        workspace = (self._result((*offsets.shape[:lead], 16), np.uint8) if checked
                     else np.zeros((0,), np.uint8))
        ws = _buffer(workspace)
        if not checked:
            ws.data = None
        message = ctypes.create_string_buffer(4096)
        code = self._lib.ju_backward_window(_buffer(grad), _buffer(offsets), _buffer(out), ws,
                                            *self._window(g), seed, message, len(message))
        self._check(code, message)
        return out

    def pool_window(self, x, g, *, seed=0, path=None):
        """The pool writing window offsets: (values, offsets)."""
        x = np.ascontiguousarray(x)
        shape = _pool_output_shape(x.shape, g)
        values, offsets = self._result(shape, x.dtype), self._result(shape, np.uint8)
        message, taken = ctypes.create_string_buffer(4096), ctypes.c_int(-1)
        code = self._lib.ju_pool_window(_buffer(x), _buffer(values), _buffer(offsets),
                                        *self._window(g), seed, ctypes.byref(taken), message,
                                        len(message))
        self._check(code, message)
        if path is not None:
            path.append(taken.value)
        return values, offsets

    def window_indices(self, indices, g, *, seed=0):
        """Flat indices -> uint8 window offsets."""
        indices = np.ascontiguousarray(indices)
        offsets = self._result(indices.shape, np.uint8)
        message = ctypes.create_string_buffer(4096)
        code = self._lib.ju_window_indices(_buffer(indices), _buffer(offsets), *self._window(g),
                                           _longs(g.in_size), seed, message, len(message))
        self._check(code, message)
        return offsets

    def wide_offsets(self, wide: bool) -> None:
        """Every launch with 64-bit offsets (as calls of 2**31 elements or more), or not."""
        self._lib.ju_set_wide_offsets(int(wide))

    def position_bytes(self, width: int, plane: int, out_plane: int) -> int:
        return self._lib.ju_position_bytes(width, plane, out_plane)

    def divider_mismatches(self, seed: int, trials: int) -> int:
        return self._lib.ju_divider_mismatches(seed, trials)


