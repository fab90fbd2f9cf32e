"""The CPU kernels on problems big enough to be split across threads: results against
numpy loops when planes (NCHW) and channel spans of one image (NHWC) go to different
chunks, the first bad index in flat order whichever chunk meets it, and results large
enough for the huge-page advice (forward) and streaming stores (backward). The backward's
two gather loops (AVX2 and scalar loads; the CPU picks one) both run."""

import itertools
import re
import subprocess
import sys
from pathlib import Path

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from cpu_features import cpu_has_avx2, expected_gather
from dtypes import assert_bits_equal, needs_x64, random_values

import jax_unpool as ju
from jax_unpool import _extension
from jax_unpool._compat import enable_x64

# Outputs of several MB, which the kernels split into chunks of planes: one image of 16
# channels goes in spans of 2 channels (NHWC: spans inside one image, the scalar loops),
# two images of 37 channels in spans of about 12 (the vector loops and their tails).
SHAPES = [(1, 16, 32, 32), (2, 37, 16, 16)]  # NCHW
OUTPUT_HW = (512, 512)
WIDTH_DTYPES = ["uint8", "bfloat16", "float32", "float64"]  # one per byte width
# The split-across-threads tests' cases: every byte width, index dtype, layout and shape.
SPLIT_CASES = pytest.mark.parametrize(
    "dtype, index_dtype, layout, shape",
    list(itertools.product(WIDTH_DTYPES, ["int32", "int64"], ["NCHW", "NHWC"], SHAPES)),
    ids=lambda v: f"shape{SHAPES.index(v)}" if v in SHAPES else None)  # shape0, shape1


def _layout(a: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(a.transpose(0, 2, 3, 1)) if layout == "NHWC" else a


def _indices_with_duplicates(rng, shape, dtype):
    """Half of the indices crowd into the first 64 positions of their plane."""
    plane = OUTPUT_HW[0] * OUTPUT_HW[1]
    idx = rng.integers(0, plane, size=shape)
    crowd = rng.random(shape) < 0.5
    idx[crowd] = rng.integers(0, 64, size=int(crowd.sum()))
    return idx.astype(dtype)


@SPLIT_CASES
def test_forward_split_across_threads_equals_numpy_loops(rng, dtype, index_dtype, layout,
                                                         shape):
    x = _layout(random_values(rng, shape, dtype), layout)
    idx = _layout(_indices_with_duplicates(rng, shape, index_dtype), layout)
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=OUTPUT_HW,
                                                   data_format=layout))(x, idx)
    assert_bits_equal(out, oracle.unpool(x, idx, OUTPUT_HW, layout == "NHWC"))


@SPLIT_CASES
def test_backward_split_across_threads_equals_numpy_loops(rng, dtype, index_dtype, layout,
                                                          shape):
    n, c, _, _ = shape
    g = _layout(random_values(rng, (n, c, *OUTPUT_HW), dtype), layout)
    idx = _layout(_indices_with_duplicates(rng, shape, index_dtype), layout)
    x = jax.ShapeDtypeStruct(idx.shape, g.dtype)
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = jax.jit(lambda g, i: ju.max_unpool2d_backward(g, x, i, OUTPUT_HW,
                                                            data_format=layout))(g, idx)
    assert_bits_equal(out, oracle.gather(g, idx, layout == "NHWC"))


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", ["max_unpool2d", "max_unpool2d_backward"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_first_bad_index_in_flat_order_whichever_chunk_meets_it(op, layout, index_dtype):
    # 64 channels in 8 chunks of 8: channels 3 and 12 go to different chunks, and an NHWC
    # span is wide enough for the vector loops.
    shape, hw = (1, 64, 32, 32), (256, 256)
    n, c, _, _ = shape
    plane = hw[0] * hw[1]
    # int64: values that would look valid if truncated to 32 bits
    too_big, negative = ((plane + 7, -5) if index_dtype == "int32"
                         else ((1 << 32) + 7, -(1 << 40)))
    idx = np.zeros(shape, index_dtype)
    # Channel 3 (an early chunk) is bad late in its plane, channel 12 (a late chunk)
    # early: NCHW flat order meets channel 3 first, NHWC flat order channel 12.
    idx[0, 3, 28, 4] = too_big    # position i = 900
    idx[0, 12, 3, 4] = negative   # position i = 100
    expected = (f"index {too_big} at (n=0, c=3, i=900)" if layout == "NCHW"
                else f"index {negative} at (n=0, c=12, i=100)")
    idx = _layout(idx, layout)
    with enable_x64(index_dtype == "int64"):
        if op == "max_unpool2d":
            f = jax.jit(lambda v, i: ju.max_unpool2d(v, i, output_size=hw, data_format=layout))
            values = jnp.ones(idx.shape, jnp.float32)
        else:
            x = jax.ShapeDtypeStruct(idx.shape, jnp.float32)
            f = jax.jit(lambda v, i: ju.max_unpool2d_backward(v, x, i, hw, data_format=layout))
            values = jnp.ones(_layout(np.zeros((n, c, *hw)), layout).shape, jnp.float32)
        for _ in range(2):  # the same index on every run
            with pytest.raises((jax.errors.JaxRuntimeError, ValueError)) as err:
                f(values, idx).block_until_ready()
            assert f"{op}: {expected} of indices is out of range" in str(err.value)
            assert f"valid indices are [0, {plane})" in str(err.value)


LARGE_HW = (1021, 1023)  # odd: planes and rows start at every alignment


def _large_shape(dtype: str) -> tuple[int, int, int, int]:
    """Channels enough for a backward result over 8 MB (streaming stores) and so a
    forward result over 32 MB (huge-page advice)."""
    plane_bytes = LARGE_HW[0] * LARGE_HW[1] * np.dtype(jnp.dtype(dtype)).itemsize
    return (1, (8 << 20) // plane_bytes + 1, *LARGE_HW)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", WIDTH_DTYPES)
def test_forward_of_a_large_result_equals_numpy(rng, dtype, layout):
    shape = _large_shape(dtype)
    n, c, h, w = shape
    hw = (2 * h, 2 * w)
    x = random_values(rng, shape, dtype)
    idx = oracle.pool_indices(rng, shape)[0]  # unique per plane: fancy assignment is exact
    expected = np.zeros((c, hw[0] * hw[1]), x.dtype)
    expected[np.arange(c)[:, None], idx.reshape(c, -1)] = x.reshape(c, -1)
    with enable_x64(needs_x64(dtype)):
        out = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=hw, data_format=layout))(
            _layout(x, layout), _layout(idx, layout))
    assert_bits_equal(out, _layout(expected.reshape(n, c, *hw), layout))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("dtype", WIDTH_DTYPES)
def test_backward_of_a_large_result_equals_numpy(rng, dtype, index_dtype, layout):
    shape = _large_shape(dtype)
    n, c, h, w = shape
    hw = (2 * h, 2 * w)
    g = random_values(rng, (n, c, *hw), dtype)
    idx = oracle.pool_indices(rng, shape)[0].astype(index_dtype)
    expected = np.take_along_axis(g.reshape(c, -1), idx.reshape(c, -1), axis=1)
    x = jax.ShapeDtypeStruct(_layout(idx, layout).shape, g.dtype)
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = jax.jit(lambda g, i: ju.max_unpool2d_backward(g, x, i, hw, data_format=layout))(
            _layout(g, layout), _layout(idx, layout))
    assert_bits_equal(out, _layout(expected.reshape(shape), layout))


def test_backward_gathers_with_the_loop_the_cpu_and_the_environment_choose():
    assert _extension.module.cpu_gather() == expected_gather()


# Slow: a rerun of this file's backward tests in a child (a minute on 2 loaded cores, the
# everyday run's longest test); the everyday run checks the loop this CPU takes.
@pytest.mark.slow
@pytest.mark.skipif(not cpu_has_avx2(), reason="no AVX2: the scalar loop is the only one")
def test_backward_tests_pass_with_the_other_gather_loop():
    # This process gathers with one loop; a child reruns this file's backward tests (values
    # against numpy, the first bad index) with the other one.
    other = "vector" if expected_gather() == "scalar" else "scalar"
    root = Path(__file__).resolve().parents[2]
    env = fresh_process.child_env(JAX_UNPOOL_CPU_GATHER=other)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-o", "addopts=", "-p", "no:cacheprovider",
         __file__, "-k", "backward and not other_gather_loop"],
        env=env, cwd=root, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-3000:]
    # the child checked its loop (the test above) and ran the backward grid (52 tests)
    ran = re.search(r"(\d+) passed", proc.stdout)
    assert ran and int(ran.group(1)) > 50, proc.stdout[-3000:]
