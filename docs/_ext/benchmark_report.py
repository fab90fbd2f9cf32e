"""Sphinx directives that render a benchmark run (the JSON of `python -m jax_unpool bench
--json PATH`) at build time, so the performance page shows what was measured, never a
pasted copy:

    ```{benchmark-machine} ../benchmarks/results-epyc-2core.json
    ```
    ```{benchmark-table} ../benchmarks/results-epyc-2core.json
    :section: unpool
    ```
    ```{benchmark-plot} ../benchmarks/results-epyc-2core.json
    ```
    ```{benchmark-targets} ../benchmarks/results-epyc-2core.json
    ```
    ```{benchmark-csv} ../benchmarks/results-epyc-2core.json
    ```

Paths are relative to the page, as literalinclude's. The plot is an inline SVG drawn with
matplotlib. The tables show the columns that fit a page; benchmark-csv links every field
of every row, as a CSV file that the build writes into the HTML output. A missing field
shows as "-"; a section the run did not measure says so.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path
from typing import Any, ClassVar

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective
from sphinx.util.osutil import relative_uri


def _shape(values: list[int] | None) -> str:
    return "x".join(map(str, values)) if values else "-"


def _number(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) < 0.1 and value != 0:  # tiny shapes: to 0.1 us
        return f"{value:.4f}"
    return f"{value:.{digits}f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


# The timing columns of the unpool and the pool sections: ours against XLA and PyTorch, as
# speedups, and ours against the memory bandwidth. The milliseconds of XLA and PyTorch, the
# GB/s of each contender and the OS time are in the CSV (benchmark-csv): all twelve
# columns do not fit a page 1280 px wide.
_TIMINGS: list[tuple[str, Any]] = [
    ("ours ms", lambda r: _number(r.get("jax_unpool_ms"))),
    ("xla/ours", lambda r: _ratio(r.get("speedup_vs_xla"))),
    ("torch/ours", lambda r: _ratio(r.get("speedup_vs_torch"))),
    ("of bw", lambda r: _ratio(r.get("bandwidth_fraction"))),
]

# Per section: its caption and its columns (heading, how to render a row).
COLUMNS: dict[str, tuple[str, list[tuple[str, Any]]]] = {
    "unpool": (
        ("max_unpool, channels first: ours ms is jax_unpool's milliseconds per call; "
         "xla/ours and torch/ours are speedups (above 1: ours is faster); of bw is the op's "
         "least traffic per second as a fraction of the memory bandwidth"),
        [("op", lambda r: r["op"]), ("rank", lambda r: str(r.get("rank", "-"))),
         ("shape", lambda r: _shape(r.get("shape"))),
         ("index", lambda r: r.get("index_dtype", "-"))] + _TIMINGS,
    ),
    "layout": (
        ("jax_unpool in NHWC against NCHW: milliseconds per call (NHWC/NCHW above 1: "
         "channels-last is slower)"),
        [("op", lambda r: r["op"]), ("shape", lambda r: _shape(r.get("shape"))),
         ("index", lambda r: r.get("index_dtype", "-")),
         ("NCHW ms", lambda r: _number(r.get("nchw_ms"))),
         ("NHWC ms", lambda r: _number(r.get("nhwc_ms"))),
         ("NHWC/NCHW", lambda r: _ratio(r.get("nhwc_vs_nchw")))],
    ),
    "pool": (
        ("max_poolNd_with_indices (2 per axis, stride 2; shape = the pooled result) against "
         "torch.max_poolNd(return_indices=True) [+ autograd] and jax_unpool.reference's XLA "
         "ops; columns as above"),
        [("op", lambda r: r["op"]), ("layout", lambda r: r.get("format", "-")),
         ("shape", lambda r: _shape(r.get("shape")))] + _TIMINGS,
    ),
    "step": (
        ("SegNet-style training step, jitted; pooling = its 2 pools and 2 unpools, forward "
         "and gradient, timed alone at the model's shapes"),
        [("layout", lambda r: r.get("layout", "-")),
         ("batch x image x width",
          lambda r: _shape([r.get("batch"), r.get("image"), r.get("width")])),
         ("impl", lambda r: r.get("impl", "-")),
         ("step ms", lambda r: _number(r.get("step_ms"))),
         ("pooling ms", lambda r: _number(r.get("pooling_ms"))),
         ("share", lambda r: _ratio(r.get("pooling_share")))],
    ),
}

# The CSV's first columns, in this order; every other field of the rows follows, sorted.
CSV_FIRST = ["section", "op", "rank", "layout", "format", "shape", "output_shape",
             "input_shape", "dtype", "index_dtype", "jax_unpool_ms", "xla_ms", "torch_ms",
             "speedup_vs_xla", "speedup_vs_torch", "jax_unpool_gbps", "xla_gbps",
             "torch_gbps", "bandwidth_fraction", "jax_unpool_sys_ms", "xla_sys_ms"]


def rows_as_csv(result: dict[str, Any]) -> str:
    """Every field of every row of a run, one line per row (shapes as 8x64x112x112, a
    missing field empty)."""
    rows = result.get("rows", [])
    fields = {key for row in rows for key in row}
    header = [f for f in CSV_FIRST if f in fields] + sorted(fields - set(CSV_FIRST))
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_shape(v) if isinstance(v, list) else "" if v is None else v
                         for v in (row.get(f) for f in header)])
    return out.getvalue()


def _table(heading: list[str], body: list[list[str]], caption: str | None = None) -> nodes.table:
    table = nodes.table(classes=["benchmark-table"])
    if caption:
        table += nodes.title(text=caption)
    group = nodes.tgroup(cols=len(heading))
    table += group
    group.extend(nodes.colspec(colwidth=1) for _ in heading)

    def row(cells: list[str]) -> nodes.row:
        out = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph(text=cell)
            out += entry
        return out

    group += nodes.thead("", row(heading))
    group += nodes.tbody("", *(row(cells) for cells in body))
    return table


class _BenchmarkDirective(SphinxDirective):
    required_arguments = 1
    has_content = False

    def result(self) -> dict[str, Any]:
        rel, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        self.env.note_dependency(rel)
        try:
            return json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise self.error(f"{self.name}: cannot read benchmark results {path}: {error}")


class BenchmarkMachine(_BenchmarkDirective):
    """One paragraph: where and with what the run was measured."""

    def run(self) -> list[nodes.Node]:
        result = self.result()
        m, s = result.get("machine", {}), result.get("settings", {})
        load = ", ".join(f"{v:.2f}" for v in m.get("load_average_before", []))
        text = (f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores; Python {m.get('python')}, "
                f"jax {m.get('jax')}, jaxlib {m.get('jaxlib')}, numpy {m.get('numpy')}, "
                f"torch {m.get('torch')}; median of {s.get('reps', '?')} samples after "
                f"{s.get('warmup', '?')} warm-up calls; load average before the run {load}.")
        bandwidth = result.get("bandwidth") or {}
        paragraphs = [nodes.paragraph(text=text)]
        if bandwidth:
            paragraphs.append(nodes.paragraph(text=(
                "Memory bandwidth measured by numpy in the same run (GB/s, copies count "
                "bytes read and written): " + ", ".join(
                    f"{k.replace('_', ' ')} {v:.1f}" for k, v in bandwidth.items()) + ".")))
        return paragraphs


class BenchmarkTable(_BenchmarkDirective):
    """The rows of one section (unpool, layout, pool, step) as a table."""

    option_spec: ClassVar[dict[str, Any]] = {"section": directives.unchanged_required}

    def run(self) -> list[nodes.Node]:
        section = self.options.get("section", "unpool")
        if section not in COLUMNS:
            raise self.error(f"benchmark-table: unknown section {section!r}; "
                             f"one of {sorted(COLUMNS)}")
        rows = [r for r in self.result().get("rows", []) if r.get("section") == section]
        if not rows:
            return [nodes.paragraph(text=f"(This run did not measure the {section} section.)")]
        caption, columns = COLUMNS[section]
        body = [[render(r) for _, render in columns] for r in rows]
        return [_table([name for name, _ in columns], body, caption)]


class BenchmarkTargets(_BenchmarkDirective):
    """The run's targets (medians over the large shapes) and whether each held."""

    def run(self) -> list[nodes.Node]:
        targets = self.result().get("targets", {})
        # Runs before the verdict field: from "holds" alone.
        verdict = {True: "holds", False: "missed", None: "not measured"}
        body = [[name, _number(t.get("value"), 3) if t.get("value") is not None else "-",
                 t.get("target", "-"), t.get("verdict", verdict[t.get("holds")]).lower()]
                for name, t in targets.items()]
        return [_table(["target", "measured", "goal", "verdict"], body,
                       "Targets: float32 values, int32 indices; medians over the large "
                       "2-D shapes")]


class BenchmarkCsv(_BenchmarkDirective):
    """A link to every field of every row of the run as CSV, which the build writes into
    the HTML output (_downloads/<the JSON's name>.csv) when it finishes."""

    def run(self) -> list[nodes.Node]:
        rel, path = self.env.relfn2path(self.arguments[0], self.env.docname)
        self.env.note_dependency(rel)
        name = f"{Path(path).stem}.csv"
        if not hasattr(self.env, "benchmark_csv"):
            self.env.benchmark_csv = {}
        self.env.benchmark_csv[name] = path
        uri = relative_uri(self.env.app.builder.get_target_uri(self.env.docname),
                           f"{DOWNLOADS}/{name}")
        paragraph = nodes.paragraph(text="Every column of every row, the times and GB/s of "
                                         "XLA and PyTorch and the OS time included: ")
        paragraph += nodes.reference("", name, refuri=uri, classes=["benchmark-csv"])
        paragraph += nodes.Text(" (CSV).")
        return [paragraph]


DOWNLOADS = "_downloads"


def _merge_csv(app: Sphinx, env: Any, docnames: set[str], other: Any) -> None:
    env.benchmark_csv = {**getattr(env, "benchmark_csv", {}),
                         **getattr(other, "benchmark_csv", {})}


def _write_csv(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.format != "html":
        return
    for name, path in getattr(app.env, "benchmark_csv", {}).items():
        out = Path(app.outdir) / DOWNLOADS / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(rows_as_csv(json.loads(Path(path).read_text())))


PLOT_CAPTION = ("Speedup of jax_unpool per shape over XLA's ops (jax_unpool.reference) and "
                "over PyTorch, log scale: above 1 (the black line) ours is faster. float32 "
                "values, int32 indices, channels first.")
_PANELS = (("unpool", "forward", "max_unpool forward"),
           ("unpool", "backward", "max_unpool backward"),
           ("pool", "forward", "max_pool forward"),
           ("pool", "forward+grad", "max_pool forward + gradient"))


def speedup_figure(result: dict[str, Any], columns: int = 2):
    """The speedups of jax_unpool over XLA and over PyTorch per shape (float32 values,
    int32 indices, channels first), one panel per measured op, `columns` panels a row;
    None when the run has no such rows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    rows = [r for r in result.get("rows", [])
            if r.get("section") in ("unpool", "pool") and r.get("index_dtype") == "int32"
            and r.get("dtype") == "float32"
            and r.get("layout", "channels_first") == "channels_first"]
    panels = [(s, op, title) for s, op, title in _PANELS
              if any(r["section"] == s and r["op"] == op for r in rows)]
    if not panels:
        return None
    lines = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(lines, columns, figsize=(3.3 * columns, 2.9 * lines + 0.4),
                             sharey=True, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (section, op, title) in zip(axes.flat, panels):
        mine = [r for r in rows if r["section"] == section and r["op"] == op]
        at = range(len(mine))
        for offset, key, label in ((-0.2, "speedup_vs_xla", "over XLA"),
                                   (0.2, "speedup_vs_torch", "over PyTorch")):
            ax.bar([i + offset for i in at], [r.get(key) or math.nan for r in mine],
                   width=0.4, label=label)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        # Speedups read as 0.5x, 1x, 2x, ... rather than powers of ten.
        ax.yaxis.set_major_locator(ticker.FixedLocator([0.5, 1, 2, 5, 10, 20]))
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.yaxis.set_minor_locator(ticker.NullLocator())
        ax.set_xticks(list(at), [_shape(r.get("shape")) for r in mine], rotation=40,
                      ha="right", rotation_mode="anchor", fontsize="small")
        ax.set_title(title)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper center", ncol=2, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (2.9 * lines + 0.4)))
    return fig


class BenchmarkPlot(_BenchmarkDirective):
    """Speedups of jax_unpool over XLA and over PyTorch per shape, as inline SVG: panels two
    a row, and one a row for phones (docs/_static/custom.css shows one of the two)."""

    def run(self) -> list[nodes.Node]:
        import matplotlib
        import matplotlib.pyplot as plt

        result = self.result()
        svgs = []
        # Text stays text (the page's font, searchable); the same hash salt every build.
        with matplotlib.rc_context({"svg.hashsalt": "jax-unpool", "svg.fonttype": "none",
                                    "font.size": 10}):
            for columns in (2, 1):
                fig = speedup_figure(result, columns)
                if fig is None:
                    return [nodes.paragraph(text="(This run measured no unpool or pool rows.)")]
                svg = io.StringIO()
                fig.savefig(svg, format="svg", metadata={"Date": None})
                plt.close(fig)
                text = svg.getvalue()
                text = text[text.index("<svg"):]  # drop the XML prologue: the SVG sits in the page
                # Scale with the column (the viewBox keeps the aspect) instead of a size in pt.
                text = re.sub(r'<svg([^>]*?) width="[^"]*" height="[^"]*"',
                              rf'<svg\1 class="benchmark-plot-{columns}" width="100%"', text,
                              count=1)
                svgs.append(text)
        html = ('<figure class="benchmark-plot">' + "".join(svgs)
                + f"<figcaption>{PLOT_CAPTION}</figcaption></figure>")
        return [nodes.raw("", html, format="html")]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("benchmark-machine", BenchmarkMachine)
    app.add_directive("benchmark-table", BenchmarkTable)
    app.add_directive("benchmark-targets", BenchmarkTargets)
    app.add_directive("benchmark-plot", BenchmarkPlot)
    app.add_directive("benchmark-csv", BenchmarkCsv)
    app.connect("env-merge-info", _merge_csv)
    app.connect("build-finished", _write_csv)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
