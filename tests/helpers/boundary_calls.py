"""Direct `jax.ffi.ffi_call`s to the registered targets, in a child process of
tests/native/test_ffi_boundary.py, so that a crash fails the case it happened in, not the suite.

    python tests/helpers/boundary_calls.py CASES.json cpu
    python tests/helpers/boundary_calls.py CASES.json cpu_v2
    python tests/helpers/boundary_calls.py CASES.json cpu_window
    python tests/helpers/boundary_calls.py CASES.json aclnn FAKE_CANN_DIR

CASES.json is a list of {"name", "op" ("forward"/"backward", or "forward3d"/"backward3d":
the aclnn 3-D targets, which take no attribute; "forward_checked": the aclnn checked one),
"values": [shape, dtype], "indices": [shape, dtype], "result": [shape, dtype],
"channels_last", "spatial_rank", "plane"} (indices are drawn from [0, plane)). `cpu` calls
the 2-D _v1 CPU targets, `cpu_v2` the _v2 ones, which also take `spatial_rank`. For each
case the child prints `START name`, then `DONE {json}` with the outcome: "error"
(exception type and message) or "result" (whether it equals the numpy oracle bit for
bit). `aclnn` calls the aclnn targets in host-emulation mode against the emulated CANN in
FAKE_CANN_DIR. `cpu_window` calls the CPU targets on window offsets: its cases also have
"window" (the pool's kernel_size, stride, padding, dilation, ceil_mode, passed as
attributes), their indices are offsets drawn from [0, plane) -- ops "forward" and
"backward" -- or flat indices converted to offsets -- op "window_indices", which also
passes "input_size" --, and the oracle decodes the offsets with numpy. (The pool targets'
calls: pool_boundary_calls.py.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/helpers/: the oracle
import numpy_oracle
from dtypes import bits

import jax_unpool as ju

jax.config.update("jax_enable_x64", True)  # int64 indices and float64 values as given

TARGETS = {
    "cpu": {"forward": "jax_unpool_max_unpool2d_v1",
            "backward": "jax_unpool_max_unpool2d_backward_v1"},
    "cpu_v2": {"forward": "jax_unpool_max_unpool_v2",
               "backward": "jax_unpool_max_unpool_backward_v2"},
    "cpu_window": {"forward": "jax_unpool_max_unpool_window_v1",
                   "backward": "jax_unpool_max_unpool_backward_window_v1",
                   "window_indices": "jax_unpool_window_offsets_v1"},
    "aclnn": {"forward": ju.npu.MAX_UNPOOL2D_TARGET,
              "forward_checked": ju.npu.MAX_UNPOOL2D_CHECKED_TARGET,
              "backward": ju.npu.MAX_UNPOOL2D_BACKWARD_TARGET,
              "forward3d": ju.npu.MAX_UNPOOL3D_TARGET,
              "backward3d": ju.npu.MAX_UNPOOL3D_BACKWARD_TARGET},
}


def spatial_sizes(shape, channels_last: bool, k: int) -> tuple[int, ...]:
    s = len(shape) - k - (1 if channels_last else 0)
    return tuple(shape[s:s + k])


def operands(case: dict, rng: np.random.Generator):
    (vshape, vdtype), (ishape, idtype) = case["values"], case["indices"]
    values = rng.standard_normal(vshape).astype(vdtype)
    indices = rng.integers(0, max(case["plane"], 1), ishape).astype(idtype)
    if "window" in case:
        indices = named_offsets(case, values, indices)
    if case["op"] == "window_indices":  # one operand: the flat positions of those offsets,
        w = case["window"]                 # or, for a plane past the taps, anywhere
        flat, _ = numpy_oracle.window_positions(
            indices, case["input_size"], *(w[n] for n in ("kernel_size", "stride", "padding",
                                                          "dilation")), case["channels_last"])
        taps = int(np.prod(w["kernel_size"]))
        values = (flat if case["plane"] <= taps else indices).astype(vdtype)
    return values, indices


def named_offsets(case: dict, values, offsets):
    """Offsets drawn from [0, taps), each that names no position of the plane moved to its
    window's first tap that does (cases whose offsets are meant to be valid)."""
    w, last = case["window"], case["channels_last"]
    window = [w[n] for n in ("kernel_size", "stride", "padding", "dilation")]
    taps = int(np.prod(w["kernel_size"]))
    k = len(w["kernel_size"])
    grid = case["input_size"] if case["op"] == "window_indices" else spatial_sizes(
        case["result"][0] if case["op"] == "forward" else values.shape, last, k)
    well_formed = (k <= 3 and all(len(v) == k for v in window) and len(grid) == k
                   and offsets.ndim in (k + 1, k + 2) and min(min(window[0]), *grid) > 0)
    if case["plane"] > taps or offsets.dtype != np.uint8 or not well_formed:
        return offsets
    plane = tuple(grid)

    def ok(o):
        flat, named = numpy_oracle.window_positions(o, plane, *window, last)
        return named & (flat < np.prod(plane))

    first = np.full(offsets.shape, -1)
    for tap in range(taps):
        first = np.where((first < 0) & ok(np.full(offsets.shape, tap)), tap, first)
    return np.where(ok(offsets) | (first < 0), offsets, first).astype(np.uint8)


def window_oracle(case: dict, values, indices):
    """The answer of a valid call on window offsets: the unpool or gather of the positions
    numpy decodes them to, or (window_indices) the flat indices as tap numbers."""
    w, last = case["window"], case["channels_last"]
    window = [w[n] for n in ("kernel_size", "stride", "padding", "dilation")]
    k = len(w["kernel_size"])
    if case["op"] == "window_indices":
        taps = numpy_oracle.window_offsets(indices, case["input_size"], *window, last)
        if (taps < 0).any():
            raise IndexError("an index outside its window")
        return taps.astype(np.uint8)
    plane = tuple(spatial_sizes(case["result"][0] if case["op"] == "forward" else values.shape,
                                last, k))
    flat, named = numpy_oracle.window_positions(indices, plane, *window, last)
    if not named.all() or (flat >= np.prod(plane)).any():
        raise IndexError("an offset that names no position")
    if case["op"] == "forward":
        return numpy_oracle.unpool_nd(values, flat, plane, last)
    return numpy_oracle.gather_nd(values, flat, k, last)


def oracle(case: dict, values, indices):
    """The answer a valid call must give, from numpy loops."""
    if "window" in case:
        return window_oracle(case, values, indices)
    rshape, k, last = tuple(case["result"][0]), case["spatial_rank"], case["channels_last"]
    if case["op"].startswith("forward"):
        return numpy_oracle.unpool_nd(values, indices, spatial_sizes(rshape, last, k), last)
    return numpy_oracle.gather_nd(values, indices, k, last)


def run_case(family: str, case: dict) -> dict:
    rng = np.random.default_rng(0)
    values, indices = operands(case, rng)
    shape, dtype = case["result"]
    call = jax.ffi.ffi_call(TARGETS[family][case["op"]],
                            jax.ShapeDtypeStruct(tuple(shape), np.dtype(dtype)))
    attributes = {} if case["op"].endswith("3d") else {"channels_last": case["channels_last"]}
    if family == "cpu_v2":
        attributes["spatial_rank"] = case["spatial_rank"]
    if family == "cpu_window":
        extra = {**case["window"], **({"input_size": case["input_size"]}
                                      if case["op"] == "window_indices" else {})}
        attributes.update({name: np.asarray(v, np.int64) if isinstance(v, list) else v
                           for name, v in extra.items()})
    args = (values,) if case["op"] == "window_indices" else (values, indices)
    try:
        got = np.asarray(call(*args, **attributes))
    except Exception as e:  # noqa: BLE001 -- reported to the parent, which judges it
        return {"error": type(e).__name__, "message": str(e)}
    try:
        want = None if got.size == 0 else oracle(case, values, values if case["op"] ==
                                                 "window_indices" else indices)
    except IndexError as e:  # an invalid call answered: no oracle for it
        return {"result": list(got.shape), "equal": False, "oracle": str(e)}
    equal = got.shape == tuple(shape) and got.dtype == np.dtype(dtype) and (
        want is None or np.array_equal(bits(got), bits(want)))
    return {"result": list(got.shape), "equal": bool(equal)}


def main(cases_path: str, family: str, fake_cann_dir: str | None = None) -> None:
    cases = json.loads(Path(cases_path).read_text())
    if family == "aclnn":
        ju.npu.register("cpu", fake_cann_dir)
    for case in cases:
        print("START", case["name"], flush=True)
        print("DONE", json.dumps({"name": case["name"], **run_case(family, case)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
