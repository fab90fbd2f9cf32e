"""The backend registry: which lowering serves each operation on each platform.

An operation (one of `OPS`) is declared once by its home module with its primitives (one
per spatial rank) and its call guards (the size checks that symbolic shapes leave to
call time, `_symbolic`). A backend registers a lowering rule per operation, for one
platform or as the default of every platform; the registry installs it for every
primitive of the operation, after the guards, so no backend can forget them. Declaring
and registering may come in either order: what is registered before its operation is
declared is installed when it is.

`install` replaces what serves a platform at run time and `restore` goes back to the
package's own registrations (`jax_unpool.npu.register` and `unregister_cpu_emulation` do
so); both clear jax's caches, so that no program compiled before keeps the other routing.
Where the XLA ops are asked for -- for the whole process by ``JAX_UNPOOL_BACKEND=xla``
(`keep_default_only`), or for what is lowered inside ``with use("xla"):`` -- every
platform lowers through the default (XLA ops) rules.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import jax
from jax.interpreters import mlir

from jax_unpool import _args, _window

OPS = ("max_unpool", "max_unpool_backward", "max_pool", "max_pool_gather",
       "max_pool_scatter_add", "window_offsets")
BACKENDS = ("xla",)  # what `use` takes


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
_scoped = contextvars.ContextVar("jax_unpool_backend", default=None)


def declare(op: str, primitives: Iterable, call_guards: Callable | None = None) -> None:
    """Declares `op`'s primitives; `call_guards(ctx, **params)` runs first in every
    lowering of them. Lowerings registered for `op` before are installed now."""
    if op not in OPS:
        raise ValueError(f"unknown operation {op!r}; one of {OPS}")
    with _lock:
        _ops[op] = _Op(tuple(primitives), call_guards)
        for (platform, registered_op), lowering in list(_serving.items()):
            if registered_op == op:
                _install(platform, op, lowering)


def _routed(op: _Op, op_name: str, platform: str | None, rule: Callable) -> Callable:
    """`rule` after the call guards, and the default (XLA ops) rule instead where the XLA
    ops are asked for."""
    def lowering(ctx, *operands, **params):
        if op.call_guards is not None:
            op.call_guards(ctx, **params)
        if platform is not None and (_default_only or _scoped.get() == "xla"):
            return _own[(None, op_name)].rule(ctx, *operands, **params)
        return rule(ctx, *operands, **params)
    return lowering


def _install(platform: str | None, op: str, lowering: Lowering) -> None:
    _serving[(platform, op)] = lowering
    declared = _ops.get(op)
    if declared is None:  # installed when `op` is declared
        return
    for p in declared.primitives:
        mlir.register_lowering(p, _routed(declared, op, platform, lowering.rule),
                               platform=platform)


def keep_default_only() -> None:
    """From now on every platform lowers through the default (XLA ops) rules
    (``JAX_UNPOOL_BACKEND=xla``, at import). The platforms' own registrations are kept,
    unused: their FFI targets stay registered for artifacts that name them."""
    global _default_only
    _default_only = True


def default_only() -> bool:
    """Whether `keep_default_only` was called."""
    return _default_only


@contextlib.contextmanager
def use(backend: str) -> Iterator[None]:
    """Inside the block, what is lowered runs the `backend`'s lowerings on every platform:
    "xla", XLA's own ops, so that a `jax.export` artifact holds no custom call of ours and
    runs where jax_unpool is not installed. jax's caches are cleared on entry and exit, so
    that no program compiled outside the block is reused inside it, nor the other way."""
    if backend not in BACKENDS:
        raise ValueError(f"jax_unpool.backends.use: backend must be one of "
                         f"{', '.join(map(repr, BACKENDS))}, got {_args.received(backend)}")
    token = _scoped.set(backend)
    jax.clear_caches()
    try:
        yield
    finally:
        _scoped.reset(token)
        jax.clear_caches()


def register(op: str, lowering: Lowering, platform: str | None = None) -> None:
    """A backend's own lowering of `op` on `platform` (None: every platform without one of
    its own), installed now (or when `op` is declared) and restored by `restore`."""
    if op not in OPS:
        raise ValueError(f"unknown operation {op!r}; one of {OPS}")
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
    """What lowers `op` on `platform` now (outside any `use` block)."""
    with _lock:
        if _default_only:
            return _serving[(None, op)]
        return _serving.get((platform, op)) or _serving[(None, op)]


def rule(platform: str | None, op: str) -> Callable:
    """The package's own lowering rule of `op` on `platform` (without its guards), for a
    backend that falls back to another's for some inputs."""
    return (_own.get((platform, op)) or _own[(None, op)]).rule


def by_index_format(flat: Callable, window: Callable) -> Callable:
    """An unpool rule that lowers flat indices with `flat` and window offsets
    (`index_window`, the pool's geometry) with `window`, which reads the offsets itself."""
    def lowering(ctx, values, indices, *, index_window=None, **params):
        if index_window is None:
            return flat(ctx, values, indices, **params)
        return window(ctx, values, indices, index_window=index_window, **params)
    return lowering


def flat_indices_first(rule: Callable) -> Callable:
    """An unpool rule for flat indices (`rule`) that also takes window offsets
    (`index_window`): converted to flat indices first, on the device in XLA ops
    (`_window.to_flat`: an offset naming no tap becomes -1, which the kernel treats as
    any out-of-range index)."""
    def lowering(ctx, values, indices, *, index_window=None, **params):
        if index_window is None:
            return rule(ctx, values, indices, **params)
        g = index_window
        flat_aval = ctx.avals_in[1].update(dtype=g.index_dtype)
        (flat,) = mlir.lower_fun(lambda o: _window.to_flat(o, g), multiple_results=False)(
            ctx.replace(avals_in=[ctx.avals_in[1]], avals_out=[flat_aval]), indices)
        return rule(ctx.replace(avals_in=[ctx.avals_in[0], flat_aval]), values, flat,
                    **params)
    return lowering


def pool_derivative(gather: Callable, unpool: Callable) -> dict[str, Callable]:
    """A native backend's rules for the pool's derivative pair (pooling's
    max_pool_gather_p and max_pool_scatter_add_p) from its unpool rules: `gather` (the
    unpool backward's) where every argmax lies in its window, so inside the plane (a
    window of padding only reports an index past it); `unpool` (the forward's) where,
    moreover, no two windows share an argmax (then a scatter is the sum). The XLA ops
    otherwise, and for the packed sub-byte dtypes the kernels do not move."""
    def index_window(g, index_format):
        return g if index_format == "window" else None

    def gather_rule(ctx, t, indices, *, geometry, index_format):
        g = geometry
        if g.argmax_in_window() and _args.is_movable(ctx.avals_in[0].dtype):
            return gather(ctx, t, indices, channels_last=g.channels_last, spatial_rank=g.k,
                          window=g.window(), check_indices=False,
                          index_window=index_window(g, index_format))
        return rule(None, "max_pool_gather")(ctx, t, indices, geometry=g,
                                             index_format=index_format)

    def scatter_add_rule(ctx, ct, indices, *, geometry, index_format):
        g = geometry
        if g.argmax_is_unique() and _args.is_movable(ctx.avals_in[0].dtype):
            return unpool(ctx, ct, indices, output_size=g.in_size,
                          channels_last=g.channels_last, window=g.window(),
                          check_indices=False, index_window=index_window(g, index_format))
        return rule(None, "max_pool_scatter_add")(ctx, ct, indices, geometry=g,
                                                  index_format=index_format)

    return {"max_pool_gather": gather_rule, "max_pool_scatter_add": scatter_add_rule}
