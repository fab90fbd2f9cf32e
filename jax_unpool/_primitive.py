"""What every primitive of the package shares: the Primitive class, how a family's rules
are registered, the batching rule's fold of a vmapped axis into N, and the JVP's handling
of symbolic zero tangents."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core
from jax.interpreters import ad, batching, xla

from jax_unpool import _args, _compat


class Primitive(core.Primitive):
    """A primitive whose operands vary over the same manual axes when it is bound (as
    jax's own ops cast them: `_sharding`'s docstring says why), and whose lowering sees
    the devices (custom_partitioning needs them). `defaults()` fills the parameters a bind
    omits; `check_params(**params)` then runs at every bind: before jax's caches, which
    hold 2.0 equal to 2 and 1 equal to True, so that a bad parameter fails the same way
    every time."""

    def __init__(self, name: str, check_params: Callable[..., object], *,
                 multiple_results: bool = False, defaults: Callable[[], dict] | None = None):
        super().__init__(name)
        self.multiple_results = multiple_results
        self._check_params = check_params
        self._defaults = defaults
        _compat.require_devices_during_lowering(self)

    def bind(self, *args, **params):
        # Parameters a bind may omit get their defaults here, so that every rule, and the
        # jaxpr, sees them all.
        if self._defaults is not None:
            params = {**self._defaults(), **params}
        self._check_params(**params)
        return super().bind(*_vary_to_union(args), **params)


def define_rules(primitives: Iterable[Primitive], abstract_eval, jvp, batch,
                 transpose=None) -> None:
    """Gives each primitive of a family (one per spatial rank) the same rules: evaluation
    outside jit as its lowering, then abstract evaluation, JVP, transpose (for the linear
    ones) and batching."""
    for p in primitives:
        p.def_impl(partial(xla.apply_primitive, p))
        p.def_abstract_eval(abstract_eval)
        ad.primitive_jvps[p] = jvp
        if transpose is not None:
            ad.primitive_transposes[p] = transpose
        batching.primitive_batchers[p] = batch


def _vary_to_union(args):
    varying = [_compat.varying_axes(jax.typeof(a)) for a in args]
    union = frozenset().union(*varying)
    return [a if v == union else _compat.cast_to_varying(a, tuple(union - v))
            for a, v in zip(args, varying)]


def check_bool(fn: str, name: str, value) -> None:
    """A bool parameter: "no" or 0 would otherwise pick a behaviour silently."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{fn}: {name} must be a bool, got {_args.received(value)}")


def fold_batch(args, dims, k: int):
    """Folds the vmapped axis B into N (unbatched operands get it as N): one bind, no loop.
    Returns the operands and how to unfold a result into (result, its batch dim).

    B goes before N, unless N is split across devices (an explicit mesh) and B is not:
    then after it, so that each device's rows of the folded dim stay one block. (A
    reshape can merge a split dim only with whole dims after it.)"""
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    moved = [batching.bdim_at_front(a, d, size) for a, d in zip(args, dims)]
    if moved[0].ndim == k + 2:  # the operands were unbatched
        return moved, lambda out: (out, 0)
    n = moved[0].shape[1]
    specs = [tuple(jax.typeof(a).sharding.spec) + (None, None) for a in moved]
    if any(spec[1] is not None for spec in specs) and all(spec[0] is None for spec in specs):
        folded = [jnp.moveaxis(a, 0, 1).reshape(n * size, *a.shape[2:]) for a in moved]
        return folded, lambda out: (out.reshape(n, size, *out.shape[1:]), 1)
    folded = [a.reshape(size * n, *a.shape[2:]) for a in moved]
    return folded, lambda out: (out.reshape(size, n, *out.shape[1:]), 0)


def tangent_or_zero(tangent, out, bind):
    """bind(tangent), or the symbolic zero tangent of `out` when `tangent` is one (or an
    integer primal's float0 tangent)."""
    if type(tangent) is ad.Zero or tangent.dtype == jax.dtypes.float0:
        return _compat.zero_tangent(out)
    return bind(tangent)
