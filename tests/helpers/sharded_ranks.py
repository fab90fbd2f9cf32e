"""1-D and 3-D unpooling on 4 simulated CPU devices, split along N and C: saves, per
case, the compiled HLO of a forward + gradient step and its results; and the same step
under `jax.shard_map` with one operand replicated (SHARD_MAP_CASES). For test_sharding.py.

    python tests/helpers/sharded_ranks.py OUT_DIR
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec  # noqa: E402

import jax_unpool as ju  # noqa: E402

# name -> (data_format, pooled shape, output size, partition spec)
CASES = {
    "NCW-N": ("NCW", (4, 4, 5), (10,), ("a",)),
    "NCW-NC": ("NCW", (4, 4, 5), (10,), ("a", "b")),
    "NWC-N": ("NWC", (4, 5, 4), (10,), ("a",)),
    "NCDHW-N": ("NCDHW", (4, 4, 2, 3, 2), (4, 6, 4), ("a",)),
    "NCDHW-NC": ("NCDHW", (4, 4, 2, 3, 2), (4, 6, 4), ("a", "b")),
    "NDHWC-N": ("NDHWC", (4, 2, 3, 2, 4), (4, 6, 4), ("a",)),
    # Channels last split along C (test_sharding.py)
    "NWC-C": ("NWC", (4, 5, 4), (10,), (None, None, ("a", "b"))),
    "NWC-NC": ("NWC", (4, 5, 4), (10,), ("a", None, "b")),
    "NDHWC-C": ("NDHWC", (4, 2, 3, 2, 4), (4, 6, 4), (None, None, None, None, ("a", "b"))),
    "NDHWC-NC": ("NDHWC", (4, 2, 3, 2, 4), (4, 6, 4), ("a", None, None, None, "b")),
}


# name -> (data_format, pooled shape, output size, the operand replicated over the devices
# while the other is split along N)
SHARD_MAP_CASES = {
    "shard_map-NCW-x": ("NCW", (4, 2, 5), (10,), "x"),
    "shard_map-NDHWC-indices": ("NDHWC", (4, 2, 3, 2, 2), (4, 6, 4), "indices"),
}


def shard_map_cases(out: Path) -> None:
    """The VJP of a replicated x is the sum of every device's gradient (shard_map
    transposes its implicit broadcast to a psum): the operands of the primitive must vary
    over the same axes when it is bound."""
    from jax.sharding import PartitionSpec as P

    mesh = jax.make_mesh((4,), ("d",))
    rng = np.random.default_rng(1)
    for name, (fmt, shape, size, replicated) in SHARD_MAP_CASES.items():
        unpool = ju.max_unpool1d if len(size) == 1 else ju.max_unpool3d
        x = rng.integers(-50, 50, size=shape).astype(np.float32)
        idx = rng.integers(0, int(np.prod(size)), size=shape).astype(np.int32)
        if replicated == "x":
            x, x_spec, grad_spec = x[:1], P(), P()
        else:
            idx, x_spec, grad_spec = idx[:1], P("d"), P("d")
        i_spec = P() if replicated == "indices" else P("d")
        big = (shape[0], *size, shape[-1]) if fmt.endswith("C") else (*shape[:2], *size)
        ct = rng.integers(-50, 50, size=big).astype(np.float32)

        def step(x, i, ct, fmt=fmt, size=size, unpool=unpool):
            y, vjp = jax.vjp(lambda x: unpool(x, i, output_size=size, data_format=fmt), x)
            return y, vjp(ct)[0]

        in_specs = (x_spec, i_spec, P("d"))
        args = [jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, idx, ct), in_specs)]
        body = jax.shard_map(step, mesh=mesh, in_specs=in_specs, out_specs=(P("d"), grad_spec))
        y, g = jax.jit(body)(*args)
        np.savez(out / f"{name}.npz", x=x, indices=idx, ct=ct, y=np.asarray(y),
                 g=np.asarray(g))


def main(out: Path) -> None:
    mesh = jax.make_mesh((2, 2), ("a", "b"), axis_types=(jax.sharding.AxisType.Explicit,) * 2)
    rng = np.random.default_rng(0)
    for name, (fmt, shape, size, spec) in CASES.items():
        unpool = ju.max_unpool1d if len(size) == 1 else ju.max_unpool3d
        x = rng.integers(-50, 50, size=shape).astype(np.float32)
        idx = rng.integers(0, int(np.prod(size)), size=shape).astype(np.int32)
        sharding = NamedSharding(mesh, PartitionSpec(*spec))

        def step(x, i, fmt=fmt, size=size, unpool=unpool):
            y, vjp = jax.vjp(lambda x: unpool(x, i, output_size=size, data_format=fmt), x)
            return y, vjp(y * 2)[0]

        xs, js = jax.device_put(x, sharding), jax.device_put(idx, sharding)
        compiled = jax.jit(step).lower(xs, js).compile()
        y, g = compiled(xs, js)
        (out / f"{name}.hlo.txt").write_text(compiled.as_text())
        np.savez(out / f"{name}.npz", x=x, indices=idx, y=np.asarray(y), g=np.asarray(g),
                 same_sharding=y.sharding.spec[:len(spec)] == tuple(spec))
    shard_map_cases(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
