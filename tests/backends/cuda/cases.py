"""Random cases of the three ops for the CUDA tests (the host emulation's and the GPU's),
and jax_unpool's results for them: on the CPU (its kernels), or on a given device."""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np
import numpy_oracle as oracle

import jax_unpool as ju
from jax_unpool import _geometry
from jax_unpool._compat import enable_x64

FORMATS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}
LAYOUTS = [(k, last) for k in (1, 2, 3) for last in (False, True)]
FLOAT8 = [d for d in ("float8_e5m2", "float8_e4m3", "float8_e3m4", "float8_e4m3fn",
                      "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz",
                      "float8_e8m0fnu") if hasattr(jnp, d)]
# Every width the unpool kernels move: 1 (with its workspace), 2 (in place for even
# planes, else in the workspace), 4 and 8 (in place).
UNPOOL_DTYPES = ["bool", "int8", "uint8", "float8_e4m3fn", "float16", "bfloat16", "int16",
                 "float32", "int32", "uint32", "float64", "int64", "uint64"]
POOL_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
               "uint64", "float16", "bfloat16", "float32", "float64", *FLOAT8]
KINDS = ["pool", "in_box", "anywhere", "no_hint"]


def seeded(*key) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def layout(n, c, spatial, last: bool) -> tuple[int, ...]:
    """(n, c, *spatial) or (n, *spatial, c); without n when n is None (unbatched)."""
    lead = () if n is None else (n,)
    return (*lead, *spatial, c) if last else (*lead, c, *spatial)


def random_values(rng, shape, dtype: str) -> np.ndarray:
    """Any bit pattern (NaN payloads, -0.0: the unpool ops move bits); bools 0 or 1."""
    if dtype == "bool":
        return rng.random(shape) > 0.5
    dt = np.dtype(jnp.dtype(dtype))
    raw = rng.integers(0, 256, size=(*shape, dt.itemsize), dtype=np.uint8)
    return raw.view(dt).reshape(shape)


def clipped_boxes(in_spatial, out_spatial, window):
    """Per axis, for each input coordinate q, its box [lo, hi) clipped to the output."""
    extent, stride, padding = window
    boxes = []
    for a in range(len(in_spatial)):
        start = np.arange(in_spatial[a]) * stride[a] - padding[a]
        boxes.append((np.maximum(start, 0), np.minimum(start + extent[a], out_spatial[a])))
    return boxes


def indices_in_boxes(rng, lead, in_spatial, out_spatial, window):
    """For every input position of every plane, a random output position in its box;
    shape (*lead, *in_spatial) with lead = (n, c)."""
    coords = []
    for a, (lo, hi) in enumerate(clipped_boxes(in_spatial, out_spatial, window)):
        shape = [1] * len(in_spatial)
        shape[a] = in_spatial[a]
        lo, hi = lo.reshape(shape), hi.reshape(shape)
        u = rng.random((*lead, *in_spatial))
        coords.append(lo + np.floor(u * (hi - lo)).astype(np.int64))
    return np.ravel_multi_index(coords, out_spatial)


def to_layout(a: np.ndarray, k: int, last: bool) -> np.ndarray:
    """(n, c, *spatial) -> the layout's order."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if last else a


def random_window(rng, k: int):
    extent = rng.integers(1, 5, k)
    stride = rng.integers(1, 4, k)
    padding = np.array([rng.integers(0, e) for e in extent])
    return tuple(map(tuple, (extent.tolist(), stride.tolist(), padding.tolist())))


def forward_case(rng, k: int, last: bool, kind: str, dtype: str, index_dtype):
    """(x, indices, output spatial sizes, window hint) of one random forward call."""
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    while True:
        if kind == "pool":  # a CPU pool's indices, unpooled back into its input
            (kernel, stride, padding, dilation), ceil_mode, in_spatial, sizes = _draw_pool(
                rng, k, 9)
            if min(sizes) < 1:
                continue
            x = rng.integers(-2, 3, (n, c, *in_spatial)).astype(np.float32)  # ties
            pool = getattr(ju, f"max_pool{k}d_with_indices")
            _, idx = pool(x, tuple(kernel.tolist()), tuple(stride.tolist()),
                          tuple(padding.tolist()), tuple(dilation.tolist()), ceil_mode)
            idx = np.asarray(idx)
            if idx.max() >= np.prod(in_spatial):  # PyTorch's index past a padding-only window
                continue
            extent = dilation * (kernel - 1) + 1
            window = (tuple(extent.tolist()), tuple(stride.tolist()), tuple(padding.tolist()))
            out_spatial, spatial = in_spatial, tuple(sizes)
        else:
            spatial = tuple(rng.integers(1, 6, k).tolist())
            if kind == "no_hint" and rng.random() < 0.7:  # sizes that give the lowering a window
                scale = tuple(rng.integers(1, 4, k).tolist())
                out_spatial = tuple(s * m for s, m in zip(spatial, scale))
                window = (scale, scale, (0,) * k)
            else:
                window = random_window(rng, k)
                # every box keeps a position in the output
                out_spatial = tuple(int(max(1, (s - 1) * st - p + 1) + rng.integers(0, e + st))
                                    for s, (e, st, p) in zip(spatial, zip(*window)))
            if kind == "anywhere" or (kind == "no_hint" and rng.random() < 0.5):
                plane = int(np.prod(out_spatial))
                pool_of_positions = rng.integers(0, plane, max(1, plane // 3))
                idx = rng.choice(pool_of_positions, (n, c, *spatial))  # many duplicates
            else:
                idx = indices_in_boxes(rng, (n, c), spatial, out_spatial, window)
            if kind == "no_hint":  # the window the CUDA lowering passes for no hint, or None
                window = _geometry.unpool_window(spatial, out_spatial, None)
        values = random_values(rng, (n, c, *spatial), dtype)
        return (to_layout(values, k, last), to_layout(idx.astype(index_dtype), k, last),
                out_spatial, window)


def _on(device):
    """Where the jax_unpool calls of a case run: `device`, or the CPU (its kernels)."""
    return jax.default_device(device or jax.devices("cpu")[0])


def cpu_unpool(x, idx, out_spatial, k: int, last: bool, device=None) -> np.ndarray:
    with enable_x64(), _on(device):
        unpool = getattr(ju, f"max_unpool{k}d")
        return np.asarray(unpool(jnp.asarray(x), jnp.asarray(idx), output_size=out_spatial,
                                 data_format=FORMATS[k][last]))


def out_shape_of(x: np.ndarray, out_spatial, k: int, last: bool) -> tuple[int, ...]:
    s = x.ndim - k - (1 if last else 0)
    return (*x.shape[:s], *out_spatial, *x.shape[s + k:])


def pool_values(rng, shape, dtype: str) -> np.ndarray:
    """Values full of ties and the edge cases of each dtype's order."""
    dt = np.dtype(jnp.dtype(dtype))
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype in FLOAT8:  # every code, NaNs and both zeros included
        return rng.integers(0, 256, shape, dtype=np.uint8).view(dt)
    if np.issubdtype(dt, np.integer):
        info = np.iinfo(dt)
        specials = np.array([info.min, info.max, 0, 1, info.min + 1], dtype=dt)
    else:
        info = jnp.finfo(dt)
        tiny = float(info.smallest_subnormal) if hasattr(info, "smallest_subnormal") else 0.0
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, tiny, -tiny,
                             float(info.max), float(info.min)]).astype(dt)
    out = rng.choice(specials, shape)
    small = rng.integers(-3, 4, shape).astype(dt)
    return np.where(rng.random(shape) < 0.5, out, small)


def pool_geometry(rng, k: int):
    """A random window (kernel, stride, padding, dilation as tuples), ceil_mode and input
    size that pool to at least one output per axis."""
    while True:
        arrays, ceil_mode, in_spatial, sizes = _draw_pool(rng, k, 8)
        if min(sizes) >= 1:
            window = tuple(tuple(v.tolist()) for v in arrays)
            return window, ceil_mode, in_spatial


def _draw_pool(rng, k: int, size_limit: int):
    """A random window (kernel, stride, padding, dilation: arrays of k), ceil_mode, an input
    size below `size_limit` per axis, and the output size per axis (maybe not positive)."""
    kernel = rng.integers(1, 4, k)
    stride = rng.integers(1, 4, k)
    padding = np.array([rng.integers(0, kk // 2 + 1) for kk in kernel])
    dilation = rng.integers(1, 3, k)
    ceil_mode = bool(rng.random() < 0.5)
    in_spatial = tuple(rng.integers(1, size_limit, k).tolist())
    sizes = [oracle.pool_output_size(*v, ceil_mode)
             for v in zip(in_spatial, kernel, stride, padding, dilation)]
    return (kernel, stride, padding, dilation), ceil_mode, in_spatial, sizes


def backward_case(rng, k: int, last: bool, dtype: str, index_dtype):
    """(grad_output, indices, output spatial sizes) of one random backward call."""
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    spatial = tuple(rng.integers(1, 5, k).tolist())
    out_spatial = tuple(rng.integers(1, 9, k).tolist())
    grad = to_layout(random_values(rng, (n, c, *out_spatial), dtype), k, last)
    idx = rng.integers(0, np.prod(out_spatial), (n, c, *spatial)).astype(index_dtype)
    return grad, to_layout(idx, k, last), out_spatial


def cpu_backward(grad, idx, out_spatial, k: int, last: bool, device=None) -> np.ndarray:
    with enable_x64(), _on(device):
        backward = getattr(ju, f"max_unpool{k}d_backward")
        return np.asarray(backward(jnp.asarray(grad), jnp.zeros(idx.shape, grad.dtype),
                                   jnp.asarray(idx), out_spatial, data_format=FORMATS[k][last]))


def cpu_pool(x, window, ceil_mode: bool, k: int, last: bool, index_dtype, device=None):
    with enable_x64(), _on(device):
        pool = getattr(ju, f"max_pool{k}d_with_indices")
        values, indices = pool(jnp.asarray(x), *window, ceil_mode, data_format=FORMATS[k][last],
                               index_dtype=index_dtype)
        return np.asarray(values), np.asarray(indices)
