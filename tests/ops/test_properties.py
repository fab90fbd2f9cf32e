"""Property-based tests (hypothesis): on random well-formed input the CPU FFI path, the
sequential numpy oracle and the jnp reference agree bit for bit; on random malformed
input the call either fails at trace time with a ValueError/TypeError naming the
function, or fails at run time with the documented out-of-range error, or returns what the
reference returns -- never another exception, a crash or a hang.

Runs are derandomized (reproducible in CI) and bounded; shapes stay tiny because every
new shape costs a compilation.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle
import pytest
from dtypes import bits
from hypothesis import HealthCheck, event, example, given, note, settings
from hypothesis import strategies as st
from out_of_range import RUNTIME_ERRORS, expected_message

import jax_unpool as ju
from jax_unpool import reference
from jax_unpool._compat import enable_x64

pytestmark = pytest.mark.slow

# Every 1-, 2-, 4- and 8-byte kind: the ops move bits, so each width and kind must survive.
VALUE_DTYPES = [np.dtype(d) for d in (
    np.bool_, np.int8, np.uint8, jnp.float8_e4m3fn, jnp.float8_e5m2,
    np.int16, np.uint16, np.float16, jnp.bfloat16,
    np.int32, np.uint32, np.float32,
    np.int64, np.uint64, np.float64, np.complex64)]
# Value dtypes no kernel moves (16 bytes, packed 4 bits).
UNMOVABLE_DTYPES = [np.dtype(d) for d in (np.complex128, jnp.int4, jnp.uint4)]
BAD_INDEX_DTYPES = [np.dtype(d) for d in (np.int16, np.uint8, np.uint32, np.float32, np.bool_)]

SETTINGS = {"deadline": None, "derandomize": True, "database": None,
            "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}

fwd_ffi = jax.jit(ju.max_unpool2d, static_argnames=("output_size", "data_format"))
fwd_ref = jax.jit(reference.max_unpool2d, static_argnames=("output_size", "data_format"))
bwd_ffi = jax.jit(ju.max_unpool2d_backward, static_argnames=("output_size", "data_format"))
bwd_ref = jax.jit(reference.max_unpool2d_backward,
                  static_argnames=("output_size", "data_format"))


def special_bits(dtype: np.dtype) -> list[int]:
    """Bit patterns worth moving: -0.0, a signalling NaN of each sign, NaNs with full
    payloads (all ones, with and without the sign bit), for float and integer kinds alike."""
    width = 8 * dtype.itemsize
    sign, ones = 1 << (width - 1), (1 << width) - 1
    patterns = [0, sign, ones, ones ^ sign, 1]
    if dtype.kind == "f":
        inf = int(np.array(np.inf, dtype).view(f"uint{width}")) if dtype.itemsize > 1 else 0
        patterns += [inf | 1, inf | 1 | sign] if inf else []
    return patterns


def random_values(rng: np.random.Generator, shape, dtype: np.dtype) -> np.ndarray:
    """Random bit patterns of `dtype`, a third of them from special_bits."""
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.itemsize not in (1, 2, 4, 8):  # only ever rejected: any bytes will do
        return rng.integers(0, 256, (*shape, dtype.itemsize), dtype=np.uint8).view(dtype)[..., 0]
    utype = np.dtype(f"uint{8 * dtype.itemsize}")
    raw = rng.integers(0, 256, (*shape, dtype.itemsize), dtype=np.uint8).view(utype)
    special = np.array(special_bits(dtype), np.uint64).astype(utype)
    pick = rng.random(raw.shape) < 1 / 3
    raw[pick] = rng.choice(special, raw.shape)[pick]
    return raw.view(dtype).reshape(shape)


def in_layout(n, c, h, w, rank, channels_last) -> tuple[int, ...]:
    shape = (n, h, w, c) if channels_last else (n, c, h, w)
    return shape if rank == 4 else shape[1:]


def draw_dims(draw, rank: int) -> tuple[int, int, int, int]:
    """(N, C, H, W), each in 1..3 (N is 1 for rank 3); one in six has one of them 0."""
    dims = [draw(st.integers(1, 3)) if rank == 4 else 1, *(draw(st.integers(1, 3)) for _ in "chw")]
    if draw(st.integers(0, 5)) == 0:
        dims[draw(st.integers(0 if rank == 4 else 1, 3))] = 0
    return tuple(dims)


def spatial_dims(shape, channels_last) -> tuple[int, int]:
    h = len(shape) - (3 if channels_last else 2)
    return tuple(shape[h:h + 2])


# --------------------------------------------------------------------------------------
# Well-formed input: three implementations agree bit for bit
# --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    in_shape: tuple[int, ...]     # x and indices
    out_shape: tuple[int, ...]    # the forward's result, the backward's grad_output
    output_hw: tuple[int, int]
    channels_last: bool
    data_format: str
    dtype: np.dtype
    index_dtype: np.dtype
    x64: bool
    span: int                     # indices are drawn from [0, span): 1 = all duplicates
    seed: int


@st.composite
def cases(draw) -> Case:
    rank = draw(st.sampled_from((3, 4)))
    last = draw(st.booleans())
    n, c, h, w = draw_dims(draw, rank)
    ho, wo = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dtype = draw(st.sampled_from(VALUE_DTYPES))
    index_dtype = np.dtype(draw(st.sampled_from((np.int32, np.int64))))
    # 8-byte values and int64 indices exist only with x64; int32 indices are tried both ways.
    x64 = dtype.itemsize == 8 or index_dtype == np.int64 or draw(st.booleans())
    names = ("NHWC", "HWC") if last else ("NCHW", "CHW")
    fmt = names[0] if rank == 4 else draw(st.sampled_from(names))
    return Case(in_layout(n, c, h, w, rank, last), in_layout(n, c, ho, wo, rank, last),
                (ho, wo), last, fmt, dtype, index_dtype, x64,
                draw(st.integers(1, ho * wo)), draw(st.integers(0, 2**32 - 1)))


def operands(case: Case) -> tuple[np.random.Generator, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(case.seed)
    x = random_values(rng, case.in_shape, case.dtype)
    indices = rng.integers(0, case.span, case.in_shape).astype(case.index_dtype)
    return rng, x, indices


@settings(max_examples=60, **SETTINGS)
@given(cases())
def test_forward_ffi_oracle_and_reference_agree_bitwise(case):
    _, x, indices = operands(case)
    expected = numpy_oracle.unpool(bits(x), indices, case.output_hw, case.channels_last)
    with enable_x64(case.x64):
        got = fwd_ffi(x, indices, output_size=case.output_hw, data_format=case.data_format)
        ref = fwd_ref(x, indices, output_size=case.output_hw, data_format=case.data_format)
    for out in (got, ref):
        assert out.dtype == case.dtype and out.shape == case.out_shape
    np.testing.assert_array_equal(bits(got), expected, err_msg="CPU FFI vs numpy oracle")
    np.testing.assert_array_equal(bits(ref), expected, err_msg="reference vs numpy oracle")


@settings(max_examples=60, **SETTINGS)
@given(cases())
def test_backward_ffi_oracle_and_reference_agree_bitwise(case):
    rng, x, indices = operands(case)
    grad = random_values(rng, case.out_shape, case.dtype)
    expected = numpy_oracle.gather(bits(grad), indices, case.channels_last)
    with enable_x64(case.x64):
        args = (grad, x, indices)
        kw = {"output_size": case.output_hw, "data_format": case.data_format}
        got, ref = bwd_ffi(*args, **kw), bwd_ref(*args, **kw)
    for out in (got, ref):
        assert out.dtype == case.dtype and out.shape == case.in_shape
    np.testing.assert_array_equal(bits(got), expected, err_msg="CPU FFI vs numpy oracle")
    np.testing.assert_array_equal(bits(ref), expected, err_msg="reference vs numpy oracle")


# --------------------------------------------------------------------------------------
# Malformed input: a clear trace-time error, the documented run-time error, or the
# reference's answer. Each call starts well-formed and gets up to two mutations, so every
# kind of mistake is tried alone and in pairs, and unmutated calls run for real; a third
# of the calls also get out-of-range index values.
# --------------------------------------------------------------------------------------

JUNK_PAIRS = [0, -1, (2,), (1, 2, 3), (0, 2), (2, -3), 2.0, (2, 2.0), "22", True, (True, 2)]
# The last three planes are too big for int32 indices: rejected at trace time with int32,
# accepted (and then not run, see check_malformed_call) with int64.
JUNK_SIZES = [(0, 3), (3, 0), (-1, 2), (3,), (1, 2, 3, 4, 5), 3, 2.5, (2.0, 3.0), "34",
              (True, 3), None, (65536, 65536), (2**31, 1), (46341, 46341)]
JUNK_FORMATS = ["nchw", "NHW", "", "NCHW ", None]
BAD_INDEX_VALUES = [-1, -2**31, 2**31 - 1, 2**40, -2**63, 2**63 - 1]  # and `plane`, `plane + 1`


def draw_indices(draw, shape, dtype, plane: int, bad: bool) -> np.ndarray:
    """Indices in [0, plane) (duplicates likely); with `bad`, some are out of range."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = rng.integers(0, max(plane, 1), shape)
    if bad and values.size:
        wrong = np.array([*BAD_INDEX_VALUES, plane, plane + 1], np.int64)
        pick = rng.random(shape) < draw(st.sampled_from([0.5, 0.05, 1.0]))
        values = np.where(pick, rng.choice(wrong, shape), values)
    return values.astype(np.int64).astype(dtype)  # int32 wraps the huge values


def bump_dim(draw, shape) -> tuple[int, ...]:
    d = draw(st.integers(0, len(shape) - 1))
    return tuple(v + 1 if k == d else v for k, v in enumerate(shape))


def change_rank(draw, shape) -> tuple[int, ...]:
    return draw(st.sampled_from([shape[1:], (2, *shape), (), (3,)]))


def mutate_shapes(draw, m: str, shape, idx_shape) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """x's and the indices' shapes after mutation `m`: the forward and the backward calls
    both have "x rank" and "indices shape"; any other `m` leaves them as they are."""
    if m == "x rank":
        return change_rank(draw, shape), idx_shape
    if m == "indices shape":
        return shape, bump_dim(draw, idx_shape)
    return shape, idx_shape


def layout_name(rank: int, channels_last: bool) -> str:
    return ("NHWC" if channels_last else "NCHW")[4 - rank:]


def junk_format(draw, rank: int, channels_last: bool) -> str | None:
    # includes the 3-letter name of the right layout for rank 4 (and the other way round)
    return draw(st.sampled_from([*JUNK_FORMATS, layout_name(7 - rank, channels_last)]))


@dataclass
class Call:
    x: np.ndarray | jax.ShapeDtypeStruct
    indices: np.ndarray
    grad: np.ndarray | None  # the backward's grad_output
    kwargs: dict
    x64: bool


FORWARD_MUTATIONS = ["x rank", "indices shape", "x dtype", "index dtype", "kernel_size",
                     "stride", "padding", "output_size", "output_size vs kernel",
                     "data_format"]


@st.composite
def forward_calls(draw) -> Call:
    rank, last = draw(st.sampled_from((3, 4))), draw(st.booleans())
    n, c, h, w = draw_dims(draw, rank)
    shape = in_layout(n, c, h, w, rank, last)
    dtype = draw(st.sampled_from(VALUE_DTYPES))
    index_dtype = np.dtype(draw(st.sampled_from((np.int32, np.int64))))
    if draw(st.booleans()):  # torch's rule: kernel, stride, padding (and maybe output_size)
        k, s, p = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(0, 1))
        ho, wo = ((d - 1) * s - 2 * p + k for d in (h, w))
        kwargs = {"kernel_size": k, "stride": s, "padding": p}
        if draw(st.booleans()):
            ho, wo = (v + draw(st.integers(1 - s, s - 1)) for v in (ho, wo))
            kwargs["output_size"] = (ho, wo)
    else:
        ho, wo = draw(st.integers(1, 4)), draw(st.integers(1, 4))
        kwargs = {"output_size": (ho, wo)}
    kwargs["data_format"] = layout_name(rank, last)
    mutations = draw(st.lists(st.sampled_from(FORWARD_MUTATIONS), max_size=2, unique=True))
    idx_shape = shape
    for m in mutations:
        shape, idx_shape = mutate_shapes(draw, m, shape, idx_shape)
        if m == "x dtype":
            dtype = draw(st.sampled_from(UNMOVABLE_DTYPES))
        elif m == "index dtype":
            index_dtype = draw(st.sampled_from(BAD_INDEX_DTYPES))
        elif m in ("kernel_size", "stride", "padding"):
            kwargs[m] = draw(st.sampled_from(JUNK_PAIRS))
        elif m == "output_size":
            kwargs["output_size"] = draw(st.sampled_from(JUNK_SIZES))
        elif m == "output_size vs kernel":
            kwargs.setdefault("kernel_size", 2)
            kwargs["output_size"] = draw(st.sampled_from([(1, 1), (9, 9), (ho + 5, wo)]))
        elif m == "data_format":
            kwargs[m] = junk_format(draw, rank, last)
    x = random_values(np.random.default_rng(draw(st.integers(0, 2**32 - 1))), shape, dtype)
    indices = draw_indices(draw, idx_shape, index_dtype, ho * wo, draw(st.integers(0, 2)) == 0)
    return Call(x, indices, None, kwargs, draw(st.booleans()))


BACKWARD_MUTATIONS = ["x rank", "indices shape", "grad rank", "grad batch or channels",
                      "grad dtype", "value dtype", "index dtype", "output_size",
                      "output_size vs grad", "data_format"]


@st.composite
def backward_calls(draw) -> Call:
    rank, last = draw(st.sampled_from((3, 4))), draw(st.booleans())
    n, c, h, w = draw_dims(draw, rank)
    ho, wo = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    shape, grad_shape = in_layout(n, c, h, w, rank, last), in_layout(n, c, ho, wo, rank, last)
    dtype = grad_dtype = draw(st.sampled_from(VALUE_DTYPES))
    index_dtype = np.dtype(draw(st.sampled_from((np.int32, np.int64))))
    kwargs = {"output_size": draw(st.sampled_from([(ho, wo), grad_shape])),
                  "data_format": layout_name(rank, last)}
    mutations = draw(st.lists(st.sampled_from(BACKWARD_MUTATIONS), max_size=2, unique=True))
    idx_shape = shape
    for m in mutations:
        shape, idx_shape = mutate_shapes(draw, m, shape, idx_shape)
        if m == "grad rank":
            grad_shape = change_rank(draw, grad_shape)
        elif m == "grad batch or channels":
            grad_shape = bump_dim(draw, grad_shape)
        elif m == "grad dtype":
            grad_dtype = draw(st.sampled_from(VALUE_DTYPES + UNMOVABLE_DTYPES))
        elif m == "value dtype":
            dtype = grad_dtype = draw(st.sampled_from(UNMOVABLE_DTYPES))
        elif m == "index dtype":
            index_dtype = draw(st.sampled_from(BAD_INDEX_DTYPES))
        elif m == "output_size":
            kwargs["output_size"] = draw(st.sampled_from(JUNK_SIZES))
        elif m == "output_size vs grad":
            kwargs["output_size"] = (ho + 1, wo)
        elif m == "data_format":
            kwargs[m] = junk_format(draw, rank, last)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    grad = random_values(rng, grad_shape, grad_dtype)
    x = random_values(rng, shape, dtype)
    if draw(st.booleans()):  # only x's shape and dtype are used
        x = jax.ShapeDtypeStruct(x.shape, x.dtype)
    indices = draw_indices(draw, idx_shape, index_dtype, ho * wo, draw(st.integers(0, 2)) == 0)
    return Call(x, indices, grad, kwargs, draw(st.booleans()))


def trace_error(fn, *args) -> Exception | None:
    """The exception abstract evaluation (no compilation, no run) raises, if any."""
    try:
        jax.eval_shape(fn, *args)
    except Exception as e:  # noqa: BLE001 -- the caller asserts the type
        return e
    return None


def check_malformed_call(op: str, api, ref, values, indices, channels_last: bool) -> str:
    """The contract on one call `api(values, indices)`; returns the outcome (for
    hypothesis' statistics). `values` is x (forward) or grad_output (backward)."""
    err, ref_err = trace_error(api, values, indices), trace_error(ref, values, indices)
    assert type(err) is type(ref_err) and str(err) == str(ref_err), (err, ref_err)
    if err is not None:
        assert isinstance(err, (ValueError, TypeError)), repr(err)
        assert str(err).startswith(f"{op}: "), str(err)
        with pytest.raises(type(err)) as real:  # the real call fails the same way
            api(values, indices)
        assert str(real.value) == str(err)
        return f"trace-time {type(err).__name__}"
    out = jax.eval_shape(api, values, indices)
    # The output plane: the forward's result's, the backward's grad_output's.
    hw = spatial_dims((out if op == "max_unpool2d" else values).shape, channels_last)
    if out.size > 10**6:  # a huge plane is accepted only with int64 indices; don't run it
        assert indices.dtype == np.int64 and hw[0] * hw[1] > 2**31 - 1
        return "accepted a huge plane (not run)"
    # An empty result never reaches a kernel (XLA replaces it): nothing to check indices.
    message = None if out.size == 0 else expected_message(op, indices, hw, channels_last)
    if message is not None:
        with pytest.raises(RUNTIME_ERRORS) as real:
            jax.block_until_ready(api(values, indices))
        assert str(real.value) == message
        return "run-time out-of-range error"
    got, want = api(values, indices), jax.jit(ref)(values, indices)
    assert got.shape == want.shape == out.shape and got.dtype == want.dtype == out.dtype
    np.testing.assert_array_equal(bits(got), bits(want))
    return "ran, equals the reference"


# A plane past int32: rejected with int32 indices, accepted (not run) with int64 ones.
HUGE_PLANE_CALLS = [Call(np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 2, 2), dtype), None,
                         {"output_size": (46341, 46341), "data_format": "NCHW"}, True)
                    for dtype in (np.int32, np.int64)]


@settings(max_examples=150, **SETTINGS)
@given(forward_calls())
@example(HUGE_PLANE_CALLS[0])
@example(HUGE_PLANE_CALLS[1])
def test_malformed_forward_fails_cleanly_or_matches_reference(call):
    kw = call.kwargs
    with enable_x64(call.x64):
        x, indices = jnp.asarray(call.x), jnp.asarray(call.indices)  # as the API converts
        note(f"x {x.dtype}{x.shape}, indices {indices.dtype}{indices.shape}, {kw}")
        event(check_malformed_call(
            "max_unpool2d", functools.partial(ju.max_unpool2d, **kw),
            functools.partial(reference.max_unpool2d, **kw), x, indices,
            kw["data_format"] in ("NHWC", "HWC")))


@settings(max_examples=150, **SETTINGS)
@given(backward_calls())
def test_malformed_backward_fails_cleanly_or_matches_reference(call):
    kw, x = call.kwargs, call.x
    with enable_x64(call.x64):
        grad, indices = jnp.asarray(call.grad), jnp.asarray(call.indices)
        if not isinstance(x, jax.ShapeDtypeStruct):
            x = jnp.asarray(x)
        note(f"grad {grad.dtype}{grad.shape}, x {x.dtype}{x.shape}, "
             f"indices {indices.dtype}{indices.shape}, {kw}")
        event(check_malformed_call(
            "max_unpool2d_backward",
            lambda g, i: ju.max_unpool2d_backward(g, x, i, **kw),
            lambda g, i: reference.max_unpool2d_backward(g, x, i, **kw), grad, indices,
            kw["data_format"] in ("NHWC", "HWC")))
