"""What the CPU offers, as the kernels see it (ffi/cpu/simd.h), read from /proc/cpuinfo
(Linux; elsewhere nothing is known and the answers are empty)."""

from __future__ import annotations

import functools
import os


@functools.cache
def _cpuinfo() -> dict[str, str]:
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return {}
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_has_avx2() -> bool:
    return "avx2" in _cpuinfo().get("flags", "").split()


def expected_gather(choice: str | None = None) -> str:
    """What `_jax_unpool.cpu_gather()` answers under JAX_UNPOOL_CPU_GATHER=`choice`
    (default: this process's): AVX2 gathers where the CPU has AVX2, unless it is AMD's
    or `choice` is "scalar"."""
    choice = os.environ.get("JAX_UNPOOL_CPU_GATHER", "") if choice is None else choice
    if not cpu_has_avx2() or choice == "scalar":
        return "scalar"
    if choice == "vector":
        return "avx2"
    return "scalar" if _cpuinfo().get("vendor_id") == "AuthenticAMD" else "avx2"
