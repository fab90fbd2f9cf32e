"""Bad command-line options are argparse usage errors (exit status 2, the option named on
stderr) before any work starts: run in-process, with the work replaced by a failure."""

import pytest

from jax_unpool.cli import demo, main
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


def test_bench_json_file_is_created_before_the_run(tmp_path):
    args = bench.parser().parse_args(["--json", str(tmp_path / "r.json")])
    with args.json:
        assert (tmp_path / "r.json").is_file()


def test_bench_options_parse_to_what_the_run_uses(tmp_path):
    args = bench.parser().parse_args(["--shapes", "2x4x8", "1x2x3x4x5", "--reps", "1",
                                       "--warmup", "0", "--dtypes", "bfloat16", "uint8",
                                       "--json", str(tmp_path / "r.json")])
    args.json.close()
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
