"""The benchmark suite runs end to end in its quick mode and writes the rows and target
verdicts it promises. Timings are never asserted: this is a smoke test of the tool."""

import json
import mmap
import re
import subprocess
import sys
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest
from fresh_process import child_env

import jax_unpool as ju
from jax_unpool.cli.bench import cli, measure, step, targets, unpool

pytestmark = pytest.mark.slow

UNPOOL_FIELDS = {"jax_unpool_ms", "xla_ms", "torch_ms", "roofline_ms", "speedup_vs_xla",
                 "speedup_vs_torch", "vs_roofline", "bytes", "jax_unpool_gbps",
                 "bandwidth_fraction", "jax_unpool_sys_ms", "xla_sys_ms"}


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "quick.json"
    # int64 indices too: their runs go through jax's x64 mode
    assert cli.main(["--quick", "--index-dtypes", "int32", "int64", "--json", str(path)]) == 0
    return json.loads(path.read_text())


def _rows(result, section):
    return [r for r in result["rows"] if r["section"] == section]


def test_quick_run_measures_the_memory_bandwidth(result):
    assert result["bandwidth"].keys() == {"copy_faulted", "fill_faulted", "copy_fresh",
                                          "fill_fresh", "copy_fresh_thp", "fill_fresh_thp"}
    assert all(v > 0 for v in result["bandwidth"].values())


def test_quick_run_times_every_unpool_configuration_of_every_rank(result):
    got = {(tuple(r["shape"]), r["dtype"], r["index_dtype"], r["op"])
           for r in _rows(result, "unpool")}
    expected = {(shape, "float32", index, op) for shape in measure.QUICK_SHAPES
                for index in ("int32", "int64") for op in ("forward", "backward")}
    assert got == expected
    assert {r["rank"] for r in _rows(result, "unpool")} == {1, 2, 3}
    dram = result["bandwidth"]["copy_faulted"]
    for r in _rows(result, "unpool"):
        assert UNPOOL_FIELDS <= r.keys()
        for field in ("jax_unpool_ms", "xla_ms", "roofline_ms"):
            assert r[field] > 0
        assert r["speedup_vs_xla"] == pytest.approx(r["xla_ms"] / r["jax_unpool_ms"])
        assert r["roofline_ms"] == pytest.approx(r["bytes"] / dram / 1e6)
        assert r["jax_unpool_gbps"] == pytest.approx(r["bytes"] / r["jax_unpool_ms"] / 1e6)
        assert r["bandwidth_fraction"] == pytest.approx(r["jax_unpool_gbps"] / dram)


def test_measure_reports_the_os_time_a_call_spends_faulting_in_fresh_pages():
    # A fresh 64 MiB anonymous mapping, written whole, is zeroed by the OS page by page
    # (milliseconds of system time); a pure-Python loop makes no system call at all. The
    # mapping is the OS's own, fresh on every call whatever the allocator (a malloc that
    # keeps freed memory, as np.ones's may, would fault in nothing). No wall time is
    # asserted.
    def fresh_pages():
        pages = mmap.mmap(-1, 1 << 26)
        written = np.frombuffer(pages, np.uint8)
        written.fill(1)
        del written  # the mapping closes only once no array holds it
        pages.close()

    system = {}
    ms = measure.times({"fresh_pages": fresh_pages,
                        "python_loop": lambda: sum(range(100_000))}, reps=3, warmup=1,
                       system_ms=system)
    assert system.keys() == ms.keys() == {"fresh_pages", "python_loop"}
    assert system["fresh_pages"] > 1.0
    assert 0 <= system["python_loop"] < system["fresh_pages"] / 10


def test_unpool_bytes_are_inputs_read_and_result_written(result):
    # Hand-computed for the 1x3x4x4 float32 row with int32 indices: x and indices
    # 1*3*4*4*4 bytes each, the (1, 3, 8, 8) result 4x that.
    r = next(r for r in _rows(result, "unpool") if r["shape"] == [1, 3, 4, 4]
             and r["index_dtype"] == "int32" and r["op"] == "forward")
    assert r["bytes"] == 192 * 2 + 768


def test_pool_indices_are_one_distinct_position_per_window():
    idx = unpool.pool_indices(np.random.default_rng(0), (1, 1, 3, 2, 2))
    # Window (d, h, w) of a (6, 4, 4) volume covers d in {2d, 2d+1}, etc.
    d, rem = np.divmod(idx[0, 0], 16)
    h, w = np.divmod(rem, 4)
    grid = np.indices((3, 2, 2))
    for coord, g in zip((d, h, w), grid):
        assert ((coord // 2) == g).all()
    assert len(np.unique(idx)) == idx.size


def test_quick_run_has_layout_pool_and_step_sections(result):
    layout = _rows(result, "layout")
    two_d = [s for s in measure.QUICK_SHAPES if len(s) == 4]
    assert {(tuple(r["shape"]), r["op"]) for r in layout} == {
        (shape, op) for shape in two_d for op in ("forward", "backward")}
    for r in layout:
        assert r["nhwc_vs_nchw"] == pytest.approx(r["nhwc_ms"] / r["nchw_ms"])
    pool = _rows(result, "pool")
    assert {(tuple(r["shape"]), r["op"], r["layout"]) for r in pool} == {
        (shape, op, layout) for shape in measure.QUICK_SHAPES for op in ("forward", "forward+grad")
        for layout in ("channels_first", "channels_last")}
    assert all(r["jax_unpool_ms"] > 0 and r["xla_ms"] > 0 for r in pool)
    # torch has no channels-last layout for every rank: it is timed channels first only
    assert all((r["torch_ms"] is not None) == (r["layout"] == "channels_first") for r in pool)
    step = _rows(result, "step")  # NHWC alone in a quick run
    assert {(r["layout"], r["impl"]) for r in step} == {("NHWC", "ours"), ("NHWC", "xla")}
    for r in step:
        assert r["pooling_share"] == pytest.approx(r["pooling_ms"] / r["step_ms"])


def test_quick_run_reports_every_target_and_the_machine(result):
    assert list(result["targets"]) == [name for section in cli.SECTIONS.values()
                                       for name in section.TARGETS]
    # Only the tiny shape is in the quick run: the targets over the large shapes are
    # reported as not measured rather than judged on the wrong shapes.
    for name in ("forward_vs_xla", "pool_grad_vs_torch", "pool_per_byte_ncdhw_vs_nchw"):
        assert result["targets"][name] == {"value": None, "target": result["targets"][name][
            "target"], "holds": None, "verdict": "not measured"}
    assert result["machine"]["cores"] >= 1 and result["settings"]["quick"] is True


def test_a_quick_run_judges_no_target(result):
    # Two samples per median: the value is reported, and that it cannot be judged.
    assert result["settings"]["reps"] == 2 < targets.SAMPLES_TO_JUDGE
    for name in ("tiny_forward_vs_xla_per_call", "tiny_backward_vs_xla_per_call",
                 "tiny_pool_vs_xla_per_call"):
        t = result["targets"][name]
        assert t["value"] > 0 and t["holds"] is None
        assert t["verdict"] == "too few samples to judge"


def test_the_report_of_a_quick_run_flags_its_ratios_and_judges_nothing(result):
    text = cli.report(result)
    assert "ratios marked ? come from medians of 2 samples: too few to say which is faster" in text
    assert "MISSED" not in text and ": holds" not in text
    row = next(line.split() for line in text.splitlines()
               if line.startswith("forward ") and " 1x3x4x4 " in line)
    # op, shape, dtype, index, ours, xla, torch, roof, xla/ours?, torch/ours?, ...
    assert row[8].endswith("?") and row[9].endswith("?"), row


def _section(values):
    return SimpleNamespace(TARGETS={"fast": (">=", 2.0), "small": ("<=", 1.0),
                                    "absent": (">=", 1.0)},
                           targets=lambda rows: values)


@pytest.mark.parametrize("reps,verdicts", [
    (5, {"fast": (True, "holds"), "small": (False, "MISSED"), "absent": (None, "not measured")}),
    (4, {"fast": (None, "too few samples to judge"), "small": (None, "too few samples to judge"),
         "absent": (None, "not measured")}),
])
def test_targets_are_judged_from_five_samples_per_median(reps, verdicts):
    summary = targets.summarize([_section({"fast": 2.5, "small": 1.5, "absent": None})], [],
                                reps)
    assert {name: (t["holds"], t["verdict"]) for name, t in summary.items()} == verdicts
    assert summary["fast"]["value"] == 2.5 and summary["fast"]["target"] == ">= 2.0"


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_segnet_step_is_the_same_with_jax_unpool_and_the_xla_reference(fmt):
    # The step benchmark compares like with like: same model, same numbers.
    sh = step.shapes(fmt, 2, 16, 4)
    rng = np.random.default_rng(1)
    x, target = (jnp.asarray(rng.standard_normal(sh[k], dtype=np.float32))
                 for k in ("x", "target"))
    ws = step.init(4)
    ours_ws, ours_loss = step.train_step(ju, fmt)(ws, x, target)
    ref_ws, ref_loss = step.train_step(ju.reference, fmt)(ws, x, target)
    np.testing.assert_allclose(ours_loss, ref_loss, rtol=1e-6)
    for a, b, w in zip(ours_ws, ref_ws, ws):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert not np.array_equal(a, w)  # the step did update every weight


def test_a_dtype_torch_cannot_run_leaves_out_its_torch_column_with_a_note(tmp_path):
    # As a user runs it: every value dtype the ops take is measured for ours and XLA's;
    # where torch cannot run a row (no integer gradients, no unsigned gathers on CPU, no
    # float8 tensors from numpy), that row has no torch time and the report says why.
    path = tmp_path / "r.json"
    exotic = ["int8", "bool", "uint16", "uint64", "float8_e4m3fn"]
    done = subprocess.run(
        [sys.executable, "-m", "jax_unpool", "bench", "--quick", "--shapes", "1x3x4x4",
         "--dtypes", *exotic, "float32", "--sections", "unpool", "pool", "--json", str(path)],
        cwd=tmp_path, env=child_env(), capture_output=True, text=True, timeout=900,
        check=False)
    assert done.returncode == 0, done.stderr
    rows = json.loads(path.read_text())["rows"]
    assert {r["dtype"] for r in rows} == {*exotic, "float32"}
    assert all(r["jax_unpool_ms"] > 0 and r["xla_ms"] > 0 for r in rows)
    torch_rows = [r for r in rows if r["layout"] == "channels_first"]  # torch's layout
    for r in torch_rows:
        assert (r["torch_ms"] is None) == (r["torch_skipped"] is not None), r
    assert all(r["torch_ms"] > 0 for r in torch_rows if r["dtype"] == "float32")
    assert all(r["torch_skipped"] for r in torch_rows if r["dtype"] == "float8_e4m3fn")
    assert all(r["torch_skipped"] for r in torch_rows
               if r["op"] == "forward+grad" and r["dtype"] != "float32")
    notes = done.stdout.split("no torch column where torch cannot run the dtype:\n")[1]
    for r in torch_rows:
        if r["torch_skipped"]:
            assert re.search(rf"^  {r['dtype']}: .*{r['section']} {re.escape(r['op'])}.* "
                             rf"\({re.escape(r['torch_skipped'])}\)$", notes, re.MULTILINE), r
