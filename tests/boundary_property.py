"""A hypothesis property over direct calls to the CPU targets, run in a child process by
tests/test_boundary.py (a crash must fail that test, not the suite):

    python tests/boundary_property.py MAX_EXAMPLES

Random buffer shapes and dtypes, derived from a consistent call and then mutated: a call
the rules below call valid equals the numpy oracle bit for bit, an invalid one raises
INVALID_ARGUMENT, indices outside the output plane raise OUT_OF_RANGE, and nothing
crashes. The rules are written here from the documented calling convention, not read from
the handlers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/
import numpy_oracle
from boundary_calls import TARGETS, bits, spatial_hw

import jax_unpool  # noqa: F401 -- registers the targets

jax.config.update("jax_enable_x64", True)
RUNTIME_ERRORS = (jax.errors.JaxRuntimeError, ValueError)  # see README: jax-ml/jax#34083
OP = {"forward": "max_unpool2d", "backward": "max_unpool2d_backward"}


def layout(n, c, h, w, rank, last):
    shape = (n, h, w, c) if last else (n, c, h, w)
    return list(shape if rank == 4 else shape[1:])


@st.composite
def calls(draw):
    op = draw(st.sampled_from(["forward", "backward"]))
    rank, last = draw(st.sampled_from([3, 4])), draw(st.booleans())
    n, c, h, w = (draw(st.integers(0, 3)) for _ in range(4))
    ho, wo = draw(st.integers(0, 5)), draw(st.integers(0, 5))
    inner, outer = layout(n, c, h, w, rank, last), layout(n, c, ho, wo, rank, last)
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
    return op, last, shapes, (vdtype, idtype, rdtype), max(ho * wo, 1)


def valid(op, last, shapes, dtypes) -> bool:
    vdtype, idtype, rdtype = dtypes
    values, indices, result = shapes["values"], shapes["indices"], shapes["result"]
    if idtype not in ("int32", "int64") or rdtype != vdtype or len(values) not in (3, 4):
        return False
    same, other = (indices, result) if op == "forward" else (result, indices)
    first = values if op == "forward" else indices  # must equal `same`
    if same != first or len(other) != len(values):
        return False
    c = -1 if last else -3
    return other[c] == values[c] and (len(values) == 3 or other[0] == values[0])


@settings(max_examples=int(sys.argv[1]), deadline=None, database=None)
@given(calls())
def test_direct_calls(call):
    op, last, shapes, dtypes, plane = call
    rng = np.random.default_rng(0)
    values = rng.standard_normal(shapes["values"]).astype(dtypes[0])
    indices = rng.integers(0, plane, shapes["indices"]).astype(dtypes[1])
    target = jax.ffi.ffi_call(TARGETS["cpu"][op],
                              jax.ShapeDtypeStruct(tuple(shapes["result"]), dtypes[2]))
    try:
        got = np.asarray(target(values, indices, channels_last=last))
        error = None
    except RUNTIME_ERRORS as e:
        got, error = None, str(e)
    if np.prod(shapes["result"]) == 0:  # XLA never calls a handler for an empty result
        assert error is None and got.shape == tuple(shapes["result"]), error
        return
    if not valid(op, last, shapes, dtypes):
        assert error is not None and error.startswith(f"INVALID_ARGUMENT: {OP[op]}: "), error
        return
    grid = shapes["result"] if op == "forward" else shapes["values"]
    ho, wo = spatial_hw(grid, last)
    if indices.size and indices.max() >= ho * wo:  # the output plane was mutated smaller
        assert error is not None and error.startswith(f"OUT_OF_RANGE: {OP[op]}: index"), error
        return
    assert error is None, error
    want = (numpy_oracle.unpool(values, indices, (ho, wo), last) if op == "forward"
            else numpy_oracle.gather(values, indices, last))
    assert got.shape == want.shape and np.array_equal(bits(got), bits(want))


if __name__ == "__main__":
    test_direct_calls()
    print("property held")
