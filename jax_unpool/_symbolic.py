"""Size guards that hold under shape polymorphism (`jax.export` with symbolic dims).

A guard on sizes -- a result within XLA's 2**60 - 1 elements, an output plane that int32
indices can address, a positive output size -- is decided at trace time whenever it can
be: exactly for concrete sizes, and for symbolic ones as far as jax's reasoning about
dimension expressions proves it (every symbolic dim is >= 1, plus the export's own
constraints). `2**60 * b` elements are too many for every batch b; `192 * b` elements are
not decided by the shapes, only by the call.

A guard left undecided is not skipped: the lowering emits it as a `shape_assertion`,
the check jax.export itself emits for its shape constraints. Shape refinement evaluates it
when the exported function is called with concrete shapes, before XLA compiles anything,
and fails the call with our message (a ValueError "Error refining shapes", caused by a
JaxRuntimeError carrying the message) instead of letting XLA abort on the oversized array.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.mlir import ir
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir

from jax_unpool import _compat


def is_symbolic(d) -> bool:
    return jax.export.is_symbolic_dim(d)


def decided(question: Callable[[], bool]) -> bool | None:
    """The answer to a comparison of dimension sizes, or None when the symbolic dims in it
    leave it open."""
    try:
        return bool(question())
    except _compat.InconclusiveDimensionOperation:
        return None


def exceeds(dims: Sequence, bound: int) -> bool | None:
    """Whether the product of `dims` exceeds `bound`: exact for concrete dims, None when
    symbolic ones leave it open."""
    return decided(lambda: math.prod(dims) > bound)


def shape_text(dims: Sequence) -> str:
    return f"({', '.join(map(str, dims))})"


def no_tangent(shape: Sequence) -> jax.Array:
    """The float0 tangent of an integer result; np.zeros cannot take symbolic dims."""
    return jax.lax.broadcast(np.zeros((), jax.dtypes.float0), tuple(shape))


# --------------------------------------------------------------------------------------
# Call-time assertions (in a lowering rule)
# --------------------------------------------------------------------------------------

def _i64(value: ir.Value) -> ir.Value:
    i64 = ir.RankedTensorType.get([], ir.IntegerType.get_signless(64))
    return value if value.type == i64 else hlo.convert(i64, value)


def _compare(a: ir.Value, b: ir.Value, direction: str) -> ir.Value:
    return hlo.compare(a, b, hlo.ComparisonDirectionAttr.get(direction))


def _dim_values(ctx, dims: Sequence) -> list[ir.Value]:
    """The values of `dims` in the call being lowered, as i64 scalars (jax computes them
    as its default int: int32 unless x64 is on)."""
    values = mlir.lower_fun(lambda: [jnp.asarray(d) for d in dims], multiple_results=True)(
        ctx.replace(avals_in=[]))
    return [_i64(v) for v in values]


def _message(prefix: str, dims: Sequence) -> str:
    """`prefix`, then `dims`, and again with the symbolic ones as their values ({0}, ...)."""
    slots = iter(range(len(dims)))
    at_call = [f"{{{next(slots)}}}" if is_symbolic(d) else str(d) for d in dims]
    return f"{prefix}, got {shape_text(dims)} = ({', '.join(at_call)})"


def assert_at_most(ctx, dims: Sequence, bound: int, prefix: str) -> None:
    """At call time, if it is open now: product of `dims` <= bound, else the call fails
    with "`prefix`, got (b, 3, 8, 8) = (<b's value>, 3, 8, 8)".

    The product is never formed (it could overflow int64): with c the concrete factor,
    prod(symbolic) <= bound // c is checked one factor at a time, each against what the
    earlier ones leave (a zero factor passes everything)."""
    if exceeds(dims, bound) is not None:
        return
    symbolic = [d for d in dims if is_symbolic(d)]
    values = _dim_values(ctx, symbolic)
    left = mlir.ir_constant(np.int64(bound // math.prod(d for d in dims if not is_symbolic(d))))
    zero, one = mlir.ir_constant(np.int64(0)), mlir.ir_constant(np.int64(1))
    ok = any_zero = None
    for v in values:
        fits = _compare(v, left, "LE")
        ok = fits if ok is None else hlo.and_(ok, fits)
        is_zero = _compare(v, zero, "EQ")
        any_zero = is_zero if any_zero is None else hlo.or_(any_zero, is_zero)
        left = hlo.divide(left, hlo.maximum(v, one))
    _compat.emit_shape_assertion(hlo.or_(ok, any_zero), values, _message(prefix, dims))

