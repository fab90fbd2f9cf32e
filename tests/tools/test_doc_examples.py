"""Every Python example of the documentation (docs/*.md) and of the README runs, and
prints what the page says it prints: a page's blocks in order in one fresh namespace,
pages that need several devices or a CANN runtime in a fresh process (tests/helpers/doc_examples.py
says how pages mark that)."""

from __future__ import annotations

import importlib.util

import doc_examples
import pytest
from torch_oracle import needs_torch

pytestmark = pytest.mark.slow

PAGES = [doc_examples.parse(path) for path in doc_examples.pages()]
WITH_EXAMPLES = [page for page in PAGES if page.blocks]


def _needs(page) -> list:
    """A page that ports a PyTorch model (docs/porting.md) runs where torch is installed;
    one that converts to ONNX (docs/deploy.md), where the onnx extra is."""
    code = "\n".join(b.code for b in page.blocks)
    marks = [needs_torch] if "import torch" in code else []
    if "import onnxruntime" in code:
        marks.append(pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None,
                                        reason="pip install '.[onnx]'"))
    return marks


@pytest.mark.parametrize("page", [pytest.param(p, marks=_needs(p), id=p.name)
                                  for p in WITH_EXAMPLES])
def test_the_page_examples_run_and_print_what_the_page_shows(page):
    if page.subprocess:
        outputs = doc_examples.run_in_process(page)
    else:
        outputs = doc_examples.run_blocks(page)
    for block, output in zip(page.blocks, outputs, strict=True):
        if block.expected is not None and not block.skip:
            assert output.rstrip() == block.expected.rstrip(), (
                f"{page.name}:{block.line}: the example printed\n{output}\n"
                f"but the page shows\n{block.expected}")


def test_the_examples_are_found_on_every_page_that_has_them():
    # The parser sees the pages' blocks (an unrecognised fence would hide them all).
    names = {page.name for page in WITH_EXAMPLES}
    assert {"README.md", "docs/index.md", "docs/getting-started.md", "docs/semantics.md",
            "docs/autodiff.md", "docs/pooling.md", "docs/layers.md", "docs/porting.md",
            "docs/distributed.md", "docs/export.md", "docs/npu.md"} <= names
    assert all(block.code.strip() for page in PAGES for block in page.blocks)


def test_only_what_cannot_run_here_is_skipped():
    skipped = [(page.name, block.skip) for page in PAGES for block in page.blocks
               if block.skip]
    assert skipped == [("docs/npu.md", "needs an Ascend device, its PJRT plugin and CANN")]


def _page(name: str) -> doc_examples.Page:
    return next(page for page in PAGES if page.name == name)


def test_the_index_shows_the_readmes_first_example():
    # Issue 43: the site's first page shows the README's first example and its output.
    readme = _page("README.md")
    heading = readme.path.read_text().splitlines().index("## A first example") + 1
    first = next(block for block in readme.blocks if block.line > heading)
    shown = _page("docs/index.md").blocks[0]
    assert (shown.code, shown.expected) == (first.code, first.expected)
    assert first.expected


def test_the_export_page_leads_with_the_safety_checks_and_shows_the_error_without():
    blocks = _page("docs/export.md").blocks
    assert "disabled_checks=ju.export_safety_checks()" in blocks[0].code
    refused = [b for b in blocks if "jax.export.export(jax.jit(step))(" in b.code]
    assert [b.expected for b in refused] == [
        ("ValueError: Cannot serialize code with custom calls whose targets have no "
         "compatibility guarantees")]
    run = "\n".join(b.code for b in blocks if not b.skip)
    assert "nnx.to_pure_dict(" in run and "nnx.replace_by_pure_dict(" in run


def test_a_failing_example_names_its_page_and_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n```python\nx = 1\n```\n\n```python\n\nraise ValueError(x)\n```\n")
    parsed = doc_examples.parse(page)
    with pytest.raises(AssertionError, match=r"page\.md:8: the example failed") as error:
        doc_examples.run_blocks(parsed)
    assert f'File "{page}", line 9' in str(error.value)


def test_a_text_block_after_an_example_is_its_expected_output(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```python\nprint(1 + 1)\n```\n\n```text\n2\n```\n\nprose\n\n"
                    "```python\nprint(3)\n```\n\nprose\n\n```text\nnot an output\n```\n")
    first, second = doc_examples.parse(page).blocks
    assert (first.expected, second.expected) == ("2", None)
    assert doc_examples.run_blocks(doc_examples.parse(page)) == ["2\n", "3\n"]
