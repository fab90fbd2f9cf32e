"""The pool's geometry answered in closed form (constant time and memory per axis) equals
the answer of listing every window as PyTorch's loops do: each window's initial argmax
coordinate (``while (ih0 < 0) ih0 += dilationH``), the bound on the flat indices (the
int32 guard), and whether argmaxes are unique (the gradient's path); and the XLA-ops
pool, whose indices are iota arithmetic, reports the listed initial indices. Exhaustive
over small 1-D geometries (dilation, padding, ceil_mode, windows of padding only), random
over sizes up to 2**31 - 1."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import jax_unpool as ju
from jax_unpool import _geometry

INT32_MAX = 2**31 - 1


def geometry(in_size, kernel, stride, padding, dilation, ceil_mode):
    """The checked geometry of a (1, 1, *in_size) pool, or None where PyTorch refuses it."""
    try:
        return _geometry.pool_geometry("f", (1, 1, *in_size), kernel, stride, padding,
                                       dilation, ceil_mode, False, np.dtype(np.int64))
    except ValueError:
        return None


def listed_first(o: int, n: int, k: int, s: int, p: int, d: int) -> int:
    """PyTorch's initial argmax coordinate of window o, by its loop."""
    ih = o * s - p
    while ih < 0:
        ih += d
    return ih


def listed_reported(o: int, n: int, k: int, s: int, p: int, d: int) -> int:
    """The largest coordinate window o can report: its last in-bounds tap, else (a window
    of padding only) its initial coordinate."""
    taps = [o * s - p + j * d for j in range(k) if 0 <= o * s - p + j * d < n]
    return max(taps) if taps else listed_first(o, n, k, s, p, d)


def _small_1d():
    for n, k, d, s in itertools.product(range(1, 14), range(1, 8), range(1, 9), range(1, 9)):
        for p, ceil_mode in itertools.product(range(k // 2 + 1), (False, True)):
            g = geometry((n,), (k,), (s,), (p,), (d,), ceil_mode)
            if g is not None:
                yield g


def test_closed_forms_equal_listing_every_window_of_small_1d_geometries():
    checked = padding_only = 0
    for g in _small_1d():
        (n,), (k,), (s,), (p,), (d,) = g.in_size, g.kernel, g.stride, g.padding, g.dilation
        windows = range(g.out_size[0])
        firsts = [listed_first(o, n, k, s, p, d) for o in windows]
        assert [g.first_in_bounds(0, o) for o in windows] == firsts, g
        # The closed form's bound is the array form's (the largest initial coordinate over
        # every window, not only the last one's) and holds every reported index.
        last_tap = (g.out_size[0] - 1) * s - p + (k - 1) * d
        assert _geometry.largest_index(g) == max(min(last_tap, n - 1), *firsts), g
        assert _geometry.largest_index(g) >= max(listed_reported(o, n, k, s, p, d)
                                                 for o in windows), g
        unique = s >= d * (k - 1) + 1 and max(firsts) < n
        assert g.argmax_is_unique() == unique, g
        padding_only += sum(f >= n for f in firsts)
        checked += 1
    assert checked > 10_000 and padding_only > 100  # windows of padding only are covered


def array_first(o: int, s: int, p: int, d: int) -> int:
    """The initial coordinate as the old per-window arrays computed it."""
    start = o * s - p
    return start - (start // d) * d if start < 0 else start


@settings(max_examples=600, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=st.data(), small=st.sampled_from("nksd"), ceil_mode=st.booleans())
def test_closed_forms_hold_at_sizes_up_to_int32(data, small, ceil_mode):
    """Sizes up to 2**31 - 1, one of them small (or windows would rarely fit): the windows
    that start in the left padding, the only ones whose coordinate moves (up to 2,000 of
    them), and the last window, against the old per-window arrays' arithmetic."""
    n, k, s, d = (data.draw(st.integers(1, 16 if name == small else INT32_MAX), label=name)
                  for name in "nksd")
    p = data.draw(st.integers(0, k // 2), label="p")
    g = geometry((n,), (k,), (s,), (p,), (d,), ceil_mode)
    assume(g is not None)
    out = g.out_size[0]
    negative = range(min(out, -(-p // s), 2000))  # windows starting left of the input
    for o in (*negative, out - 1):
        assert g.first_in_bounds(0, o) == array_first(o, s, p, d)
    # The last window's initial coordinate is the largest of those past the input.
    firsts = [array_first(o, s, p, d) for o in negative]
    last = g.first_in_bounds(0, out - 1)
    assert all(f < n or f <= last for f in firsts)
    last_tap = (out - 1) * s - p + (k - 1) * d
    assert _geometry.largest_index(g) == max(min(last_tap, n - 1), last, *firsts)


def _padding_only_2d():
    """2-D geometries with dilation, padding and ceil_mode, windows of padding only among
    them, small enough to compile each."""
    rng = np.random.default_rng(0)
    cases = [((3, 1), (2, 3), (5, 1), (1, 1), (4, 1), True),  # rows of padding only
             ((4, 5), (3, 3), (2, 2), (1, 1), (2, 2), True),
             ((1, 6), (2, 2), (3, 1), (1, 1), (2, 3), False)]
    while len(cases) < 24:
        in_size = tuple(int(v) for v in rng.integers(1, 8, 2))
        kernel = tuple(int(v) for v in rng.integers(1, 5, 2))
        stride, dilation = (tuple(int(v) for v in rng.integers(1, 5, 2)) for _ in "sd")
        padding = tuple(int(rng.integers(0, kk // 2 + 1)) for kk in kernel)
        case = (in_size, kernel, stride, padding, dilation, bool(rng.integers(0, 2)))
        if geometry(*case) is not None:
            cases.append(case)
    return cases


@pytest.mark.parametrize("case", _padding_only_2d(), ids=str)
def test_the_xla_ops_pool_reports_the_listed_initial_indices(case):
    """On an input of -inf every window keeps its initial index (padding never wins, ties
    keep the first): the iota arithmetic of the XLA-ops pool (jax_unpool.reference's)
    against PyTorch's loop per axis, flattened."""
    in_size, kernel, stride, padding, dilation, ceil_mode = case
    g = geometry(*case)
    x = jnp.full((1, 1, *in_size), -jnp.inf, jnp.float32)
    values, indices = jax.jit(ju.reference.max_pool2d_with_indices, static_argnums=range(1, 6))(
        x, kernel, stride, padding, dilation, ceil_mode)
    rows, cols = ([listed_first(o, in_size[a], kernel[a], stride[a], padding[a], dilation[a])
                   for o in range(g.out_size[a])] for a in range(2))
    want = np.array(rows)[:, None] * in_size[1] + np.array(cols)[None, :]
    np.testing.assert_array_equal(np.asarray(indices)[0, 0], want)
    assert np.isneginf(np.asarray(values)).all()


@pytest.mark.parametrize("channels_last", [False, True], ids=["first", "last"])
@pytest.mark.parametrize("shape,kernel,stride,padding,dilation,ceil_mode", [
    ((2, 3, 90), (70,), (3,), (35,), (1,), True),
    ((1, 2, 13, 12), (9, 9), (2, 3), (4, 2), (2, 1), False),
    ((1, 1, 6, 7, 8), (4, 5, 4), (1, 2, 3), (2, 2, 1), (2, 1, 2), True),
], ids=["1d", "2d", "3d"])
def test_the_xla_ops_pool_over_more_than_64_taps_matches_the_loop(
        channels_last, shape, kernel, stride, padding, dilation, ceil_mode):
    """More taps inside the input than the unrolled loop takes: a fori_loop whose tap
    positions are traced scalars times the dilation's flat step. Values with ties, so that
    a wrong tap index shows."""
    k = len(kernel)
    x = np.random.default_rng(k).integers(0, 6, shape).astype(np.float32)
    want = oracle.max_pool(x, kernel, stride, padding, dilation, ceil_mode)
    if channels_last:
        x, want = np.moveaxis(x, 1, -1), [np.moveaxis(w, 1, -1) for w in want]
    fmt = _geometry.data_format(k, channels_last)
    values, indices = getattr(ju.reference, f"max_pool{k}d_with_indices")(
        x, kernel, stride, padding, dilation, ceil_mode, data_format=fmt)
    np.testing.assert_array_equal(values, want[0])
    np.testing.assert_array_equal(indices, want[1])
