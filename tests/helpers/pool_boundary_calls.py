"""Direct `jax.ffi.ffi_call`s to the pool targets, in a child process of
tests/native/test_pool_ffi_boundary.py, so that a crash fails the case it happened in, not the suite.

    python tests/helpers/pool_boundary_calls.py CASES.json cpu
    python tests/helpers/pool_boundary_calls.py CASES.json cpu_window
    python tests/helpers/pool_boundary_calls.py CASES.json aclnn FAKE_CANN_DIR

CASES.json is a list of {"name", "x": [shape, dtype], "values": [shape, dtype], "indices":
[shape, dtype], "attributes": {name: value}} where a list value is passed as an int64
array (as the CPU lowering passes the window) and anything else as is. `cpu` calls the CPU
pool target, `cpu_window` the CPU pool target writing window offsets (its oracle: the numpy
pool's indices as tap numbers); `aclnn` the aclnn pool target of the window's rank (the 3-D one for 3
kernel_size entries, else the 2-D one) in host-emulation mode against the emulated CANN
in FAKE_CANN_DIR. For each case the child prints `START name`, then `DONE {json}` with the
outcome: "error" (exception type and message) or "result" (whether values and indices
equal the numpy oracle's, bit for bit).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/helpers/: the oracle
import numpy_oracle
from dtypes import bits

import jax_unpool as ju
from jax_unpool.backends import cpu

jax.config.update("jax_enable_x64", True)  # int64 indices and float64 values as given


def operand(shape, dtype, rng: np.random.Generator) -> np.ndarray:
    """Small integers (ties), NaN and -inf where the dtype has them; any bits for float8."""
    dtype = np.dtype(jnp.dtype(dtype))
    if dtype == np.bool_:
        return rng.random(shape) < 0.3
    if dtype.kind in "iu":
        return rng.integers(0, 5, shape).astype(dtype)
    if dtype.itemsize == 1:  # the float8 formats: every code, NaNs included
        return rng.integers(0, 256, shape, dtype=np.uint8).view(dtype)
    x = rng.integers(-3, 3, shape).astype(np.float64)
    x[rng.random(shape) < 0.1] = np.nan
    x[rng.random(shape) < 0.1] = -np.inf
    return x.astype(dtype)


def target(family: str, attributes: dict) -> str:
    if family == "cpu":
        return cpu.MAX_POOL_TARGET
    if family == "cpu_window":
        return cpu.MAX_POOL_WINDOW_TARGET
    kernel = attributes.get("kernel_size")
    three = isinstance(kernel, list) and len(kernel) == 3
    return ju.npu.MAX_POOL3D_TARGET if three else ju.npu.MAX_POOL2D_TARGET


def run_case(family: str, case: dict) -> dict:
    x = operand(*case["x"], np.random.default_rng(0))
    results = tuple(jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))
                    for shape, dtype in (case["values"], case["indices"]))
    attributes = {name: np.asarray(v, np.int64) if isinstance(v, list) else v
                  for name, v in case["attributes"].items()}
    try:
        call = jax.ffi.ffi_call(target(family, case["attributes"]), results)
        values, indices = (np.asarray(r) for r in call(x, **attributes))
    except Exception as e:  # noqa: BLE001 -- reported to the parent, which judges it
        # By its public name: jax 0.7's jax.errors.JaxRuntimeError is jaxlib's XlaRuntimeError.
        name = "JaxRuntimeError" if isinstance(e, jax.errors.JaxRuntimeError) else \
            type(e).__name__
        return {"error": name, "message": str(e)}
    a = case["attributes"]
    want_values, want_indices = numpy_oracle.max_pool(
        x, a["kernel_size"], a["stride"], a["padding"], a["dilation"], a["ceil_mode"],
        a["channels_last"])
    if family == "cpu_window":  # the argmax as its tap number (0 for a window of padding only)
        k = len(a["kernel_size"])
        s = x.ndim - k - (1 if a["channels_last"] else 0)
        want_indices = numpy_oracle.window_offsets(
            want_indices, x.shape[s:s + k], a["kernel_size"], a["stride"], a["padding"],
            a["dilation"], a["channels_last"])
    equal = (values.shape == want_values.shape and values.dtype == x.dtype
             and np.array_equal(bits(values), bits(want_values))
             and np.array_equal(indices, want_indices))
    return {"result": [list(values.shape), list(indices.shape)], "equal": bool(equal)}


def main(cases_path: str, family: str, fake_cann_dir: str | None = None) -> None:
    if family == "aclnn":
        ju.npu.register("cpu", fake_cann_dir)
    for case in json.loads(Path(cases_path).read_text()):
        print("START", case["name"], flush=True)
        print("DONE", json.dumps({"name": case["name"], **run_case(family, case)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
