"""Artifacts without custom calls: a function that uses every op -- the pools, the unpool
forward and backward, the gradients of both (the pool's derivative pair: the JVP's gather
and reverse mode's scatter-add), every spatial rank, both layouts -- exported with a
symbolic batch inside ``with jax_unpool.backends.use("xla"):`` calls no target of ours
(`jax_unpool.backends.custom_calls`), and runs, with the results of this process, where
jax_unpool was never imported: in a fresh process of this environment, and in a virtual
environment that holds jax, jaxlib and flatbuffers alone (built once under
build/export-without-custom-calls/, marked release: it installs from PyPI). An artifact
exported without the switch fails there, with XLA's error naming our target.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import exported_run
import fresh_process
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_unpool as ju

REPO = Path(__file__).resolve().parents[2]
VENV_ROOT = Path(os.environ.get("JAX_UNPOOL_BARE_JAX_DIR",
                                REPO / "build" / "export-without-custom-calls"))
POOL = {1: ju.max_pool1d_with_indices, 2: ju.max_pool2d_with_indices,
        3: ju.max_pool3d_with_indices}
UNPOOL = {1: ju.max_unpool1d, 2: ju.max_unpool2d, 3: ju.max_unpool3d}
BACKWARD = {1: ju.max_unpool1d_backward, 2: ju.max_unpool2d_backward,
            3: ju.max_unpool3d_backward}
FORMATS = {(1, False): "NCW", (1, True): "NWC", (2, False): "NCHW", (2, True): "NHWC",
           (3, False): "NCDHW", (3, True): "NDHWC"}
ODD = {1: (9,), 2: (7, 5), 3: (5, 3, 7)}  # odd sizes, so output_size matters
CASES = list(FORMATS)  # (k, channels_last)
C = 2


def shape(k: int, last: bool, n) -> tuple:
    return (n, *ODD[k], C) if last else (n, C, *ODD[k])


def every_op(k: int, last: bool):
    """x -> every op's result on x: overlapping pool windows (3, stride 2, padding 1) so
    that reverse mode scatter-adds, the unpool and its explicit backward, value_and_grad
    through pool -> unpool, and the pool's JVP (the gather)."""
    fmt, size = FORMATS[(k, last)], ODD[k]

    def unpool_of_pool(x):
        values, indices = POOL[k](x, 3, 2, 1, data_format=fmt)
        return UNPOOL[k](values, indices, output_size=size, data_format=fmt)

    def run(x, w):
        values, indices = POOL[k](x, 3, 2, 1, data_format=fmt)
        unpooled = UNPOOL[k](values, indices, output_size=size, data_format=fmt)
        backward = BACKWARD[k](unpooled * w, values, indices, size, data_format=fmt)
        loss, grad = jax.value_and_grad(lambda x: (unpool_of_pool(x) * w).sum())(x)
        _, tangent = jax.jvp(lambda x: POOL[k](x, 2, data_format=fmt)[0], (x,), (w,))
        return values, indices, unpooled, backward, loss, grad, tangent

    return run


def step(*operands):
    """Every case at once: operands are (x, w) per case of CASES."""
    pairs = zip(operands[::2], operands[1::2], strict=True)
    return [every_op(k, last)(x, w) for (k, last), (x, w) in zip(CASES, pairs, strict=True)]


def operands(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    out = []
    for k, last in CASES:
        x = rng.normal(size=shape(k, last, n)).astype(np.float32)
        flat = x.reshape(-1)  # a view
        flat[1::4] = flat[0::4][:flat[1::4].size]  # ties
        out += [x, rng.normal(size=x.shape).astype(np.float32)]
    return out


def export(portable: bool):
    b, = jax.export.symbolic_shape("b")
    specs = [jax.ShapeDtypeStruct(shape(k, last, b), jnp.float32)
             for k, last in CASES for _ in range(2)]
    if portable:
        with ju.backends.use("xla"):
            return jax.export.export(jax.jit(step), platforms=("cpu",))(*specs)
    return jax.export.export(jax.jit(step), platforms=("cpu",),
                             disabled_checks=ju.export_safety_checks())(*specs)


@pytest.fixture(scope="module")
def portable():
    return export(portable=True)


def run_artifact(python: str, exported, inputs: list[np.ndarray], directory: Path,
                 env: dict | None = None) -> subprocess.CompletedProcess:
    """exported_run.py (which imports jax and numpy alone) with `python`, from a folder
    outside the checkout, so that nothing of jax_unpool is on its path."""
    exported_run.write(directory, exported, inputs)
    return subprocess.run(
        [python, str(Path(exported_run.__file__)), str(directory / "step.bin"),
         str(directory / "operands.npz"), str(directory / "results.npz"),
         "--without-jax-unpool"],
        cwd=directory, env=env if env is not None else _bare_env(), capture_output=True,
        text=True, timeout=600, check=False)


def _bare_env() -> dict:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def expected(inputs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(r) for r in jax.tree.leaves(jax.jit(step)(*inputs))]


def check_results(results: Path, inputs: list[np.ndarray], portable) -> None:
    """The artifact's results equal the same artifact's in this process bit for bit, and
    this process's own (native kernels): moved values exactly, sums to float rounding."""
    saved = np.load(results)
    got = [saved[f"out{i}"] for i in range(len(saved.files))]
    same_program = [np.asarray(r) for r in jax.tree.leaves(portable.call(*inputs))]
    native = expected(inputs)
    assert len(got) == len(native) == 7 * len(CASES)
    for i, (a, b, c) in enumerate(zip(got, same_program, native, strict=True)):
        assert a.dtype == c.dtype and a.shape == c.shape, i
        np.testing.assert_array_equal(a, b, err_msg=f"result {i}")
        if i % 7 in (4, 5):  # the loss and its gradient: sums, in another order
            np.testing.assert_allclose(a, c, rtol=1e-6, atol=1e-6, err_msg=f"result {i}")
        else:
            np.testing.assert_array_equal(a, c, err_msg=f"result {i}")


# --------------------------------------------------------------------------------------
# In this environment
# --------------------------------------------------------------------------------------

def test_the_switch_leaves_no_custom_call_of_ours(portable):
    assert ju.backends.custom_calls(portable) == ()
    module = portable.mlir_module()
    # jax's own shape_assertion (the symbolic batch) is the only custom call left
    assert set(ju.backends._CUSTOM_CALL.findall(module)) == {"shape_assertion"}
    # what the function holds without the switch: every native target of the CPU
    assert ju.backends.custom_calls(export(portable=False)) == (
        "jax_unpool_max_pool_v1", "jax_unpool_max_unpool_backward_v2",
        "jax_unpool_max_unpool_v2")


def test_custom_calls_reads_the_mlir_text_too():
    text = ('%0 = stablehlo.custom_call @jax_unpool_max_unpool_v2(%a) : ...\n'
            '%1 = stablehlo.custom_call @"jax_unpool_cuda_max_pool_v1"(%b) : ...\n'
            '%2 = stablehlo.custom_call @lapack_sgetrf_ffi(%c) : ...\n')
    assert ju.backends.custom_calls(text) == ("jax_unpool_cuda_max_pool_v1",
                                              "jax_unpool_max_unpool_v2")


def test_the_portable_artifact_runs_where_jax_unpool_was_never_imported(portable, tmp_path):
    # This environment, a fresh process that imports jax and numpy alone.
    inputs = operands(3)
    proc = run_artifact(sys.executable, portable, inputs, tmp_path,
                        env=fresh_process.child_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_results(tmp_path / "results.npz", inputs, portable)


# --------------------------------------------------------------------------------------
# In an environment with jax, jaxlib and flatbuffers alone
# --------------------------------------------------------------------------------------

def bare_jax_python() -> str:
    """A virtual environment with this process's jax and jaxlib releases and flatbuffers
    (jax.export's serialization), nothing else: made once, kept under VENV_ROOT."""
    import flatbuffers
    import jaxlib

    pins = [f"jax=={jax.__version__}", f"jaxlib=={jaxlib.__version__}",
            f"flatbuffers=={flatbuffers.__version__}"]
    venv = VENV_ROOT / ("py" + "".join(map(str, sys.version_info[:2])) + "-"
                        + "-".join(p.replace("==", "") for p in pins))
    python = venv / "bin" / "python"
    done = venv / "installed.txt"
    if not done.exists() or done.read_text() != "\n".join(pins):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", *pins], check=True, timeout=1200)
        done.write_text("\n".join(pins))
    return str(python)


@pytest.fixture(scope="module")
def bare_python():
    python = bare_jax_python()
    listed = subprocess.run([python, "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout
    names = {line.split("==")[0].lower() for line in listed.split()}
    assert "jax-unpool" not in names and names <= {
        "jax", "jaxlib", "flatbuffers", "numpy", "scipy", "ml-dtypes", "ml_dtypes",
        "opt-einsum", "opt_einsum", "pip", "setuptools"}, names
    return python


@pytest.mark.release
def test_the_portable_artifact_runs_where_only_jax_is_installed(portable, bare_python,
                                                                tmp_path):
    for n in (1, 4):  # the symbolic batch
        inputs = operands(n)
        directory = tmp_path / f"batch{n}"
        directory.mkdir()
        proc = run_artifact(bare_python, portable, inputs, directory)
        assert proc.returncode == 0, proc.stderr[-3000:]
        check_results(directory / "results.npz", inputs, portable)
    # and jax_unpool cannot be imported there
    proc = subprocess.run([bare_python, "-c", "import jax_unpool"], cwd=tmp_path,
                          env=_bare_env(), capture_output=True, text=True, check=False)
    assert "No module named 'jax_unpool'" in proc.stderr


@pytest.mark.release
def test_an_artifact_with_our_custom_calls_fails_there_naming_the_target(bare_python,
                                                                         tmp_path):
    proc = run_artifact(bare_python, export(portable=False), operands(1), tmp_path)
    assert proc.returncode != 0
    assert "No FFI handler registered for jax_unpool_" in proc.stderr, proc.stderr[-3000:]
