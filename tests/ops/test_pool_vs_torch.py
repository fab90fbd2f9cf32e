"""max_pool{1,2,3}d_with_indices: values and indices as torch.nn.functional.max_pool{k}d
(return_indices=True) gives them, for both implementations: the public functions (on CPU
the native kernel) and jax_unpool.reference's (XLA ops). Every rank: geometries, dtypes,
ties, NaN, infinities, padding, ceil_mode, dilation, windows of padding only, layouts,
shapes, jit and vmap, the index dtype.

The comparisons on random inputs need torch (`needs_torch`); what each quirk must give is
also written out, and checked without it. The 2-D cases run in the everyday suite, the
1-D and 3-D sweeps under `pytest -m slow`; tests/ops/test_golden_torch.py covers every
rank on fixed inputs in the everyday suite. Gradients: test_pool_gradient.py; argument
errors: test_errors.py."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_oracle import assert_same_as_torch, needs_torch, torch_pool

import jax_unpool as ju
from jax_unpool._compat import enable_x64

NAN, INF = np.nan, np.inf
POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
XLA_POOL = {k: getattr(ju.reference, f"max_pool{k}d_with_indices") for k in (1, 2, 3)}
# The native pool (the public function) and the XLA-ops one (the reference): every parity
# check below holds for both.
IMPLS = {k: (POOL[k], XLA_POOL[k]) for k in (1, 2, 3)}
SLOW = pytest.mark.slow


def normal(shape, dtype=np.float32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def by_rank(cases: dict) -> list:
    """(k, *case) params; the 1-D and 3-D ones slow (the golden file covers them daily)."""
    return [pytest.param(k, *case, marks=[] if k == 2 else [SLOW]) for k in cases
            for case in cases[k]]


# (x shape, kernel_size, stride, padding, dilation, ceil_mode) per rank
CONFIGS = {
    1: [((2, 3, 16), 2, None, 0, 1, False),
        ((2, 3, 17), 3, 2, 1, 1, False),
        ((2, 3, 17), 3, 2, 1, 1, True),
        ((2, 2, 15), 3, 1, 1, 1, False),  # overlapping windows
        ((2, 2, 20), 3, 2, 1, 3, True),  # dilation
        ((1, 1, 5), 2, 2, 1, 1, True),  # ceil_mode drops a window starting in right padding
        ((1, 1, 3), 5, 1, 2, 1, False),  # window larger than the input
        ((3, 12), (4,), [3], (2,), (1,), True),  # unbatched, 1-tuples and lists
        ((3, 12), 1, 2, 0, 1, True)],
    2: [((2, 3, 8, 8), 2, None, 0, 1, False),
        ((2, 3, 9, 7), 3, 2, 1, 1, False),
        ((2, 3, 9, 7), 3, 2, 1, 1, True),
        ((1, 2, 10, 11), (2, 3), (1, 2), (1, 0), 1, False),
        ((1, 2, 10, 11), (3, 2), (2, 3), (0, 1), (2, 1), True),
        ((2, 2, 9, 9), 3, 1, 1, 1, False),  # overlapping windows
        ((2, 2, 12, 10), 3, 2, 1, 2, False),  # dilation
        ((1, 2, 12, 10), (3, 2), 2, (1, 1), (2, 3), True),
        ((1, 1, 5, 5), 2, 2, 1, 1, True),  # ceil_mode drops a window starting in right padding
        ((1, 1, 7, 6), (4, 5), (3, 2), (2, 2), 1, True),
        ((1, 1, 6, 6), 1, 2, 0, 1, True),
        ((1, 1, 3, 3), 5, 1, 2, 1, False),  # window larger than the input
        ((3, 9, 8), 2, None, 0, 1, False),  # unbatched (C, H, W)
        ((3, 9, 8), 3, 2, 1, 1, True),
        ((4, 5, 5), (1, 1), [2, 1], 0, [1, 1], False)],  # lists and length-1 windows
    3: [((2, 3, 4, 6, 6), 2, None, 0, 1, False),
        ((2, 2, 5, 7, 6), 3, 2, 1, 1, False),
        ((2, 2, 5, 7, 6), 3, 2, 1, 1, True),
        ((1, 2, 6, 7, 8), (1, 2, 3), (1, 2, 2), (0, 1, 1), 1, False),
        ((1, 2, 7, 8, 9), (2, 3, 2), (2, 1, 3), (1, 1, 0), (2, 1, 2), True),
        ((1, 2, 5, 5, 5), 3, 1, 1, 1, False),  # overlapping windows
        ((1, 1, 3, 5, 5), 2, 2, 1, 1, True),
        ((2, 4, 5, 6), 2, None, 0, 1, False),  # unbatched (C, D, H, W)
        ((2, 4, 5, 6), (3,), [2], 1, 1, True)],
}
# The float64 cases: CONFIGS[k][1:3], and for 2-D also CONFIGS[2][7].
FLOAT64 = {1: CONFIGS[1][1:3], 2: CONFIGS[2][1:3] + CONFIGS[2][7:8], 3: CONFIGS[3][1:3]}


# ------------------------------------------------------------------ geometries and dtypes


@needs_torch
@pytest.mark.parametrize("k,shape,ks,s,p,d,ceil", by_rank(CONFIGS))
def test_matches_torch_float32(k, shape, ks, s, p, d, ceil):
    assert_same_as_torch(k, normal(shape), ks, s, p, d, ceil, pools=IMPLS[k])


@needs_torch
@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16])
@pytest.mark.parametrize("shape,ks,s,p,d,ceil", CONFIGS[2][1:3] + CONFIGS[2][6:7])
def test_matches_torch_half_precision(shape, ks, s, p, d, ceil, dtype):
    assert_same_as_torch(2, normal(shape).astype(dtype), ks, s, p, d, ceil, pools=IMPLS[2])


@needs_torch
@pytest.mark.parametrize("k,shape,ks,s,p,d,ceil", by_rank(FLOAT64))
def test_matches_torch_float64_with_int64_indices(k, shape, ks, s, p, d, ceil):
    with enable_x64(True):
        assert_same_as_torch(k, normal(shape, np.float64), ks, s, p, d, ceil, pools=IMPLS[k],
                             index_dtype=jnp.int64)


OTHER_DTYPES = [(k, dtype) for k in (1, 2, 3)
                for dtype in ([np.int8, np.uint8, np.int16, np.int32] if k == 2 else
                              [np.float16, np.int8, np.uint8, np.int16, np.int32])]


@needs_torch
@pytest.mark.parametrize("k,dtype", [pytest.param(k, d, marks=[] if k == 2 else [SLOW])
                                     for k, d in OTHER_DTYPES])
def test_other_dtypes_match_torch(k, dtype):
    shape = {1: (2, 3, 11), 2: (2, 3, 9, 8), 3: (2, 2, 5, 6, 5)}[k]
    rng = np.random.default_rng(1)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
        x[0, 0] = info.min  # a plane of dtype-min values next to the padding
    else:
        x = normal(shape, dtype)
    assert_same_as_torch(k, x, 3, 2, 1, 1, True, pools=IMPLS[k])


@needs_torch
def test_int64_matches_torch_under_x64():
    x = np.random.default_rng(2).integers(-5, 5, (2, 2, 7, 7)).astype(np.int64)
    x[0, 0] = np.iinfo(np.int64).min
    with enable_x64(True):
        assert_same_as_torch(2, x, 3, 2, 1, pools=IMPLS[2])


@needs_torch
def test_bool_pools_like_uint8():
    # PyTorch has no bool max_pool2d; bool must order False < True like uint8.
    x = np.random.default_rng(3).random((2, 2, 7, 7)) < 0.2
    t_out, t_idx = torch_pool(2, x.astype(np.uint8), 3, 2, 1)
    for pool in IMPLS[2]:
        out, idx = pool(x, 3, 2, 1)
        assert out.dtype == jnp.bool_
        np.testing.assert_array_equal(np.asarray(out), t_out.astype(bool))
        np.testing.assert_array_equal(np.asarray(idx), t_idx)
    assert t_out.any() and not t_out.all()


# ------------------------------------------------------------------ ties, NaN, padding


def test_constant_input_picks_first_in_bounds_element():
    x = np.ones((1, 1, 4, 4), np.float32)
    _, idx = ju.max_pool2d_with_indices(x, 3, 2, 1)
    # windows start at rows/cols -1 and 1; the first in-bounds tap is (0|1, 0|1)
    np.testing.assert_array_equal(np.asarray(idx)[0, 0], [[0, 1], [4, 5]])


@needs_torch
@pytest.mark.parametrize(
    "k,ks,s,p,d,ceil", by_rank({2: [(2, 2, 0, 1, False), (3, 1, 1, 1, False),
                                   (3, 2, 1, 2, True)]}))
def test_many_ties_first_maximum_wins(k, ks, s, p, d, ceil):
    x = np.random.default_rng(4).integers(0, 3, (2, 3, 11, 10)).astype(np.float32)
    assert_same_as_torch(k, x, ks, s, p, d, ceil, pools=IMPLS[k])


def test_tie_resolved_in_row_major_kernel_order():
    # Maximum 5 at (0, 1) and (1, 0) of the window: (0, 1) comes first in the scan.
    x = np.array([[[[1, 5], [5, 2]]]], np.float32)
    for pool in IMPLS[2]:
        out, idx = pool(x, 2)
        assert out.item() == 5 and idx.item() == 1


NAN_ROWS = [
    ([NAN, 1.0, 2.0, 3.0], NAN, 0),
    ([1.0, 2.0, 3.0, NAN], NAN, 3),
    ([4.0, NAN, 9.0, 1.0], NAN, 1),
    ([NAN, 5.0, NAN, 2.0], NAN, 2),  # several NaNs: PyTorch keeps the LAST one
    ([NAN, NAN, NAN, NAN], NAN, 3),
    ([-INF, NAN, INF, 1.0], NAN, 1),
    ([-INF, -INF, INF, INF], INF, 2),
]


@pytest.mark.parametrize("row,expected_value,expected_index", NAN_ROWS)
def test_nan_propagates_with_its_index(row, expected_value, expected_index):
    x = np.array(row, np.float32).reshape(1, 1, 4)
    out, idx = ju.max_pool2d_with_indices(x, (1, 4))
    np.testing.assert_array_equal(np.asarray(out), [[[expected_value]]])
    assert idx.item() == expected_index


@needs_torch
def test_random_nans_match_torch():
    x = normal((2, 3, 10, 9))
    rng = np.random.default_rng(5)
    x[rng.random(x.shape) < 0.15] = NAN
    x[rng.random(x.shape) < 0.1] = -INF
    assert_same_as_torch(2, x, 3, 1, 1, pools=IMPLS[2])
    assert_same_as_torch(2, x, (2, 3), 2, (1, 1), (2, 1), True, pools=IMPLS[2])


@needs_torch
@pytest.mark.parametrize("k", [pytest.param(1, marks=SLOW), pytest.param(3, marks=SLOW)])
def test_ties_nan_and_infinities_match_torch(k):
    shape = (1, 2, 12) if k == 1 else (1, 2, 4, 4, 4)
    x = np.zeros(shape, np.float32)  # all ties: the first of each window wins
    flat = x.reshape(-1)
    flat[[1, 5, 6, 9]] = [NAN, -INF, NAN, INF]
    x[0, 1] = -INF  # a plane of -inf next to the padding: padding is never selected
    assert_same_as_torch(k, x, 3, 2, 1, pools=IMPLS[k])
    assert_same_as_torch(k, x, 2, 2, 0, 1, True, pools=IMPLS[k])


PADDING_FILLS = [-INF, -1e30, -3.0]


@pytest.mark.parametrize("fill", PADDING_FILLS)
def test_padding_is_never_selected(fill):
    x = np.full((1, 2, 5, 6), fill, np.float32)
    out, idx = ju.max_pool2d_with_indices(x, 3, 2, 1, 1, True)
    idx = np.asarray(idx)
    assert (idx >= 0).all() and (idx < 5 * 6).all()
    np.testing.assert_array_equal(np.asarray(out), np.full(out.shape, fill, np.float32))


ONLY_PADDING = ((1, 2), (1, 2), (0, 1), (1, 3), True)


def test_window_of_only_padding_keeps_pytorch_quirk():
    # ceil_mode + dilation: window cols -1 and 2 of a width-2 input hold no element.
    # PyTorch returns -inf and its start index (h*W + 2, past the row's end).
    x = np.arange(6, dtype=np.float32).reshape(1, 1, 3, 2)
    out, idx = ju.max_pool2d_with_indices(x, *ONLY_PADDING)
    np.testing.assert_array_equal(np.asarray(out).ravel(), [-INF] * 3)
    np.testing.assert_array_equal(np.asarray(idx).ravel(), [2, 4, 6])


# The inputs of the quirk tests above, against torch: what they write out is torch's.
QUIRKS = ([pytest.param(np.ones((1, 1, 4, 4), np.float32), (3, 2, 1), id="constant")]
          + [pytest.param(np.array(row, np.float32).reshape(1, 1, 4), ((1, 4),),
                          id=f"nan-row-{i}") for i, (row, *_) in enumerate(NAN_ROWS)]
          + [pytest.param(np.full((1, 2, 5, 6), fill, np.float32), (3, 2, 1, 1, True),
                          id=f"padding-{fill}") for fill in PADDING_FILLS]
          + [pytest.param(np.arange(6, dtype=np.float32).reshape(1, 1, 3, 2), ONLY_PADDING,
                          id="only-padding")])


@needs_torch
@pytest.mark.parametrize("x,args", QUIRKS)
def test_quirks_are_torchs(x, args):
    assert_same_as_torch(2, x, *args, pools=IMPLS[2])


@needs_torch
@pytest.mark.parametrize("k,shape,args", [
    pytest.param(1, (1, 2, 2), (2, 1, 1, 3), marks=SLOW, id="1d"),
    pytest.param(2, (1, 2, 2, 2), ((1, 2), 1, (0, 1), (1, 3)), marks=SLOW, id="2d"),
    pytest.param(3, (1, 1, 2, 2, 2), ((1, 1, 2), 1, (0, 0, 1), (1, 1, 3)), marks=SLOW,
                 id="3d")])
def test_windows_of_padding_only_without_ceil_mode_match_torch(rng, k, shape, args):
    """A dilation that steps over the whole input makes windows of padding only without
    ceil_mode too: -inf and the index of the first tap right of the left padding (past
    the row), as PyTorch returns them; the gradient of an index inside the plane lands on
    the next row's element in both."""
    x = rng.standard_normal(shape).astype(np.float32)
    want_v, want_i = torch_pool(k, x, *args, ceil_mode=False)
    for pool in IMPLS[k]:
        values, indices = pool(jnp.asarray(x), *args)
        np.testing.assert_array_equal(values, want_v)
        np.testing.assert_array_equal(indices, want_i)
    assert np.isneginf(np.asarray(values)).any()


@needs_torch
@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    hw=st.tuples(st.integers(1, 9), st.integers(1, 9)),
    k=st.tuples(st.integers(1, 4), st.integers(1, 4)),
    s=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    d=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    pad_frac=st.tuples(st.booleans(), st.booleans()),
    ceil=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_random_geometry_matches_torch_or_both_reject(hw, k, s, d, pad_frac, ceil, seed):
    p = tuple(kk // 2 if f else 0 for kk, f in zip(k, pad_frac))
    x = np.random.default_rng(seed).integers(-2, 3, (1, 2, *hw)).astype(np.float32)
    x[x == 2] = NAN
    try:
        t_out, t_idx = torch_pool(2, x, k, s, p, d, ceil)
    except RuntimeError:  # PyTorch rejects (output size <= 0): so must we, as ValueError
        with pytest.raises(ValueError, match="output size must be positive"):
            ju.max_pool2d_with_indices(x, k, s, p, d, ceil)
        return
    for pool in IMPLS[2]:
        out, idx = pool(x, k, s, p, d, ceil)
        np.testing.assert_array_equal(np.asarray(out), t_out)
        np.testing.assert_array_equal(np.asarray(idx), t_idx)


HUGE_KERNELS = """
import sys
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import jax.numpy as jnp
sys.path.insert(0, sys.argv[1])
from numpy_oracle import max_pool
from jax_unpool import reference
rng = np.random.default_rng(0)
cases = [  # (x, kernel, padding, index dtype): windows far larger than the input
    (rng.standard_normal((2, 3, 7)), 2**20, 2**19, jnp.int32),
    (rng.standard_normal((1, 2, 5, 5)), 2**31 - 1, 2**30 - 1, jnp.int64),
    (rng.standard_normal((1, 2, 5, 5)), 2**31 - 1, 2**30 - 1, jnp.int32),
    (rng.integers(-8, 8, (1, 1, 5, 5)), 21, 10, jnp.int32),
]
for x, kernel, padding, index_dtype in cases:
    k = x.ndim - 2
    pool = getattr(reference, f"max_pool{k}d_with_indices")
    dtype = jnp.int4 if x.dtype.kind == "i" else jnp.float32
    values, indices = pool(jnp.asarray(x, dtype), kernel, 1, padding, index_dtype=index_dtype)
    want = max_pool(np.asarray(jnp.asarray(x, dtype)).astype(np.float64), (kernel,) * k,
                    (1,) * k, (padding,) * k, (1,) * k, False)
    np.testing.assert_array_equal(np.asarray(values, np.float64), want[0])
    np.testing.assert_array_equal(indices, want[1])
    assert indices.dtype == index_dtype
print("ok")
"""


@SLOW
def test_the_xla_ops_pool_of_a_huge_kernel_costs_the_input_not_the_kernel():
    """The XLA-ops pool (the reference, and the pools' lowering on GPU/TPU and for sub-byte
    dtypes on CPU) walks only the taps that land inside the input: a kernel of 2**31 - 1
    over a 5x5 plane traces and runs like a small one, values and indices as PyTorch's
    loop (before: a Python loop over every tap, which never finished). In a child process
    with a timeout, so that a regression fails instead of hanging the suite."""
    from fresh_process import HELPERS, child_env
    proc = subprocess.run([sys.executable, "-c", HUGE_KERNELS, str(HELPERS)], env=child_env(),
                          capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


# ------------------------------------------------------------------ layout, shapes


# (data_format, window): channels last against the channels-first result moved.
CHANNELS_LAST = (
    [pytest.param(fmt, window, id=f"{fmt}-{i}") for fmt in ("NHWC", "HWC")
     for i, window in enumerate([(2, 2, 0, 1, False), ((3, 2), (1, 2), (1, 1), (1, 2), True)])]
    + [pytest.param(fmt, (3, 2, 1, 1, True), marks=SLOW, id=fmt)
       for fmt in ("NWC", "WC", "NDHWC", "DHWC")])


@pytest.mark.parametrize("fmt,window", CHANNELS_LAST)
def test_channels_last_equals_moved_channels_first(fmt, window):
    k = len(fmt) - 1 - fmt.startswith("N")
    batched = fmt.startswith("N")
    first = ("NC" if batched else "C") + fmt[batched:-1]
    shape = {1: (2, 3, 13), 2: (2, 3, 9, 8), 3: (2, 3, 5, 6, 7)}[k]
    x = normal(shape if batched else shape[1:])
    out, idx = POOL[k](x, *window, data_format=first)
    out_l, idx_l = POOL[k](np.moveaxis(x, -k - 1, -1), *window, data_format=fmt)
    np.testing.assert_array_equal(np.asarray(out_l), np.moveaxis(np.asarray(out), -k - 1, -1))
    np.testing.assert_array_equal(np.asarray(idx_l), np.moveaxis(np.asarray(idx), -k - 1, -1))


def test_output_shape_ceil_mode_drops_window_starting_in_padding():
    # H=5, k=2, s=2, p=1: ceil gives 4 windows, but the 4th would start at row 5
    # (right padding), so PyTorch keeps 3.
    out, idx = ju.max_pool2d_with_indices(np.zeros((1, 5, 5), np.float32), 2, 2, 1,
                                          ceil_mode=True)
    assert out.shape == idx.shape == (1, 3, 3)


@pytest.mark.parametrize("shape", [(0, 3, 4, 4), (2, 0, 4, 4)])
def test_empty_batch_or_channels_give_empty_results(shape):
    out, idx = ju.max_pool2d_with_indices(jnp.zeros(shape), 2)
    assert out.shape == idx.shape == shape[:2] + (2, 2)


# ------------------------------------------------------------------ transformations


def test_jit_equals_eager():
    x = normal((2, 3, 9, 9))
    f = jax.jit(ju.max_pool2d_with_indices, static_argnums=(1, 2, 3, 4, 5))
    for a, b in zip(f(x, 3, 2, 1, 1, True), ju.max_pool2d_with_indices(x, 3, 2, 1, 1, True)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("in_axes", [0, 1, 3])
def test_vmap_equals_loop(in_axes):
    x = normal((3, 2, 7, 6))  # vmapped slices are 3-D (C, H, W)
    out, idx = jax.vmap(lambda v: ju.max_pool2d_with_indices(v, 2, 1, 1), in_axes=in_axes)(x)
    for i in range(x.shape[in_axes]):
        o, ix = ju.max_pool2d_with_indices(np.take(x, i, axis=in_axes), 2, 1, 1)
        np.testing.assert_array_equal(np.asarray(out[i]), np.asarray(o))
        np.testing.assert_array_equal(np.asarray(idx[i]), np.asarray(ix))


def test_nested_vmap_under_jit_equals_batched_call():
    x = normal((2, 3, 4, 8, 8))
    f = jax.jit(jax.vmap(jax.vmap(lambda v: ju.max_pool2d_with_indices(v, 3, 2, 1, 1, True))))
    out, idx = f(x)
    o, ix = ju.max_pool2d_with_indices(x.reshape(6, 4, 8, 8), 3, 2, 1, 1, True)
    np.testing.assert_array_equal(np.asarray(out), np.asarray(o).reshape(out.shape))
    np.testing.assert_array_equal(np.asarray(idx), np.asarray(ix).reshape(idx.shape))


@SLOW
@pytest.mark.parametrize("k", [1, 3])
def test_pool_then_unpool_round_trip_under_jit_and_vmap(k):
    unpool = {1: ju.max_unpool1d, 3: ju.max_unpool3d}[k]
    shape = (3, 2, 2, 8) if k == 1 else (3, 2, 2, 4, 4, 4)
    x = normal(shape)

    def f(x):
        y, i = POOL[k](x, 2)
        return unpool(y, i, 2)

    out = jax.jit(jax.vmap(f))(x)
    # Each kept value is the max of its window, and it sits where it came from.
    want = np.stack([np.asarray(f(x[b])) for b in range(3)])
    np.testing.assert_array_equal(out, want)
    kept = np.asarray(out) != 0
    np.testing.assert_array_equal(np.asarray(out)[kept], x[kept])
    assert kept.sum() == x.size // 2 ** k


# ------------------------------------------------------------------ index dtype


def test_index_dtype_int32_by_default():
    assert ju.max_pool2d_with_indices(normal((1, 4, 4)), 2)[1].dtype == jnp.int32


@needs_torch
def test_index_dtype_int64_under_x64():
    x = normal((2, 5, 4))
    with enable_x64(True):
        _, idx = ju.max_pool2d_with_indices(x, 2, index_dtype=jnp.int64)
        assert idx.dtype == jnp.int64
    np.testing.assert_array_equal(np.asarray(idx), torch_pool(2, x, 2)[1])


def test_index_dtype_int64_without_x64_warns_and_truncates_like_jax():
    match = "int64 requested in max_pool2d_with_indices"
    with enable_x64(False), pytest.warns(UserWarning, match=match):
        _, idx = ju.max_pool2d_with_indices(normal((1, 4, 4)), 2, index_dtype=jnp.int64)
    assert idx.dtype == jnp.int32


@SLOW
def test_int32_indices_suffice_when_every_index_lies_in_the_plane():
    """The int32 guard counts the taps inside the input, not the last tap of a huge kernel
    that lies in the padding: a 5x5 plane's indices are below 25 whatever the kernel."""
    x = jax.ShapeDtypeStruct((1, 1, 5, 5), jnp.float32)
    values, indices = jax.eval_shape(
        lambda x: ju.max_pool2d_with_indices(x, 2**31 - 1, 1, 2**30 - 1), x)
    assert indices.dtype == jnp.int32 and indices.shape == values.shape == (1, 1, 5, 5)
    with pytest.raises(ValueError, match="index_dtype int32 cannot hold the flat indices"):
        jax.eval_shape(lambda x: ju.max_pool2d_with_indices(x, 2, 1, 1),
                       jax.ShapeDtypeStruct((1, 1, 2**16, 2**16), jnp.float32))


@SLOW
def test_the_int32_guard_never_undercounts_the_largest_index(rng):
    """The guard's bound on the flat indices, per axis, is at least the largest position
    any window can report: an in-bounds tap of any window (an earlier window may reach
    further than the last one when the input clips it) or the initial index of a window of
    padding only. Checked by listing every window's taps on random 1-D geometries."""
    from jax_unpool import _geometry

    checked = 0
    while checked < 500:
        n, ks, d, s = (int(v) for v in rng.integers(1, [12, 6, 5, 5]))
        p, ceil_mode = int(rng.integers(0, ks // 2 + 1)), bool(rng.integers(0, 2))
        try:
            g = _geometry.pool_geometry("f", (1, 1, n), (ks,), (s,), (p,), (d,), ceil_mode,
                                        False, np.dtype(np.int64))
        except ValueError:  # output size not positive
            continue
        reported = 0
        for o in range(g.out_size[0]):
            taps = [o * s - p + j * d for j in range(ks) if 0 <= o * s - p + j * d < n]
            reported = max(reported, max(taps) if taps else g.first_in_bounds(0, o))
        bound = _geometry.largest_index(g)
        assert bound >= reported, (n, ks, d, s, p, ceil_mode, bound, reported)
        checked += 1
