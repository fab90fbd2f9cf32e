"""Runs serialized `jax.export` artifacts with symbolic dims, in a process that traced
nothing, as listed in DIR/manifest.json (written by test_export_symbolic.py):

    python tests/helpers/symbolic_run.py DIR

- "calls": [artifact, operands.npz, results.npz]: the artifact called on arg0, arg1, ...;
  results.npz gets out0, out1, ... (the flattened results).
- "refusals": [artifact, [[shape, dtype], ...], message.txt]: the artifact compiled (never
  run, nothing allocated) for operands of those shapes; message.txt gets the error and
  its causes, or "compiled" when there was none.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np


def main(folder: Path) -> None:
    import jax

    import jax_unpool  # noqa: F401  (registers the FFI targets the artifacts call)

    manifest = json.loads((folder / "manifest.json").read_text())
    loaded = {}

    def artifact(name):
        if name not in loaded:
            loaded[name] = jax.export.deserialize(bytearray((folder / name).read_bytes()))
        return loaded[name]

    for name, operands, results in manifest["calls"]:
        saved = np.load(folder / operands)
        outs = jax.tree.leaves(artifact(name).call(
            *(saved[f"arg{i}"] for i in range(len(saved.files)))))
        np.savez(folder / results, **{f"out{i}": np.asarray(o) for i, o in enumerate(outs)})
    for name, specs, message in manifest["refusals"]:
        specs = [jax.ShapeDtypeStruct(tuple(shape), dtype) for shape, dtype in specs]
        try:
            jax.jit(artifact(name).call).lower(*specs).compile()
            text = "compiled"
        except Exception as error:  # noqa: BLE001 (the message is what the test reads)
            chain = []
            while error is not None:
                chain.append(f"{type(error).__name__}: {error}")
                error = error.__cause__
            text = "\n".join(chain)
        (folder / message).write_text(text)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
