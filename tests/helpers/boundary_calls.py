"""Direct `jax.ffi.ffi_call`s to the registered targets, in a child process of
tests/native/test_ffi_boundary.py, so that a crash fails the case it happened in, not the suite.

    python tests/helpers/boundary_calls.py CASES.json cpu
    python tests/helpers/boundary_calls.py CASES.json cpu_v2
    python tests/helpers/boundary_calls.py CASES.json aclnn FAKE_CANN_DIR
    python tests/helpers/boundary_calls.py CASES.json aclnn_pool FAKE_CANN_DIR

CASES.json is a list of {"name", "op" ("forward"/"backward", or "forward3d"/"backward3d":
the aclnn 3-D targets, which take no attribute), "values": [shape, dtype], "indices":
[shape, dtype], "result": [shape, dtype], "channels_last", "spatial_rank", "plane"}
(indices are drawn from [0, plane)). `cpu` calls the 2-D _v1 CPU targets, `cpu_v2` the
_v2 ones, which also take `spatial_rank`. For each case the child prints `START name`, then
`DONE {json}` with the outcome: "error" (exception type and message) or "result" (whether
it equals the numpy oracle bit for bit). `aclnn` calls the aclnn targets in host-emulation
mode against the emulated CANN in FAKE_CANN_DIR.

`aclnn_pool` calls the aclnn pool targets: a case is {"name", "k" (2 or 3), "x": [shape,
dtype], "values": [shape, dtype], "indices": [shape, dtype], "attributes": {name: value}}
(lists become int64 arrays); a valid call's answer is compared with PyTorch's.
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

jax.config.update("jax_enable_x64", True)  # int64 indices and float64 values as given

TARGETS = {
    "cpu": {"forward": "jax_unpool_max_unpool2d_v1",
            "backward": "jax_unpool_max_unpool2d_backward_v1"},
    "cpu_v2": {"forward": "jax_unpool_max_unpool_v2",
               "backward": "jax_unpool_max_unpool_backward_v2"},
    "aclnn": {"forward": ju.npu.MAX_UNPOOL2D_TARGET,
              "backward": ju.npu.MAX_UNPOOL2D_BACKWARD_TARGET,
              "forward3d": ju.npu.MAX_UNPOOL3D_TARGET,
              "backward3d": ju.npu.MAX_UNPOOL3D_BACKWARD_TARGET,
              "pool2d": ju.npu.MAX_POOL2D_TARGET, "pool3d": ju.npu.MAX_POOL3D_TARGET},
}


def spatial_sizes(shape, channels_last: bool, k: int) -> tuple[int, ...]:
    s = len(shape) - k - (1 if channels_last else 0)
    return tuple(shape[s:s + k])


def operands(case: dict, rng: np.random.Generator):
    (vshape, vdtype), (ishape, idtype) = case["values"], case["indices"]
    values = rng.standard_normal(vshape).astype(vdtype)
    indices = rng.integers(0, max(case["plane"], 1), ishape).astype(idtype)
    return values, indices


def oracle(case: dict, values, indices):
    """The answer a valid call must give, from numpy loops."""
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
    try:
        got = np.asarray(call(values, indices, **attributes))
    except Exception as e:  # noqa: BLE001 -- reported to the parent, which judges it
        return {"error": type(e).__name__, "message": str(e)}
    try:
        want = None if got.size == 0 else oracle(case, values, indices)
    except IndexError as e:  # an invalid call answered: no oracle for it
        return {"result": list(got.shape), "equal": False, "oracle": str(e)}
    equal = got.shape == tuple(shape) and got.dtype == np.dtype(dtype) and (
        want is None or np.array_equal(bits(got), bits(want)))
    return {"result": list(got.shape), "equal": bool(equal)}


def run_pool_case(case: dict) -> dict:
    (xshape, xdtype), k = case["x"], case["k"]
    x = np.random.default_rng(0).standard_normal(xshape).astype(jnp.dtype(xdtype))
    results = tuple(jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(dtype))
                    for shape, dtype in (case["values"], case["indices"]))
    attributes = {name: np.asarray(v, np.int64) if isinstance(v, list) else v
                  for name, v in case["attributes"].items()}
    call = jax.ffi.ffi_call(TARGETS["aclnn"][f"pool{k}d"], results)
    try:
        values, indices = (np.asarray(r) for r in call(x, **attributes))
    except Exception as e:  # noqa: BLE001 -- reported to the parent, which judges it
        return {"error": type(e).__name__, "message": str(e)}
    equal = values.size == 0
    if not equal:  # PyTorch's values and indices (float32 compute: exact)
        import torch_oracle  # the tests of valid calls are marked needs_torch

        a = case["attributes"]
        want_values, want_indices = torch_oracle.torch_pool(
            k, x.astype(np.float32),
            *(tuple(a[n]) for n in ("kernel_size", "stride", "padding", "dilation")),
            a["ceil_mode"], channels_last=a["channels_last"])
        equal = (np.array_equal(bits(values), bits(want_values.astype(x.dtype)))
                 and np.array_equal(indices, want_indices.astype(indices.dtype)))
    return {"result": list(values.shape), "equal": bool(equal)}


def main(cases_path: str, family: str, fake_cann_dir: str | None = None) -> None:
    cases = json.loads(Path(cases_path).read_text())
    if family.startswith("aclnn"):
        ju.npu.register("cpu", fake_cann_dir)
    run = run_pool_case if family == "aclnn_pool" else lambda case: run_case(family, case)
    for case in cases:
        print("START", case["name"], flush=True)
        print("DONE", json.dumps({"name": case["name"], **run(case)}), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
