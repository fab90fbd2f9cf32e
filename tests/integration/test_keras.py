"""The Keras 3 layers (jax_unpool.keras) on the JAX backend, in this process, and on the
torch backend, in a fresh one (tests/helpers/keras_backend_run.py): values, indices and
unpooled maps equal PyTorch's loop (numpy_oracle) in the "torch" index layout and
TensorFlow's tf.nn.max_pool_with_argmax (tf_argmax_oracle, its CPU kernel in numpy) in
the "tf" layout, and the two backends equal each other bit for bit; get_config and .keras
files round-trip; a SegNet trains with model.fit and exports to ONNX (with the onnx extra);
an unsupported backend, dtype or argument is a clear error.
"""

from __future__ import annotations

import itertools
import json
import os

os.environ.setdefault("KERAS_BACKEND", "jax")  # before keras is imported

import fresh_process
import keras_backend_run
import layer_oracle
import numpy as np
import numpy_oracle as oracle
import pytest
import tf_argmax_oracle

keras = pytest.importorskip("keras", reason="the Keras layers need the keras extra: "
                            "pip install '.[keras]'")
if keras.backend.backend() != "jax":
    pytest.skip(f"this file runs Keras on the JAX backend (KERAS_BACKEND is "
                f"{keras.backend.backend()!r})", allow_module_level=True)

import jax_unpool.keras as juk

POOL = {k: getattr(juk, f"MaxPoolingWithArgmax{k}D") for k in (1, 2, 3)}
UNPOOL = {k: getattr(juk, f"MaxUnpooling{k}D") for k in (1, 2, 3)}
ODD = {1: (9,), 2: (7, 5), 3: (5, 3, 7)}
C = 3


def images(k: int, last: bool, n: int = 2, seed: int = 0, dtype="float32") -> np.ndarray:
    """Few distinct values (ties) at odd sizes."""
    shape = (n, *ODD[k], C) if last else (n, C, *ODD[k])
    return np.random.default_rng(seed).integers(-4, 5, shape).astype(dtype)


def nhwc(a: np.ndarray, last: bool) -> np.ndarray:
    return a if last else np.moveaxis(a, 1, -1)


# --------------------------------------------------------------------------------------
# The JAX backend against the oracles
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("k,last", [(k, last) for k in (1, 2, 3) for last in (True, False)])
def test_valid_pooling_is_pytorchs_in_the_torch_layout(k, last):
    x = images(k, last)
    values, indices = POOL[k](3, strides=2, data_format="channels_last" if last
                              else "channels_first")(x)
    want_values, want_indices = oracle.max_pool(x, (3,) * k, (2,) * k, (0,) * k, (1,) * k,
                                                False, channels_last=last)
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)
    assert indices.dtype == np.int32


@pytest.mark.parametrize("k,padding,pool,strides", [
    (k, padding, pool, strides) for k in (1, 2, 3) for padding in ("valid", "same")
    for pool, strides in ((2, 2), (3, 2), (2, 1), (3, 3))])
def test_the_tf_layout_is_tensorflows_max_pool_with_argmax(k, padding, pool, strides):
    x = images(k, True, seed=k)
    for batch in (False, True):
        values, indices = POOL[k](pool, strides, padding, index_layout="tf",
                                  include_batch_in_index=batch)(x)
        want_values, want_indices = tf_argmax_oracle.max_pool_with_argmax(
            x, (pool,) * k, (strides,) * k, padding.upper(), include_batch_in_index=batch)
        np.testing.assert_array_equal(values, want_values)
        np.testing.assert_array_equal(indices, want_indices)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_same_padding_in_the_torch_layout_is_the_tf_layout_divided_by_c(k):
    # "same" with an odd total padding (2, stride 1): one more after than before
    x = images(k, False, seed=3)
    values, indices = POOL[k](2, 1, "same", data_format="channels_first")(x)
    want_values, want_indices = tf_argmax_oracle.max_pool_with_argmax(
        nhwc(x, False), (2,) * k, (1,) * k, "SAME")
    np.testing.assert_array_equal(nhwc(np.asarray(values), False), want_values)
    np.testing.assert_array_equal(nhwc(np.asarray(indices), False), want_indices // C)


def test_nan_wins_as_in_pytorch_where_tensorflow_keeps_a_number():
    x = np.array([[1, np.nan, 3, 2]], np.float32).reshape(1, 4, 1)
    values, indices = POOL[1](4, index_layout="tf")(x)
    tf_values, tf_indices = tf_argmax_oracle.max_pool_with_argmax(x, (4,), (4,), "VALID")
    assert np.isnan(values.item()) and indices.item() == 1
    assert (tf_values.item(), tf_indices.item()) == (3.0, 2)


@pytest.mark.parametrize("k,last,padding,layout", [
    (k, last, padding, layout) for k in (1, 2, 3) for last in (True, False)
    for padding, layout in (("valid", "torch"), ("same", "tf"))])
def test_unpooling_puts_the_maxima_back(k, last, padding, layout):
    fmt = "channels_last" if last else "channels_first"
    x = images(k, last, seed=5)
    values, indices = POOL[k](2, padding=padding, data_format=fmt, index_layout=layout)(x)
    out = UNPOOL[k](2, padding=padding, data_format=fmt, index_layout=layout,
                    output_size=ODD[k])(values, indices)
    plane = np.asarray(POOL[k](2, padding=padding, data_format=fmt)(x)[1])  # torch layout
    np.testing.assert_array_equal(out, oracle.unpool_nd(values, plane, ODD[k], last))
    # the default output size, "valid" (n - 1) * s + p, "same" n * s: the input's where
    # the input's sizes are even
    even = x[(slice(None), *(slice(0, n // 2 * 2) for n in x.shape[1:-1]))] if last else \
        x[(slice(None), slice(None), *(slice(0, n // 2 * 2) for n in x.shape[2:]))]
    values, indices = POOL[k](2, padding=padding, data_format=fmt, index_layout=layout)(even)
    default = UNPOOL[k](2, padding=padding, data_format=fmt, index_layout=layout)(
        values, indices)
    assert default.shape == even.shape
    np.testing.assert_array_equal(
        default, UNPOOL[k](output_size=even.shape, data_format=fmt, index_layout=layout)(
            values, indices))


def test_unpooling_hand_made_indices_largest_input_position_wins():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(2, 4, 3, 3)).astype(np.float32)
    indices = rng.integers(0, 6, x.shape).astype(np.int32)  # many duplicates
    out = UNPOOL[2](output_size=(2, 3), data_format="channels_first")(x, indices)
    np.testing.assert_array_equal(out, oracle.unpool_nd(x, indices, (2, 3), False))


def test_the_call_output_size_takes_a_full_shape():
    x = images(2, True)
    values, indices = POOL[2]()(x)
    out = UNPOOL[2]()(values, indices, output_size=x.shape)
    assert out.shape == x.shape


# --------------------------------------------------------------------------------------
# The torch backend equals the JAX backend
# --------------------------------------------------------------------------------------

def backend_cases() -> tuple[list[dict], dict[str, np.ndarray]]:
    cases, inputs = [], {}
    rng = np.random.default_rng(11)
    for k, last, (padding, pool, strides), layout in itertools.product(
            (1, 2, 3), (True, False), (("valid", 2, 2), ("same", 3, 2), ("same", 2, 1)),
            ("torch", "tf")):
        fmt = "channels_last" if last else "channels_first"
        name = f"x{len(inputs)}"
        x = images(k, last, seed=len(inputs))
        x[tuple(i // 2 for i in x.shape)] = np.nan  # NaN wins on both
        inputs[name] = x
        config = {"pool_size": pool, "strides": strides, "padding": padding,
                  "data_format": fmt, "index_layout": layout}
        cases.append({"rank": k, "input": name,
                      "pool": {**config, "include_batch_in_index": layout == "tf" and last},
                      "unpool": config, "output_size": list(ODD[k])})
    for dtype in ("int8", "float16", "float64"):  # other dtypes, and hand-made indices
        name = f"x{len(inputs)}"
        inputs[name] = rng.integers(-9, 9, (2, 6, 4, C)).astype(dtype)
        inputs[name + "i"] = rng.integers(0, 12, (2, 3, 2, C)).astype(np.int64)
        cases.append({"rank": 2, "input": name, "indices": name + "i",
                      "pool": {"pool_size": 2}, "unpool": {"pool_size": 2}})
    return cases, inputs


def test_the_torch_backend_gives_the_jax_backends_results(tmp_path):
    pytest.importorskip("torch", reason="the torch backend needs torch: pip install "
                        "'.[torch]'")
    cases, inputs = backend_cases()
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    np.savez(tmp_path / "in.npz", **inputs)
    proc = fresh_process.run("keras_backend_run.py", str(tmp_path / "cases.json"),
                             str(tmp_path / "in.npz"), str(tmp_path / "out.npz"),
                             env={"KERAS_BACKEND": "torch"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    torch_results = np.load(tmp_path / "out.npz")
    jax_results = keras_backend_run.run(cases, inputs)
    assert len(jax_results) == 3 * len(cases) == len(torch_results.files)
    for name, want in jax_results.items():
        got = torch_results[name]
        assert got.dtype == want.dtype, (name, got.dtype, want.dtype)
        np.testing.assert_array_equal(got, want, err_msg=name)


# --------------------------------------------------------------------------------------
# Configs and .keras files
# --------------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [1, 2, 3])
def test_get_config_round_trips(k):
    pool = POOL[k]((3,) * k, 2, "same", "channels_first", index_layout="tf",
                   include_batch_in_index=True, index_dtype="int64", name="p")
    unpool = UNPOOL[k](3, (2,) * k, "same", "channels_first", output_size=ODD[k],
                       index_layout="tf", name="u")
    for layer in (pool, unpool):
        config = layer.get_config()
        assert type(layer).from_config(config).get_config() == config
    assert pool.get_config()["strides"] == (2,) * k
    assert unpool.get_config()["output_size"] == ODD[k]


def segnet(size=(16, 16), channels=1, classes=3):
    """The layers page's SegNet, in Keras: conv, pool, unpool, conv, 1x1 conv."""
    inputs = keras.Input((*size, channels))
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    values, where = juk.MaxPoolingWithArgmax2D(2)(h)
    h = juk.MaxUnpooling2D(2, output_size=size)(values, where)
    h = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(h)
    return keras.Model(inputs, keras.layers.Conv2D(classes, 1)(h))


def test_a_keras_file_round_trips(tmp_path):
    model = segnet((15, 15))
    x = np.random.default_rng(0).normal(size=(2, 15, 15, 1)).astype(np.float32)
    model.save(tmp_path / "segnet.keras")
    loaded = keras.saving.load_model(tmp_path / "segnet.keras")
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert [type(layer).__name__ for layer in loaded.layers][2:4] == [
        "MaxPoolingWithArgmax2D", "MaxUnpooling2D"]
    assert loaded.layers[3].get_config() == model.layers[3].get_config()


def test_a_segnet_trains_with_fit():
    keras.utils.set_random_seed(0)
    model = segnet()
    x = np.random.default_rng(1).normal(size=(32, 16, 16, 1)).astype(np.float32)
    y = (x[..., 0] > 0).astype(np.int32) + (x[..., 0] > 1)  # three classes per pixel
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=8, epochs=4, verbose=0).history["loss"]
    assert history[-1] < 0.7 * history[0], history


def test_a_segnet_exports_to_onnx_and_runs_in_onnxruntime(tmp_path):
    pytest.importorskip("jax2onnx", reason="pip install '.[onnx]'")
    ort = pytest.importorskip("onnxruntime", reason="pip install '.[onnx]'")
    import jax_unpool.onnx  # noqa: F401 -- the plugins

    model = segnet((15, 15))
    model(np.zeros((1, 15, 15, 1), np.float32))  # Keras exports models that were called
    model.export(tmp_path / "segnet.onnx", format="onnx", verbose=False)
    session = ort.InferenceSession(str(tmp_path / "segnet.onnx"),
                                   providers=["CPUExecutionProvider"])
    for n in (1, 3):  # a symbolic batch
        x = np.random.default_rng(n).normal(size=(n, 15, 15, 1)).astype(np.float32)
        got, = session.run(None, {session.get_inputs()[0].name: x})
        np.testing.assert_allclose(got, model.predict(x, verbose=0), rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------

def test_an_unsupported_backend_is_refused_when_a_layer_is_made():
    proc = fresh_process.run_code(
        "import os; os.environ['KERAS_BACKEND'] = 'numpy'\n"
        "import jax_unpool.keras as juk\n"
        "try:\n"
        "    juk.MaxUnpooling2D(2)\n"
        "except NotImplementedError as error:\n"
        "    print(error)\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == (
        "MaxUnpooling2D: jax_unpool.keras runs on Keras's jax, torch and tensorflow "
        "backends, not 'numpy' (set KERAS_BACKEND before importing keras)")


def test_unsupported_dtypes_are_refused():
    with pytest.raises(TypeError, match=r"MaxPoolingWithArgmax2D: inputs must have a real "
                                        r"dtype \(.*\), got complex64"):
        POOL[2]()(np.ones((1, 4, 4, 1), np.complex64))
    with pytest.raises(TypeError, match=r"MaxUnpooling2D: indices must have an integer dtype "
                                        r"\(int32, int64\), got float32"):
        UNPOOL[2]()(np.ones((1, 2, 2, 1), np.float32), np.zeros((1, 2, 2, 1), np.float32))


@pytest.mark.parametrize("make,message", [
    (lambda: POOL[2](padding="full"),
     "MaxPoolingWithArgmax2D: padding must be one of 'valid', 'same', got 'full'"),
    (lambda: POOL[2](index_layout="numpy"), "index_layout must be one of 'torch', 'tf'"),
    (lambda: POOL[2](include_batch_in_index=True),
     "include_batch_in_index=True needs index_layout='tf'"),
    (lambda: POOL[3]((2, 2)),
     r"MaxPoolingWithArgmax3D: pool_size must be a positive int or 3 positive ints, got \(2,"),
    (lambda: UNPOOL[1](data_format="NCW"),
     "data_format must be one of 'channels_last', 'channels_first', got 'NCW'"),
    (lambda: POOL[1](index_dtype="int16"), "index_dtype must be one of 'int32', 'int64'"),
])
def test_bad_arguments_are_refused_naming_the_layer(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_a_wrong_rank_is_refused():
    with pytest.raises(ValueError, match=r"MaxPoolingWithArgmax2D: inputs must have rank 4 "
                                         r"\(a batch of 2-D inputs with channels\), got shape "
                                         r"\(4, 4, 1\)"):
        POOL[2]()(np.ones((4, 4, 1), np.float32))


def test_the_tf_layout_decodes_with_or_without_the_batch():
    x = images(2, True, n=3)
    out = []
    for batch in (False, True):
        values, indices = POOL[2](index_layout="tf", include_batch_in_index=batch)(x)
        out.append(UNPOOL[2](index_layout="tf", output_size=(7, 5))(values, indices))
    np.testing.assert_array_equal(out[0], out[1])


def test_import_jax_unpool_neither_imports_nor_needs_keras():
    assert layer_oracle.import_error_without("keras", "keras") == (
        "jax_unpool.keras needs Keras 3, an optional extra: pip install 'jax-unpool[keras]'")
