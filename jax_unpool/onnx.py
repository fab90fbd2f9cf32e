"""ONNX export through jax2onnx: ``import jax_unpool.onnx`` registers a jax2onnx plugin for
the forward of every op, so that ``jax2onnx.to_onnx`` (and Keras 3's
``model.export(format="onnx")`` on the JAX backend, which calls it) converts functions
and models that use them.

- ``max_pool{1,2,3}d_with_indices`` -> ONNX ``MaxPool`` with its ``Indices`` output.
  ONNX's indices count over the whole N*C*spatial tensor (the MaxPool schema: "the
  indices are computed as flatten 1-D tensor ... in [0, N x C x D1 x ... x Dn)"), ours
  per plane: the graph takes them modulo the plane's size.
- ``max_unpool{1,2,3}d`` -> ONNX ``MaxUnpool`` with its ``output_shape`` input. Our per-plane
  indices get their plane's offset ``(n * C + c) * plane``; an index outside its plane
  becomes -1, which ONNX Runtime refuses at run time ("Index value out of bounds"), as our
  CPU kernel does, instead of writing into another plane.

Channels-last ops are transposed to ONNX's channels-first layout and back; unbatched ones
get a batch of one. int32 indices are cast from ONNX's int64. The batch (and channel) dims
may be symbolic; the spatial dims must be known.

What ONNX cannot express is refused at conversion with `UnsupportedOnnxExport`, naming the
op and the reason, instead of a model that computes something else: a pool with a window
of only padding (PyTorch's index and -inf there; ONNX Runtime's MaxPool gives the dtype's
lowest finite value and an index outside the window), a dtype outside the ONNX operator's
types, an unpool into an output smaller than its input, window-offset indices
(``index_format="window"``). docs/deploy.md lists what was
checked against ONNX Runtime, and how (tests/integration/test_onnx.py).

Only the forward ops have plugins: a function that differentiates (``max_unpool*_backward``,
the pool's gradient pair) fails in jax2onnx with "No plugins registered for primitive".

Needs the extra ``onnx`` (jax2onnx, onnx, onnxruntime; jax2onnx needs jax 0.8.1 or newer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

try:
    import jax2onnx  # noqa: F401 -- the ImportError below names the extra
    import onnx_ir as ir
    from jax2onnx.plugins.plugin_system import PrimitiveLeafPlugin, register_primitive
except ImportError as error:  # pragma: no cover - exercised where jax2onnx is missing
    raise ImportError(
        "jax_unpool.onnx needs jax2onnx, onnx and onnxruntime, an optional extra: pip "
        "install 'jax-unpool[onnx]' (jax2onnx needs jax 0.8.1 or newer)") from error

from jax_unpool import _geometry
from jax_unpool._geometry import RANKS

__all__ = ["POOL_DTYPES", "UNPOOL_DTYPES", "UnsupportedOnnxExport"]

# The type constraints of ONNX's MaxPool (T) and MaxUnpool (T1), opset 22 (onnx's
# defs: onnx.defs.get_schema("MaxPool").type_constraints). ONNX Runtime's CPU kernels run
# fewer: MaxPool not bfloat16, MaxUnpool float32 only (its Unpool.cc registers float).
POOL_DTYPES = ("float16", "bfloat16", "float32", "float64", "int8", "uint8")
UNPOOL_DTYPES = ("float16", "bfloat16", "float32", "float64")


class UnsupportedOnnxExport(ValueError):
    """The op, as called, has no ONNX equivalent that computes the same result."""


# --------------------------------------------------------------------------------------
# Graph pieces shared by both plugins
# --------------------------------------------------------------------------------------

def _dims(shape: Sequence[Any]) -> list:
    """An aval's shape as ONNX dims: ints, and names for symbolic dims."""
    return [int(d) if isinstance(d, (int, np.integer)) else str(d) for d in shape]


def _stamp(value, dtype: ir.DataType, shape: Sequence[Any]):
    value.type = ir.TensorType(dtype)
    value.shape = ir.Shape([d if isinstance(d, int) else ir.SymbolicDim(d)
                            for d in _dims(shape)])
    return value


def _channels_first_perm(rank: int, channels_last: bool) -> list[int] | None:
    """The permutation N, spatial..., C -> N, C, spatial... (None: none needed)."""
    return [0, rank - 1, *range(1, rank - 1)] if channels_last else None


class _Layout:
    """To and from ONNX's (N, C, *spatial): a batch of one for unbatched operands, a
    transpose for channels-last ones."""

    def __init__(self, ctx, shape: Sequence[Any], k: int, channels_last: bool):
        self.ctx, self.k, self.channels_last = ctx, k, channels_last
        self.unbatched = len(shape) == k + 1
        batched = (1, *shape) if self.unbatched else tuple(shape)
        self.perm = _channels_first_perm(k + 2, channels_last)
        self.onnx_shape = (tuple(batched[i] for i in self.perm) if self.perm
                           else batched)

    def to_onnx(self, value, dtype: ir.DataType, name: str):
        ctx = self.ctx
        source = _transposed_from(value, self.perm) if not self.unbatched else None
        if source is not None:  # a pool's result of our own making: its ONNX layout
            return source
        if self.unbatched:
            value = ctx.builder.Unsqueeze(value, ctx.builder.const_i64(
                ctx.fresh_name(f"{name}_axis"), [0]), _outputs=[ctx.fresh_name(name)])
        if self.perm:
            value = ctx.builder.Transpose(value, perm=self.perm,
                                          _outputs=[ctx.fresh_name(name)])
        return _stamp(value, dtype, self.onnx_shape)

    def from_onnx(self, value, out_var, dtype: ir.DataType, spatial: Sequence[int], name):
        """`value` of ONNX's layout with `spatial` sizes, bound to `out_var` in ours."""
        ctx = self.ctx
        shape = (*self.onnx_shape[:2], *spatial)
        _stamp(value, dtype, shape)
        if self.perm:
            inverse = [self.perm.index(i) for i in range(self.k + 2)]
            value = _stamp(ctx.builder.Transpose(value, perm=inverse,
                                                 _outputs=[ctx.fresh_name(name)]),
                           dtype, [shape[i] for i in inverse])
        if self.unbatched:
            value = ctx.builder.Squeeze(value, ctx.builder.const_i64(
                ctx.fresh_name(f"{name}_axis"), [0]), _outputs=[ctx.fresh_name(name)])
        ctx.bind_value_for_var(out_var, _stamp(value, dtype, out_var.aval.shape))


def _transposed_from(value, perm: list[int] | None):
    """The input of the Transpose that made `value` from ONNX's layout with the inverse of
    `perm`, or None. Unpooling a channels-last pool's result then reads the pool's own
    channels-first output: no transpose back and forth (and none of the pairs that
    jax2onnx 0.17.1's transpose folding removes even where the first one is a graph
    output, leaving the graph without that output)."""
    node = value.producer() if perm else None
    if node is None or node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return None
    attribute = node.attributes.get("perm")
    inverse = [perm.index(i) for i in range(len(perm))]
    return node.inputs[0] if attribute is not None and list(attribute.as_ints()) == inverse \
        else None


def _ir_dtype(ctx, dtype) -> ir.DataType:
    # jax2onnx's own mapping (float64 stays double only with enable_double_precision).
    from jax2onnx.converter.ir_builder import _dtype_to_ir
    return _dtype_to_ir(np.dtype(dtype), ctx.builder.enable_double_precision)


def _check_dtype(fn: str, onnx_op: str, dtype, allowed: tuple[str, ...]) -> None:
    if np.dtype(dtype).name not in allowed:
        raise UnsupportedOnnxExport(
            f"{fn}: ONNX's {onnx_op} takes {', '.join(allowed)}, not {np.dtype(dtype).name}; "
            f"cast x before the op to export it")


def _check_flat(fn: str, window_offsets: bool) -> None:
    if window_offsets:
        raise UnsupportedOnnxExport(
            f"{fn}: window-offset indices (index_format='window') have no ONNX equivalent; "
            "export the function with index_format='flat' (the default)")


def _static(fn: str, what: str, sizes: Sequence[Any]) -> tuple[int, ...]:
    if not all(isinstance(d, (int, np.integer)) for d in sizes):
        raise UnsupportedOnnxExport(
            f"{fn}: ONNX export needs known spatial sizes; {what} is "
            f"{tuple(str(d) for d in sizes)} (only the batch and channel dims may be "
            "symbolic)")
    return tuple(int(d) for d in sizes)


# --------------------------------------------------------------------------------------
# max_pool{k}d_with_indices -> MaxPool (+ Indices)
# --------------------------------------------------------------------------------------

class _MaxPoolWithIndices(PrimitiveLeafPlugin):
    """``max_pool{k}d_with_indices`` as ONNX ``MaxPool`` with indices made per plane."""

    def lower(self, ctx, eqn) -> None:
        (x_var,), (values_var, indices_var) = eqn.invars, eqn.outvars
        p = eqn.params
        k = len(p["kernel_size"])
        fn = f"max_pool{k}d_with_indices"
        _check_flat(fn, p.get("index_format", "flat") == "window")
        aval = x_var.aval
        _check_dtype(fn, "MaxPool", aval.dtype, POOL_DTYPES)
        g = _geometry.pool_geometry_of(aval.shape, **p)
        if not g.argmax_in_window():
            raise UnsupportedOnnxExport(
                f"{fn}: a window of this pool holds only padding (kernel_size="
                f"{g.kernel}, stride={g.stride}, padding={g.padding}, dilation={g.dilation}, "
                f"ceil_mode={g.ceil_mode} on spatial size {g.in_size}); PyTorch's result there "
                "(-inf and an index past the window) has no ONNX MaxPool equivalent (ONNX "
                "Runtime gives the dtype's lowest finite value and an index outside the "
                "window): change the pool's arguments to export it")
        layout = _Layout(ctx, aval.shape, k, g.channels_last)
        dtype = _ir_dtype(ctx, aval.dtype)
        x = layout.to_onnx(ctx.get_value_for_var(x_var, name_hint=ctx.fresh_name("x")),
                           dtype, "max_pool_in")
        values, flat = ctx.builder.MaxPool(
            x, kernel_shape=list(g.kernel), strides=list(g.stride),
            pads=list(g.padding) * 2, dilations=list(g.dilation),
            ceil_mode=int(g.ceil_mode), storage_order=0,
            _outputs=[ctx.fresh_name("max_pool"), ctx.fresh_name("max_pool_indices")])
        spatial = (*layout.onnx_shape[:2], *g.out_size)
        _stamp(flat, ir.DataType.INT64, spatial)
        # Every argmax lies in its own plane (no window of only padding): the whole-tensor
        # index modulo the plane's size is the index inside the plane.
        per_plane = _stamp(ctx.builder.Mod(flat, ctx.builder.const_i64(
            ctx.fresh_name("plane_size"), [math.prod(g.in_size)]),
            _outputs=[ctx.fresh_name("plane_indices")]), ir.DataType.INT64, spatial)
        index_type = _ir_dtype(ctx, g.index_dtype)
        if index_type != ir.DataType.INT64:
            per_plane = ctx.builder.Cast(per_plane, to=index_type,
                                         _outputs=[ctx.fresh_name("plane_indices")])
        layout.from_onnx(values, values_var, dtype, g.out_size, "max_pool_values")
        layout.from_onnx(per_plane, indices_var, index_type, g.out_size, "max_pool_indices")


# --------------------------------------------------------------------------------------
# max_unpool{k}d -> MaxUnpool (+ output_shape)
# --------------------------------------------------------------------------------------

def _unpool_attributes(in_size: tuple[int, ...], out_size: tuple[int, ...], window):
    """MaxUnpool's kernel_shape, strides and pads. With `output_shape` given they decide
    no result, but ONNX Runtime requires their output size (the inverse of MaxPool's)
    not to exceed it and each pad to be smaller than the kernel (Unpool.cc,
    pool_attributes.h): the pool's window where the indices have one, else a window of 1
    (the input's own size)."""
    w = _geometry.unpool_window(in_size, out_size, window)
    if w is not None and all((i - 1) * s - 2 * p + e <= o for i, o, e, s, p
                             in zip(in_size, out_size, w.extent, w.stride, w.padding)):
        return list(w.extent), list(w.stride), list(w.padding) * 2
    k = len(in_size)
    return [1] * k, [1] * k, [0] * (2 * k)


class _MaxUnpool(PrimitiveLeafPlugin):
    """``max_unpool{k}d`` as ONNX ``MaxUnpool`` with whole-tensor indices."""

    def lower(self, ctx, eqn) -> None:
        (x_var, indices_var), (out_var,) = eqn.invars, eqn.outvars
        p = eqn.params
        k = len(p["output_size"])
        fn = f"max_unpool{k}d"
        _check_flat(fn, p.get("index_window") is not None)
        aval = x_var.aval
        _check_dtype(fn, "MaxUnpool", aval.dtype, UNPOOL_DTYPES)
        last = p["channels_last"]
        out_size = _static(fn, "output_size", p["output_size"])
        in_size = _static(fn, "x's spatial size",
                          _geometry.spatial_dims(aval.shape, last, k))
        if math.prod(out_size) < math.prod(in_size):
            raise UnsupportedOnnxExport(
                f"{fn}: output_size {out_size} holds fewer positions than the input "
                f"{in_size}; ONNX Runtime's MaxUnpool refuses an output smaller than its "
                "input (Unpool.cc: 'output_shape is smaller than minimum required')")
        layout = _Layout(ctx, aval.shape, k, last)
        dtype = _ir_dtype(ctx, aval.dtype)
        b = ctx.builder
        x = layout.to_onnx(ctx.get_value_for_var(x_var, name_hint=ctx.fresh_name("x")),
                           dtype, "max_unpool_in")
        indices = layout.to_onnx(
            ctx.get_value_for_var(indices_var, name_hint=ctx.fresh_name("indices")),
            _ir_dtype(ctx, indices_var.aval.dtype), "max_unpool_indices")
        shape = layout.onnx_shape
        i64 = ir.DataType.INT64
        if indices_var.aval.dtype != np.int64:
            indices = _stamp(b.Cast(indices, to=i64, _outputs=[ctx.fresh_name("indices64")]),
                             i64, shape)

        def const(name, values):
            return b.const_i64(ctx.fresh_name(name), values)

        # (N, C) from the input's shape (the batch may be symbolic), then each plane's
        # offset (n * C + c) * plane as an (N, C, 1, ...) tensor.
        n = b.Shape(x, start=0, end=1, _outputs=[ctx.fresh_name("n")])
        c = b.Shape(x, start=1, end=2, _outputs=[ctx.fresh_name("c")])
        planes = b.Squeeze(b.Mul(n, c, _outputs=[ctx.fresh_name("planes")]), const("axis", [0]),
                           _outputs=[ctx.fresh_name("planes")])
        plane = math.prod(out_size)
        first = b.Range(const("zero", 0), planes, const("one", 1),
                        _outputs=[ctx.fresh_name("plane_number")])
        offsets = b.Reshape(
            b.Mul(first, const("plane_size", plane), _outputs=[ctx.fresh_name("offsets")]),
            b.Concat(n, c, const("ones", [1] * k), axis=0,
                     _outputs=[ctx.fresh_name("offsets_shape")]),
            _outputs=[ctx.fresh_name("plane_offsets")])
        whole = _stamp(b.Add(indices, offsets, _outputs=[ctx.fresh_name("tensor_indices")]),
                       i64, shape)
        inside = b.And(
            b.GreaterOrEqual(indices, const("zero", 0), _outputs=[ctx.fresh_name("ge0")]),
            b.Less(indices, const("plane_size", plane), _outputs=[ctx.fresh_name("lt")]),
            _outputs=[ctx.fresh_name("inside_plane")])
        whole = _stamp(b.Where(inside, whole, const("outside", -1),
                               _outputs=[ctx.fresh_name("tensor_indices")]), i64, shape)
        output_shape = b.Concat(n, c, const("output_size", list(out_size)), axis=0,
                                _outputs=[ctx.fresh_name("output_shape")])
        kernel, strides, pads = _unpool_attributes(in_size, out_size, p.get("window"))
        out = b.MaxUnpool(x, whole, output_shape, kernel_shape=kernel, strides=strides,
                          pads=pads, _outputs=[ctx.fresh_name("max_unpool")])
        layout.from_onnx(out, out_var, dtype, out_size, "max_unpool")


for _k in RANKS:
    register_primitive(jaxpr_primitive=f"max_pool{_k}d_with_indices",
                       since="jax-unpool 0.1.0", context="primitives.jax_unpool",
                       component=f"max_pool{_k}d_with_indices",
                       onnx=[{"component": "MaxPool",
                              "doc": "https://onnx.ai/onnx/operators/onnx__MaxPool.html"}],
                       )(type(f"MaxPool{_k}dWithIndicesPlugin", (_MaxPoolWithIndices,), {}))
    register_primitive(jaxpr_primitive=f"max_unpool{_k}d",
                       since="jax-unpool 0.1.0", context="primitives.jax_unpool",
                       component=f"max_unpool{_k}d",
                       onnx=[{"component": "MaxUnpool",
                              "doc": "https://onnx.ai/onnx/operators/onnx__MaxUnpool.html"}],
                       )(type(f"MaxUnpool{_k}dPlugin", (_MaxUnpool,), {}))
