"""The CUDA kernels on a GPU: the same random cases as the host emulation
(test_cuda_logic.py), run by jax on the GPU and compared bit for bit with the CPU kernels;
duplicated indices deterministic over repeated runs; out-of-range indices dropped / read
as 0, or the CPU's error with JAX_UNPOOL_CUDA_CHECK_INDICES=1; PyTorch CUDA's pools and
unpool where torch is installed; a jitted step captured in CUDA graphs.

Skipped, saying why, where jax sees no CUDA GPU or the package has no CUDA module; the
GPU check (tools/gpu-check) sets JAX_UNPOOL_EXPECT_GPU=1, which makes that a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cases import (
    KINDS,
    LAYOUTS,
    POOL_DTYPES,
    backward_case,
    cpu_backward,
    cpu_pool,
    cpu_unpool,
    forward_case,
    layout,
    pool_geometry,
    pool_values,
    seeded,
    to_layout,
)
from dtypes import bits

import jax_unpool as ju
from jax_unpool._compat import enable_x64
from jax_unpool.backends import cuda


def _gpu():
    if not cuda.available():
        return None, "jax_unpool was built without its CUDA module"
    try:
        return jax.devices("cuda")[0], None
    except RuntimeError:
        return None, "jax sees no CUDA GPU"


GPU, WHY = _gpu()
if GPU is None:
    if os.environ.get("JAX_UNPOOL_EXPECT_GPU") == "1":
        raise ImportError(f"JAX_UNPOOL_EXPECT_GPU=1 but {WHY}")
    pytest.skip(f"CUDA GPU tests: {WHY}", allow_module_level=True)

FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
GPU_UNPOOL_DTYPES = ["int8", "bfloat16", "float16", "float32", "float64"]


def on_gpu(fn, *args):
    """fn jitted on the GPU, its results as numpy arrays (x64 on: int64 stays int64)."""
    with enable_x64():
        out = jax.jit(fn)(*jax.device_put(args, GPU))
        return jax.tree.map(np.asarray, out)


def unpool_fn(out_spatial, k: int, last: bool):
    unpool = getattr(ju, f"max_unpool{k}d")
    return lambda x, i: unpool(x, i, output_size=out_spatial, data_format=FORMATS[k][last])


def test_the_gpu_runs_the_cuda_kernels():
    x = jax.device_put(np.zeros((2, 3, 8, 8), np.float32), GPU)

    def step(x):
        return jax.grad(lambda x: ju.max_pool2d_with_indices(x, 2)[0].sum())(x)

    hlo = jax.jit(step).lower(x).compile().as_text()
    assert "jax_unpool_cuda_max_pool_v1" in hlo
    assert "jax_unpool_cuda_max_unpool_v1" in hlo


@pytest.mark.parametrize("dtype", GPU_UNPOOL_DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_forward_equals_the_cpu_kernel(kind, dtype):
    rng = seeded("gpu-forward", kind, dtype)
    for k, last in LAYOUTS:
        index_dtype = (np.int32, np.int64)[rng.integers(2)]
        x, idx, out_spatial, _ = forward_case(rng, k, last, kind, dtype, index_dtype)
        out = cpu_unpool(x, idx, out_spatial, k, last, device=GPU)
        np.testing.assert_array_equal(bits(out), bits(cpu_unpool(x, idx, out_spatial, k, last)),
                                      err_msg=f"k={k} last={last}")


@pytest.mark.parametrize("dtype", GPU_UNPOOL_DTYPES)
def test_backward_equals_the_cpu_kernel(dtype):
    rng = seeded("gpu-backward", dtype)
    for k, last in LAYOUTS:
        index_dtype = (np.int32, np.int64)[rng.integers(2)]
        grad, idx, out_spatial = backward_case(rng, k, last, dtype, index_dtype)
        out = cpu_backward(grad, idx, out_spatial, k, last, device=GPU)
        expected = cpu_backward(grad, idx, out_spatial, k, last)
        np.testing.assert_array_equal(bits(out), bits(expected), err_msg=f"k={k} last={last}")


@pytest.mark.parametrize("dtype", POOL_DTYPES)
def test_pool_equals_the_cpu_kernel(dtype):
    rng = seeded("gpu-pool", dtype)
    for k, last in LAYOUTS:
        index_dtype = (np.int32, np.int64)[rng.integers(2)]
        window, ceil_mode, in_spatial = pool_geometry(rng, k)
        x = pool_values(rng, layout(int(rng.integers(1, 3)), 3, in_spatial, last), dtype)
        values, indices = cpu_pool(x, window, ceil_mode, k, last, index_dtype, device=GPU)
        expected = cpu_pool(x, window, ceil_mode, k, last, index_dtype)
        case = f"k={k} last={last} window={window} ceil_mode={ceil_mode}"
        np.testing.assert_array_equal(bits(values), bits(expected[0]), err_msg=case)
        np.testing.assert_array_equal(indices, expected[1], err_msg=case)


def test_large_pools_and_unpools_equal_the_cpu_kernels():
    # Big enough for every kernel's grid-stride loop to go round several times.
    rng = seeded("gpu-large")
    x = rng.standard_normal((8, 32, 96, 96)).astype(np.float32)

    def pair(x):
        values, indices = ju.max_pool2d_with_indices(x, 2)
        return values, indices, ju.max_unpool2d(values, indices, 2)

    gpu = on_gpu(pair, x)
    with jax.default_device(jax.devices("cpu")[0]):
        cpu = jax.tree.map(np.asarray, jax.jit(pair)(x))
    for a, b in zip(gpu, cpu):
        np.testing.assert_array_equal(a, b)


def test_duplicated_indices_are_deterministic():
    rng = seeded("gpu-duplicates")
    x = rng.standard_normal((8, 32, 64, 64)).astype(np.float32)
    idx = rng.integers(0, 16, x.shape).astype(np.int32)  # every plane into 16 positions
    fn = unpool_fn((128, 128), 2, False)
    runs = [on_gpu(fn, x, idx) for _ in range(10)]
    expected = cpu_unpool(x, idx, (128, 128), 2, False)
    for run in runs:
        np.testing.assert_array_equal(run, expected)


def test_the_segnet_pair_gradient_equals_the_cpu_kernels():
    rng = seeded("gpu-segnet")
    x = rng.standard_normal((4, 8, 32, 32)).astype(np.float32)
    w = rng.standard_normal(x.shape).astype(np.float32)

    def step(x, w):
        def loss(x):
            values, indices = ju.max_pool2d_with_indices(x, 2)
            return (ju.max_unpool2d(values, indices, 2) * w).sum()
        return jax.grad(loss)(x)

    gpu = on_gpu(step, x, w)
    with jax.default_device(jax.devices("cpu")[0]):
        np.testing.assert_array_equal(gpu, np.asarray(jax.jit(step)(x, w)))


def test_vmap_equals_the_cpu_kernels():
    rng = seeded("gpu-vmap")
    x = rng.standard_normal((3, 2, 4, 8, 8)).astype(np.float32)

    def batched(x):
        return jax.vmap(lambda x: ju.max_pool2d_with_indices(x, 2))(x)

    gpu = on_gpu(batched, x)
    with jax.default_device(jax.devices("cpu")[0]):
        cpu = jax.tree.map(np.asarray, jax.jit(batched)(x))
    for a, b in zip(gpu, cpu):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("k,last", LAYOUTS)
def test_indices_outside_the_plane_are_dropped_and_read_as_zero(k, last):
    rng = seeded("gpu-drop", k, last)
    x = rng.standard_normal((2, 3, *(3,) * k)).astype(np.float32)
    plane = 6**k
    idx = np.where(rng.random(x.shape) < 0.2, plane + 3, rng.integers(0, plane, x.shape))
    idx = idx.astype(np.int32)
    expected = np.zeros((2, 3, plane), np.float32)
    for n in range(2):
        for c in range(3):
            for i, v in enumerate(idx[n, c].reshape(-1)):  # flat order: the last one wins
                if v < plane:
                    expected[n, c, v] = x[n, c].reshape(-1)[i]
    out = on_gpu(unpool_fn((6,) * k, k, last), to_layout(x, k, last), to_layout(idx, k, last))
    np.testing.assert_array_equal(out, to_layout(expected.reshape(2, 3, *(6,) * k), k, last))
    grad = rng.standard_normal((2, 3, *(6,) * k)).astype(np.float32)
    flat = grad.reshape(2, 3, -1)
    gathered = np.take_along_axis(flat, np.minimum(idx, plane - 1).reshape(2, 3, -1), axis=2)
    read = np.where(idx < plane, gathered.reshape(idx.shape), 0).astype(np.float32)
    backward = getattr(ju, f"max_unpool{k}d_backward")
    out = on_gpu(lambda g, i: backward(g, jnp.zeros(i.shape, g.dtype), i, (6,) * k,
                                       data_format=FORMATS[k][last]),
                 to_layout(grad, k, last), to_layout(idx, k, last))
    np.testing.assert_array_equal(out, to_layout(read, k, last))


def test_checked_calls_fail_with_the_cpu_kernels_message():
    x = np.ones((2, 3, 4, 4), np.float32)
    idx = np.zeros(x.shape, np.int32)
    idx[1, 2, 3, 1] = 64

    def unpool(x, i):  # check_indices=True: the checked targets
        return ju.max_unpool2d_p.bind(x, i, output_size=(8, 8), channels_last=False,
                                      check_indices=True)

    with pytest.raises(jax.errors.JaxRuntimeError) as cpu:
        cpu_unpool(x, idx, (8, 8), 2, False)
    with pytest.raises(jax.errors.JaxRuntimeError) as gpu:
        on_gpu(unpool, x, idx)
    message = str(cpu.value)
    text = message[message.index("max_unpool2d: index 64"):]
    assert text in str(gpu.value)


def test_the_kernels_load_on_this_gpu():
    assert cuda._jax_unpool_cuda.load_kernels() == "cudaSuccess"


def test_a_step_in_cuda_graphs_equals_the_cpu_kernels(tmp_path):
    # XLA captures the FFI calls into command buffers (CUDA graphs) when told to: the
    # handlers declare they may be (kCmdBufferCompatible). Proven, not assumed: the handlers
    # count the calls they saw while their stream was capturing (none: no command buffer
    # held our calls, and the test fails), and the kernel loads that had to happen inside a
    # capture (any: the instantiate stage missed them). XLA's dump is kept for a reader.
    code = """
import json, jax, numpy as np, jax_unpool as ju
from jax_unpool.backends import cuda
x = np.random.default_rng(0).standard_normal((4, 8, 32, 32)).astype(np.float32)
def step(x):
    def loss(x):
        values, indices = ju.max_pool2d_with_indices(x, 2)
        return (ju.max_unpool2d(values, indices, 2) ** 2).sum()
    return jax.grad(loss)(x)
f = jax.jit(step)
xg = jax.device_put(x, jax.devices("cuda")[0])
runs = [np.asarray(f(xg)) for _ in range(3)]  # the first run may record, later ones replay
with jax.default_device(jax.devices("cpu")[0]):
    cpu = np.asarray(jax.jit(step)(x))
for gpu in runs:
    np.testing.assert_array_equal(gpu, cpu)
print("STATS", json.dumps(cuda._jax_unpool_cuda.kernel_stats()))
"""
    dump = tmp_path / "xla-dump"
    flags = (f"--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL "
             f"--xla_gpu_graph_min_graph_size=1 --xla_dump_to={dump}")
    env = fresh_process.child_env(XLA_FLAGS=flags, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    stats = json.loads(proc.stdout.split("STATS", 1)[1])
    buffers = sorted(p.name for p in dump.glob("*") if p.is_file()
                     and "command_buffer" in p.read_text(errors="replace").lower())
    assert stats["captured_calls"] > 0, f"no call of ours was captured: {stats}; XLA's dump " \
                                        f"files that name a command buffer: {buffers}"
    assert stats["loads_in_capture"] == 0, stats


@pytest.fixture
def torch_cuda():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA GPU")
    return torch.device("cuda")


TORCH_POOLS = [((2, 2), (2, 2), (0, 0), (1, 1), False), ((3, 3), (2, 2), (1, 1), (1, 1), True),
               ((3, 2), (1, 2), (1, 0), (2, 1), False), ((2, 3), (2, 1), (1, 1), (1, 2), True)]


@pytest.mark.parametrize("kernel,stride,padding,dilation,ceil_mode", TORCH_POOLS)
def test_pool_equals_torch_cuda(torch_cuda, kernel, stride, padding, dilation, ceil_mode):
    import torch
    rng = seeded("torch-pool", kernel, stride)
    x = rng.integers(-3, 4, (4, 8, 23, 31)).astype(np.float32)  # ties
    x[0, 0, :3, :3] = np.nan
    values, indices = on_gpu(lambda x: ju.max_pool2d_with_indices(
        x, kernel, stride, padding, dilation, ceil_mode, index_dtype=jnp.int64), x)
    t_values, t_indices = torch.nn.functional.max_pool2d(
        torch.from_numpy(x).to(torch_cuda), kernel, stride, padding, dilation, ceil_mode,
        return_indices=True)
    np.testing.assert_array_equal(values, t_values.cpu().numpy())
    np.testing.assert_array_equal(indices, t_indices.cpu().numpy())


def test_pool3d_equals_torch_cuda(torch_cuda):
    import torch
    rng = seeded("torch-pool3d")
    x = rng.standard_normal((2, 4, 9, 10, 11)).astype(np.float32)
    values, indices = on_gpu(lambda x: ju.max_pool3d_with_indices(
        x, 3, 2, 1, 1, True, index_dtype=jnp.int64), x)
    t_values, t_indices = torch.nn.functional.max_pool3d(
        torch.from_numpy(x).to(torch_cuda), 3, 2, 1, 1, True, return_indices=True)
    np.testing.assert_array_equal(values, t_values.cpu().numpy())
    np.testing.assert_array_equal(indices, t_indices.cpu().numpy())


def test_unpool_of_pool_indices_equals_torch_cuda(torch_cuda):
    import torch

    # Disjoint windows: no duplicates, where torch's unpool is deterministic too.
    rng = seeded("torch-unpool")
    x = rng.standard_normal((4, 8, 32, 32)).astype(np.float32)
    t_values, t_indices = torch.nn.functional.max_pool2d(
        torch.from_numpy(x).to(torch_cuda), 2, return_indices=True)
    expected = torch.nn.functional.max_unpool2d(t_values, t_indices, 2).cpu().numpy()
    out = on_gpu(lambda v, i: ju.max_unpool2d(v, i, 2), t_values.cpu().numpy(),
                 t_indices.cpu().numpy())
    np.testing.assert_array_equal(out, expected)
