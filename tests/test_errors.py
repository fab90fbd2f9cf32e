"""Every error case of DESIGN.md: type and message, at trace time and at run time."""

import jax
import jax.numpy as jnp
import fresh_process
import numpy as np
import pytest
from out_of_range import POSITIONS_NOTE

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
    "output_size zero": (unpool(output_size=(0, 3)), ValueError,
                         r"max_unpool2d: output_size must be positive, got \(0, 3\)"),
    "output_size negative": (unpool(output_size=(3, -1)), ValueError,
                             r"max_unpool2d: output_size must be positive"),
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
    "padding too large": (unpool(output_size=None, kernel_size=2, padding=2), ValueError,
                          r"max_unpool2d: .* give a non-positive output size"),
    "output_size outside torch range": (unpool(kernel_size=2, output_size=(6, 4)), ValueError,
                                        r"max_unpool2d: invalid output_size \(6, 4\) \(dim 0 "
                                        r"must be between 2 and 6, exclusive"),
    "data_format": (unpool(data_format="NCWH"), ValueError,
                    r"max_unpool2d: data_format must be one of .*got 'NCWH'"),
    "data_format rank": (unpool(data_format="CHW"), ValueError,
                         r"max_unpool2d: data_format 'CHW' describes rank-3 input, got rank 4"),
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
