"""The command line: ``python -m jax_unpool {info,bench,demo}`` (also installed as ``jax-unpool``).

- ``info``: versions, platforms and devices, ``JAX_UNPOOL_BACKEND``, which implementation
  each op uses on each platform, how the CPU unpool backward gathers, and whether the CANN toolkit (Ascend
  NPU) was found.
- ``bench``: the benchmark suite (:mod:`jax_unpool.cli.bench.cli`); its arguments pass
  through.
- ``demo``: trains a small SegNet-style model on generated images (:mod:`jax_unpool.cli.demo`).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.metadata
import os
import platform
import re
import signal
import sys
import threading
from collections.abc import Sequence

from jax_unpool.cli import options

PROG = "python -m jax_unpool"
RANKS = (1, 2, 3)
# What _jax_unpool.cpu_gather() answers, in words.
_GATHERS = {"avx2": "AVX2 gathers (vpgather*)", "scalar": "scalar loads"}
OPS = tuple(op.format(k) for k in RANKS for op in
            ("max_unpool{}d", "max_unpool{}d_backward", "max_pool{}d_with_indices"))


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _implementation(op: str, platform_name: str) -> str:
    """Lower a small call of ``op`` for the platform and name the custom call it makes.

    Asking the lowering, rather than restating the rules, also reports a platform that
    ``jax_unpool.npu.register`` routed to aclnn.
    """
    import jax
    import jax.numpy as jnp

    import jax_unpool
    from jax_unpool.backends import cpu, cuda

    k = int(re.search(r"\d", op).group())
    x = jax.ShapeDtypeStruct((1, 1, *[2] * k), jnp.float32)
    idx = jax.ShapeDtypeStruct(x.shape, jnp.int32)
    if op.startswith("max_pool"):
        fn, args = (lambda x: getattr(jax_unpool, op)(x, 2)), (x,)
    elif op.endswith("_backward"):
        size = (4,) * k
        out = jax.ShapeDtypeStruct((1, 1, *size), jnp.float32)
        fn, args = (lambda g, i: getattr(jax_unpool, op)(g, x, i, size)), (out, idx)
    else:
        fn, args = (lambda x, i: getattr(jax_unpool, op)(x, i, 2)), (x, idx)
    text = jax.jit(fn).trace(*args).lower(lowering_platforms=(platform_name,)).as_text()
    targets = re.findall(r"custom_call @(\w+)", text)
    if not targets:
        return "XLA ops"
    if targets[0] in cpu.STABLE_TARGETS:
        return "XLA FFI (C++)"
    if targets[0] in cuda.STABLE_TARGETS:
        return "XLA FFI (CUDA)"
    return "aclnn" if "aclnn" in targets[0] else f"custom call {targets[0]}"


def info() -> int:
    import jax
    import jax.extend.backend
    import numpy as np

    import jax_unpool
    from jax_unpool import npu

    print(f"jax_unpool {jax_unpool.__version__} ({jax_unpool.__file__})")
    print(f"jax {jax.__version__}, jaxlib {_version('jaxlib')}, numpy {np.__version__}, "
          f"python {platform.python_version()}")
    print(f"flax {_version('flax')} (for jax_unpool.nnx, jax_unpool.linen), "
          f"equinox {_version('equinox')} (for jax_unpool.equinox)")
    clients = jax.extend.backend.backends()
    print(f"default backend: {jax.default_backend()}")
    print("devices:")
    for name, client in clients.items():
        devices = client.devices()
        kinds = sorted({d.device_kind for d in devices})
        print(f"  {name}: {len(devices)} x {', '.join(kinds)}")
    from jax_unpool import _settings, backends

    switch = backends.switch()
    print(f"{_settings.BACKEND_ENV}: " + (f"{switch} (every platform lowers through XLA ops)"
                                         if switch else "unset (each platform's own backend)"))
    print("implementation of each op on each platform:")
    from jax_unpool.backends import cuda

    # The CUDA kernels' column also where no GPU is visible: what a GPU would run.
    names = list(clients) + (["cuda"] if cuda.available() and "cuda" not in clients else [])
    rows = {op: [_implementation(op, name) for name in names] for op in OPS}
    width = max(len(impl) for row in rows.values() for impl in row) + 2
    op_width = max(len(op) for op in OPS) + 2
    print("  " + "op".ljust(op_width) + "".join(n.ljust(width) for n in names).rstrip())
    for op, row in rows.items():
        print("  " + op.ljust(op_width) + "".join(impl.ljust(width) for impl in row).rstrip())
    from jax_unpool import _extension

    gather = _extension.module.cpu_gather()
    print(f"CPU unpool backward gathers with {_GATHERS[gather]} "
          f"({_settings.CPU_GATHER_ENV}={_settings.CPU_GATHER or 'unset'})")
    routed_to_aclnn = any("aclnn" in row for row in rows.values())
    found = npu.is_available()
    print(f"CANN (Ascend NPU toolkit): {'found' if found else 'not found'}"
          + ("; route the ops to aclnn with jax_unpool.npu.register()"
             if found and not routed_to_aclnn else ""))
    return 0


def bench(argv: Sequence[str]) -> int:
    from jax_unpool.cli.bench import cli as bench_module
    return bench_module.main(list(argv)) or 0


def demo(args: argparse.Namespace) -> int:
    from jax_unpool.cli import demo as demo_module
    from jax_unpool.cli import picture

    parser = args.command_parser
    try:
        demo_module.check_options(args.steps, args.size, args.batch, args.width, args.seed)
    except ValueError as error:  # a bad option value: report it the argparse way
        parser.error(str(error))
    options.check_environment(parser)
    out = options.open_output(parser, "--out", args.out, picture.PNG_SIGNATURE)
    try:
        demo_module.run(steps=args.steps, size=args.size, batch=args.batch, seed=args.seed,
                        out=out, width=args.width)
    except options.OutputError as error:  # e.g. the disk filled up during training
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return 1
    except BaseException:  # Ctrl-C, or a failure: no picture of 8 bytes left behind
        out.abandon()
        raise
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Max-unpooling as first-class JAX primitives: tools.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    info_parser = commands.add_parser(
        "info", help="versions, devices, and which implementation each op uses",
        description="Print versions, platforms and devices, the implementation of each op "
                    "on each platform, and whether the CANN toolkit was found.")
    info_parser.set_defaults(command_parser=info_parser)
    # add_help=False: `bench --help` reaches the benchmark's own parser with the other args.
    commands.add_parser(
        "bench", add_help=False,
        help="benchmark against XLA and PyTorch (see `bench --help`; --quick for a short run)")
    demo_parser = commands.add_parser(
        "demo", help="train a small SegNet-style model on generated shapes",
        description="Train a SegNet-style model (max-pool with indices, max-unpool in the "
                    "decoder) on generated discs and triangles on noisy backgrounds; print "
                    "the loss and the mean IoU on held-out images next to a trivial "
                    "predictor's; write a PNG of inputs, true masks and predictions.")
    demo_parser.add_argument("--steps", type=int, default=800,
                             help="training steps (default 800)")
    demo_parser.add_argument("--size", type=int, default=32,
                             help="image height and width, a multiple of 4 (default 32)")
    demo_parser.add_argument("--batch", type=int, default=16, help="batch size (default 16)")
    demo_parser.add_argument("--width", type=int, default=24,
                             help="channels of the first layer (default 24)")
    demo_parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo_parser.add_argument("--out", default="unpool_demo.png", metavar="PATH",
                             type=options.writable_file,
                             help="where to write the picture (default unpool_demo.png)")
    demo_parser.set_defaults(command_parser=demo_parser)  # its usage line for its errors
    return parser


class StdoutError(Exception):
    """Standard output could not be written (a full disk, a reader gone): the `OSError`
    is its cause."""


class _Stdout:
    """`sys.stdout` during a command, whose write errors become `StdoutError`, told apart
    from a command's own OSErrors; what its encoding lacks (a path's "é" with
    PYTHONIOENCODING=ascii) is escaped, as on stderr. None (a closed descriptor, `>&-`)
    takes everything and writes nothing, as print() does then."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        if self._stream is None:
            return len(text)
        try:
            try:
                return self._stream.write(text)
            except UnicodeEncodeError:
                encoding = self._stream.encoding
                return self._stream.write(
                    text.encode(encoding, "backslashreplace").decode(encoding))
        except OSError as error:
            raise StdoutError() from error

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()
        except OSError as error:
            raise StdoutError() from error

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def _interruptible():
    """Ctrl-C as KeyboardInterrupt, never lost: Python prints and drops one raised inside a
    garbage collector's callback (jax registers one), so a signal landing there comes again."""
    if (threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
        yield  # ignored (a background job), or another handler's to keep
        return

    def handler(signum, frame):
        callbacks = {getattr(callback, "__code__", None) for callback in gc.callbacks}
        while frame is not None:
            if frame.f_code in callbacks:
                again = threading.Timer(0.01, os.kill, (os.getpid(), signum))
                again.daemon = True  # never holds up the interpreter's exit
                again.start()
                return
            frame = frame.f_back
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None) -> int:
    stdout = _Stdout(sys.stdout)
    try:
        with _interruptible(), contextlib.redirect_stdout(stdout):
            try:
                return _command(sys.argv[1:] if argv is None else list(argv))
            finally:
                stdout.flush()  # here, where its failure can be reported
    except StdoutError as error:
        _discard_stdout()  # else the interpreter's last flush fails again, with a traceback
        if isinstance(error.__cause__, BrokenPipeError):
            return 1  # the reader left (`| head`): nothing to say, as other commands
        print(f"{PROG}: error: cannot write standard output: {error.__cause__.strerror}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        with contextlib.suppress(AttributeError, OSError):  # None, or a full disk
            sys.stdout.flush()
        print(f"{PROG}: interrupted", file=sys.stderr, flush=True)
        # Die of the signal, as other commands do, so that the shell sees it (status
        # 130), and without the interpreter's exit: XLA, stopped mid-compile, crashed it.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        return 130  # where the signal does not end the process


def _discard_stdout() -> None:
    """Points standard output's descriptor at /dev/null (Python's advice for SIGPIPE)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced (tests), or closed
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _command(argv: list[str]) -> int:
    parser = _parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "bench":
        return bench(rest)
    if rest:
        args.command_parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if args.command == "info":
        options.check_environment(args.command_parser)
        return info()
    return demo(args)


if __name__ == "__main__":
    sys.exit(main())
