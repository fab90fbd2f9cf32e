"""jax.export with symbolic dims: one artifact serves every batch size, and for the unpool
every spatial size too.

Per spatial rank and layout, one artifact holds every op: the pool, the unpool forward
and backward, a vmapped unpool, value_and_grad through pool -> unpool and the gradient of
overlapping windows, on x of symbolic batch b; and the unpool forward, backward and
value_and_grad on y of symbolic (b, *spatial). Each is exported for ("cpu", "cuda"),
serialized, and run by ONE fresh process (symbolic_run.py) at two sizes; the results
equal the eager ones and the oracles (numpy loops; torch's pools where installed).

The size guards: proven for every size -> refused at export; left open by the symbols ->
refused by the call whose sizes break them (compiled only, nothing allocated); symbolic
spatial dims in the pools, and an output_size whose range rule the symbols leave open ->
refused at export.
"""

from __future__ import annotations

import json

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle
import pytest
from torch_oracle import needs_torch, torch_pool, torch_pool_grad

import jax_unpool as ju

SPATIAL = {1: "W", 2: "HW", 3: "DHW"}
POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
UNPOOL = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}
BACKWARD = {1: ju.max_unpool1d_backward, 2: ju.max_unpool2d_backward,
            3: ju.max_unpool3d_backward}
CASES = [(k, last) for k in (1, 2, 3) for last in (False, True)]
C, SIDE = 2, 4  # channels; the pooled x is SIDE along every spatial dim
# (batch, the y operands' spatial sizes) of each call: batch 1 and a larger one.
CALLS = [(1, (3, 2, 5)), (3, (1, 4, 2))]


def layout(k: int, last: bool, n, spatial) -> tuple:
    return (n, *spatial, C) if last else (n, C, *spatial)


def step(k: int, last: bool):
    fmt = f"N{SPATIAL[k]}C" if last else f"NC{SPATIAL[k]}"
    s = 1 if last else 2

    def unpool_of_pool(x):
        return UNPOOL[k](*POOL[k](x, 2, data_format=fmt), 2, data_format=fmt)

    def run(x, weight, y, idx, g):
        values, indices = POOL[k](x, 2, data_format=fmt)
        return {
            "values": values,
            "indices": indices,
            "unpooled": UNPOOL[k](values, indices, 2, data_format=fmt),
            "gathered": BACKWARD[k](weight, values, indices, x.shape[s:s + k],
                                    data_format=fmt),
            "vmapped": jax.vmap(lambda v, i: UNPOOL[k](v, i, 2, data_format=fmt[1:]))(
                values, indices),
            "loss_grad": jax.value_and_grad(lambda x: (unpool_of_pool(x) * weight).sum())(x),
            "overlapping_grad": jax.grad(
                lambda x: (POOL[k](x, 3, 1, data_format=fmt)[0] ** 2).sum())(x),
            "y_unpooled": UNPOOL[k](y, idx, 2, data_format=fmt),
            "y_gathered": BACKWARD[k](g, y, idx, g.shape[s:s + k], data_format=fmt),
            "y_loss_grad": jax.value_and_grad(
                lambda y: (UNPOOL[k](y, idx, 2, data_format=fmt) * g).sum())(y),
        }
    return run


def specs(k: int, last: bool):
    b, *spatial = jax.export.symbolic_shape("b, " + ", ".join("dhw"[3 - k:]))
    x = jax.ShapeDtypeStruct(layout(k, last, b, (SIDE,) * k), jnp.float32)
    y = jax.ShapeDtypeStruct(layout(k, last, b, spatial), jnp.float32)
    idx = jax.ShapeDtypeStruct(y.shape, jnp.int32)
    g = jax.ShapeDtypeStruct(layout(k, last, b, [2 * d for d in spatial]), jnp.float32)
    return x, x, y, idx, g


def operands(k: int, last: bool, n: int, sizes: tuple[int, ...], seed: int):
    """Integer-valued floats, x without ties: every sum is exact, every argmax unique."""
    rng = np.random.default_rng(seed)
    x_shape = layout(k, last, n, (SIDE,) * k)
    y_shape = layout(k, last, n, sizes[:k])
    x = rng.permutation(np.prod(x_shape)).reshape(x_shape).astype(np.float32)
    weight = rng.integers(-5, 5, x_shape).astype(np.float32)
    y = rng.integers(-9, 9, y_shape).astype(np.float32)
    idx = oracle.random_indices(rng, y_shape, np.prod(sizes[:k]) * 2**k)
    g = rng.integers(-5, 5, layout(k, last, n, [2 * d for d in sizes[:k]])).astype(np.float32)
    return x, weight, y, idx, g


def export(fn, *args, platforms=("cpu", "cuda")):
    return jax.export.export(jax.jit(fn), platforms=platforms,
                             disabled_checks=ju.export_safety_checks())(*args)


def symbolic(names: str, *shapes, dtypes=(jnp.float32, jnp.int32)):
    """ShapeDtypeStructs over the symbols `names`; each shape a function of them."""
    dims = jax.export.symbolic_shape(names)
    return [jax.ShapeDtypeStruct(shape(*dims), dtype) for shape, dtype in zip(shapes, dtypes)]


# Guards the symbols leave open, and a call that breaks each: (name, function, symbols,
# operand shapes as functions of them, the concrete shapes, the message expected).
BIG = (2**15, 2**15)
REFUSALS = [
    ("elements", lambda x, i: ju.max_unpool2d(x, i, output_size=BIG), "b",
     [lambda b: (b, 1, 1, 1)] * 2, [(2**30, 1, 1, 1)] * 2,
     ("max_unpool2d: the result must have at most 1152921504606846975 (2**60 - 1) elements, "
     "what XLA can hold, got (b, 1, 32768, 32768) = (1073741824, 1, 32768, 32768)")),
    ("plane", lambda x, i: ju.max_unpool2d(x, i, 2), "h, w",
     [lambda h, w: (1, 1, h, w)] * 2, [(1, 1, *BIG)] * 2,
     ("max_unpool2d: int32 indices cannot address an output plane of more than 2147483647 "
     "positions (use int64 indices), got (2*h, 2*w) = (65536, 65536)")),
    ("backward_plane", lambda g, i: ju.max_unpool2d_backward(
        g, jax.ShapeDtypeStruct(i.shape, g.dtype), i, g.shape[2:]), "h, w",
     [lambda h, w: (1, 1, h, w), lambda h, w: (1, 1, 1, 1)], [(1, 1, 2**16, 2**16), (1, 1, 1, 1)],
     ("max_unpool2d_backward: int32 indices cannot address an output plane of more than "
     "2147483647 positions (use int64 indices), got (h, w) = (65536, 65536)")),
]


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Every artifact exported, serialized and run in one fresh process: per case, the
    operands and results of each call; per refusal, the error."""
    folder = tmp_path_factory.mktemp("symbolic")
    manifest = {"calls": [], "refusals": []}
    saved = {}
    for k, last in CASES:
        name = f"step_{k}d_{'last' if last else 'first'}"
        (folder / f"{name}.bin").write_bytes(export(step(k, last), *specs(k, last)).serialize())
        for c, (n, sizes) in enumerate(CALLS):
            args = operands(k, last, n, sizes, seed=c)
            np.savez(folder / f"{name}.{c}.npz", **{f"arg{i}": a for i, a in enumerate(args)})
            manifest["calls"].append([f"{name}.bin", f"{name}.{c}.npz", f"{name}.{c}.out.npz"])
            saved[k, last, c] = args
    for name, fn, names, shapes, concrete, _ in REFUSALS:
        dtypes = [jnp.float32, jnp.int32][:len(shapes)]
        (folder / f"{name}.bin").write_bytes(
            export(fn, *symbolic(names, *shapes), platforms=("cpu",)).serialize())
        manifest["refusals"].append([f"{name}.bin",
                                     [[s, np.dtype(d).name] for s, d in zip(concrete, dtypes)],
                                     f"{name}.txt"])
    (folder / "manifest.json").write_text(json.dumps(manifest))
    fresh_process.run_ok("symbolic_run.py", str(folder))

    def results(k, last, c):
        out = np.load(folder / f"step_{k}d_{'last' if last else 'first'}.{c}.out.npz")
        return jax.tree.unflatten(jax.tree.structure(jax.eval_shape(
            step(k, last), *saved[k, last, c])), [out[f"out{i}"] for i in range(len(out))])

    return {"operands": saved, "results": results,
            "refusals": {name: (folder / f"{name}.txt").read_text() for name, *_ in REFUSALS}}


@pytest.mark.parametrize("k, last", CASES)
def test_the_artifact_gives_the_eager_results_at_every_size(ran, k, last):
    for c in range(len(CALLS)):
        args = ran["operands"][k, last, c]
        got, want = ran["results"](k, last, c), jax.jit(step(k, last))(*args)
        jax.tree.map(np.testing.assert_array_equal, got, want)
        assert got["values"].shape[0] == CALLS[c][0]


@pytest.mark.parametrize("k, last", CASES)
def test_the_artifact_gives_the_oracles_results(ran, k, last):
    for c, (_, sizes) in enumerate(CALLS):
        x, weight, y, idx, g = ran["operands"][k, last, c]
        r = ran["results"](k, last, c)
        values, indices = oracle.max_pool(x, (2,) * k, (2,) * k, (0,) * k, (1,) * k, False,
                                          last)
        np.testing.assert_array_equal(r["values"], values)
        np.testing.assert_array_equal(r["indices"], indices)
        unpooled = oracle.unpool_nd(values, indices, (SIDE,) * k, last)
        np.testing.assert_array_equal(r["unpooled"], unpooled)
        np.testing.assert_array_equal(r["vmapped"], unpooled)
        gathered = oracle.gather_nd(weight, indices, k, last)
        np.testing.assert_array_equal(r["gathered"], gathered)
        loss, grad = r["loss_grad"]
        np.testing.assert_array_equal(loss, (unpooled * weight).sum())
        np.testing.assert_array_equal(grad, oracle.unpool_nd(gathered, indices, (SIDE,) * k,
                                                             last))
        # x holds distinct integers: the sum of 2 * values at each argmax is exact
        over_values, over_indices = oracle.max_pool(x, (3,) * k, (1,) * k, (0,) * k, (1,) * k,
                                                    False, last)
        np.testing.assert_array_equal(r["overlapping_grad"],
                                      oracle.scatter_add_nd(2 * over_values, over_indices,
                                                            (SIDE,) * k, last))
        y_unpooled = oracle.unpool_nd(y, idx, tuple(2 * d for d in sizes[:k]), last)
        np.testing.assert_array_equal(r["y_unpooled"], y_unpooled)
        y_gathered = oracle.gather_nd(g, idx, k, last)
        np.testing.assert_array_equal(r["y_gathered"], y_gathered)
        y_loss, y_grad = r["y_loss_grad"]
        np.testing.assert_array_equal(y_loss, (y_unpooled * g).sum())
        np.testing.assert_array_equal(y_grad, y_gathered)


@needs_torch
@pytest.mark.parametrize("k, last", CASES)
def test_the_artifacts_pools_give_torchs_results(ran, k, last):
    for c in range(len(CALLS)):
        x = ran["operands"][k, last, c][0]
        r = ran["results"](k, last, c)
        values, indices = torch_pool(k, x, 2, channels_last=last)
        np.testing.assert_array_equal(r["values"], values)
        np.testing.assert_array_equal(r["indices"], indices)
        over_values, _ = torch_pool(k, x, 3, 1, channels_last=last)
        np.testing.assert_array_equal(r["overlapping_grad"],
                                      torch_pool_grad(k, x, 2 * over_values, 3, 1,
                                                      channels_last=last))


@pytest.mark.parametrize("name", [r[0] for r in REFUSALS])
def test_a_call_that_breaks_an_open_size_guard_is_refused(ran, name):
    expected = next(r[-1] for r in REFUSALS if r[0] == name)
    assert expected in ran["refusals"][name]


def test_a_guard_proven_for_every_batch_refuses_the_export():
    # 2**31 channels of 2**30 positions: more than 2**60 - 1 elements for every b >= 1.
    x, i = symbolic("b", lambda b: (b, 2**31, 1, 1), lambda b: (b, 2**31, 1, 1))
    with pytest.raises(ValueError, match=r"max_unpool2d: output_size \(32768, 32768\) gives a "
                       r"result of shape \(b, 2147483648, 32768, 32768\) = "
                       r"2305843009213693952\*b elements, more than the 1152921504606846975"):
        export(lambda x, i: ju.max_unpool2d(x, i, output_size=BIG), x, i)


@pytest.mark.parametrize("k, last", [(1, True), (2, False), (3, True)])
def test_pools_refuse_symbolic_spatial_dims_naming_them(k, last):
    fmt = f"N{SPATIAL[k]}C" if last else f"NC{SPATIAL[k]}"
    names = "dhw"[3 - k:]
    (x,) = symbolic(", ".join(names), lambda *d: layout(k, last, 2, d))
    with pytest.raises(ValueError, match=rf"max_pool{k}d_with_indices: the spatial dims "
                       rf"\({', '.join(SPATIAL[k])}\) must be known at trace time, got "
                       rf"\({', '.join(SPATIAL[k])}\)=\({', '.join(names)}\), symbolic"):
        export(lambda x: POOL[k](x, 2, data_format=fmt), x)


def test_an_output_size_the_symbols_leave_open_is_refused_at_export():
    x, i = symbolic("h, w", lambda h, w: (1, 1, h, w), lambda h, w: (1, 1, h, w))
    with pytest.raises(ValueError, match=r"max_unpool2d: output_size \(w, w\) must lie within "
                       r"stride of the default \(2\*h, 2\*w\) for every value of the symbolic "
                       r"dims"):
        export(lambda x, i: ju.max_unpool2d(x, i, 2, output_size=(x.shape[3],) * 2), x, i)


@pytest.mark.parametrize("fn, message", [
    (lambda x, i: ju.max_unpool2d(x, i, 2, padding=2),
     (r"max_unpool2d: the default output size \(2\*h - 4, 2\*w - 4\) must be non-negative for "
      r"every value of the symbolic dims, which their bounds do not decide; state it")),
    (lambda x, i: ju.max_unpool2d(x, i, output_size=(x.shape[2] - 3, x.shape[3])),
     (r"max_unpool2d: output_size \(h - 3, w\) must be non-negative for every value of the "
      r"symbolic dims")),
])
def test_an_output_size_whose_sign_the_symbols_leave_open_is_refused_at_export(fn, message):
    # A negative dim would fail jax's shape refinement at call time with MLIR's "invalid
    # tensor dimension size", before any guard of ours could run.
    x, i = symbolic("h, w", lambda h, w: (1, 1, h, w), lambda h, w: (1, 1, h, w))
    with pytest.raises(ValueError, match=message):
        export(fn, x, i)


def test_a_constraint_that_decides_the_sign_lets_the_export_through():
    h, w = jax.export.symbolic_shape("h, w", constraints=("h >= 2", "w >= 2"))
    x = jax.ShapeDtypeStruct((1, 1, h, w), np.float32)
    i = jax.ShapeDtypeStruct((1, 1, h, w), np.int32)
    exp = export(lambda x, i: ju.max_unpool2d(x, i, 2, padding=2), x, i, platforms=("cpu",))
    xs = np.arange(6, dtype=np.float32).reshape(1, 1, 2, 3)
    out = exp.call(xs, np.zeros((1, 1, 2, 3), np.int32))
    assert out.shape == (1, 1, 0, 2)


def test_the_jnp_lowering_refuses_planes_jax_cannot_size():
    # (2*h - 1)*(2*w - 1) = 4*h*w - 2*w - 2*h + 1: jax cannot prove it >= 0, which its
    # reshapes into planes need. The CPU kernel takes it (test_a_call_that_breaks...).
    x, i = symbolic("h, w", lambda h, w: (1, 1, h, w), lambda h, w: (1, 1, h, w))
    with pytest.raises(ValueError, match=r"max_unpool: the jnp lowering .* flattens planes of "
                       r"size \(2\*h - 1, 2\*w - 1\), whose product 4\*h\*w - 2\*w - 2\*h \+ 1 "
                       r"jax cannot prove non-negative"):
        export(lambda x, i: ju.max_unpool2d(x, i, 3, 2, 1), x, i, platforms=("rocm",))


@pytest.mark.parametrize("k, last", [(1, False), (2, True), (3, False), (3, True)])
def test_a_symbolic_batch_reaches_aclnn_in_the_host_emulation(fake_cann_dir, k, last):
    """The aclnn lowerings (here on the emulated CANN) with a symbolic batch: 1-D and NDHWC
    through the 2-D ops' view, 2-D and NCDHW directly; symbolic spatial dims take the jnp
    reference. Every call equals the numpy loops."""
    fmt = f"N{SPATIAL[k]}C" if last else f"NC{SPATIAL[k]}"
    s = 1 if last else 2

    def run(y, idx, g):
        return (UNPOOL[k](y, idx, 2, data_format=fmt),
                BACKWARD[k](g, y, idx, g.shape[s:s + k], data_format=fmt))

    _, _, y, idx, g = specs(k, last)
    batch_only = jax.ShapeDtypeStruct(layout(k, last, y.shape[0], (2,) * k), jnp.float32)
    cases = [((batch_only, batch_only.update(dtype=jnp.int32),
               batch_only.update(shape=layout(k, last, y.shape[0], (4,) * k))), True),
             ((y, idx, g), False)]
    with ju.npu.cpu_emulation(fake_cann_dir):
        for args, calls_aclnn in cases:
            exported = export(run, *args, platforms=("cpu",))
            assert ("custom_call @jax_unpool_aclnn_" in exported.mlir_module()) == calls_aclnn
            restored = jax.export.deserialize(exported.serialize())
            for c, (n, sizes) in enumerate(CALLS):
                sizes = (2,) * k if calls_aclnn else sizes[:k]
                *_, y_, idx_, g_ = operands(k, last, n, sizes, seed=c)
                up, back = restored.call(y_, idx_, g_)
                np.testing.assert_array_equal(
                    up, oracle.unpool_nd(y_, idx_, tuple(2 * d for d in sizes), last))
                np.testing.assert_array_equal(back, oracle.gather_nd(g_, idx_, k, last))
