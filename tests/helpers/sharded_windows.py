"""Window offsets on 8 simulated CPU devices, split along N and C: saves, per case, the
compiled HLO of a train-like step -- pool with index_format="window", unpool with the
WindowIndices, the gradient of sum(unpooled * ct) -- and its results beside the same step
with flat indices, for test_window_sharding.py, which runs it in a fresh process (the
device count is fixed before jax's backend starts).

    python tests/helpers/sharded_windows.py OUT_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

# name -> (data_format, x shape, window (kernel, stride, padding), partition spec)
CASES = {
    "NCHW-NC": ("NCHW", (8, 8, 6, 8), (2, 2, 0), ("a", "b")),
    "NCHW-C-overlapping": ("NCHW", (8, 8, 6, 8), (3, 1, 1), (None, ("a", "b"))),
    "NHWC-NC": ("NHWC", (8, 6, 8, 8), (2, 2, 0), ("a", None, None, "b")),
    "NCW-N": ("NCW", (8, 2, 10), (3, 2, 1), (("a", "b"),)),
    "NDHWC-C": ("NDHWC", (2, 4, 4, 6, 8), (2, 2, 0), (None, None, None, None, ("a", "b"))),
}


def main(out: Path) -> None:
    import jax
    from jax.sharding import AxisType, NamedSharding, PartitionSpec

    import jax_unpool as ju

    mesh = jax.make_mesh((4, 2), ("a", "b"), axis_types=(AxisType.Explicit,) * 2)
    rng = np.random.default_rng(0)
    for name, (fmt, shape, (kernel, stride, padding), spec) in CASES.items():
        k = sum(d in "DHW" for d in fmt)
        pool, unpool = getattr(ju, f"max_pool{k}d_with_indices"), getattr(ju, f"max_unpool{k}d")
        x = rng.integers(-50, 50, size=shape).astype(np.float32)  # sums are exact
        ct = rng.integers(-50, 50, size=shape).astype(np.float32)
        sharding = NamedSharding(mesh, PartitionSpec(*spec))

        def step(x, ct, index_format, pool=pool, unpool=unpool, fmt=fmt, kernel=kernel,
                 stride=stride, padding=padding):
            def loss(x):
                values, idx = pool(x, kernel, stride, padding, data_format=fmt,
                                   index_format=index_format)
                if index_format == "window":
                    up = unpool(values, idx)
                else:
                    up = unpool(values, idx, kernel, stride, padding, output_size=x.shape,
                                data_format=fmt)
                return (up * ct).sum(), up
            (_, up), grad = jax.value_and_grad(loss, has_aux=True)(x)
            return up, grad

        placed = [jax.device_put(a, sharding) for a in (x, ct)]
        results = {}
        for index_format in ("window", "flat"):
            compiled = jax.jit(step, static_argnums=2).lower(*placed, index_format).compile()
            up, grad = compiled(*placed)  # the static format is compiled in
            (out / f"{name}-{index_format}.hlo.txt").write_text(compiled.as_text())
            results[f"{index_format}_up"], results[f"{index_format}_grad"] = (
                np.asarray(up), np.asarray(grad))
            results[f"{index_format}_spec"] = np.array(str(grad.sharding.spec))
        np.savez(out / f"{name}.npz", **results)


if __name__ == "__main__":
    # Before jax's backend starts (the test process imports this file for CASES only).
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    main(Path(sys.argv[1]))
