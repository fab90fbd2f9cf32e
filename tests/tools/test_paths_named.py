"""Every repository path that the prose names exists (issue 44, "prose that stays true").

The prose: README.md, CONTRIBUTING.md and docs/*.md, whole; and the comments and
docstrings of jax_unpool/, ffi/, tests/, tools/ and benchmarks/ (code is left to the code's
own tests). A path is a name that starts with one of the repository's folders
(`ffi/cpu/max_pool.cc`, `tests/backends/cuda/`), brace lists and globs included
(`ffi/cuda/*.cu` exists when something matches it), or a bare test file name
(`test_docs.py`, somewhere under tests/). Names that other repositories' paths share with
ours (hicann/ops-nn has its own `docs/` and `tests/`) are listed in FOREIGN, with their
repository; build outputs that git ignores (`jax_unpool/_jax_unpool*.so`) need only their
folder.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = (".ci", ".github", "benchmarks", "cmake", "docs", "ffi", "jax_unpool", "notebooks",
           "tests", "tools")
DOCS = ["README.md", "CONTRIBUTING.md", "docs/*.md"]
CODE = ["jax_unpool", "ffi", "tests", "tools", "benchmarks"]
SKIPPED = ("ffi/third_party/",)  # vendored sources: their prose names their own tree

# Paths of other repositories that start like ours, each with the repository it is in.
FOREIGN = {
    "tests/assets/golden.py": "hicann/ops-nn, pooling/max_pool3d_with_argmax_v2/",
    "tests/st/aclnnMaxPool2dWithIndices/executor_*.py":
        "hicann/ops-nn, pooling/max_pool3d_with_argmax_v2/",
    "docs/aclnnMaxPool{2dWithIndices,3dWithArgmax}.md":
        "hicann/ops-nn, pooling/max_pool3d_with_argmax_v2/",
    "docs/api_docs/aclrtMemcpy.md": "hicann/runtime",
}

_FOLDERS = "|".join(re.escape(folder) for folder in FOLDERS)
PATH = re.compile(rf"(?<![\w./@~$-])(?:{_FOLDERS})/[\w.*?{{}},/-]*")
TEST_FILE = re.compile(r"(?<![\w./@~$-])test_[\w*?]*\.py\b")
# A placeholder in a path: `results-MACHINE.json`, `results-<machine>.json`.
PLACEHOLDER = re.compile(r"(?<=[-_])[A-Z][A-Z0-9]{2,}(?=[.-])")


# --------------------------------------------------------------------------------------
# The prose of each kind of file
# --------------------------------------------------------------------------------------

def python_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of each comment and docstring of Python source."""
    found = [(token.start[0], token.string)
             for token in tokenize.generate_tokens(io.StringIO(text).readline)
             if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                found.append((body[0].lineno, body[0].value.value))
    return found


def c_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of each // and /* */ comment of C++ or CUDA source: string and
    character literals skipped, so that "http://" is no comment."""
    found, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            found.append((text.count("\n", 0, i) + 1, text[i + 2:end]))
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            found.append((text.count("\n", 0, i) + 1, text[i + 2:end]))
            i = end + 2
        else:
            i += 1
    return found


def hash_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of each # comment of a shell, CMake, YAML or requirements file."""
    return [(number, match.group(1)) for number, line in enumerate(text.splitlines(), 1)
            if (match := re.search(r"(?:^|\s)#(.*)$", line))]


def prose_of(path: Path) -> list[tuple[int, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:  # data: .npz, .bin
        return []
    if path.suffix == ".md":
        return [(1, text)]
    if path.suffix == ".py" or text.startswith("#!/usr/bin/env python"):
        return python_prose(text)
    if path.suffix in (".cc", ".h", ".cu", ".cuh"):
        return c_prose(text)
    if path.suffix in (".txt", ".cmake", ".yml", ".toml", ".sh") or text.startswith("#!"):
        return hash_prose(text)
    return []  # data: .json, .ipynb, ...


def files() -> list[Path]:
    found = [p for pattern in DOCS for p in sorted(ROOT.glob(pattern))]
    for folder in CODE:
        found += sorted(p for p in (ROOT / folder).rglob("*") if p.is_file()
                        and not _ignored(p.relative_to(ROOT).as_posix())
                        and not p.relative_to(ROOT).as_posix().startswith(SKIPPED))
    return found


# --------------------------------------------------------------------------------------
# Names, and whether they exist
# --------------------------------------------------------------------------------------

def _ignore_patterns() -> list[str]:
    lines = (ROOT / ".gitignore").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


IGNORED = _ignore_patterns()


def _ignored(path: str) -> bool:
    """Whether git ignores `path` (a subset of gitignore's rules: enough for ours)."""
    parts = path.split("/")
    for pattern in IGNORED:
        folder = pattern.endswith("/")
        pattern = pattern.strip("/")
        if "/" in pattern:  # anchored at the root
            if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
                return True
        elif any(fnmatch.fnmatch(part, pattern) for part in (parts[:-1] if folder else parts)):
            return True
    return False


def expand_braces(name: str) -> list[str]:
    found = re.search(r"\{([^{}]*)\}", name)
    if not found:
        return [name]
    return [n for alternative in found.group(1).split(",")
            for n in expand_braces(name[:found.start()] + alternative + name[found.end():])]


def paths_named(text: str) -> list[tuple[int, str]]:
    """(offset, name) of the repository paths and bare test file names in `text`; a
    placeholder in a name is a glob's `*`."""
    names = []
    for match in PATH.finditer(text):
        name = match.group().rstrip(".,:;")
        if name.count("{") > name.count("}"):  # a brace list that was cut: its folder
            name = name[:name.index("{")]
        if text.startswith("<", match.start() + len(name)):
            name += "*"
        names.append((match.start(), PLACEHOLDER.sub("*", name)))
    names += [(match.start(), match.group()) for match in TEST_FILE.finditer(text)]
    return sorted(names)


TEST_FILES = sorted(p.name for p in (ROOT / "tests").rglob("test_*.py"))


def exists(name: str) -> bool:
    if name in FOREIGN:
        return True
    if "/" not in name:  # a bare test file name
        return any(fnmatch.fnmatch(f, n) for n in expand_braces(name) for f in TEST_FILES)
    return all(_exists(path.rstrip("/")) for path in expand_braces(name))


def _exists(path: str) -> bool:
    while _ignored(path):  # a build output: the folder it is built in is enough
        path = path.rsplit("/", 1)[0]
    candidates = [path]
    if path.rsplit("/", 1)[-1].startswith("test_"):  # `tools/test_cli.py`, under tests/
        candidates.append(f"tests/{path}")
    return any(any(True for _ in ROOT.glob(p)) if any(c in p for c in "*?[")
               else (ROOT / p).exists() for p in candidates)


def missing_paths() -> list[str]:
    missing = []
    for path in files():
        for line, text in prose_of(path):
            for offset, name in paths_named(text):
                if not exists(name):
                    where = line + text.count("\n", 0, offset)
                    missing.append(f"{path.relative_to(ROOT)}:{where}: {name}")
    return missing


# --------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------

def test_every_path_the_prose_names_exists():
    missing = missing_paths()
    assert not missing, "paths named that do not exist:\n" + "\n".join(missing)


def test_the_prose_is_read_where_it_is():
    # Each kind of file gives its prose, and only its prose.
    python = ('"""Doc: tests/a.py."""\nx = "tests/code.py"  # tests/b.py\n'
              'def f():\n    """tests/c.py"""\n')
    assert [t for _, t in python_prose(python)] == ["# tests/b.py", "Doc: tests/a.py.",
                                                    "tests/c.py"]
    c = ('const char* url = "http://x/tests/code.cc"; // tests/a.cc\n'
         "/* tests/b.h\n   tests/c.h */ char q = '\"'; // tests/d.cc")
    assert [t.strip() for _, t in c_prose(c)] == ["tests/a.cc", "tests/b.h\n   tests/c.h",
                                                 "tests/d.cc"]
    assert hash_prose("cmake  # tests/a.txt\necho ${#x}\n# tests/b\n") == [
        (1, " tests/a.txt"), (3, " tests/b")]


def test_a_name_is_a_path_only_where_it_starts_a_path():
    text = ("See ffi/cuda/*.cu, (tests/backends/cuda/), `ffi/cpu/{max_pool,max_unpool}.cc`; "
            "not src/tests/x.py, hicann/ops-nn/docs/y.md, jax_unpool.backends.npu or "
            "https://github.com/a/b/tree/main/tests/z. Also test_docs.py and test_pool*.py; "
            "benchmarks/results-MACHINE.json and benchmarks/results-<machine>.json.")
    assert [name for _, name in paths_named(text)] == [
        "ffi/cuda/*.cu", "tests/backends/cuda/", "ffi/cpu/{max_pool,max_unpool}.cc",
        "test_docs.py", "test_pool*.py", "benchmarks/results-*.json", "benchmarks/results-*"]


@pytest.mark.parametrize("name, found", [
    ("ffi/cpu/max_pool.cc", True),
    ("ffi/cuda/*.cu", True),
    ("ffi/cpu/{max_pool,max_unpool}.cc", True),
    ("tests/tools/", True),
    ("docs/", True),
    ("test_paths_named.py", True),
    ("jax_unpool/_jax_unpool*.so", True),  # a build output in a folder that exists
    ("tests/boundary/", False),
    ("ffi/cpu/pool_values.h", False),
    ("ffi/cpu/{max_pool,pool_values}.h", False),
    ("ffi/cuda/*.cpp", False),
    ("test_pooling*.py", False),
    ("tools/test_docs.py", True),  # a test file, named from tests/
    ("tools/test_nothing.py", False),
    ("docs/_build/html", True),  # ignored by git: built, never committed
])
def test_a_path_exists_where_the_tree_has_it(name, found):
    assert exists(name) == found


def test_the_foreign_paths_are_not_ours():
    # A path of another repository that this repository gained would hide a stale name.
    for name in FOREIGN:
        assert not any(True for n in expand_braces(name) for _ in ROOT.glob(n)), name
