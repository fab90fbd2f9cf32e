"""Imported without its compiled extension (a source tree that was never built), the
package says what happened and what to run, not "circular import"."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import fresh_process

import jax_unpool


def test_unbuilt_source_tree_names_the_missing_module_and_the_command(tmp_path):
    package = tmp_path / "jax_unpool"
    shutil.copytree(Path(jax_unpool.__file__).parent, package,
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    # `python -c` from the tree's parent: the unbuilt copy comes first on sys.path.
    done = subprocess.run([sys.executable, "-c", "import jax_unpool"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (f"ImportError: jax_unpool at {package} has no compiled extension module "
                    f"_jax_unpool (this is a source tree that was not built): run `pip "
                    f"install .` in {tmp_path}"), done.stderr
    assert "circular import" not in done.stderr


def test_a_misspelt_gather_choice_is_an_import_error_naming_the_variable():
    # The kernel reads JAX_UNPOOL_CPU_GATHER itself and would ignore a typo: refused here.
    env = fresh_process.child_env(JAX_UNPOOL_CPU_GATHER="avx2")
    done = subprocess.run([sys.executable, "-c", "import jax_unpool"], env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "jax_unpool._settings.SettingError: jax_unpool: environment variable "
        "JAX_UNPOOL_CPU_GATHER must be 'vector' or 'scalar' or unset, got 'avx2'"), done.stderr


def _package_imports(module: Path, package: Path) -> set[str]:
    """The package's own modules that `module` imports, at module level or inside a
    function (a deferred import is a circle all the same)."""
    import ast

    names = set()
    for node in ast.walk(ast.parse(module.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(
                "jax_unpool"):
            base = node.module.split(".")
            names.update(".".join(base + [a.name]) for a in node.names)
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names if a.name.startswith("jax_unpool"))
    modules = {".".join(p.relative_to(package.parent).with_suffix("").parts)
               for p in package.rglob("*.py")}
    # A module's own packages are not edges: a package's __init__ runs before its modules
    # whatever they import (`from jax_unpool.backends import registry` in backends/cpu.py).
    own = ".".join(module.relative_to(package.parent).with_suffix("").parts).split(".")
    ancestors = {".".join(own[:i]) for i in range(1, len(own))}
    return ({n.removesuffix(".__init__") for n in names} & {
        m.removesuffix(".__init__") for m in modules}) - ancestors


def test_the_package_has_no_import_circle():
    package = Path(jax_unpool.__file__).parent
    graph = {}
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        graph[name.removesuffix(".__init__")] = _package_imports(path, package) - {"jax_unpool"}
    graph.pop("jax_unpool")  # the package re-exports everything: its imports are the roots

    def visit(name, path):
        assert name not in path, f"import circle: {' -> '.join([*path, name])}"
        for dep in graph.get(name, ()):
            visit(dep, [*path, name])

    assert len(graph) > 10
    for name in graph:
        visit(name, [])


# The layers, top to bottom: a module imports only its own layer's modules and lower ones.
LAYERS = (
    ("jax_unpool.__main__", "jax_unpool.cli", "jax_unpool.nnx", "jax_unpool.linen",
     "jax_unpool.equinox", "jax_unpool._layers", "jax_unpool.keras",
     "jax_unpool.onnx"),                                          # what users call
    ("jax_unpool.npu", "jax_unpool.reference"),                   # public modules on the ops
    ("jax_unpool.unpooling", "jax_unpool.pooling", "jax_unpool.window_offsets"),  # the ops
    ("jax_unpool.backends",),                                     # the platforms, the registry
    ("jax_unpool._",),                                            # geometry, lowerings, jax
)


def _layer(name: str) -> int:
    return next(i for i, prefixes in enumerate(LAYERS)
                if any(name == p or name.startswith(p if p.endswith("_") else p + ".")
                       for p in prefixes))


def test_no_import_runs_back_up_a_layer():
    package = Path(jax_unpool.__file__).parent
    upward = []
    for path in package.rglob("*.py"):
        name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        name = name.removesuffix(".__init__")
        if name == "jax_unpool":
            continue
        for dep in _package_imports(path, package) - {"jax_unpool"}:
            if _layer(dep) < _layer(name):
                upward.append(f"{name} -> {dep}")
    assert not upward, upward


def test_no_backend_imports_an_op_module():
    package = Path(jax_unpool.__file__).parent
    for path in (package / "backends").glob("*.py"):
        imports = _package_imports(path, package)
        assert not imports & {"jax_unpool.unpooling", "jax_unpool.pooling"}, (path, imports)
