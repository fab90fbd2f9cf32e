"""max_unpool1d / max_unpool3d and their backwards: values against numpy loops, the jnp
reference and PyTorch, every dtype, both index dtypes, every layout; autodiff, vmap, jit
(no transposes in channels-last programs), errors and export."""

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
from out_of_range import POOL_HINT

import jax_unpool as ju
from jax_unpool._compat import enable_x64

pytestmark = pytest.mark.slow

torch = pytest.importorskip("torch")
F = torch.nn.functional

# Spatial sizes (input, output) and the data formats of each rank.
SIZES = {1: ((5,), (9,)), 3: ((2, 3, 2), (3, 4, 5))}
FORMATS = {1: ("NCW", "NWC", "CW", "WC"), 3: ("NCDHW", "NDHWC", "CDHW", "DHWC")}
FWD = {1: ju.max_unpool1d, 3: ju.max_unpool3d}
BWD = {1: ju.max_unpool1d_backward, 3: ju.max_unpool3d_backward}
REF_FWD = {1: ju.reference.max_unpool1d, 3: ju.reference.max_unpool3d}
REF_BWD = {1: ju.reference.max_unpool1d_backward, 3: ju.reference.max_unpool3d_backward}
TORCH_FWD = {1: F.max_unpool1d, 3: F.max_unpool3d}
TORCH_POOL = {1: F.max_pool1d, 3: F.max_pool3d}


def layout_shape(fmt: str, spatial: tuple[int, ...], n: int = 2, c: int = 3) -> tuple:
    """The shape of data in format `fmt` (e.g. NDHWC) with these spatial sizes."""
    dims = {"N": n, "C": c}
    dims.update(zip("DHW"[3 - len(spatial):], spatial))
    return tuple(dims[d] for d in fmt)


def is_last(fmt: str) -> bool:
    return fmt.endswith("C")


def rank_case(fmt: str) -> tuple[int, tuple, tuple[int, ...]]:
    """Format `fmt`'s spatial rank k, its input shape and its output's spatial size."""
    k = len(fmt) - 1 - ("N" in fmt)
    size_in, size_out = SIZES[k]
    return k, layout_shape(fmt, size_in), size_out


# The values tests' cases: every value dtype, index dtype and 1-D or 3-D format.
EVERY_DTYPE_AND_FORMAT = pytest.mark.parametrize(
    "dtype, index_dtype, fmt",
    list(itertools.product(VALUE_DTYPES, INDEX_DTYPES, [f for k in (1, 3) for f in FORMATS[k]])))


@EVERY_DTYPE_AND_FORMAT
def test_forward_equals_numpy_loops_and_reference(rng, dtype, index_dtype, fmt):
    k, shape, size_out = rank_case(fmt)
    x = random_values(rng, shape, dtype)
    idx = oracle.random_indices(rng, shape, int(np.prod(size_out)), index_dtype)  # duplicates
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = jax.jit(lambda x, i: FWD[k](x, i, output_size=size_out, data_format=fmt))(x, idx)
        # jitted: run op by op, each of the reference's ops compiles on its own (3x the time)
        ref = jax.jit(lambda x, i: REF_FWD[k](x, i, output_size=size_out, data_format=fmt))(
            x, idx)
    expected = oracle.unpool_nd(x, idx, size_out, is_last(fmt))
    assert out.shape == layout_shape(fmt, size_out)
    assert_bits_equal(out, expected)
    assert_bits_equal(ref, expected)


@EVERY_DTYPE_AND_FORMAT
def test_backward_equals_numpy_loops_and_reference(rng, dtype, index_dtype, fmt):
    k, shape, size_out = rank_case(fmt)
    g = random_values(rng, layout_shape(fmt, size_out), dtype)
    idx = oracle.random_indices(rng, shape, int(np.prod(size_out)), index_dtype)
    x = jax.ShapeDtypeStruct(shape, g.dtype)
    with enable_x64(needs_x64(dtype, index_dtype)):
        out = jax.jit(lambda g, i: BWD[k](g, x, i, size_out, data_format=fmt))(g, idx)
        ref = jax.jit(lambda g, i: REF_BWD[k](g, x, i, size_out, data_format=fmt))(g, idx)
    expected = oracle.gather_nd(g, idx, k, is_last(fmt))
    assert_bits_equal(out, expected)
    assert_bits_equal(ref, expected)


def test_duplicates_resolve_to_the_largest_input_position_in_1d_and_3d():
    x = jnp.array([[[10.0, 20.0, 30.0, 40.0]]])
    idx = jnp.array([[[2, 0, 2, 0]]], jnp.int32)
    np.testing.assert_array_equal(ju.max_unpool1d(x, idx, output_size=(3,)).ravel(),
                                  [40.0, 0.0, 30.0])
    v = jnp.arange(1.0, 9.0).reshape(1, 1, 2, 2, 2)
    i3 = jnp.array([7, 0, 7, 0, 1, 1, 1, 1], jnp.int32).reshape(1, 1, 2, 2, 2)
    out = ju.max_unpool3d(v, i3, output_size=(2, 2, 2)).ravel()
    np.testing.assert_array_equal(out, [4.0, 8.0, 0, 0, 0, 0, 0, 3.0])
    np.testing.assert_array_equal(ju.reference.max_unpool3d(v, i3, output_size=(2, 2, 2)).ravel(),
                                  out)


# (kernel, stride, padding, output_size) per rank, as torch takes them; None: the default
TORCH_GRID = {
    1: [(2, None, 0, None), (3, 2, 1, (11,)), (4, 3, 2, (11,)), (1, 1, 0, None),
        (3, 3, 0, (11,))],
    3: [(2, None, 0, (5, 6, 7)), (3, 2, 1, (5, 6, 7)), ((1, 2, 3), (1, 2, 2), (0, 1, 1), None),
        ((2, 3, 2), (2, 3, 1), 0, (5, 6, 7))],
}


@pytest.mark.parametrize("channels_last", [False, True], ids=["first", "last"])
@pytest.mark.parametrize("k,case", [(k, c) for k in (1, 3) for c in TORCH_GRID[k]])
def test_forward_and_gradient_match_pytorch(rng, k, case, channels_last):
    kernel, stride, padding, size = case
    spatial = (11,) if k == 1 else (5, 6, 7)
    x = torch.from_numpy(rng.standard_normal((2, 3, *spatial)).astype(np.float32))
    pooled, idx = TORCH_POOL[k](x, kernel, stride, padding, return_indices=True)
    pooled.requires_grad_(True)
    expected = TORCH_FWD[k](pooled, idx, kernel, stride, padding, output_size=size)
    ct = torch.from_numpy(rng.standard_normal(expected.shape).astype(np.float32))
    (expected * ct).sum().backward()

    move = (lambda a: np.moveaxis(a, 1, -1)) if channels_last else (lambda a: a)
    fmt = ("NWC" if k == 1 else "NDHWC") if channels_last else ("NCW" if k == 1 else "NCDHW")
    y = jnp.asarray(move(pooled.detach().numpy()))
    i = jnp.asarray(move(idx.numpy()).astype(np.int32))
    f = lambda y: FWD[k](y, i, kernel, stride, padding, output_size=size, data_format=fmt)
    out, vjp = jax.vjp(f, y)
    np.testing.assert_array_equal(out, move(expected.detach().numpy()))
    np.testing.assert_array_equal(vjp(jnp.asarray(move(ct.numpy())))[0],
                                  move(pooled.grad.numpy()))


def _unique_indices(rng, k, fmt):
    """Values and unique indices (each input position hits its own output position)."""
    size_in, size_out = SIZES[k]
    shape = layout_shape(fmt, size_in)
    n_in, n_out = int(np.prod(size_in)), int(np.prod(size_out))
    perm = np.stack([rng.permutation(n_out)[:n_in] for _ in range(6)])  # 2 x 3 planes
    planes = perm.reshape(2, 3, *size_in)
    idx = np.moveaxis(planes, 1, -1) if is_last(fmt) else planes
    return rng.standard_normal(shape), idx.astype(np.int32), size_out


@pytest.mark.parametrize("fmt", ["NCW", "NWC", "NCDHW", "NDHWC"])
def test_gradients_to_order_two(rng, fmt):
    k = len(fmt) - 2
    x, idx, size = _unique_indices(rng, k, fmt)
    g = rng.standard_normal(layout_shape(fmt, size))
    with enable_x64(True):
        check_grads(lambda x: FWD[k](x, idx, output_size=size, data_format=fmt),
                    (jnp.asarray(x),), order=2, modes=("fwd", "rev"))
        check_grads(lambda g: BWD[k](g, x, idx, size, data_format=fmt),
                    (jnp.asarray(g),), order=2, modes=("fwd", "rev"))


@pytest.mark.parametrize("fmt", ["NCW", "NDHWC"])
def test_vmap_is_one_primitive_and_equals_the_loop(rng, fmt):
    k, shape, size_out = rank_case(fmt)
    x = rng.standard_normal((4, *shape)).astype(np.float32)
    idx = oracle.random_indices(rng, (4, *shape), int(np.prod(size_out)))
    f = jax.vmap(lambda x, i: FWD[k](x, i, output_size=size_out, data_format=fmt))
    jaxpr = str(jax.make_jaxpr(f)(x, idx))
    assert jaxpr.count(f"max_unpool{k}d[") == 1 and "while" not in jaxpr
    expected = np.stack([oracle.unpool_nd(x[b], idx[b], size_out, is_last(fmt))
                         for b in range(4)])
    np.testing.assert_array_equal(f(x, idx), expected)


@pytest.mark.parametrize("fmt", ["NWC", "WC", "NDHWC", "DHWC"])
def test_channels_last_program_has_no_transpose_or_copy(fmt):
    k, shape, size_out = rank_case(fmt)
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    idx = jax.ShapeDtypeStruct(x.shape, jnp.int32)

    def step(x, i):
        y, vjp = jax.vjp(lambda x: FWD[k](x, i, output_size=size_out, data_format=fmt), x)
        return y, vjp(y)[0]

    hlo = jax.jit(step).lower(x, idx).compile().as_text()
    assert not re.search(r"= \S+ (transpose|copy)\(", hlo), hlo
    targets = set(re.findall(r'custom_call_target="([^"]+)"', hlo))
    assert targets == {"jax_unpool_max_unpool_v2", "jax_unpool_max_unpool_backward_v2"}


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
def test_errors_name_the_function_and_argument(fn, args, message):
    shape, kwargs = args
    with pytest.raises((ValueError, TypeError), match=message):
        fn(jnp.zeros(shape), jnp.zeros(shape, jnp.int32), **kwargs)


def test_backward_errors_name_the_function():
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


@pytest.mark.parametrize("k", [1, 2, 3])
def test_a_jaxpr_names_the_rank_of_its_primitives(k):
    size = (4,) * k
    x = jnp.ones((1, 1, *(2,) * k))
    idx = jnp.zeros(x.shape, jnp.int32)
    unpool = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}[k]
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda x: unpool(x, idx, output_size=size).sum()))(x))
    assert f"max_unpool{k}d[" in jaxpr and f"max_unpool{k}d_backward[" in jaxpr
    assert all(f"max_unpool{r}d" not in jaxpr for r in (1, 2, 3) if r != k)


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
