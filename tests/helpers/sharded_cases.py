"""Runs both ops on 8 simulated CPU devices and saves what the tests check.

The device count must be fixed before jax's backend starts, and the rest of the test
suite starts it with one device, so `test_sharding.py` runs this file in a fresh process:

    python tests/helpers/sharded_cases.py OUT_DIR

For every case in CASES it compiles a step -- an op and its VJP, i.e. the forward and the
gradient -- with the operands placed by a NamedSharding, then saves into OUT_DIR:
`<case>.hlo.txt` (the compiled, partitioned HLO), `<case>.npz` (the operands and the
results) and an entry of `results.json` (the shardings the results came back with).
VMAP_CASES do the same under `jax.vmap` (`vmap.<case>...`), SHARD_MAP_CASES for
`jax.shard_map` with a replicated operand. Comparing the
results against numpy is left to the tests.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

DEVICES = 8
MESH_AXES = ("a", "b")  # 4 x 2
N, C, H, W = 8, 8, 4, 4  # each 8-way splittable; the unpooled plane is 8 x 8
OUTPUT_HW = (8, 8)

# name -> (data_format, partition spec of the rank-3/4 operands, mesh axis type)
# "N", "C", "NC" name the plane dims the operands are split along; "H" a spatial one.
CASES = {
    "NCHW-N": ("NCHW", (("a", "b"),), "explicit"),
    "NCHW-C": ("NCHW", (None, ("a", "b")), "explicit"),
    "NCHW-NC": ("NCHW", ("a", "b"), "explicit"),
    "NCHW-N-auto": ("NCHW", (("a", "b"),), "auto"),
    "NCHW-C-auto": ("NCHW", (None, ("a", "b")), "auto"),
    "NCHW-NC-auto": ("NCHW", ("a", "b"), "auto"),
    "NHWC-N": ("NHWC", (("a", "b"),), "explicit"),
    "CHW-C": ("CHW", (("a", "b"),), "explicit"),
    "NHWC-C": ("NHWC", (None, None, None, ("a", "b")), "explicit"),
    "NHWC-NC": ("NHWC", ("a", None, None, "b"), "explicit"),
    "HWC-C": ("HWC", (None, None, ("a", "b")), "explicit"),
    "NHWC-C-auto": ("NHWC", (None, None, None, ("a", "b")), "auto"),
    "NHWC-NC-auto": ("NHWC", ("a", None, None, "b"), "auto"),
    "HWC-C-auto": ("HWC", (None, None, ("a", "b")), "auto"),
    "NCHW-H": ("NCHW", (None, None, "a"), "explicit"),
    "NCHW-H-auto": ("NCHW", (None, None, "a"), "auto"),
    "NHWC-H": ("NHWC", (None, "a"), "explicit"),
    "NHWC-CH": ("NHWC", (None, "a", None, "b"), "explicit"),
}
# Cases split along plane dims only: the partitioned calls need no communication at all.
COLLECTIVE_FREE = ["NCHW-N", "NCHW-C", "NCHW-NC", "NCHW-N-auto", "NCHW-C-auto",
                   "NCHW-NC-auto", "NHWC-N", "CHW-C", "NHWC-C", "NHWC-NC", "HWC-C",
                   "NHWC-C-auto", "NHWC-NC-auto", "HWC-C-auto"]
OPS = ["max_unpool2d", "max_unpool2d_backward"]

# vmap over a batch of 3 operand sets whose inner dims are split on an explicit mesh:
# name -> (data_format, partition spec of the (B, ...) operands). B itself is whole.
VMAP_BATCH = 3
VMAP_CASES = {
    "NCHW-N": ("NCHW", (None, ("a", "b"))),
    "NCHW-NC": ("NCHW", (None, "a", "b")),
    "NHWC-NC": ("NHWC", (None, "a", None, None, "b")),
}

# name -> (op, which operand is replicated while the other varies over the devices)
SHARD_MAP_CASES = {
    "unpool-replicated-indices": ("max_unpool2d", "indices"),
    "unpool-replicated-x": ("max_unpool2d", "values"),
    "backward-replicated-indices": ("max_unpool2d_backward", "indices"),
    "backward-replicated-grad_output": ("max_unpool2d_backward", "values"),
}


def shapes(data_format: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(pooled shape, unpooled shape) in the given layout."""
    small, big = {"NCHW": ((N, C, H, W), (N, C, *OUTPUT_HW)),
                  "NHWC": ((N, H, W, C), (N, *OUTPUT_HW, C)),
                  "CHW": ((C, H, W), (C, *OUTPUT_HW)),
                  "HWC": ((H, W, C), (*OUTPUT_HW, C))}[data_format]
    return small, big


def operands(data_format: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Integer-valued float32 values (sums over devices are exact), indices with
    duplicates, and cotangents for both ops."""
    rng = np.random.default_rng(seed)
    small, big = shapes(data_format)
    return {
        "x": rng.integers(-50, 50, size=small).astype(np.float32),
        "indices": rng.integers(0, OUTPUT_HW[0] * OUTPUT_HW[1], size=small).astype(np.int32),
        "grad_output": rng.integers(-50, 50, size=big).astype(np.float32),
        "ct_small": rng.integers(-50, 50, size=small).astype(np.float32),
    }


def _padded_spec(sharding, ndim: int) -> list:
    spec = list(sharding.spec) + [None] * (ndim - len(sharding.spec))
    return [list(e) if isinstance(e, tuple) else e for e in spec]


def _steps(ju, jax, data_format: str):
    """op name -> step(values, indices, cotangent) = (op(values), d<loss>/d values),
    the VJP with the given cotangent (a sum of it would add an all-reduce of the loss)."""
    def unpool_step(x, indices, ct):
        out, pullback = jax.vjp(lambda v: ju.max_unpool2d(
            v, indices, output_size=OUTPUT_HW, data_format=data_format), x)
        return out, pullback(ct)[0]

    def backward_step(grad_output, indices, ct):
        like = jax.ShapeDtypeStruct(indices.shape, grad_output.dtype)
        out, pullback = jax.vjp(lambda g: ju.max_unpool2d_backward(
            g, like, indices, OUTPUT_HW, data_format=data_format), grad_output)
        return out, pullback(ct)[0]

    return {"max_unpool2d": unpool_step, "max_unpool2d_backward": backward_step}


def _step_operands(op: str, ops: dict[str, np.ndarray]):
    if op == "max_unpool2d":
        return ops["x"], ops["indices"], ops["grad_output"]
    return ops["grad_output"], ops["indices"], ops["ct_small"]


def run_cases(out_dir: Path) -> dict:
    import jax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    import jax_unpool as ju

    meshes = {kind: jax.make_mesh((4, 2), MESH_AXES, axis_types=(axis_type,) * 2)
              for kind, axis_type in (("explicit", AxisType.Explicit),
                                      ("auto", AxisType.Auto))}
    results = {}
    for name, (data_format, spec, kind) in CASES.items():
        ops = operands(data_format)
        steps = _steps(ju, jax, data_format)
        for op in OPS:
            values, indices, ct = _step_operands(op, ops)
            # Values and indices share the plane dims; the big operand (grad_output) of
            # the backward gets the same spec: H/W entries name different sizes there.
            placed = [jax.device_put(a, NamedSharding(meshes[kind], PartitionSpec(*spec)))
                      for a in (values, indices, ct)]
            step = jax.jit(steps[op])
            hlo = step.lower(*placed).compile().as_text()
            out, grad = step(*placed)
            key = f"{name}.{op}"
            (out_dir / f"{key}.hlo.txt").write_text(hlo)
            np.savez(out_dir / f"{key}.npz", values=values, indices=indices, ct=ct,
                     out=np.asarray(out), grad=np.asarray(grad))
            results[key] = {
                "in_spec": _padded_spec(placed[0].sharding, values.ndim),
                "out_spec": _padded_spec(out.sharding, out.ndim),
                "grad_spec": _padded_spec(grad.sharding, grad.ndim),
            }
    return results


def run_vmap_cases(out_dir: Path) -> dict:
    """Each VMAP_CASES entry: the step of both ops under jax.vmap, its compiled HLO, its
    results and the shardings they came back with."""
    import jax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    import jax_unpool as ju

    mesh = jax.make_mesh((4, 2), MESH_AXES, axis_types=(AxisType.Explicit,) * 2)
    results = {}
    for name, (data_format, spec) in VMAP_CASES.items():
        steps = _steps(ju, jax, data_format)
        batches = [operands(data_format, seed) for seed in range(VMAP_BATCH)]
        for op in OPS:
            stacked = [np.stack(a) for a in zip(*(_step_operands(op, b) for b in batches))]
            placed = [jax.device_put(a, NamedSharding(mesh, PartitionSpec(*spec)))
                      for a in stacked]
            step = jax.jit(jax.vmap(steps[op]))
            key = f"vmap.{name}.{op}"
            (out_dir / f"{key}.hlo.txt").write_text(step.lower(*placed).compile().as_text())
            out, grad = step(*placed)
            np.savez(out_dir / f"{key}.npz", values=stacked[0], indices=stacked[1],
                     ct=stacked[2], out=np.asarray(out), grad=np.asarray(grad))
            results[key] = {
                "in_spec": _padded_spec(placed[0].sharding, stacked[0].ndim),
                "out_spec": _padded_spec(out.sharding, out.ndim),
                "grad_spec": _padded_spec(grad.sharding, grad.ndim),
            }
    return results


def run_shard_map_cases(out_dir: Path) -> dict:
    """One operand split over 8 devices along N, the other replicated (one plane set
    shared by all); the VJP w.r.t. the values. A replicated values operand gets the sum
    of every device's gradient (shard_map transposes its implicit broadcast to a psum)."""
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jax_unpool as ju

    mesh = jax.make_mesh((DEVICES,), ("d",))
    steps = _steps(ju, jax, "NCHW")
    results = {}
    for name, (op, replicated) in SHARD_MAP_CASES.items():
        values, indices, ct = _step_operands(op, operands("NCHW", seed=1))
        if replicated == "indices":
            indices = indices[:1]
            in_specs, grad_spec = (P("d"), P(), P("d")), P("d")
        else:
            values = values[:1]
            in_specs, grad_spec = (P(), P("d"), P("d")), P()
        args = [jax.device_put(a, NamedSharding(mesh, s))
                for a, s in zip((values, indices, ct), in_specs)]
        body = jax.shard_map(steps[op], mesh=mesh, in_specs=in_specs,
                             out_specs=(P("d"), grad_spec))
        out, grad = jax.jit(body)(*args)
        np.savez(out_dir / f"shard_map.{name}.npz", values=values, indices=indices, ct=ct,
                 out=np.asarray(out), grad=np.asarray(grad))
        results[name] = {"grad_spec": _padded_spec(grad.sharding, grad.ndim)}
    return results


def main(out_dir: str) -> None:
    import jax

    jax.config.update("jax_num_cpu_devices", DEVICES)
    if len(jax.devices()) != DEVICES:
        sys.exit(f"expected {DEVICES} CPU devices, got {jax.devices()}")
    out = Path(out_dir)
    results = {"cases": run_cases(out), "vmap": run_vmap_cases(out),
               "shard_map": run_shard_map_cases(out)}
    (out / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1])
