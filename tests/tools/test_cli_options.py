"""Bad command-line options are argparse usage errors (exit status 2, the option named on
stderr) before any work starts: run in-process, with the work replaced by a failure."""

import json

import pytest

from jax_unpool.cli import demo, main, options
from jax_unpool.cli.bench import cli as bench


@pytest.fixture(autouse=True)
def no_work(monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("the command started working before it checked its options")

    monkeypatch.setattr(bench, "run", started)
    monkeypatch.setattr(demo, "run", started)


def usage_error(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main.main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: python -m jax_unpool {argv[0]}"), err
    return err


@pytest.mark.parametrize("option,value,message", [
    ("--shapes", "abc", ("argument --shapes: 'abc' is not a pooled shape: N, C and 1 to 3 "
                         "spatial sizes, positive ints joined by 'x'")),
    ("--shapes", "1x1", "argument --shapes: '1x1' is not a pooled shape"),
    ("--shapes", "0x3x4x4", "argument --shapes: '0x3x4x4' is not a pooled shape"),
    ("--shapes", "1x2x3x4x5x6", "argument --shapes: '1x2x3x4x5x6' is not a pooled shape"),
    ("--reps", "-1", "argument --reps: '-1' is not a positive int"),
    ("--reps", "0", "argument --reps: '0' is not a positive int"),
    ("--reps", "two", "argument --reps: 'two' is not a positive int"),
    ("--warmup", "-1", "argument --warmup: '-1' is not a non-negative int"),
    ("--dtypes", "nonsense", ("argument --dtypes: 'nonsense' is not a value dtype: a real "
                              "dtype of 1, 2, 4 or 8 bytes")),
    ("--dtypes", "complex64", "argument --dtypes: 'complex64' is not a value dtype"),
    ("--dtypes", "int4", "argument --dtypes: 'int4' is not a value dtype"),
    ("--json", "/nonexistent/x.json", ("argument --json: cannot write '/nonexistent/x.json': "
                                       "no directory '/nonexistent'")),
])
def test_bench_option_is_a_usage_error(option, value, message, capsys):
    assert message in usage_error(["bench", option, value], capsys)


def test_bench_json_path_that_is_a_directory_is_a_usage_error(tmp_path, capsys):
    err = usage_error(["bench", "--json", str(tmp_path)], capsys)
    assert f"argument --json: '{tmp_path}' is a directory, not a file" in err


def test_bench_json_path_that_cannot_be_opened_is_a_usage_error(tmp_path, capsys):
    dangling = tmp_path / "results.json"
    dangling.symlink_to(tmp_path / "no-such-directory" / "results.json")
    err = usage_error(["bench", "--json", str(dangling)], capsys)
    assert f"argument --json: cannot write '{dangling}': No such file or directory" in err
    too_long = tmp_path / ("x" * 256 + ".json")
    err = usage_error(["bench", "--json", str(too_long)], capsys)
    assert f"argument --json: cannot write '{too_long}': File name too long" in err


def test_bench_json_is_opened_before_the_run_and_an_old_file_kept_until_the_end(
        tmp_path, monkeypatch, capsys):
    path = tmp_path / "r.json"
    path.write_text('{"older": "results, longer than the new ones"}')
    result = {"machine": {"cpu": "cpu", "cores": 1, "jax": "0", "torch": None,
                          "load_average_before": (0, 0, 0), "load_average_after": (0, 0, 0)},
              "settings": {"reps": 1}}
    during = []

    def run(args):
        during.append(path.read_text())  # tried (its "{" written), not emptied
        return result

    monkeypatch.setattr(bench, "run", run)
    monkeypatch.setattr(bench, "report", lambda result: "")
    assert main.main(["bench", "--json", str(path)]) == 0
    assert during == ['{"older": "results, longer than the new ones"}']
    assert json.loads(path.read_text()) == json.loads(json.dumps(result))


def test_bench_options_parse_to_what_the_run_uses(tmp_path):
    args = bench.parser().parse_args(["--shapes", "2x4x8", "1x2x3x4x5", "--reps", "1",
                                       "--warmup", "0", "--dtypes", "bfloat16", "uint8",
                                       "--json", str(tmp_path / "r.json")])
    assert not (tmp_path / "r.json").exists()  # parsing touches no file
    assert args.shapes == [(2, 4, 8), (1, 2, 3, 4, 5)]
    assert (args.reps, args.warmup, args.dtypes) == (1, 0, ["bfloat16", "uint8"])


@pytest.mark.parametrize("argv,message", [
    (["--seed", "-5"], "demo: seed must be between 0 and 9223372036853775804, got -5"),
    (["--seed", str(2**63)], "demo: seed must be between 0 and 9223372036853775804"),
    (["--out", "/nonexistent/x.png"], ("argument --out: cannot write '/nonexistent/x.png': "
                                       "no directory '/nonexistent'")),
    (["--steps", "0"], "demo: steps, batch and width must be positive, got 0, 16, 24"),
])
def test_demo_option_is_a_usage_error(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default --out is written here
    assert message in usage_error(["demo", *argv], capsys)


def test_demo_refuses_what_this_machine_cannot_hold(monkeypatch, capsys):
    monkeypatch.setattr(options, "memory_bytes", lambda: 2**30)  # a 1 GiB machine
    needed = demo.memory_needed(64, 64, 48)  # 64 * 64 * 64 * 48 activation units
    assert needed > 2**30
    err = usage_error(["demo", "--size", "64", "--batch", "64", "--width", "48"], capsys)
    assert (f"demo: size 64, batch 64 and width 48 need about {needed / 2**30:.1f} GiB of "
            "memory, more than this machine's 1.0 GiB") in err


def test_bench_refuses_planes_int32_indices_cannot_address(monkeypatch, capsys):
    # On a machine of a few TB a 2**31-position plane fits: int32 indices still cannot
    # address it, and the pool section's indices are int32.
    monkeypatch.setattr(options, "memory_bytes", lambda: 2**50)
    argv = ["bench", "--shapes", "1x1x32768x32768", "--index-dtypes", "int64"]
    err = usage_error(argv, capsys)
    assert ("--shapes 1x1x32768x32768: its unpooled planes of 4294967296 positions are more "
            "than int32 indices address (2147483647)") in err
    err = usage_error([*argv[:2], "1x1x32768x32768", "--sections", "unpool"], capsys)
    assert "int32 indices" in err  # the default index dtypes include int32


def test_the_default_runs_fit_a_machine_of_8_gib(monkeypatch):
    # Every default shape of the benchmark, in every default dtype, and the demo.
    args = bench.parser().parse_args([])
    monkeypatch.setattr(options, "memory_bytes", lambda: 8 << 30)
    bench.check_sizes(args)
    demo.check_options(demo.DEFAULT_STEPS, 32, 16, 24)
