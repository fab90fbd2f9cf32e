"""Runs a script of tests/helpers/ (or code) in a fresh Python process that imports this
jax_unpool, and names the repository's folders.

For what one process cannot do twice: start jax's backend with another device count,
load an exported artifact where nothing has been traced or registered yet, or load
another CANN runtime.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax_unpool

HELPERS = Path(__file__).resolve().parent  # the scripts and the oracles
TESTS = HELPERS.parent  # the test folders, fake_cann/ and data/
REPO = TESTS.parent


def child_env(**extra: str) -> dict[str, str]:
    """This environment with this process's jax_unpool first on PYTHONPATH, then the
    helpers and tests/ (the oracles, fake_cann), and `extra`."""
    env = dict(os.environ, **extra)
    package_root = str(Path(jax_unpool.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (package_root, str(HELPERS), str(TESTS), env.get("PYTHONPATH")) if p)
    return env


def run(script: str, *args: str, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    """`python tests/helpers/<script> args...`, with this process's jax_unpool first on the
    path and `env` over this environment."""
    return subprocess.run([sys.executable, str(HELPERS / script), *args],
                          env=child_env(**(env or {})),
                          capture_output=True, text=True, timeout=600, check=False)


def run_code(code: str, *args: str) -> subprocess.CompletedProcess:
    """`python -c code args...` in tests/ (so tests/ comes first on the path, then this
    process's jax_unpool and the helpers)."""
    return subprocess.run([sys.executable, "-c", code, *args], env=child_env(), cwd=TESTS,
                          capture_output=True, text=True, timeout=600, check=False)


def run_ok(script: str, *args: str) -> None:
    proc = run(script, *args)
    assert proc.returncode == 0, f"{script} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"


def run_cases(script: str, cases: list[dict], tmp_path: Path, *args: str
              ) -> dict[str, dict]:
    """Runs `script` (which prints "START <name>" and "DONE <json>" per case) on every
    case in child processes; a child that dies is restarted after the case it died in,
    which is reported as {"crash": ...}."""
    outcomes: dict[str, dict] = {}
    todo = list(cases)
    while todo:
        path = tmp_path / f"cases-{Path(script).stem}-{'-'.join(args[:1])}-{len(outcomes)}.json"
        path.write_text(json.dumps(todo))
        try:
            proc = run(script, str(path), *args)
            stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            stdout, stderr, rc = (e.stdout or b"").decode(), (e.stderr or b"").decode(), None
        started = None
        for line in stdout.splitlines():
            if line.startswith("START "):
                started = line[len("START "):]
            elif line.startswith("DONE "):
                done = json.loads(line[len("DONE "):])
                outcomes[done.pop("name")] = done
                started = None
        if rc == 0 and started is None:
            break
        victim = started or todo[0]["name"]  # died in a case, or before the first one
        outcomes[victim] = {"crash": f"exit status {rc}", "stderr": stderr[-3000:]}
        todo = [c for c in todo if c["name"] not in outcomes]
    return outcomes
