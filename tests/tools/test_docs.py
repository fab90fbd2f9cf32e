"""The documentation builds with warnings as errors (a broken page, link, reference or
docstring fails the suite), its performance page is drawn from the benchmark JSON, and its
API reference has an entry for every public name. The examples run in test_doc_examples.py.
"""

from __future__ import annotations

import html as markup
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "html"
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(ROOT / "docs"), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"the docs build failed:\n{done.stdout}\n{done.stderr}"
    return out


def test_every_page_is_built(html):
    sources = {p.stem for p in (ROOT / "docs").glob("*.md")}
    assert len(sources) >= 12
    assert sources <= {p.stem for p in html.glob("*.html")}


def test_the_performance_page_shows_the_benchmark_json(html):
    page = (html / "performance.html").read_text()
    result = json.loads((ROOT / "benchmarks" / "results-epyc-2core.json").read_text())
    unpool = [r for r in result["rows"] if r["section"] == "unpool"]
    assert unpool
    for row in unpool:  # every measured time and ratio, as the table rounds them
        shape = "x".join(map(str, row["shape"]))
        assert shape in page
        assert f"{row['speedup_vs_xla']:.2f}" in page and f"{row['speedup_vs_torch']:.2f}" in page
    for name, target in result["targets"].items():
        assert name in page and markup.escape(target["target"]) in page
    assert page.count("<svg") == 1  # the plot, drawn at build time
    assert result["machine"]["cpu"] in page


def test_the_api_reference_has_every_public_name(html):
    import jax_unpool
    import jax_unpool.equinox
    import jax_unpool.linen
    import jax_unpool.nnx

    page = (html / "api.html").read_text()
    modules = [jax_unpool, jax_unpool.reference, jax_unpool.npu, jax_unpool.nnx,
               jax_unpool.linen, jax_unpool.equinox]
    missing = []
    for module in modules:
        for name in module.__all__:
            target = f"{module.__name__}.{name}"
            if isinstance(getattr(module, name), type(jax_unpool)):
                target = f"module-{target}"
            if f'id="{target}"' not in page:
                missing.append(target)
    assert not missing, f"no entry in the API reference for {missing}"


def test_the_architecture_page_maps_every_module_and_test_file(html):
    page = (html / "architecture.html").read_text()
    modules = [".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
               for p in (ROOT / "jax_unpool").rglob("*.py")]
    for name in modules:
        if name not in ("jax_unpool", "jax_unpool.__main__"):
            assert f">{name}<" in page, name
    for test_file in (ROOT / "tests").rglob("test_*.py"):
        name = str(test_file.relative_to(ROOT / "tests"))
        assert f">{name}<" in page, name
