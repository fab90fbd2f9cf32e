"""Sphinx configuration of the jax-unpool documentation (MyST Markdown pages, autodoc).

Build: pip install '.[docs]' && python -m sphinx -W --keep-going -b html docs docs/_build/html
Every warning is an error; tests/tools/test_docs.py runs this build into a temporary directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE / "_ext"), str(ROOT)]  # the extension below; the source tree

import jax_unpool  # after the path: the package documented is the source tree

# jax_unpool.keras imports Keras, whose default backend (TensorFlow) is not installed.
os.environ.setdefault("KERAS_BACKEND", "jax")

project = "jax-unpool"
author = "the jax-unpool authors"
copyright = "the jax-unpool authors"
release = version = jax_unpool.__version__

extensions = [
    "myst_parser",  # Markdown pages (MyST), as jax, flax and optax have them
    "sphinx.ext.autodoc",  # the API reference from the docstrings
    "sphinx.ext.napoleon",  # their Google style (Args:, Returns:, Raises:)
    "benchmark_report",  # docs/_ext: performance tables and plot from benchmarks/*.json
    "module_map",  # docs/_ext: the package's modules in import order, read from the sources
    "narrow_screens",  # docs/_ext: break points in the contents list, column names on cells
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3  # [text](page.md#a-section) links to a section of a page

autodoc_default_options = {"members": True, "member-order": "bysource"}
# jax_unpool.onnx's converter (the onnx extra, which needs jax >= 0.8.1) is not in the docs
# extra: its module docstring and exception are documented without it.
autodoc_mock_imports = ["jax2onnx", "onnx_ir"]
# One signature style for every public name, as PyTorch's documentation has it: names and
# defaults, no type hints (the pools' jax.typing.ArrayLike expands to an 8-part union, the
# unpools say Any); each docstring's Args say what an argument takes.
autodoc_typehints = "none"
autodoc_preserve_defaults = True  # data_format="NCHW", not the evaluated default
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "sphinx_book_theme"
html_title = "jax-unpool"
html_theme_options = {
    "show_toc_level": 2,
    "use_download_button": False,
    # One search box, the book theme's in the left sidebar: pydata-sphinx-theme 0.20 adds a
    # second one in a header bar unless navbar_persistent is set.
    "navbar_persistent": [],
}
html_static_path = ["_static"]
html_css_files = ["custom.css"]
pygments_style = "default"


def _signature_as_written(app, what, name, obj, options, signature, return_annotation):
    """Signatures autodoc cannot read as written: NNX's Module metaclass and Keras's
    Layer.__new__ are called with (*args, **kwargs), which autodoc shows for every NNX
    class and Keras layer, so show the class's __init__; jax_unpool.reference's functions carry their public function's signature
    (__signature__), whose index_dtype default autodoc shows as <class ...>, so show the
    public function's. Both with their defaults as written (autodoc_preserve_defaults)."""
    from sphinx.ext.autodoc.preserve_defaults import update_defvalue
    from sphinx.util import inspect

    if what == "class" and name.startswith(("jax_unpool.nnx.", "jax_unpool.keras.")):
        source, bound = obj.__init__, True
    elif what == "function" and name.startswith("jax_unpool.reference."):
        source, bound = getattr(jax_unpool, obj.__name__, None), False
        if source is None:  # scatter_planes, gather_planes: their own
            return None
    else:
        return None
    update_defvalue(app, source, bound_method=bound)
    written = inspect.signature(source, bound_method=bound,
                                type_aliases=app.config.autodoc_type_aliases)
    short = app.config.autodoc_typehints_format == "short"
    hints = app.config.autodoc_typehints in ("signature", "both")
    return (inspect.stringify_signature(written, show_annotation=hints,
                                        show_return_annotation=False,
                                        unqualified_typehints=short), return_annotation)


def _no_contents_entry_for_data(app, domain, objtype, content):
    """Constants and primitives (py:data: the NPU's FFI target names, the primitives) stay
    out of the page's contents list, which lists the functions and classes."""
    if domain == "py" and objtype == "data":
        content.parent["no-contents-entry"] = True


def setup(app):
    app.connect("autodoc-process-signature", _signature_as_written)
    app.connect("object-description-transform", _no_contents_entry_for_data)
