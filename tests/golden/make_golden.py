"""Writes torch_2_13.npz: PyTorch's max pools and unpools on fixed inputs, the oracle of
tests/ops/test_golden_torch.py, which runs without torch.

Made with the torch of pyproject.toml's `torch` extra (2.13.0; the CPU build suffices), on
one thread. Regenerate it, or check it, from the repository root:

    pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    python tests/golden/make_golden.py           # rewrites tests/golden/torch_2_13.npz
    python tests/golden/make_golden.py --check   # compares a fresh run with the file

The inputs come from seeds (each case's own, from its name) and torch runs on one thread
(duplicated indices: the last input position wins; sums in input order), so a rerun gives
every array bit for bit (the zip's timestamps differ; --check compares the arrays, and
tests/ops/test_golden_torch.py does too wherever torch is installed). Nothing here imports
jax_unpool: every expected array is torch's.

Each case is an entry of "cases.json" (a string in the file), which says how to call the
op, and a set of arrays "<case>/<array>", which cases.json's "arrays" places in one flat
buffer per dtype (tests/helpers/torch_golden.py reads them). The inputs and results of
channels-last cases are torch's (channels-first) ones with the channels moved last. Value
arrays are stored in their dtype, bfloat16 as its bits (uint16); indices as torch gives
them (int64).

- pool cases (torch.nn.functional.max_pool{k}d, return_indices=True): "x", "values",
  "indices"; for floats also the gradient of sum(values * ct) ("ct", "grad": torch's
  autograd) and the forward-mode derivative ("tangent", "jvp": torch.func.jvp).
  Cotangents are small integers (dyadic fractions for float32/64), so that a sum over
  overlapping windows is exact in any order. A window of padding only may report an index
  past the plane (torch's quirk), which torch's backward adds into the next plane: such a
  case stores no derivative.
- unpool cases (max_unpool{k}d): "x", "indices", "out"; "g" and "backward" (the gradient
  w.r.t. x of sum(out * g): the unpool's backward); for floats "tangent" and "jvp"; where
  no index repeats in a plane also "ct2" and "backward_vjp", the derivative of the
  backward w.r.t. g (torch's double backward; with duplicates torch's is a scatter-add,
  ours a scatter where the largest input position wins, so none is stored).
  torch has no integer or bool unpool: those cases run it in float64, on values that
  float64 holds exactly (|v| < 2**53), and cast back.
"""

from __future__ import annotations

import io
import json
import sys
import zlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
OUT = HERE / "torch_2_13.npz"
TORCH_VERSION = "2.13.0"

FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["int8", "int16", "int32", "int64", "uint8"]
DTYPES = FLOATS + INTS + ["bool"]
SPATIAL = {1: (11,), 2: (7, 6), 3: (5, 4, 5)}  # the sweeps' input sizes
RANKS = (1, 2, 3)


# ------------------------------------------------------------------ numpy <-> torch


def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, rounding to nearest even, a NaN as 0x7FC0 (its sign
    kept): what torch's scalar conversion gives, and so what its bfloat16 pool, which
    compares in float32, writes back for a NaN. (torch's vectorised conversion, in
    `.to(torch.bfloat16)`, makes 0xFFFF of a NaN: an input with a NaN payload the pool
    would not give back bit for bit.)"""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = ((u >> 16) & 0x8000).astype(np.uint16) | np.uint16(0x7FC0)
    return np.where(np.isnan(x), nan, rounded)


def to_torch(x: np.ndarray, dtype: str) -> torch.Tensor:
    """x (numpy, in `dtype`; bfloat16 as float32 values) as torch's."""
    if dtype == "bfloat16":
        return torch.from_numpy(bfloat16_bits(x).view(np.int16)).view(torch.bfloat16)
    if dtype == "bool":
        return torch.from_numpy(np.ascontiguousarray(x).astype(np.uint8))
    return torch.from_numpy(np.ascontiguousarray(x))


def to_numpy(t: torch.Tensor, dtype: str) -> np.ndarray:
    """torch's result as stored: bfloat16 as its bits, bool back from uint8."""
    t = t.detach().contiguous()
    if dtype == "bfloat16":
        return t.view(torch.int16).numpy().view(np.uint16)
    if dtype == "bool":
        return t.numpy().astype(bool)
    return t.numpy()


def as_float32(x: np.ndarray, dtype: str) -> np.ndarray:
    """bfloat16 inputs are drawn as float32 rounded to bfloat16 (torch rounds)."""
    return to_torch(x, dtype).float().numpy() if dtype == "bfloat16" else x


def seed(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def move_last(a: np.ndarray, batched: bool) -> np.ndarray:
    """Channels first -> channels last (C is axis 1, or 0 unbatched)."""
    return np.ascontiguousarray(np.moveaxis(a, 1 if batched else 0, -1))


# ------------------------------------------------------------------ inputs


def mixed_floats(rng, shape, dtype: str, specials: bool = True) -> np.ndarray:
    """Halves in [-2, 2] (many ties), and NaN, -inf, +inf and -0.0 among them."""
    x = rng.integers(-4, 5, shape).astype(np.float32) / 2
    if specials:
        x[rng.random(shape) < 0.08] = np.nan
        x[rng.random(shape) < 0.04] = -np.inf
        x[rng.random(shape) < 0.02] = np.inf
        x[rng.random(shape) < 0.04] = -0.0
    return x if dtype in ("float32", "bfloat16") else x.astype(dtype)


def sweep_values(rng, shape, dtype: str, for_unpool: bool = False) -> np.ndarray:
    """Every dtype's values. For a pool: floats with ties and NaN, -inf, +inf, -0.0 among
    them, and the first plane all the dtype's lowest value (-inf for floats), next to the
    padding that must never win. For an unpool: distinct-ish values, integers that float64
    holds exactly (where torch unpools them)."""
    if dtype == "bool":
        return rng.random(shape) < 0.3
    if dtype in FLOATS:
        if for_unpool:
            x = (rng.standard_normal(shape) * 4).astype(np.float32)
            return x if dtype in ("float32", "bfloat16") else x.astype(dtype)
        x = mixed_floats(rng, shape, dtype)
        x.reshape(-1, *shape[2:])[0] = -np.inf
        return x
    info = np.iinfo(dtype)
    low, high = int(info.min), int(info.max)
    if for_unpool:
        low, high = max(low, -(2**53) + 1), min(high, 2**53 - 1)
    x = rng.integers(low, high, shape, endpoint=True, dtype=np.int64).astype(dtype)
    if not for_unpool:
        x.reshape(-1, *shape[2:])[0] = info.min
    return x


def cotangent(rng, shape, dtype: str) -> np.ndarray:
    """Non-zero small integers (float16/bfloat16) or quarters in [-4, 4]: every partial
    sum over at most 27 overlapping windows is exact in the dtype, whatever the order."""
    v = rng.integers(1, 5, shape) * rng.choice([-1, 1], shape)
    if dtype in ("float32", "float64"):
        v = v / rng.choice([1, 2, 4], shape)
    return v.astype(np.float32 if dtype == "bfloat16" else dtype)


def tangent(rng, shape, dtype: str) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32 if dtype == "bfloat16" else dtype)


# ------------------------------------------------------------------ cases


class Golden:
    """The cases and arrays of the file, as they are built."""

    def __init__(self):
        self.cases: list[dict] = []
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, meta: dict, arrays: dict[str, np.ndarray]) -> None:
        name = meta["name"]
        assert all(c["name"] != name for c in self.cases), name
        self.cases.append(meta)
        for key, a in arrays.items():
            self.arrays[f"{name}/{key}"] = a

    def pool(self, name: str, x: np.ndarray, k: int, window: tuple, *, dtype: str,
             last: bool = False, grad: bool = True) -> None:
        """torch's pool of x (channels first, batched or not) with window (kernel,
        stride, padding, dilation, ceil_mode, as torch takes them)."""
        batched = x.ndim == k + 2
        rng = seed(name + "/derivatives")
        pool = getattr(F, f"max_pool{k}d")
        xt = to_torch(x, dtype)
        values, indices = pool(xt, *window, return_indices=True)
        plane = int(np.prod(x.shape[-k:]))
        # A window of padding only reports an index that may lie past the plane (torch's
        # quirk): its backward then adds into the next plane, its jvp reads there; ours
        # drops the cotangent. No derivative is stored for such a case.
        grad = grad and dtype in FLOATS and bool((indices < plane).all())
        layout = (lambda a: move_last(a, batched)) if last else (lambda a: a)
        stored = as_float32(x, dtype)
        arrays = {"x": layout(to_numpy(to_torch(stored, dtype), dtype)),
                  "values": layout(to_numpy(values, dtype)),
                  "indices": layout(indices.numpy())}
        if grad:
            ct = cotangent(rng, tuple(values.shape), dtype)
            xg = to_torch(stored, dtype).requires_grad_(True)
            out, _ = pool(xg, *window, return_indices=True)
            (out * to_torch(ct, dtype)).sum().backward()
            t = tangent(rng, x.shape, dtype)
            _, jvp = torch.func.jvp(lambda a: pool(a, *window), (to_torch(stored, dtype),),
                                    (to_torch(t, dtype),))
            arrays.update(ct=layout(to_numpy(to_torch(ct, dtype), dtype)),
                          grad=layout(to_numpy(xg.grad, dtype)),
                          tangent=layout(to_numpy(to_torch(t, dtype), dtype)),
                          jvp=layout(to_numpy(jvp, dtype)))
        self.add({"name": name, "op": "pool", "k": k, "dtype": dtype, "last": last,
                  "batched": batched, "window": list(window), "grad": grad}, arrays)

    def unpool(self, name: str, x: np.ndarray, indices: np.ndarray, k: int, *, dtype: str,
               kernel=None, stride=None, padding=0, output_size=None, hint: bool = True,
               last: bool = False, backward: bool = True) -> None:
        """torch's unpool of x at indices (channels first); `hint`: our call gets kernel,
        stride and padding too (else output_size alone: torch's result's size)."""
        batched = x.ndim == k + 2
        rng = seed(name + "/derivatives")
        unpool = lambda a: torch_unpool(k, a, it, kernel, stride, padding, size)
        floats = dtype in FLOATS
        compute = dtype if floats else "float64"  # torch unpools floats only
        stored = as_float32(x, dtype)
        it = torch.from_numpy(indices.astype(np.int64))
        xt = to_torch(stored if floats else stored.astype(np.float64), compute)
        xt.requires_grad_(True)
        size = None if output_size is None else list(output_size)
        out = unpool(xt)
        back = (lambda t: to_numpy(t, dtype)) if floats else (
            lambda t: t.detach().numpy().astype(dtype))
        layout = (lambda a: move_last(a, batched)) if last else (lambda a: a)
        arrays = {"x": layout(to_numpy(to_torch(stored, dtype), dtype)),
                  "indices": layout(indices.astype(np.int64)),
                  "out": layout(back(out))}
        planes = indices.reshape(-1, int(np.prod(indices.shape[-k:])))
        unique = all(len(np.unique(p)) == p.size for p in planes)
        derivatives = backward and floats
        if backward:
            g = (cotangent(rng, tuple(out.shape), dtype) if floats
                 else sweep_values(rng, tuple(out.shape), dtype, for_unpool=True))
            gt = to_torch(g if floats else g.astype(np.float64), compute).requires_grad_(True)
            (gathered,) = torch.autograd.grad(out, xt, gt, create_graph=True)
            arrays.update(g=layout(to_numpy(to_torch(g, dtype), dtype)),
                          backward=layout(back(gathered)))
        if derivatives:
            t = tangent(rng, x.shape, dtype)
            _, jvp = torch.func.jvp(unpool, (to_torch(stored, dtype),), (to_torch(t, dtype),))
            arrays.update(tangent=layout(to_numpy(to_torch(t, dtype), dtype)),
                          jvp=layout(to_numpy(jvp, dtype)))
            if unique:
                ct2 = cotangent(rng, x.shape, dtype)
                (backward_vjp,) = torch.autograd.grad(gathered, gt, to_torch(ct2, dtype))
                arrays.update(ct2=layout(to_numpy(to_torch(ct2, dtype), dtype)),
                              backward_vjp=layout(to_numpy(backward_vjp, dtype)))
        self.add({"name": name, "op": "unpool", "k": k, "dtype": dtype, "last": last,
                  "batched": batched, "kernel": kernel, "stride": stride, "padding": padding,
                  "output_size": list(out.shape[-k:]), "hint": hint, "backward": backward,
                  "derivatives": derivatives, "backward_vjp": derivatives and unique}, arrays)


def torch_unpool(k: int, x, indices, kernel, stride, padding, size):
    """torch's max_unpool{k}d; without a kernel, its aten op of output_size alone."""
    if kernel is not None:
        return getattr(F, f"max_unpool{k}d")(x, indices, kernel, stride, padding,
                                              output_size=size)
    if k == 3:
        return torch.ops.aten.max_unpool3d(x, indices, size, [1, 1, 1], [0, 0, 0])
    if k == 2:
        return torch.ops.aten.max_unpool2d(x, indices, size)
    # 1-D is torch's 2-D on rows of height 1 (as F.max_unpool1d does it)
    return torch.ops.aten.max_unpool2d(x.unsqueeze(-2), indices.unsqueeze(-2),
                                       [1, *size]).squeeze(-2)


def pool_cases(golden: Golden) -> None:
    # Every rank, layout and dtype: overlapping windows, padding, ceil_mode.
    for k in RANKS:
        for last in (False, True):
            for dtype in DTYPES:
                name = f"pool{k}d/sweep/{dtype}/{'last' if last else 'first'}"
                x = sweep_values(seed(name), (2, 3, *SPATIAL[k]), dtype)
                golden.pool(name, x, k, (3, 2, 1, 1, True), dtype=dtype, last=last)

    # Geometries, float32 (PyTorch's own tests' kinds), the layouts alternating.
    geometries = {
        1: [((2, 3, 16), (2, None, 0, 1, False)), ((2, 3, 17), (3, 2, 1, 1, False)),
            ((2, 2, 15), (3, 1, 1, 1, False)),  # overlapping windows
            ((2, 2, 20), (3, 2, 1, 3, True)),  # dilation
            ((1, 1, 5), (2, 2, 1, 1, True)),  # ceil_mode drops a window starting in padding
            ((1, 1, 3), (5, 1, 2, 1, False)),  # window larger than the input
            ((3, 12), ((4,), [3], (2,), (1,), True)),  # unbatched, 1-tuples and lists
            ((3, 12), (1, 2, 0, 1, True))],
        2: [((2, 3, 8, 8), (2, None, 0, 1, False)), ((2, 3, 9, 7), (3, 2, 1, 1, False)),
            ((1, 2, 10, 11), ((2, 3), (1, 2), (1, 0), 1, False)),
            ((1, 2, 10, 11), ((3, 2), (2, 3), (0, 1), (2, 1), True)),
            ((2, 2, 9, 9), (3, 1, 1, 1, False)),  # overlapping windows
            ((2, 2, 12, 10), (3, 2, 1, 2, False)),  # dilation
            ((1, 2, 12, 10), ((3, 2), 2, (1, 1), (2, 3), True)),
            ((1, 1, 5, 5), (2, 2, 1, 1, True)),  # ceil_mode drops a window in padding
            ((1, 1, 7, 6), ((4, 5), (3, 2), (2, 2), 1, True)),
            ((1, 1, 6, 6), (1, 2, 0, 1, True)),
            ((1, 1, 3, 3), (5, 1, 2, 1, False)),  # window larger than the input
            ((3, 9, 8), (2, None, 0, 1, False)),  # unbatched (C, H, W)
            ((4, 5, 5), ((1, 1), [2, 1], 0, [1, 1], False))],  # lists, length-1 windows
        3: [((2, 3, 4, 6, 6), (2, None, 0, 1, False)), ((2, 2, 5, 7, 6), (3, 2, 1, 1, False)),
            ((1, 2, 6, 7, 8), ((1, 2, 3), (1, 2, 2), (0, 1, 1), 1, False)),
            ((1, 2, 7, 8, 9), ((2, 3, 2), (2, 1, 3), (1, 1, 0), (2, 1, 2), True)),
            ((1, 2, 5, 5, 5), (3, 1, 1, 1, False)),  # overlapping windows
            ((1, 1, 3, 5, 5), (2, 2, 1, 1, True)),
            ((2, 4, 5, 6), (2, None, 0, 1, False)),  # unbatched (C, D, H, W)
            ((2, 4, 5, 6), ((3,), [2], 1, 1, True))],
    }
    for k, cases in geometries.items():
        for i, (shape, window) in enumerate(cases):
            name = f"pool{k}d/geometry/{i}"
            x = seed(name).standard_normal(shape).astype(np.float32)
            golden.pool(name, x, k, window, dtype="float32", last=i % 2 == 1)

    # Ties (the first maximum in scan order wins), NaN (the last NaN wins), infinities.
    for k in RANKS:
        shape = (2, 3, *{1: (15,), 2: (11, 10), 3: (5, 6, 5)}[k])
        for i, window in enumerate([(2, 2, 0, 1, False), (3, 1, 1, 1, False),
                                    (3, 2, 1, 2, True)]):
            name = f"pool{k}d/ties/{i}"
            x = seed(name).integers(0, 3, shape).astype(np.float32)
            golden.pool(name, x, k, window, dtype="float32", last=i == 1)
        for i, window in enumerate([(3, 1, 1, 1, False), (2, 2, 1, 2, True)]):
            name = f"pool{k}d/nan/{i}"
            rng = seed(name)
            x = rng.standard_normal(shape).astype(np.float32)
            x[rng.random(shape) < 0.15] = np.nan
            x[rng.random(shape) < 0.1] = -np.inf
            golden.pool(name, x, k, window, dtype="float32", last=i == 1)
        # A constant input: every tap ties, the first in-bounds one wins.
        golden.pool(f"pool{k}d/constant", np.ones((1, 1, *(4,) * k), np.float32), k,
                    (3, 2, 1), dtype="float32")
    rows = [[np.nan, 1, 2, 3], [1, 2, 3, np.nan], [4, np.nan, 9, 1],
            [np.nan, 5, np.nan, 2],  # several NaNs: torch keeps the last one
            [np.nan] * 4, [-np.inf, np.nan, np.inf, 1], [-np.inf, -np.inf, np.inf, np.inf],
            [1, 5, 5, 2]]  # a tie: the first wins
    for k in RANKS:
        x = np.array(rows, np.float32).reshape(1, len(rows), *(1,) * (k - 1), 4)
        golden.pool(f"pool{k}d/nan_rows", x, k, ((1,) * (k - 1) + (4,),), dtype="float32")
    golden.pool("pool2d/tie_row_major", np.array([[[[1, 5], [5, 2]]]], np.float32), 2, (2,),
                dtype="float32")

    # Padding is never selected, whatever the input (-inf, huge negative, ties).
    for k in RANKS:
        for fill in (-np.inf, -1e30, -3.0):
            name = f"pool{k}d/padding/{fill}"
            x = np.full((1, 2, *{1: (6,), 2: (5, 6), 3: (3, 5, 4)}[k]), fill, np.float32)
            golden.pool(name, x, k, (3, 2, 1, 1, True), dtype="float32", last=fill == -3.0)

    # Windows of padding only: -inf, and an index past the row (torch's quirk).
    only_padding = [
        (2, np.arange(6, dtype=np.float32).reshape(1, 1, 3, 2),
         ((1, 2), (1, 2), (0, 1), (1, 3), True)),  # ceil_mode and dilation
        (2, np.arange(3, dtype=np.float32).reshape(1, 1, 3, 1),
         ((1, 3), (1, 5), (0, 1), (1, 2), True)),  # indices past the plane
        (1, seed("p1").standard_normal((1, 2, 2)).astype(np.float32), (2, 1, 1, 3, False)),
        (2, seed("p2").standard_normal((1, 2, 2, 2)).astype(np.float32),
         ((1, 2), 1, (0, 1), (1, 3), False)),  # without ceil_mode
        (3, seed("p3").standard_normal((1, 1, 2, 2, 2)).astype(np.float32),
         ((1, 1, 2), 1, (0, 0, 1), (1, 1, 3), False)),
    ]
    for i, (k, x, window) in enumerate(only_padding):
        golden.pool(f"pool{k}d/only_padding/{i}", x, k, window, dtype="float32",
                    last=i == 3)

    # Subnormals compare as numbers (XLA's CPU code reads them as zero).
    for dtype in FLOATS:
        tiny = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149,
                "float64": 2.0**-1074}[dtype]
        x = np.tile([0.0, tiny, -tiny, 0.0, tiny, 2 * tiny], 16).reshape(1, 1, 96)
        x = x.astype(np.float32 if dtype == "bfloat16" else dtype)
        golden.pool(f"pool1d/subnormal/{dtype}", x, 1, (2,), dtype=dtype)

    # The CPU pool's fast path (windows of 2, stride 2, channels first): rows of several
    # 16-byte blocks and a part, an odd width (a window half outside under ceil_mode).
    for dtype in ("float32", "float64", "float16", "bfloat16", "uint8", "int16"):
        block = 16 // np.dtype(np.float32 if dtype == "bfloat16" else dtype).itemsize
        for k in RANKS:
            for ceil in (False, True):
                name = f"pool{k}d/fast_path/{dtype}/{ceil}"
                rng = seed(name)
                shape = (1, 3, *(3,) * (k - 1), 2 * (3 * block + 1) + 1)
                if dtype in FLOATS:
                    x = mixed_floats(rng, shape, dtype)
                else:
                    x = rng.integers(-3, 4, shape)
                    x[rng.random(shape) < 0.05] = np.iinfo(dtype).min
                    x = x.astype(dtype)
                golden.pool(name, x, k, (2, 2, 0, 1, ceil), dtype=dtype, grad=False)


def pool_indices(k: int, x: np.ndarray, window: tuple) -> tuple[np.ndarray, np.ndarray]:
    """torch's pool of float x: (values, int64 indices), the unpool's inputs."""
    values, indices = getattr(F, f"max_pool{k}d")(torch.from_numpy(x), *window,
                                                  return_indices=True)
    return values.numpy(), indices.numpy()


def unpool_cases(golden: Golden) -> None:
    # Every rank, layout and dtype, indices with duplicates (the largest input position
    # wins: torch's result on one thread); the window hint on half of them, the layouts
    # alternating.
    out_size = {1: (9,), 2: (6, 7), 3: (3, 4, 5)}
    in_size = {1: (5,), 2: (3, 4), 3: (2, 3, 2)}
    for k in RANKS:
        for last in (False, True):
            for i, dtype in enumerate(DTYPES):
                name = f"unpool{k}d/sweep/{dtype}/{'last' if last else 'first'}"
                rng = seed(name)
                shape = (2, 3, *in_size[k])
                x = sweep_values(rng, shape, dtype, for_unpool=True)
                idx = rng.integers(0, int(np.prod(out_size[k])), shape)
                golden.unpool(name, x, idx, k, dtype=dtype, output_size=out_size[k],
                              hint=False, last=last)

    # Indices of torch's own pools: disjoint windows (unique indices), overlapping ones
    # (duplicates), default and explicit output sizes, with and without our window hint.
    windows = {  # (kernel, stride, padding, output_size) as torch takes them
        1: [(2, None, 0, None), (3, 2, 1, (11,)), (4, 3, 2, (11,)), (1, 1, 0, None),
            (3, 3, 0, (11,))],
        2: [(2, None, 0, (9, 10)), (3, 2, 1, (9, 10)), ((2, 3), (2, 3), 0, (9, 10)),
            (2, 2, 0, None), ((2, 3), (2, 3), (1, 0), (9, 10))],
        3: [(2, None, 0, (5, 6, 7)), (3, 2, 1, (5, 6, 7)), ((1, 2, 3), (1, 2, 2), (0, 1, 1), None),
            ((2, 3, 2), (2, 3, 1), 0, (5, 6, 7))],
    }
    spatial = {1: (11,), 2: (9, 10), 3: (5, 6, 7)}
    for k, cases in windows.items():
        for i, (kernel, stride, padding, size) in enumerate(cases):
            for dtype in ("float32", "float64")[:2 if i < 2 else 1]:
                name = f"unpool{k}d/of_pool/{i}/{dtype}"
                x = seed(name).standard_normal((2, 3, *spatial[k]))
                values, idx = pool_indices(k, x, (kernel, stride, padding))
                golden.unpool(name, values.astype(dtype), idx, k, dtype=dtype, kernel=kernel,
                              stride=stride, padding=padding, output_size=size,
                              hint=(i + (dtype == "float64")) % 2 == 0,
                              last=(i + (dtype == "float64")) % 3 == 1)
    # Unbatched.
    for k in RANKS:
        name = f"unpool{k}d/unbatched"
        x = seed(name).standard_normal((3, *spatial[k])).astype(np.float32)
        values, idx = pool_indices(k, x, (2,))
        golden.unpool(name, values, idx, k, dtype="float32", kernel=2, output_size=spatial[k],
                      last=k == 2)

    # Many duplicates: 200 values per plane at 3 positions; a window of 1.
    for k in RANKS:
        name = f"unpool{k}d/duplicates"
        rng = seed(name)
        x = rng.standard_normal((2, 3, *{1: (200,), 2: (10, 20), 3: (5, 5, 8)}[k]))
        golden.unpool(name, x.astype(np.float32), rng.integers(0, 3, x.shape), k,
                      dtype="float32", kernel=1, last=k == 3)

    # output_size 0 (torch allows it): an empty result, whatever the indices.
    for k in RANKS:
        x = np.ones((1, 1, *(1,) * k), np.float32)
        golden.unpool(f"unpool{k}d/zero_size", x, np.full(x.shape, 5), k, dtype="float32",
                      kernel=1, stride=2, output_size=(0,) + (2,) * (k - 1), backward=False)


def pack(arrays: dict[str, np.ndarray]) -> tuple[dict, dict[str, np.ndarray]]:
    """One flat buffer per dtype (a zip entry per array would cost more in headers than the
    data) and where each array lies in it: {key: [buffer, offset, shape]}."""
    where, parts = {}, {}
    for key, a in arrays.items():
        buffer = a.dtype.str
        offset = sum(p.size for p in parts.setdefault(buffer, []))
        parts[buffer].append(a.reshape(-1))
        where[key] = [buffer, offset, list(a.shape)]
    return where, {b: np.concatenate(p) for b, p in parts.items()}


def build() -> dict[str, np.ndarray]:
    """The file's contents: "cases.json" and the buffers."""
    if torch.__version__.split("+")[0] != TORCH_VERSION:
        raise SystemExit(f"make_golden.py: needs torch {TORCH_VERSION}, this is "
                         f"{torch.__version__}")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # duplicates and the backward's sums follow the input order
    try:
        golden = Golden()
        pool_cases(golden)
        unpool_cases(golden)
    finally:
        torch.set_num_threads(threads)
    where, buffers = pack(golden.arrays)
    meta = {"torch": torch.__version__, "cases": golden.cases, "arrays": where}
    return {"cases.json": np.array(json.dumps(meta)), **buffers}


def main(argv: list[str]) -> int:
    arrays = build()
    if argv == ["--check"]:
        with np.load(OUT) as stored:
            differ = sorted(set(stored.files) ^ set(arrays))
            for key in set(stored.files) & set(arrays):
                a, b = stored[key], arrays[key]
                if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                    differ.append(key)
        print("\n".join(differ) or f"{OUT.name}: every array as torch gives it today")
        return 1 if differ else 0
    if argv:
        raise SystemExit(__doc__)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    OUT.write_bytes(buffer.getvalue())
    print(f"{OUT}: {OUT.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
