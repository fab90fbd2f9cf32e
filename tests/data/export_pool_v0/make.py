"""Writes step.bin and operands.npz: a jax.export artifact of a training step through the
pools of every rank and layout (values, indices and the gradient), exported by jax_unpool
at commit 40e856d -- the last release whose pools were XLA ops (their gradient through the
unpool primitives' `_v2` targets where windows cannot overlap, XLA's scatter-add
otherwise). tests/integration/test_export.py runs it with today's jax_unpool and compares with today's
pools. Regenerating it needs that commit:

    git archive 40e856d | tar -x -C /tmp/v0 && cd /tmp/v0 && pip install . &&
    python <this file> <this directory>
"""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np

import jax_unpool as ju

# (public function, data_format, x shape, kernel_size, stride, padding, dilation, ceil_mode)
CASES = [
    (ju.max_pool2d_with_indices, "NCHW", (2, 3, 8, 8), 2, None, 0, 1, False),
    (ju.max_pool2d_with_indices, "NHWC", (2, 7, 7, 3), 3, 2, 1, 1, True),
    (ju.max_pool1d_with_indices, "NCW", (2, 3, 11), 3, 2, 1, 2, True),
    (ju.max_pool1d_with_indices, "NWC", (2, 10, 3), 2, None, 0, 1, False),
    (ju.max_pool3d_with_indices, "NCDHW", (2, 2, 4, 6, 6), 2, None, 0, 1, False),
    (ju.max_pool3d_with_indices, "NDHWC", (1, 5, 5, 5, 2), 3, 1, 1, 1, False),
]


def step(*operands):
    """Per case (x, weight): the pooled values and indices, and the gradient of
    sum(values * weight) w.r.t. x."""
    outs = []
    for (fn, fmt, _, *window), (x, weight) in zip(CASES, zip(operands[::2], operands[1::2])):
        def loss(x, fn=fn, fmt=fmt, window=window, weight=weight):
            values, indices = fn(x, *window, data_format=fmt)
            return (values * weight).sum(), (values, indices)
        (_, (values, indices)), grad = jax.value_and_grad(loss, has_aux=True)(x)
        outs += [values, indices, grad]
    return outs


def operands():
    rng = np.random.default_rng(0)
    ops = []
    for fn, fmt, shape, *window in CASES:
        # Small integers: ties everywhere, and every sum is exact whatever the order.
        x = rng.integers(-3, 3, size=shape).astype(np.float32)
        values, _ = fn(x, *window, data_format=fmt)
        ops += [x, rng.integers(-20, 20, size=values.shape).astype(np.float32)]
    return ops


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "helpers"))
    import exported_run

    ops = operands()
    exported_run.write(Path(sys.argv[1]), exported_run.export_for_cpu(step, ops), ops)
