"""One process of a data-parallel training step over several processes (JAX's
multi-controller runtime), each with two CPU devices, joined by gloo collectives.

Start one per process, same coordinator address, process ids 0..P-1:

    python tests/helpers/multiprocess_worker.py 127.0.0.1:12345 2 0 OUT_DIR   # process 0
    python tests/helpers/multiprocess_worker.py 127.0.0.1:12345 2 1 OUT_DIR   # process 1

Each process writes OUT_DIR/process<i>.json: the loss, the gradient, its device counts
and the collectives in the compiled step. `test_multiprocess.py` starts them and compares
with the same step in one process (`loss_and_grad` on the whole batch).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import numpy as np

LOCAL_DEVICES = 2
# 8 * 8 * 8 * 2 = 1024 elements (a power of two) of small integers: the mean and the
# gradient's sums are exact in float32 whatever the order of the additions.
SHAPE = (8, 8, 8, 2)  # NHWC, N split over every device of every process
COLLECTIVES = ("all-gather", "all-to-all", "collective-permute", "all-reduce",
               "reduce-scatter")


def data() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weights, x, target): per-channel weights, integer-valued images and targets."""
    rng = np.random.default_rng(0)
    x = rng.integers(-8, 8, size=SHAPE).astype(np.float32)
    target = rng.integers(-8, 8, size=SHAPE).astype(np.float32)
    return np.array([1.0, 2.0], np.float32), x, target


def loss_and_grad(w, x, target):
    """value_and_grad of an unpool-after-pool reconstruction loss w.r.t. the weights."""
    import jax

    import jax_unpool as ju

    def loss(w):
        y, idx = ju.max_pool2d_with_indices(x * w, 2, data_format="NHWC")
        return ((ju.max_unpool2d(y, idx, 2, data_format="NHWC") - target) ** 2).mean()

    return jax.value_and_grad(loss)(w)


def main(coordinator: str, num_processes: int, process_id: int, out_dir: Path) -> None:
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={LOCAL_DEVICES}"
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator, num_processes, process_id,
                               initialization_timeout=60)
    mesh = jax.make_mesh((jax.device_count(),), ("batch",))
    w, x, target = data()

    def global_array(a, spec):  # each process supplies its own devices' shards
        return jax.make_array_from_callback(a.shape, NamedSharding(mesh, spec),
                                            lambda index: a[index])

    args = (global_array(w, PartitionSpec()), global_array(x, PartitionSpec("batch")),
            global_array(target, PartitionSpec("batch")))
    step = jax.jit(loss_and_grad)
    hlo = step.lower(*args).compile().as_text()
    loss, grad = step(*args)
    result = {
        "local_devices": jax.local_device_count(), "devices": jax.device_count(),
        "loss": float(loss.addressable_data(0)),
        "grad": np.asarray(grad.addressable_data(0)).tolist(),
        "collectives": {op: len(re.findall(rf"\b{op}(?:-start)?\(", hlo))
                        for op in COLLECTIVES},
    }
    (out_dir / f"process{process_id}.json").write_text(json.dumps(result))
    jax.distributed.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
