"""Trace-time cost and program size do not grow with the input: an exported pool (and its
gradient) for ("cpu", "tpu") serializes to the same few kilobytes at 4 Ki and at 4 Mi
elements, every rank, the XLA-ops lowering (the TPU's) included; and `jax.eval_shape` of a
W = 2**31 - 1 pool, the largest PyTorch's int32 sizes allow, takes under 50 MB and a
second (issue 37: the old per-window tables took over 23 GiB there)."""

from __future__ import annotations

import json
import os
import re

import fresh_process
import jax
import jax.numpy as jnp
import pytest

import jax_unpool as ju

POOLS = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
         3: ju.max_pool3d_with_indices}
# Spatial shapes of 4 Ki and 4 Mi elements per rank.
SMALL = {1: (2**12,), 2: (2**6, 2**6), 3: (2**4, 2**4, 2**4)}
LARGE = {1: (2**22,), 2: (2**11, 2**11), 3: (160, 160, 164)}
# (kernel_size, stride, padding, dilation, ceil_mode): plain, padded and dilated (initial
# indices moved past the padding), and more taps than the unrolled loop takes (a fori_loop).
WINDOWS = {"2": (2, None, 0, 1, False), "3s2p1d2ceil": (3, 2, 1, 2, True),
           "81taps": (81, 3, 40, 1, False)}
# What a size's digits may add to an artifact (its shapes, in a few places).
SLACK_BYTES = 256


def _step(k: int, window: tuple, data_format: str):
    def step(x):
        values, indices = POOLS[k](x, *window, data_format=data_format)
        grad = jax.grad(lambda x: POOLS[k](x, *window, data_format=data_format)[0].sum())(x)
        return values, indices, grad
    return step


def _shape(spatial: tuple, channels_last: bool) -> tuple:
    return (1, *spatial, 3) if channels_last else (1, 3, *spatial)


def _artifact(k: int, window: tuple, spatial: tuple, channels_last: bool,
              platforms: tuple) -> jax.export.Exported:
    fmt = ("N" + "DHW"[3 - k:] + "C") if channels_last else ("NC" + "DHW"[3 - k:])
    x = jax.ShapeDtypeStruct(_shape(spatial, channels_last), jnp.float32)
    return jax.export.export(jax.jit(_step(k, window, fmt)), platforms=platforms,
                             disabled_checks=ju.export_safety_checks())(x)


@pytest.mark.parametrize("channels_last", [False, True], ids=["first", "last"])
@pytest.mark.parametrize("window", WINDOWS.values(), ids=WINDOWS.keys())
@pytest.mark.parametrize("k", [1, 2, 3])
def test_an_exported_pool_and_gradient_has_the_same_size_for_every_input_size(
        k, window, channels_last):
    small, large = (_artifact(k, window, spatial, channels_last, ("cpu", "tpu"))
                    for spatial in (SMALL[k], LARGE[k]))
    small_bytes, large_bytes = len(small.serialize()), len(large.serialize())
    assert large_bytes - small_bytes <= SLACK_BYTES, (small_bytes, large_bytes)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_the_xla_ops_pool_lowers_to_text_of_the_same_length_for_every_input_size(k):
    """The TPU's lowering alone (XLA ops, no FFI call), numbers read as one digit (sizes
    are spelled in every op's type): 134 million characters at W=2**24 when it held a
    table per tap."""
    window = WINDOWS["3s2p1d2ceil"]
    small, large = (re.sub(r"\d+", "0", _artifact(k, window, spatial, False, ("tpu",))
                           .mlir_module()) for spatial in (SMALL[k], LARGE[k]))
    assert "custom_call" not in large
    assert len(large) == len(small)


# A fresh process: eval_shape at W = 2**31 - 1 after a warm-up at W = 64, so that jax's
# own first-trace costs are not counted. Its address space is capped 2 GiB above the
# warmed-up one, so that a regression fails with a MemoryError instead of taking the
# machine's memory. The peak is the kernel's VmHWM of the process itself (getrusage's
# ru_maxrss may keep the parent's peak across fork and exec).
_EVAL_SHAPE = """
import json, resource, sys, time
import jax, jax.numpy as jnp
import jax_unpool as ju

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(field))

kernel, stride, padding, dilation, ceil_mode = json.loads(sys.argv[1])
def f(x):
    if x.dtype == jnp.uint8:
        return ju.max_pool1d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
    return jax.grad(lambda x: ju.max_pool1d_with_indices(
        x, kernel, stride, padding, dilation, ceil_mode)[0].sum())(x)

for dtype in (jnp.uint8, jnp.float32):
    jax.eval_shape(f, jax.ShapeDtypeStruct((1, 1, 64), dtype))
resource.setrlimit(resource.RLIMIT_AS, (status("VmSize:") + 2**31, resource.RLIM_INFINITY))
report = {}
for dtype in (jnp.uint8, jnp.float32):
    peak, start = status("VmHWM:"), time.perf_counter()
    out = jax.eval_shape(f, jax.ShapeDtypeStruct((1, 1, 2**31 - 1), dtype))
    report[jnp.dtype(dtype).name] = {
        "seconds": time.perf_counter() - start, "extra_bytes": status("VmHWM:") - peak,
        "shape": jax.tree.leaves(out)[-1].shape}
print(json.dumps(report))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's VmHWM")
@pytest.mark.parametrize(("window", "out"), [((2, 2, 0, 1, False), 2**30 - 1),
                                             ((3, 2, 1, 2, True), 2**30 - 1)],
                         ids=["2", "3s2p1d2ceil"])
def test_eval_shape_of_the_largest_1d_pool_takes_little_memory_and_time(window, out):
    """The pool (uint8) and its gradient (float32) on (1, 1, 2**31 - 1): the bounds of
    issue 37, generous against the constant cost measured (0.1 MB, a few ms), far below
    the old per-window tables (8 bytes per window, and their temporaries)."""
    proc = fresh_process.run_code(_EVAL_SHAPE, json.dumps(window))
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["uint8"]["shape"] == [1, 1, out]  # the indices
    assert report["float32"]["shape"] == [1, 1, 2**31 - 1]  # the gradient
    for dtype, m in report.items():
        assert m["extra_bytes"] < 50 * 2**20, (dtype, m)
        assert m["seconds"] < 1.0, (dtype, m)
