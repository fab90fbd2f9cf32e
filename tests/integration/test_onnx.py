"""ONNX export (jax_unpool.onnx, through jax2onnx) checked against ONNX Runtime.

First what ONNX Runtime's own MaxPool does (a one-node ONNX model, no converter): it
equals our pool, values and per-plane indices, for every geometry whose windows each hold
an input element, ties and -inf included; it differs where a window holds only padding
and where NaN is in a window -- hence the conversion's refusal and the docs' NaN caveat.

Then every op converted by jax2onnx and run by ONNX Runtime, over ranks 1-3, both
layouts, int32 and int64 indices, odd sizes, output_size, overlapping windows,
unbatched operands and a symbolic batch: values, indices and unpooled maps equal to JAX's
bit for bit. What ONNX cannot express is refused at conversion, naming the op and why.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager, nullcontext

import jax
import jax.numpy as jnp
import layer_oracle
import numpy as np
import numpy_oracle as oracle
import pytest

pytest.importorskip("jax2onnx", reason="ONNX export needs the onnx extra: pip install "
                    "'.[onnx]' (jax 0.8.1 or newer)")
ort = pytest.importorskip("onnxruntime", reason="pip install '.[onnx]'")
onnx = pytest.importorskip("onnx", reason="pip install '.[onnx]'")

# Two minutes of conversions on two cores, for an extra the everyday suite does not install:
# with the heavy suites (`pip install '.[test,onnx]' && pytest -m slow`, and CI's --all).
pytestmark = pytest.mark.slow

from jax2onnx import to_onnx
from onnx import TensorProto, helper

import jax_unpool as ju
import jax_unpool.onnx as juo
from jax_unpool import _geometry
from jax_unpool._compat import enable_x64

POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
UNPOOL = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}
FORMATS = {(1, False): "NCW", (1, True): "NWC", (2, False): "NCHW", (2, True): "NHWC",
           (3, False): "NCDHW", (3, True): "NDHWC"}
ODD = {1: (9,), 2: (7, 5), 3: (5, 3, 7)}  # odd sizes: a stride-2 pool drops the last row


@contextmanager
def x64_in_this_thread():
    """x64 on for a conversion with int64 indices. jax2onnx 0.17.1 sets the global
    jax_enable_x64 to its enable_double_precision while it converts, and afterwards to the
    value it read, which is this thread's (True): the global is put back here."""
    before = jax.config.jax_enable_x64
    try:
        with enable_x64(True):
            yield
    finally:
        jax.config.update("jax_enable_x64", before)


def session(model) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def run_onnx(model, *args) -> list[np.ndarray]:
    s = session(model)
    return s.run(None, {i.name: np.asarray(a) for i, a in zip(s.get_inputs(), args)})


def ops_in(model) -> list[str]:
    return [node.op_type for node in model.graph.node]


def test_import_jax_unpool_neither_imports_nor_needs_jax2onnx():
    assert layer_oracle.import_error_without("jax2onnx", "onnx") == (
        "jax_unpool.onnx needs jax2onnx, onnx and onnxruntime, an optional extra: pip "
        "install 'jax-unpool[onnx]' (jax2onnx needs jax 0.8.1 or newer)")


# --------------------------------------------------------------------------------------
# ONNX Runtime's MaxPool itself, against our pool (no converter involved)
# --------------------------------------------------------------------------------------

def ort_max_pool(x: np.ndarray, kernel, stride, padding, dilation, ceil_mode):
    """ONNX Runtime's MaxPool with Indices on channels-first x, as a one-node model."""
    k = x.ndim - 2
    elem = helper.np_dtype_to_tensor_dtype(x.dtype)
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[kernel] * k,
                            strides=[stride] * k, pads=[padding] * (2 * k),
                            dilations=[dilation] * k, ceil_mode=int(ceil_mode))
    graph = helper.make_graph([node], "max_pool", [helper.make_tensor_value_info("x", elem,
                                                                               None)],
                              [helper.make_tensor_value_info("y", elem, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    # IR version 10: ONNX Runtime 1.31 reads IR versions up to 13, onnx 1.23 writes 14.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    return session(model).run(None, {"x": x})


def geometries_1d():
    """Every 1-D pool PyTorch accepts for sizes 1..11, kernels 1..4, strides 1..4,
    padding up to kernel // 2, dilations 1..3, ceil_mode or not."""
    for size, kernel, stride, padding, dilation, ceil_mode in itertools.product(
            range(1, 12), range(1, 5), range(1, 5), range(3), range(1, 4), (False, True)):
        if padding <= kernel // 2 and size + 2 * padding - dilation * (kernel - 1) - 1 >= 0:
            yield size, kernel, stride, padding, dilation, ceil_mode


def test_onnxruntime_max_pool_is_pytorchs_unless_a_window_holds_only_padding():
    # PyTorch's loop (numpy_oracle.max_pool, which our pools equal: tests/ops/
    # test_pool_geometry.py) against ONNX Runtime's on every small 1-D geometry.
    rng = np.random.default_rng(0)
    same = differ = 0
    for size, *window in geometries_1d():
        kernel, stride, padding, dilation, ceil_mode = window
        g = _geometry.pool_geometry_of(
            (2, 3, size), kernel_size=(kernel,), stride=(stride,), padding=(padding,),
            dilation=(dilation,), ceil_mode=ceil_mode, channels_last=False,
            index_dtype=np.dtype("int32"))
        # ties (few distinct values) and -inf, which padding must never beat
        x = rng.integers(0, 3, (2, 3, size)).astype(np.float32)
        x[rng.random(x.shape) < 0.3] = -np.inf
        values, indices = oracle.max_pool(x, (kernel,), (stride,), (padding,), (dilation,),
                                          ceil_mode)
        ort_values, ort_indices = ort_max_pool(x, *window)
        assert ort_values.shape == values.shape, (size, window)  # ceil_mode's rule
        plane_offsets = np.arange(6).reshape(2, 3, 1) * size
        equal = (np.array_equal(ort_values, values)
                 and np.array_equal(ort_indices - plane_offsets, indices))
        assert equal == g.argmax_in_window(), (size, window)
        same += equal
        differ += not equal
    assert same > 1500 and differ > 10  # both kinds were seen


def test_onnxruntime_max_pool_fills_a_window_of_only_padding_with_the_lowest_finite():
    # kernel 2, dilation 2, padding 1 on one element: the window's taps are -1 and 1.
    x = np.ones((1, 1, 1), np.float32)
    ort_values, ort_indices = ort_max_pool(x, 2, 1, 1, 2, False)
    values, indices = POOL[1](x, 2, 1, 1, 2)
    assert (ort_values.item(), values.item()) == (np.finfo(np.float32).min, -np.inf)
    assert (ort_indices.item(), indices.item()) == (-1, 1)  # ONNX Runtime: c*x_step + -1


def test_onnxruntime_max_pool_skips_nan_where_ours_propagates_it():
    # Ours (PyTorch's): a NaN wins, the last one in the window. ONNX Runtime: `x > max`
    # is false for NaN, so NaN wins only as the first element of its window.
    x = np.array([[[1, np.nan, 2, 0, np.nan, 3, 5, 4]]], np.float32)
    ort_values, ort_indices = ort_max_pool(x, 4, 2, 0, 1, False)
    values, indices = POOL[1](x, 4, 2)
    np.testing.assert_array_equal(values, [[[np.nan, np.nan, np.nan]]])
    np.testing.assert_array_equal(indices, [[[1, 4, 4]]])
    np.testing.assert_array_equal(ort_values, [[[2, 3, np.nan]]])
    np.testing.assert_array_equal(ort_indices, [[[2, 5, 4]]])


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "uint8"])
def test_onnxruntime_max_pool_dtypes_are_ours(dtype):
    x = np.random.default_rng(1).permutation(72).reshape(1, 2, 6, 6).astype(dtype)
    with enable_x64(True):
        values, indices = POOL[2](x, 3, 2, 1, index_dtype=jnp.int64)
    ort_values, ort_indices = ort_max_pool(x, 3, 2, 1, 1, False)
    assert ort_values.dtype == values.dtype
    np.testing.assert_array_equal(ort_values, values)
    np.testing.assert_array_equal(ort_indices % 36, indices)


# --------------------------------------------------------------------------------------
# Every op converted by jax2onnx, run by ONNX Runtime
# --------------------------------------------------------------------------------------

def every_op(k: int, last: bool, index_dtype):
    """Pools of three geometries (plain; ceil_mode with padding; overlapping dilated
    windows) on odd sizes, and their unpools with output_size, and one without."""
    fmt = FORMATS[(k, last)]

    def fn(x):
        out = []
        for kernel, stride, padding, dilation, ceil_mode in ((2, 2, 0, 1, False),
                                                             (3, 2, 1, 1, True),
                                                             (2, 1, 0, 2, False)):
            values, indices = POOL[k](x, kernel, stride, padding, dilation, ceil_mode,
                                      data_format=fmt, index_dtype=index_dtype)
            spatial = _geometry.spatial_dims(x.shape, last, k)
            unpooled = UNPOOL[k](values, indices, output_size=spatial, data_format=fmt)
            out += [values, indices, unpooled]
        # the default output size: an even x
        even = x
        for a in range(1, k + 1) if last else range(2, k + 2):
            even = jax.lax.slice_in_dim(even, 0, x.shape[a] // 2 * 2, axis=a)
        values, indices = POOL[k](even, 2, data_format=fmt, index_dtype=index_dtype)
        out.append(UNPOOL[k](values, indices, 2, data_format=fmt))
        return out

    return fn


def layout_shape(k: int, last: bool, n, c=3) -> tuple:
    return (n, *ODD[k], c) if last else (n, c, *ODD[k])


CASES = [(k, last, dtype) for k in (1, 2, 3) for last in (False, True)
         for dtype in ("int32", "int64")]


@pytest.mark.parametrize("k,last,index_dtype", CASES,
                         ids=[f"{k}d-{FORMATS[(k, last)]}-{d}" for k, last, d in CASES])
def test_every_op_runs_in_onnxruntime_as_in_jax(k, last, index_dtype):
    fn = every_op(k, last, index_dtype)
    x64 = x64_in_this_thread() if index_dtype == "int64" else nullcontext()
    with x64:
        model = to_onnx(fn, [jax.ShapeDtypeStruct(layout_shape(k, last, "B"), jnp.float32)])
        for n in (1, 3):  # one artifact, a symbolic batch
            x = np.random.default_rng(n).normal(size=layout_shape(k, last, n)).astype(
                np.float32)
            x[..., 0] = x[..., 1]  # ties
            expected = fn(x)
            got = run_onnx(model, x)
            assert len(got) == len(expected)
            for i, (a, b) in enumerate(zip(got, expected)):
                assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype)
                np.testing.assert_array_equal(a, b, err_msg=f"output {i}")
        assert ops_in(model).count("MaxPool") == 4 and ops_in(model).count("MaxUnpool") == 4
        assert "Transpose" in ops_in(model) if last else "Transpose" not in ops_in(model)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_unbatched_operands(k):
    def fn(x):
        values, indices = POOL[k](x, 2, data_format=FORMATS[(k, True)][1:])
        return values, indices, UNPOOL[k](values, indices, output_size=ODD[k],
                                          data_format=FORMATS[(k, True)][1:])

    x = np.random.default_rng(k).normal(size=(*ODD[k], 4)).astype(np.float32)
    got = run_onnx(to_onnx(fn, [jax.ShapeDtypeStruct(x.shape, jnp.float32)]), x)
    for a, b in zip(got, fn(x), strict=True):
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "uint8"])
def test_pool_dtypes(dtype):
    def fn(x):
        return ju.max_pool2d_with_indices(x, 3, 2, 1, data_format="NHWC")

    x = np.random.default_rng(2).permutation(2 * 7 * 5 * 3).reshape(2, 7, 5, 3).astype(dtype)
    with enable_x64(dtype == "float64"):
        model = to_onnx(fn, [jax.ShapeDtypeStruct(x.shape, dtype)],
                        enable_double_precision=dtype == "float64")
        got, expected = run_onnx(model, x), fn(x)
    for a, b in zip(got, expected, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_unpool_of_indices_that_were_not_pooled():
    # Indices from elsewhere, duplicates included: the largest input position wins in
    # ONNX Runtime's MaxUnpool (a sequential loop, Unpool.cc) as in ours.
    def fn(x, indices):
        return ju.max_unpool2d(x, indices, output_size=(4, 5))

    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 3, 3, 3)).astype(np.float32)
    indices = rng.integers(0, 20, x.shape).astype(np.int32)
    model = to_onnx(fn, [jax.ShapeDtypeStruct(x.shape, jnp.float32),
                         jax.ShapeDtypeStruct(x.shape, jnp.int32)])
    np.testing.assert_array_equal(run_onnx(model, x, indices)[0], fn(x, indices))
    assert ops_in(model).count("MaxUnpool") == 1


def test_an_index_outside_its_plane_fails_in_onnxruntime_as_on_our_cpu():
    # Within the whole tensor (plane 0's index 25 is plane 1's position 5), yet refused.
    def fn(x, indices):
        return ju.max_unpool2d(x, indices, output_size=(4, 5))

    x = np.ones((1, 2, 2, 2), np.float32)
    indices = np.zeros(x.shape, np.int32)
    indices[0, 0, 1, 1] = 25
    model = to_onnx(fn, [jax.ShapeDtypeStruct(x.shape, jnp.float32),
                         jax.ShapeDtypeStruct(x.shape, jnp.int32)])
    with pytest.raises(Exception, match="Index value out of bounds. Got: -1"):
        run_onnx(model, x, indices)
    with pytest.raises(Exception, match="25"):
        fn(x, indices).block_until_ready()


# --------------------------------------------------------------------------------------
# What ONNX cannot express: refused at conversion
# --------------------------------------------------------------------------------------

def test_a_window_of_only_padding_is_refused():
    def fn(x):
        return ju.max_pool1d_with_indices(x, 2, 1, 1, 2)  # one element: taps at -1 and 1

    with pytest.raises(juo.UnsupportedOnnxExport,
                       match=r"max_pool1d_with_indices: a window of this pool holds only "
                             r"padding \(kernel_size=\(2,\), stride=\(1,\), padding=\(1,\), "
                             r"dilation=\(2,\), ceil_mode=False on spatial size \(1,\)\)"):
        to_onnx(fn, [jax.ShapeDtypeStruct((1, 1, 1), jnp.float32)])


@pytest.mark.parametrize("dtype,op", [("int32", "pool"), ("int16", "pool"), ("bool", "pool"),
                                      ("int8", "unpool"), ("int32", "unpool")])
def test_a_dtype_outside_the_onnx_operator_is_refused(dtype, op):
    def pool(x):
        return ju.max_pool2d_with_indices(x, 2)

    def unpool(x):
        return ju.max_unpool2d(x, jnp.zeros(x.shape, jnp.int32), 2)

    onnx_op = {"pool": "MaxPool", "unpool": "MaxUnpool"}[op]
    fn_name = {"pool": "max_pool2d_with_indices", "unpool": "max_unpool2d"}[op]
    with pytest.raises(juo.UnsupportedOnnxExport,
                       match=f"{fn_name}: ONNX's {onnx_op} takes .*, not {dtype}"):
        to_onnx({"pool": pool, "unpool": unpool}[op],
                [jax.ShapeDtypeStruct((1, 2, 4, 4), dtype)])


def test_an_unpool_into_fewer_positions_than_its_input_is_refused():
    def fn(x, indices):
        return ju.max_unpool2d(x, indices, output_size=(2, 3))

    spec = [jax.ShapeDtypeStruct((1, 1, 3, 3), jnp.float32),
            jax.ShapeDtypeStruct((1, 1, 3, 3), jnp.int32)]
    with pytest.raises(juo.UnsupportedOnnxExport, match=r"output_size \(2, 3\) holds fewer"):
        to_onnx(fn, spec)


def test_window_offset_indices_are_refused_by_the_pool():
    def pool(x):
        return ju.max_pool2d_with_indices(x, 2, index_format="window")

    with pytest.raises(juo.UnsupportedOnnxExport,
                       match="max_pool2d_with_indices: window-offset indices .* have no ONNX "
                             "equivalent; export the function with index_format='flat'"):
        to_onnx(pool, [jax.ShapeDtypeStruct((1, 2, 4, 4), jnp.float32)])


def test_window_offset_indices_are_refused_by_the_unpool_too():
    # the unpool alone, on offsets that arrive from outside the function
    g = ju.max_pool2d_with_indices(jnp.zeros((1, 2, 4, 4)), 2, index_format="window")[1]

    def unpool(values, offsets):
        return ju.max_unpool2d(values, jax.tree.unflatten(jax.tree.structure(g), [offsets]))

    with pytest.raises(juo.UnsupportedOnnxExport,
                       match="max_unpool2d: window-offset indices .* have no ONNX equivalent"):
        to_onnx(unpool, [jax.ShapeDtypeStruct((1, 2, 2, 2), jnp.float32),
                         jax.ShapeDtypeStruct((1, 2, 2, 2), jnp.uint8)])


def test_symbolic_spatial_sizes_are_refused():
    def fn(x, indices):
        return ju.max_unpool2d(x, indices, 2)

    spec = [jax.ShapeDtypeStruct((1, 2, "H", "W"), jnp.float32),
            jax.ShapeDtypeStruct((1, 2, "H", "W"), jnp.int32)]
    with pytest.raises(juo.UnsupportedOnnxExport, match="needs known spatial sizes"):
        to_onnx(fn, spec)


def test_a_gradient_has_no_plugin_and_jax2onnx_names_it():
    def fn(y, indices):
        return jax.grad(lambda y: ju.max_unpool2d(y, indices, 2).sum())(y)

    spec = [jax.ShapeDtypeStruct((1, 2, 3, 3), jnp.float32),
            jax.ShapeDtypeStruct((1, 2, 3, 3), jnp.int32)]
    with pytest.raises(NotImplementedError, match="max_unpool2d_backward"):
        to_onnx(fn, spec)


# --------------------------------------------------------------------------------------
# The layers page's SegNet (docs/layers.md, Flax NNX)
# --------------------------------------------------------------------------------------

def test_the_layers_pages_segnet_runs_in_onnxruntime_as_in_jax():
    nnx = pytest.importorskip("flax.nnx", reason="the SegNet is Flax NNX's: pip install flax")
    from jax_unpool.nnx import MaxPool2d, MaxUnpool2d

    class SegNet(nnx.Module):  # docs/layers.md's, with its insides as outputs too
        def __init__(self, rngs):
            self.enc = nnx.Conv(1, 16, (3, 3), padding="SAME", rngs=rngs)
            self.dec = nnx.Conv(16, 16, (3, 3), padding="SAME", rngs=rngs)
            self.head = nnx.Conv(16, 3, (1, 1), rngs=rngs)
            self.pool, self.unpool = MaxPool2d(2), MaxUnpool2d(2)

        def __call__(self, x):
            features = nnx.relu(self.enc(x))
            values, where = self.pool(features)
            unpooled = self.unpool(values, where, output_size=x.shape)
            # `* 1`: an output that a convolution also reads would come out channels-first
            # (jax2onnx's transpose folding; test_jax2onnx_folds_an_outputs_transpose_away)
            return (self.head(nnx.relu(self.dec(unpooled))), features * 1, values, where,
                    unpooled * 1)

    model = SegNet(nnx.Rngs(jax.random.key(0, impl="rbg")))
    model_onnx = to_onnx(lambda x: model(x), [jax.ShapeDtypeStruct(("B", 15, 15, 1),
                                                                   jnp.float32)])
    x = np.asarray(jax.random.normal(jax.random.key(1), (4, 15, 15, 1)))
    logits, features, values, where, unpooled = run_onnx(model_onnx, x)
    expected = model(x)
    # the convolutions: float rounding (ONNX Runtime sums in another order)
    np.testing.assert_allclose(features, expected[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(logits, expected[0], rtol=1e-4, atol=1e-5)
    # the pool and the unpool of ONNX Runtime's own features: bit for bit
    want_values, want_where = model.pool(features)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(where, want_where)
    np.testing.assert_array_equal(unpooled, model.unpool(want_values, want_where,
                                                         output_size=x.shape))
    assert {"MaxPool", "MaxUnpool"} <= set(ops_in(model_onnx))


def test_jax2onnx_folds_an_outputs_transpose_away():
    # jax2onnx 0.17.1, no op of ours: a channels-last tensor that is an output and also
    # the input of a convolution comes out channels-first, its declared shape too (the
    # transpose pair around the ReLU is folded without a look at the graph's outputs).
    # When this fails, jax2onnx has fixed it: drop the `* 1` above and docs/deploy.md's note.
    nnx = pytest.importorskip("flax.nnx", reason="pip install flax")

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.a = nnx.Conv(1, 4, (3, 3), padding="SAME", rngs=rngs)
            self.b = nnx.Conv(4, 2, (1, 1), rngs=rngs)

        def __call__(self, x):
            h = nnx.relu(self.a(x))
            return self.b(h), h

    net = Net(nnx.Rngs(0))
    x = np.random.default_rng(0).normal(size=(2, 5, 5, 1)).astype(np.float32)
    _, h = run_onnx(to_onnx(lambda x: net(x), [jax.ShapeDtypeStruct(x.shape, jnp.float32)]),
                    x)
    assert net(x)[1].shape == (2, 5, 5, 4) and h.shape == (2, 4, 5, 5)
