"""Section ``step``: one jitted SGD step of a SegNet-style model in plain JAX.

conv -> pool -> conv -> pool -> conv -> unpool -> conv -> unpool -> conv -> 1x1 conv, the
model of ``python -m jax_unpool demo`` (and of the notebook), in NHWC or NCHW. It runs
once with jax_unpool's functions and once with ``jax_unpool.reference`` (XLA's
scatter/gather, and XLA's scatter-add as the pools' gradient): same model, same data,
same results. The share of the step spent pooling and unpooling is timed separately:
the same four ops, forward and gradient, at the model's shapes, without the convolutions.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np

import jax_unpool as ju
from jax_unpool.cli.bench import measure, table
from jax_unpool.cli.bench.measure import KERNEL, Settings
from jax_unpool.cli.demo import he_weights

NAME = "step"
TARGETS: dict[str, tuple[str, float]] = {}
# The model's (batch, image size, width); the quick run's is tiny.
STEP = (8, 64, 32)
QUICK_STEP = (2, 16, 4)


def _conv(x: jax.Array, w: jax.Array, fmt: str) -> jax.Array:
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                        dimension_numbers=(fmt, "HWIO", fmt))


def init(width: int, in_ch: int = 3, classes: int = 4, seed: int = 0) -> list[jax.Array]:
    """HWIO weights of the six convolutions (the last is the 1x1 classifier), He-scaled."""
    shapes = [(3, 3, in_ch, width), (3, 3, width, 2 * width), (3, 3, 2 * width, 2 * width),
              (3, 3, 2 * width, width), (3, 3, width, width), (1, 1, width, classes)]
    return he_weights(jax.random.key(seed), shapes)


def apply(ops: ModuleType, fmt: str, ws: list[jax.Array], x: jax.Array) -> jax.Array:
    relu = jax.nn.relu
    h = relu(_conv(x, ws[0], fmt))
    h, where1 = ops.max_pool2d_with_indices(h, KERNEL, data_format=fmt)
    h = relu(_conv(h, ws[1], fmt))
    h, where2 = ops.max_pool2d_with_indices(h, KERNEL, data_format=fmt)
    h = relu(_conv(h, ws[2], fmt))
    h = ops.max_unpool2d(h, where2, KERNEL, data_format=fmt)
    h = relu(_conv(h, ws[3], fmt))
    h = ops.max_unpool2d(h, where1, KERNEL, data_format=fmt)
    h = relu(_conv(h, ws[4], fmt))
    return _conv(h, ws[5], fmt)


def train_step(ops: ModuleType, fmt: str) -> Callable:
    """jit((weights, images, targets) -> (new weights, loss)): MSE loss, SGD."""
    def loss(ws, x, target):
        return jnp.mean((apply(ops, fmt, ws, x) - target) ** 2)

    @jax.jit
    def step(ws, x, target):
        value, grads = jax.value_and_grad(loss)(ws, x, target)
        return [w - 1e-3 * g for w, g in zip(ws, grads)], value

    return step


def pooling_only(ops: ModuleType, fmt: str) -> Callable:
    """jit of the model's two pools and two unpools, forward and gradient, on inputs of
    the model's shapes: the pooling part of a step, without the convolutions."""
    def loss(a1, a2, b2, b1):
        y1, i1 = ops.max_pool2d_with_indices(a1, KERNEL, data_format=fmt)
        y2, i2 = ops.max_pool2d_with_indices(a2, KERNEL, data_format=fmt)
        u2 = ops.max_unpool2d(b2, i2, KERNEL, data_format=fmt)
        u1 = ops.max_unpool2d(b1, i1, KERNEL, data_format=fmt)
        return y1.sum() + y2.sum() + u2.sum() + u1.sum()

    return jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3)))


def shapes(fmt: str, n: int, size: int, width: int) -> dict[str, tuple[int, ...]]:
    """Inputs of the step and of `pooling_only`, in layout `fmt`."""
    def s(hw, c):
        return (n, hw, hw, c) if fmt == "NHWC" else (n, c, hw, hw)

    return {"x": s(size, 3), "target": s(size, 4), "a1": s(size, width),
            "a2": s(size // 2, 2 * width), "b2": s(size // 4, 2 * width),
            "b1": s(size // 2, width)}


def calls(fmt: str, n: int, size: int, width: int, seed: int = 0) -> dict[str, Callable]:
    """Zero-argument calls for the benchmark's timer: the step and the pooling part, with
    jax_unpool ("ours") and with the XLA reference ("xla")."""
    rng = np.random.default_rng(seed)
    sh = shapes(fmt, n, size, width)
    data = {k: jnp.asarray(rng.standard_normal(v, dtype=np.float32)) for k, v in sh.items()}
    ws = init(width)
    out = {}
    for name, ops in (("ours", ju), ("xla", ju.reference)):
        step, pools = train_step(ops, fmt), pooling_only(ops, fmt)
        out[f"step_{name}"] = (lambda step=step: jax.block_until_ready(
            step(ws, data["x"], data["target"])))
        out[f"pool_{name}"] = (lambda pools=pools: jax.block_until_ready(
            pools(data["a1"], data["a2"], data["b2"], data["b1"])))
    return out


def rows(settings: Settings) -> list[dict]:
    """The step and its pooling part, jax_unpool against the XLA reference, per layout
    (--quick: NHWC, Flax's layout, alone)."""
    n, size, width = QUICK_STEP if settings.quick else STEP
    out = []
    for fmt in ("NHWC",) if settings.quick else ("NHWC", "NCHW"):
        t = measure.times(calls(fmt, n, size, width), settings.reps, settings.warmup)
        common = {"section": NAME, "layout": fmt, "batch": n, "image": size, "width": width}
        out += [{**common, "impl": impl, "step_ms": t[f"step_{impl}"],
                 "pooling_ms": t[f"pool_{impl}"],
                 "pooling_share": t[f"pool_{impl}"] / t[f"step_{impl}"]}
                for impl in ("ours", "xla")]
    return out


def targets(rows: list[dict]) -> dict[str, float | None]:
    return {}


def report(rows: list[dict], judged: bool) -> list[str]:
    head = (f"{'layout':<8}{'batch x image x width':<22}{'impl':<6}{'step ms':>9}"
            f"{'pooling ms':>12}{'share':>7}")
    lines = [("SegNet-style training step (jitted; pooling = its 2 pools + 2 unpools, "
              "forward and gradient, timed alone)"), head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r['layout']:<8}{table.name([r['batch'], r['image'], r['width']]):<22}"
                     f"{r['impl']:<6}{table.ms(r['step_ms']):>9}{table.ms(r['pooling_ms']):>12}"
                     f"{table.ratio(r['pooling_share'], judged):>7}")
    return lines
