"""The command line, run as users run it: `python -m jax_unpool ...` in a fresh process.

The subprocess starts in a temporary directory, so it imports the installed package (or
whatever PYTHONPATH names), never the source tree by accident.
"""

import importlib.metadata
import json
import os
import re
import signal
import struct
import subprocess
import sys
import textwrap

import jax
import jaxlib
import numpy as np
import pytest

import jax_unpool


def run_cli(*args, cwd, timeout=300):
    return subprocess.run([sys.executable, "-m", "jax_unpool", *args], cwd=cwd,
                          env=dict(os.environ), capture_output=True, text=True, check=False,
                          timeout=timeout)


@pytest.fixture
def in_process(monkeypatch, capsys, tmp_path):
    """The command line run in this process, as `python -m jax_unpool` runs it, in tmp_path:
    for what it must refuse before any work, the work (the demo's training, the bench's
    run) replaced by a failure. It takes milliseconds where a child process takes seconds;
    the tests that run in a child keep one of each kind of refusal as users meet it."""
    from jax_unpool.cli import demo, main
    from jax_unpool.cli.bench import cli as bench

    def started(*args, **kwargs):
        raise AssertionError("the command started working before it checked its options")

    monkeypatch.setattr(bench, "run", started)
    monkeypatch.setattr(demo, "run", started)
    monkeypatch.chdir(tmp_path)

    def run(*args):
        with pytest.raises(SystemExit) as exit_:
            main.main(list(args))
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, exit_.value.code, out.out, out.err)

    return run


def test_help(tmp_path):
    result = run_cli("--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m jax_unpool ")


@pytest.mark.parametrize("command", ["info", "bench", "demo"])
def test_help_of_a_command(command, in_process):
    result = in_process(command, "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m jax_unpool {command}")


def test_unknown_argument_is_an_error_of_its_command_in_a_child_process(tmp_path):
    result = run_cli("demo", "--no-such-option", cwd=tmp_path)
    assert_usage_error(result, "demo", "unrecognized arguments: --no-such-option", whole=True)


@pytest.mark.parametrize("command", ["info", "demo", "bench"])
def test_unknown_argument_is_an_error_of_its_command(command, in_process):
    result = in_process(command, "--no-such-option")
    assert_usage_error(result, command, "unrecognized arguments: --no-such-option",
                       whole=True)


def test_info(tmp_path):
    result = run_cli("info", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"jax_unpool {jax_unpool.__version__}" in out
    assert f"jax {jax.__version__}, jaxlib {jaxlib.__version__}, numpy {np.__version__}" in out
    assert (f"flax {importlib.metadata.version('flax')} (for jax_unpool.nnx, jax_unpool.linen), "
            f"equinox {importlib.metadata.version('equinox')} (for jax_unpool.equinox)") in out
    # One row per op of every rank, a column per platform: on CPU every op lowers to our
    # FFI kernels (the unpools' and the pool's); with the CUDA module, a cuda column says
    # what a GPU would run.
    from jax_unpool.backends import cuda
    cuda_column = r" +XLA FFI \(CUDA\)" if cuda.available() else ""
    assert re.search(r"^  op +cpu" + (" +cuda" if cuda.available() else "") + "$", out,
                     re.MULTILINE), out
    for k in (1, 2, 3):
        for op in (f"max_unpool{k}d", f"max_unpool{k}d_backward", f"max_pool{k}d_with_indices"):
            assert re.search(rf"^  {op} +XLA FFI \(C\+\+\){cuda_column}$", out,
                             re.MULTILINE), (op, out)
    assert re.search(r"^  cpu: \d+ x cpu$", out, re.MULTILINE)
    # Asked in a fresh process, as the command was: this one may have loaded an emulated
    # CANN for other tests.
    probe = subprocess.run([sys.executable, "-c", ("from jax_unpool import npu; "
                                                   "print(npu.is_available())")],
                           cwd=tmp_path, capture_output=True, text=True, check=True,
                           timeout=600)
    expected = "found" if probe.stdout.strip() == "True" else "not found"
    assert re.search(rf"^CANN \(Ascend NPU toolkit\): {expected}\b", out, re.MULTILINE), out


def test_demo_trains_and_writes_a_png(tmp_path):
    out = tmp_path / "picture.png"
    result = run_cli("demo", "--steps", "5", "--size", "16", "--batch", "4", "--width", "4",
                     "--out", str(out), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    loss = re.search(r"^loss: first step (\d+\.\d+), mean of last 5 steps (\d+\.\d+)$",
                     result.stdout, re.MULTILINE)
    iou = re.search(r"^mean IoU on \d+ held-out images: model (\d\.\d+), "
                    r"trivial predictor \(all background\) (\d\.\d+)$", result.stdout, re.MULTILINE)
    assert loss and iou, result.stdout
    assert "optimiser: optax.adam" in result.stdout  # optax is in the test extra
    assert 0 < float(loss.group(1)) < 10
    # The PNG's header (the W3C specification's IHDR: width, height, 8-bit RGB): 4
    # examples of 16x16 pixels, each shown as input | mask | prediction with 2-pixel gaps,
    # enlarged 4 times; the column labels above and the legend below, each in a band of
    # 7-pixel letters with 3 white pixels above and below. test_demo.py decodes the pixels.
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height, depth, colour = struct.unpack(">IIBB", data[16:26])
    assert (height, width, depth, colour) == ((4 * 16 + 3 * 2) * 4 + 2 * 13,
                                              (3 * 16 + 2 * 2) * 4, 8, 2)


def test_demo_rejects_a_size_the_poolings_cannot_halve(tmp_path):
    result = run_cli("demo", "--size", "18", "--steps", "1", cwd=tmp_path)
    assert result.returncode == 2
    assert "size must be a multiple of 4 and at least 16, got 18" in result.stderr


def test_bench_quick_prints_a_table(tmp_path):
    # One section: test_bench runs all of them (in-process); this checks the command.
    result = run_cli("bench", "--quick", "--no-torch", "--sections", "unpool", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    # Rows like "forward  2x4x8x8  float32  int32  0.01  0.01  1.01": op, shape, dtypes, times.
    for op in ("forward", "backward"):
        assert re.search(rf"^{op} +\d+x\d+x\d+x\d+ +\w+ +int32 +\d+\.\d+", result.stdout,
                         re.MULTILINE), result.stdout


def test_info_reports_cann_and_the_aclnn_routing(tmp_path):
    from fake_cann.build import build

    build(tmp_path / "cann" / "lib64")  # the emulated CANN runtime, under its real names
    script = textwrap.dedent("""
        from jax_unpool import npu
        from jax_unpool.cli.main import main
        main(["info"])
        npu.register("cpu", npu.locate()["libascendcl"].rsplit("/", 1)[0])  # host emulation
        main(["info"])
        """)
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path,
                            env={**os.environ, "ASCEND_TOOLKIT_HOME": str(tmp_path / "cann")},
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr
    before, after = result.stdout.split("CANN (Ascend NPU toolkit): found; route the ops to "
                                        "aclnn with jax_unpool.npu.register()\n")
    for op in ("max_unpool1d", "max_unpool2d_backward", "max_unpool3d",
               "max_pool2d_with_indices", "max_pool3d_with_indices"):
        assert re.search(rf"^  {op} +XLA FFI \(C\+\+\)( +XLA FFI \(CUDA\))?$", before,
                         re.MULTILINE), before
        assert re.search(rf"^  {op} +aclnn( +XLA FFI \(CUDA\))?$", after, re.MULTILINE), after
    assert after.rstrip().endswith("CANN (Ascend NPU toolkit): found")


# Bad input, as a user types it: each is one line of usage error (exit status 2) before
# any work starts -- no training, no benchmark, no traceback, no file touched.

def assert_usage_error(result, command: str, message: str, whole: bool = False) -> None:
    """Exit status 2, nothing on stdout, and on stderr argparse's usage and one error
    line, the last: `message` in it, or (`whole`) all of it after the prefix."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    errors = [line for line in lines if "error" in line.lower()]
    assert errors == [lines[-1]], result.stderr  # one line, the last: no traceback above
    prefix = f"python -m jax_unpool {command}: error: "
    assert lines[-1].startswith(prefix), result.stderr
    if whole:
        assert lines[-1] == prefix + message, (message, lines[-1])
    assert message in lines[-1], (message, lines[-1])
    assert result.stdout == ""  # nothing ran: the demo prints its optimiser first


def bad_paths(tmp_path):
    (tmp_path / "dangling-directory").symlink_to(tmp_path / "gone")
    (tmp_path / "dangling-file.png").symlink_to(tmp_path / "gone" / "x.png")
    long_name = "x" * 296 + ".png"  # 300 characters: past every file system's 255
    return {
        "empty": ("", "an empty path cannot be written"),
        "dangling directory": ("dangling-directory/x.png",
                               "cannot write 'dangling-directory/x.png': no directory"),
        "dangling symlink": ("dangling-file.png",
                             "cannot write 'dangling-file.png': No such file or directory"),
        "300 characters": (long_name, f"cannot write '{long_name}': File name too long"),
        "full device": ("/dev/full",
                        "cannot write '/dev/full': a character device, not a regular file"),
        "directory": (str(tmp_path), f"'{tmp_path}' is a directory, not a file"),
    }


@pytest.mark.parametrize("case", ["empty", "dangling directory", "dangling symlink",
                                  "300 characters", "full device", "directory"])
def test_demo_refuses_an_output_it_cannot_write_before_training(case, tmp_path, in_process):
    path, message = bad_paths(tmp_path)[case]
    if path == "/dev/full" and not os.path.exists(path):
        pytest.skip("no /dev/full on this system")
    result = in_process("demo", "--out", path)
    assert_usage_error(result, "demo", f"argument --out: {message}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling-directory",
                                                          "dangling-file.png"]


@pytest.mark.parametrize("case", ["empty", "dangling symlink", "300 characters",
                                  "full device"])
def test_bench_refuses_a_json_path_it_cannot_write_before_the_run(case, tmp_path, in_process):
    path, message = bad_paths(tmp_path)[case]
    if path == "/dev/full" and not os.path.exists(path):
        pytest.skip("no /dev/full on this system")
    result = in_process("bench", "--quick", "--json", path)
    assert_usage_error(result, "bench", f"argument --json: {message}")


def test_bench_leaves_the_json_file_alone_until_every_option_parses(tmp_path, in_process):
    keep = tmp_path / "keep.json"
    keep.write_text('{"results": "of an earlier run"}')
    result = in_process("bench", "--json", str(keep), "--reps", "0")
    assert_usage_error(result, "bench", "argument --reps: '0' is not a positive int")
    assert keep.read_text() == '{"results": "of an earlier run"}'


@pytest.mark.parametrize("args,message", [
    # (3, 3, 100000, 100000) weights: jaxlib aborted the process (SIGABRT) drawing them
    (["--width", "100000"], "demo: size 32, batch 16 and width 100000 need about"),
    (["--size", "100000"], "demo: size 100000, batch 16 and width 24 need about"),
    (["--batch", str(10**9)], f"demo: size 32, batch {10**9} and width 24 need about"),
    (["--steps", str(10**10)], f"demo: steps must be at most 1000000, got {10**10}"),
], ids=["width", "size", "batch", "steps"])
def test_demo_refuses_sizes_past_the_machine_before_training(args, message, tmp_path,
                                                            in_process):
    result = in_process("demo", *args)
    assert_usage_error(result, "demo", message)
    if "need about" in message:
        assert re.search(r"GiB of memory, more than this machine's \d+\.\d GiB$",
                         result.stderr.strip())
    assert list(tmp_path.iterdir()) == []  # not even the picture's file was tried


@pytest.mark.parametrize("args,message", [
    (["--shapes", "100000x100000x100000x100000"],
     "--shapes 100000x100000x100000x100000 in float32 needs about"),
    (["--shapes", "1x1x50000x50000", "--index-dtypes", "int64", "--sections", "unpool"],
     "--shapes 1x1x50000x50000 in float32 needs about"),
], ids=["4-D", "2-D"])
def test_bench_refuses_shapes_past_the_machine_before_the_run(args, message, tmp_path,
                                                             in_process):
    result = in_process("bench", "--dtypes", "float32", "--json", "r.json", *args)
    assert_usage_error(result, "bench", message)
    assert list(tmp_path.iterdir()) == []


# Issue 47: what still ended in a traceback or a hang. Each reads its one error line
# whole; what could hang (a FIFO) runs in a child process, with a timeout.

BIG = "8" * 300  # a multiple of 4, so that the demo's size passes its other check
BIG_SHOWN = "8888888888888888...88888888"


@pytest.mark.parametrize("dtype", ["O", "U1", "S8", "V8", "m8", "M8", "i4,i4", "object",
                                   "(i4,2)"])
def test_bench_refuses_dtypes_that_are_not_numbers(dtype, in_process):
    # numpy reads each as a dtype (the last raised a SyntaxError in its parser); the run
    # then died of a TypeError
    from jax_unpool.cli.bench.cli import VALUE_DTYPES

    result = in_process("bench", "--dtypes", dtype)
    assert_usage_error(result, "bench", f"argument --dtypes: {dtype!r} is not a value dtype "
                       f"the ops take: one of {', '.join(VALUE_DTYPES)}", whole=True)


@pytest.mark.parametrize("command,option", [("demo", "--out"), ("bench", "--json")])
def test_an_output_that_is_a_fifo_is_refused_not_waited_on(command, option, tmp_path):
    os.mkfifo(tmp_path / "fifo")  # opening it for writing waits for a reader
    result = run_cli(command, option, "fifo", cwd=tmp_path, timeout=120)
    assert_usage_error(result, command,
                       f"argument {option}: cannot write 'fifo': a FIFO, not a regular file",
                       whole=True)


def test_an_output_that_became_a_fifo_after_the_check_fails_at_once(tmp_path):
    # What the options' check cannot see: a FIFO made between the check and the open.
    os.mkfifo(tmp_path / "fifo")
    script = ("from jax_unpool.cli import options\n"
              "try:\n"
              "    options.Output('fifo', b'{')\n"
              "except OSError as error:\n"
              "    print(error.strerror)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert (done.returncode, done.stdout) == (0, "No such device or address\n"), done.stderr


@pytest.mark.parametrize("option,shown", [
    ("--size", f"{BIG_SHOWN} (300 digits), 16, 24"),
    ("--batch", f"32, {BIG_SHOWN} (300 digits), 24"),
    ("--width", f"32, 16, {BIG_SHOWN} (300 digits)"),
])
def test_demo_refuses_sizes_of_hundreds_of_digits(option, shown, tmp_path, in_process):
    # They overflowed the float of the memory estimate (OverflowError)
    result = in_process("demo", option, BIG)
    assert_usage_error(result, "demo", "demo: size, batch and width must be at most "
                       "1152921504606846975 (the most elements an array holds), "
                       f"got {shown}", whole=True)
    assert list(tmp_path.iterdir()) == []


def test_bench_refuses_shapes_of_hundreds_of_digits(in_process):
    result = in_process("bench", "--shapes", f"1x1x{BIG}")
    assert_usage_error(result, "bench", "argument --shapes: '1x1x888888888888...88888888' "
                       "(304 characters) is not a pooled shape: a size is more than "
                       "1152921504606846975 (the most elements an array holds)",
                       whole=True)


# `python -m jax_unpool` and the jax-unpool script import the package first: `_settings`
# lets its command line through with the defaults, and the command line reports the value
# (test_cli_options.py's test_a_bad_jax_unpool_setting_is_a_usage_error).
@pytest.mark.parametrize("name,value,accepted", [
    ("JAX_UNPOOL_BACKEND", "XLA", "'xla' or unset"),
    ("JAX_UNPOOL_CPU_GATHER", "avx2", "'vector' or 'scalar' or unset"),
])
def test_info_refuses_a_bad_setting_in_one_line(name, value, accepted, tmp_path):
    result = subprocess.run([sys.executable, "-m", "jax_unpool", "info"], cwd=tmp_path,
                            env={**os.environ, name: value}, capture_output=True, text=True,
                            check=False, timeout=120)
    assert_usage_error(result, "info", f"environment variable {name} must be {accepted}, "
                       f"got {value!r}", whole=True)


@pytest.mark.parametrize("command", [["info"], ["demo", "--out", "p.png"]],
                         ids=["info", "demo"])
def test_a_platform_jax_cannot_start_is_a_usage_error_before_any_work(command, tmp_path):
    result = subprocess.run([sys.executable, "-m", "jax_unpool", *command], cwd=tmp_path,
                            env={**os.environ, "JAX_PLATFORMS": "nonsense"},
                            capture_output=True, text=True, check=False, timeout=120)
    assert_usage_error(result, command[0], "JAX cannot start: Unable to initialize backend "
                       "'nonsense'")
    assert list(tmp_path.iterdir()) == []  # the picture's file was not tried


def test_bench_float64_rows_measure_float64_with_x64_off(tmp_path):
    # With x64 off JAX makes float64 arrays float32: the rows said float64 and measured
    # float32. The child records the dtype each op of ours is called with.
    script = textwrap.dedent("""
        import json, sys
        import jax_unpool as ju
        ran = set()
        def spy(name):
            op = getattr(ju, name)
            def call(x, *args, **kwargs):
                ran.add((name, x.dtype.name))
                return op(x, *args, **kwargs)
            setattr(ju, name, call)
        for name in ("max_unpool2d", "max_unpool2d_backward", "max_pool2d_with_indices"):
            spy(name)
        from jax_unpool.cli.main import main  # the bench takes the ops from ju when imported
        code = main(sys.argv[1:])
        print(json.dumps(sorted(ran)))
        sys.exit(code)
        """)
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    result = subprocess.run(
        [sys.executable, "-c", script, "bench", "--quick", "--no-torch", "--shapes", "1x2x4x4",
         "--dtypes", "float64", "--index-dtypes", "int32", "--sections", "unpool", "layout",
         "pool", "--json", "r.json"], cwd=tmp_path, env=env, capture_output=True, text=True,
        check=False, timeout=600)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == [
        ["max_pool2d_with_indices", "float64"], ["max_unpool2d", "float64"],
        ["max_unpool2d_backward", "float64"]]
    rows = json.loads((tmp_path / "r.json").read_text())["rows"]
    assert {(r["section"], r["op"], r["dtype"], r["index_dtype"]) for r in rows} == {
        (section, op, "float64", "int32") for section, ops in
        (("unpool", ("forward", "backward")), ("layout", ("forward", "backward")),
         ("pool", ("forward", "forward+grad"))) for op in ops}
    assert re.search(r"^forward +1x2x4x4 +float64 +int32 ", result.stdout, re.MULTILINE)


@pytest.mark.parametrize("unbuffered", ["", "1"], ids=["buffered", "unbuffered"])
def test_a_standard_output_that_cannot_be_written_is_one_line(unbuffered, tmp_path):
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "jax_unpool", "--help"], cwd=tmp_path,
                                env={**os.environ, "PYTHONUNBUFFERED": unbuffered},
                                stdout=full, stderr=subprocess.PIPE, text=True, check=False,
                                timeout=120)
    assert result.returncode == 1
    assert result.stderr == ("python -m jax_unpool: error: cannot write standard output: No "
                             "space left on device\n")


def test_a_reader_that_leaves_ends_the_command_quietly(tmp_path):
    child = subprocess.Popen([sys.executable, "-m", "jax_unpool", "--help"], cwd=tmp_path,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    child.stdout.close()  # before the child writes: `| head -0`
    _, err = child.communicate(timeout=120)
    assert (child.returncode, err) == (1, "")


def test_a_closed_standard_output_is_no_error(tmp_path):
    done = subprocess.run(["sh", "-c", f'exec "{sys.executable}" -m jax_unpool --help >&-'],
                          cwd=tmp_path, capture_output=True, text=True, check=False,
                          timeout=120)
    assert (done.returncode, done.stderr) == (0, "")


def test_ctrl_c_ends_the_demo_in_one_line_without_its_file(tmp_path):
    # SIGINT as a terminal's shell leaves it for a command: a run started in the background
    # of a non-interactive shell ignores it, and a child inherits that.
    child = subprocess.Popen([sys.executable, "-m", "jax_unpool", "demo", "--out", "p.png"],
                             cwd=tmp_path, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stdout.readline().startswith("optimiser: ")  # training starts next
        assert (tmp_path / "p.png").exists()  # tried before the work
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=300)
    finally:
        child.kill()
    # Killed by the signal, as the shell expects of Ctrl-C (XLA, stopped mid-compile,
    # crashed the interpreter's exit), after one line.
    assert child.returncode == -signal.SIGINT, err
    assert err.strip().splitlines() == ["python -m jax_unpool: interrupted"]
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_inside_a_garbage_collector_callback_still_interrupts():
    # Python prints and drops a KeyboardInterrupt raised inside a gc callback (jax registers
    # one, which CI's Ctrl-C once landed in): the command must still see the interrupt.
    code = textwrap.dedent("""
        import gc, os, signal, time
        from jax_unpool.cli.main import _interruptible
        def callback(phase, info):
            if phase == "start":
                os.kill(os.getpid(), signal.SIGINT)
                sum(range(1000))  # the handler runs here, inside the callback
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with _interruptible():
            gc.callbacks.append(callback)
            try:
                gc.collect()
                gc.callbacks.remove(callback)
                time.sleep(10)
                print("lost")
            except KeyboardInterrupt:
                print("interrupted")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert (done.stdout, done.stderr) == ("interrupted\n", "")
