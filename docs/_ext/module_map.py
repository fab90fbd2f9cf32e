"""A Sphinx directive that reads the package's sources at build time and renders its
modules in import order, with the first line of each docstring and the package modules
each one imports (at module level or inside a function), so the architecture page's map
cannot go stale:

    ```{module-map} ../jax_unpool
    ```
    ```{test-map} ../tests
    ```

The test map lists the test files (test_*.py, in their folders) with the first sentence
of each docstring.
Layer 0 imports nothing of the package; a module of layer n imports only modules of
lower layers. tests/integration/test_import.py fails on an import circle; here one is a build error.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective


def _module_name(path: Path, package: Path) -> str:
    name = ".".join(path.relative_to(package.parent).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _exports(tree: ast.Module) -> set[str]:
    """The names a package's __init__ binds by importing them (its re-exports)."""
    return {alias.asname or alias.name for node in tree.body
            if isinstance(node, ast.ImportFrom | ast.Import) for alias in node.names}


def _imports(tree: ast.Module, modules: set[str], root: str, exports: set[str]) -> set[str]:
    """The package modules that the import statements of `tree` load: `from P import m`
    names the module P.m when there is one, the root for a name it re-exports (the public
    API), and nothing for anything else (the compiled extension)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                if sub in modules:
                    names.add(sub)
                elif node.module != root or alias.name in exports:
                    names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names & modules


def _summary(tree: ast.Module) -> str:
    doc = ast.get_docstring(tree) or ""
    first = " ".join(doc.split("\n\n", 1)[0].split())
    if first.endswith("::"):  # a paragraph that introduces a literal block
        first = first[:-1]
    return first.replace("``", "`")


def module_layers(package: Path) -> list[tuple[str, int, list[str], str]]:
    """(module, layer, package modules it imports, docstring summary) in layer order.
    The package root is one of them (it re-exports the public API; modules that import
    that API import it); ``__main__`` is left out."""
    sources = {_module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    root = package.name
    modules = set(sources) - {f"{root}.__main__"}
    trees = {m: ast.parse(sources[m].read_text()) for m in modules}
    exports = _exports(trees[root])
    deps = {m: sorted(_imports(trees[m], modules, root, exports) - {m}) for m in modules}
    layer: dict[str, int] = {}

    def depth(m: str, path: tuple[str, ...]) -> int:
        if m in path:
            raise ValueError(f"import circle: {' -> '.join((*path, m))}")
        if m not in layer:
            layer[m] = 1 + max((depth(d, (*path, m)) for d in deps[m]), default=-1)
        return layer[m]

    for m in modules:
        depth(m, ())
    return [(m, layer[m], deps[m], _summary(trees[m]))
            for m in sorted(modules, key=lambda m: (layer[m], m))]


def _inline(text: str) -> list[nodes.Node]:
    """Text with `code` spans as literals (docstrings use both `x` and ``x``)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: leave the text as it is
        return [nodes.Text(text)]
    return [nodes.literal(text=part) if i % 2 else nodes.Text(part)
            for i, part in enumerate(parts) if part]


class ModuleMap(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        _, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        package = Path(path)
        try:
            rows = module_layers(package)
        except (OSError, SyntaxError, ValueError) as error:
            raise self.error(f"module-map: {error}")
        for source in package.rglob("*.py"):
            self.env.note_dependency(str(source))
        entries = nodes.definition_list(classes=["module-map"])
        for name, layer, deps, summary in rows:
            term = nodes.term("", "", nodes.literal(text=name),
                              nodes.Text(f"  (layer {layer})"))
            uses = nodes.paragraph("", "imports: " if deps else "imports nothing of the package")
            for i, dep in enumerate(deps):
                if i:
                    uses += nodes.Text(", ")
                uses += nodes.literal(text=dep)
            definition = nodes.definition("", nodes.paragraph("", "", *_inline(summary)), uses)
            entries += nodes.definition_list_item("", term, definition)
        return [entries]


class TestMap(SphinxDirective):
    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        _, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        tests = Path(path)
        files = sorted(tests.rglob("test_*.py"), key=lambda p: (p.parent != tests, p))
        if not files:
            raise self.error(f"test-map: no test_*.py under {path}")
        items = nodes.bullet_list()
        for source in files:
            self.env.note_dependency(str(source))
            summary = _summary(ast.parse(source.read_text()))
            if not summary:
                raise self.error(f"test-map: {source.relative_to(tests)} has no docstring")
            item = nodes.paragraph("", "", nodes.literal(text=str(source.relative_to(tests))),
                                   nodes.Text(": "), *_inline(summary))
            items += nodes.list_item("", item)
        return [items]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("module-map", ModuleMap)
    app.add_directive("test-map", TestMap)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
