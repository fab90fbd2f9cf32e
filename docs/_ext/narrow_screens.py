"""Build-time touches to the HTML that let narrow columns read without scrolling sideways
(docs/_static/custom.css uses them):

- the page's contents list may break a code name after an underscore (``<wbr>``), so
  ``MAX_UNPOOL2D_BACKWARD_TARGET`` wraps inside the right-hand sidebar instead of being cut;
- every cell of a table with a header row carries its column's name (``data-label``), so
  that on a phone the stylesheet can show each row as a block of "column: value" lines.

Both act on the HTML strings the theme renders (html-page-context), not on the doctree:
docutils' HTML writer has no attribute for a column's name, and the contents list is the
theme's.
"""

from __future__ import annotations

import html
import re
from typing import Any

from sphinx.application import Sphinx

_CODE_TEXT = re.compile(r'(<span class="pre">)([^<]*)(</span>)')
_TABLE = re.compile(r"<table\b.*?</table>", re.DOTALL)
_HEADER_CELL = re.compile(r"<th\b[^>]*>(.*?)</th>", re.DOTALL)
_ROW = re.compile(r"<tr\b.*?</tr>", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")


def break_after_underscores(toc: str) -> str:
    """The contents list with a break opportunity after each underscore of its code."""
    return _CODE_TEXT.sub(lambda m: m[1] + m[2].replace("_", "_<wbr>") + m[3], toc)


def label_table_cells(body: str) -> str:
    """Each <td> of a table with one header row gets data-label="its column's name".
    Tables with spanning cells or several header rows are left as they are."""
    def label(table: re.Match) -> str:
        text = table.group()
        head, sep, rest = text.partition("</thead>")
        if not sep or "colspan" in text or "rowspan" in text or head.count("<tr") != 1:
            return text
        names = [" ".join(html.unescape(_TAG.sub("", cell)).split())
                 for cell in _HEADER_CELL.findall(head)]

        def row(match: re.Match) -> str:
            cells = iter(names)
            return re.sub(r"<td\b", lambda td: f'{td.group()} data-label="'
                          f'{html.escape(next(cells, ""))}"', match.group())

        return head + sep + _ROW.sub(row, rest)

    return _TABLE.sub(label, body)


def _touch_page(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any],
                doctree: Any) -> None:
    if context.get("toc"):
        context["toc"] = break_after_underscores(context["toc"])
    if context.get("body"):
        context["body"] = label_table_cells(context["body"])


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("html-page-context", _touch_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
