"""The native CPU pool (jax_unpool_max_pool_v1 behind the pool primitives) where the torch
parity tests (test_pool_vs_torch.py, test_golden_torch.py) cannot reach: dtypes torch does
not pool (every float8 format, on all 256 of its codes; unsigned ints), against numpy's
transcription of
PyTorch's loop and the XLA-ops pool; random geometries of every rank and layout against
torch (hypothesis); inputs large enough to be split across XLA's thread pool; kernels of
up to 2**31 - 1 taps, whose cost is their part inside the input; the primitives under
vmap; dtypes the kernel does not order, which keep the XLA ops."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from dtypes import bits
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_oracle import needs_torch, torch, torch_pool

import jax_unpool as ju
from jax_unpool._compat import enable_x64

pytestmark = pytest.mark.slow

POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
XLA_POOL = {k: getattr(ju.reference, f"max_pool{k}d_with_indices") for k in (1, 2, 3)}
FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
FLOAT8 = [d for d in ("float8_e5m2", "float8_e4m3", "float8_e3m4", "float8_e4m3fn",
                      "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz",
                      "float8_e8m0fnu") if hasattr(jnp, d)]


def channels_last(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1))


@pytest.mark.parametrize("dtype,last", [(d, i % 2 == 1) for i, d in enumerate(FLOAT8)])
def test_float8_every_code_matches_pytorchs_loop(dtype, last):
    # All 256 codes, NaNs and infinities where the format has them, in random order, in
    # overlapping padded windows and in 2 x 2 ones; the layouts alternate.
    codes = np.random.default_rng(0).permutation(256).astype(np.uint8)
    x = codes.view(jnp.dtype(dtype)).reshape(2, 2, 8, 8)
    if last:
        x = channels_last(x)
    fmt = FORMATS[2][last]
    for window in (((3, 3), (2, 2), (1, 1), (1, 1), True),
                   ((2, 2), (2, 2), (0, 0), (1, 1), False)):
        values, indices = POOL[2](x, *window, data_format=fmt)
        want_values, want_indices = oracle.max_pool(x, *window, last)
        np.testing.assert_array_equal(bits(values), bits(want_values))  # NaN payloads too
        np.testing.assert_array_equal(indices, want_indices)
        xla_values, xla_indices = XLA_POOL[2](x, *window, data_format=fmt)
        np.testing.assert_array_equal(xla_indices, want_indices)
        np.testing.assert_array_equal(np.asarray(xla_values, np.float32),
                                      np.asarray(want_values, np.float32))


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64"])
def test_unsigned_ints_torch_does_not_pool_match_pytorchs_loop(dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 4, (2, 3, 9), dtype=dtype)
    x[0, 0] = info.min
    x[1, 1, ::3] = info.max
    with enable_x64(True):
        values, indices = POOL[1](x, 3, 2, 1, 1, True)
    want_values, want_indices = oracle.max_pool(x, (3,), (2,), (1,), (1,), True)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


@st.composite
def geometries(draw):
    k = draw(st.integers(1, 3))
    kernel = [draw(st.integers(1, 4)) for _ in range(k)]
    return {"k": k, "kernel": kernel,
            "stride": [draw(st.integers(1, 4)) for _ in range(k)],
            "padding": [draw(st.integers(0, kk // 2)) for kk in kernel],
            "dilation": [draw(st.integers(1, 3)) for _ in range(k)],
            "ceil_mode": draw(st.booleans()), "last": draw(st.booleans()),
            "batched": draw(st.booleans()),
            "spatial": [draw(st.integers(1, 9 if k < 3 else 6)) for _ in range(k)],
            "seed": draw(st.integers(0, 2**16))}


@needs_torch
@settings(max_examples=30, deadline=None, derandomize=True)
@given(geometries())
def test_random_geometries_of_every_rank_and_layout_match_torch(g):
    k, last = g["k"], g["last"]
    window = (g["kernel"], g["stride"], g["padding"], g["dilation"], g["ceil_mode"])
    rng = np.random.default_rng(g["seed"])
    x = rng.integers(-2, 3, (2, 3, *g["spatial"])).astype(np.float32)  # ties
    x[x == 2] = np.nan
    x[rng.random(x.shape) < 0.1] = -np.inf
    xt = torch.from_numpy(x).requires_grad_(True)
    try:
        t_values, t_indices = getattr(torch.nn.functional, f"max_pool{k}d")(
            xt, *window, return_indices=True)
    except RuntimeError:  # PyTorch's output size <= 0: ours is a ValueError
        with pytest.raises(ValueError, match="output size must be positive"):
            POOL[k](x, *window)
        return
    ct = rng.standard_normal(tuple(t_values.shape)).astype(np.float32)
    layout = channels_last if last else (lambda a: a)
    unbatch = (lambda a: a) if g["batched"] else (lambda a: a[0])
    fmt = FORMATS[k][last][0 if g["batched"] else 1:]
    (values, indices), vjp = jax.vjp(lambda v: POOL[k](v, *window, data_format=fmt),
                                     unbatch(layout(x)))
    np.testing.assert_array_equal(values, unbatch(layout(t_values.detach().numpy())))
    np.testing.assert_array_equal(indices, unbatch(layout(t_indices.numpy())))
    if (t_indices.numpy() >= np.prod(g["spatial"])).any():
        # A window of padding only whose index (PyTorch's quirk) lies past the plane:
        # torch's backward adds its cotangent into the next plane's memory, ours drops it.
        # (Its backward is not run at all: past the last plane it writes past its buffer,
        # which crashed the process later.)
        return
    (t_values * torch.from_numpy(ct)).sum().backward()
    grad = vjp((unbatch(layout(ct)), np.zeros(indices.shape, jax.dtypes.float0)))[0]
    # overlapping windows sum in another order than torch
    np.testing.assert_allclose(grad, unbatch(layout(xt.grad.numpy())), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("k,shape", [(2, (4, 8, 128, 130)), (1, (8, 16, 4099)),
                                     (3, (2, 4, 16, 33, 32))])
@pytest.mark.parametrize("last", [False, True])
def test_inputs_split_across_the_thread_pool_equal_the_xla_ops(k, shape, last):
    # Several MB: the kernel hands chunks of output rows (positions, channels last) to
    # XLA's intra-op pool, with odd sizes (ceil_mode windows half outside) on the way.
    x = np.random.default_rng(2).integers(-50, 50, shape).astype(np.float32)
    if last:
        x = channels_last(x)
    fmt = FORMATS[k][last]
    for window in ((2, 2, 0, 1, True), (3, 2, 1, 1, False)):
        got = jax.jit(lambda v, w=window: POOL[k](v, *w, data_format=fmt))(x)
        want = XLA_POOL[k](x, *window, data_format=fmt)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


HUGE = 2**31 - 1  # the largest kernel PyTorch (and the package) takes
HALF = 2**30 - 1  # the largest padding of that kernel
# (name, x's shape, data_format, kernel, stride, padding, ceil_mode, with NaNs): windows
# that cover the whole input through ~2**31 taps of padding.
HUGE_KERNELS = [
    ("2-D NCHW (issue 31)", (1, 1, 5, 5), "NCHW", HUGE, 1, HALF, False, False),
    ("1-D NCW, NaNs", (2, 8, 5), "NCW", HUGE, 1, HALF, False, True),
    ("1-D NCW, windows 2**30 apart", (8, 16, 7), "NCW", HUGE, HALF, HALF, True, False),
    ("2-D NHWC", (1, 6, 6, 4), "NHWC", HUGE, 1, HALF, False, False),
    ("3-D NCDHW", (1, 2, 3, 4, 5), "NCDHW", HUGE, 1, HALF, False, True),
]
# In the child: the pool of x.npy with argv's window, saved to out.npz.
HUGE_KERNEL_CHILD = """
import json, sys
import jax
jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp, numpy as np
import jax_unpool as ju
x_path, out_path, fmt, window = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
pool = getattr(ju, f"max_pool{len(fmt) - 2}d_with_indices")
values, indices = pool(np.load(x_path), *window, data_format=fmt, index_dtype=jnp.int64)
np.savez(out_path, values=values, indices=indices)
"""


@pytest.mark.parametrize("case", HUGE_KERNELS, ids=[c[0] for c in HUGE_KERNELS])
def test_a_huge_kernel_costs_its_part_inside_the_input(case, tmp_path):
    # A window of 2**31 - 1 taps over a few input elements: the result is the oracle's
    # (first maximum, last NaN, int64 indices), and the call ends within the timeout --
    # a hang guard, not a benchmark: a kernel that walks every tap takes minutes here.
    _, shape, fmt, kernel, stride, padding, ceil_mode, nans = case
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 3, shape).astype(np.float32)  # ties
    if nans:
        x[rng.random(shape) < 0.1] = np.nan
    np.save(tmp_path / "x.npy", x)
    window = [kernel, stride, padding, 1, ceil_mode]
    try:
        proc = subprocess.run(
            [sys.executable, "-c", HUGE_KERNEL_CHILD, str(tmp_path / "x.npy"),
             str(tmp_path / "out.npz"), fmt, json.dumps(window)],
            env=fresh_process.child_env(), capture_output=True, text=True, timeout=60,
            check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the pool with kernel_size={kernel} ran for more than 60 s")
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(tmp_path / "out.npz")
    k = len(fmt) - 2
    last = fmt.endswith("C")
    want_values, want_indices = oracle.max_pool(
        x, (kernel,) * k, (stride,) * k, (padding,) * k, (1,) * k, ceil_mode, last)
    np.testing.assert_array_equal(bits(got["values"]), bits(want_values))
    np.testing.assert_array_equal(got["indices"], want_indices)
    assert got["indices"].dtype == np.int64


def test_vmap_of_the_primitive_folds_into_one_call():
    x = np.random.default_rng(3).standard_normal((3, 2, 5, 9, 9)).astype(np.float32)
    f = jax.vmap(jax.vmap(lambda v: ju.max_pool2d_with_indices(v, 3, 2, 1)), in_axes=1)
    jaxpr = str(jax.make_jaxpr(f)(x))
    assert jaxpr.count("max_pool2d_with_indices[") == 1
    values, indices = f(x)
    want = ju.reference.max_pool2d_with_indices(x.transpose(1, 0, 2, 3, 4).reshape(6, 5, 9, 9),
                                                3, 2, 1)
    np.testing.assert_array_equal(values, np.asarray(want[0]).reshape(2, 3, 5, 5, 5))
    np.testing.assert_array_equal(indices, np.asarray(want[1]).reshape(2, 3, 5, 5, 5))


@pytest.mark.parametrize("dtype", ["int4", "float4_e2m1fn"])
def test_dtypes_the_kernel_does_not_order_keep_the_xla_ops(dtype):
    x = jnp.asarray(np.random.default_rng(4).integers(0, 4, (2, 3, 6, 6)), dtype)
    f = jax.jit(lambda v: ju.max_pool2d_with_indices(v, 2))
    hlo = f.lower(x).compile().as_text()
    assert not re.search(r'custom_call_target="jax_unpool_max_pool', hlo)
    for a, b in zip(f(x), ju.reference.max_pool2d_with_indices(x, 2)):
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


@needs_torch
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_subnormal_floats_compare_as_in_torch(dtype):
    # XLA's CPU code reads subnormals as zero; PyTorch (and the native pool) compares them.
    # 48 windows: the vectorised loop sees them too, not only its scalar remainder.
    tiny = float(jnp.finfo(dtype).smallest_subnormal)
    x = np.tile([0.0, tiny, -tiny, 0.0, tiny, 2 * tiny], 16).reshape(1, 1, 96)
    t_values, t_indices = torch_pool(1, x.astype(jnp.dtype(dtype)), 2)
    with enable_x64(dtype == "float64"):
        values, indices = POOL[1](jnp.asarray(x, dtype), 2)
    np.testing.assert_array_equal(indices, t_indices)
    np.testing.assert_array_equal(np.asarray(values, np.float64), t_values.astype(np.float64))


@pytest.mark.parametrize("param,value,message", [
    ("stride", (2.0, 2), r"max_pool2d_with_indices_p: stride must be a tuple of 2 ints, got \(2\.0"),
    ("padding", [0, 0], r"max_pool2d_with_indices_p: padding must be a tuple of 2 ints"),
    ("ceil_mode", 1, r"max_pool2d_with_indices_p: ceil_mode must be a bool, got 1"),
])
def test_a_bind_with_a_parameter_of_the_wrong_type_is_a_type_error(param, value, message):
    # Checked at every bind: jax's caches hold 2.0 equal to 2 and 1 equal to True.
    params = {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0), "dilation": (1, 1),
              "ceil_mode": False, "channels_last": False, "index_dtype": np.dtype("int32")}
    with pytest.raises(TypeError, match=message):
        ju.max_pool2d_with_indices_p.bind(jnp.zeros((1, 1, 4, 4)), **{**params, param: value})
