"""Every error case of the contract (docs/semantics.md, "Errors"): type and message, at trace
time and at run time."""

import warnings
from functools import partial

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from out_of_range import POOL_HINT, POSITIONS_NOTE
from torch_oracle import needs_torch, torch

import jax_unpool as ju
from jax_unpool._compat import enable_x64

X = jnp.ones((1, 2, 2, 2), jnp.float32)
IDX = jnp.zeros((1, 2, 2, 2), jnp.int32)
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)  # see docs/semantics.md: jax-ml/jax#34083


def unpool(**kw):
    args = dict(x=X, indices=IDX, output_size=(3, 3))
    args.update(kw)
    return lambda: ju.max_unpool2d(**args)


def backward(**kw):
    args = dict(grad_output=jnp.ones((1, 2, 3, 3)), x=X, indices=IDX, output_size=(3, 3))
    args.update(kw)
    return lambda: ju.max_unpool2d_backward(**args)


TRACE_TIME_CASES = {
    "x rank 2": (unpool(x=jnp.ones((2, 2)), indices=jnp.zeros((2, 2), jnp.int32)),
                 ValueError, r"max_unpool2d: x must have rank 3 \(C, H, W\) or 4.*got rank 2"),
    "x rank 5": (unpool(x=jnp.ones((1,) * 5), indices=jnp.zeros((1,) * 5, jnp.int32)),
                 ValueError, r"max_unpool2d: x must have rank 3.*got rank 5"),
    "indices shape": (unpool(indices=jnp.zeros((1, 2, 2, 1), jnp.int32)), ValueError,
                      r"max_unpool2d: indices must have the shape of x, \(1, 2, 2, 2\), got "
                      r"\(1, 2, 2, 1\)"),
    "float indices": (unpool(indices=jnp.zeros((1, 2, 2, 2))), TypeError,
                      r"max_unpool2d: indices must be int32 or int64, got float32"),
    "int16 indices": (unpool(indices=jnp.zeros((1, 2, 2, 2), jnp.int16)), TypeError,
                      r"max_unpool2d: indices must be int32 or int64, got int16"),
    "int4 values": (unpool(x=jnp.ones((1, 2, 2, 2), jnp.int4)), TypeError,
                    r"max_unpool2d: x must have a 1-, 2-, 4- or 8-byte dtype, got int4"),
    "output_size length": (unpool(output_size=(3, 3, 3)), ValueError,
                           r"max_unpool2d: output_size must have 2 entries \(H_out, W_out\) "
                           r"or 4 \(a full shape\), got 3"),
    "output_size negative": (unpool(output_size=(3, -1)), ValueError,
                             r"max_unpool2d: output_size must be non-negative, got \(3, -1\)"),
    "output_size float": (unpool(output_size=(3.0, 3)), TypeError,
                          r"max_unpool2d: output_size must be an int or a pair of ints"),
    "no size": (unpool(output_size=None), ValueError,
                r"max_unpool2d: one of kernel_size or output_size is required"),
    "stride without kernel": (unpool(stride="junk"), ValueError,
                              r"max_unpool2d: stride and padding need kernel_size, got "
                              r"kernel_size=None with stride='junk', padding=0"),
    "padding without kernel": (unpool(padding=-5), ValueError,
                               r"max_unpool2d: stride and padding need kernel_size"),
    "kernel zero": (unpool(output_size=None, kernel_size=0), ValueError,
                    r"max_unpool2d: kernel_size must be positive, got 0"),
    "stride negative": (unpool(output_size=None, kernel_size=2, stride=-1), ValueError,
                        r"max_unpool2d: stride must be positive, got -1"),
    "padding negative": (unpool(output_size=None, kernel_size=2, padding=-1), ValueError,
                         r"max_unpool2d: padding must be non-negative, got -1"),
    "padding too large": (unpool(output_size=None, kernel_size=2, padding=3), ValueError,
                          r"max_unpool2d: kernel_size=\(2, 2\), stride=\(2, 2\), "
                          r"padding=\(3, 3\) give a negative output size \(-2, -2\)"),
    "output_size outside torch range": (unpool(kernel_size=2, output_size=(6, 4)), ValueError,
                                        r"max_unpool2d: invalid output_size \(6, 4\): its "
                                        r"spatial sizes \(6, 4\) \(read as NCHW\) must lie "
                                        r"strictly within "
                                        r"stride of the default size \(4, 4\) \(H_out between "
                                        r"2 and 6, exclusive\)"),
    "data_format": (unpool(data_format="NCWH"), ValueError,
                    r"max_unpool2d: data_format must be one of .*got 'NCWH'"),
    "backward x rank": (backward(x=jnp.ones((2, 2)), indices=jnp.zeros((2, 2), jnp.int32)),
                        ValueError, r"max_unpool2d_backward: x must have rank 3"),
    "backward indices shape": (backward(indices=jnp.zeros((1, 2, 2, 1), jnp.int32)),
                               ValueError, r"max_unpool2d_backward: indices must have the "
                               r"shape of x"),
    "backward grad rank": (backward(grad_output=jnp.ones((2, 3, 3))), ValueError,
                           r"max_unpool2d_backward: grad_output \(2, 3, 3\) and indices "
                           r"\(1, 2, 2, 2\) must have the same rank"),
    "backward grad channels": (backward(grad_output=jnp.ones((1, 3, 3, 3))), ValueError,
                               r"max_unpool2d_backward: grad_output \(1, 3, 3, 3\) and indices "
                               r"\(1, 2, 2, 2\) must have the same rank and the same batch"),
    "backward dtype mismatch": (backward(grad_output=jnp.ones((1, 2, 3, 3), jnp.float16)),
                                TypeError, r"max_unpool2d_backward: grad_output must have the "
                                r"dtype of x, float32, got float16"),
    "backward output_size mismatch": (backward(output_size=(3, 4)), ValueError,
                                      r"max_unpool2d_backward: output_size \(3, 4\) must match "
                                      r"grad_output's spatial dims \(3, 3\)"),
    "backward output_size length": (backward(output_size=(3,)), ValueError,
                                    r"max_unpool2d_backward: output_size must have 2 entries"),
    "backward float indices": (backward(indices=jnp.zeros((1, 2, 2, 2))), TypeError,
                               r"max_unpool2d_backward: indices must be int32 or int64"),
    "backward x None": (backward(x=None), TypeError,
                        r"max_unpool2d_backward: x must be an array or have \.shape and "
                        r"\.dtype \(a jax\.ShapeDtypeStruct; .*\), got NoneType"),
    "backward x int": (backward(x=3), TypeError,
                       r"max_unpool2d_backward: x must be an array .*got int"),
    "backward x list": (backward(x=np.ones((1, 2, 2, 2)).tolist()), TypeError,
                        r"max_unpool2d_backward: x must be an array .*got list"),
    "backward x shape tuple": (backward(x=(1, 2, 2, 2)), TypeError,
                               r"max_unpool2d_backward: x must be an array .*got tuple"),
    "reference backward x tuple": (
        lambda: ju.reference.max_unpool2d_backward(jnp.ones((1, 2, 3, 3)), (1, 2, 2, 2), IDX,
                                                   (3, 3)),
        TypeError, r"max_unpool2d_backward: x must be an array .*got tuple"),
    "data_format list": (unpool(data_format=["NCHW"]), ValueError,
                         r"max_unpool2d: data_format must be one of .*got \['NCHW'\]"),
    "backward data_format list": (backward(data_format=["NCHW"]), ValueError,
                                  r"max_unpool2d_backward: data_format must be one of .*got "
                                  r"\['NCHW'\]"),
    "reference data_format list": (
        lambda: ju.reference.max_unpool2d(X, IDX, output_size=(3, 3), data_format=["NCHW"]),
        ValueError, r"max_unpool2d: data_format must be one of .*got \['NCHW'\]"),
    "reference backward data_format list": (
        lambda: ju.reference.max_unpool2d_backward(jnp.ones((1, 2, 3, 3)), X, IDX, (3, 3),
                                                   data_format=["NCHW"]),
        ValueError, r"max_unpool2d_backward: data_format must be one of .*got \['NCHW'\]"),
}


@pytest.mark.parametrize("case", list(TRACE_TIME_CASES))
def test_trace_time_error(case):
    call, error, message = TRACE_TIME_CASES[case]
    with pytest.raises(error, match=message):
        call()


@pytest.mark.parametrize("case", ["x rank 2", "indices shape", "float indices",
                                  "backward dtype mismatch", "backward output_size mismatch"])
def test_trace_time_error_under_jit(case):
    call, error, message = TRACE_TIME_CASES[case]
    with pytest.raises(error, match=message):
        jax.jit(call)()


def test_full_shape_output_size_is_accepted():
    out = ju.max_unpool2d(X, IDX, output_size=(1, 2, 3, 3))
    assert out.shape == (1, 2, 3, 3)


def test_int32_indices_cannot_address_a_plane_past_int32():
    x = jax.ShapeDtypeStruct((1, 1, 2, 2), jnp.int8)
    i = jax.ShapeDtypeStruct((1, 1, 2, 2), jnp.int32)
    with pytest.raises(ValueError, match=r"max_unpool2d: an output plane of 50000x50000 = "
                                         r"2500000000 positions cannot be addressed by int32"):
        jax.eval_shape(lambda x, i: ju.max_unpool2d(x, i, output_size=(50000, 50000)), x, i)


HOST_INDEX_ENTRIES = {
    "max_unpool2d": lambda i: ju.max_unpool2d(X, i, output_size=(3, 3)),
    "max_unpool2d_backward": lambda i: ju.max_unpool2d_backward(jnp.ones((1, 2, 3, 3)), X, i,
                                                                (3, 3)),
    "reference.max_unpool2d": lambda i: ju.reference.max_unpool2d(X, i, output_size=(3, 3)),
    "reference.max_unpool2d_backward": lambda i: ju.reference.max_unpool2d_backward(
        jnp.ones((1, 2, 3, 3)), X, i, (3, 3)),
}


@pytest.mark.parametrize("entry", list(HOST_INDEX_ENTRIES))
@pytest.mark.parametrize("host", [np.asarray, np.ndarray.tolist], ids=["numpy", "list"])
@pytest.mark.parametrize("bad", [2**32 + 3, -(2**31) - 1])
def test_host_int64_indices_outside_int32_are_refused_with_x64_off(entry, host, bad):
    # jnp.asarray would wrap 2**32 + 3 to 3 (numpy) or raise a bare OverflowError (list).
    idx = np.zeros((1, 2, 2, 2), np.int64)
    idx[0, 1, 0, 1] = bad
    fn = entry.split(".")[-1]
    with pytest.raises(ValueError, match=rf"^{fn}: indices must lie in int32's range with "
                                         rf"jax_enable_x64 off, got {bad} at position "
                                         r"\(0, 1, 0, 1\)"):
        HOST_INDEX_ENTRIES[entry](host(idx))


X64_OFF = ", as jax_enable_x64 is off"
CAST = r"; cast them: indices\.astype\(jnp\.int32\)$"


@pytest.mark.parametrize("entry", list(HOST_INDEX_ENTRIES))
@pytest.mark.parametrize("indices,x64,got", [
    (np.zeros((1, 2, 2, 2), np.uint64), False, rf"uint64 \(jax made it uint32{X64_OFF}\)"),
    (np.zeros((1, 2, 2, 2), np.float64), False, rf"float64 \(jax made it float32{X64_OFF}\)"),
    (np.zeros((1, 2, 2, 2)).tolist(), False, rf"float64 \(jax made it float32{X64_OFF}\)"),
    (np.zeros((1, 2, 2, 2), np.float64), True, "float64"),
    (np.zeros((1, 2, 2, 2), np.float16), False, "float16"),
    (jnp.zeros((1, 2, 2, 2)), False, "float32"),  # a jax array: what jax holds is what came
], ids=["uint64", "float64", "float list", "float64 x64", "float16", "jax float32"])
def test_index_dtype_error_names_the_dtype_passed_and_the_cast(entry, indices, x64, got):
    fn = entry.split(".")[-1]
    with enable_x64(x64), pytest.raises(
            TypeError, match=rf"^{fn}: indices must be int32 or int64, got {got}{CAST}"):
        HOST_INDEX_ENTRIES[entry](indices)


def test_the_suggested_cast_is_a_fix():
    indices = np.array([[[[0.0, 1.0], [2.0, 3.0]]]])
    with pytest.raises(TypeError, match=r"cast them: indices\.astype\(jnp\.int32\)"):
        ju.max_unpool2d(X[:1, :1], indices, 2)
    out = ju.max_unpool2d(X[:1, :1], indices.astype(jnp.int32), 2)
    expected = np.zeros((1, 1, 4, 4), np.float32)
    expected.reshape(-1)[:4] = 1  # flat positions 0 to 3 of the 4x4 plane: its first row
    np.testing.assert_array_equal(out, expected)


def test_pool_dtype_error_names_the_dtype_passed():
    with pytest.raises(TypeError, match=r"^max_pool2d_with_indices: x must have a real dtype "
                                        r"\(max needs an order\), got complex128 \(jax made "
                                        rf"it complex64{X64_OFF}\)$"):
        ju.max_pool2d_with_indices(np.ones((1, 1, 2, 2), np.complex128), 2)


def test_backward_dtype_mismatch_names_the_dtypes_passed():
    x = jax.ShapeDtypeStruct((1, 2, 2, 2), np.float64)
    with pytest.raises(TypeError, match=r"^max_unpool2d_backward: grad_output must have the "
                                        rf"dtype of x, float64 \(jax made it float32{X64_OFF}\)"
                                        rf", got int64 \(jax made it int32{X64_OFF}\)$"):
        ju.max_unpool2d_backward(np.ones((1, 2, 3, 3), np.int64), x, IDX, (3, 3))


@pytest.mark.parametrize("entry", ["api", "reference", "primitive", "vmap"])
def test_a_result_past_xla_array_size_is_refused_at_trace_time(entry):
    # jaxlib aborts the whole process on such a result, so the call runs in a child.
    proc = fresh_process.run("oversized_result.py", entry)
    assert proc.returncode == 0, f"the child failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    # 2**62 elements (2**31 * 2**31, or 8 * 2**30 * 2**29): 2**64 bytes of float32.
    size, shape = ((1073741824, 536870912), (8, 1, 1073741824, 536870912)) \
        if entry == "vmap" else ((2147483648, 2147483648), (1, 1, 2147483648, 2147483648))
    expected = (f"max_unpool2d: output_size {size} gives a result of shape {shape} = "
                f"{2**62} elements, more than the 1152921504606846975 (2**60 - 1)")
    assert expected in proc.stdout, proc.stdout


@pytest.mark.parametrize("name,bind", [
    ("max_unpool2d", lambda x, i: ju.max_unpool2d_p.bind(x, i, output_size=(3, 3),
                                                         channels_last=False)),
    ("max_unpool2d_backward", lambda x, i: ju.max_unpool2d_backward_p.bind(
        x, i, channels_last=False)),
])
def test_primitive_abstract_eval_validates(name, bind):
    with pytest.raises(ValueError, match=rf"{name}: .*must have rank 3"):
        bind(jnp.ones((2, 2)), jnp.zeros((2, 2), jnp.int32))
    with pytest.raises(TypeError, match=rf"{name}: indices must be int32 or int64"):
        bind(jnp.ones((1, 1, 2, 2)), jnp.zeros((1, 1, 2, 2)))


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("bad", [9, -1, 2**31 - 1])
def test_forward_out_of_range_index_fails_the_call(rank, bad):
    shape = (2, 3, 2, 2)[4 - rank:]
    idx = np.zeros(shape, np.int32)
    pos = (1, 2, 1, 0)[4 - rank:]
    idx[pos] = bad
    n, c = (pos[0] if rank == 4 else 0), pos[-3]
    f = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=(3, 3)))
    message = (rf"OUT_OF_RANGE: max_unpool2d: index {bad} at \(n={n}, c={c}, i=2\) of indices "
               r"is out of range: valid indices are \[0, 9\) for an output plane of 3x3")
    with pytest.raises(jax.errors.JaxRuntimeError, match=message):
        f(jnp.ones(shape), idx).block_until_ready()


def test_backward_out_of_range_index_fails_the_call():
    idx = np.zeros((2, 3, 2, 2), np.int64)
    idx[0, 1, 0, 1] = 12
    x = jax.ShapeDtypeStruct(idx.shape, jnp.float32)
    g = jax.jit(lambda g, i: ju.max_unpool2d_backward(g, x, i, (3, 3)))
    message = (r"OUT_OF_RANGE: max_unpool2d_backward: index 12 at \(n=0, c=1, i=1\) of indices "
               r"is out of range: valid indices are \[0, 9\)")
    with enable_x64(True), pytest.raises(jax.errors.JaxRuntimeError, match=message):
        g(jnp.ones((2, 3, 3, 3), jnp.float32),
          jnp.asarray(idx)).block_until_ready()


def test_out_of_range_positions_are_those_of_the_kernel_call_under_vmap():
    # A bad index at vmapped (b=3, n=1) of a (5, 2, ...) batch: the kernel sees the batch
    # folded into n = 3 * 2 + 1 = 7, and the message says its positions are the kernel's.
    idx = np.zeros((5, 2, 3, 2, 2), np.int32)
    idx[3, 1, 2, 1, 0] = 9
    f = jax.jit(jax.vmap(lambda x, i: ju.max_unpool2d(x, i, output_size=(3, 3))))
    with pytest.raises(jax.errors.JaxRuntimeError) as err:
        f(jnp.ones(idx.shape), idx).block_until_ready()
    assert "index 9 at (n=7, c=2, i=2) of indices is out of range" in str(err.value)
    assert str(err.value).endswith(f"({POSITIONS_NOTE})")


def test_repeated_failing_call_keeps_the_message():
    f = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=(3, 3)))
    f(X, IDX).block_until_ready()  # a successful first call installs jit's fast path
    for _ in range(2):
        with pytest.raises(RUNTIME_ERRORS, match=r"max_unpool2d: index 9 at \(n=0, c=0, i=0\)"):
            f(X, IDX.at[0, 0, 0, 0].set(9)).block_until_ready()


def test_a_failure_after_only_own_failures_can_take_the_value_error_form():
    # docs/semantics.md: jit's fast path is shared by every eager call of an op with the
    # same shapes, dtypes and parameters, so one success anywhere in the process gives
    # later failures the ValueError form (jaxlib 0.10.2), though this caller only failed.
    x, idx = jnp.ones((1, 1, 2, 3)), jnp.zeros((1, 1, 2, 3), jnp.int32)
    ju.max_unpool2d(x, idx, output_size=(5, 7)).block_until_ready()  # someone else's call
    with pytest.raises(RUNTIME_ERRORS, match=r"max_unpool2d: index 35 at \(n=0, c=0, i=0\)") \
            as error:
        ju.max_unpool2d(x, idx.at[0, 0, 0, 0].set(35), output_size=(5, 7)).block_until_ready()
    if jax.__version__ == "0.10.2":
        assert type(error.value) is ValueError


def test_failed_call_returns_no_partial_result():
    # One jitted computation producing a good and a bad result fails as a whole.
    f = jax.jit(lambda x, good, bad: (ju.max_unpool2d(x, good, output_size=(3, 3)),
                                      ju.max_unpool2d(x, bad, output_size=(3, 3))))
    with pytest.raises(jax.errors.JaxRuntimeError, match="out of range"):
        jax.block_until_ready(f(X, IDX, IDX.at[0, 1, 1, 1].set(100)))


def test_the_reference_drops_out_of_range_indices():
    idx = IDX.at[0, 0, 0, 0].set(9).at[0, 0, 0, 1].set(-1)
    x = jnp.arange(8.0).reshape(1, 2, 2, 2)
    out = ju.reference.max_unpool2d(x, idx, output_size=(3, 3))
    np.testing.assert_array_equal(out[0, 0].ravel(), [3, 0, 0, 0, 0, 0, 0, 0, 0])
    back = ju.reference.max_unpool2d_backward(jnp.ones((1, 2, 3, 3)), x, idx, (3, 3))
    np.testing.assert_array_equal(back[0, 0].ravel(), [0, 0, 1, 1])


# --------------------------------------------------------------------------------------
# The pools' arguments: each error names the function and the argument
# --------------------------------------------------------------------------------------

X4 = np.zeros((1, 1, 6, 6), np.float32)


@pytest.mark.parametrize(
    "x,kwargs,exc,fragment",
    [
        (np.zeros((6, 6)), {}, ValueError, "x must have rank 3 (C, H, W) or 4"),
        (np.zeros((1, 1, 1, 6, 6)), {}, ValueError, "got rank 5 with shape"),
        (X4, {"kernel_size": 0}, ValueError, "kernel_size must be positive, got (0, 0)"),
        (X4, {"kernel_size": (2, -1)}, ValueError, "kernel_size must be positive"),
        (X4, {"stride": 0}, ValueError, "stride must be positive, got (0, 0)"),
        (X4, {"dilation": (1, 0)}, ValueError, "dilation must be positive, got (1, 0)"),
        (X4, {"padding": -1}, ValueError, "padding must be non-negative"),
        (X4, {"padding": 2}, ValueError, "padding must be at most half of kernel_size"),
        # PyTorch's rule uses the kernel size, not the dilated (effective) one:
        (X4, {"padding": 2, "dilation": 3}, ValueError, "padding=(2, 2) and kernel_size=(2, 2)"),
        (X4, {"kernel_size": 7}, ValueError, "output size must be positive, got (H_out, W_out)=(0"),
        (np.zeros((1, 1, 0, 6)), {}, ValueError, "non-empty spatial dimensions"),
        (X4, {"data_format": "NCWH"}, ValueError, "data_format must be one of"),
        (X4, {"kernel_size": (2, 2, 2)}, TypeError, "kernel_size must be an int or a pair of ints"),
        (X4, {"stride": 1.5}, TypeError, "stride must be an int or a pair of ints (h, w), got 1.5"),
        (X4, {"index_dtype": jnp.float32}, TypeError, "must be int32 or int64, got float32"),
        (X4, {"index_dtype": jnp.int16}, TypeError, "must be int32 or int64, got int16"),
        (X4.astype(np.complex64), {}, TypeError, "real dtype"),
    ],
)
def test_invalid_pool_arguments_raise(x, kwargs, exc, fragment):
    kwargs = {"kernel_size": 2, **kwargs}
    with pytest.raises(exc, match="max_pool2d_with_indices") as info:
        ju.max_pool2d_with_indices(x, **kwargs)
    assert fragment in str(info.value)


@pytest.mark.slow
@pytest.mark.parametrize("fn,args,message", [
    (ju.max_pool1d_with_indices, ((2, 3, 4, 5), 2),
     r"max_pool1d_with_indices: x must have rank 2 \(C, W\) or 3 \(N, C, W\), got rank 4"),
    (ju.max_pool3d_with_indices, ((2, 3, 4), 2),
     r"max_pool3d_with_indices: x must have rank 4 \(C, D, H, W\) or 5 \(N, C, D, H, W\)"),
    (ju.max_pool3d_with_indices, ((1, 1, 4, 4, 4), (2, 2)),
     r"max_pool3d_with_indices: kernel_size must be an int or a triple of ints \(d, h, w\), "
     r"got \(2, 2\)"),
    (ju.max_pool1d_with_indices, ((1, 1, 8), (2, 2)),
     r"max_pool1d_with_indices: kernel_size must be an int or a 1-tuple \(w,\), got \(2, 2\)"),
    (ju.max_pool3d_with_indices, ((1, 1, 4, 4, 4), 2, None, 2),
     r"max_pool3d_with_indices: padding must be at most half of kernel_size"),
])
def test_pool_errors_of_other_ranks_name_the_function_and_argument(fn, args, message):
    shape, *rest = args
    with pytest.raises((ValueError, TypeError), match=message):
        fn(jnp.zeros(shape), *rest)


@pytest.mark.slow
def test_a_pool_data_format_of_another_rank_is_refused():
    with pytest.raises(ValueError, match=r"max_pool3d_with_indices: data_format must be one of "
                                         r"\['CDHW', 'DHWC', 'NCDHW', 'NDHWC'\], got 'NCHW'"):
        ju.max_pool3d_with_indices(jnp.zeros((1, 1, 4, 4, 4)), 2, data_format="NCHW")


def test_int32_pool_indices_too_narrow_for_plane_raise():
    huge = jax.ShapeDtypeStruct((1, 1, 50_000, 50_000), jnp.float32)  # traced, never allocated
    with pytest.raises(ValueError, match="index_dtype int32 cannot hold the flat indices"):
        jax.eval_shape(lambda v: ju.max_pool2d_with_indices(v, 2), huge)


def test_pool_errors_are_raised_at_trace_time_under_jit():
    with pytest.raises(ValueError, match="padding must be at most half"):
        jax.jit(lambda v: ju.max_pool2d_with_indices(v, 2, 1, 3)).lower(X4)


def test_no_warning_for_default_pool_arguments():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ju.max_pool2d_with_indices(X4, 2)


# --------------------------------------------------------------------------------------
# The 1-D and 3-D unpools: each error names the function, the argument and the rank
# --------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("fn,args,message", [
    (ju.max_unpool1d, ((2, 3, 4, 5), {"output_size": (8,)}),
     r"max_unpool1d: x must have rank 2 \(C, W\) or 3 \(N, C, W\), got rank 4"),
    (ju.max_unpool3d, ((2, 3, 4), {"output_size": (8, 8, 8)}),
     r"max_unpool3d: x must have rank 4 \(C, D, H, W\) or 5 \(N, C, D, H, W\), got rank 3"),
    (ju.max_unpool3d, ((2, 3, 4, 4, 4), {"kernel_size": (2, 2)}),
     r"max_unpool3d: kernel_size must be an int or a triple of ints, got \(2, 2\)"),
    (ju.max_unpool1d, ((2, 3, 4), {"output_size": (8, 8)}),
     r"max_unpool1d: output_size must have 1 entries \(W_out\) or 3 \(a full shape\)"),
    (ju.max_unpool3d, ((2, 3, 4, 4, 4), {"output_size": (8, 8, 8), "data_format": "NCHW"}),
     r"max_unpool3d: data_format must be one of \['CDHW', 'DHWC', 'NCDHW', 'NDHWC'\], "
     r"got 'NCHW'"),
    (ju.max_unpool3d, ((1, 1, 2, 2, 2), {"kernel_size": 2, "output_size": (4, 4, 6)}),
     r"max_unpool3d: invalid output_size \(4, 4, 6\): .* \(W_out between 2 and 6"),
])
def test_unpool_errors_of_other_ranks_name_the_function_and_argument(fn, args, message):
    shape, kwargs = args
    with pytest.raises((ValueError, TypeError), match=message):
        fn(jnp.zeros(shape), jnp.zeros(shape, jnp.int32), **kwargs)


@pytest.mark.slow
def test_unpool_backward_errors_of_other_ranks_name_the_function():
    g = jnp.zeros((1, 2, 3, 4, 5))
    idx = jnp.zeros((1, 2, 2, 2, 2), jnp.int32)
    with pytest.raises(ValueError, match=r"max_unpool3d_backward: output_size \(3, 4, 6\) must "
                                         r"match grad_output's spatial dims \(3, 4, 5\)"):
        ju.max_unpool3d_backward(g, jnp.zeros(idx.shape), idx, (3, 4, 6))
    with pytest.raises(TypeError, match="max_unpool1d_backward: indices must be int32 or int64"):
        ju.max_unpool1d_backward(jnp.zeros((1, 2, 6)), jnp.zeros((1, 2, 3)),
                                 jnp.zeros((1, 2, 3)), (6,))


NOTE_3D = ("any position named here is in the indices buffer of this kernel call: n counts "
           "the images with the batch axes of jax.vmap folded in, i = (d * H + h) * W + w, "
           "and under sharding positions are within the shard")


@pytest.mark.slow
def test_run_time_errors_name_the_rank_and_its_output_volume():
    idx = np.zeros((1, 1, 2, 2, 2), np.int32)
    idx[0, 0, 1, 1, 0] = 64  # the output volume has 4 * 4 * 4 = 64 positions
    message = ("OUT_OF_RANGE: max_unpool3d{}: index 64 at (n=0, c=0, i=6) of indices is out "
               "of range: valid indices are [0, 64) for an output volume of 4x4x4{} "
               f"({NOTE_3D})")
    with pytest.raises(jax.errors.JaxRuntimeError) as err:
        jax.block_until_ready(ju.max_unpool3d(jnp.ones(idx.shape), idx, 2))
    # The forward's index past the volume comes with the usual cause's remedy.
    assert str(err.value).splitlines()[0] == message.format("", POOL_HINT)
    with pytest.raises(jax.errors.JaxRuntimeError) as err:
        jax.block_until_ready(ju.max_unpool3d_backward(
            jnp.ones((1, 1, 4, 4, 4)), jnp.ones(idx.shape), idx, (4, 4, 4)))
    assert str(err.value).splitlines()[0] == message.format("_backward", "")


@pytest.mark.slow
def test_run_time_error_of_1d_names_the_output_row():
    idx = np.array([[[0, 1, 2], [3, 4, 9]]], np.int32)  # (N, C, W) = (1, 2, 3) into a row of 8
    with pytest.raises(jax.errors.JaxRuntimeError) as err:
        jax.block_until_ready(ju.max_unpool1d(jnp.ones(idx.shape), idx, output_size=(8,)))
    assert str(err.value).splitlines()[0] == (
        "OUT_OF_RANGE: max_unpool1d: index 9 at (n=0, c=1, i=2) of indices is out of range: "
        f"valid indices are [0, 8) for an output row of 8{POOL_HINT} (any position named here "
        "is in the "
        "indices buffer of this kernel call: n counts the images with the batch axes of "
        "jax.vmap folded in, i = w, and under sharding positions are within the shard)")


@pytest.mark.slow
@pytest.mark.parametrize("bind,message", [
    (lambda x, i: ju.max_unpool2d_p.bind(x, i, output_size=(2, 2, 2, 2), channels_last=False),
     r"max_unpool2d_p: output_size must be a tuple of 1, 2 or 3 sizes"),
    (lambda x, i: ju.max_unpool2d_backward_p.bind(x, i, channels_last=False, spatial_rank=4),
     r"max_unpool2d_backward_p: spatial_rank must be 1, 2 or 3, got 4"),
    (lambda x, i: ju.max_unpool2d_backward_p.bind(x, i, channels_last=False, spatial_rank=1),
     r"max_unpool1d_backward: grad_output must have rank 2 \(C, W\) or 3 \(N, C, W\), got "
     r"rank 4"),
])
def test_direct_binds_with_a_bad_spatial_rank_are_value_errors(bind, message):
    with pytest.raises(ValueError, match=message):
        bind(jnp.zeros((1, 1, 2, 2)), jnp.zeros((1, 1, 2, 2), jnp.int32))


# --------------------------------------------------------------------------------------
# Arguments of every kind (issue 22): each public function names itself and the argument
# --------------------------------------------------------------------------------------

def _ones(*shape):
    return np.ones(shape, np.float32)


def _zeros_idx(*shape):
    return np.zeros(shape, np.int32)


# fn -> (call taking the named argument's value, the argument's name), per rank
OPERAND_CALLS = {}
for _k in (1, 2, 3):
    _x, _g, _i = _ones(1, 1, *[2] * _k), _ones(1, 1, *[4] * _k), _zeros_idx(1, 1, *[2] * _k)
    for _mod in (ju, ju.reference):
        _where = "reference." if _mod is ju.reference else ""
        _f = getattr(_mod, f"max_unpool{_k}d")
        _b = getattr(_mod, f"max_unpool{_k}d_backward")
        _p = getattr(_mod, f"max_pool{_k}d_with_indices")
        OPERAND_CALLS |= {
            f"{_where}max_unpool{_k}d x": (partial(lambda f, i, v: f(v, i, 2), _f, _i), "x"),
            f"{_where}max_unpool{_k}d indices": (
                partial(lambda f, x, v: f(x, v, 2), _f, _x), "indices"),
            f"{_where}max_unpool{_k}d_backward grad_output": (
                partial(lambda f, x, i, k, v: f(v, x, i, (4,) * k), _b, _x, _i, _k),
                "grad_output"),
            f"{_where}max_unpool{_k}d_backward indices": (
                partial(lambda f, g, x, k, v: f(g, x, v, (4,) * k), _b, _g, _x, _k), "indices"),
            f"{_where}max_pool{_k}d_with_indices x": (partial(lambda f, v: f(v, 2), _p), "x"),
        }
NOT_ARRAYS = {"None": None, "str": "abc", "bytes": b"ab", "dict": {1: 2},
              "object array": np.array([None, 1], object), "ragged list": [[1, 2], [3]]}


@pytest.mark.parametrize("what", list(NOT_ARRAYS))
@pytest.mark.parametrize("call", list(OPERAND_CALLS))
def test_a_value_that_is_not_an_array_is_a_type_error(call, what):
    f, name = OPERAND_CALLS[call]
    fn = call.split()[0].removeprefix("reference.")
    with pytest.raises(TypeError, match=rf"^{fn}: {name} must be an array of numbers \(a jax "
                                        r"or numpy array, or nested sequences of numbers\), "
                                        r"got "):
        f(NOT_ARRAYS[what])


@pytest.mark.parametrize("huge", [2**63, 2**64])
@pytest.mark.parametrize("name", ["kernel_size", "stride", "padding", "output_size"])
def test_huge_unpool_sizes_are_value_errors_naming_the_argument(name, huge):
    kw = {"kernel_size": 2, name: huge if name != "output_size" else (huge, 2)}
    with pytest.raises(ValueError, match=rf"^max_unpool2d: {name} must be at most "
                                         r"1152921504606846975 \(2\*\*60 - 1"):
        ju.max_unpool2d(X, IDX, **kw)


@pytest.mark.parametrize("huge", [2**31, 2**63, 2**64])
@pytest.mark.parametrize("name", ["kernel_size", "stride", "padding", "dilation"])
def test_huge_pool_sizes_are_value_errors_naming_the_argument(name, huge):
    # PyTorch's pooling takes int32 sizes (safe_downcast<int, int64_t> in
    # aten/src/ATen/native/DilatedMaxPool2d.cpp): past them, a clear error, not an
    # OverflowError or numpy's "Maximum allowed size exceeded".
    with pytest.raises(ValueError, match=rf"^max_pool2d_with_indices: {name} must be at most "
                                         r"2147483647 \(PyTorch's pooling takes int32 sizes\)"):
        ju.max_pool2d_with_indices(X, **{"kernel_size": 2, name: huge})


def test_the_largest_pool_sizes_still_give_their_plain_errors():
    # 2**31 - 1 passes the bound and meets PyTorch's own rules: no huge arrays on the way.
    big = 2**31 - 1
    with pytest.raises(ValueError, match="output size must be positive"):
        ju.max_pool2d_with_indices(X, big)
    with pytest.raises(ValueError, match="padding must be at most half of kernel_size"):
        ju.max_pool2d_with_indices(X, 2, padding=big)


@pytest.mark.parametrize("name,value", [("kernel_size", 2), ("stride", 2), ("padding", 1)])
@pytest.mark.parametrize("op", ["unpool", "pool"])
def test_integer_numpy_arrays_are_sizes_like_tuples(op, name, value):
    k = 2 if name == "kernel_size" else 3
    x = jnp.arange(1.0, 37.0).reshape(1, 1, 6, 6)
    if op == "unpool":
        x, idx = x[..., :3, :3], jnp.arange(9, dtype=jnp.int32).reshape(1, 1, 3, 3)
        call = lambda **kw: ju.max_unpool2d(x, idx, **{"kernel_size": k, **kw})
    else:
        call = lambda **kw: ju.max_pool2d_with_indices(x, **{"kernel_size": k, **kw})
    want = call(**{name: (value, value)})
    for array in (np.array([value, value]), np.array([value, value], np.uint8)):
        jax.tree.map(np.testing.assert_array_equal, call(**{name: array}), want)


@pytest.mark.parametrize("value", [np.array([[2, 2]]), np.array([2.0, 2.0]),
                                   np.array([True, True]), np.array([2, 2, 2]), {2: 0, 3: 0},
                                   {2, 3}, "22", (2, True), (2, 2.0), True])
@pytest.mark.parametrize("op", ["unpool", "pool"])
def test_other_kernel_sizes_are_type_errors(op, value):
    if op == "unpool":
        call, fn = (lambda: ju.max_unpool2d(X, IDX, value)), "max_unpool2d"
    else:
        call, fn = (lambda: ju.max_pool2d_with_indices(X, value)), "max_pool2d_with_indices"
    with pytest.raises(TypeError, match=rf"^{fn}: kernel_size must be an int or a pair of "
                                        r"ints"):
        call()


def test_a_numpy_padding_without_kernel_size_is_refused_like_a_tuple():
    with pytest.raises(ValueError, match=r"^max_unpool2d: stride and padding need "
                                         r"kernel_size, got kernel_size=None with "
                                         r"stride=None, padding="):
        ju.max_unpool2d(X, IDX, output_size=(3, 3), padding=np.array([0, 0]))


@pytest.mark.parametrize("value", ["no", "", 1, 0, 1.0, None, np.array([True, False]),
                                   np.array(True), jnp.asarray(True)])
def test_ceil_mode_must_be_a_bool(value):
    # PyTorch: "argument 'ceil_mode' must be bool"; "no" would otherwise count as True.
    with pytest.raises(TypeError, match=r"^max_pool2d_with_indices: ceil_mode must be a "
                                        r"bool, got "):
        ju.max_pool2d_with_indices(X, 2, ceil_mode=value)


def test_ceil_mode_takes_numpy_bools():
    x = jnp.arange(25.0).reshape(1, 1, 5, 5)
    for flag in (True, False):
        jax.tree.map(np.testing.assert_array_equal,
                     ju.max_pool2d_with_indices(x, 2, ceil_mode=np.bool_(flag)),
                     ju.max_pool2d_with_indices(x, 2, ceil_mode=flag))


@pytest.mark.parametrize("value,shown", [(None, "None"), ("nonsense", "'nonsense'"),
                                         ({}, r"\{\}")])
def test_index_dtype_error_shows_what_was_given(value, shown):
    with pytest.raises(TypeError, match=rf"^max_pool2d_with_indices: index_dtype must be "
                                        rf"int32 or int64, got {shown}$"):
        ju.max_pool2d_with_indices(X, 2, index_dtype=value)


@pytest.mark.parametrize("value", ["no", 1, 0, None, 1.0])
def test_primitive_channels_last_must_be_a_bool(value):
    # Checked at every bind, before jax's caches (which hold 1 == True): also after a
    # valid call with the same shapes.
    ju.max_unpool2d_p.bind(X, IDX, output_size=(3, 3), channels_last=True)
    for bind in (lambda: ju.max_unpool2d_p.bind(X, IDX, output_size=(3, 3),
                                                channels_last=value),
                 lambda: ju.max_unpool2d_backward_p.bind(jnp.ones((1, 3, 3, 2)), IDX,
                                                         channels_last=value)):
        with pytest.raises(TypeError, match=r"^max_unpool2d(_backward)?: channels_last must "
                                            r"be a bool, got "):
            bind()


@pytest.mark.parametrize("value", [2.0, True, "2", None])
def test_primitive_spatial_rank_must_be_an_int(value):
    g = jnp.ones((1, 2, 3, 3))
    ju.max_unpool2d_backward_p.bind(g, IDX, channels_last=False, spatial_rank=2)
    with pytest.raises(TypeError, match=r"^max_unpool2d_backward_p: spatial_rank must be an "
                                        r"int \(1, 2 or 3\), got "):
        ju.max_unpool2d_backward_p.bind(g, IDX, channels_last=False, spatial_rank=value)


def test_primitive_parameters_take_numpy_ints_and_bools():
    g = jnp.arange(18.0).reshape(1, 2, 3, 3)
    want = ju.max_unpool2d_backward(g, X, IDX.at[0, 1, 1, 1].set(8), (3, 3))
    for rank in (np.int64(2), np.int32(2)):
        got = jax.jit(lambda g, i, r=rank: ju.max_unpool2d_backward_p.bind(
            g, i, channels_last=np.bool_(False), spatial_rank=r))(g, IDX.at[0, 1, 1, 1].set(8))
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("args,name", [((None,), "platform"), ((3,), "platform"),
                                       (("",), "platform"),
                                       (("cpu", b"/dir"), "library_dir"),
                                       (("cpu", 3), "library_dir"),
                                       (("ascend", None, b"ASCEND"), "ffi_platform")])
def test_npu_register_argument_types(args, name):
    from jax_unpool import npu

    *positional, ffi_platform = (*args, None) if len(args) < 3 else args
    with pytest.raises(TypeError, match=rf"^jax_unpool.npu.register: {name} must be "):
        npu.register(*positional, ffi_platform=ffi_platform)


def test_npu_locate_and_is_available_with_a_bytes_directory():
    from jax_unpool import npu

    with pytest.raises(TypeError, match=r"^jax_unpool.npu.locate: library_dir must be "):
        npu.locate(b"/dir")
    assert npu.is_available(b"/dir") is False  # documented: never raises


# --------------------------------------------------------------------------------------
# Zero output sizes: PyTorch accepts them (the result is empty)
# --------------------------------------------------------------------------------------

@needs_torch
@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_zero_output_size_gives_an_empty_result_as_in_pytorch(k):
    # torch: F.max_unpool1d(x, i, 1, 2, output_size=[0]) on a 1x1x1 input is (1, 1, 0),
    # whatever the indices (an empty result has nothing to write); likewise here, on
    # every path (the handler is never called: XLA replaces an empty result). The golden
    # file's zero_size cases check it without torch.
    size = (0,) + (2,) * (k - 1)
    x, idx = np.ones((1, 1) + (1,) * k, np.float32), np.full((1, 1) + (1,) * k, 5)
    t = getattr(torch.nn.functional, f"max_unpool{k}d")(
        torch.from_numpy(x), torch.from_numpy(idx), 1, 2, output_size=list(size))
    for f in (getattr(ju, f"max_unpool{k}d"), getattr(ju.reference, f"max_unpool{k}d")):
        for call in (f, jax.jit(f, static_argnums=(2, 3), static_argnames="output_size")):
            out = call(x, idx.astype(np.int32), 1, 2, output_size=size)
            assert out.shape == tuple(t.shape) == (1, 1, *size)


def test_a_zero_default_output_size_is_allowed_a_negative_one_refused():
    # torch: kernel 2, padding 1 on W=1 gives W_out = 0; padding 2 a ValueError.
    x, idx = jnp.ones((1, 1, 1)), jnp.zeros((1, 1, 1), jnp.int32)
    assert ju.max_unpool1d(x, idx, 2, padding=1).shape == (1, 1, 0)
    with pytest.raises(ValueError, match=r"^max_unpool1d: .* give a negative output size "
                                         r"\(-2,\)"):
        ju.max_unpool1d(x, idx, 2, padding=2)


def test_backward_of_a_zero_size_plane_fails_like_any_out_of_range_index():
    # Every index lies outside an empty plane: the CPU kernel's run-time error (PyTorch's
    # backward fails too: "index 0 is out of bounds for dimension 2 with size 0"); the jnp
    # reference reads 0.
    g = jnp.ones((1, 2, 0, 3))
    with pytest.raises(RUNTIME_ERRORS, match=r"max_unpool2d_backward: index 0 at "
                                             r"\(n=0, c=0, i=0\) of indices is out of range: "
                                             r"valid indices are \[0, 0\) for an output "
                                             r"plane of 0x3"):
        jax.block_until_ready(ju.max_unpool2d_backward(g, X, IDX, (0, 3)))
    np.testing.assert_array_equal(ju.reference.max_unpool2d_backward(g, X, IDX, (0, 3)),
                                  np.zeros(X.shape))
