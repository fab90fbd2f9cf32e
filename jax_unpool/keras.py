"""Keras 3 layers: max pooling that returns its argmax, and max-unpooling.

``MaxPoolingWithArgmax1D/2D/3D`` and ``MaxUnpooling1D/2D/3D`` take Keras's pooling
arguments -- ``pool_size``, ``strides`` (default: ``pool_size``), ``padding="valid"`` or
``"same"`` (TensorFlow's: the windows cover ``ceil(size / stride)`` positions, the padding
split with the smaller half first), ``data_format`` (default
``keras.config.image_data_format()``, ``"channels_last"`` unless configured) -- and work
on batched inputs, ``(N, *spatial, C)`` or ``(N, C, *spatial)``.

On the JAX backend they call jax-unpool's primitives (native kernels, ``jax.grad``,
``jax.jit``, ONNX export through ``jax_unpool.onnx``); on the torch and tensorflow
backends the same computation in ``keras.ops`` (``jax_unpool._keras_ops``), with the same
results bit for bit. Other backends are refused when a layer is made.

Which element wins is PyTorch's rule on every backend: the first maximum of a window in
row-major order, and NaN beats every number (the last NaN of a window). Indices come in
one of two layouts, ``index_layout``:

- ``"torch"`` (default): flat positions inside one input plane, ``y * W + x`` (per
  channel), as ``jax_unpool.max_pool2d_with_indices`` and PyTorch's pools return them;
- ``"tf"``: TensorFlow's ``tf.nn.max_pool_with_argmax`` layout, ``(y * W + x) * C + c``,
  and with ``include_batch_in_index=True`` ``((b * H + y) * W + x) * C + c`` (for any rank:
  the spatial position flattened, times C, plus c). TensorFlow Addons' ``MaxUnpooling2D``
  reads this layout, so a model ported from it keeps its indices. TensorFlow's CPU kernel
  picks the same elements for input without NaN; with NaN it keeps a window's first
  number or NaN (``output < input``, maxpooling_op.cc), where these layers pick NaN.

Unpooling takes ``(values, indices)`` and writes each value at its index in zeros of the
pooled input's size: ``output_size`` (spatial sizes, or a full shape), else ``(size - 1) *
stride + pool_size`` for ``"valid"`` and ``size * stride`` for ``"same"`` (TensorFlow
Addons' rule); with odd sizes pass ``output_size``. Among duplicated indices the largest
input position wins; an index outside its plane is dropped (on CPU under JAX, the native
kernel refuses it with an error instead).

``get_config`` returns every argument and the layers are registered with Keras
(``package="jax_unpool"``), so a model saved as ``.keras`` loads again once this module
is imported. Needs the extra ``keras`` (Keras 3).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

try:
    import keras
except ImportError as error:  # pragma: no cover - exercised where keras is missing
    raise ImportError("jax_unpool.keras needs Keras 3, an optional extra: pip install "
                      "'jax-unpool[keras]'") from error

from keras import ops

from jax_unpool import _keras_ops

__all__ = ["MaxPoolingWithArgmax1D", "MaxPoolingWithArgmax2D", "MaxPoolingWithArgmax3D",
           "MaxUnpooling1D", "MaxUnpooling2D", "MaxUnpooling3D"]

BACKENDS = ("jax", "torch", "tensorflow")
VALUE_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32",
                "int64", "uint8")
INDEX_DTYPES = ("int32", "int64")
LAYOUTS = ("torch", "tf")
FORMATS = {(1, False): "NCW", (1, True): "NWC", (2, False): "NCHW", (2, True): "NHWC",
           (3, False): "NCDHW", (3, True): "NDHWC"}


# --------------------------------------------------------------------------------------
# Arguments
# --------------------------------------------------------------------------------------

def _backend(layer: str) -> str:
    backend = keras.backend.backend()
    if backend not in BACKENDS:
        raise NotImplementedError(
            f"{layer}: jax_unpool.keras runs on Keras's jax, torch and tensorflow backends, "
            f"not {backend!r} (set KERAS_BACKEND before importing keras)")
    return backend


def _sizes(layer: str, name: str, value: Any, k: int) -> tuple[int, ...]:
    """An int or k ints, each positive."""
    values = (value,) * k if isinstance(value, int) else tuple(value)
    if len(values) != k or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                   for v in values):
        raise ValueError(f"{layer}: {name} must be a positive int or {k} positive ints, got "
                         f"{value!r}")
    return values


def _choice(layer: str, name: str, value: Any, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{layer}: {name} must be one of {', '.join(map(repr, choices))}, "
                         f"got {value!r}")
    return value


def _data_format(layer: str, value: str | None) -> str:
    value = keras.config.image_data_format() if value is None else value
    return _choice(layer, "data_format", value, ("channels_last", "channels_first"))


def _check_input(layer: str, name: str, x, k: int, dtypes: Sequence[str], kind: str) -> None:
    if len(x.shape) != k + 2:
        raise ValueError(f"{layer}: {name} must have rank {k + 2} (a batch of {k}-D "
                         f"inputs with channels), got shape {tuple(x.shape)}")
    dtype = keras.backend.standardize_dtype(x.dtype)
    if dtype not in dtypes:
        raise TypeError(f"{layer}: {name} must have {kind} dtype ({', '.join(dtypes)}), got "
                        f"{dtype}")


def same_padding(size: int, pool: int, stride: int) -> tuple[int, int]:
    """TensorFlow's "same" padding of one axis: (before, after), before the smaller half."""
    total = max((-(-size // stride) - 1) * stride + pool - size, 0)
    return total // 2, total - total // 2


def pooled_size(size, pool: int, stride: int, padding: str):
    if size is None:
        return None
    return -(-size // stride) if padding == "same" else (size - pool) // stride + 1


def _spatial_axes(k: int, channels_last: bool) -> list[int]:
    return list(range(1, k + 1)) if channels_last else list(range(2, k + 2))


# --------------------------------------------------------------------------------------
# The JAX backend: our primitives
# --------------------------------------------------------------------------------------

def _jax_pool(x, k: int, pool, strides, pads, channels_last: bool, index_dtype: str):
    """jax_unpool's pool with Keras's padding. "same" pads one more element after than
    before on some axes: that one is padded explicitly (with the lowest value: it never
    wins, since every window starts with an element of the input) and the indices are
    moved back into the unpadded plane."""
    import jax.numpy as jnp

    import jax_unpool as ju

    pool_fn = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
               3: ju.max_pool3d_with_indices}[k]
    axes = _spatial_axes(k, channels_last)
    sizes = [int(x.shape[a]) for a in axes]
    extra = [after - before for before, after in pads]
    if any(extra):
        widths = [(0, 0)] * x.ndim
        for axis, e in zip(axes, extra):
            widths[axis] = (0, e)
        x = jnp.pad(x, widths, constant_values=_keras_ops.lowest(x.dtype))
    values, indices = pool_fn(x, pool, strides, tuple(b for b, _ in pads),
                              data_format=FORMATS[(k, channels_last)], index_dtype=index_dtype)
    if any(extra):
        padded = [n + e for n, e in zip(sizes, extra)]
        coords, rest = [], indices
        for n in reversed(padded):
            coords.insert(0, rest % n)
            rest = rest // n
        indices = sum(c * math.prod(sizes[a + 1:]) for a, c in enumerate(coords))
    return values, indices


def _jax_unpool(x, indices, output_size, channels_last: bool):
    import jax_unpool as ju

    k = len(output_size)
    unpool = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}[k]
    return unpool(x, indices, output_size=tuple(output_size),
                  data_format=FORMATS[(k, channels_last)])


# --------------------------------------------------------------------------------------
# Index layouts
# --------------------------------------------------------------------------------------

def _channel_numbers(shape, channels_last: bool, dtype: str):
    """c at every position of an (N, ..., C) or (N, C, ...) tensor, broadcastable."""
    c = int(shape[-1] if channels_last else shape[1])
    k = len(shape) - 2
    numbers = ops.arange(c, dtype=dtype)
    return ops.reshape(numbers, (c,) if channels_last else (c,) + (1,) * k)


def to_tf_layout(indices, shape, channels_last: bool, include_batch: bool):
    """Per-plane flat indices -> TensorFlow's (position * C + c), plus b * plane * C."""
    k = len(shape) - 2
    c = int(shape[-1] if channels_last else shape[1])
    plane = math.prod(int(shape[a]) for a in _spatial_axes(k, channels_last))
    out = indices * c + _channel_numbers(shape, channels_last, indices.dtype)
    if include_batch:  # b from a running count: the batch may be symbolic (ONNX export)
        b = ops.cumsum(ops.ones_like(indices), axis=0) - 1
        out = out + b * (plane * c)
    return out


def from_tf_layout(indices, channels: int, plane: int):
    """TensorFlow's layout (with or without the batch) -> per-plane flat indices."""
    return ops.mod(ops.floor_divide(indices, channels), plane)


# --------------------------------------------------------------------------------------
# The layers
# --------------------------------------------------------------------------------------

class _Window(keras.layers.Layer):
    """The pool's window, as both layers take it and save it in their config."""

    rank = 0

    def __init__(self, pool_size: int | Sequence[int] = 2,
                 strides: int | Sequence[int] | None = None, padding: str = "valid",
                 data_format: str | None = None, index_layout: str = "torch", **kwargs):
        super().__init__(**kwargs)
        name, k = type(self).__name__, self.rank
        self.backend = _backend(name)
        self.pool_size = _sizes(name, "pool_size", pool_size, k)
        self.strides = _sizes(name, "strides", self.pool_size if strides is None else strides,
                              k)
        self.padding = _choice(name, "padding", str(padding).lower(), ("valid", "same"))
        self.data_format = _data_format(name, data_format)
        self.index_layout = _choice(name, "index_layout", index_layout, LAYOUTS)

    @property
    def _channels_last(self) -> bool:
        return self.data_format == "channels_last"

    def get_config(self) -> dict:
        return {**super().get_config(), "pool_size": self.pool_size, "strides": self.strides,
                "padding": self.padding, "data_format": self.data_format,
                "index_layout": self.index_layout}


class _MaxPoolingWithArgmax(_Window):
    def __init__(self, pool_size: int | Sequence[int] = 2,
                 strides: int | Sequence[int] | None = None, padding: str = "valid",
                 data_format: str | None = None, index_layout: str = "torch",
                 include_batch_in_index: bool = False, index_dtype: str = "int32",
                 **kwargs):
        super().__init__(pool_size, strides, padding, data_format, index_layout, **kwargs)
        name = type(self).__name__
        if include_batch_in_index and index_layout != "tf":
            raise ValueError(f"{name}: include_batch_in_index=True needs index_layout='tf' "
                             "(TensorFlow's layout); 'torch' indices count within a plane")
        self.include_batch_in_index = bool(include_batch_in_index)
        self.index_dtype = _choice(name, "index_dtype", index_dtype, INDEX_DTYPES)

    def _output_shape(self, input_shape) -> tuple:
        axes = _spatial_axes(self.rank, self._channels_last)
        shape = list(input_shape)
        for axis, p, s in zip(axes, self.pool_size, self.strides):
            shape[axis] = pooled_size(shape[axis], p, s, self.padding)
        return tuple(shape)

    def compute_output_shape(self, input_shape):
        shape = self._output_shape(input_shape)
        return shape, shape

    def compute_output_spec(self, inputs):
        shape = self._output_shape(inputs.shape)
        return (keras.KerasTensor(shape, dtype=inputs.dtype),
                keras.KerasTensor(shape, dtype=self.index_dtype))

    def call(self, inputs):
        name, k, last = type(self).__name__, self.rank, self._channels_last
        _check_input(name, "inputs", inputs, k, VALUE_DTYPES, "a real")
        sizes = [int(inputs.shape[a]) for a in _spatial_axes(k, last)]
        if self.padding == "same":
            pads = [same_padding(n, p, s) for n, p, s in zip(sizes, self.pool_size,
                                                            self.strides)]
        else:
            pads = [(0, 0)] * k
        if any(pooled_size(n, p, s, self.padding) < 1 for n, p, s in
               zip(sizes, self.pool_size, self.strides)):
            raise ValueError(f"{name}: pool_size {self.pool_size} is larger than the input's "
                             f"spatial size {tuple(sizes)} with padding='valid'")
        if self.backend == "jax":
            values, indices = _jax_pool(inputs, k, self.pool_size, self.strides, pads, last,
                                        self.index_dtype)
        else:
            values, indices = _keras_ops.max_pool_with_argmax(
                inputs, self.pool_size, self.strides, pads, last, self.index_dtype)
        if self.index_layout == "tf":
            indices = to_tf_layout(indices, inputs.shape, last, self.include_batch_in_index)
        return values, indices

    def get_config(self) -> dict:
        return {**super().get_config(), "include_batch_in_index": self.include_batch_in_index,
                "index_dtype": self.index_dtype}


class _MaxUnpooling(_Window):
    def __init__(self, pool_size: int | Sequence[int] = 2,
                 strides: int | Sequence[int] | None = None, padding: str = "valid",
                 data_format: str | None = None, output_size: Sequence[int] | None = None,
                 index_layout: str = "torch", **kwargs):
        super().__init__(pool_size, strides, padding, data_format, index_layout, **kwargs)
        self.output_size = None if output_size is None else self._spatial(output_size)

    def _spatial(self, output_size: Sequence) -> tuple[int, ...]:
        """Spatial sizes from k sizes or a full shape (whose batch may be None)."""
        k, name = self.rank, type(self).__name__
        size = tuple(output_size)
        if len(size) == k + 2:
            size = tuple(size[a] for a in _spatial_axes(k, self._channels_last))
        return _sizes(name, "output_size", size, k)

    def _output_shape(self, input_shape, output_size=None) -> tuple:
        axes = _spatial_axes(self.rank, self._channels_last)
        size = self._spatial(output_size) if output_size is not None else self.output_size
        shape = list(input_shape)
        for a, (axis, p, s) in enumerate(zip(axes, self.pool_size, self.strides)):
            if size is not None:
                shape[axis] = size[a]
            elif shape[axis] is not None:
                shape[axis] = (shape[axis] * s if self.padding == "same"
                               else (shape[axis] - 1) * s + p)
        return tuple(shape)

    def compute_output_shape(self, inputs_shape, indices_shape=None, output_size=None):
        return self._output_shape(inputs_shape, output_size)

    def compute_output_spec(self, inputs, indices, output_size=None):
        return keras.KerasTensor(self._output_shape(inputs.shape, output_size),
                                 dtype=inputs.dtype)

    def call(self, inputs, indices, output_size=None):
        name, k, last = type(self).__name__, self.rank, self._channels_last
        _check_input(name, "inputs", inputs, k, VALUE_DTYPES, "a real")
        _check_input(name, "indices", indices, k, INDEX_DTYPES, "an integer")
        if tuple(indices.shape) != tuple(inputs.shape):
            raise ValueError(f"{name}: indices must have the shape of inputs, "
                             f"{tuple(inputs.shape)}, got {tuple(indices.shape)}")
        shape = self._output_shape(tuple(inputs.shape), output_size)
        size = tuple(int(shape[a]) for a in _spatial_axes(k, last))
        if self.index_layout == "tf":
            channels = int(inputs.shape[-1] if last else inputs.shape[1])
            indices = from_tf_layout(indices, channels, math.prod(size))
        if self.backend == "jax":
            return _jax_unpool(inputs, indices, size, last)
        return _keras_ops.max_unpool(inputs, indices, size, last)

    def get_config(self) -> dict:
        return {**super().get_config(), "output_size": self.output_size}


def _layer(base: type, name: str, k: int, doc: str) -> type:
    cls = type(name, (base,), {"rank": k, "__doc__": doc, "__module__": __name__})
    return keras.saving.register_keras_serializable(package="jax_unpool")(cls)


_POOL_DOC = """{k}-D max pooling that also returns the argmax: ``layer(x) -> (values,
indices)``, x ``(N, {s}, C)`` (channels_last) or ``(N, C, {s})``.

Args:
  pool_size: the window, an int or {k} ints (default 2).
  strides: the window's step, an int or {k} ints; defaults to ``pool_size``.
  padding: ``"valid"`` (no padding) or ``"same"`` (TensorFlow's).
  data_format: ``"channels_last"`` or ``"channels_first"``; defaults to
    ``keras.config.image_data_format()``.
  index_layout: ``"torch"`` (per-plane flat positions) or ``"tf"`` (TensorFlow's
    ``position * C + c``).
  include_batch_in_index: with ``index_layout="tf"``, add ``b * plane * C`` (TensorFlow's
    ``include_batch_in_index``).
  index_dtype: ``"int32"`` or ``"int64"`` (int64 on JAX needs ``jax_enable_x64``).
"""
_UNPOOL_DOC = """{k}-D max-unpooling: ``layer(values, indices, output_size=None)``, the
inverse of :class:`MaxPoolingWithArgmax{k}D` (zeros except at the indices).

Args:
  pool_size, strides, padding, data_format: the pooling's, for the default output size.
  output_size: the pooled input's spatial sizes ({k} ints) or its full shape; the call's
    ``output_size`` overrides it.
  index_layout: the indices' layout, ``"torch"`` or ``"tf"`` (with or without the batch).
"""
_SPATIAL = {1: "W", 2: "H, W", 3: "D, H, W"}

MaxPoolingWithArgmax1D, MaxPoolingWithArgmax2D, MaxPoolingWithArgmax3D = (
    _layer(_MaxPoolingWithArgmax, f"MaxPoolingWithArgmax{k}D", k,
           _POOL_DOC.format(k=k, s=_SPATIAL[k])) for k in (1, 2, 3))
MaxUnpooling1D, MaxUnpooling2D, MaxUnpooling3D = (
    _layer(_MaxUnpooling, f"MaxUnpooling{k}D", k, _UNPOOL_DOC.format(k=k))
    for k in (1, 2, 3))
