"""Imported without its compiled extension (a source tree that was never built), the
package says what happened and what to run, not "circular import"."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

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
