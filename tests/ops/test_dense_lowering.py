"""The XLA-ops lowering's dense unpool (what TPUs and JAX_UNPOOL_BACKEND=xla run) against
the native CPU kernels, PyTorch and numpy loops, bit for bit; the on-device choice between
the dense ops and XLA's scatter and gather; the pools' dense gradient over overlapping
windows against PyTorch.

The CPU is routed through the XLA-ops backend by the registry (`xla_ops`), in this
process; tests/backends/test_backend_switch.py checks the environment switch itself."""

from __future__ import annotations

import contextlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from dtypes import VALUE_DTYPES, assert_bits_equal, needs_x64, random_values
from torch_oracle import F, needs_torch, one_torch_thread, torch

import jax_unpool as ju
from jax_unpool import _geometry, _unpool_dense, _unpool_xla
from jax_unpool._compat import enable_x64
from jax_unpool.backends import registry, xla

pytestmark = pytest.mark.slow

POOLS = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
         3: ju.max_pool3d_with_indices}
UNPOOLS = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}
BACKWARDS = {1: ju.max_unpool1d_backward, 2: ju.max_unpool2d_backward,
             3: ju.max_unpool3d_backward}
BACKWARD_PRIMITIVES = {1: ju.max_unpool1d_backward_p, 2: ju.max_unpool2d_backward_p,
                       3: ju.max_unpool3d_backward_p}


@contextlib.contextmanager
def xla_ops():
    """The CPU lowers the ops through the XLA-ops backend (as a TPU does) inside the block;
    jax's caches are cleared on entry and exit."""
    registry.install("cpu", xla.LOWERINGS)
    try:
        yield
    finally:
        registry.restore("cpu")


def layout(fmt: str, spatial: tuple[int, ...], n: int = 2, c: int = 3) -> tuple[int, ...]:
    dims = {"N": n, "C": c, **dict(zip("DHW"[3 - len(spatial):], spatial))}
    return tuple(dims[d] for d in fmt)


def channels_first(a, fmt: str) -> np.ndarray:
    """Batched (N, C, ...) numpy, for PyTorch."""
    a = np.asarray(a)
    a = a if fmt[0] == "N" else a[None]
    return np.moveaxis(a, -1, 1) if fmt.endswith("C") else a


def as_format(a, fmt: str) -> np.ndarray:
    a = np.moveaxis(np.asarray(a), 1, -1) if fmt.endswith("C") else np.asarray(a)
    return a if fmt[0] == "N" else a[0]


# (format, the pool's input size, kernel, stride, padding, ceil_mode); the unpool gives
# the pool's input size back, with the window as its hint.
CASES = [
    ("NCW", (9,), 2, 2, 0, False),
    ("WC", (10,), 3, 2, 1, False),
    ("NWC", (11,), 3, 2, 1, True),
    ("NCW", (12,), 3, 1, 1, False),  # stride 1: three windows may hold a position
    ("NCHW", (8, 8), 2, 2, 0, False),
    ("NHWC", (7, 9), 2, 2, 0, True),  # odd sizes, ceil_mode: the last windows clipped
    ("NCHW", (9, 7), 3, 2, 1, False),
    ("CHW", (8, 6), 3, 2, 1, True),
    ("NHWC", (8, 9), (3, 2), (1, 2), (1, 0), False),  # kernel != stride, per axis
    ("NCHW", (7, 8), 2, 3, 0, False),  # stride > kernel: positions no window holds
    ("NCHW", (5, 2), 3, 2, 1, False),  # boxes wider than the plane
    ("NCDHW", (4, 5, 6), 2, 2, 0, False),
    ("NDHWC", (5, 4, 5), 3, 2, 1, True),
    ("CDHW", (4, 4, 5), (2, 3, 2), (1, 2, 2), (1, 1, 0), False),
]


def case_id(case) -> str:
    fmt, size, kernel, stride, padding, ceil = case
    return f"{fmt}-{'x'.join(map(str, size))}-k{kernel}-s{stride}-p{padding}" + (
        "-ceil" if ceil else "")


def pooled(case, x):
    fmt, size, kernel, stride, padding, ceil = case
    return POOLS[len(size)](x, kernel, stride, padding, 1, ceil, data_format=fmt)


def per_axis(value, k: int) -> tuple[int, ...]:
    return (value,) * k if isinstance(value, int) else tuple(value)


def unpool_fns(case):
    """The jitted forward, and the backward as the forward's transpose binds it: with the
    window as its hint (the public backward takes none)."""
    fmt, size, kernel, stride, padding, _ = case
    k = len(size)
    window = tuple(per_axis(v, k) for v in (kernel, stride, padding))

    def forward(v, i):
        return UNPOOLS[k](v, i, kernel, stride, padding, output_size=size, data_format=fmt)

    def backward(g, i):
        return BACKWARD_PRIMITIVES[k].bind(g, i, channels_last=fmt.endswith("C"),
                                           spatial_rank=k, window=window)
    return jax.jit(forward), jax.jit(backward)


def distinct(shape, dtype=np.float32, seed=0) -> np.ndarray:
    """Distinct values (a permutation of 1..size), so that a wrong winner shows."""
    return (np.random.default_rng(seed).permutation(math_prod(shape)) + 1).reshape(
        shape).astype(dtype)


def math_prod(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def torch_unpool_and_gather(case, v, i, g):
    """PyTorch's max_unpool and its gradient w.r.t. its input (the gather), in `case`'s
    format."""
    fmt, size, kernel, stride, padding, _ = case
    vt = torch.from_numpy(channels_first(v, fmt)).requires_grad_(True)
    it = torch.from_numpy(channels_first(i, fmt).astype(np.int64))
    with one_torch_thread():  # overlapping windows give duplicates (torch_oracle.py)
        out = getattr(F, f"max_unpool{len(size)}d")(vt, it, kernel, stride, padding, output_size=size)
        out.backward(torch.from_numpy(channels_first(g, fmt)))
    return as_format(out.detach().numpy(), fmt), as_format(vt.grad.numpy(), fmt)


@needs_torch
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_unpool_equals_native_kernels_and_torch(rng, case):
    fmt, size = case[:2]
    x = rng.standard_normal(layout(fmt, size)).astype(np.float32)
    _, idx = pooled(case, x)
    v = distinct(idx.shape)
    g = distinct(x.shape, seed=1)
    forward, backward = unpool_fns(case)
    native = forward(v, idx), backward(g, idx)
    with xla_ops():
        forward, backward = unpool_fns(case)
        dense = forward(v, idx), backward(g, idx)
    expected = torch_unpool_and_gather(case, v, np.asarray(idx), g)
    for got, want, oracle_value in zip(dense, native, expected):
        assert_bits_equal(got, want)
        assert_bits_equal(got, oracle_value)


# Values whose bits a conversion would change: NaN payloads (quiet and signaling), -0.0.
_SPECIAL = {"float16": [0x7E01, 0x7C01, 0x8000], "bfloat16": [0x7FC1, 0x7F81, 0x8000],
            "float32": [0x7FC00001, 0x7F800001, 0x80000000],
            "float64": [0x7FF8000000000001, 0x7FF0000000000001, 0x8000000000000000]}
DTYPES = [*VALUE_DTYPES, "uint16", "uint32", "uint64", "float8_e4m3fn", "complex64"]
DTYPE_CASES = [CASES[4], CASES[6]]  # 2x2/s2 NCHW, 3x3/s2/p1 NCHW


def values_of(rng, shape, dtype: str) -> np.ndarray:
    if dtype == "complex64":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if dtype == "float8_e4m3fn":
        return rng.standard_normal(shape).astype(jnp.float8_e4m3fn)
    v = random_values(rng, shape, dtype)
    if dtype in _SPECIAL:
        flat = v.reshape(-1).view(f"u{v.dtype.itemsize}")
        flat[:len(_SPECIAL[dtype])] = _SPECIAL[dtype]
    return v


@pytest.mark.parametrize("dtype,index_dtype", [(d, "int32") for d in DTYPES] + [
    (d, "int64") for d in ("float32", "bfloat16", "int8", "float64")])
@pytest.mark.parametrize("case", DTYPE_CASES, ids=case_id)
def test_every_value_dtype_moves_bit_exactly(rng, case, dtype, index_dtype):
    fmt, size = case[:2]
    x = rng.standard_normal(layout(fmt, size)).astype(np.float32)
    with enable_x64(needs_x64(dtype, index_dtype)):
        _, idx = pooled(case, x)
        idx = np.asarray(idx).astype(index_dtype)
        v = values_of(rng, idx.shape, dtype)
        g = values_of(rng, x.shape, dtype)
        forward, backward = unpool_fns(case)
        native = forward(v, idx), backward(g, idx)
        with xla_ops():
            forward, backward = unpool_fns(case)
            dense = forward(v, idx), backward(g, idx)
    assert_bits_equal(dense[0], native[0])
    assert_bits_equal(dense[1], native[1])
    assert_bits_equal(dense[0], oracle.unpool_nd(v, idx, size))
    assert_bits_equal(dense[1], oracle.gather_nd(g, idx, len(size)))


# Overlapping windows: a maximum several windows share, or (constant input) every window's
# first position, is the index of several input positions; the largest one wins.
DUPLICATE_CASES = [("NCW", (12,), 3, 1, 1, False), ("NCHW", (7, 8), 3, 1, 1, False),
                   ("NHWC", (9, 7), 3, 2, 1, True), ("NCDHW", (4, 5, 5), 3, 2, 1, False)]


@needs_torch
@pytest.mark.parametrize("case,input_kind", [
    *((c, "shared maxima") for c in DUPLICATE_CASES),
    # Ties: each window's first position, which windows of stride 1 share.
    *((c, "constant") for c in DUPLICATE_CASES[:2])], ids=str)
def test_duplicates_keep_the_largest_input_position(rng, case, input_kind):
    fmt, size = case[:2]
    shape = layout(fmt, size)
    x = (np.ones(shape, np.float32) if input_kind == "constant"
         else rng.integers(0, 4, shape).astype(np.float32))
    _, idx = pooled(case, x)
    planes = channels_first(idx, fmt).reshape(*channels_first(idx, fmt).shape[:2], -1)
    assert any(len(np.unique(p)) < p.size for p in planes.reshape(-1, planes.shape[-1]))
    v = distinct(idx.shape)
    forward, _ = unpool_fns(case)
    native = forward(v, idx)
    with xla_ops():
        forward, _ = unpool_fns(case)
        dense = forward(v, idx)
    assert_bits_equal(dense, native)
    assert_bits_equal(dense, oracle.unpool_nd(v, idx, size, fmt.endswith("C")))
    assert_bits_equal(dense, torch_unpool_and_gather(case, v, np.asarray(idx),
                                                     np.zeros(x.shape, np.float32))[0])


def moved(idx, fmt: str, size, how: str) -> np.ndarray:
    """`idx` with one index per plane replaced: by a position of the plane outside its
    window's box (the opposite corner), or by one outside the plane."""
    out = channels_first(idx, fmt).copy()
    plane = math_prod(size)
    flat = out.reshape(*out.shape[:2], -1)
    flat[:, :, 0] = {"elsewhere in the plane": plane - 1, "negative": -1,
                     "past the plane": plane}[how]
    return as_format(out, fmt)


@pytest.mark.parametrize("how", ["elsewhere in the plane", "negative", "past the plane"])
@pytest.mark.parametrize("case", [CASES[4], CASES[8], CASES[12]], ids=case_id)
def test_indices_outside_their_boxes_give_the_scatter_results(rng, case, how):
    fmt, size = case[:2]
    x = rng.standard_normal(layout(fmt, size)).astype(np.float32)
    _, idx = pooled(case, x)
    idx = moved(idx, fmt, size, how)
    v = distinct(idx.shape)
    g = distinct(x.shape, seed=1)
    struct = jax.ShapeDtypeStruct(idx.shape, v.dtype)
    with xla_ops():
        forward, backward = unpool_fns(case)
        dense = forward(v, idx), backward(g, idx)
    # The scatter and gather of jax_unpool.reference: an index outside the plane is
    # dropped by the forward and reads 0 in the backward.
    kernel, stride, padding = case[2:5]
    k = len(size)
    ref_forward = getattr(ju.reference, f"max_unpool{k}d")(v, idx, kernel, stride, padding,
                                                           output_size=size, data_format=fmt)
    ref_backward = getattr(ju.reference, f"max_unpool{k}d_backward")(g, struct, idx, size,
                                                                     data_format=fmt)
    assert_bits_equal(dense[0], ref_forward)
    assert_bits_equal(dense[1], ref_backward)
    if how == "elsewhere in the plane":
        assert_bits_equal(dense[0], oracle.unpool_nd(v, idx, size, fmt.endswith("C")))
        assert_bits_equal(dense[1], oracle.gather_nd(g, idx, k, fmt.endswith("C")))


def test_int64_indices_past_int32_are_not_read_as_their_low_bits(rng):
    # The dense ops compare int32 offsets: an int64 index 2**32 + p must not pass for p.
    case = CASES[4]
    fmt, size = case[:2]
    x = rng.standard_normal(layout(fmt, size)).astype(np.float32)
    with enable_x64(True):
        _, idx = pooled(case, x)
        idx = np.asarray(idx).astype(np.int64)
        idx.reshape(-1)[0] += 2**32
        v, g = distinct(idx.shape), distinct(x.shape, seed=1)
        with xla_ops():
            forward, backward = unpool_fns(case)
            dense = forward(v, idx), backward(g, idx)
        want_forward = ju.reference.max_unpool2d(v, idx, 2, output_size=size)
        want_backward = ju.reference.max_unpool2d_backward(g, v, idx, size)
    assert_bits_equal(dense[0], want_forward)
    assert_bits_equal(dense[1], want_backward)
    assert np.asarray(dense[1]).reshape(-1)[0] == 0


# ------------------------------------------------------------------ which branch runs

def boxes_and_indices(size_in, size_out, window, channels: int | None = None):
    """Indices inside their boxes, each plane (channel c) taking the c-th position of each
    box that lies in the plane: every position of every box is some plane's index.
    Returns (boxes, (1, C, *size_in) int32 indices)."""
    b = _unpool_dense.boxes(size_in, size_out, window, np.int32)
    extent, stride, padding = window
    count = math_prod(extent)
    strides = [math_prod(size_out[a + 1:]) for a in range(len(size_out))]
    idx = np.zeros((1, channels or count, *size_in), np.int32)
    for q in np.ndindex(*size_in):
        corner = [qa * s - p for qa, s, p in zip(q, stride, padding)]
        inside = [sum(c * st for c, st in zip(pos, strides)) for pos in
                  (tuple(c + d for c, d in zip(corner, offset))
                   for offset in np.ndindex(*extent))
                  if all(0 <= c < o for c, o in zip(pos, size_out))]
        for c in range(idx.shape[1]):
            idx[(0, c, *q)] = inside[c % len(inside)]
    return b, idx


# (input size, output size, (extent, stride, padding)): tiled, overlapping, gaps, wide.
WINDOWS = [((4, 5), (8, 10), ((2, 2), (2, 2), (0, 0))),
           ((4, 4), (7, 8), ((3, 3), (2, 2), (1, 1))),
           ((3, 4), (8, 8), ((2, 3), (3, 1), (0, 1))),
           ((3, 2), (5, 2), ((3, 3), (2, 2), (1, 1))),
           ((6,), (12,), ((3,), (1,), (1,))),
           ((2, 3, 2), (4, 5, 4), ((3, 3, 2), (2, 2, 2), (1, 1, 0)))]


@pytest.mark.parametrize("size_in,size_out,window", WINDOWS)
def test_dense_ops_alone_equal_numpy_loops_for_every_position_of_every_box(
        rng, size_in, size_out, window):
    b, idx = boxes_and_indices(size_in, size_out, window)
    assert bool(_unpool_dense.in_boxes(jnp.asarray(idx), b, False))
    v = distinct(idx.shape)
    g = distinct((*idx.shape[:2], *size_out), seed=1)
    scatter = jax.jit(lambda v, i: _unpool_dense.scatter(v, i, b, False))
    gather = jax.jit(lambda g, i: _unpool_dense.gather(g, i, b, False))
    assert_bits_equal(scatter(v, idx), oracle.unpool_nd(v, idx, size_out))
    assert_bits_equal(gather(g, idx), oracle.gather_nd(g, idx, len(size_out)))
    # channels-last: the same planes, C moved last
    last = np.moveaxis(idx, 1, -1)
    assert_bits_equal(jax.jit(lambda v, i: _unpool_dense.scatter(v, i, b, True))(
        np.moveaxis(v, 1, -1), last), np.moveaxis(oracle.unpool_nd(v, idx, size_out), 1, -1))


@pytest.mark.parametrize("size_in,size_out,window", WINDOWS[:4])
def test_in_boxes_refuses_each_position_just_outside_a_box(size_in, size_out, window):
    b, idx = boxes_and_indices(size_in, size_out, window, channels=1)
    extent, stride, padding = window
    strides = [math_prod(size_out[a + 1:]) for a in range(len(size_out))]
    refused = 0
    for q in np.ndindex(*size_in):
        corner = [qa * s - p for qa, s, p in zip(q, stride, padding)]
        for a in range(len(q)):
            for outside in (corner[a] - 1, corner[a] + extent[a]):
                pos = [max(c, 0) for c in corner]  # in the box on the other axes
                pos[a] = outside
                if not all(0 <= c < o for c, o in zip(pos, size_out)):
                    continue
                bad = idx.copy()
                bad[(0, 0, *q)] = sum(c * st for c, st in zip(pos, strides))
                assert not bool(_unpool_dense.in_boxes(jnp.asarray(bad), b, False)), (q, pos)
                refused += 1
    assert refused
    for value in (-1, math_prod(size_out)):
        bad = idx.copy()
        bad.reshape(-1)[0] = value
        assert not bool(_unpool_dense.in_boxes(jnp.asarray(bad), b, False))


@pytest.mark.parametrize("op", ["forward", "backward", "public backward, window inferred"])
def test_the_conditional_takes_the_dense_branch_for_pool_indices_only(monkeypatch, rng, op):
    # The general path returns a marker here: the results show which branch ran.
    marker = 7
    for name in ("_scatter", "_gather"):
        general = getattr(_unpool_xla, name)
        monkeypatch.setattr(_unpool_xla, name, lambda *a, general=general, **kw: jnp.full_like(
            general(*a, **kw), marker))
    # 3x3/s2/p1 with the window as the hint; 2x2/s2 through the public backward, which
    # takes no window: one is inferred from output sizes that are twice the input's.
    case = CASES[4] if op.startswith("public") else CASES[6]
    fmt, size = case[:2]
    x = rng.standard_normal(layout(fmt, size)).astype(np.float32)
    _, idx = pooled(case, x)
    v = distinct(idx.shape).view(np.int32)  # a bit pattern, compared as such
    g = distinct(x.shape, seed=1).view(np.int32)
    with xla_ops():
        forward, backward = unpool_fns(case)
        if op.startswith("public"):
            backward = jax.jit(lambda g, i: ju.max_unpool2d_backward(g, v, i, size))
        run = (lambda i: forward(v, i)) if op == "forward" else (lambda i: backward(g, i))
        dense, fallback = run(idx), run(moved(idx, fmt, size, "elsewhere in the plane"))
    want = (oracle.unpool_nd(v, idx, size) if op == "forward"
            else oracle.gather_nd(g, idx, len(size)))
    assert_bits_equal(dense, want)
    assert (np.asarray(fallback) == marker).all()


def test_unknown_windows_keep_the_scatter_without_a_conditional(rng):
    # Output sizes that are no multiple of the input's, and no kernel_size: no window.
    x = jnp.zeros((1, 2, 3, 3))
    text = jax.jit(lambda v, i: _unpool_xla.scatter_windowed(v, i, (7, 8), False)).lower(
        x, jnp.zeros(x.shape, jnp.int32)).as_text()
    assert "stablehlo.scatter" in text and "stablehlo.case" not in text
    # The window comes from _geometry.unpool_window (issue 44: one place infers it).
    assert _geometry.unpool_window((3, 3), (7, 8), None) is None
    window = _geometry.unpool_window((3, 3), (6, 9), None)
    assert _unpool_dense.boxes((3, 3), (6, 9), window, np.int32).extent == (2, 3)


def test_empty_operands(rng):
    with xla_ops():
        out = jax.jit(lambda v, i: ju.max_unpool2d(v, i, 2))(jnp.zeros((0, 3, 2, 2)),
                                                            jnp.zeros((0, 3, 2, 2), jnp.int32))
        x = jax.ShapeDtypeStruct((2, 0, 2, 2), jnp.float32)
        back = jax.jit(lambda g, i: ju.max_unpool2d_backward(g, x, i, (4, 4)))(
            jnp.zeros((2, 0, 4, 4)), jnp.zeros((2, 0, 2, 2), jnp.int32))
    assert out.shape == (0, 3, 4, 4) and back.shape == (2, 0, 2, 2)


def test_symbolic_batch_export_runs_the_dense_path(rng):
    # N symbolic, spatial sizes known: the dense ops and the conditional take symbolic N.
    (b,) = jax.export.symbolic_shape("b")

    def step(x):
        def loss(x):
            v, i = POOLS[2](x, 3, 2, 1)
            return jnp.sum(UNPOOLS[2](v, i, 3, 2, 1, output_size=x.shape[2:]) * x)
        return jax.grad(loss)(x)

    x = rng.standard_normal((3, 2, 9, 8)).astype(np.float32)
    with xla_ops():
        exported = jax.export.export(jax.jit(step), platforms=("cpu",))(
            jax.ShapeDtypeStruct((b, 2, 9, 8), jnp.float32))
        got = exported.call(x)
    text = exported.mlir_module()
    assert "custom_call @jax_unpool" not in text and "stablehlo.case" in text
    assert_bits_equal(got, jax.jit(step)(x))  # the native kernels


# ------------------------------------------------------------------ transformations

def test_grad_jvp_and_nested_vmap_under_jit_equal_the_native_path(rng):
    case = CASES[12]  # 3-D, channels-last, 3x3x3/s2/p1, ceil_mode
    fmt, size, kernel, stride, padding, ceil = case
    x = rng.standard_normal(layout(fmt, size)).astype(np.float32)
    pool, unpool = POOLS[3], UNPOOLS[3]

    def loss(x):
        v, i = pool(x, kernel, stride, padding, 1, ceil, data_format=fmt)
        y = unpool(jnp.tanh(v), i, kernel, stride, padding, output_size=size, data_format=fmt)
        return jnp.sum((y - x) ** 2)

    _, idx = pooled(case, x)
    v = rng.standard_normal(idx.shape).astype(np.float32)
    t = rng.standard_normal(idx.shape).astype(np.float32)
    batch = rng.standard_normal((2, *idx.shape)).astype(np.float32)

    def forward(v, i):
        return unpool(v, i, kernel, stride, padding, output_size=size, data_format=fmt)

    def run():
        grads = jax.jit(jax.value_and_grad(loss))(x)
        tangent = jax.jit(lambda v, t: jax.jvp(lambda v: forward(v, idx), (v,), (t,)))(v, t)
        # vmap over an extra batch of values (indices shared), then over N, under jit
        nested = jax.jit(jax.vmap(jax.vmap(forward), in_axes=(0, None)))(batch, idx)
        return [*grads, *tangent, nested]

    native = run()
    with xla_ops():
        dense = run()
    for got, want in zip(dense, native):
        assert_bits_equal(got, want)


def test_layers_train_step_equals_the_native_path(rng):
    nnx = pytest.importorskip("flax.nnx")
    from jax_unpool import nnx as ju_nnx

    pool, unpool = ju_nnx.MaxPool2d(3, 2, 1), ju_nnx.MaxUnpool2d(3, 2, 1)
    conv = nnx.Conv(3, 3, (3, 3), rngs=nnx.Rngs(0))
    x = rng.standard_normal((2, 9, 7, 3)).astype(np.float32)

    def loss(conv, x):
        v, i = pool(conv(x))
        return jnp.sum((unpool(v, i, output_size=x.shape[1:3]) - x) ** 2)

    def step():
        value, grads = nnx.jit(nnx.value_and_grad(loss))(conv, x)
        return [value, *jax.tree.leaves(grads)]

    native = step()
    with xla_ops():
        dense = step()
    for got, want in zip(dense, native):
        assert_bits_equal(got, want)


# ------------------------------------------------------------------ the pools' gradient

# Overlapping windows (stride < dilated extent): the gradient adds the cotangents of every
# window an input position wins, in dense ops; integer-valued cotangents make the sums
# exact, so PyTorch's result is matched bit for bit.
OVERLAPPING = [("NCW", (11,), 3, 1, 1, 1, False), ("NWC", (12,), 3, 2, 1, 2, True),
               ("NCHW", (7, 8), 3, 2, 1, 1, True), ("NHWC", (8, 7), (3, 2), 1, (1, 0), 1, False),
               ("CHW", (9, 9), 3, 2, 1, 2, False), ("NCDHW", (4, 5, 6), 3, 2, 1, 1, False),
               ("NDHWC", (5, 4, 4), 2, 1, 0, 1, True)]


@needs_torch
@pytest.mark.parametrize("input_kind", ["distinct", "ties"])
@pytest.mark.parametrize("case", OVERLAPPING, ids=lambda c: f"{c[0]}-{c[1]}-k{c[2]}-s{c[3]}-"
                         f"p{c[4]}-d{c[5]}")
def test_overlapping_windows_gradient_equals_torch(rng, case, input_kind):
    fmt, size, kernel, stride, padding, dilation, ceil = case
    k = len(size)
    shape = layout(fmt, size)
    x = (distinct(shape) if input_kind == "distinct"
         else rng.integers(0, 3, shape).astype(np.float32))

    def values(x):
        return POOLS[k](x, kernel, stride, padding, dilation, ceil, data_format=fmt)[0]

    out = values(x)
    ct = rng.integers(-8, 9, out.shape).astype(np.float32)
    tangent = rng.integers(-8, 9, x.shape).astype(np.float32)
    grad = jax.jit(lambda x, c: jax.vjp(values, x)[1](c)[0])(x, ct)
    jvp = jax.jit(lambda x, t: jax.jvp(values, (x,), (t,))[1])(x, tangent)
    xt = torch.from_numpy(channels_first(x, fmt)).requires_grad_(True)
    tout, tidx = getattr(F, f"max_pool{k}d")(xt, kernel, stride, padding, dilation, ceil, return_indices=True)
    tout.backward(torch.from_numpy(channels_first(ct, fmt)))
    assert_bits_equal(grad, as_format(xt.grad.numpy(), fmt))
    gathered = oracle.gather_nd(channels_first(tangent, fmt), tidx.numpy(), k)
    assert_bits_equal(jvp, as_format(gathered, fmt))


@pytest.mark.parametrize("k", [1, 2, 3])
def test_overlapping_windows_gradient_is_dense_for_tpu(k):
    x = jax.ShapeDtypeStruct((2, 3, *(7,) * k), jnp.float32)
    grad = jax.grad(lambda v: POOLS[k](v, 3, 2, 1)[0].sum())
    hlo = jax.jit(grad).trace(x).lower(lowering_platforms=("tpu",)).as_text(dialect="hlo")
    assert not re.search(r"\s(scatter|gather|conditional)\(", hlo)


def test_overlapping_windows_gradients_to_order_two(rng):
    from jax.test_util import check_grads
    x = rng.standard_normal((2, 3, 7, 6))
    with enable_x64(True):
        check_grads(lambda v: POOLS[2](v, 3, 2, 1)[0] ** 2, (jnp.asarray(x),), order=2,
                    modes=("fwd", "rev"))
