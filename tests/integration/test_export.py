"""jax.export of a jitted forward + gradient step: the FFI targets it records are the
stable, versioned ones; with `export_safety_checks()` it serializes, and a fresh process
that imports jax_unpool runs it with identical results; the CUDA lowering of a
multi-platform export uses the CUDA targets or, without the CUDA module, the jnp
reference, never the CPU targets; the stable targets are the same on every build. An artifact
exported by the release before the `_v2` targets (calling the 2-D `_v1` ones for every
rank) still runs, and so does one exported when the pools were XLA ops; the pools' own
target round-trips through every rank and layout."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import exported_run
import fresh_process
import jax
import numpy as np
import numpy_oracle as oracle
import pytest
from jax.export import DisabledSafetyCheck
from jax.interpreters import mlir

import jax_unpool as ju
from jax_unpool import _compat

# Documented as stable: exported artifacts name them, so they must never change meaning.
STABLE_TARGETS = ("jax_unpool_max_unpool_v2", "jax_unpool_max_unpool_backward_v2")
V1_TARGETS = ("jax_unpool_max_unpool2d_v1", "jax_unpool_max_unpool2d_backward_v1")
POOL_TARGET = "jax_unpool_max_pool_v1"
OUTPUT_HW = (8, 8)


def train_step(x, indices, weight):
    """A loss through the unpooling and its gradient w.r.t. the pooled values."""
    def loss(x):
        return (ju.max_unpool2d(x, indices, output_size=OUTPUT_HW) * weight).sum()
    return jax.value_and_grad(loss)(x)


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(0)
    # Integer-valued floats: every sum is exact, whatever the order.
    return (rng.integers(-20, 20, size=(2, 3, 4, 4)).astype(np.float32),
            rng.integers(0, 64, size=(2, 3, 4, 4)).astype(np.int32),
            rng.integers(-20, 20, size=(2, 3, *OUTPUT_HW)).astype(np.float32))


def export(platforms, operands, **kwargs):
    return jax.export.export(jax.jit(train_step), platforms=platforms, **kwargs)(*operands)


def case_branch_targets(module_text: str) -> list[list[set[str]]]:
    """For every stablehlo.case (how a multi-platform export picks a lowering): the FFI
    targets each branch calls."""
    module = mlir.ir.Module.parse(module_text, context=mlir.make_ir_context())

    def ops_in(region):
        for block in region:
            for op in block.operations:
                yield op.operation
                for inner in op.operation.regions:
                    yield from ops_in(inner)

    def targets(region):
        return {op.attributes["call_target_name"].value for op in ops_in(region)
                if op.name == "stablehlo.custom_call"}

    return [[targets(region) for region in op.regions]
            for region in module.operation.regions for op in ops_in(region)
            if op.name == "stablehlo.case"]


def test_safety_checks_name_the_stable_targets():
    aclnn = ("jax_unpool_aclnn_max_unpool2d_v1", "jax_unpool_aclnn_max_unpool2d_backward_v1",
             "jax_unpool_aclnn_max_unpool3d_v1", "jax_unpool_aclnn_max_unpool3d_backward_v1",
             "jax_unpool_aclnn_max_pool2d_with_indices_v1",
             "jax_unpool_aclnn_max_pool3d_with_argmax_v1",
             *(f"jax_unpool_aclnn_max_unpool{k}d{b}_checked_v1" for k in (2, 3)
               for b in ("", "_backward")))
    window = tuple(f"jax_unpool_{op}_window_v1" for op in (
        "max_pool", "max_unpool", "max_unpool_backward")) + ("jax_unpool_window_offsets_v1",)
    cuda = tuple(f"jax_unpool_cuda_{op}_v1" for op in (
        "max_unpool", "max_unpool_checked", "max_unpool_backward", "max_unpool_backward_checked",
        "max_pool", "max_pool_window", "max_unpool_window", "max_unpool_window_checked",
        "max_unpool_backward_window", "max_unpool_backward_window_checked", "window_offsets"))
    assert set(ju.export_safety_checks()) == {DisabledSafetyCheck.custom_call(t)
                                              for t in (*STABLE_TARGETS, POOL_TARGET,
                                                        *V1_TARGETS, *window, *aclnn, *cuda)}


def test_the_stable_targets_are_the_same_without_the_cuda_module():
    # The names belong to the release (docs/export.md): a build without the CUDA module
    # lists the CUDA targets too, and its ("cpu", "cuda") export calls the CPU target in
    # the CPU branch and none of ours in the CUDA branch (the jnp reference).
    script = (
        "import json, re, sys\n"
        "sys.modules['jax_unpool._jax_unpool_cuda'] = None  # as a build without CUDA\n"
        "import jax, jax.numpy as jnp\n"
        "import jax_unpool as ju\n"
        "from jax_unpool import backends\n"
        "from jax_unpool.backends import cuda\n"
        "x = jax.ShapeDtypeStruct((1, 1, 2, 2), jnp.float32)\n"
        "i = jax.ShapeDtypeStruct((1, 1, 2, 2), jnp.int32)\n"
        "text = jax.export.export(jax.jit(lambda x, i: ju.max_unpool2d(x, i, 2)),\n"
        "                         platforms=('cpu', 'cuda'),\n"
        "                         disabled_checks=ju.export_safety_checks())(x, i).mlir_module()\n"
        "print(json.dumps({'cuda_module': cuda.available(),\n"
        "                  'stable': backends.stable_targets(),\n"
        "                  'called': re.findall(r'custom_call @(\\w+)', text)}))\n")
    done = fresh_process.run_code(script)
    assert done.returncode == 0, done.stderr
    child = json.loads(done.stdout)
    assert child["cuda_module"] is False
    assert tuple(child["stable"]) == ju.backends.stable_targets()
    assert {f"jax_unpool_cuda_{op}_v1" for op in ("max_unpool", "max_unpool_backward",
                                                  "max_pool")} <= set(child["stable"])
    assert child["called"] == ["jax_unpool_max_unpool_v2"]


def expand_braces(name: str) -> list[str]:
    """The names a shell would make of `name`: "a{1,2}b" is a1b and a2b."""
    found = re.search(r"\{([^{}]*)\}", name)
    if not found:
        return [name]
    return [n for alternative in found.group(1).split(",")
            for n in expand_braces(name[:found.start()] + alternative + name[found.end():])]


def test_the_docs_table_lists_every_stable_target():
    page = (fresh_process.REPO / "docs" / "export.md").read_text()
    table = page.split("## Stable FFI targets", 1)[1].split("\n## ", 1)[0]
    listed = {name for cell in re.findall(r"^\| (.*?) \|", table, re.MULTILINE)
              for pattern in re.findall(r"`(jax_unpool_[\w{},]+)`", cell)
              for name in expand_braces(pattern)}
    assert listed == set(ju.backends.stable_targets())


def test_export_without_the_safety_checks_is_refused(operands):
    with pytest.raises(ValueError, match="jax_unpool_max_unpool_v2"):
        export(("cpu",), operands)


def test_exported_step_calls_both_stable_targets(operands):
    text = export(("cpu",), operands, disabled_checks=ju.export_safety_checks()).mlir_module()
    for target in STABLE_TARGETS:
        assert f"stablehlo.custom_call @{target}(" in text


def test_cuda_lowering_calls_no_cpu_target(operands):
    # The jnp reference, or the CUDA kernels where this build has them (tests/backends/cuda).
    cuda = export(("cuda",), operands, disabled_checks=ju.export_safety_checks())
    targets = re.findall(r"custom_call @(jax_unpool_\w+)", cuda.mlir_module())
    assert all(t.startswith("jax_unpool_cuda_") for t in targets)


def test_multi_platform_export_keeps_cpu_targets_out_of_the_cuda_branch(operands):
    both = export(("cpu", "cuda"), operands, disabled_checks=ju.export_safety_checks())
    cases = [branches for branches in case_branch_targets(both.mlir_module())
             if any(branches)]
    # Per op: the CPU branch calls its kernel, the CUDA branch the jnp reference (no
    # target) or, where this build has them, the CUDA kernels (tests/backends/cuda).
    assert [len(branches) for branches in cases] == [2, 2]
    for branches in cases:
        cpu, other = sorted(branches, key=lambda t: not t & set(STABLE_TARGETS))
        assert len(cpu) == 1 and cpu <= set(STABLE_TARGETS)
        assert all(n.startswith("jax_unpool_cuda_") for n in other)
    assert set().union(*(t for branches in cases for t in branches
                         if not any("cuda" in n for n in t))) == set(STABLE_TARGETS)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, operands):
    """The ("cpu", "cuda") export, serialized, with its operands saved next to it."""
    path = tmp_path_factory.mktemp("export")
    exported = export(("cpu", "cuda"), operands, disabled_checks=ju.export_safety_checks())
    exported_run.write(path, exported, operands)
    return path


@pytest.mark.jax_window
def test_round_trip_in_a_fresh_process_gives_identical_results(artifact, operands):
    fresh_process.run_ok("exported_run.py", str(artifact / "step.bin"),
                         str(artifact / "operands.npz"), str(artifact / "results.npz"))
    results = np.load(artifact / "results.npz")
    loss, grad = jax.jit(train_step)(*operands)
    np.testing.assert_array_equal(results["out0"], loss)
    np.testing.assert_array_equal(results["out1"], grad)
    x, indices, weight = operands
    np.testing.assert_array_equal(
        results["out0"], (oracle.unpool(x, indices, OUTPUT_HW) * weight).sum())
    np.testing.assert_array_equal(results["out1"], oracle.gather(weight, indices))


def test_a_process_without_jax_unpool_cannot_run_the_artifact(artifact):
    proc = fresh_process.run("exported_run.py", str(artifact / "step.bin"),
                             str(artifact / "operands.npz"), str(artifact / "unused.npz"),
                             "--without-jax-unpool")
    assert proc.returncode != 0
    assert "jax_unpool_max_unpool_v2" in proc.stderr


V1_ARTIFACT = Path(__file__).parents[1] / "data" / "export_v1"
# The committed artifacts were serialized by jax 0.10, whose device count jax 0.7 reads as 0
# (docs/packaging.md's table of release differences): 0.7 refuses to call them.
CALLS_NEWER_ARTIFACTS = _compat._release(jax.__version__) >= (0, 8)


def run_committed(artifact: Path, results: Path) -> bool:
    """Runs a committed artifact in a fresh process: True when it ran; on jax 0.7, checks
    that it was refused for its device count, and returns False."""
    proc = fresh_process.run("exported_run.py", str(artifact / "step.bin"),
                             str(artifact / "operands.npz"), str(results))
    if not CALLS_NEWER_ARTIFACTS:
        assert proc.returncode != 0 and "was exported for 0 devices" in proc.stderr, proc
        return False
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-4000:]}"
    return True


@pytest.mark.jax_window
def test_an_artifact_of_the_v1_targets_runs_with_todays_jax_unpool(tmp_path):
    """data/export_v1 (see its make.py): a value_and_grad step through 2-D NCHW and NHWC,
    1-D NCW and 3-D NCDHW and NDHWC, exported when every rank called the 2-D _v1
    targets on a view of its spatial dims."""
    module = jax.export.deserialize(bytearray((V1_ARTIFACT / "step.bin").read_bytes()))
    assert set(re.findall(r"custom_call @(\w+)", module.mlir_module())) == set(V1_TARGETS)
    if not run_committed(V1_ARTIFACT, tmp_path / "results.npz"):
        return
    results = np.load(tmp_path / "results.npz")
    saved = np.load(V1_ARTIFACT / "operands.npz")
    # (spatial rank, channels_last) of each case, in make.py's order.
    cases = [(2, False), (2, True), (1, False), (3, False), (3, True)]
    for c, (k, last) in enumerate(cases):
        x, indices, weight = (saved[f"arg{3 * c + j}"] for j in range(3))
        s = weight.ndim - k - (1 if last else 0)
        unpooled = oracle.unpool_nd(x, indices, weight.shape[s:s + k], last)
        np.testing.assert_array_equal(results[f"out{2 * c}"], (unpooled * weight).sum())
        np.testing.assert_array_equal(results[f"out{2 * c + 1}"],
                                      oracle.gather_nd(weight, indices, k, last))


POOL_V0_ARTIFACT = Path(__file__).parents[1] / "data" / "export_pool_v0"


def _pool_step_module():
    """data/export_pool_v0/make.py: the pool cases of every rank and layout and their step."""
    spec = importlib.util.spec_from_file_location("pool_step", POOL_V0_ARTIFACT / "make.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def assert_pool_step_results(results, cases, operands) -> None:
    """Per case: values and indices as numpy's transcription of PyTorch's loop gives them,
    and the gradient of sum(values * weight): each weight added at its argmax."""
    for c, (_, fmt, _, kernel, stride, padding, dilation, ceil_mode) in enumerate(cases):
        x, weight = operands[2 * c], operands[2 * c + 1]
        k, last = len(fmt) - 2, fmt.endswith("C")
        def each(v, k=k):
            return (v,) * k if isinstance(v, int) else tuple(v)
        values, indices = oracle.max_pool(x, each(kernel), each(kernel if stride is None
                                                                else stride),
                                          each(padding), each(dilation), ceil_mode, last)
        # planes first: (N, C, positions)
        def planes(a, k=k, last=last):
            a = np.moveaxis(a, -1, 1) if last else a
            return a.reshape(*a.shape[:2], -1)
        grad = np.zeros(planes(x).shape, np.float32)
        for n, ch, o in np.ndindex(*planes(indices).shape):
            grad[n, ch, planes(indices)[n, ch, o]] += planes(weight)[n, ch, o]
        grad = grad.reshape(np.moveaxis(x, -1, 1).shape if last else x.shape)
        np.testing.assert_array_equal(results[f"out{3 * c}"], values)
        np.testing.assert_array_equal(results[f"out{3 * c + 1}"], indices)
        np.testing.assert_array_equal(results[f"out{3 * c + 2}"],
                                      np.moveaxis(grad, 1, -1) if last else grad)


@pytest.mark.jax_window
def test_an_artifact_of_the_xla_ops_pools_runs_with_todays_jax_unpool(tmp_path):
    """data/export_pool_v0 (see its make.py): values, indices and gradient of the pools of
    every rank and layout, exported when the pools were XLA ops (their gradient through
    the unpool primitive's `_v2` target where windows cannot overlap)."""
    module = jax.export.deserialize(bytearray((POOL_V0_ARTIFACT / "step.bin").read_bytes()))
    assert set(re.findall(r"custom_call @(\w+)", module.mlir_module())) == {
        "jax_unpool_max_unpool_v2"}
    if not run_committed(POOL_V0_ARTIFACT, tmp_path / "results.npz"):
        return
    saved = np.load(POOL_V0_ARTIFACT / "operands.npz")
    assert_pool_step_results(np.load(tmp_path / "results.npz"), _pool_step_module().CASES,
                             [saved[f"arg{i}"] for i in range(len(saved.files))])


def test_the_pools_round_trip_through_their_target_in_a_fresh_process(tmp_path):
    step = _pool_step_module()
    operands = step.operands()
    exported = exported_run.export_for_cpu(step.step, operands)
    text = exported.mlir_module()
    # one pool call per case, every rank and layout
    assert text.count(f"stablehlo.custom_call @{POOL_TARGET}(") == len(step.CASES)
    exported_run.write(tmp_path, exported, operands)
    fresh_process.run_ok("exported_run.py", str(tmp_path / "step.bin"),
                         str(tmp_path / "operands.npz"), str(tmp_path / "results.npz"))
    assert_pool_step_results(np.load(tmp_path / "results.npz"), step.CASES, operands)
