"""Types of command-line options (argparse ``type=`` functions): a bad value is a usage
error (exit status 2, the option named) before any work starts, not a traceback midway."""

from __future__ import annotations

import argparse
import os
from typing import TextIO


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
    """A file path that can be written when the run ends: its directory exists and is
    writable, and the path is not a directory."""
    directory = os.path.dirname(os.path.abspath(text))
    if os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    if not os.path.isdir(directory):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no directory {directory!r}")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(
            f"cannot write {text!r}: directory {directory!r} is not writable")
    return text


def file_for_writing(text: str) -> TextIO:
    """A file opened (created, emptied) for writing now, so that a path that cannot be
    written (a dangling symlink, a name too long) is a usage error before the run, not a
    traceback after it."""
    path = writable_file(text)
    try:
        return open(path, "w")  # the command writes it and closes it
    except OSError as error:
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: {error.strerror}") from None
