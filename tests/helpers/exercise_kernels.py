"""Exercises every path of the CPU kernels once, checking each answer; run under
AddressSanitizer + UndefinedBehaviorSanitizer by tests/native/test_sanitizers.py.

Covers both unpool ops, every value byte width, int32 and int64 indices, NCHW and NHWC,
rank 3 and 4, duplicated indices, zero-size operands, out-of-range errors (first, last,
negative, one past the end), inputs big enough to be split across the XLA thread pool
(chunk boundaries inside an image), and Python threads calling at once. And the pool:
every dtype family it orders (bool, ints, float16/bfloat16, float8, float32/64), both
index dtypes, every rank and layout, its fast path (2 per axis, odd sizes, ceil_mode) and
its generic one (padding, dilation, windows of padding only, windows larger than x),
thread-pool splits and Python threads. And the kernels on window offsets: the pool writing
them, the unpool and its backward reading them (windows that tile the input and any
other, every rank, layout and byte width, offsets naming no position), window_indices,
and their thread-pool splits, each against the flat kernels. Exits non-zero on any wrong
answer; the sanitizers abort the process on any memory or UB error.
"""

from __future__ import annotations

import functools
import sys
import threading
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/helpers/: the oracles
import numpy_oracle
from dtypes import bits
from out_of_range import RUNTIME_ERRORS, expected_message

import jax_unpool as ju
from jax_unpool._compat import enable_x64

# One value dtype per byte width, plus bool (1 byte) and a 2-byte float.
VALUE_DTYPES = [np.dtype(d) for d in (np.bool_, np.int8, jnp.bfloat16, np.float16, np.float32,
                                      np.int64, np.float64)]
import jax_unpool._jax_unpool as extension

forward = jax.jit(ju.max_unpool2d, static_argnames=("output_size", "data_format"))
backward = jax.jit(ju.max_unpool2d_backward, static_argnames=("output_size", "data_format"))
checks = 0
checks_lock = threading.Lock()


def values(rng, shape, dtype) -> np.ndarray:
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    raw = rng.integers(0, 256, (*shape, dtype.itemsize), dtype=np.uint8)
    return raw.view(dtype).reshape(shape)


def layout(n, c, h, w, rank, last):
    shape = (n, h, w, c) if last else (n, c, h, w)
    return shape if rank == 4 else shape[1:]


def fmt(rank, last) -> str:
    return ("NHWC" if last else "NCHW")[4 - rank:]


def check_equal(got, want, what) -> None:
    global checks
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or not np.array_equal(bits(got), bits(want)):
        raise AssertionError(f"{what}: wrong answer")
    with checks_lock:
        checks += 1


def check_raises(call, message, what) -> None:
    global checks
    try:
        jax.block_until_ready(call())
    except RUNTIME_ERRORS as e:
        if str(e) != message:
            raise AssertionError(f"{what}: got {e!s}, expected {message}") from None
        checks += 1
        return
    raise AssertionError(f"{what}: no error")


def small_cases(rng) -> None:
    """Every width x index type x layout x rank, duplicates likely, both ops."""
    for dtype in VALUE_DTYPES:
        for index_dtype in (np.int32, np.int64):
            for rank in (3, 4):
                for last in (False, True):
                    shape = layout(2, 3, 3, 4, rank, last)
                    out_shape = layout(2, 3, 4, 5, rank, last)
                    x = values(rng, shape, dtype)
                    idx = rng.integers(0, 20, shape).astype(index_dtype)
                    g = values(rng, out_shape, dtype)
                    what = f"{dtype.name} {np.dtype(index_dtype).name} {fmt(rank, last)}"
                    kw = {"output_size": (4, 5), "data_format": fmt(rank, last)}
                    with enable_x64(True):
                        check_equal(forward(x, idx, **kw),
                                    numpy_oracle.unpool(bits(x), idx, (4, 5), last),
                                    "forward " + what)
                        check_equal(backward(g, x, idx, **kw),
                                    numpy_oracle.gather(bits(g), idx, last), "backward " + what)


def zero_size_cases(rng) -> None:
    for dims in [(0, 2, 3, 3), (2, 0, 3, 3), (2, 2, 0, 3), (2, 2, 3, 0)]:
        for last in (False, True):
            shape = layout(*dims, 4, last)
            x = values(rng, shape, np.dtype(np.float32))
            idx = np.zeros(shape, np.int32)
            g = values(rng, layout(dims[0], dims[1], 2, 2, 4, last), np.dtype(np.float32))
            check_equal(forward(x, idx, output_size=(2, 2), data_format=fmt(4, last)),
                        numpy_oracle.unpool(x, idx, (2, 2), last), f"forward zero-size {dims}")
            check_equal(backward(g, x, idx, output_size=(2, 2), data_format=fmt(4, last)),
                        numpy_oracle.gather(g, idx, last), f"backward zero-size {dims}")


def big_case(rng, n, c, h, w, last, index_dtype, dtype=np.float32):
    """Unique pooling indices (kernel 2) on an input whose bytes are split into several
    thread-pool chunks; expected answers by numpy put/take along the plane axis."""
    shape = layout(n, c, h, w, 4, last)
    idx, hw = numpy_oracle.pool_indices(rng, shape, 2, last)
    x = values(rng, shape, np.dtype(dtype))
    def planes(a):  # (N, C, H*W)
        return (np.moveaxis(a, -1, 1) if last else a).reshape(n, c, -1)

    x4, i4 = planes(x), planes(idx)
    out = np.zeros((n, c, hw[0] * hw[1]), x.dtype)
    np.put_along_axis(out, i4, x4, axis=-1)
    out = out.reshape(n, c, *hw)
    out = np.moveaxis(out, 1, -1) if last else out
    return x, idx.astype(index_dtype), hw, out


# Every value byte width, each index dtype twice, in the thread-pool splits.
THREADED_DTYPES = ((np.uint8, np.int32), (jnp.bfloat16, np.int64), (np.float32, np.int32),
                   (np.float64, np.int64))


def threaded_pool_cases(rng) -> None:
    """Inputs of several MB: ForEachPlaneChunk hands chunks to the XLA thread pool. With
    N=3, C=5 the 15 planes split into chunks that end inside an image."""
    for last in (False, True):
        for dtype, index_dtype in THREADED_DTYPES:
            with enable_x64(True):
                x, idx, hw, want = big_case(rng, 3, 5, 96, 96, last, index_dtype, dtype)
                f = fmt(4, last)
                check_equal(forward(x, idx, output_size=hw, data_format=f), want,
                            f"forward pool {f} {np.dtype(dtype)}")
                # gathering the scattered plane back gives x (indices are unique)
                check_equal(backward(want, x, idx, output_size=hw, data_format=f), x,
                            f"backward pool {f}")
                for pos in ("first", "last", "several"):
                    bad = idx.copy().reshape(-1)
                    if pos == "first":
                        bad[0] = -1
                    elif pos == "last":
                        bad[-1] = hw[0] * hw[1]
                    else:
                        bad[[bad.size // 3, bad.size // 2, bad.size - 7]] = [-5, 10**6, 2**31 - 1]
                    bad = bad.reshape(idx.shape)
                    kw = {"output_size": hw, "data_format": f}
                    check_raises(functools.partial(forward, x, bad, **kw),
                                 expected_message("max_unpool2d", bad, hw, last),
                                 f"forward error {pos} {f}")
                    check_raises(functools.partial(backward, want, x, bad, **kw),
                                 expected_message("max_unpool2d_backward", bad, hw, last),
                                 f"backward error {pos} {f}")


def python_threads(rng) -> None:
    """Eight Python threads call both ops at once, on different shapes."""
    jobs = []
    for t in range(8):
        last = bool(t % 2)
        x, idx, hw, want = big_case(rng, 1 + t % 3, 2 + t, 32 + 8 * t, 32, last, np.int32)
        jobs.append((x, idx, hw, want, fmt(4, last)))
    errors = []
    barrier = threading.Barrier(len(jobs))

    def work(x, idx, hw, want, f):
        try:
            barrier.wait()
            for _ in range(5):
                check_equal(forward(x, idx, output_size=hw, data_format=f), want, "threads fwd")
                check_equal(backward(want, x, idx, output_size=hw, data_format=f), x,
                            "threads bwd")
        except Exception as e:  # noqa: BLE001 -- re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


POOL_DTYPES = [np.dtype(d) for d in (np.bool_, np.int8, np.uint16, jnp.bfloat16, np.float16,
                                     jnp.float8_e4m3fn, np.float32, np.int64, np.float64)]
# (kernel, stride, padding, dilation, ceil_mode): the fast path with odd sizes, padding and
# overlap, dilation with windows of padding only, windows larger than x.
POOL_WINDOWS = [(2, 2, 0, 1, True), (3, 2, 1, 1, False), (2, 2, 1, 3, True), (5, 1, 2, 1, False)]
POOL = {k: getattr(ju, f"max_pool{k}d_with_indices") for k in (1, 2, 3)}


def pool_layout(k, last):
    return {1: "NCW", 2: "NCHW", 3: "NCDHW"}[k] if not last else \
        {1: "NWC", 2: "NHWC", 3: "NDHWC"}[k]


def check_pool(x, k, window, last, index_dtype, what) -> None:
    with jax.enable_x64(True):
        values, indices = POOL[k](x, *window, data_format=pool_layout(k, last),
                                  index_dtype=index_dtype)
    want_values, want_indices = numpy_oracle.max_pool(
        x, *(((w,) * k) for w in window[:4]), window[4], last)
    check_equal(values, want_values, "pool values " + what)
    check_equal(indices, want_indices.astype(index_dtype), "pool indices " + what)


def max_pool_cases(rng) -> None:
    """Every dtype family x index type x rank x layout x window kind, small."""
    for i, dtype in enumerate(POOL_DTYPES):
        for k in (1, 2, 3):
            for last in (False, True):
                spatial = (5, 6, 7)[3 - k:]
                shape = (2, *spatial, 3) if last else (2, 3, *spatial)
                x = values(rng, shape, dtype)
                for j, window in enumerate(POOL_WINDOWS):
                    index_dtype = (np.int32, np.int64)[(i + j) % 2]
                    check_pool(x, k, window, last, index_dtype,
                               f"{dtype.name} {k}-D {pool_layout(k, last)} {window}")


def threaded_max_pool_cases(rng) -> None:
    """Inputs of several MB, odd sizes: chunks of rows (positions, channels last) go to
    the XLA thread pool and end inside planes and images (3-D channels first: inside the
    runs of rows of one slice pair, rows of 31 windows of 2: vector blocks and an
    overlapping last one). The oracle is the XLA-ops pool (numpy's loops would take
    minutes), on values it compares as PyTorch does (XLA's CPU code reads subnormal floats
    as zero)."""
    for k, last, shape in ((2, True, (3, 127, 129, 11)), (2, False, (3, 11, 127, 129)),
                           (3, False, (2, 7, 9, 67, 63))):
        x = rng.integers(-50, 50, shape).astype(np.float32)
        for window in POOL_WINDOWS[:2]:
            fmt = pool_layout(k, last)
            reference = getattr(ju.reference, f"max_pool{k}d_with_indices")
            for got, want in zip(POOL[k](x, *window, data_format=fmt),
                                 reference(x, *window, data_format=fmt)):
                check_equal(got, want, f"threaded pool {fmt} {window}")


UNPOOL = {k: getattr(ju, f"max_unpool{k}d") for k in (1, 2, 3)}
BACKWARD = {k: getattr(ju, f"max_unpool{k}d_backward") for k in (1, 2, 3)}


def outcome(call):
    """A call's result as bits, or its error's first line."""
    try:
        return bits(jax.block_until_ready(call())).tobytes()
    except RUNTIME_ERRORS as e:
        return str(e).split("\n")[0]


def check_same(window_call, flat_call, what) -> None:
    global checks
    got, want = outcome(window_call), outcome(flat_call)
    if got != want:
        raise AssertionError(f"{what}: window offsets and flat indices differ")
    with checks_lock:
        checks += 1


def check_window(x, k, window, last, what) -> None:
    """Pools x with both index formats; the pool, the unpool and its backward on the offsets
    (the pool's, and the same with offsets that name no position) against the flat path."""
    fmt = pool_layout(k, last)
    values, flat = POOL[k](x, *window, data_format=fmt)
    w_values, w = POOL[k](x, *window, data_format=fmt, index_format="window")
    check_equal(w_values, values, "window pool values " + what)
    check_equal(w.to_flat(), flat, "window pool offsets " + what)
    size = w.input_size
    check_same(lambda: UNPOOL[k](values, w),
               lambda: UNPOOL[k](values, flat, output_size=size, data_format=fmt),
               "window unpool " + what)
    check_same(lambda: BACKWARD[k](x, values, w),
               lambda: BACKWARD[k](x, values, flat, size, data_format=fmt),
               "window backward " + what)
    back = ju.window_indices(flat, *window[:4], window[4], input_size=size, data_format=fmt)
    check_equal(back.offsets, w.offsets, "window_indices " + what)
    # What names no position fails the call (the messages: tests/native/test_window_kernels.py).
    bad = np.asarray(w.offsets).copy()
    bad.reshape(-1)[[bad.size // 3, bad.size - 1]] = [255, 1]
    w_bad = ju.WindowIndices(jnp.asarray(bad), w.geometry)
    wrong = np.asarray(flat).copy()
    wrong.reshape(-1)[wrong.size // 2] = -7
    for call, start in ((lambda: UNPOOL[k](values, w_bad), "OUT_OF_RANGE: max_unpool"),
                        (lambda: BACKWARD[k](x, values, w_bad), "OUT_OF_RANGE: max_unpool"),
                        (lambda: ju.window_indices(wrong, *window[:4], window[4],
                                                   input_size=size, data_format=fmt).offsets,
                         "OUT_OF_RANGE: window_indices: index -7 ")):
        check_fails(call, start, "window errors " + what)


def check_fails(call, start, what) -> None:
    global checks
    error = outcome(call)
    if not isinstance(error, str) or not error.startswith(start):
        raise AssertionError(f"{what}: expected an error starting {start!r}")
    with checks_lock:
        checks += 1


WINDOW_DTYPES = [np.dtype(d) for d in (np.uint8, jnp.bfloat16, np.float32, np.float64)]


def window_cases(rng) -> None:
    """Every byte width x rank x layout x window kind (tiling with ceil_mode, overlapping
    and padded, windows of padding only, windows larger than x), small."""
    for i, dtype in enumerate(WINDOW_DTYPES):
        for k in (1, 2, 3):
            for last in (False, True):
                spatial = (5, 6, 7)[3 - k:]
                x = values(rng, (2, *spatial, 3) if last else (2, 3, *spatial), dtype)
                for window in POOL_WINDOWS:
                    with jax.enable_x64(dtype.itemsize == 8):
                        check_window(x, k, window, last,
                                     f"{dtype.name} {k}-D {pool_layout(k, last)} {window}")


def threaded_window_cases(rng) -> None:
    """Inputs of several MB: the window kernels' chunks go to the XLA thread pool."""
    for last, shape in ((False, (3, 5, 96, 96)), (True, (3, 96, 96, 5))):
        x = rng.integers(-50, 50, shape).astype(np.float32)
        for window in ((2, 2, 0, 1, False), (3, 2, 1, 1, False)):
            check_window(x, 2, window, last, f"threaded window {window}")


def main() -> int:
    print(f"extension: {extension.__file__}", flush=True)
    print(f"gathers: {extension.cpu_gather()}", flush=True)  # JAX_UNPOOL_CPU_GATHER's effect
    rng = np.random.default_rng(0)
    for phase in (small_cases, zero_size_cases, threaded_pool_cases, python_threads,
                  max_pool_cases, threaded_max_pool_cases, window_cases, threaded_window_cases):
        phase(rng)
        print(f"{phase.__name__}: done", flush=True)  # progress: the parent watches for it
    print(f"exercise_kernels: {checks} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
