"""The CUDA backend without a GPU: the optional module loads where it was built, and
`jax.export(..., platforms=["cuda"])` of every op, rank, layout and index dtype calls its
`jax_unpool_cuda_*` target (the forward with its workspace as a dropped second result),
the checked targets where check_indices=True, never a CPU target; other GPU
platforms keep the XLA ops; `export_safety_checks()` covers the new targets.

Where the package was built without CUDA these tests skip, saying so;
JAX_UNPOOL_EXPECT_CUDA=1 (tools/gpu-check sets it) makes a missing module a failure."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import fresh_process
import jax
import jax.numpy as jnp
import pytest
from jax.export import DisabledSafetyCheck

import jax_unpool as ju
from jax_unpool._compat import enable_x64
from jax_unpool.backends import cuda

TARGETS = {op: f"jax_unpool_cuda_{op}_v1" for op in (
    "max_unpool", "max_unpool_checked", "max_unpool_backward", "max_unpool_backward_checked",
    "max_pool", "max_pool_window", "max_unpool_window", "max_unpool_window_checked",
    "max_unpool_backward_window", "max_unpool_backward_window_checked", "window_offsets")}
FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
CASES = [(k, last, index) for k in (1, 2, 3) for last in (False, True)
         for index in ("int32", "int64")]

if not cuda.available():
    if os.environ.get("JAX_UNPOOL_EXPECT_CUDA") == "1":
        raise ImportError("JAX_UNPOOL_EXPECT_CUDA=1 but jax_unpool has no _jax_unpool_cuda "
                          "module: the CUDA build failed or was skipped")
    pytest.skip("jax_unpool was built without its CUDA module (no CUDA compiler, or "
                "JAX_UNPOOL_CUDA=OFF)", allow_module_level=True)


def shape(k: int, last: bool, n: int, c: int, size: int) -> tuple[int, ...]:
    return (n, *(size,) * k, c) if last else (n, c, *(size,) * k)


def export(fn, *args, platforms=("cuda",)):
    return jax.export.export(jax.jit(fn), platforms=platforms,
                             disabled_checks=ju.export_safety_checks())(*args)


def custom_calls(module_text: str) -> list[str]:
    """The FFI targets called (not jax's own, such as shape assertions)."""
    return [t for t in re.findall(r"stablehlo\.custom_call @(\w+)\(", module_text)
            if t.startswith("jax_unpool")]


def op_function(op: str, k: int, last: bool, index: str):
    """(function, its operands as ShapeDtypeStructs) of one op."""
    fmt = FORMATS[k][last]
    x = jax.ShapeDtypeStruct(shape(k, last, 2, 3, 4), jnp.float32)
    idx = jax.ShapeDtypeStruct(shape(k, last, 2, 3, 4), jnp.dtype(index))
    g = jax.ShapeDtypeStruct(shape(k, last, 2, 3, 8), jnp.float32)
    if op == "forward":
        unpool = getattr(ju, f"max_unpool{k}d")
        return (lambda x, i: unpool(x, i, 2, data_format=fmt)), (x, idx)
    if op == "backward":
        backward = getattr(ju, f"max_unpool{k}d_backward")
        return (lambda g, x, i: backward(g, x, i, (8,) * k, data_format=fmt)), (g, x, idx)
    pool = getattr(ju, f"max_pool{k}d_with_indices")
    return (lambda x: pool(x, 2, data_format=fmt, index_dtype=index)), (g,)


def test_the_cuda_module_loads_and_names_its_build():
    info = cuda._jax_unpool_cuda.build_info()
    assert re.fullmatch(r"\d+\.\d+", info["cuda_runtime"])
    assert info["architectures"]
    assert sorted(cuda._jax_unpool_cuda.registrations()) == sorted(TARGETS)


@pytest.mark.parametrize("op,target", [("forward", "max_unpool"),
                                       ("backward", "max_unpool_backward"),
                                       ("pool", "max_pool")])
@pytest.mark.parametrize("k,last,index", CASES)
def test_each_op_lowers_to_its_cuda_target(op, target, k, last, index):
    with enable_x64():
        fn, args = op_function(op, k, last, index)
        text = export(fn, *args).mlir_module()
    assert custom_calls(text) == [TARGETS[target]]
    assert f"xi{index[3:]}>" in text  # the indices' dtype as given


def test_the_forward_drops_its_workspace_and_passes_the_hint_attributes():
    x = jax.ShapeDtypeStruct((2, 3, 4, 4), jnp.float32)
    i = jax.ShapeDtypeStruct((2, 3, 4, 4), jnp.int32)
    text = export(lambda x, i: ju.max_unpool2d(x, i, 2), x, i).mlir_module()
    call = next(line for line in text.splitlines() if "custom_call" in line)
    # float32 positions fit the result: a 16-byte header per plane (N, C batch dims)
    assert "-> (tensor<2x3x8x8xf32>, tensor<2x3x16xui8>)" in call
    # the public function passes its pool window as the hint: kernel 2, stride 2, padding 0
    for name, value in (("window_extent", 2), ("window_stride", 2), ("window_padding", 0)):
        assert f"{name} = dense<{value}> : tensor<2xi64>" in call
    assert 'num_batch_dims = "2"' in call


@pytest.mark.parametrize("dtype,per_plane", [("int8", 16 + 4 * 64), ("bfloat16", 16),
                                             ("float64", 16)])
def test_the_workspace_holds_positions_only_where_the_result_cannot(dtype, per_plane):
    x = jax.ShapeDtypeStruct((2, 3, 4, 4), jnp.dtype(dtype))
    i = jax.ShapeDtypeStruct((2, 3, 4, 4), jnp.int32)
    with enable_x64():
        text = export(lambda x, i: ju.max_unpool2d(x, i, 2), x, i).mlir_module()
    assert f"tensor<2x3x{per_plane}xui8>" in text


def test_the_pool_gradient_is_the_cuda_scatter():
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.float32)
    text = export(jax.grad(lambda x: ju.max_pool2d_with_indices(x, 2)[0].sum()), x).mlir_module()
    assert sorted(custom_calls(text)) == [TARGETS["max_pool"], TARGETS["max_unpool"]]


@pytest.mark.parametrize("check, suffix", [(True, "_checked"), (False, "")])
def test_check_indices_selects_the_checked_targets(check, suffix):
    x = jax.ShapeDtypeStruct((2, 3, 4, 4), jnp.float32)
    i = jax.ShapeDtypeStruct((2, 3, 4, 4), jnp.int32)

    def step(x, i):  # the primitive's check_indices goes on to its transpose
        unpool = lambda x: ju.max_unpool2d_p.bind(x, i, output_size=(8, 8),
                                                  channels_last=False, check_indices=check)
        return jax.value_and_grad(lambda x: unpool(x).sum())(x)

    assert sorted(custom_calls(export(step, x, i).mlir_module())) == sorted([
        TARGETS[f"max_unpool{suffix}"], TARGETS[f"max_unpool_backward{suffix}"]])


def window_step(k: int, last: bool):
    """A SegNet pair on window offsets, and its gradient: the pool, its derivative (a
    scatter, windows of 2 sharing no argmax), the unpool and its transpose."""
    pool, unpool = getattr(ju, f"max_pool{k}d_with_indices"), getattr(ju, f"max_unpool{k}d")
    fmt = FORMATS[k][last]

    def loss(x):
        values, w = pool(x, 2, data_format=fmt, index_format="window")
        return (unpool(values * values, w) * x).sum()
    return jax.value_and_grad(loss)


@pytest.mark.parametrize("k,last", sorted({(k, last) for k, last, _ in CASES}))
def test_window_offsets_lower_to_the_window_targets(k, last):
    x = jax.ShapeDtypeStruct(shape(k, last, 2, 3, 8), jnp.float32)
    text = export(window_step(k, last), x).mlir_module()
    assert sorted(set(custom_calls(text))) == sorted(
        TARGETS[op] for op in ("max_pool_window", "max_unpool_window",
                               "max_unpool_backward_window"))
    assert "xui8>" in text and "xi32>" not in text  # no flat index anywhere
    i = jax.ShapeDtypeStruct(shape(k, last, 2, 3, 4), jnp.int32)
    fmt = FORMATS[k][last]
    text = export(lambda i: ju.window_indices(i, 2, input_size=(8,) * k, data_format=fmt),
                  i).mlir_module()
    assert custom_calls(text) == [TARGETS["window_offsets"]]


@pytest.mark.parametrize("check, suffix", [(True, "_checked"), (False, "")])
def test_check_indices_selects_the_checked_window_targets(check, suffix):
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.float32)

    def step(x):
        values, w = ju.max_pool2d_with_indices(x, 2, index_format="window")
        g = w.geometry
        unpool = lambda v: ju.max_unpool2d_p.bind(v, w.offsets, output_size=g.in_size,
                                                  channels_last=False, check_indices=check,
                                                  index_window=g)
        return jax.value_and_grad(lambda v: unpool(v).sum())(values)

    calls = set(custom_calls(export(step, x).mlir_module()))
    assert calls == {TARGETS["max_pool_window"], TARGETS[f"max_unpool_window{suffix}"],
                     TARGETS[f"max_unpool_backward_window{suffix}"]}


def test_the_window_forward_drops_a_workspace_sized_as_the_flat_ones():
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.int8)
    step = lambda x: ju.max_unpool2d(*ju.max_pool2d_with_indices(x, 2, index_format="window"))
    text = export(step, x).mlir_module()
    call = next(line for line in text.splitlines()
                if f"@{TARGETS['max_unpool_window']}(" in line)
    # 1-byte values: a 16-byte header and 4 bytes of position per output element, per plane
    assert "-> (tensor<2x3x8x8xi8>, tensor<2x3x272xui8>)" in call


def test_a_symbolic_batch_lowers_to_the_cuda_targets():
    b = jax.export.symbolic_shape("b")[0]
    x = jax.ShapeDtypeStruct((b, 3, 4, 4), jnp.float32)
    i = jax.ShapeDtypeStruct((b, 3, 4, 4), jnp.int32)

    def step(x, i):
        return jax.value_and_grad(lambda x: ju.max_unpool2d(x, i, 2).sum())(x)

    assert sorted(custom_calls(export(step, x, i).mlir_module())) == sorted([
        TARGETS["max_unpool"], TARGETS["max_unpool_backward"]])


def test_a_two_platform_export_calls_each_platforms_targets():
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.float32)
    text = export(lambda x: ju.max_pool2d_with_indices(x, 2), x,
                  platforms=("cpu", "cuda")).mlir_module()
    assert sorted(custom_calls(text)) == ["jax_unpool_cuda_max_pool_v1", "jax_unpool_max_pool_v1"]


def test_rocm_keeps_the_xla_ops():
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.float32)
    step = jax.grad(lambda x: ju.max_pool2d_with_indices(x, 2)[0].sum())
    assert "custom_call" not in export(step, x, platforms=("rocm",)).mlir_module()


def test_export_without_the_safety_checks_names_a_cuda_target():
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.float32)
    with pytest.raises(ValueError, match="jax_unpool_cuda_max_pool_v1"):
        jax.export.export(jax.jit(lambda x: ju.max_pool2d_with_indices(x, 2)),
                          platforms=("cuda",))(x)
    assert DisabledSafetyCheck.custom_call(TARGETS["max_pool"]) in ju.export_safety_checks()


def test_the_pool_keeps_xla_ops_for_dtypes_it_does_not_order():
    x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.int4)
    text = export(lambda x: ju.max_pool2d_with_indices(x, 2), x).mlir_module()
    assert custom_calls(text) == []


ROUTING_STEP = """
import re, sys, jax, jax.numpy as jnp, jax_unpool as ju
def step(x):
    def loss(x):
        values, indices = ju.max_pool2d_with_indices(x, 2)
        return ju.max_unpool2d(values, indices, 2).sum()
    return jax.grad(loss)(x)
x = jax.ShapeDtypeStruct((2, 3, 8, 8), jnp.float32)
text = jax.export.export(jax.jit(step), platforms=("cuda",),
                         disabled_checks=ju.export_safety_checks())(x).mlir_module()
print(sorted(set(re.findall(r"stablehlo\\.custom_call @(jax_unpool\\w+)\\(", text))))
"""


@pytest.mark.parametrize("ops,expected", [
    ("max_pool", ["jax_unpool_cuda_max_pool_v1"]),
    ("max_unpool,max_unpool_backward", ["jax_unpool_cuda_max_unpool_backward_v1",
                                        "jax_unpool_cuda_max_unpool_v1"]),
    ("", []),
])
def test_only_the_routed_ops_take_the_cuda_kernels(ops, expected):
    proc = subprocess.run([sys.executable, "-c", ROUTING_STEP], capture_output=True, text=True,
                          env=fresh_process.child_env(JAX_UNPOOL_CUDA_OPS=ops), timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == repr(expected)


