"""The pools on 8 simulated CPU devices, split along N and C: saves, per case, the compiled
HLO of a step -- values and indices, and the gradient of sum(values * ct) -- with its
operands and results, for test_sharding.py, which runs it in a fresh process (the device
count is fixed before jax's backend starts) and imports it for CASES.

    python tests/helpers/sharded_pools.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

# name -> (data_format, x shape, window (kernel, stride, padding), partition spec, mesh)
CASES = {
    "NCHW-NC": ("NCHW", (8, 8, 6, 8), (2, 2, 0), ("a", "b"), "explicit"),
    "NCHW-N-auto": ("NCHW", (8, 8, 6, 8), (2, 2, 0), (("a", "b"),), "auto"),
    "NCHW-C-overlapping": ("NCHW", (8, 8, 6, 8), (3, 1, 1), (None, ("a", "b")), "explicit"),
    "NHWC-C": ("NHWC", (8, 6, 8, 8), (2, 2, 0), (None, None, None, ("a", "b")), "explicit"),
    "NHWC-NC-auto": ("NHWC", (8, 6, 8, 8), (2, 2, 0), ("a", None, None, "b"), "auto"),
    "HWC-C": ("HWC", (6, 8, 8), (3, 2, 1), (None, None, ("a", "b")), "explicit"),
    "NCW-NC": ("NCW", (8, 8, 10), (2, 2, 0), ("a", "b"), "explicit"),
    "NWC-C": ("NWC", (8, 10, 8), (3, 2, 1), (None, None, ("a", "b")), "explicit"),
    "NCDHW-N": ("NCDHW", (8, 2, 4, 4, 6), (2, 2, 0), (("a", "b"),), "explicit"),
    "NDHWC-NC": ("NDHWC", (8, 4, 4, 6, 8), (2, 2, 0), ("a", None, None, None, "b"),
                 "explicit"),
}


def main(out: Path) -> None:
    import jax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    import jax_unpool as ju

    meshes = {kind: jax.make_mesh((4, 2), ("a", "b"), axis_types=(axis_type,) * 2)
              for kind, axis_type in (("explicit", AxisType.Explicit), ("auto", AxisType.Auto))}
    rng = np.random.default_rng(0)
    specs = {}
    for name, (fmt, shape, window, spec, kind) in CASES.items():
        pool = getattr(ju, f"max_pool{sum(d in 'DHW' for d in fmt)}d_with_indices")
        x = rng.integers(-50, 50, size=shape).astype(np.float32)  # sums are exact
        values, _ = pool(x, *window, data_format=fmt)
        ct = rng.integers(-50, 50, size=values.shape).astype(np.float32)
        sharding = NamedSharding(meshes[kind], PartitionSpec(*spec))

        def step(x, ct, pool=pool, window=window, fmt=fmt):
            (values, indices), vjp = jax.vjp(lambda v: pool(v, *window, data_format=fmt), x)
            return values, indices, vjp((ct, np.zeros(indices.shape, jax.dtypes.float0)))[0]

        placed = [jax.device_put(a, sharding) for a in (x, ct)]
        compiled = jax.jit(step).lower(*placed).compile()
        values, indices, grad = compiled(*placed)
        (out / f"{name}.hlo.txt").write_text(compiled.as_text())
        np.savez(out / f"{name}.npz", x=x, ct=ct, values=np.asarray(values),
                 indices=np.asarray(indices), grad=np.asarray(grad))
        specs[name] = [list(a.sharding.spec) for a in (values, indices, grad)]
    (out / "specs.json").write_text(json.dumps(specs))


if __name__ == "__main__":
    # Before jax's backend starts (the test process imports this file for CASES only).
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    main(Path(sys.argv[1]))
