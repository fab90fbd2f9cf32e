"""Runs a script under tests/ (or code) in a fresh Python process that imports this
jax_unpool.

For what one process cannot do twice: start jax's backend with another device count,
load an exported artifact where nothing has been traced or registered yet, or load
another CANN runtime.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax_unpool

TESTS = Path(__file__).resolve().parent


def _env() -> dict[str, str]:
    """This environment with this process's jax_unpool first on PYTHONPATH."""
    env = dict(os.environ)
    package_root = str(Path(jax_unpool.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH"))
                                        if p)
    return env


def run(script: str, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    """`python tests/<script> args...`, with this process's jax_unpool first on the path
    and `env` over this environment."""
    return subprocess.run([sys.executable, str(TESTS / script), *args],
                          env={**_env(), **(env or {})},
                          capture_output=True, text=True, timeout=600, check=False)


def run_code(code: str, *args: str) -> subprocess.CompletedProcess:
    """`python -c code args...` in tests/ (so tests/ comes first on the path, then this
    process's jax_unpool)."""
    return subprocess.run([sys.executable, "-c", code, *args], env=_env(), cwd=TESTS,
                          capture_output=True, text=True, timeout=600, check=False)


def run_ok(script: str, *args: str) -> None:
    proc = run(script, *args)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
