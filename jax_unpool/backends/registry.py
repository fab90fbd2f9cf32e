"""The backend registry: which lowering serves each operation on each platform.

An operation ("max_unpool", "max_unpool_backward", "max_pool") is declared once by its
home module with its primitives (one per spatial rank) and its call guards (the size
checks that symbolic shapes leave to call time, `_symbolic`). A backend registers a
lowering rule per operation, for one platform or as the default of every platform; the
registry installs it for every primitive of the operation, after the guards, so no
backend can forget them. `install` replaces what serves a platform at run time and
`restore` goes back to the package's own registrations (`jax_unpool.npu.register` and
`unregister_cpu_emulation` do so); both clear jax's caches, so that no program compiled
before keeps the other routing. After `keep_default_only` (``JAX_UNPOOL_BACKEND=xla``)
a platform's own registrations are ignored: every platform keeps the default.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import NamedTuple

import jax
from jax.interpreters import mlir

OPS = ("max_unpool", "max_unpool_backward", "max_pool")


class Lowering(NamedTuple):
    """A lowering rule and, for `python -m jax_unpool info`, what it runs."""

    rule: Callable
    backend: str  # "xla", "cpu", "cuda", "npu"
    runs: str  # e.g. "XLA ops", "C++ kernel jax_unpool_max_unpool_v2"


class _Op(NamedTuple):
    primitives: tuple
    call_guards: Callable | None


_lock = threading.RLock()
_ops: dict[str, _Op] = {}
_own: dict[tuple[str | None, str], Lowering] = {}  # (platform or None, op): the package's
_serving: dict[tuple[str | None, str], Lowering] = {}  # what is installed now
_default_only = False


def declare(op: str, primitives: Iterable, call_guards: Callable | None = None) -> None:
    """Declares `op`'s primitives; `call_guards(ctx, **params)` runs first in every
    lowering of them."""
    if op not in OPS:
        raise ValueError(f"unknown operation {op!r}; one of {OPS}")
    _ops[op] = _Op(tuple(primitives), call_guards)


def _guarded(op: _Op, rule: Callable) -> Callable:
    if op.call_guards is None:
        return rule

    def lowering(ctx, *operands, **params):
        op.call_guards(ctx, **params)
        return rule(ctx, *operands, **params)
    return lowering


def _install(platform: str | None, op: str, lowering: Lowering) -> None:
    declared = _ops[op]
    for p in declared.primitives:
        mlir.register_lowering(p, _guarded(declared, lowering.rule), platform=platform)
    _serving[(platform, op)] = lowering


def keep_default_only() -> None:
    """From now on, registrations for a named platform are ignored: every platform lowers
    through the default (None) registrations (``JAX_UNPOOL_BACKEND=xla``, at import)."""
    global _default_only
    _default_only = True


def default_only() -> bool:
    """Whether `keep_default_only` was called."""
    return _default_only


def register(op: str, lowering: Lowering, platform: str | None = None) -> None:
    """A backend's own lowering of `op` on `platform` (None: every platform without one of
    its own), installed now and restored by `restore`; ignored for a named platform after
    `keep_default_only`."""
    if platform is not None and _default_only:
        return
    with _lock:
        _own[(platform, op)] = lowering
        _install(platform, op, lowering)


def install(platform: str, lowerings: dict[str, Lowering]) -> None:
    """Routes `platform`'s operations to `lowerings` (a backend loaded at run time), until
    `restore(platform)`."""
    with _lock:
        for op, lowering in lowerings.items():
            _install(platform, op, lowering)
        jax.clear_caches()


def restore(platform: str) -> None:
    """`platform`'s operations lowered as the package registered them (its own backend,
    else the default), as before any `install`."""
    with _lock:
        for op in OPS:
            own = _own.get((platform, op)) or _own[(None, op)]
            _install(platform, op, own)
        jax.clear_caches()


def serving(platform: str, op: str) -> Lowering:
    """What lowers `op` on `platform` now."""
    with _lock:
        return _serving.get((platform, op)) or _serving[(None, op)]


def rule(platform: str | None, op: str) -> Callable:
    """The package's own lowering rule of `op` on `platform` (without its guards), for a
    backend that falls back to another's for some inputs."""
    return (_own.get((platform, op)) or _own[(None, op)]).rule
