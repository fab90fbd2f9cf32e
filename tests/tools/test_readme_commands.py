"""The README's set-up commands are what CI runs: .ci/run holds each of them verbatim, so
the README cannot drift from what is tested on a clean checkout; and a failure anywhere
in one of them stops CI."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def setup_commands() -> list[str]:
    """The commands of the fenced bash blocks under "## Set-up: two commands"."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Set-up: two commands", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_readme_shows_a_run_command_and_a_test_command():
    assert setup_commands() == ["pip install . && python -m jax_unpool demo",
                                "pip install '.[test]' && pytest"]


CI = (ROOT / ".ci" / "run").read_text().splitlines()


def test_ci_runs_the_readme_commands_verbatim_from_the_repo_root_first():
    assert 'cd "$(dirname "$0")/.."' in CI  # the repo root, where a newcomer is
    assert "set -euo pipefail" in CI
    commands = [m.group(1) for line in CI if (m := re.fullmatch(r'run "(.*)"', line))]
    assert commands[:2] == setup_commands()


def test_ci_runs_the_heavy_suites_and_the_test_command_on_the_newest_python():
    commands = [m.group(1) for line in CI if (m := re.fullmatch(r'run "(.*)"', line))]
    assert any(c.endswith("&& pytest --all") for c in commands), commands
    # The README's test command again, in a Python 3.13 environment.
    assert commands[-1].endswith(f"&& {setup_commands()[1]}"), commands
    assert any("venv build/ci-python3.13" in c for c in commands), commands


def test_ci_fails_clearly_without_python_3_13(tmp_path):
    # The finder alone, with a PATH that has no python3.13 and a pyenv root without it.
    text = "\n".join(CI)
    finder = text[text.index("newest() {"):text.index("rm -rf build/ci-python3.13")]
    script = f'set -euo pipefail\npyenv() {{ echo {tmp_path}; }}\n{finder}'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 1
    assert "no Python 3.13" in done.stderr


def test_a_failure_left_of_and_stops_ci():
    # `set -e` alone ignores `false` in `false && true`; .ci/run's `run` must not.
    (definition,) = [line for line in CI if line.startswith("run() ")]
    script = f'set -euo pipefail\n{definition}\nrun "false && true"\necho reached\n'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "reached" not in done.stdout


def test_the_readme_names_the_heavy_suites_and_the_cpu_build_of_the_pinned_torch():
    import tomllib

    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Running the tests", 1)[1].split("\n## ", 1)[0]
    commands = [line for block in re.findall(r"```bash\n(.*?)```", section, re.DOTALL)
                for line in block.splitlines()]
    for marker in ("-m slow", "-m release", "--all"):  # tests/conftest.py's options
        assert any(f"pytest {marker}" in line for line in commands), marker
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert not [r for r in extras["test"] if r.startswith("torch")]  # the light extra
    (torch,) = extras["torch"]
    assert f"pip install {torch} --index-url" in " ".join(section.split())
