"""The benchmark suite runs end to end in its quick mode and writes the rows and target
verdicts it promises. Timings are never asserted: this is a smoke test of the tool."""

import json

import pytest

from jax_unpool import bench

UNPOOL_FIELDS = {"jax_unpool_ms", "xla_ms", "torch_ms", "roofline_ms", "speedup_vs_xla",
                 "speedup_vs_torch", "vs_roofline"}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "quick.json"
    assert bench.main(["--quick", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def _rows(result, section):
    return [r for r in result["rows"] if r["section"] == section]


def test_quick_run_times_every_unpool_configuration(result):
    got = {(tuple(r["shape"]), r["dtype"], r["index_dtype"], r["op"])
           for r in _rows(result, "unpool")}
    expected = {(shape, "float32", index, op) for shape in bench.QUICK_SHAPES
                for index in ("int32", "int64") for op in ("forward", "backward")}
    assert got == expected
    for r in _rows(result, "unpool"):
        assert UNPOOL_FIELDS <= r.keys()
        for field in ("jax_unpool_ms", "xla_ms", "roofline_ms"):
            assert r[field] > 0
        assert r["speedup_vs_xla"] == pytest.approx(r["xla_ms"] / r["jax_unpool_ms"])
        assert r["vs_roofline"] == pytest.approx(r["jax_unpool_ms"] / r["roofline_ms"])


def test_quick_run_has_layout_and_pooling_sections(result):
    layout = _rows(result, "layout")
    assert {(tuple(r["shape"]), r["op"]) for r in layout} == {
        (shape, op) for shape in bench.QUICK_SHAPES for op in ("forward", "backward")}
    for r in layout:
        assert r["nhwc_vs_nchw"] == pytest.approx(r["nhwc_ms"] / r["nchw_ms"])
    pool = _rows(result, "pool")
    assert [tuple(r["shape"]) for r in pool] == list(bench.QUICK_SHAPES)
    assert all(r["jax_unpool_ms"] > 0 for r in pool)


def test_quick_run_reports_every_target_and_the_machine(result):
    assert result["targets"].keys() == bench.TARGETS.keys()
    # Only the tiny shape is in the quick run: the targets over the large shapes are
    # reported as not measured rather than judged on the wrong shapes.
    assert result["targets"]["forward_vs_xla"]["holds"] is None
    assert result["targets"]["tiny_forward_vs_xla_per_call"]["value"] > 0
    assert result["machine"]["cores"] >= 1 and result["settings"]["quick"] is True
