"""The pool's FFI boundary: hand-written `jax.ffi.ffi_call`s to jax_unpool_max_pool_v1, to
jax_unpool_max_pool_window_v1 (the same pool writing uint8 window offsets), and to
the aclnn pool targets (in host-emulation mode against the emulated CANN) with every kind
of bad attribute and buffer. The public API never builds such calls; the handlers must
still answer each with an error naming what is wrong -- the aclnn targets with the CPU's
message wherever aclnn takes what the CPU takes -- or, for a valid call, the numpy
oracle's values and indices, never a crash. Every call runs in a child process
(tests/helpers/pool_boundary_calls.py), so that a crash fails the case it happened in.
"""

from __future__ import annotations

import fresh_process
import numpy as np
import numpy_oracle
import pytest
from fake_cann import build

RUNTIME_ERRORS = ("JaxRuntimeError", "ValueError")  # see README: jax-ml/jax#34083
F32, I32, I64 = "float32", "int32", "int64"


def window(k, kernel=2, stride=None, padding=0, dilation=1, ceil_mode=False,
           channels_last=False):
    def each(v):
        return list(v) if isinstance(v, (list, tuple)) else [v] * k
    return {"channels_last": channels_last, "kernel_size": each(kernel),
            "stride": each(kernel if stride is None else stride), "padding": each(padding),
            "dilation": each(dilation), "ceil_mode": ceil_mode}


def pooled(shape, attributes):
    """x's shape with the spatial sizes pooled (PyTorch's rule, from the oracle)."""
    k = len(attributes["kernel_size"])
    s = len(shape) - k - (1 if attributes["channels_last"] else 0)
    out = list(shape)
    for a in range(k):
        out[s + a] = numpy_oracle.pool_output_size(
            shape[s + a], *(attributes[n][a] for n in ("kernel_size", "stride", "padding",
                                                        "dilation")), attributes["ceil_mode"])
    return out


def valid(name, shape, dtype=F32, index_dtype=I32, **kw):
    attributes = window(len(shape) - 2 if "k" not in kw else kw.pop("k"), **kw)
    out = pooled(shape, attributes)
    return (name, {"x": [shape, dtype], "values": [out, dtype], "indices": [out, index_dtype],
                   "attributes": attributes}, "oracle")


def invalid(name, message, x=((2, 3, 4, 6), F32), values=((2, 3, 2, 3), F32),
            indices=((2, 3, 2, 3), I32), **attributes):
    a = window(2)
    a.update(attributes)
    buffers = {"x": x, "values": values, "indices": indices}
    return (name, {**{b: [list(shape), dtype] for b, (shape, dtype) in buffers.items()},
                   "attributes": a}, message)


P2 = "max_pool2d_with_indices"
WINDOWS = ("got kernel_size=(2, 2), stride=(2,), padding=(0, 0), dilation=(1, 1)")
CASES = [
    valid("NCHW", (2, 3, 4, 6)),
    valid("NHWC", (2, 4, 6, 3), channels_last=True),
    valid("odd sizes, ceil_mode", (2, 3, 5, 7), ceil_mode=True),
    valid("1-D unbatched float64 int64", (3, 9), "float64", I64, k=1, kernel=3, stride=2,
          padding=1, ceil_mode=True),
    valid("3-D NDHWC float16", (1, 3, 4, 5, 2), "float16", k=3, kernel=(2, 3, 2),
          stride=(1, 2, 2), padding=(1, 1, 0), dilation=(1, 1, 2), ceil_mode=True,
          channels_last=True),
    valid("3-D NCDHW", (2, 2, 4, 4, 6)),
    valid("a window of padding only (1-D)", (1, 2, 2), k=1, kernel=2, stride=2, padding=1,
          dilation=3, ceil_mode=True),
    valid("a window of padding only (2-D)", (1, 1, 3, 2), kernel=(1, 2), stride=(1, 2),
          padding=(0, 1), dilation=(1, 3), ceil_mode=True),
    valid("windows larger than x", (1, 2, 3, 3), kernel=5, stride=1, padding=2),
    # every index lies in the 5x5 plane: int32 holds them, however far the kernel reaches
    valid("a kernel of 2^31 - 1 over a 5x5 plane, int32 indices", (1, 2, 5, 5),
          kernel=2**31 - 1, stride=1, padding=2**30 - 1),
    valid("bool", (2, 2, 5, 5), "bool", kernel=3, stride=2, padding=1),
    valid("int8 NHWC", (2, 5, 5, 4), "int8", kernel=3, stride=2, padding=1,
          channels_last=True),
    valid("uint32", (1, 2, 6, 6), "uint32"),
    valid("int64", (1, 2, 6, 6), "int64", I64, kernel=3, stride=1, padding=1),
    valid("bfloat16", (2, 2, 6, 6), "bfloat16", kernel=3, stride=2, padding=1),
    valid("float8_e4m3fn", (2, 3, 8, 8), "float8_e4m3fn"),
    valid("float8_e5m2 NHWC", (2, 8, 8, 3), "float8_e5m2", kernel=3, stride=1, padding=1,
          channels_last=True),
    valid("float8_e4m3fnuz", (2, 3, 7, 7), "float8_e4m3fnuz", kernel=3, stride=2, padding=1),
    # attributes
    invalid("stride shorter", f"max_pool: kernel_size, stride, padding and dilation must "
            f"have one entry per spatial dim (1, 2 or 3 of them), {WINDOWS}", stride=[2]),
    invalid("no spatial dims", "max_pool: kernel_size, stride, padding and dilation must "
            "have one entry per spatial dim (1, 2 or 3 of them), got kernel_size=(), "
            "stride=(), padding=(), dilation=()", kernel_size=[], stride=[], padding=[],
            dilation=[]),
    invalid("four spatial dims", "max_pool: kernel_size, stride, padding and dilation must "
            "have one entry per spatial dim (1, 2 or 3 of them), got kernel_size=(2, 2, 2, 2), "
            "stride=(2, 2, 2, 2), padding=(0, 0, 0, 0), dilation=(1, 1, 1, 1)",
            kernel_size=[2] * 4, stride=[2] * 4, padding=[0] * 4, dilation=[1] * 4),
    invalid("kernel_size 0", f"{P2}: kernel_size must be positive and at most 2147483647, "
            "got (0, 2)", kernel_size=[0, 2]),
    invalid("kernel_size 2^40", f"{P2}: kernel_size must be positive and at most 2147483647, "
            f"got (2, {2**40})", kernel_size=[2, 2**40]),
    # 2^31 - 1 is the Python API's limit too (PyTorch's int32 sizes)
    invalid("kernel_size 2^31", f"{P2}: kernel_size must be positive and at most 2147483647, "
            "got (2, 2147483648)", kernel_size=[2, 2**31]),
    invalid("stride 2^31", f"{P2}: stride must be positive and at most 2147483647, "
            "got (2147483648, 2)", stride=[2**31, 2]),
    invalid("dilation 2^31", f"{P2}: dilation must be positive and at most 2147483647, "
            "got (1, 2147483648)", dilation=[1, 2**31]),
    invalid("stride negative", f"{P2}: stride must be positive and at most 2147483647, "
            "got (2, -1)", stride=[2, -1]),
    invalid("dilation 0", f"{P2}: dilation must be positive and at most 2147483647, "
            "got (0, 1)", dilation=[0, 1]),
    invalid("padding negative", f"{P2}: padding must be non-negative and at most half of "
            "kernel_size (padding <= kernel_size // 2), got padding=(-1, 0) and "
            "kernel_size=(2, 2)", padding=[-1, 0]),
    invalid("padding above half the kernel", f"{P2}: padding must be non-negative and at "
            "most half of kernel_size (padding <= kernel_size // 2), got padding=(0, 2) and "
            "kernel_size=(2, 2)", padding=[0, 2]),
    # buffers
    invalid("x rank 5", f"{P2}: x must have rank 3 or 4, got shape (1, 2, 3, 4, 6)",
            x=((1, 2, 3, 4, 6), F32)),
    invalid("x rank 2", f"{P2}: x must have rank 3 or 4, got shape (4, 6)", x=((4, 6), F32)),
    invalid("values dtype", f"{P2}: values has dtype float64 but x has dtype float32; they "
            "must be equal", values=((2, 3, 2, 3), "float64")),
    invalid("indices float32", f"{P2}: indices must be int32 or int64, got float32",
            indices=((2, 3, 2, 3), F32)),
    invalid("indices int16", f"{P2}: indices must be int32 or int64, got int16",
            indices=((2, 3, 2, 3), "int16")),
    invalid("x complex64", f"{P2}: unsupported value dtype complex64",
            x=((2, 3, 4, 6), "complex64"), values=((2, 3, 2, 3), "complex64")),
    *[invalid(f"x {d}", f"{P2}: unsupported value dtype {d}", x=((2, 3, 4, 6), d),
              values=((2, 3, 2, 3), d))
      for d in ("int2", "int4", "uint2", "uint4", "float4_e2m1fn")],
    invalid("values larger", f"{P2}: values has shape (2, 3, 20, 30) but pooling x of shape "
            "(2, 3, 4, 6) gives (2, 3, 2, 3) (ceil_mode=False)",
            values=((2, 3, 20, 30), F32)),
    invalid("indices smaller", f"{P2}: indices has shape (2, 3, 1, 1) but pooling x of shape "
            "(2, 3, 4, 6) gives (2, 3, 2, 3) (ceil_mode=False)",
            indices=((2, 3, 1, 1), I32)),
    invalid("indices other N", f"{P2}: indices has shape (1, 3, 2, 3) but pooling x of shape "
            "(2, 3, 4, 6) gives (2, 3, 2, 3) (ceil_mode=False)",
            indices=((1, 3, 2, 3), I32)),
    invalid("values of the floor shape with ceil_mode", f"{P2}: values has shape "
            "(2, 3, 2, 3) but pooling x of shape (2, 3, 5, 7) gives (2, 3, 3, 4) "
            "(ceil_mode=True)", x=((2, 3, 5, 7), F32), ceil_mode=True),
    invalid("values other rank", f"{P2}: values has shape (6, 2, 3) but pooling x of shape "
            "(2, 3, 4, 6) gives (2, 3, 2, 3) (ceil_mode=False)", values=((6, 2, 3), F32)),
    invalid("x empty spatial dim", f"{P2}: x must have non-empty spatial dims, got shape "
            "(2, 3, 0, 6) (channels first)", x=((2, 3, 0, 6), F32)),
    invalid("output size not positive", f"{P2}: output size must be positive, got -2 along "
            "spatial dim 0 of x of shape (1, 1, 2, 2): the input is too small for "
            "kernel_size=(5, 1), dilation=(1, 1)", x=((1, 1, 2, 2), F32),
            values=((1, 1, 1, 2), F32), indices=((1, 1, 1, 2), I32), kernel_size=[5, 1],
            stride=[1, 1]),
    # attributes XLA's decoder refuses before the handler runs
    invalid("kernel_size a scalar", "any", kernel_size=2),
    # XLA's decoding, compiled in from jaxlib 0.7's FFI headers (the build's)
    invalid("ceil_mode missing", "!INVALID_ARGUMENT: Wrong number of attributes: expected 6 but "
            "got 5 with name(s): channels_last, dilation, kernel_size, padding, stride",
            ceil_mode=None),
    invalid("an attribute too many", "!INVALID_ARGUMENT: Wrong number of attributes: expected 6 "
            "but got 7 with name(s): ceil_mode, channels_last, dilation, extra, kernel_size, "
            "padding, stride", extra=True),
    # x (2, 3, 7, 6): an odd plane
    valid("an odd plane", (2, 3, 7, 6)),
    valid("overlapping, ceil_mode, int64", (2, 3, 7, 6), index_dtype=I64, kernel=(3, 2),
          stride=(2, 1), padding=1, ceil_mode=True),
    valid("NHWC unbatched float16", (7, 6, 3), "float16", k=2, channels_last=True),
    valid("3-D an odd volume", (2, 2, 5, 4, 5)),
    valid("3-D NDHWC bfloat16", (1, 4, 4, 4, 2), "bfloat16", channels_last=True),
    valid("an empty batch", (0, 3, 7, 6)),
    valid("int32", (2, 3, 7, 6), "int32"),
    valid("3-D float64", (2, 2, 5, 4, 5), "float64"),
    invalid("3-D x rank 3", "max_pool3d_with_indices: x must have rank 4 or 5, got shape "
            "(5, 4, 5)", x=((5, 4, 5), F32), values=((2, 2, 2), F32), indices=((2, 2, 2), I32),
            **window(3)),
    invalid("NHWC other C", f"{P2}: values has shape (2, 3, 3, 4) but pooling x of shape "
            "(2, 7, 6, 3) gives (2, 3, 3, 3) (ceil_mode=False)", x=((2, 7, 6, 3), F32),
            values=((2, 3, 3, 4), F32), indices=((2, 3, 3, 4), I32), channels_last=True),
    invalid("3-D padding of 2", "max_pool: kernel_size, stride, padding and dilation must "
            "have one entry per spatial dim (1, 2 or 3 of them), got kernel_size=(2, 2, 2), "
            "stride=(2, 2, 2), padding=(0, 0), dilation=(1, 1, 1)",
            x=((2, 2, 5, 4, 5), F32), values=((2, 2, 2, 2, 2), F32),
            indices=((2, 2, 2, 2, 2), I32), **{**window(3), "padding": [0, 0]}),
    invalid("3-D dilation 0", "max_pool3d_with_indices: dilation must be positive and at most "
            "2147483647, got (1, 0, 1)", x=((2, 2, 5, 4, 5), F32),
            values=((2, 2, 2, 2, 2), F32), indices=((2, 2, 2, 2, 2), I32),
            **{**window(3), "dilation": [1, 0, 1]}),
    invalid("a window larger than x", f"{P2}: output size must be positive, got 0 along "
            "spatial dim 0 of x of shape (2, 3, 7, 6): the input is too small for "
            "kernel_size=(9, 2), dilation=(1, 1)", x=((2, 3, 7, 6), F32),
            values=((2, 3, 3, 3), F32), indices=((2, 3, 3, 3), I32), kernel_size=[9, 2]),
    invalid("padding 2^62", f"{P2}: padding must be non-negative and at most half of "
            f"kernel_size (padding <= kernel_size // 2), got padding=({2**62}, 0) and "
            "kernel_size=(2, 2)", x=((2, 3, 7, 6), F32), values=((2, 3, 3, 3), F32),
            indices=((2, 3, 3, 3), I32), padding=[2**62, 0], stride=[1, 2]),
]

# Where the aclnn pool targets answer otherwise than the CPU's: a window of another rank
# than the target's; a value dtype aclnn cannot compare (after the shared checks, which
# name the sub-byte and complex ones as the CPU does); dilation, which Atlas A2/A3 (the
# emulated chip) refuse: CANN's message, which starts so.
GWS2 = "max_pool2d_with_indices: aclnnMaxPool2dWithIndicesGetWorkspaceSize failed with status "
GWS3 = "max_pool3d_with_indices: aclnnMaxPool3dWithArgmaxGetWorkspaceSize failed with status "


def _other_rank(kernel: str) -> str:
    return (f"{P2}: aclnnMaxPool2dWithIndices pools 2 spatial dims, got kernel_size={kernel}")


def _dtype(d: str, k: int = 2) -> str:
    op, run = (P2, "aclnnMaxPool2dWithIndices") if k == 2 else (
        "max_pool3d_with_indices", "aclnnMaxPool3dWithArgmax")
    return f"{op}: {run} takes float16, bfloat16 or float32 values, got {d}"


ACLNN = {
    "1-D unbatched float64 int64": _other_rank("(3,)"),
    "a window of padding only (1-D)": _other_rank("(2,)"),
    "no spatial dims": _other_rank("()"),
    "four spatial dims": _other_rank("(2, 2, 2, 2)"),
    "3-D NDHWC float16": f"^{GWS3}161002 ACLNN_ERR_PARAM_INVALID: ",
    "a window of padding only (2-D)": f"^{GWS2}161002 ACLNN_ERR_PARAM_INVALID: ",
    **{name: _dtype(d) for name, d in (("bool", "bool"), ("int8 NHWC", "int8"),
                                       ("uint32", "uint32"), ("int64", "int64"),
                                       ("float8_e4m3fn", "float8_e4m3fn"),
                                       ("float8_e5m2 NHWC", "float8_e5m2"),
                                       ("float8_e4m3fnuz", "float8_e4m3fnuz"),
                                       ("int32", "int32"))},
    "3-D float64": _dtype("float64", 3),
}


# The pool writing window offsets: every call above with uint8 indices (the valid ones give
# the oracle's argmax as tap numbers, the invalid ones the same message), except where the
# indices' dtype or the window's tap count is what is wrong.
_OFFSETS = "indices must be uint8 window offsets, got"
WINDOW_MESSAGES = {
    "indices float32": f"{P2}: {_OFFSETS} float32",
    "indices int16": f"{P2}: {_OFFSETS} int16",
    "a kernel of 2^31 - 1 over a 5x5 plane, int32 indices": f"{P2}: window offsets (uint8) "
    f"number the taps of windows of at most 256 taps; kernel_size=({2**31 - 1}, {2**31 - 1}) "
    "has more: use flat indices",
}
WINDOW_CASES = [
    (name, {**call, "indices": [call["indices"][0], "uint8" if call["indices"][1] in (I32, I64)
                                else call["indices"][1]]}, WINDOW_MESSAGES.get(name, expected))
    for name, call, expected in CASES] + [
    invalid("indices int32", f"{P2}: {_OFFSETS} int32"),
    valid("256 taps", (1, 2, 16, 16), index_dtype="uint8", kernel=16),
    valid("3-D 6x6x7 taps, NDHWC", (1, 6, 6, 9, 2), index_dtype="uint8", k=3, kernel=(6, 6, 7),
          stride=1, padding=(3, 3, 3), ceil_mode=True, channels_last=True),
    invalid("257 taps", f"{P2}: window offsets (uint8) number the taps of windows of at most "
            "256 taps; kernel_size=(1, 257) has more: use flat indices", x=((1, 1, 4, 300), F32),
            values=((1, 1, 4, 44), F32), indices=((1, 1, 4, 44), "uint8"), kernel_size=[1, 257],
            stride=[1, 1]),
]


def _json(case) -> dict:
    name, call, _ = case
    call = dict(call, name=name)
    call["attributes"] = {k: v for k, v in call["attributes"].items() if v is not None}
    return call


def run_cases(cases: list[dict], tmp_path, *family: str) -> dict[str, dict]:
    return fresh_process.run_cases("pool_boundary_calls.py", cases, tmp_path, *family)


def check(outcome: dict, name: str, expected: str) -> None:
    """`expected`: "oracle", "any" (error), "!" + the message's start as XLA writes it, "^"
    + its start after "INVALID_ARGUMENT: ", or the whole message after it."""
    assert "crash" not in outcome, f"{name}: the child process died ({outcome})"
    if expected == "oracle":
        assert outcome.get("equal") is True, f"{name}: {outcome}"
        return
    assert outcome.get("error") in RUNTIME_ERRORS, f"{name}: no error: {outcome}"
    message = outcome["message"]
    if expected.startswith("!"):
        # XLA's own decoding errors read as the FFI headers compiled in write them
        # (ffi/third_party's, jaxlib 0.7.2's); a newer jaxlib's runtime may put
        # "[execute] " first.
        assert message.replace("[execute] ", "", 1).startswith(expected[1:]), outcome
    elif expected.startswith("^"):
        assert message.startswith(f"INVALID_ARGUMENT: {expected[1:]}"), outcome
    elif expected != "any":
        assert message == f"INVALID_ARGUMENT: {expected}", outcome


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    return run_cases([_json(c) for c in CASES], tmp_path_factory.mktemp("pool"), "cpu")


@pytest.fixture(scope="module")
def window_outcomes(tmp_path_factory):
    return run_cases([_json(c) for c in WINDOW_CASES], tmp_path_factory.mktemp("pool_window"),
                     "cpu_window")


@pytest.fixture(scope="module")
def aclnn_outcomes(tmp_path_factory):
    fake_cann_dir = build(tmp_path_factory.mktemp("fake_cann_pool_boundary"))
    return run_cases([_json(c) for c in CASES], tmp_path_factory.mktemp("aclnn_pool"), "aclnn",
                     str(fake_cann_dir))


@pytest.mark.jax_window
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_pool_target_direct_call(outcomes, case):
    name, _, expected = case
    check(outcomes[name], name, expected)


@pytest.mark.parametrize("case", WINDOW_CASES, ids=[c[0] for c in WINDOW_CASES])
def test_window_pool_target_direct_call(window_outcomes, case):
    name, _, expected = case
    check(window_outcomes[name], name, expected)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_aclnn_pool_target_direct_call(aclnn_outcomes, case):
    name, _, expected = case
    check(aclnn_outcomes[name], name, ACLNN.get(name, expected))


def test_every_aclnn_difference_names_a_case():
    assert set(ACLNN) <= {c[0] for c in CASES}


# The formats' largest finite values (OCP 8-bit floating point, and the fnuz variants'
# definitions in ml_dtypes' README), negated; e8m0fnu has no sign: its lowest is 2^-127.
FLOAT8_LOWEST = {"float8_e4m3fn": -448.0, "float8_e4m3fnuz": -240.0,
                 "float8_e4m3b11fnuz": -30.0, "float8_e8m0fnu": 2.0**-127,
                 "float8_e5m2": -np.inf, "float8_e4m3": -np.inf}


@pytest.mark.parametrize("dtype", FLOAT8_LOWEST)
def test_the_oracles_float8_lowest_needs_no_numpy_finfo(dtype, monkeypatch):
    # As with ml_dtypes 0.6.0 under numpy 2.5.2, where np.finfo refuses the float8 types.
    import ml_dtypes

    def finfo(t):
        raise ValueError(f"data type {np.dtype(t)!r} not compatible with finfo")

    monkeypatch.setattr(np, "finfo", finfo)
    assert numpy_oracle.lowest(getattr(ml_dtypes, dtype)) == FLOAT8_LOWEST[dtype]
