"""Checking what the commands are given before any work starts: argparse ``type=``
functions, which touch nothing (a bad value is a usage error, exit status 2, the option
named), the machine's memory that bounds the sizes, and the output files, tried once all
arguments have parsed, so that a path that cannot be written is a usage error too, not a
traceback after the run."""

from __future__ import annotations

import argparse
import os
import stat


def positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive int")


def non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "a non-negative int")


def _int_at_least(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def writable_file(text: str) -> str:
    """A path to write a file at: not empty, not a directory, in a directory that exists
    and is writable. Nothing is created here (see `Output`)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path cannot be written")
    directory = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    if not os.path.isdir(directory):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no directory {directory!r}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"cannot write {text!r}: directory {directory!r} is not writable")
    return text


class OutputError(OSError):
    """An `Output` could not be written after all (a disk that filled up meanwhile)."""


class Output:
    """A file that a command writes when its work is done, tried before the work starts:
    opened (created if absent) and its first bytes, `head`, written and flushed, so that
    what only writing reveals (a dangling symlink, a name too long, a full device) fails
    now. An existing file is not emptied: `head` is what the file starts with (a PNG's
    signature, a JSON object's brace), so an older file of the same kind keeps its
    content until `finish` replaces it."""

    def __init__(self, path: str, head: bytes):
        self.path = path
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
        self._file = os.fdopen(fd, "wb")
        try:
            self._file.write(head)
            self._file.flush()
        except OSError:
            self.close()
            raise

    def finish(self, rest: bytes) -> None:
        """Writes the rest of the content and closes; a longer older file is cut. An
        `OutputError` when that fails."""
        try:
            self._file.write(rest)
            self._file.flush()
            if stat.S_ISREG(os.fstat(self._file.fileno()).st_mode):
                self._file.truncate()  # pipes and devices cannot be cut
        except OSError as error:
            raise OutputError(f"cannot write {self.path!r}: {error.strerror}") from error
        finally:
            self.close()

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
    return f"{nbytes / 2**30:.1f} GiB"


def check_memory(parser: argparse.ArgumentParser, what: str, needed: int) -> None:
    """A usage error when `what` needs more memory than this process may use (XLA and
    numpy end such a run in a MemoryError, or abort the process, midway)."""
    available = memory_bytes()
    if needed > available:
        parser.error(f"{what} need about {gib(needed)} of memory, more than the "
                     f"{gib(available)} of this machine")
