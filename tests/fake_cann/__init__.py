"""Emulated CANN runtime (libascendcl.so, libnnopbase.so, libopapi.so) for testing the
aclnn path without an Ascend device. See README.md; build with ``build(out_dir)``."""

from .build import build

__all__ = ["build"]
