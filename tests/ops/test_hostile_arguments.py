"""Any Python value for any argument of the public functions gets a clear answer (issue
22): a result, a TypeError or ValueError whose message starts with the function's name,
or the documented run-time error (an index out of range). Anything else -- another
exception type, jnp's or numpy's own messages, a crash -- fails.

Hypothesis draws one public function (every unpool, backward and pool function of every
rank, their `ju.reference` versions and the NNX, Linen and Equinox layers), keeps most
of its arguments valid and replaces one or two by a hostile value: None, strings, bytes,
floats (NaN and infinities too), huge ints, numpy scalars and arrays of many dtypes,
dicts, sets, types, nested tuples and lists, jax arrays, ShapeDtypeStructs -- and
valid-looking sizes.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from out_of_range import RUNTIME_ERRORS

import jax_unpool as ju

FORMATS = {1: "NCW", 2: "NCHW", 3: "NCDHW"}


@dataclass(frozen=True)
class Target:
    """One public callable: its valid keyword arguments and the names its errors may
    start with."""

    name: str
    valid: dict[str, Any]
    call: Callable[..., Any]
    prefixes: tuple[str, ...]

    def __repr__(self) -> str:  # short: hypothesis prints it
        return self.name


def _targets() -> list[Target]:
    targets = []
    for k in (1, 2, 3):
        x, grad = np.ones((1, 2, *[2] * k), np.float32), np.ones((1, 2, *[4] * k), np.float32)
        idx = np.zeros(x.shape, np.int32)
        unpool = {"x": x, "indices": idx, "kernel_size": 2, "stride": None, "padding": 0,
                  "output_size": None, "data_format": FORMATS[k]}
        backward = {"grad_output": grad, "x": jax.ShapeDtypeStruct(x.shape, x.dtype),
                    "indices": idx, "output_size": (4,) * k, "data_format": FORMATS[k]}
        pool = {"x": grad, "kernel_size": 2, "stride": None, "padding": 0, "dilation": 1,
                "ceil_mode": False, "data_format": FORMATS[k], "index_dtype": jnp.int32}
        for module, where in ((ju, ""), (ju.reference, "reference.")):
            for fn, valid in ((f"max_unpool{k}d", unpool), (f"max_unpool{k}d_backward", backward),
                              (f"max_pool{k}d_with_indices", pool)):
                targets.append(Target(where + fn, valid, getattr(module, fn), (fn,)))
        # The layers: built with the drawn arguments, then called on valid data (Equinox's
        # take one channels-first example and no data_format).
        from jax_unpool import equinox, linen, nnx

        pool_args = {"kernel_size": 2, "stride": None, "padding": 0, "dilation": 1,
                     "ceil_mode": False, "data_format": FORMATS[k]}
        unpool_args = {"kernel_size": 2, "stride": None, "padding": 0,
                       "data_format": FORMATS[k]}
        pool, unpool = f"MaxPool{k}d", f"MaxUnpool{k}d"
        calls = {  # the data bound now: the lambdas outlive this iteration
            "nnx": (lambda layer, g=grad, **kw: layer(**kw)(g),
                    lambda layer, x=x, i=idx, **kw: layer(**kw)(x, i)),
            "linen": (lambda layer, g=grad, **kw: layer(**kw).apply({}, g),
                      lambda layer, x=x, i=idx, **kw: layer(**kw).apply({}, x, i)),
            "equinox": (lambda layer, g=grad, **kw: layer(**kw)(g[0]),
                        lambda layer, x=x, i=idx, **kw: layer(**kw)(x[0], i[0])),
        }
        for module in (nnx, linen, equinox):
            where = module.__name__.split(".")[-1]
            call_pool, call_unpool = calls[where]
            own = {"equinox": "jax_unpool.equinox."}.get(where, "")
            drop = {"data_format"} if where == "equinox" else set()
            pool_kw = {n: v for n, v in pool_args.items() if n not in drop}
            unpool_kw = {n: v for n, v in unpool_args.items() if n not in drop}
            targets.append(Target(f"{where}.{pool}", pool_kw,
                                  partial(call_pool, getattr(module, pool)),
                                  (own + pool, f"max_pool{k}d_with_indices")))
            targets.append(Target(f"{where}.{unpool}", unpool_kw,
                                  partial(call_unpool, getattr(module, unpool)),
                                  (own + unpool, f"max_unpool{k}d")))
    return targets


TARGETS = _targets()

HUGE_INTS = st.sampled_from([2**31 - 1, 2**31, 2**32 + 3, 2**60, 2**63 - 1, 2**63, 2**64,
                             -(2**63) - 1, 10**30])
NUMPY_SCALARS = st.sampled_from([np.int64(2), np.int32(-1), np.uint8(3), np.float32(2.0),
                                 np.float64(np.nan), np.bool_(True), np.bool_(False),
                                 np.complex64(1j), np.str_("NCHW"), np.int64(2**62)])
ARRAY_DTYPES = st.sampled_from([np.dtype(d) for d in (
    np.int8, np.int32, np.int64, np.uint32, np.uint64, np.float16, np.float32, np.float64,
    np.complex64, np.complex128, np.bool_, jnp.bfloat16, jnp.float8_e4m3fn, jnp.int4,
    jnp.float4_e2m1fn, "U2", "S2", object)])
def _cast(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):  # 64 into int4 wraps: fine here
        return a.astype(dtype)


# Small ints (valid and out-of-range positions alike) in any of those dtypes and shapes.
NUMPY_ARRAYS = st.builds(
    _cast,
    hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=3),
               elements=st.integers(-3, 20)),
    ARRAY_DTYPES)
SMALL_INTS = st.integers(-3, 6)
LEAVES = SMALL_INTS | st.none() | st.floats(allow_nan=True)
NESTED = st.one_of(st.lists(LEAVES, max_size=4), st.tuples(LEAVES, LEAVES),
                   st.tuples(SMALL_INTS, SMALL_INTS, SMALL_INTS),
                   st.tuples(st.lists(LEAVES, max_size=2), LEAVES),
                   st.lists(st.tuples(SMALL_INTS, SMALL_INTS), max_size=3))
# Values a size or a flag may well take: often valid, sometimes one off.
PLAUSIBLE = st.one_of(st.integers(0, 4), st.tuples(st.integers(0, 4)),
                      st.tuples(st.integers(0, 4), st.integers(0, 4)),
                      st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 4)),
                      st.sampled_from([None, True, False, (4, 4), (1, 2, 4, 4), "NHWC", "NCW",
                                       "NWC", "CW", "NDHWC", "CDHW"]))
HOSTILE = st.one_of(
    PLAUSIBLE, st.none(), st.text(max_size=6), st.binary(max_size=4),
    st.from_type(float), st.from_type(complex), st.booleans(), HUGE_INTS, SMALL_INTS,
    NUMPY_SCALARS, NUMPY_ARRAYS, NESTED,
    st.dictionaries(SMALL_INTS, SMALL_INTS, max_size=3), st.frozensets(SMALL_INTS, max_size=3),
    st.sampled_from([int, float, str, object, np.float32, jnp.int16, np.dtype("int64"),
                     "int32", "NHWC", "NCHW", "CHW", "NC", "", object(), Ellipsis,
                     jax.ShapeDtypeStruct((1, 2, 2, 2), np.float32), jnp.zeros((1, 2, 2, 2)),
                     jnp.ones(2, jnp.int32), jnp.asarray(True)]),
)


@st.composite
def hostile_calls(draw):
    target = draw(st.sampled_from(TARGETS))
    names = list(target.valid)
    # One hostile argument, sometimes two (a second draw of the first is just one).
    hostile = {draw(st.sampled_from(names)), draw(st.sampled_from([*names, *[None] * 8]))}
    hostile.discard(None)
    kwargs = {n: draw(_hostile(v)) if n in hostile else v for n, v in target.valid.items()}
    return target, kwargs, sorted(hostile)


def _hostile(valid):
    """HOSTILE, or for an array argument often an array of its shape with other values
    (out-of-range positions too) or another dtype."""
    if not isinstance(valid, np.ndarray):
        return HOSTILE
    like = st.builds(_cast,
                     hnp.arrays(np.int64, valid.shape, elements=st.sampled_from(
                         [0, 1, 3, -1, 4, 64, 2**31 - 1])),
                     st.sampled_from([valid.dtype] * 4) | ARRAY_DTYPES)
    return st.booleans().flatmap(lambda shaped: like if shaped else HOSTILE)  # 1 in 2


def _describe(kwargs: dict, hostile: list[str]) -> str:
    def show(v):
        if isinstance(getattr(v, "shape", None), tuple) and hasattr(v, "dtype"):
            return f"{type(v).__name__}[{v.dtype}]{v.shape}"
        return repr(v)[:80]
    return ", ".join(f"{n}={show(kwargs[n])}" for n in hostile)


# deadline=None: a drawn shape or dtype may compile a new computation (tens of ms, more
# on a loaded machine); max_examples sized for ~15 s on 2 cores.
@settings(max_examples=250, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_calls())
def test_any_argument_gets_a_result_or_a_clear_error(drawn):
    target, kwargs, hostile = drawn
    note(f"{target.name}({_describe(kwargs, hostile)})")
    try:
        with warnings.catch_warnings():  # e.g. index_dtype=int64 with x64 off: JAX's warning
            warnings.simplefilter("ignore")
            jax.block_until_ready(target.call(**kwargs))
    except RUNTIME_ERRORS as error:
        message = str(error)
        if "OUT_OF_RANGE: " in message:  # the documented run-time error (either type)
            assert any(f"OUT_OF_RANGE: {p}: index " in message for p in target.prefixes)
            event("run-time error")
            return
        assert isinstance(error, (TypeError, ValueError)), repr(error)
        assert message.startswith(tuple(f"{p}: " for p in target.prefixes)), repr(error)
        event("ValueError")
    except TypeError as error:
        assert str(error).startswith(tuple(f"{p}: " for p in target.prefixes)), repr(error)
        event("TypeError")
    else:
        # A result is fine, but only for values of a type the docs accept: "no" for
        # ceil_mode or a dict for kernel_size must not pass as something else.
        for name in hostile:
            assert _accepted(name, kwargs[name]), f"{name}={kwargs[name]!r} was accepted"
        event("result")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _accepted(name: str, value) -> bool:
    """Whether the README lets `name` take a value of this type (its value may still be
    refused)."""
    if name in ("kernel_size", "stride", "padding", "dilation", "output_size"):
        if value is None:
            return name != "padding" and name != "dilation"
        if isinstance(value, np.ndarray):
            return value.ndim == 1 and np.issubdtype(value.dtype, np.integer)
        return _is_int(value) or (isinstance(value, (tuple, list)) and all(map(_is_int, value)))
    if name == "ceil_mode":
        return isinstance(value, (bool, np.bool_))
    if name == "data_format":
        return isinstance(value, str) or value is None  # None: the layers' default
    if name == "index_dtype":
        return np.dtype(value) in (np.dtype(np.int32), np.dtype(np.int64))
    if name == "x" and isinstance(value, jax.ShapeDtypeStruct):
        return True  # the backward's x: only its shape and dtype are used
    if isinstance(value, (dict, set, frozenset)):
        return False
    dtype = np.asarray(value).dtype  # numbers, bools and ml_dtypes' (bfloat16, float8...)
    return jnp.issubdtype(dtype, np.number) or dtype == np.bool_


def test_the_property_covers_every_public_function():
    names = {t.name for t in TARGETS}
    for k in (1, 2, 3):
        for fn in (f"max_unpool{k}d", f"max_unpool{k}d_backward", f"max_pool{k}d_with_indices"):
            assert {fn, f"reference.{fn}"} <= names
        for module in ("nnx", "linen", "equinox"):
            assert {f"{module}.MaxPool{k}d", f"{module}.MaxUnpool{k}d"} <= names
    assert len(names) == len(TARGETS) == 36


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_the_valid_arguments_are_valid(target):
    # Otherwise the property would only ever see errors.
    jax.block_until_ready(target.call(**target.valid))
