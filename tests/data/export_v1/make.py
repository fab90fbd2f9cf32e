"""Writes step.bin and operands.npz: a jax.export artifact of a training step through
every rank and layout, exported by jax_unpool 0.x at commit aaa78a1 -- the last release
whose CPU lowering called the 2-D `_v1` targets for every rank (1-D and 3-D on 2-D views
of their spatial dims). tests/integration/test_export.py runs it with today's jax_unpool, which must
keep those targets registered. Regenerating it needs that commit:

    git worktree add /tmp/v1 aaa78a1 && cd /tmp/v1 && pip install . &&
    python <this file> <this directory>
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np

import jax_unpool as ju

# (public function, its data_format, x shape, output spatial sizes)
CASES = [
    (ju.max_unpool2d, "NCHW", (2, 3, 4, 4), (8, 8)),
    (ju.max_unpool2d, "NHWC", (2, 4, 4, 3), (8, 8)),
    (ju.max_unpool1d, "NCW", (2, 3, 5), (10,)),
    (ju.max_unpool3d, "NCDHW", (2, 3, 2, 3, 3), (4, 6, 6)),
    (ju.max_unpool3d, "NDHWC", (2, 2, 3, 3, 3), (4, 6, 6)),
]


def step(*operands):
    """Per case (x, indices, weight): the loss sum(unpool(x) * weight) and its gradient
    w.r.t. x."""
    outs = []
    for (fn, fmt, _, size), k in zip(CASES, range(0, len(operands), 3)):
        x, indices, weight = operands[k:k + 3]
        outs.append(jax.value_and_grad(
            lambda x: (fn(x, indices, output_size=size, data_format=fmt) * weight).sum())(x))
    return outs


def operands():
    rng = np.random.default_rng(0)
    ops = []
    for _, fmt, shape, size in CASES:
        out_shape = list(shape)
        first = fmt.index(next(c for c in fmt if c not in "NC"))
        out_shape[first:first + len(size)] = size
        # Integer-valued floats: every sum is exact, whatever the order.
        ops += [rng.integers(-20, 20, size=shape).astype(np.float32),
                rng.integers(0, int(np.prod(size)), size=shape).astype(np.int32),
                rng.integers(-20, 20, size=out_shape).astype(np.float32)]
    return ops


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "helpers"))
    import exported_run

    ops = operands()
    exported_run.write(Path(sys.argv[1]), exported_run.export_for_cpu(step, ops), ops)
