"""The Python examples of the documentation (docs/*.md and README.md): found, and run.

A page's ```python blocks run in order in one fresh namespace, from the repository root,
like a notebook. A ```text block that follows a Python block (nothing but blank lines
between) is the block's expected output. HTML comments, invisible on the rendered page,
configure the examples:

- ``<!-- examples: cpu_devices=N -->`` (anywhere in the page): run the page in a fresh
  process with N CPU devices; ``<!-- examples: subprocess -->``: in a fresh process with
  the default devices (for pages that load a CANN runtime or change jax's configuration);
- ``<!-- example: skip: REASON -->`` (the line before a block): show the block, don't run
  it -- for what cannot run here at all, such as real Ascend hardware.

Usable as a script, which is how the fresh processes run a page:
``python tests/helpers/doc_examples.py PAGE`` prints the outputs of its blocks as JSON.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(`{3,})(\S*)(?:\s.*)?$")  # ```python, ```{directive} argument
PAGE_CONFIG = re.compile(r"<!--\s*examples:\s*(.*?)\s*-->")
SKIP = re.compile(r"^<!--\s*example:\s*skip:\s*(.*?)\s*-->$")


@dataclass
class Block:
    line: int  # 1-based line of the first line of code
    code: str
    expected: str | None = None  # the ```text block that follows, if any
    skip: str | None = None  # the reason, if skipped


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    cpu_devices: int | None = None
    subprocess: bool = False

    @property
    def name(self) -> str:
        return str(self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path)


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def parse(path: Path) -> Page:
    """The page's Python blocks, their expected outputs and skips, and its configuration."""
    lines = path.read_text().splitlines()
    page = Page(path)
    for config in PAGE_CONFIG.findall("\n".join(lines)):
        for item in config.split():
            if item == "subprocess":
                page.subprocess = True
            elif item.startswith("cpu_devices="):
                page.cpu_devices = int(item.split("=", 1)[1])
                page.subprocess = True
            else:
                raise ValueError(f"{path.name}: unknown examples setting {item!r}")
    fences = []  # (language, first line of content, content)
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        ticks, language, start = match.group(1), match.group(2), i + 1
        end = next((j for j in range(start, len(lines)) if lines[j].strip() == ticks), None)
        if end is None:
            raise ValueError(f"{path.name}:{i + 1}: unclosed code fence")
        fences.append((language, start, end, "\n".join(lines[start:end])))
        i = end + 1
    for n, (language, start, end, content) in enumerate(fences):
        if language != "python":
            continue
        block = Block(line=start + 1, code=content)
        before = next((lines[j].strip() for j in range(start - 2, -1, -1) if lines[j].strip()),
                      "")
        if skip := SKIP.match(before):
            if not skip.group(1):
                raise ValueError(f"{path.name}:{start}: a skipped example needs a reason")
            block.skip = skip.group(1)
        if n + 1 < len(fences):
            following, next_start, _, next_content = fences[n + 1]
            between = lines[end + 1:next_start - 1]
            if following == "text" and not any(line.strip() for line in between):
                block.expected = next_content
        page.blocks.append(block)
    return page


def run_blocks(page: Page, namespace: dict | None = None) -> list[str]:
    """Runs the page's blocks in one namespace (a fresh one, or `namespace`, which then
    holds what the page defined); returns each block's stdout. A failing block raises
    AssertionError naming the page and line, with the traceback."""
    namespace = {"__name__": "__main__"} if namespace is None else namespace
    outputs = []
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        for block in page.blocks:
            if block.skip:
                outputs.append("")
                continue
            # Pad so that tracebacks give the line numbers of the page.
            code = compile("\n" * (block.line - 1) + block.code, str(page.path), "exec")
            out = io.StringIO()
            try:
                with contextlib.redirect_stdout(out):
                    exec(code, namespace)  # noqa: S102 -- the documentation's own examples
            except Exception:  # noqa: BLE001 -- reported with the page's line numbers
                raise AssertionError(f"{page.name}:{block.line}: the example failed:\n"
                                     f"{traceback.format_exc()}") from None
            outputs.append(out.getvalue())
    finally:
        os.chdir(cwd)
    return outputs


def run_in_process(page: Page, timeout: float = 600) -> list[str]:
    """Runs the page with ``python tests/helpers/doc_examples.py`` in a fresh process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if page.cpu_devices:
        env["JAX_NUM_CPU_DEVICES"] = str(page.cpu_devices)
    done = subprocess.run([sys.executable, __file__, str(page.path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise AssertionError(f"{page.name} in a fresh process:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.rsplit("\n@@outputs@@\n", 1)[1])


if __name__ == "__main__":
    results = run_blocks(parse(Path(sys.argv[1])))
    print("\n@@outputs@@\n" + json.dumps(results))
