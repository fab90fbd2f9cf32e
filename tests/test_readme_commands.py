"""The README's set-up commands are what CI runs: .ci/run holds each of them verbatim, so
the README cannot drift from what is tested on a clean checkout."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    """The commands of the fenced bash blocks under "## Set-up: two commands"."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readme_shows_a_run_command_and_a_test_command():
    assert setup_commands() == ["pip install . && python -m jax_unpool demo",
                                "pip install '.[test]' && pytest"]


def test_ci_runs_each_readme_command_verbatim_from_the_repo_root():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert 'cd "$(dirname "$0")/.."' in ci  # the repo root, where a newcomer is
    commands = [line for line in ci if line and not line.startswith("#")]
    assert commands[-2:] == setup_commands()
    assert "set -euo pipefail" in ci
