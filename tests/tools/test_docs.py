"""The documentation builds with warnings as errors (a broken page, link, reference or
docstring fails the suite) in an environment made from the `docs` extra alone, as the
README's command makes it; its performance page is drawn from the benchmark JSON, and its
API reference has an entry for every public name. The examples run in test_doc_examples.py.

The environment -- this checkout's build (repacked from the installed files, as
test_jax_window.py does) installed with its `docs` extra, nothing else -- is made once in
build/docs-env and made again when the installed build's requirements change.
"""

from __future__ import annotations

import html as markup
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import installed_build
import pytest

pytestmark = pytest.mark.release

ROOT = Path(__file__).resolve().parents[2]
DOCS_ENV = ROOT / "build" / "docs-env"


@pytest.fixture(scope="module")
def docs_python() -> Path:
    """The Python of the `docs` extra's environment (made here when it is not there, or
    when the installed build's requirements are not those it was made from)."""
    python, made = DOCS_ENV / "bin" / "python", DOCS_ENV / "requirements.json"
    wanted = json.dumps(sorted(installed_build.distribution().requires or []))
    if not made.is_file() or made.read_text() != wanted:
        wheel = installed_build.repack(DOCS_ENV.parent / "docs-env-wheel")
        shutil.rmtree(DOCS_ENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(DOCS_ENV)],
                       check=True)
        # This process's pip; no byte-compiling (it costs more than it saves here).
        done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python),
                               "--disable-pip-version-check", "install", "-q", "--no-compile",
                               f"{wheel}[docs]"],
                              capture_output=True, text=True, timeout=900, check=False)
        assert done.returncode == 0, f"pip install [docs] failed:\n{done.stdout}\n{done.stderr}"
        made.write_text(wanted)
    return python


@pytest.fixture(scope="module")
def html(tmp_path_factory, docs_python) -> Path:
    out = tmp_path_factory.mktemp("docs") / "html"
    done = subprocess.run(
        [str(docs_python), "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(ROOT / "docs"), str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"the docs build failed:\n{done.stdout}\n{done.stderr}"
    return out


def test_the_docs_environment_holds_the_docs_extra_alone(docs_python):
    # The README's `pip install '.[docs]'`: the package, its requirements and the extra's;
    # none of the test extra's (the suite's own environment has equinox, torch, pytest).
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(docs_python),
                           "list", "--format", "json"],
                          capture_output=True, text=True, timeout=300, check=True)
    installed = {p["name"].lower().replace("_", "-") for p in json.loads(done.stdout)}
    assert {"jax-unpool", "jax", "sphinx", "myst-parser", "flax"} <= installed
    assert not installed & {"torch", "pytest", "hypothesis", "nbclient"}


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
    assert page.count("<svg") == 2  # the plot, drawn at build time: for screens and phones
    assert result["machine"]["cpu"] in page


def test_the_api_reference_has_every_public_name(html):
    import jax_unpool
    import jax_unpool.equinox
    import jax_unpool.linen
    import jax_unpool.nnx

    # The NPU's names have their own page; every other public name is on the API page.
    pages = {module: (html / "api.html").read_text()
             for module in (jax_unpool, jax_unpool.reference, jax_unpool.nnx,
                            jax_unpool.linen, jax_unpool.equinox)}
    pages[jax_unpool.npu] = (html / "npu-reference.html").read_text()
    missing = []
    for module, page in pages.items():
        for name in module.__all__:
            target, where = f"{module.__name__}.{name}", page
            if isinstance(getattr(module, name), type(jax_unpool)):
                # jax_unpool.npu: its module entry is on its own page
                target, where = f"module-{target}", "".join(pages.values())
            if f'id="{target}"' not in where:
                missing.append(target)
    assert not missing, f"no entry in the API reference for {missing}"


def _contents(page: str) -> list[str]:
    """The entries of a page's contents list (the right-hand sidebar), as text."""
    toc = page[page.index('id="pst-page-toc-nav"'):]
    toc = toc[:toc.index("</nav>")]
    return [_text(link) for link in re.findall(r"<a class=\"reference internal nav-link\"[^>]*>"
                                               r"(.*?)</a>", toc, re.DOTALL)]


def test_the_api_page_leads_with_the_ops_and_layers_and_lists_no_constants(html):
    contents = _contents((html / "api.html").read_text())
    ops = [f"max_unpool{k}d()" for k in (1, 2, 3)] + [
        f"max_unpool{k}d_backward()" for k in (1, 2, 3)] + [
        f"max_pool{k}d_with_indices()" for k in (1, 2, 3)] + [
        "WindowIndices", "WindowIndices.input_size", "WindowIndices.to_flat()",
        "window_indices()", "export_safety_checks()"]
    assert contents[:len(ops) + 1] == ["Operations", *ops], contents
    layers = contents.index("Layers")
    assert layers == len(ops) + 1
    assert contents[layers + 1:layers + 8] == ["jax_unpool.nnx", "MaxPool1d", "MaxPool2d",
                                               "MaxPool3d", "MaxUnpool1d", "MaxUnpool2d",
                                               "MaxUnpool3d"], contents
    for name in ("api", "npu-reference"):
        listed = _contents((html / f"{name}.html").read_text())
        assert not [e for e in listed if e.endswith(("_TARGET", "_p"))], (name, listed)
    assert "register()" in _contents((html / "npu-reference.html").read_text())


def test_the_npu_reference_has_no_code_blocks_but_its_tables(html):
    # Issue 43: the NPU module's docstring, with its function list and chip table as
    # code blocks, is not rendered; the page has tables and lists.
    page = (html / "npu-reference.html").read_text()
    article = page[page.index("<article"):page.index("</article>")]
    assert "<pre" not in article
    assert article.count("<table") >= 1 and "<ul" in article
    assert "<em>" not in article  # no `*` of a path taken for emphasis


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


# --------------------------------------------------------------------------------------
# The API reference renders what the docstrings say (issue 32)
# --------------------------------------------------------------------------------------

def _entry(page: str, ident: str) -> str:
    """The HTML of the API entry `ident`: its <dl>, nested ones included."""
    start = page.rindex("<dl", 0, page.index(f'id="{ident}"'))
    depth, pos = 0, start
    for tag in re.finditer(r"<dl\b|</dl>", page[start:]):
        depth += 1 if tag.group() == "<dl" else -1
        pos = start + tag.end()
        if depth == 0:
            break
    return page[start:pos]


def _text(fragment: str) -> str:
    return " ".join(markup.unescape(re.sub(r"<[^>]+>", "", fragment)).split())


@pytest.fixture(scope="module")
def api(html) -> str:
    return (html / "api.html").read_text()


@pytest.mark.parametrize("ident, arguments", [
    ("jax_unpool.max_unpool2d", ["kernel_size", "stride", "padding"]),
    ("jax_unpool.max_pool2d_with_indices",
     ["kernel_size", "stride", "padding", "dilation", "ceil_mode"]),
])
def test_each_window_argument_has_its_own_description(api, ident, arguments):
    entry = _entry(api, ident)
    described = {name: _text(re.search(rf"<strong>{name}</strong>(.*?)</li>", entry,
                                       re.DOTALL).group(1)) for name in arguments}
    assert len(set(described.values())) == len(arguments), described


def test_raises_lists_name_an_exception_per_item(api):
    fields = re.findall(r'<dt class="field-\w+">Raises<span class="colon">:</span></dt>\s*'
                        r'<dd class="field-\w+">(.*?)</dd>', api, re.DOTALL)
    assert len(fields) >= 3  # max_unpool2d, its backward, max_pool2d_with_indices
    for field in fields:
        items = re.findall(r"<li>(.*?)</li>", field, re.DOTALL) or [field]
        for item in items:
            assert re.match(r"\s*<p><strong>[\w.]*(Error|Exception)</strong> – ", item), item
    assert ":raises" not in _text(api)


def test_the_npu_targets_are_described_by_their_own_text(html):
    page = (html / "npu-reference.html").read_text()
    for name in ("MAX_UNPOOL2D_TARGET", "MAX_UNPOOL2D_BACKWARD_TARGET", "MAX_UNPOOL3D_TARGET",
                 "MAX_UNPOOL3D_BACKWARD_TARGET", "MAX_POOL2D_TARGET", "MAX_POOL3D_TARGET",
                 "MAX_UNPOOL2D_CHECKED_TARGET", "MAX_UNPOOL2D_BACKWARD_CHECKED_TARGET",
                 "MAX_UNPOOL3D_CHECKED_TARGET", "MAX_UNPOOL3D_BACKWARD_CHECKED_TARGET"):
        text = _text(_entry(page, f"jax_unpool.npu.{name}"))
        assert "FFI target of aclnn" in text and "str(object=" not in text, text


def test_the_reference_signatures_show_the_defaults(api):
    assert "_DEFAULT_FORMAT" not in api and "data_format=data_format" not in api
    for ident, default in (("max_unpool1d", "data_format='NCW'"),
                           ("max_unpool3d_backward", "data_format='NCDHW'"),
                           ("max_pool2d_with_indices", "data_format='NCHW'"),
                           ("max_pool2d_with_indices", "index_dtype=jnp.int32, index_format='flat')")):
        signature = _text(re.search(r"<dt.*?</dt>",
                                    _entry(api, f"jax_unpool.reference.{ident}"),
                                    re.DOTALL).group())
        assert default in signature and "<class" not in signature, signature


def test_the_nnx_classes_show_their_arguments(api):
    for name in ("MaxPool2d", "MaxUnpool3d"):
        signature = _text(re.search(r"<dt.*?</dt>", _entry(api, f"jax_unpool.nnx.{name}"),
                                    re.DOTALL).group())
        assert "kernel_size" in signature and "data_format" in signature, signature
        assert "*args" not in signature
    assert "index_dtype=jnp.int32" in _text(_entry(api, "jax_unpool.nnx.MaxPool2d"))


def test_command_line_options_keep_their_two_hyphens(api):
    text = _text(api)
    assert "python -m jax_unpool bench [--quick] [--json PATH]" in text
    assert "\N{EN DASH}quick" not in text


def test_the_pages_use_markdown_links_that_github_renders():
    # MyST roles such as {doc}`layers` show as raw text on GitHub; Markdown links render
    # on both (a #jax_unpool.name link resolves to the API entry in the built docs).
    for page in (ROOT / "docs").glob("*.md"):
        prose = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
        roles = re.findall(r"\{(?:doc|func|mod|class|meth|data|ref)\}`[^`]*`", prose)
        assert not roles, (page.name, roles)


# --------------------------------------------------------------------------------------
# What a newcomer meets on the site (issue 39); docs/_static/custom.css's widths were
# checked in headless Chromium (docs/architecture.md, "This documentation")
# --------------------------------------------------------------------------------------

THEMES = {"sphinx-book-theme": "1.4.0", "pydata-sphinx-theme": "0.20.0"}


def test_the_themes_are_pinned_in_the_docs_extra_and_installed_so(docs_python):
    import tomllib

    # The docs extra alone holds them: the README's `pip install '.[test,release,docs]'`
    # is what runs this file (pytest -m release).
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for name, version in THEMES.items():
        assert f"{name}=={version}" in extras["docs"], name
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(docs_python),
                           "list", "--format", "json"],
                          capture_output=True, text=True, timeout=300, check=True)
    installed = {p["name"].lower().replace("_", "-"): p["version"]
                 for p in json.loads(done.stdout)}
    assert {name: installed.get(name) for name in THEMES} == THEMES


def _pages(html: Path) -> list[Path]:
    return [html / f"{p.stem}.html" for p in (ROOT / "docs").glob("*.md")]


def test_every_page_has_one_search_box(html):
    for page in _pages(html):
        assert page.read_text().count("search-button-field") == 1, page.name


def test_every_signature_names_its_arguments_and_defaults_without_type_hints(api):
    # One style for the pools (whose jax.typing.ArrayLike expands to an 8-part union) and
    # the unpools (typed Any): PyTorch's, names and defaults; the Args say the types.
    params = re.findall(r'<em class="sig-param">(.*?)</em>', api, re.DOTALL)
    assert len(params) > 100
    annotated = [_text(p) for p in params if '<span class="pre">:</span>' in p]
    assert not annotated
    assert "sig-return" not in api and "ndarray" not in api and "Any" not in _text(
        "".join(re.findall(r"<dt.*?</dt>", api, re.DOTALL)))
    signatures = {
        "max_unpool2d": ("max_unpool2d(x, indices, kernel_size=None, stride=None, padding=0, "
                         "output_size=None, *, data_format='NCHW')"),
        "max_pool2d_with_indices": ("max_pool2d_with_indices(x, kernel_size, stride=None, "
                                    "padding=0, dilation=1, ceil_mode=False, *, "
                                    "data_format='NCHW', index_dtype=jnp.int32, "
                                    "index_format='flat')"),
    }
    for ident, signature in signatures.items():
        shown = _text(re.search(r"<dt.*?</dt>", _entry(api, f"jax_unpool.{ident}"),
                                re.DOTALL).group())
        assert shown == f"jax_unpool.{signature}#", shown


def test_long_names_in_the_contents_list_may_break_after_an_underscore(api):
    toc = api[api.index('id="pst-page-toc-nav"'):]
    toc = toc[:toc.index("</nav>")]
    for name in ("max_unpool3d_backward", "max_pool3d_with_indices"):
        assert name.replace("_", "_<wbr/>") in toc, name  # as the theme writes <wbr>
    assert "<wbr" not in api[api.index("<article"):api.index("</article>")]


def test_every_table_cell_carries_its_column_name_for_narrow_screens(html):
    # custom.css shows a table's rows as "column: value" blocks below 576 px.
    tables = 0
    for page in _pages(html):
        for table in re.findall(r"<table\b.*?</table>", page.read_text(), re.DOTALL):
            if "<thead>" not in table:
                continue
            tables += 1
            head, body = table.split("</thead>")
            names = [_text(cell) for cell in re.findall(r"<th\b.*?</th>", head, re.DOTALL)]
            for row in re.findall(r"<tr\b.*?</tr>", body, re.DOTALL):
                labels = re.findall(r'<td data-label="([^"]*)"', row)
                assert [markup.unescape(label) for label in labels] == names, (page.name, row)
    assert tables >= 10


def test_files_named_in_the_pages_are_links(html):
    # CONTRIBUTING.md is a page of the site (contributing.md includes it).
    assert "Contributing to jax-unpool" in (html / "contributing.html").read_text()
    for page in _pages(html):
        if page.stem in ("changelog", "contributing"):
            continue
        article = page.read_text()
        article = article[article.index("<article"):article.index("</article>")]
        plain = re.sub(r"<a\b.*?</a>", "", article, flags=re.DOTALL)
        assert "CONTRIBUTING.md" not in _text(plain), page.name
    for name in ("index", "getting-started", "architecture"):
        links = re.findall(r'<a [^>]*href="contributing.html[^"]*"[^>]*>(.*?)</a>',
                           (html / f"{name}.html").read_text(), re.DOTALL)
        assert "CONTRIBUTING.md" in [_text(link) for link in links], name


@pytest.mark.parametrize("name", ["layers", "porting"])
def test_the_layouts_come_first_on_the_layer_and_porting_pages(html, name):
    article = (html / f"{name}.html").read_text()
    article = article[article.index("<article"):]
    first = _text(article[:article.index("<pre")])  # everything before the first example
    for said in ("channels-first", "channels-last", "Equinox", "NNX", "Linen", "silently"):
        assert said in first, said


# --------------------------------------------------------------------------------------
# Docs that put the user first (issue 43)
# --------------------------------------------------------------------------------------

def _bash_commands(markdown: str) -> list[str]:
    blocks = re.findall(r"^```bash\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()
            if line.strip()]


def test_getting_started_opens_with_the_readmes_two_commands():
    page = (ROOT / "docs" / "getting-started.md").read_text()
    readme = _bash_commands((ROOT / "README.md").read_text())[:2]
    assert readme == ["pip install . && python -m jax_unpool demo",
                      "pip install '.[test]' && pytest"]
    assert _bash_commands(page)[:2] == readme
    first_section = page.split("\n## ")[1]
    assert first_section.startswith("Install and run\n"), first_section[:40]
    assert page.index("```python") > page.index(readme[1])  # the commands come first


@pytest.mark.parametrize("internal", ["zig", "auditwheel", "FFI API", "manylinux",
                                      "abi3", "CMAKE_CUDA_ARCHITECTURES", "jax.core"])
def test_packaging_internals_are_on_the_packagers_page(internal):
    assert internal not in (ROOT / "docs" / "getting-started.md").read_text()
    assert internal in (ROOT / "docs" / "packaging.md").read_text()


def test_the_index_page_shows_the_demos_picture_and_code(html):
    page = (html / "index.html").read_text()
    article = page[page.index("<article"):page.index("</article>")]
    picture = re.search(r'<img alt="([^"]*)" src="(_images/demo\.png)"', article)
    assert picture and "prediction" in picture.group(1)
    assert (html / picture.group(2)).read_bytes() == (ROOT / "docs" / "demo.png").read_bytes()
    assert article.index("<pre") < article.index("<img")  # the example first
    assert "max_pool2d_with_indices" in _text(article[:article.index("<img")])


def test_the_performance_tables_show_few_columns_and_the_csv_has_them_all(html):
    import csv

    page = (html / "performance.html").read_text()
    tables = re.findall(r'<table class="benchmark-table.*?</table>', page, re.DOTALL)
    assert len(tables) == 5  # the targets, then the unpool, layout, pool and step sections
    for table in tables:
        assert len(re.findall(r"<th\b", table.split("</thead>")[0])) <= 8, table[:300]
    link = re.search(r'<a class="benchmark-csv reference external" href="([^"]+)">', page)
    assert link, "no link to the CSV"
    with (html / link.group(1)).open(newline="") as f:
        rows = list(csv.DictReader(f))
    result = json.loads((ROOT / "benchmarks" / "results-epyc-2core.json").read_text())
    assert len(rows) == len(result["rows"])
    for row, measured in zip(rows, result["rows"], strict=True):
        assert row["section"] == measured["section"] and row["op"] == measured.get("op", "")
        for field in ("jax_unpool_gbps", "jax_unpool_sys_ms", "xla_ms", "torch_ms"):
            if measured.get(field) is not None:  # columns the page's tables leave out
                assert float(row[field]) == measured[field], (field, row)


# --------------------------------------------------------------------------------------
# The pages as a browser lays them out (issue 43): headless Chromium at a phone's, a
# laptop's and a large screen's width, driven through chromedriver's WebDriver protocol
# (plain HTTP and JSON: no client library)
# --------------------------------------------------------------------------------------

WIDTHS = (420, 1280, 1920)

# What a reader cannot see: a table, caption, code block or picture wider than the box
# that shows it (a table that needs a sideways scroll counts: its last columns and its
# caption's end are out of sight), content that a box with overflow hidden cuts off, and a
# page wider than the window, or a caption squeezed into a narrow column above its table
# (a table shown as blocks keeps a table caption's width: its longest word). A code block that scrolls sideways (overflow auto) shows a
# scroll bar: allowed on a phone, but from 1200 px on, where docs/_static/custom.css wraps
# code, it must not scroll.
CLIPPED = """
const found = [];
const root = document.documentElement;
const name = (el) => el.tagName.toLowerCase() + (typeof el.className === "string" && el.className
  ? "." + el.className.trim().split(/\\s+/).join(".") : "");
const text = (el) => (el.textContent || "").trim().replace(/\\s+/g, " ").slice(0, 50);
if (root.scrollWidth > root.clientWidth + 1)
  found.push(`the page is ${root.scrollWidth} px wide in a ${root.clientWidth} px window`);
for (const el of document.querySelectorAll("article.bd-article :is(table, caption, pre, img, svg)")) {
  if (!el.getClientRects().length) continue;  // not shown at this width
  const r = el.getBoundingClientRect();
  const own = getComputedStyle(el).overflowX;
  if (el.scrollWidth > el.clientWidth + 1 && (own === "hidden" || own === "clip"))
    found.push(`${name(el)} "${text(el)}" hides ${el.scrollWidth - el.clientWidth} px of itself`);
  else if (el.scrollWidth > el.clientWidth + 1 && el.tagName === "PRE" && innerWidth >= 1200)
    found.push(`${name(el)} "${text(el)}" scrolls ${el.scrollWidth - el.clientWidth} px sideways`);
  if (el.tagName === "CAPTION" && r.width < el.closest("table").getBoundingClientRect().width / 2)
    found.push(`caption "${text(el)}" is ${Math.round(r.width)} px wide: a column of short lines`);
  for (let box = el.parentElement; box; box = box.parentElement) {
    const overflow = getComputedStyle(box).overflowX;
    if (overflow === "visible" && box !== root) continue;
    const left = box === root ? 0 : box.getBoundingClientRect().left + box.clientLeft;
    if (r.right > left + box.clientWidth + 1 || r.left < left - 1)
      found.push(`${name(el)} "${text(el)}" (${Math.round(r.width)} px) is cut by ${name(box)} ` +
                 `(${box.clientWidth} px, overflow ${overflow})`);
    break;
  }
}
return [window.innerWidth, found];
"""


class Chromium:
    """Headless Chromium through chromedriver: open a page, resize the window, run a
    script."""

    def __init__(self, driver: str, binary: str):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.process = subprocess.Popen([driver, f"--port={port}"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        self.url = f"http://127.0.0.1:{port}"
        for _ in range(200):
            try:
                self._call("GET", "/status")
                break
            except OSError:
                time.sleep(0.05)
        options = {"binary": binary, "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                              "--disable-dev-shm-usage"]}
        self.session = self._call("POST", "/session", {"capabilities": {"alwaysMatch": {
            "goog:chromeOptions": options}}})["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None):
        import urllib.error
        import urllib.request

        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return json.loads(response.read())["value"]
        except urllib.error.HTTPError as error:  # WebDriver's error, as its message says it
            raise AssertionError(json.loads(error.read())["value"]["message"]) from None

    def open(self, page: Path) -> None:
        self._call("POST", f"/session/{self.session}/url", {"url": page.as_uri()})
        # The theme animates its sidebars into place after a resize: measure where they end.
        self.run("const still = document.createElement('style'); still.textContent = "
                 "'*, *::before, *::after { transition: none !important; "
                 "animation: none !important; }'; document.head.append(still);")

    def resize(self, width: int, height: int = 1000) -> None:
        self._call("POST", f"/session/{self.session}/window/rect",
                   {"width": width, "height": height})
        # The page may see the new width a moment after the window has it.
        deadline = time.monotonic() + 10
        while self.run("return window.innerWidth") != width and time.monotonic() < deadline:
            time.sleep(0.02)

    def run(self, script: str):
        return self._call("POST", f"/session/{self.session}/execute/sync",
                          {"script": script, "args": []})

    def close(self) -> None:
        try:
            self._call("DELETE", f"/session/{self.session}")
        finally:
            self.process.terminate()
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def chromium():
    driver = shutil.which("chromedriver")
    binary = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                  "google-chrome"))), None)
    if not driver or not binary:
        pytest.skip("the width checks need headless Chromium and its driver: "
                    "apt-get install chromium chromium-driver (Debian's packages)")
    browser = Chromium(driver, binary)
    yield browser
    browser.close()


def clipped(browser: Chromium, page: Path) -> list[str]:
    """What `page` hides at each of WIDTHS."""
    browser.open(page)
    found = []
    for width in WIDTHS:
        browser.resize(width)
        inner, what = browser.run(CLIPPED)
        assert inner == width, (page.name, inner, width)  # the check ran at that width
        found += [f"{page.name} at {width} px: {w}" for w in what]
    return found


def test_no_page_hides_a_table_caption_or_code_at_a_phones_a_laptops_or_a_large_width(
        html, chromium):
    found = [f for page in _pages(html) for f in clipped(chromium, page)]
    assert not found, "\n".join(found)


def test_the_width_check_sees_what_a_reader_cannot(tmp_path, chromium):
    page = tmp_path / "page.html"
    table = ('<table><caption>a caption</caption>'
             '<tr><td><div style="width: 600px">wide</div></td></tr></table>')
    page.write_text(
        '<!DOCTYPE html><html><body><article class="bd-article">'
        f'<div style="overflow: hidden; width: 300px">{table}</div>'  # cut off
        f'<div style="overflow: auto; width: 300px">{table}</div>'  # a sideways scroll
        '<pre style="overflow: auto; width: 300px">' + "x" * 200 + "</pre>"  # its own scroll
        '<pre style="overflow: hidden; width: 300px">' + "y" * 200 + "</pre>"  # cut off
        '<table style="display: block; width: 300px"><caption>a caption of a few words'
        '</caption><tbody><tr><td>one cell</td></tr></tbody></table>'  # squeezed
        '<div style="width: 2500px">wider than every window</div>'
        "</article></body></html>")
    found = clipped(chromium, page)
    for width in WIDTHS:
        at = [f.split(": ", 1)[1] for f in found if f.startswith(f"page.html at {width} px:")]
        assert at[0].startswith("the page is 25"), at
        # the pre that scrolls itself only where code should wrap
        scrolls = ["pre"] if width >= 1200 else []
        assert [f.split(" ")[0] for f in at[1:]] == ["table", "caption", "table", "caption",
                                                    *scrolls, "pre", "caption"], at
        assert "overflow hidden" in at[1] and "overflow auto" in at[3], at
        assert at[-2].startswith(f'pre "{"y" * 50}" hides'), at
        assert at[-1].endswith("a column of short lines"), at
        assert not scrolls or at[5].startswith(f'pre "{"x" * 50}" scrolls'), at
