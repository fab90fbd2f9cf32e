"""Checking what the commands are given before any work starts: argparse ``type=``
functions, which touch nothing (a bad value is a usage error, exit status 2, the option
named), the machine's memory that bounds the sizes, the environment (jax_unpool's
settings, the platforms JAX starts), and the output files, tried once all arguments have
parsed, so that a path that cannot be written is a usage error too, not a traceback
after the run."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import stat

from jax_unpool._args import MAX_ELEMENTS

# The largest size an option may give: the most elements an array can hold (2**60 - 1);
# bigger ones overflowed the memory estimates.
MAX_SIZE = MAX_ELEMENTS
# The most samples or warm-up calls: more is a typo, or a run without end.
MAX_COUNT = 10_000


def shown(text: str) -> str:
    """`text` quoted for a one-line message; a long one (a number of hundreds of digits)
    cut in its middle, with its length."""
    if len(text) <= 40:
        return repr(text)
    return f"{text[:16] + '...' + text[-8:]!r} ({len(text)} characters)"


def number(value: int) -> str:
    """An int for a one-line message: one of hundreds of digits cut in its middle."""
    text = str(value)
    return text if len(text) <= 40 else f"{text[:16]}...{text[-8:]} ({len(text)} digits)"


def positive_count(text: str) -> int:
    """A number of samples: 1 to MAX_COUNT."""
    return _int_between(text, 1, MAX_COUNT, "a positive int")


def non_negative_count(text: str) -> int:
    """A number of untimed calls: 0 to MAX_COUNT."""
    return _int_between(text, 0, MAX_COUNT, "a non-negative int")


def _int_between(text: str, low: int, high: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:  # not an int, or one past int()'s 4300 digits
        raise argparse.ArgumentTypeError(f"{shown(text)} is not {what}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not {what}")
    if value > high:
        raise argparse.ArgumentTypeError(f"{shown(text)} is more than {high}")
    return value


def writable_file(text: str) -> str:
    """A path to write a file at: a regular file, or a new one in a directory that exists
    and is writable. A FIFO, a device or a socket is refused: opening a FIFO waits for a
    reader without end, a device is no place for a picture. Nothing is created here (see
    `Output`)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path cannot be written")
    if "\0" in text:  # only from Python (argv cannot hold one); os.stat would raise
        raise argparse.ArgumentTypeError(f"cannot write {shown(text)}: a path holds no NUL")
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    try:
        mode = os.stat(text).st_mode
    except OSError:  # absent, or a dangling symlink: opening creates it, or says why not
        mode = None
    if mode is not None:
        if not stat.S_ISREG(mode):
            raise argparse.ArgumentTypeError(f"cannot write {text!r}: {not_regular(mode)}")
        return text  # written in place: its directory need not be writable
    directory = os.path.dirname(os.path.abspath(text))
    if not os.path.isdir(directory):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no directory {directory!r}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"cannot write {text!r}: directory {directory!r} is not writable")
    return text


def not_regular(mode: int) -> str:
    """What a file that is not a regular one is, for messages."""
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a special file")
    return f"{kind}, not a regular file"


class OutputError(OSError):
    """An `Output` could not be written after all (a disk that filled up meanwhile)."""


class Output:
    """A file that a command writes when its work is done, tried before the work starts:
    opened (created if absent) and its first bytes, `head`, written and flushed, so that
    what only writing reveals (a dangling symlink, a name too long, a full disk) fails
    now. An existing file is not emptied: `head` is what the file starts with (a PNG's
    signature, a JSON object's brace), so an older file of the same kind keeps its
    content until `finish` replaces it. Only a regular file: an OSError otherwise."""

    def __init__(self, path: str, head: bytes):
        self.path = path
        # Non-blocking: a FIFO put there after the options were checked fails (ENXIO)
        # instead of waiting for a reader without end.
        nonblocking = getattr(os, "O_NONBLOCK", 0)
        self._created = not os.path.lexists(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | nonblocking, 0o666)
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            raise OSError(errno.EINVAL, not_regular(mode))
        if nonblocking:
            os.set_blocking(fd, True)
        self._file = os.fdopen(fd, "wb")
        try:
            self._file.write(head)
            self._file.flush()
        except OSError:
            self.abandon()
            raise

    def finish(self, rest: bytes) -> None:
        """Writes the rest of the content and closes; a longer older file is cut. An
        `OutputError` when that fails."""
        try:
            self._file.write(rest)
            self._file.flush()
            self._file.truncate()
        except OSError as error:
            raise OutputError(f"cannot write {self.path!r}: {error.strerror}") from error
        finally:
            self.close()

    def abandon(self) -> None:
        """Closes, for a run that did not finish: a file that `Output` created is removed,
        an existing one keeps its content."""
        self.close()
        if self._created:
            with contextlib.suppress(OSError):
                os.remove(self.path)

    def close(self) -> None:
        try:
            self._file.close()
        except OSError:  # what the failed write left in the buffer cannot go anywhere
            pass


def open_output(parser: argparse.ArgumentParser, option: str, path: str,
                head: bytes) -> Output:
    """`Output(path, head)`, or a usage error naming `option` and why the path cannot be
    written."""
    try:
        return Output(path, head)
    except OSError as error:
        parser.error(f"argument {option}: cannot write {path!r}: {error.strerror}")


def memory_bytes() -> int:
    """The memory this process may use: the machine's, or its control group's limit
    where that is lower (a container's)."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
    except OSError:
        return total
    return min(total, int(limit)) if limit.isdigit() else total


def gib(nbytes: float) -> str:
    size = nbytes / 2**30  # sizes are at most MAX_SIZE: no float overflows here
    return f"{size:.1f} GiB" if size < 1e6 else f"{size:.1e} GiB"


def check_memory(parser: argparse.ArgumentParser, what: str, needed: int) -> None:
    """A usage error when `what` needs more memory than this process may use (XLA and
    numpy end such a run in a MemoryError, or abort the process, midway)."""
    available = memory_bytes()
    if needed > available:
        parser.error(f"{what} need about {gib(needed)} of memory, more than the "
                     f"{gib(available)} of this machine")


def check_environment(parser: argparse.ArgumentParser) -> None:
    """A usage error, before any work, for a value of one of jax_unpool's environment
    variables that it does not know (`_settings` says which, and what it takes), or for
    a JAX that cannot start its platforms (JAX_PLATFORMS naming one it lacks)."""
    from jax_unpool import _settings

    try:
        _settings.read()
    except _settings.SettingError as error:
        parser.error(str(error).removeprefix("jax_unpool: "))
    import jax

    try:
        jax.devices()
    except (RuntimeError, AssertionError) as error:  # jax 0.10 asserts for "cuda" unknown
        why = str(error).strip().splitlines()[:1] or [
            f"JAX_PLATFORMS={jax.config.jax_platforms or ''!r} names no platform it has"]
        parser.error(f"JAX cannot start: {why[0]}")
