"""max_unpool{1,2,3}d and their backwards: values against independent numpy loops, the jnp
reference and PyTorch, every dtype of the contract, both index dtypes, every layout,
batched or not; duplicates, zero sizes, NaN payloads, the seed document's example;
higher-order gradients, vmap and jit (no transposes in channels-last programs), the
primitives in the jaxpr, export.

The 2-D cases run in the everyday suite, the 1-D and 3-D sweeps under `pytest -m slow`
(tests/ops/test_every_rank_and_layout.py and the golden file, tests/ops/test_golden_torch.py,
cover every rank daily). Errors: test_errors.py."""

from __future__ import annotations

import itertools
import re

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from dtypes import INDEX_DTYPES, VALUE_DTYPES, assert_bits_equal, needs_x64, random_values
from jax.test_util import check_grads
from torch_oracle import F, needs_torch, torch

import jax_unpool as ju
from jax_unpool._compat import enable_x64

SLOW = pytest.mark.slow
# Spatial sizes (input, output) per rank.
SIZES = {1: ((5,), (9,)), 2: ((4, 5), (6, 7)), 3: ((2, 3, 2), (3, 4, 5))}
FWD = {k: getattr(ju, f"max_unpool{k}d") for k in (1, 2, 3)}
BWD = {k: getattr(ju, f"max_unpool{k}d_backward") for k in (1, 2, 3)}
REF_FWD = {k: getattr(ju.reference, f"max_unpool{k}d") for k in (1, 2, 3)}
REF_BWD = {k: getattr(ju.reference, f"max_unpool{k}d_backward") for k in (1, 2, 3)}
# (rank, data_format, batched): the 2-D functions take NCHW/NHWC for rank-3 data too.
LAYOUTS = ([(2, fmt, batched) for batched in (False, True) for fmt in ("NCHW", "NHWC")]
           + [(k, fmt, "N" in fmt) for k, fmts in ((1, ("NCW", "NWC", "CW", "WC")),
                                                   (3, ("NCDHW", "NDHWC", "CDHW", "DHWC")))
              for fmt in fmts])


def layout_shape(fmt: str, spatial: tuple[int, ...], batched: bool = True, n: int = 2,
                 c: int = 3) -> tuple:
    """The shape of data in format `fmt` (e.g. NDHWC) with these spatial sizes."""
    dims = {"N": n, "C": c}
    dims.update(zip("DHW"[3 - len(spatial):], spatial))
    return tuple(dims[d] for d in fmt if batched or d != "N")


def is_last(fmt: str) -> bool:
    return fmt.endswith("C")


# The values tests' cases: every value dtype, index dtype and layout of every rank.
EVERY_DTYPE_AND_LAYOUT = pytest.mark.parametrize(
    "dtype, index_dtype, k, fmt, batched",
    [pytest.param(dtype, index_dtype, k, fmt, batched, marks=[] if k == 2 else [SLOW],
                  id=f"{dtype}-{index_dtype}-{fmt}{'' if batched else '-unbatched'}")
     for dtype, index_dtype, (k, fmt, batched) in itertools.product(
         VALUE_DTYPES, INDEX_DTYPES, LAYOUTS)])


@EVERY_DTYPE_AND_LAYOUT
def test_forward_equals_numpy_loops_and_reference(rng, dtype, index_dtype, k, fmt, batched):
    size_in, size_out = SIZES[k]
    shape = layout_shape(fmt, size_in, batched)
    x = random_values(rng, shape, dtype)
    idx = oracle.random_indices(rng, shape, int(np.prod(size_out)), index_dtype)  # duplicates
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = jax.jit(lambda x, i: FWD[k](x, i, output_size=size_out, data_format=fmt))(x, idx)
        # jitted: run op by op, each of the reference's ops compiles on its own (3x the time)
        ref = jax.jit(lambda x, i: REF_FWD[k](x, i, output_size=size_out, data_format=fmt))(
            x, idx)
        assert out.dtype == jnp.dtype(dtype)
    expected = oracle.unpool_nd(x, idx, size_out, is_last(fmt))
    assert out.shape == layout_shape(fmt, size_out, batched)
    assert_bits_equal(out, expected)
    assert_bits_equal(ref, expected)


@EVERY_DTYPE_AND_LAYOUT
def test_backward_equals_numpy_loops_and_reference(rng, dtype, index_dtype, k, fmt, batched):
    size_in, size_out = SIZES[k]
    shape = layout_shape(fmt, size_in, batched)
    g = random_values(rng, layout_shape(fmt, size_out, batched), dtype)
    idx = oracle.random_indices(rng, shape, int(np.prod(size_out)), index_dtype)
    x = jax.ShapeDtypeStruct(shape, g.dtype)
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = jax.jit(lambda g, i: BWD[k](g, x, i, size_out, data_format=fmt))(g, idx)
        ref = jax.jit(lambda g, i: REF_BWD[k](g, x, i, size_out, data_format=fmt))(g, idx)
    expected = oracle.gather_nd(g, idx, k, is_last(fmt))
    assert_bits_equal(out, expected)
    assert_bits_equal(ref, expected)


def test_seed_example_of_aclnn_max_unpool2d_backward():
    # ../shared/seeds/aclnnMaxUnpool2dBackward.md: gradOutput 0..8 (1,3,3,1), self (1,3,2,2),
    # indices [0,1,2,1,2,0,1,1,1,0,0,0], outputSize (3,1).
    grad = jnp.arange(9, dtype=jnp.float32).reshape(1, 3, 3, 1)
    x = jnp.ones((1, 3, 2, 2), jnp.float32)
    idx = jnp.array([0, 1, 2, 1, 2, 0, 1, 1, 1, 0, 0, 0], jnp.int32).reshape(1, 3, 2, 2)
    out = ju.max_unpool2d_backward(grad, x, idx, (3, 1))
    np.testing.assert_array_equal(out.ravel(), [0, 1, 2, 1, 5, 3, 4, 4, 7, 6, 6, 6])


# (rank, x, indices, output_size, expected): duplicated indices in a plane.
DUPLICATES = [
    pytest.param(1, [[[10.0, 20.0, 30.0, 40.0]]], [[[2, 0, 2, 0]]], (3,), [40.0, 0.0, 30.0],
                 marks=SLOW, id="1d"),
    pytest.param(2, [[[[10.0, 20.0], [30.0, 40.0]]]], [[[[3, 0], [3, 0]]]], (2, 2),
                 [40.0, 0.0, 0.0, 30.0], id="2d"),  # positions 0,2 -> 3 and 1,3 -> 0
    pytest.param(3, np.arange(1.0, 9.0).reshape(1, 1, 2, 2, 2),
                 np.array([7, 0, 7, 0, 1, 1, 1, 1]).reshape(1, 1, 2, 2, 2), (2, 2, 2),
                 [4.0, 8.0, 0, 0, 0, 0, 0, 3.0], marks=SLOW, id="3d"),
]


@pytest.mark.parametrize("k,x,idx,size,expected", DUPLICATES)
def test_duplicates_resolve_to_the_largest_input_position(k, x, idx, size, expected):
    x, idx = jnp.asarray(x, jnp.float32), jnp.asarray(idx, jnp.int32)
    out = FWD[k](x, idx, output_size=size)
    np.testing.assert_array_equal(out.ravel(), expected)
    np.testing.assert_array_equal(REF_FWD[k](x, idx, output_size=size), out)


@pytest.mark.parametrize("shape", [(0, 3, 2, 2), (2, 0, 2, 2), (2, 3, 0, 2), (2, 3, 2, 0),
                                   (0, 2, 2)])
def test_zero_size_forward_gives_zeros(shape):
    x = jnp.ones(shape, jnp.float32)
    idx = jnp.zeros(shape, jnp.int32)
    out = jax.jit(lambda x, i: ju.max_unpool2d(x, i, output_size=(3, 4)))(x, idx)
    assert out.shape == (*shape[:-2], 3, 4)
    np.testing.assert_array_equal(out, np.zeros(out.shape, np.float32))


@pytest.mark.parametrize("shape", [(0, 3, 2, 2), (2, 0, 2, 2), (2, 3, 0, 2), (2, 3, 2, 0)])
def test_zero_size_backward(shape):
    g = jnp.ones((*shape[:2], 3, 4), jnp.float32)
    idx = jnp.zeros(shape, jnp.int32)
    out = ju.max_unpool2d_backward(g, jax.ShapeDtypeStruct(shape, jnp.float32), idx, (3, 4))
    assert out.shape == shape and out.size == 0


PAYLOADS = {  # NaNs with payloads, -0.0 and a signalling NaN, per width
    "float32": np.array([0x7FC12345, 0xFFA00001, 0x80000000, 0x7F800001], np.uint32),
    "bfloat16": np.array([0x7FFF, 0xFFC1, 0x8000, 0x7F81], np.uint16),
    "float16": np.array([0x7E01, 0xFE3F, 0x8000, 0x7C01], np.uint16),
}


@pytest.mark.parametrize("impl", ["jax_unpool", "reference"])
@pytest.mark.parametrize("dtype", list(PAYLOADS))
@pytest.mark.parametrize("op", ["forward", "backward"])
def test_nan_payloads_and_negative_zero_move_bit_exactly(op, dtype, impl):
    payloads = PAYLOADS[dtype]
    vals = payloads.view(jnp.dtype(dtype)).reshape(1, 1, 2, 2)
    idx = np.array([[[[3, 2], [1, 0]]]], np.int32)
    mod = ju if impl == "jax_unpool" else ju.reference
    if op == "forward":
        f = jax.jit(lambda v: mod.max_unpool2d(v, idx, output_size=(2, 2)))
    else:
        f = jax.jit(lambda v: mod.max_unpool2d_backward(v, v, idx, (2, 2)))
    out = np.asarray(f(vals))
    np.testing.assert_array_equal(out.view(payloads.dtype).ravel(), payloads[::-1])


# ------------------------------------------------------------------ against PyTorch


def batched_format(k: int, channels_last: bool) -> str:
    spatial = {1: "W", 2: "HW", 3: "DHW"}[k]
    return f"N{spatial}C" if channels_last else f"NC{spatial}"


# (rank, kernel, stride, padding, output_size) as torch takes them; None: the default,
# "full": x's full shape.
TORCH_CASES = (
    [pytest.param(2, *case, False, id=f"2d-{i}") for i, case in enumerate(
        [(2, None, 0, "full"), (3, 2, 1, "full"), ((2, 3), (2, 3), 0, "full")])]
    + [pytest.param(k, *case, last, marks=SLOW, id=f"{k}d-{i}-{'last' if last else 'first'}")
       for last in (False, True) for k, cases in (
           (1, [(2, None, 0, None), (3, 2, 1, (11,)), (4, 3, 2, (11,)), (1, 1, 0, None),
                (3, 3, 0, (11,))]),
           (3, [(2, None, 0, (5, 6, 7)), (3, 2, 1, (5, 6, 7)),
                ((1, 2, 3), (1, 2, 2), (0, 1, 1), None), ((2, 3, 2), (2, 3, 1), 0, (5, 6, 7))]))
       for i, case in enumerate(cases)])


@needs_torch
@pytest.mark.parametrize("k,kernel,stride,padding,size,channels_last", TORCH_CASES)
def test_forward_and_gradient_match_pytorch(rng, k, kernel, stride, padding, size,
                                            channels_last):
    spatial = {1: (11,), 2: (9, 10), 3: (5, 6, 7)}[k]
    x = torch.from_numpy(rng.standard_normal((2, 3, *spatial)).astype(np.float32))
    size = tuple(x.shape) if size == "full" else size
    pooled, idx = getattr(F, f"max_pool{k}d")(x, kernel, stride, padding, return_indices=True)
    pooled.requires_grad_(True)
    expected = getattr(F, f"max_unpool{k}d")(pooled, idx, kernel, stride, padding,
                                             output_size=size)
    ct = torch.from_numpy(rng.standard_normal(expected.shape).astype(np.float32))
    (expected * ct).sum().backward()

    move = (lambda a: np.moveaxis(a, 1, -1)) if channels_last else (lambda a: a)
    fmt = batched_format(k, channels_last)
    y = jnp.asarray(move(pooled.detach().numpy()))
    i = jnp.asarray(move(idx.numpy()).astype(np.int32))
    f = lambda y: FWD[k](y, i, kernel, stride, padding, output_size=size, data_format=fmt)
    out, vjp = jax.vjp(f, y)
    np.testing.assert_array_equal(out, move(expected.detach().numpy()))
    np.testing.assert_array_equal(vjp(jnp.asarray(move(ct.numpy())))[0],
                                  move(pooled.grad.numpy()))


# ------------------------------------------------------------------ derivatives, transforms


def _unique_indices(rng, k, fmt):
    """Values and unique indices (each input position hits its own output position)."""
    size_in, size_out = SIZES[k]
    shape = layout_shape(fmt, size_in)
    n_in, n_out = int(np.prod(size_in)), int(np.prod(size_out))
    perm = np.stack([rng.permutation(n_out)[:n_in] for _ in range(6)])  # 2 x 3 planes
    planes = perm.reshape(2, 3, *size_in)
    idx = np.moveaxis(planes, 1, -1) if is_last(fmt) else planes
    return rng.standard_normal(shape), idx.astype(np.int32), size_out


@SLOW
@pytest.mark.parametrize("fmt", ["NCW", "NWC", "NCDHW", "NDHWC"])
def test_gradients_to_order_two(rng, fmt):
    # 2-D: tests/ops/test_autodiff.py
    k = len(fmt) - 2
    x, idx, size = _unique_indices(rng, k, fmt)
    g = rng.standard_normal(layout_shape(fmt, size))
    with enable_x64(True):
        check_grads(lambda x: FWD[k](x, idx, output_size=size, data_format=fmt),
                    (jnp.asarray(x),), order=2, modes=("fwd", "rev"))
        check_grads(lambda g: BWD[k](g, x, idx, size, data_format=fmt),
                    (jnp.asarray(g),), order=2, modes=("fwd", "rev"))


@SLOW
@pytest.mark.parametrize("fmt", ["NCW", "NDHWC"])
def test_vmap_is_one_primitive_and_equals_the_loop(rng, fmt):
    k = len(fmt) - 2
    size_in, size_out = SIZES[k]
    shape = layout_shape(fmt, size_in)
    x = rng.standard_normal((4, *shape)).astype(np.float32)
    idx = oracle.random_indices(rng, (4, *shape), int(np.prod(size_out)))
    f = jax.vmap(lambda x, i: FWD[k](x, i, output_size=size_out, data_format=fmt))
    jaxpr = str(jax.make_jaxpr(f)(x, idx))
    assert jaxpr.count(f"max_unpool{k}d[") == 1 and "while" not in jaxpr
    expected = np.stack([oracle.unpool_nd(x[b], idx[b], size_out, is_last(fmt))
                         for b in range(4)])
    np.testing.assert_array_equal(f(x, idx), expected)


@SLOW
@pytest.mark.parametrize("fmt", ["NWC", "WC", "NDHWC", "DHWC"])
def test_channels_last_program_has_no_transpose_or_copy(fmt):
    # 2-D: tests/ops/test_channels_last.py
    k = len(fmt) - 1 - ("N" in fmt)
    size_in, size_out = SIZES[k]
    x = jax.ShapeDtypeStruct(layout_shape(fmt, size_in, "N" in fmt), jnp.float32)
    idx = jax.ShapeDtypeStruct(x.shape, jnp.int32)

    def step(x, i):
        y, vjp = jax.vjp(lambda x: FWD[k](x, i, output_size=size_out, data_format=fmt), x)
        return y, vjp(y)[0]

    hlo = jax.jit(step).lower(x, idx).compile().as_text()
    assert not re.search(r"= \S+ (transpose|copy)\(", hlo), hlo
    targets = set(re.findall(r'custom_call_target="([^"]+)"', hlo))
    assert targets == {"jax_unpool_max_unpool_v2", "jax_unpool_max_unpool_backward_v2"}


# ------------------------------------------------------------------ the primitives, export


@SLOW
def test_one_primitive_of_the_data_rank_in_the_jaxpr():
    # No view: the primitive gets the 5-D operands; the forward's rank is its
    # output_size's length, the backward's its spatial_rank.
    x = jax.ShapeDtypeStruct((2, 3, 2, 2, 2), jnp.float32)
    idx = jax.ShapeDtypeStruct(x.shape, jnp.int32)
    jaxpr = jax.make_jaxpr(jax.grad(lambda x, i: ju.max_unpool3d(x, i, 2).sum()))(x, idx)
    eqns = [str(e) for e in jaxpr.eqns]
    assert not any("reshape" in e for e in eqns), eqns
    fwd = [e for e in jaxpr.eqns if e.primitive is ju.max_unpool3d_p]
    bwd = [e for e in jaxpr.eqns if e.primitive is ju.max_unpool3d_backward_p]
    assert [e.params["output_size"] for e in fwd] == [(4, 4, 4)]
    assert [e.params["spatial_rank"] for e in bwd] == [3]
    assert fwd[0].outvars[0].aval.shape == (2, 3, 4, 4, 4)


@SLOW
@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_jaxpr_names_the_rank_of_its_primitives(k):
    size = (4,) * k
    x = jnp.ones((1, 1, *(2,) * k))
    idx = jnp.zeros(x.shape, jnp.int32)
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda x: FWD[k](x, idx, output_size=size).sum()))(x))
    assert f"max_unpool{k}d[" in jaxpr and f"max_unpool{k}d_backward[" in jaxpr
    assert all(f"max_unpool{r}d" not in jaxpr for r in (1, 2, 3) if r != k)


@SLOW
def test_the_2d_primitives_still_take_binds_of_any_rank(rng):
    # Binds written when one pair served every rank keep working, with their rules.
    x = rng.standard_normal((1, 2, 2, 2, 2)).astype(np.float32)
    idx = oracle.random_indices(rng, x.shape, 64)
    out = ju.max_unpool2d_p.bind(jnp.asarray(x), jnp.asarray(idx), output_size=(4, 4, 4),
                                 channels_last=False)
    np.testing.assert_array_equal(out, oracle.unpool_nd(x, idx, (4, 4, 4), False))
    g = rng.standard_normal(out.shape).astype(np.float32)
    back = ju.max_unpool2d_backward_p.bind(jnp.asarray(g), jnp.asarray(idx),
                                           channels_last=False, spatial_rank=3)
    np.testing.assert_array_equal(back, oracle.gather_nd(g, idx, 3, False))


@SLOW
def test_export_round_trip_of_3d_in_a_fresh_process(tmp_path, rng):
    x = rng.standard_normal((2, 2, 2, 2, 3)).astype(np.float32)
    idx = oracle.random_indices(rng, x.shape, 4 * 4 * 6)
    f = jax.jit(lambda x, i: ju.max_unpool3d(x, i, (2, 2, 2)))
    exported = jax.export.export(f, disabled_checks=ju.export_safety_checks())(x, idx)
    (tmp_path / "f.bin").write_bytes(exported.serialize())
    np.savez(tmp_path / "in.npz", arg0=x, arg1=idx)
    fresh_process.run_ok("exported_run.py", str(tmp_path / "f.bin"), str(tmp_path / "in.npz"),
                         str(tmp_path / "out.npz"))
    np.testing.assert_array_equal(np.load(tmp_path / "out.npz")["out0"],
                                  oracle.unpool_nd(x, idx, (4, 4, 6)))
