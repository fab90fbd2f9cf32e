"""A hypothesis property over direct calls to the CPU targets (the 2-D _v1 ones, the _v2
ones with every spatial rank, and those on window offsets), run in a child process by
tests/native/test_ffi_boundary.py (a crash must fail that test, not the suite):

    python tests/helpers/boundary_property.py MAX_EXAMPLES

Random buffer shapes and dtypes, derived from a consistent call and then mutated: a call
the rules below call valid equals the numpy oracle bit for bit, an invalid one raises
INVALID_ARGUMENT, indices outside the output plane raise OUT_OF_RANGE, and nothing
crashes. The window targets' calls start from a random pool's geometry (its window as
attributes) with offsets drawn past the tap count too: an offset naming no position raises
OUT_OF_RANGE. The rules are written here from the documented calling convention, not read from
the handlers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/helpers/
import numpy_oracle
from boundary_calls import TARGETS, bits, spatial_sizes

import jax_unpool  # noqa: F401 -- registers the targets

jax.config.update("jax_enable_x64", True)
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)  # see docs/semantics.md: jax-ml/jax#34083
OP = {"forward": "max_unpool{}d", "backward": "max_unpool{}d_backward"}


def layout(n, c, spatial, batched, last):
    shape = (n, *spatial, c) if last else (n, c, *spatial)
    return list(shape if batched else shape[1:])


@st.composite
def calls(draw):
    op = draw(st.sampled_from(["forward", "backward"]))
    family = draw(st.sampled_from(["cpu", "cpu_v2"]))
    k = 2 if family == "cpu" else draw(st.integers(1, 3))
    batched, last = draw(st.booleans()), draw(st.booleans())
    n, c = draw(st.integers(0, 3)), draw(st.integers(0, 3))
    spatial = [draw(st.integers(0, 3)) for _ in range(k)]
    out_spatial = [draw(st.integers(0, 5)) for _ in range(k)]
    inner = layout(n, c, spatial, batched, last)
    outer = layout(n, c, out_spatial, batched, last)
    shapes = {"values": inner if op == "forward" else outer, "indices": list(inner),
              "result": outer if op == "forward" else list(inner)}
    for _ in range(draw(st.integers(0, 2))):  # mutations
        name = draw(st.sampled_from(sorted(shapes)))
        shape = list(shapes[name])
        kind = draw(st.sampled_from(["dim", "drop", "add"]))
        if kind == "dim" and shape:
            shape[draw(st.integers(0, len(shape) - 1))] = draw(st.integers(0, 5))
        elif kind == "drop" and shape:
            shape.pop()
        elif kind == "add":
            shape.append(draw(st.integers(1, 2)))
        shapes[name] = shape
    vdtype = draw(st.sampled_from(["float32", "float16", "int8", "float64"]))
    idtype = draw(st.sampled_from(["int32", "int64", "int32", "int64", "int16", "float32"]))
    rdtype = draw(st.sampled_from([vdtype, vdtype, vdtype, "float32", "int16"]))
    return family, k, op, last, shapes, (vdtype, idtype, rdtype), max(np.prod(out_spatial), 1)


def valid(k, op, last, shapes, dtypes) -> bool:
    vdtype, idtype, rdtype = dtypes
    values, indices, result = shapes["values"], shapes["indices"], shapes["result"]
    if idtype not in ("int32", "int64") or rdtype != vdtype or len(values) not in (k + 1, k + 2):
        return False
    same, other = (indices, result) if op == "forward" else (result, indices)
    first = values if op == "forward" else indices  # must equal `same`
    if same != first or len(other) != len(values):
        return False
    c = -1 if last else -k - 1
    return other[c] == values[c] and (len(values) == k + 1 or other[0] == values[0])


@settings(max_examples=int(sys.argv[1]), deadline=None, database=None)
@given(calls())
def test_direct_calls(call):
    family, k, op, last, shapes, dtypes, plane = call
    fn = OP[op].format(k)
    rng = np.random.default_rng(0)
    values = rng.standard_normal(shapes["values"]).astype(dtypes[0])
    indices = rng.integers(0, plane, shapes["indices"]).astype(dtypes[1])
    target = jax.ffi.ffi_call(TARGETS[family][op],
                              jax.ShapeDtypeStruct(tuple(shapes["result"]), dtypes[2]))
    attributes = {"channels_last": last}
    if family == "cpu_v2":
        attributes["spatial_rank"] = k
    try:
        got = np.asarray(target(values, indices, **attributes))
        error = None
    except RUNTIME_ERRORS as e:
        got, error = None, str(e)
    if np.prod(shapes["result"]) == 0:  # XLA never calls a handler for an empty result
        assert error is None and got.shape == tuple(shapes["result"]), error
        return
    if not valid(k, op, last, shapes, dtypes):
        assert error is not None and error.startswith(f"INVALID_ARGUMENT: {fn}: "), error
        return
    grid = shapes["result"] if op == "forward" else shapes["values"]
    sizes = spatial_sizes(grid, last, k)
    if indices.size and indices.max() >= np.prod(sizes):  # the output was mutated smaller
        assert error is not None and error.startswith(f"OUT_OF_RANGE: {fn}: index"), error
        return
    assert error is None, error
    want = (numpy_oracle.unpool_nd(values, indices, sizes, last) if op == "forward"
            else numpy_oracle.gather_nd(values, indices, k, last))
    assert got.shape == want.shape and np.array_equal(bits(got), bits(want))


@st.composite
def window_calls(draw):
    op = draw(st.sampled_from(["forward", "backward"]))
    k, batched, last = draw(st.integers(1, 3)), draw(st.booleans()), draw(st.booleans())
    n, c = draw(st.integers(0, 2)), draw(st.integers(0, 3))
    kernel = [draw(st.integers(1, 3)) for _ in range(k)]
    window = {"kernel_size": kernel, "stride": [draw(st.integers(1, 3)) for _ in range(k)],
              "padding": [draw(st.integers(0, kk // 2)) for kk in kernel],
              "dilation": [draw(st.integers(1, 2)) for _ in range(k)],
              "ceil_mode": draw(st.booleans())}
    size = [draw(st.integers(1, 7)) for _ in range(k)]
    pooled = [numpy_oracle.pool_output_size(size[a], *(window[name][a] for name in (
        "kernel_size", "stride", "padding", "dilation")), window["ceil_mode"]) for a in range(k)]
    pooled = [max(p, 0) for p in pooled]
    inner, outer = layout(n, c, pooled, batched, last), layout(n, c, size, batched, last)
    shapes = {"values": inner if op == "forward" else outer, "indices": list(inner),
              "result": outer if op == "forward" else list(inner)}
    for _ in range(draw(st.integers(0, 2))):  # mutations
        name = draw(st.sampled_from(sorted(shapes)))
        shape = list(shapes[name])
        if shape:
            shape[draw(st.integers(0, len(shape) - 1))] = draw(st.integers(0, 8))
        shapes[name] = shape
    if draw(st.integers(0, 9)) == 0:  # an attribute of another rank
        window[draw(st.sampled_from(["stride", "padding", "dilation"]))] = [1] * (k % 3 + 1)
    vdtype = draw(st.sampled_from(["float32", "bfloat16", "uint8", "float64"]))
    odtype = draw(st.sampled_from(["uint8", "uint8", "uint8", "int32"]))
    rdtype = draw(st.sampled_from([vdtype, vdtype, vdtype, "float16"]))
    bad = draw(st.integers(0, 3)) == 0  # offsets past the tap count too
    return k, op, last, window, shapes, (vdtype, odtype, rdtype), bad


def window_valid(k, op, last, window, shapes, dtypes) -> bool:
    vdtype, odtype, rdtype = dtypes
    attrs = [window[name] for name in ("kernel_size", "stride", "padding", "dilation")]
    if any(len(a) != k for a in attrs) or odtype != "uint8" or rdtype != vdtype:
        return False
    values, offsets, result = shapes["values"], shapes["indices"], shapes["result"]
    pooled_side, input_side = (values, result) if op == "forward" else (offsets, values)
    twin = offsets if op == "forward" else result
    if len(values) not in (k + 1, k + 2) or twin != pooled_side or len(input_side) != len(values):
        return False
    c = -1 if last else -k - 1
    if input_side[c] != pooled_side[c] or (len(values) == k + 2
                                            and input_side[0] != pooled_side[0]):
        return False
    size = spatial_sizes(input_side, last, k)
    if min(size) < 1:
        return False
    want = [numpy_oracle.pool_output_size(size[a], *(a_[a] for a_ in attrs),
                                          window["ceil_mode"]) for a in range(k)]
    return min(want) >= 1 and want == list(spatial_sizes(pooled_side, last, k))


@settings(max_examples=int(sys.argv[1]), deadline=None, database=None)
@given(window_calls())
def test_direct_window_calls(call):
    k, op, last, window, shapes, dtypes, bad = call
    ranked = all(len(window[name]) == k for name in ("stride", "padding", "dilation"))
    fn = OP[op].format(k) if ranked else OP[op].replace("{}d", "")
    rng = np.random.default_rng(0)
    values = rng.standard_normal(shapes["values"]).astype(dtypes[0])
    taps = int(np.prod(window["kernel_size"]))
    offsets = rng.integers(0, taps + 2 if bad else taps, shapes["indices"]).astype(dtypes[1])
    target = jax.ffi.ffi_call(TARGETS["cpu_window"][op],
                              jax.ShapeDtypeStruct(tuple(shapes["result"]), dtypes[2]))
    attributes = {"channels_last": last, "ceil_mode": window["ceil_mode"],
                  **{name: np.asarray(window[name], np.int64)
                     for name in ("kernel_size", "stride", "padding", "dilation")}}
    try:
        got = np.asarray(target(values, offsets, **attributes))
        error = None
    except RUNTIME_ERRORS as e:
        got, error = None, str(e)
    if np.prod(shapes["result"]) == 0:  # XLA never calls a handler for an empty result
        assert error is None and got.shape == tuple(shapes["result"]), error
        return
    if not window_valid(k, op, last, window, shapes, dtypes):
        assert error is not None and error.startswith(f"INVALID_ARGUMENT: {fn}: "), error
        return
    plane = spatial_sizes(shapes["result"] if op == "forward" else shapes["values"], last, k)
    flat, named = numpy_oracle.window_positions(
        offsets, plane, *(window[name] for name in ("kernel_size", "stride", "padding",
                                                    "dilation")), last)
    if not (named & (flat < np.prod(plane))).all():
        assert error is not None and error.startswith(f"OUT_OF_RANGE: {fn}: "), error
        return
    assert error is None, error
    want = (numpy_oracle.unpool_nd(values, flat, plane, last) if op == "forward"
            else numpy_oracle.gather_nd(values, flat, k, last))
    assert got.shape == want.shape and np.array_equal(bits(got), bits(want))


if __name__ == "__main__":
    test_direct_calls()
    test_direct_window_calls()
    print("property held")
