"""The FFI boundary itself: hand-written `jax.ffi.ffi_call`s to every registered target
(the CPU ones, _v1 and _v2 and those on window offsets, and the aclnn ones in
host-emulation mode against the emulated CANN) with
every kind of buffer mismatch, random buffer shapes (hypothesis), and an exported
artifact whose custom call was edited. The public API never builds such calls; the
handlers must still answer each with an error (or, for a valid call, the numpy
oracle's answer), never a crash. Every call runs in a child process, so that a crash
fails the case it happened in and nothing else.
"""

from __future__ import annotations

import re

import fresh_process
import numpy as np
import pytest
from fake_cann import build
from out_of_range import POSITIONS_NOTE

pytestmark = pytest.mark.slow

F, B, F3, B3 = "forward", "backward", "forward3d", "backward3d"
F32, F64, I32, I64 = "float32", "float64", "int32", "int64"
RUNTIME_ERRORS = ("JaxRuntimeError", "ValueError")  # see docs/semantics.md: jax-ml/jax#34083
OP = {F: "max_unpool{}d", B: "max_unpool{}d_backward",  # per spatial rank
      F3: "max_unpool3d", B3: "max_unpool3d_backward"}

# A valid forward: x and indices (2, 3, 4, 5) NCHW, result plane 6x7; the backward's
# grad_output is that result and its result has indices' shape. Each case replaces
# some buffers: (name, op, values, indices, result, channels_last, expected), where
# expected is "oracle" (the numpy oracle's answer) or the INVALID_ARGUMENT message
# after "<op>: ".
X, IDX, OUT = [[2, 3, 4, 5], F32], [[2, 3, 4, 5], I32], [[2, 3, 6, 7], F32]
X_L, IDX_L, OUT_L = [[2, 4, 5, 3], F32], [[2, 4, 5, 3], I32], [[2, 6, 7, 3], F32]


def _s(shape):
    return "(" + ", ".join(map(str, shape)) + ")"


def _mismatch(a, ashape, b, bshape, rule="they must be equal"):
    return f"{a} has shape {_s(ashape)} but {b} has shape {_s(bshape)}; {rule}"


NC = "their N and C dims (NCHW) must be equal"
SUB_BYTE = ("int2", "int4", "uint2", "uint4", "float4_e2m1fn")  # named in messages, not moved
CASES = [
    # valid calls
    ("forward valid", F, X, IDX, OUT, False, "oracle"),
    ("forward valid int64 float64", F, [X[0], F64], [IDX[0], I64], [OUT[0], F64], False,
     "oracle"),
    ("forward valid NHWC", F, X_L, IDX_L, OUT_L, True, "oracle"),
    ("forward valid rank 3", F, [[3, 4, 5], F32], [[3, 4, 5], I32], [[3, 6, 7], F32], False,
     "oracle"),
    ("backward valid", B, OUT, IDX, X, False, "oracle"),
    ("backward valid NHWC", B, OUT_L, IDX_L, X_L, True, "oracle"),
    ("backward valid rank 3", B, [[3, 6, 7], F32], [[3, 4, 5], I64], [[3, 4, 5], F32], False,
     "oracle"),
    # forward: indices against x
    ("forward indices smaller", F, X, [[2, 3, 2, 5], I32], OUT, False,
     _mismatch("indices", [2, 3, 2, 5], "x", [2, 3, 4, 5])),
    ("forward indices larger", F, X, [[2, 3, 40, 50], I32], OUT, False,
     _mismatch("indices", [2, 3, 40, 50], "x", [2, 3, 4, 5])),
    ("forward indices same count other shape", F, X, [[2, 3, 5, 4], I32], OUT, False,
     _mismatch("indices", [2, 3, 5, 4], "x", [2, 3, 4, 5])),
    ("forward indices other rank", F, X, [[6, 4, 5], I32], OUT, False,
     _mismatch("indices", [6, 4, 5], "x", [2, 3, 4, 5])),
    ("forward indices zero-size", F, X, [[2, 3, 0, 5], I32], OUT, False,
     _mismatch("indices", [2, 3, 0, 5], "x", [2, 3, 4, 5])),
    ("forward x zero-size", F, [[2, 3, 0, 5], F32], IDX, OUT, False,
     _mismatch("indices", [2, 3, 4, 5], "x", [2, 3, 0, 5])),
    # forward: result against x
    ("forward result other N", F, X, IDX, [[3, 3, 6, 7], F32], False,
     _mismatch("result", [3, 3, 6, 7], "x", [2, 3, 4, 5], NC)),
    ("forward result other C", F, X, IDX, [[2, 1, 6, 7], F32], False,
     _mismatch("result", [2, 1, 6, 7], "x", [2, 3, 4, 5], NC)),
    ("forward result other C NHWC", F, X_L, IDX_L, [[2, 6, 7, 4], F32], True,
     _mismatch("result", [2, 6, 7, 4], "x", [2, 4, 5, 3],
               "their N and C dims (NHWC) must be equal")),
    ("forward result other rank", F, X, IDX, [[3, 6, 7], F32], False,
     _mismatch("result", [3, 6, 7], "x", [2, 3, 4, 5], "their ranks must be equal")),
    ("forward x rank 5", F, [[1, 2, 3, 4, 5], F32], [[1, 2, 3, 4, 5], I32],
     [[1, 2, 3, 6, 7], F32], False, "x must have rank 3 or 4, got shape (1, 2, 3, 4, 5)"),
    ("forward x rank 2", F, [[4, 5], F32], [[4, 5], I32], [[6, 7], F32], False,
     "x must have rank 3 or 4, got shape (4, 5)"),
    # forward: dtypes
    ("forward index dtype float32", F, X, [IDX[0], F32], OUT, False,
     "indices must be int32 or int64, got float32"),
    ("forward index dtype int16", F, X, [IDX[0], "int16"], OUT, False,
     "indices must be int32 or int64, got int16"),
    ("forward index dtype uint32", F, X, [IDX[0], "uint32"], OUT, False,
     "indices must be int32 or int64, got uint32"),
    ("forward result dtype", F, X, IDX, [OUT[0], F64], False,
     "result has dtype float64 but x has dtype float32; they must be equal"),
    ("forward value dtype complex128", F, [X[0], "complex128"], IDX, [OUT[0], "complex128"],
     False, "unsupported value dtype complex128"),
    *[(f"forward value dtype {d}", F, [X[0], d], IDX, [OUT[0], d], False,
       f"unsupported value dtype {d}") for d in SUB_BYTE],
    # backward: result against indices (the segfault is the first one)
    ("backward result smaller", B, [[1, 1, 400, 400], F32], [[1, 1, 400, 400], I32],
     [[1, 1, 1, 1], F32], False,
     _mismatch("result", [1, 1, 1, 1], "indices", [1, 1, 400, 400])),
    ("backward result larger", B, OUT, IDX, [[2, 3, 40, 50], F32], False,
     _mismatch("result", [2, 3, 40, 50], "indices", [2, 3, 4, 5])),
    ("backward result same count other shape", B, OUT, IDX, [[2, 3, 5, 4], F32], False,
     _mismatch("result", [2, 3, 5, 4], "indices", [2, 3, 4, 5])),
    ("backward result other rank", B, OUT, IDX, [[6, 4, 5], F32], False,
     _mismatch("result", [6, 4, 5], "indices", [2, 3, 4, 5])),
    ("backward indices zero-size", B, OUT, [[2, 3, 0, 5], I32], X, False,
     _mismatch("result", [2, 3, 4, 5], "indices", [2, 3, 0, 5])),
    # backward: indices against grad_output
    ("backward indices other N", B, OUT, [[1, 3, 4, 5], I32], [[1, 3, 4, 5], F32], False,
     _mismatch("indices", [1, 3, 4, 5], "grad_output", [2, 3, 6, 7], NC)),
    ("backward indices other C", B, OUT, [[2, 5, 4, 5], I32], [[2, 5, 4, 5], F32], False,
     _mismatch("indices", [2, 5, 4, 5], "grad_output", [2, 3, 6, 7], NC)),
    ("backward indices other rank", B, OUT, [[3, 4, 5], I32], [[3, 4, 5], F32], False,
     _mismatch("indices", [3, 4, 5], "grad_output", [2, 3, 6, 7],
               "their ranks must be equal")),
    ("backward grad_output rank 5", B, [[1, 2, 3, 6, 7], F32], [[1, 2, 3, 4, 5], I32],
     [[1, 2, 3, 4, 5], F32], False,
     "grad_output must have rank 3 or 4, got shape (1, 2, 3, 6, 7)"),
    # backward: dtypes
    ("backward index dtype float32", B, OUT, [IDX[0], F32], X, False,
     "indices must be int32 or int64, got float32"),
    ("backward result dtype", B, OUT, IDX, [X[0], F64], False,
     "result has dtype float64 but grad_output has dtype float32; they must be equal"),
    ("backward value dtype complex128", B, [OUT[0], "complex128"], IDX, [X[0], "complex128"],
     False, "unsupported value dtype complex128"),
    ("backward value dtype int4", B, [OUT[0], "int4"], IDX, [X[0], "int4"], False,
     "unsupported value dtype int4"),
]


# Calls only the _v2 targets can get: other spatial ranks, and a bad spatial_rank. The
# 8th entry is the spatial_rank attribute.
V2_CASES = [
    ("forward valid 1-D", F, [[2, 3, 5], F32], [[2, 3, 5], I32], [[2, 3, 9], F32], False,
     "oracle", 1),
    ("forward valid 1-D unbatched NWC", F, [[5, 3], F64], [[5, 3], I64], [[9, 3], F64], True,
     "oracle", 1),
    ("forward valid 3-D", F, [[2, 3, 2, 3, 4], F32], [[2, 3, 2, 3, 4], I32],
     [[2, 3, 4, 6, 8], F32], False, "oracle", 3),
    ("forward valid 3-D NDHWC", F, [[2, 2, 3, 4, 3], "int8"], [[2, 2, 3, 4, 3], I64],
     [[2, 4, 6, 8, 3], "int8"], True, "oracle", 3),
    ("backward valid 1-D", B, [[2, 3, 9], F32], [[2, 3, 5], I32], [[2, 3, 5], F32], False,
     "oracle", 1),
    ("backward valid 3-D unbatched", B, [[3, 4, 6, 8], "float16"], [[3, 2, 3, 4], I32],
     [[3, 2, 3, 4], "float16"], False, "oracle", 3),
    ("backward valid 3-D NDHWC", B, [[2, 4, 6, 8, 3], F32], [[2, 2, 3, 4, 3], I64],
     [[2, 2, 3, 4, 3], F32], True, "oracle", 3),
    ("forward 3-D x rank 3", F, [[3, 4, 5], F32], [[3, 4, 5], I32], [[3, 6, 7], F32], False,
     "x must have rank 4 or 5, got shape (3, 4, 5)", 3),
    ("forward 1-D x rank 4", F, X, IDX, OUT, False,
     "x must have rank 2 or 3, got shape (2, 3, 4, 5)", 1),
    ("forward 3-D result other C NDHWC", F, [[2, 2, 3, 4, 3], F32], [[2, 2, 3, 4, 3], I32],
     [[2, 4, 6, 8, 5], F32], True,
     _mismatch("result", [2, 4, 6, 8, 5], "x", [2, 2, 3, 4, 3],
               "their N and C dims (NDHWC) must be equal"), 3),
    ("backward 1-D indices other N", B, [[2, 3, 9], F32], [[1, 3, 5], I32], [[1, 3, 5], F32],
     False, _mismatch("indices", [1, 3, 5], "grad_output", [2, 3, 9],
                      "their N and C dims (NCW) must be equal"), 1),
    ("backward 3-D result smaller", B, [[1, 1, 40, 40, 40], F32], [[1, 1, 40, 40, 40], I32],
     [[1, 1, 1, 1, 1], F32], False,
     _mismatch("result", [1, 1, 1, 1, 1], "indices", [1, 1, 40, 40, 40]), 3),
    ("forward spatial_rank 4", F, [[1, 2, 3, 4, 5, 6], F32], [[1, 2, 3, 4, 5, 6], I32],
     [[1, 2, 3, 4, 5, 6], F32], False, "spatial_rank must be 1, 2 or 3, got 4", 4),
    ("backward spatial_rank 0", B, [[2, 3], F32], [[2, 3], I32], [[2, 3], F32], False,
     "spatial_rank must be 1, 2 or 3, got 0", 0),
]


# The aclnn 3-D targets: channels-first buffers, no attribute (channels_last is unused). A
# valid forward: x and indices (2, 3, 2, 3, 4), result volume 3x4x5; the backward's
# grad_output is that result, its indices int64 only.
X3, IDX3, OUT3 = [[2, 3, 2, 3, 4], F32], [[2, 3, 2, 3, 4], I64], [[2, 3, 3, 4, 5], F32]
NC3 = "their N and C dims (NCDHW) must be equal"
CASES_3D = [
    # valid calls
    ("3d forward valid", F3, X3, IDX3, OUT3, False, "oracle"),
    ("3d forward valid int32 float64 rank 4", F3, [[3, 2, 3, 4], F64], [[3, 2, 3, 4], I32],
     [[3, 3, 4, 5], F64], False, "oracle"),
    ("3d backward valid", B3, OUT3, IDX3, X3, False, "oracle"),
    ("3d backward valid rank 4", B3, [[3, 3, 4, 5], F32], [[3, 2, 3, 4], I64],
     [[3, 2, 3, 4], F32], False, "oracle"),
    # forward: indices against x, result against x
    ("3d forward indices other shape", F3, X3, [[2, 3, 2, 4, 3], I64], OUT3, False,
     _mismatch("indices", [2, 3, 2, 4, 3], "x", [2, 3, 2, 3, 4])),
    ("3d forward indices larger", F3, X3, [[2, 3, 20, 30, 40], I64], OUT3, False,
     _mismatch("indices", [2, 3, 20, 30, 40], "x", [2, 3, 2, 3, 4])),
    ("3d forward indices other rank", F3, X3, [[6, 2, 3, 4], I64], OUT3, False,
     _mismatch("indices", [6, 2, 3, 4], "x", [2, 3, 2, 3, 4])),
    ("3d forward result other N", F3, X3, IDX3, [[3, 3, 3, 4, 5], F32], False,
     _mismatch("result", [3, 3, 3, 4, 5], "x", [2, 3, 2, 3, 4], NC3)),
    ("3d forward result other C", F3, X3, IDX3, [[2, 1, 3, 4, 5], F32], False,
     _mismatch("result", [2, 1, 3, 4, 5], "x", [2, 3, 2, 3, 4], NC3)),
    ("3d forward result other C rank 4", F3, [[3, 2, 3, 4], F32], [[3, 2, 3, 4], I64],
     [[2, 3, 4, 5], F32], False, _mismatch("result", [2, 3, 4, 5], "x", [3, 2, 3, 4], NC3)),
    ("3d forward result other rank", F3, X3, IDX3, [[3, 3, 4, 5], F32], False,
     _mismatch("result", [3, 3, 4, 5], "x", [2, 3, 2, 3, 4], "their ranks must be equal")),
    ("3d forward x rank 3", F3, [[3, 4, 5], F32], [[3, 4, 5], I64], [[3, 6, 7], F32], False,
     "x must have rank 4 or 5, got shape (3, 4, 5)"),
    ("3d forward x rank 6", F3, [[1, 2, 3, 2, 3, 4], F32], [[1, 2, 3, 2, 3, 4], I64],
     [[1, 2, 3, 3, 4, 5], F32], False, "x must have rank 4 or 5, got shape (1, 2, 3, 2, 3, 4)"),
    ("3d forward index dtype float32", F3, X3, [IDX3[0], F32], OUT3, False,
     "indices must be int32 or int64, got float32"),
    ("3d forward result dtype", F3, X3, IDX3, [OUT3[0], F64], False,
     "result has dtype float64 but x has dtype float32; they must be equal"),
    ("3d forward value dtype complex128", F3, [X3[0], "complex128"], IDX3,
     [OUT3[0], "complex128"], False, "unsupported value dtype complex128"),
    ("3d forward x zero-size", F3, [[2, 3, 0, 3, 4], F32], [[2, 3, 0, 3, 4], I64], OUT3, False,
     "aclnnMaxUnpool3d cannot take an empty x"),
    # backward: result against indices, indices against grad_output
    ("3d backward result smaller", B3, OUT3, IDX3, [[2, 3, 1, 1, 1], F32], False,
     _mismatch("result", [2, 3, 1, 1, 1], "indices", [2, 3, 2, 3, 4])),
    ("3d backward result other rank", B3, OUT3, IDX3, [[6, 2, 3, 4], F32], False,
     _mismatch("result", [6, 2, 3, 4], "indices", [2, 3, 2, 3, 4])),
    ("3d backward indices other N", B3, OUT3, [[1, 3, 2, 3, 4], I64], [[1, 3, 2, 3, 4], F32],
     False, _mismatch("indices", [1, 3, 2, 3, 4], "grad_output", [2, 3, 3, 4, 5], NC3)),
    ("3d backward indices other C", B3, OUT3, [[2, 5, 2, 3, 4], I64], [[2, 5, 2, 3, 4], F32],
     False, _mismatch("indices", [2, 5, 2, 3, 4], "grad_output", [2, 3, 3, 4, 5], NC3)),
    ("3d backward indices other rank", B3, OUT3, [[3, 2, 3, 4], I64], [[3, 2, 3, 4], F32],
     False, _mismatch("indices", [3, 2, 3, 4], "grad_output", [2, 3, 3, 4, 5],
                      "their ranks must be equal")),
    ("3d backward grad_output rank 6", B3, [[1, 2, 3, 3, 4, 5], F32],
     [[1, 2, 3, 2, 3, 4], I64], [[1, 2, 3, 2, 3, 4], F32], False,
     "grad_output must have rank 4 or 5, got shape (1, 2, 3, 3, 4, 5)"),
    ("3d backward int32 indices", B3, OUT3, [IDX3[0], I32], X3, False,
     "aclnnMaxUnpool3dBackward takes int64 indices only, got int32"),
    ("3d backward index dtype float32", B3, OUT3, [IDX3[0], F32], X3, False,
     "indices must be int32 or int64, got float32"),
    ("3d backward result dtype", B3, OUT3, IDX3, [X3[0], F64], False,
     "result has dtype float64 but grad_output has dtype float32; they must be equal"),
    ("3d backward value dtype complex128", B3, [OUT3[0], "complex128"], IDX3,
     [X3[0], "complex128"], False, "unsupported value dtype complex128"),
    ("3d backward grad_output zero-size", B3, [[2, 3, 0, 4, 5], F32], IDX3, X3, False,
     "aclnnMaxUnpool3dBackward cannot take an empty grad_output"),
]


# The CPU targets on window offsets (jax_unpool_max_unpool_window_v1, its backward, and
# jax_unpool_window_offsets_v1): the pool's window as attributes, checked against every
# buffer. A valid forward: x and offsets (2, 3, 4, 5) of a 2x2/s2 pool of a (2, 3, 8, 10)
# result; the backward's grad_output is that result. Each case: (name, op, values, indices,
# result, channels_last, window, expected), where expected is "oracle", the whole
# INVALID_ARGUMENT message, or "!" + an OUT_OF_RANGE message's start. Offsets are drawn from
# [0, taps), each moved to its window's first tap inside the input where it names none, or
# from [0, 256) where a case's name says "bad". (A result with an empty spatial dim never
# reaches a handler: XLA makes a zero-size result a constant.)
U8 = "uint8"
WF, WB, WI = "forward", "backward", "window_indices"


def pool_window(k=2, kernel=2, stride=None, padding=0, dilation=1, ceil_mode=False, **attrs):
    def each(v):
        return list(v) if isinstance(v, (list, tuple)) else [v] * k
    return {"kernel_size": each(kernel), "stride": each(kernel if stride is None else stride),
            "padding": each(padding), "dilation": each(dilation), "ceil_mode": ceil_mode,
            **attrs}


W2 = pool_window()
WX, WOFF, WOUT = [[2, 3, 4, 5], F32], [[2, 3, 4, 5], U8], [[2, 3, 8, 10], F32]
WX_L, WOFF_L, WOUT_L = [[2, 4, 5, 3], F32], [[2, 4, 5, 3], U8], [[2, 8, 10, 3], F32]
W2_TEXT = "kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=False"
WINDOW_CASES = [
    # valid calls
    ("window forward valid", WF, WX, WOFF, WOUT, False, W2, "oracle"),
    ("window forward valid NHWC float64", WF, [WX_L[0], F64], WOFF_L, [WOUT_L[0], F64], True,
     W2, "oracle"),
    ("window forward valid rank 3, ceil_mode, overlapping", WF, [[3, 4, 5], F32],
     [[3, 4, 5], U8], [[3, 7, 9], F32], False,
     pool_window(kernel=3, stride=2, padding=1, ceil_mode=True), "oracle"),
    ("window forward valid 1-D dilated", WF, [[2, 3, 4], "int8"], [[2, 3, 4], U8],
     [[2, 3, 11], "int8"], False, pool_window(k=1, kernel=3, stride=2, dilation=2), "oracle"),
    ("window forward valid 3-D NDHWC", WF, [[2, 2, 2, 3, 3], "bfloat16"], [[2, 2, 2, 3, 3], U8],
     [[2, 4, 4, 6, 3], "bfloat16"], True, pool_window(k=3, ceil_mode=True), "oracle"),
    ("window backward valid", WB, WOUT, WOFF, WX, False, W2, "oracle"),
    ("window backward valid NHWC", WB, WOUT_L, WOFF_L, WX_L, True, W2, "oracle"),
    ("window backward valid 3-D, padded", WB, [[1, 2, 5, 6, 7], "float16"],
     [[1, 2, 3, 3, 4], U8], [[1, 2, 3, 3, 4], "float16"], False,
     pool_window(k=3, kernel=3, stride=2, padding=1), "oracle"),
    ("window forward an empty batch", WF, [[0, 3, 4, 5], F32], [[0, 3, 4, 5], U8],
     [[0, 3, 8, 10], F32], False, W2, "oracle"),
    # offsets that name no tap: OUT_OF_RANGE, naming the first
    ("window forward bad offsets", WF, WX, WOFF, WOUT, False, W2,
     "!OUT_OF_RANGE: max_unpool2d: window offset "),
    ("window backward bad offsets NHWC", WB, WOUT_L, WOFF_L, WX_L, True, W2,
     "!OUT_OF_RANGE: max_unpool2d_backward: window offset "),
    # the window's attributes
    ("window stride shorter", WF, WX, WOFF, WOUT, False, {**W2, "stride": [2]},
     ("max_unpool: kernel_size, stride, padding and dilation must have one entry per spatial "
      "dim (1, 2 or 3 of them), got kernel_size=(2, 2), stride=(2,), padding=(0, 0), "
      "dilation=(1, 1)")),
    ("window backward four spatial dims", WB, WOUT, WOFF, WX, False, pool_window(k=4),
     ("max_unpool_backward: kernel_size, stride, padding and dilation must have one entry per "
      "spatial dim (1, 2 or 3 of them), got kernel_size=(2, 2, 2, 2), stride=(2, 2, 2, 2), "
      "padding=(0, 0, 0, 0), dilation=(1, 1, 1, 1)")),
    ("window kernel_size 0", WF, WX, WOFF, WOUT, False, {**W2, "kernel_size": [0, 2]},
     "max_unpool2d: kernel_size must be positive and at most 2147483647, got (0, 2)"),
    ("window stride 2^31", WB, WOUT, WOFF, WX, False, {**W2, "stride": [2**31, 2]},
     ("max_unpool2d_backward: stride must be positive and at most 2147483647, got "
      "(2147483648, 2)")),
    ("window padding above half the kernel", WF, WX, WOFF, WOUT, False, {**W2, "padding": [0, 2]},
     ("max_unpool2d: padding must be non-negative and at most half of kernel_size (padding <= "
      "kernel_size // 2), got padding=(0, 2) and kernel_size=(2, 2)")),
    ("window of 289 taps", WF, [[1, 1, 1, 1], F32], [[1, 1, 1, 1], U8], [[1, 1, 17, 17], F32],
     False, pool_window(kernel=17), ("max_unpool2d: window offsets (uint8) number the taps of "
      "windows of at most 256 taps; kernel_size=(17, 17) has more: use flat indices")),
    # buffers
    ("window forward int32 offsets", WF, WX, [WOFF[0], I32], WOUT, False, W2,
     "max_unpool2d: indices must be uint8 window offsets, got int32"),
    ("window backward int64 offsets", WB, WOUT, [WOFF[0], I64], WX, False, W2,
     "max_unpool2d_backward: indices must be uint8 window offsets, got int64"),
    ("window forward result dtype", WF, WX, WOFF, [WOUT[0], F64], False, W2,
     "max_unpool2d: result has dtype float64 but x has dtype float32; they must be equal"),
    ("window backward value dtype int4", WB, [WOUT[0], "int4"], WOFF, [WX[0], "int4"], False, W2,
     "max_unpool2d_backward: unsupported value dtype int4"),
    ("window forward x rank 5", WF, [[1, 2, 3, 4, 5], F32], [[1, 2, 3, 4, 5], U8],
     [[1, 2, 3, 8, 10], F32], False, W2,
     "max_unpool2d: x must have rank 3 or 4, got shape (1, 2, 3, 4, 5)"),
    ("window forward offsets other shape", WF, WX, [[2, 3, 5, 4], U8], WOUT, False, W2,
     ("max_unpool2d: indices has shape (2, 3, 5, 4) but x has shape (2, 3, 4, 5); they must be "
      "equal")),
    ("window forward result other C", WF, WX, WOFF, [[2, 1, 8, 10], F32], False, W2,
     ("max_unpool2d: result has shape (2, 1, 8, 10) but x has shape (2, 3, 4, 5); their N and C "
      "dims (NCHW) must be equal")),
    ("window forward result the pool does not give x from", WF, WX, WOFF, [[2, 3, 9, 9], F32],
     False, W2, ("max_unpool2d: x has shape (2, 3, 4, 5) but pooling result of shape "
      f"(2, 3, 9, 9) with {W2_TEXT} gives (2, 3, 4, 4)")),
    ("window forward result too small", WF, WX, WOFF, [[2, 3, 1, 10], F32], False, W2,
     ("max_unpool2d: output size must be positive, got 0 along spatial dim 0 of result of shape "
      "(2, 3, 1, 10): the input is too small for kernel_size=(2, 2), dilation=(1, 1)")),
    ("window backward result other shape", WB, WOUT, WOFF, [[2, 3, 4, 6], F32], False, W2,
     ("max_unpool2d_backward: result has shape (2, 3, 4, 6) but indices has shape (2, 3, 4, 5); "
      "they must be equal")),
    ("window backward offsets other N", WB, WOUT, [[1, 3, 4, 5], U8], [[1, 3, 4, 5], F32], False,
     W2, ("max_unpool2d_backward: indices has shape (1, 3, 4, 5) but grad_output has shape "
      "(2, 3, 8, 10); their N and C dims (NCHW) must be equal")),
    ("window backward grad_output the pool does not give the offsets from", WB,
     [[2, 3, 6, 6], F32], WOFF, WX, False, W2, ("max_unpool2d_backward: indices has shape "
      f"(2, 3, 4, 5) but pooling grad_output of shape (2, 3, 6, 6) with {W2_TEXT} gives "
      "(2, 3, 3, 3)")),
    # window_indices: flat indices -> offsets (values: the flat indices)
    ("window_indices valid", WI, [[2, 3, 4, 5], I32], [[2, 3, 4, 5], U8], [[2, 3, 4, 5], U8],
     False, pool_window(input_size=[8, 10]), "oracle"),
    ("window_indices valid NHWC int64, overlapping", WI, [[2, 4, 5, 3], I64], [[2, 4, 5, 3], U8],
     [[2, 4, 5, 3], U8], True, pool_window(kernel=3, stride=2, padding=1, input_size=[8, 10]),
     "oracle"),
    ("window_indices bad indices", WI, [[2, 3, 4, 5], I32], [[2, 3, 4, 5], U8],
     [[2, 3, 4, 5], U8], False, pool_window(input_size=[8, 10]),
     "!OUT_OF_RANGE: window_indices: index "),
    ("window_indices float32 indices", WI, [[2, 3, 4, 5], F32], [[2, 3, 4, 5], U8],
     [[2, 3, 4, 5], U8], False, pool_window(input_size=[8, 10]),
     "window_indices: indices must be int32 or int64, got float32"),
    ("window_indices int32 result", WI, [[2, 3, 4, 5], I32], [[2, 3, 4, 5], U8],
     [[2, 3, 4, 5], I32], False, pool_window(input_size=[8, 10]),
     "window_indices: result must be uint8 window offsets, got int32"),
    ("window_indices result other shape", WI, [[2, 3, 4, 5], I32], [[2, 3, 4, 5], U8],
     [[2, 3, 4, 6], U8], False, pool_window(input_size=[8, 10]),
     ("window_indices: result has shape (2, 3, 4, 6) but indices has shape (2, 3, 4, 5); they "
      "must be equal")),
    ("window_indices input_size of another rank", WI, [[2, 3, 4, 5], I32], [[2, 3, 4, 5], U8],
     [[2, 3, 4, 5], U8], False, pool_window(input_size=[8]),
     ("window_indices: input_size must have one entry per spatial dim of kernel_size=(2, 2), "
      "got (8,)")),
    ("window_indices input_size 0", WI, [[2, 3, 4, 5], I32], [[2, 3, 4, 5], U8],
     [[2, 3, 4, 5], U8], False, pool_window(input_size=[0, 10]),
     "window_indices: input_size must be positive and at most 2147483647, got (0, 10)"),
    ("window_indices indices the pool does not give", WI, [[2, 3, 4, 5], I32],
     [[2, 3, 4, 5], U8], [[2, 3, 4, 5], U8], False, pool_window(input_size=[8, 8]),
     ("window_indices: indices has shape (2, 3, 4, 5) but pooling an input of spatial size "
      f"input_size=(8, 8) with {W2_TEXT} gives (2, 3, 4, 4)")),
]


def _window_json(case) -> dict:
    name, op, values, indices, result, channels_last, window, _ = case
    window = dict(window)
    input_size = window.pop("input_size", None)
    k = len(window["kernel_size"])
    taps = int(np.prod(window["kernel_size"])) if k <= 3 else 1
    return {"name": name, "op": op, "values": values, "indices": indices, "result": result,
            "channels_last": channels_last, "spatial_rank": k, "window": window,
            "input_size": input_size, "plane": 256 if "bad" in name else max(min(taps, 256), 1)}


def _check_window(outcome: dict, case) -> None:
    name, expected = case[0], case[-1]
    assert "crash" not in outcome, f"{name}: the child process died ({outcome})"
    if expected == "oracle":
        assert outcome.get("equal") is True, f"{name}: {outcome}"
        return
    assert outcome.get("error") in RUNTIME_ERRORS, f"{name}: no error: {outcome}"
    if expected.startswith("!"):
        assert outcome["message"].startswith(expected[1:]), outcome
    else:
        assert outcome["message"] == f"INVALID_ARGUMENT: {expected}", outcome


def _spatial_rank(case) -> int:
    return 3 if case[1] in (F3, B3) else case[7] if len(case) > 7 else 2


def _as_json(case) -> dict:
    name, op, values, indices, result, channels_last, _ = case[:7]
    k = _spatial_rank(case)
    grid = result if op in (F, F3) else values  # the output plane the indices address
    s = len(grid[0]) - k - (1 if channels_last else 0)
    plane = int(np.prod(grid[0][s:s + k])) if 1 <= k <= 3 and s >= 0 else 1
    return {"name": name, "op": op, "values": values, "indices": indices, "result": result,
            "channels_last": channels_last, "spatial_rank": k, "plane": plane}


def run_cases(family: str, cases: list[dict], tmp_path, *extra: str) -> dict[str, dict]:
    return fresh_process.run_cases("boundary_calls.py", cases, tmp_path, family, *extra)


def check(outcome: dict, case) -> None:
    name, op, expected, k = case[0], case[1], case[6], _spatial_rank(case)
    assert "crash" not in outcome, f"{name}: the child process died ({outcome})"
    if expected == "oracle":
        assert outcome.get("equal") is True, f"{name}: {outcome}"
    else:
        assert outcome.get("error") in RUNTIME_ERRORS, f"{name}: no error: {outcome}"
        fn = OP[op].format(k) if 1 <= k <= 3 else OP[op].replace("{}d", "")
        assert outcome["message"] == f"INVALID_ARGUMENT: {fn}: {expected}", outcome


@pytest.fixture(scope="module")
def cpu_outcomes(tmp_path_factory):
    return run_cases("cpu", [_as_json(c) for c in CASES], tmp_path_factory.mktemp("cpu"))


@pytest.fixture(scope="module")
def cpu_v2_outcomes(tmp_path_factory):
    return run_cases("cpu_v2", [_as_json(c) for c in CASES + V2_CASES],
                     tmp_path_factory.mktemp("cpu_v2"))


@pytest.fixture(scope="module")
def cpu_window_outcomes(tmp_path_factory):
    return run_cases("cpu_window", [_window_json(c) for c in WINDOW_CASES],
                     tmp_path_factory.mktemp("cpu_window"))


@pytest.fixture(scope="module")
def fake_cann_dir(tmp_path_factory):
    return build(tmp_path_factory.mktemp("fake_cann_boundary"))


@pytest.fixture(scope="module")
def aclnn_outcomes(tmp_path_factory, fake_cann_dir):
    return run_cases("aclnn", [_as_json(c) for c in CASES + CASES_3D],
                     tmp_path_factory.mktemp("aclnn"), str(fake_cann_dir))


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cpu_target_direct_call(cpu_outcomes, case):
    check(cpu_outcomes[case[0]], case)


@pytest.mark.parametrize("case", CASES + V2_CASES, ids=[c[0] for c in CASES + V2_CASES])
def test_cpu_v2_target_direct_call(cpu_v2_outcomes, case):
    check(cpu_v2_outcomes[case[0]], case)


@pytest.mark.parametrize("case", WINDOW_CASES, ids=[c[0] for c in WINDOW_CASES])
def test_cpu_window_target_direct_call(cpu_window_outcomes, case):
    _check_window(cpu_window_outcomes[case[0]], case)


@pytest.mark.parametrize("case", CASES + CASES_3D, ids=[c[0] for c in CASES + CASES_3D])
def test_aclnn_target_direct_call(aclnn_outcomes, case):
    check(aclnn_outcomes[case[0]], case)


def test_a_zero_size_result_never_reaches_the_handler(tmp_path):
    # XLA replaces a custom call with a zero-size result by a constant: whatever the
    # operands, the call returns the empty array and no handler touches memory.
    case = ("zero-size result", B, OUT, [[9, 9, 9, 9], I32], [[2, 3, 0, 5], F32], False, "")
    outcome = run_cases("cpu", [_as_json(case)], tmp_path)[case[0]]
    assert outcome == {"result": [2, 3, 0, 5], "equal": True}


def test_an_out_of_range_message_from_a_direct_call_names_the_kernel_positions(tmp_path):
    # grad_output with an empty plane: no index can be in range.
    case = ("empty plane", B, [[2, 3, 0, 7], F32], IDX, X, False, "")
    outcome = run_cases("cpu", [_as_json(case)], tmp_path)[case[0]]
    assert outcome["error"] in RUNTIME_ERRORS
    assert re.match(r"OUT_OF_RANGE: max_unpool2d_backward: index 0 at \(n=0, c=0, i=0\) of "
                    r"indices is out of range: valid indices are \[0, 0\)", outcome["message"])
    assert outcome["message"].endswith(f"({POSITIONS_NOTE})")


def test_random_direct_calls_give_the_oracle_or_an_error_never_a_crash():
    proc = fresh_process.run("boundary_property.py", "60")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-6000:]}"
    assert "property held" in proc.stdout


def _tampered_backward_artifact(path):
    """An export of a backward step whose custom call's result type was edited to
    (1, 1, 1, 1), smaller than its (1, 1, 300, 300) indices, then re-serialized."""
    import dataclasses

    import jax
    import jax.numpy as jnp
    from jax.extend.mlir.dialects import stablehlo

    import jax_unpool as ju

    x = jax.ShapeDtypeStruct((1, 1, 300, 300), jnp.float32)

    def step(g, idx):
        return ju.max_unpool2d_backward(g, x, idx, (600, 600)).sum()

    exported = jax.export.export(jax.jit(step), platforms=("cpu",),
                                 disabled_checks=ju.export_safety_checks())(
        jax.ShapeDtypeStruct((1, 1, 600, 600), jnp.float32),
        jax.ShapeDtypeStruct((1, 1, 300, 300), jnp.int32))
    text = exported.mlir_module()
    call = re.search(r"stablehlo\.custom_call @jax_unpool_max_unpool_backward_v2\(.*",
                     text).group(0)
    assert "-> tensor<1x1x300x300xf32>" in call, call
    # The result type, and the type of the reduction that reads it, edited; the Shardy rule
    # dropped (stablehlo's public serializer knows no sdy dialect; one device needs none).
    edited = text.replace("tensor<1x1x300x300xf32>", "tensor<1x1x1x1xf32>")
    assert edited.count("tensor<1x1x1x1xf32>") >= 2
    edited = re.sub(r", sdy\.sharding_rule = #sdy\.op_sharding_rule<.*?, custom>", "", edited)
    assert "sdy" not in edited
    version = stablehlo.get_version_from_compatibility_requirement(
        stablehlo.StablehloCompatibilityRequirement.WEEK_4)  # as jax.export serializes
    tampered = dataclasses.replace(
        exported, mlir_module_serialized=stablehlo.serialize_portable_artifact_str(edited,
                                                                                   version))
    (path / "tampered.bin").write_bytes(tampered.serialize())
    assert "tensor<1x1x1x1xf32>" in jax.export.deserialize(
        bytearray((path / "tampered.bin").read_bytes())).mlir_module()
    rng = np.random.default_rng(0)
    np.savez(path / "operands.npz", arg0=rng.standard_normal((1, 1, 600, 600), np.float32),
             arg1=rng.integers(0, 360000, (1, 1, 300, 300)).astype(np.int32))


def test_an_edited_export_artifact_gets_an_error_not_a_crash(tmp_path):
    _tampered_backward_artifact(tmp_path)
    proc = fresh_process.run("exported_run.py", str(tmp_path / "tampered.bin"),
                             str(tmp_path / "operands.npz"), str(tmp_path / "results.npz"))
    assert proc.returncode == 1, f"exit status {proc.returncode}:\n{proc.stderr[-4000:]}"
    assert ("JaxRuntimeError: INVALID_ARGUMENT: max_unpool2d_backward: result has shape "
            "(1, 1, 1, 1) but indices has shape (1, 1, 300, 300); they must be equal"
            in proc.stderr), proc.stderr[-4000:]


def test_aclnn_out_of_range_message_says_what_its_positions_are(tmp_path, fake_cann_dir):
    # A direct call of the checked target: the handler checks the indices as the CPU's does
    # (issue 37), names the bad index's position and says what that position is relative
    # to. (The default target clamps them: tests/backends/npu.)
    case = _as_json(("out of range", F, X, IDX, OUT, False, ""))
    case["op"] = "forward_checked"
    case["plane"] = 10**6  # indices drawn far past the 6x7 plane
    outcome = run_cases("aclnn", [case], tmp_path, str(fake_cann_dir))["out of range"]
    assert outcome["error"] in RUNTIME_ERRORS, outcome
    assert re.search(r"OUT_OF_RANGE: max_unpool2d: index \d+ at \(n=0, c=0, i=0\) of indices "
                     r"is out of range: valid indices are \[0, 42\)", outcome["message"]), outcome
    assert outcome["message"].endswith(f"({POSITIONS_NOTE})"), outcome
