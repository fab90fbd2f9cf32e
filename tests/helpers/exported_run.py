"""Loads a serialized `jax.export` artifact and runs it, in a process that traced nothing:

    python tests/helpers/exported_run.py ARTIFACT OPERANDS.npz RESULTS.npz [--without-jax-unpool]

OPERANDS.npz holds arg0, arg1, ...; RESULTS.npz gets out0, out1, ... (the flattened
results). Importing jax_unpool is what registers the FFI targets the artifact calls;
--without-jax-unpool leaves it out, to show that the import is needed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np


def export_for_cpu(step, operands):
    """jax.jit(step) exported for CPU at these operands, with the checks jax_unpool's
    targets need disabled (jax_unpool.export_safety_checks)."""
    import jax
    import jax.export

    import jax_unpool as ju

    return jax.export.export(jax.jit(step), platforms=("cpu",),
                             disabled_checks=ju.export_safety_checks())(*operands)


def write(directory: Path, exported, operands) -> None:
    """An artifact as main reads it: directory/step.bin and directory/operands.npz."""
    (directory / "step.bin").write_bytes(exported.serialize())
    np.savez(directory / "operands.npz", **{f"arg{i}": a for i, a in enumerate(operands)})


def main(artifact: str, operands: str, results: str, import_jax_unpool: bool) -> None:
    import jax
    import jax.export  # `import jax` alone does not load it in jax 0.7

    if import_jax_unpool:
        import jax_unpool  # noqa: F401
    exported = jax.export.deserialize(bytearray(Path(artifact).read_bytes()))
    saved = np.load(operands)
    outs = jax.tree.leaves(exported.call(*(saved[f"arg{i}"] for i in range(len(saved.files)))))
    np.savez(results, **{f"out{i}": np.asarray(o) for i, o in enumerate(outs)})


if __name__ == "__main__":
    main(*sys.argv[1:4], import_jax_unpool="--without-jax-unpool" not in sys.argv[4:])
