"""Bad command-line options are argparse usage errors (exit status 2, the option named on
stderr) before any work starts: run in-process, with the work replaced by a failure."""

import json
import os

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
    ("--reps", "10001", "argument --reps: '10001' is more than 10000"),
    ("--reps", "9" * 300, ("argument --reps: '9999999999999999...99999999' (300 characters) "
                           "is more than 10000")),
    ("--warmup", "10001", "argument --warmup: '10001' is more than 10000"),
    ("--shapes", "1x1x1152921504606846976", ("argument --shapes: '1x1x1152921504606846976' is "
                                             "not a pooled shape: a size is more than "
                                             "1152921504606846975")),
    ("--shapes", "1x1x" + "9" * 5000, ("argument --shapes: '1x1x999999999999...99999999' "
                                       "(5004 characters) is not a pooled shape: N, C and")),
    *(("--dtypes", dtype, (f"argument --dtypes: {dtype!r} is not a value dtype the ops take: "
                           f"one of {', '.join(bench.VALUE_DTYPES)}"))
      for dtype in ("nonsense", "", "complex64", "int4", "int1", "uint1", "float6_e2m3fn",
                    "float4_e2m1fn", "f4", ">f4", "float", "Float32", "float32 ", "é")),
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


@pytest.mark.filterwarnings("ignore:Explicitly requested dtype")  # x64 off: 64 -> 32 bits
def test_bench_takes_exactly_the_value_dtypes_the_ops_take():
    # Every dtype jax has, tried on the ops themselves (a 64-bit one as what x64 off makes
    # it): --dtypes names those that work, and nothing else.
    import jax
    import jax.numpy as jnp
    import numpy as np

    import jax_unpool as ju

    def taken(name):
        jax.clear_caches()  # int1 is XLA's pred: a bool pool compiled before would run it
        try:
            x = jnp.arange(16, dtype=jnp.float32).reshape(1, 1, 4, 4).astype(name)
            values, indices = ju.max_pool2d_with_indices(x, 2)
            ju.max_unpool2d(values, indices, 2).block_until_ready()
        except (TypeError, ValueError, jax.errors.JaxRuntimeError):  # ours; XLA's (int1)
            return False
        return True

    names = set()
    for name in dir(jnp):
        if name.startswith(("bool", "int", "uint", "float", "bfloat", "complex")):
            try:
                names.add(np.dtype(getattr(jnp, name)).name)
            except TypeError:  # jnp.integer, jnp.interp, ...
                pass
    assert {"float8_e4m3fn", "int4", "complex64", "uint64"} <= names
    assert {name for name in names if taken(name)} == set(bench.VALUE_DTYPES)


def test_each_bench_row_runs_in_the_dtype_it_is_labelled_with(monkeypatch):
    # float64 (and int64, uint64) values are float32 to JAX with x64 off: their rows run
    # with x64 on, as int64 indices do; the others with it off.
    import jax.numpy as jnp
    import numpy as np

    from jax_unpool.cli.bench import layout, measure, pool, unpool

    made = []

    def record(section):
        def configuration(shape, dtype, *rest):
            index_dtype = rest[0] if section is not pool else "int32"
            made.append((section.NAME, dtype, index_dtype,
                         jnp.asarray(np.zeros(1, jnp.dtype(dtype))).dtype.name,
                         jnp.asarray(np.zeros(1, index_dtype)).dtype.name,
                         measure.ran(dtype)))
            return []
        return configuration

    dtypes = ["float64", "int64", "uint64", "float32", "bfloat16"]
    settings = measure.Settings(shapes=[(1, 1, 2, 2)], dtypes=dtypes,
                                index_dtypes=["int32", "int64"], reps=1, warmup=0,
                                quick=True, torch=None, bandwidth={}, rng=None)
    for section in (unpool, layout, pool):
        monkeypatch.setattr(section, "_configuration", record(section))
        section.rows(settings)
    assert len(made) == 5 * 2 + 5 * 2 + 5 * 2  # pool: channels first and last
    for name, dtype, index_dtype, value_ran, index_ran, label in made:
        assert (value_ran, index_ran, label) == (dtype, index_dtype, dtype), name


def test_a_bad_jax_unpool_setting_is_a_usage_error(monkeypatch, tmp_path, capsys):
    # The command line's part: it reads the settings again before any work (the package
    # raised at import, which the child-process tests in test_cli.py are about).
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JAX_UNPOOL_CPU_GATHER", "avx2")
    for argv in (["info"], ["demo", "--out", "p.png"], ["bench", "--json", "r.json"]):
        err = usage_error(argv, capsys)
        assert err.splitlines()[-1] == (
            f"python -m jax_unpool {argv[0]}: error: environment variable "
            "JAX_UNPOOL_CPU_GATHER must be 'vector' or 'scalar' or unset, got 'avx2'")
    assert list(tmp_path.iterdir()) == []  # no output file tried


@pytest.mark.parametrize("path,message", [
    ("/dev/null", "cannot write '/dev/null': a character device, not a regular file"),
    ("socket", "cannot write 'socket': a socket, not a regular file"),
    ("a\0b", "cannot write 'a\\x00b': a path holds no NUL"),
])
def test_an_output_that_is_no_regular_file_is_a_usage_error(path, message, tmp_path,
                                                            monkeypatch, capsys):
    import socket

    monkeypatch.chdir(tmp_path)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind("socket")
        for command, option in (("bench", "--json"), ("demo", "--out")):
            err = usage_error([command, option, path], capsys)
            assert err.splitlines()[-1] == (f"python -m jax_unpool {command}: error: "
                                            f"argument {option}: {message}")


def test_an_output_that_is_a_fifo_with_a_reader_is_refused_too(tmp_path):
    # Opened with a reader at the other end, a FIFO does not wait: Output itself refuses
    # it (a FIFO put there after the options' check).
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(OSError, match="a FIFO, not a regular file"):
            options.Output(str(fifo), b"{")
        assert os.read(reader, 1) == b""  # nothing was written into it
    finally:
        os.close(reader)


def test_an_output_run_that_does_not_finish_leaves_no_new_file(tmp_path, monkeypatch):
    # Ctrl-C or a failure midway: the file the command created is removed; an older one
    # keeps its content.
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    old.write_text('{"older": "results"}')

    def run(args):
        if args.json == str(new):
            assert new.read_bytes() == b"{"  # created, and tried, before the work
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run", run)
    for path in (new, old):
        with pytest.raises(KeyboardInterrupt):
            bench.main(["--json", str(path)])
    assert not new.exists()
    assert old.read_text() == '{"older": "results"}'


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in read-only directories")
def test_an_output_in_a_read_only_directory(tmp_path, monkeypatch, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    (ro / "old.json").write_text("{}")
    ro.chmod(0o555)
    try:
        err = usage_error(["bench", "--json", str(ro / "new.json")], capsys)
        assert f"argument --json: cannot write '{ro / 'new.json'}': directory '{ro}' is not " \
               "writable" in err
        # An existing file there is written in place: its directory need not be writable.
        monkeypatch.setattr(bench, "run", lambda args: (_ for _ in ()).throw(RuntimeError))
        with pytest.raises(RuntimeError):
            main.main(["bench", "--json", str(ro / "old.json")])
    finally:
        ro.chmod(0o755)


def test_a_jax_that_asserts_instead_of_naming_the_platform_is_a_usage_error(monkeypatch,
                                                                           capsys):
    # jax 0.10 with JAX_PLATFORMS=cuda and no CUDA plugin: a bare AssertionError.
    import jax

    def devices():
        raise AssertionError

    monkeypatch.setattr(jax, "devices", devices)
    # The CLI reads jax's config, which took JAX_PLATFORMS when jax was imported.
    before = jax.config.jax_platforms
    jax.config.update("jax_platforms", "cuda")
    try:
        err = usage_error(["info"], capsys)
    finally:
        jax.config.update("jax_platforms", before)
    assert err.splitlines()[-1] == ("python -m jax_unpool info: error: JAX cannot start: "
                                    "JAX_PLATFORMS='cuda' names no platform it has")


def test_standard_output_escapes_what_its_encoding_lacks():
    # PYTHONIOENCODING=ascii and a path with "é": the demo's last line ended in a
    # UnicodeEncodeError traceback, after training.
    import io

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii")
    main._Stdout(stream).write("wrote é.png\n")
    stream.flush()
    assert raw.getvalue() == b"wrote \\xe9.png\n"
