"""notebooks/segnet_unpool.ipynb runs top to bottom and draws its plots."""

import ast
import pathlib

import pytest

# The release extra's (pip install '.[release]'); the test extra has no Jupyter.
nbclient = pytest.importorskip("nbclient")
nbformat = pytest.importorskip("nbformat")

pytestmark = pytest.mark.release

NOTEBOOK = pathlib.Path(__file__).resolve().parents[2] / "notebooks" / "segnet_unpool.ipynb"
# Samples, loss curve, evaluation, timing chart: one figure each.
FIGURES = 4


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code
    assert all(not cell.outputs and cell.execution_count is None for cell in code)


# The modules the API reference calls public (docs/api.md): jax_unpool.cli is not one.
PUBLIC_MODULES = {"jax_unpool", "jax_unpool.reference", "jax_unpool.npu", "jax_unpool.nnx",
                  "jax_unpool.linen", "jax_unpool.equinox"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.endswith("__")


def test_notebook_uses_only_the_public_api():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    imported, private_names = set(), set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module)
                imported |= {f"{node.module}.{alias.name}" for alias in node.names
                             if f"{node.module}.{alias.name}" in PUBLIC_MODULES
                             or _private(alias.name)}
            elif isinstance(node, ast.Attribute) and _private(node.attr):
                private_names.add(node.attr)
    ours = {name for name in imported if name.split(".")[0] == "jax_unpool"}
    assert ours and ours <= PUBLIC_MODULES, ours - PUBLIC_MODULES
    assert not private_names


# The notebook trains for 800 steps (a minute on 2 cores); the test runs every cell with
# fewer, which exercises the same code.
TRAINING = "SIZE, BATCH, STEPS = 32, 16, 800"
TEST_TRAINING = "SIZE, BATCH, STEPS = 32, 16, 100"


def test_notebook_runs_and_plots(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    (setting,) = [cell for cell in nb.cells if TRAINING in cell.source]
    setting.source = setting.source.replace(TRAINING, TEST_TRAINING)
    # Raises CellExecutionError (with the cell and the traceback) if any cell fails.
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [out for out in outputs if out.output_type == "error"]
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) == FIGURES
    text = "".join(out.get("text", "") for out in outputs)
    assert "vmap over examples == one batched call: True" in text
