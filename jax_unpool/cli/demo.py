"""A SegNet-style segmentation model trained on generated shapes, with plain JAX.

The encoder max-pools with indices; the decoder max-unpools with them (SegNet's idea:
the decoder puts features back where the encoder found its maxima). It runs on the base
install (jax, numpy, jax_unpool) and uses well-kept libraries when they are installed
(``pip install '.[demo]'``): optax's Adam (else the same update written out here) and a
tqdm or rich progress bar (else a line per tenth of the run). The picture is a PNG drawn
and written with numpy and the standard library (:mod:`jax_unpool.cli.picture`). The
notebook (notebooks/segnet_unpool.ipynb) builds the same
model with Flax NNX layers.

The task: each image holds a few discs and triangles, brighter or darker than a noisy,
shaded background; every pixel is labelled background (0), disc (1) or triangle (2).
A pixel threshold cannot solve it, because shapes can be darker or brighter than the
background and discs and triangles share intensities: the model must use shape.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jax_unpool import max_pool2d_with_indices, max_unpool2d
from jax_unpool.cli import options, picture
from jax_unpool.cli.picture import CLASSES

Params = list[dict[str, jax.Array]]

# ----------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------


def generate(size: int, seed: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Images ``(size, size, 1)`` float32 and their masks ``(size, size)`` int32, one
    after another, without end: training draws as many as it needs, holding one batch.

    Shapes are placed one after another; a later shape covers an earlier one.
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32)
    while True:
        # Shaded background: a random linear ramp plus pixel noise.
        gy, gx = rng.uniform(-0.5, 0.5, 2) / size
        image = 0.5 + gy * (yy - size / 2) + gx * (xx - size / 2)
        mask = np.zeros((size, size), np.int32)
        for _ in range(rng.integers(1, 4)):
            radius = rng.uniform(0.12, 0.25) * size
            cy, cx = rng.uniform(radius, size - radius, 2)
            if rng.random() < 0.5:
                inside = (yy - cy) ** 2 + (xx - cx) ** 2 <= radius ** 2
                label = 1
            else:
                # An upward triangle of height 2 * radius, base 2.4 * radius.
                depth = (yy - (cy - radius)) / (2 * radius)
                inside = (depth >= 0) & (depth <= 1) & (np.abs(xx - cx) <= 1.2 * radius * depth)
                label = 2
            image[inside] = 0.5 + rng.choice([-1.0, 1.0]) * rng.uniform(0.2, 0.4)
            mask[inside] = label
        noisy = image + rng.normal(0.0, 0.06, image.shape)
        yield noisy.astype(np.float32)[..., None], mask


def make_dataset(count: int, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``count`` images ``(count, size, size, 1)`` and masks ``(count, size,
    size)`` of `generate`."""
    images, masks = zip(*itertools.islice(generate(size, seed), count))
    return np.stack(images), np.stack(masks)


# ----------------------------------------------------------------------------------------
# Model: conv -> pool -> conv -> pool -> conv -> unpool -> conv -> unpool -> conv -> 1x1
# ----------------------------------------------------------------------------------------

def he_weights(key: jax.Array, shapes: list[tuple[int, int, int, int]]) -> list[jax.Array]:
    """He-initialised convolution weights of the given HWIO shapes, from one draw: XLA
    compiles each jax.random.normal of a new shape on its own, which took 18 of the 21 s
    of a short demo on 2 cores."""
    sizes = [int(np.prod(s)) for s in shapes]
    draws = np.split(np.asarray(jax.random.normal(key, (sum(sizes),))), np.cumsum(sizes)[:-1])
    return [jnp.asarray(d.reshape(s) * np.float32(np.sqrt(2.0 / (s[0] * s[1] * s[2]))))
            for d, s in zip(draws, shapes)]


def init_params(key: jax.Array, width: int = 24, classes: int = len(CLASSES)) -> Params:
    """He-initialised 3x3 convolutions (HWIO) and a 1x1 classifier."""
    shapes = [(3, 3, 1, width), (3, 3, width, 2 * width), (3, 3, 2 * width, 2 * width),
              (3, 3, 2 * width, width), (3, 3, width, width), (1, 1, width, classes)]
    return [{"w": w, "b": jnp.zeros((w.shape[-1],))} for w in he_weights(key, shapes)]


def _conv(x: jax.Array, layer: dict[str, jax.Array]) -> jax.Array:
    y = jax.lax.conv_general_dilated(x, layer["w"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y + layer["b"]


def apply(params: Params, images: jax.Array) -> jax.Array:
    """Logits ``(N, H, W, classes)`` for images ``(N, H, W, 1)`` (H and W divisible by 4)."""
    enc1, enc2, mid, dec2, dec1, head = params
    h = jax.nn.relu(_conv(images, enc1))
    # Window offsets: each argmax as its position in its 2x2 window, one byte (INDEX_FORMAT).
    h, where1 = max_pool2d_with_indices(h, 2, data_format="NHWC", index_format=INDEX_FORMAT)
    h = jax.nn.relu(_conv(h, enc2))
    h, where2 = max_pool2d_with_indices(h, 2, data_format="NHWC", index_format=INDEX_FORMAT)
    h = jax.nn.relu(_conv(h, mid))
    h = max_unpool2d(h, where2)  # the window and output size come with the offsets
    h = jax.nn.relu(_conv(h, dec2))
    h = max_unpool2d(h, where1)
    h = jax.nn.relu(_conv(h, dec1))
    return _conv(h, head)


INDEX_FORMAT = "window"


def index_bytes(size: int, batch: int, width: int) -> dict[str, int]:
    """The bytes of the indices one training step keeps from its pools to its unpools and
    its backward pass: as window offsets (one byte each) and as int32 indices."""
    count = batch * width * ((size // 2) ** 2 + 2 * (size // 4) ** 2)  # width, 2 * width
    return {"window": count, "int32": 4 * count}


def loss_fn(params: Params, images: jax.Array, masks: jax.Array) -> jax.Array:
    """Mean per-pixel softmax cross-entropy."""
    logp = jax.nn.log_softmax(apply(params, images))
    return -jnp.take_along_axis(logp, masks[..., None], axis=-1).mean()


def mean_iou(predicted: np.ndarray, masks: np.ndarray, classes: int = len(CLASSES)) -> float:
    """Intersection over union per class over the whole set, averaged over classes."""
    ious = []
    for c in range(classes):
        union = np.sum((predicted == c) | (masks == c))
        if union:
            ious.append(np.sum((predicted == c) & (masks == c)) / union)
    return float(np.mean(ious))


# ----------------------------------------------------------------------------------------
# Training: Adam with a cosine-decayed learning rate
# ----------------------------------------------------------------------------------------

class Optimizer(NamedTuple):
    """optax's GradientTransformation interface: init(params), update(grads, state, params)."""

    init: Callable[[Params], Any]
    update: Callable[[Any, Any, Any], tuple[Any, Any]]


def adam(learning_rate: Callable[[jax.Array], jax.Array], b1: float = 0.9, b2: float = 0.999,
         eps: float = 1e-8) -> Optimizer:
    """optax.adam's update, written out for installs without optax."""
    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return zeros, zeros, jnp.zeros((), jnp.int32)

    def update(grads, state, params=None):
        m, v, count = state
        m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
        v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
        t = count + 1
        lr = learning_rate(count)
        updates = jax.tree.map(
            lambda m, v: -lr * (m / (1 - b1 ** t)) / (jnp.sqrt(v / (1 - b2 ** t)) + eps), m, v)
        return updates, (m, v, t)

    return Optimizer(init, update)


def optimizer(lr: float, steps: int) -> tuple[Optimizer, str]:
    """Adam with a cosine decay (large steps first, then settle into a minimum): optax's
    when installed; returns it and its name."""
    def schedule(count):
        return lr * 0.5 * (1.0 + jnp.cos(jnp.pi * count / steps))
    try:
        import optax
    except ImportError:
        return adam(schedule), "Adam (jax_unpool.cli.demo)"
    return optax.adam(schedule), "optax.adam"


def make_train_step(opt: Optimizer) -> Callable:
    @jax.jit
    def train_step(params: Params, opt_state: Any, images: jax.Array, masks: jax.Array
                   ) -> tuple[Params, Any, jax.Array]:
        """One optimiser step; returns the loss before the step."""
        loss, grads = jax.value_and_grad(loss_fn)(params, images, masks)
        updates, opt_state = opt.update(grads, opt_state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
        return params, opt_state, loss

    return train_step


predict = jax.jit(lambda params, images: jnp.argmax(apply(params, images), axis=-1))


def train(steps: int, size: int, batch: int, seed: int, width: int = 24, lr: float = 5e-3,
          progress: Callable[[Iterable[int]], Iterable[int]] | None = None
          ) -> tuple[Params, list[float]]:
    """Train on a fresh generated batch each step; returns the parameters and the losses."""
    params = init_params(jax.random.PRNGKey(seed), width)
    opt, _ = optimizer(lr, steps)
    train_step = make_train_step(opt)
    opt_state = opt.init(params)
    data = generate(size, seed)
    losses = []
    bar = progress(range(steps)) if progress else range(steps)
    for _ in bar:
        images, masks = map(np.stack, zip(*itertools.islice(data, batch)))
        params, opt_state, loss = train_step(params, opt_state, images, masks)
        losses.append(float(loss))
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    return params, losses


def predict_in_batches(params: Params, images: np.ndarray, batch: int) -> np.ndarray:
    """`predict`, `batch` images at a time: the model's memory is a training batch's."""
    return np.concatenate([np.asarray(predict(params, images[i:i + batch]))
                           for i in range(0, len(images), batch)])


# ----------------------------------------------------------------------------------------
# Progress (a library when installed)
# ----------------------------------------------------------------------------------------

def _lines(iterable: Iterable[int], total: int) -> Iterable[int]:
    """Without tqdm or rich: one line per tenth of the run."""
    start = time.perf_counter()
    for i, item in enumerate(iterable, 1):
        yield item
        if i == total or i % max(1, total // 10) == 0:
            print(f"training: step {i}/{total}, {time.perf_counter() - start:.0f} s", flush=True)


def progress_bar(iterable: Iterable[int], total: int) -> Iterable[int]:
    """tqdm's bar (with the loss), else rich's, else a line per tenth of the run."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        pass
    else:
        return tqdm(iterable, total=total, desc="training", mininterval=0.5)
    try:
        from rich.progress import track
    except ImportError:
        return _lines(iterable, total)
    return track(iterable, total=total, description="training")


# ----------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------

# The held-out images' seed is the training seed plus this; both must fit in int64
# (jax.random.PRNGKey takes int64 seeds, numpy's generators non-negative ones).
HELD_OUT_SEED_OFFSET = 1_000_003
MAX_SEED = np.iinfo(np.int64).max - HELD_OUT_SEED_OFFSET
MAX_STEPS = 1_000_000  # days of training on a laptop; the losses are kept in a list
DEFAULT_STEPS = 800
TEST_COUNT = 256
BEATS_TRIVIAL_BY = 0.05
# memory_needed's terms, in bytes: about 1.6 times the peak resident memory measured
# (docs/performance.md, "Measured choices").
MEMORY_BASE = 512 << 20
MEMORY_PER_ACTIVATION = 64  # per image pixel and channel of the first layer in a batch
MEMORY_PER_WEIGHT = 3000  # per width squared: weights, gradients, Adam's moments
MEMORY_PER_TEST_PIXEL = 24  # per held-out pixel: images, masks and their stacking


def memory_needed(size: int, batch: int, width: int, test_count: int = TEST_COUNT) -> int:
    """Bytes a run needs at most, about (measured, with a margin): a training step's
    activations and their gradients, the parameters with Adam's state, the held-out
    images, and what jax itself takes."""
    pixels = size * size
    return (MEMORY_BASE + MEMORY_PER_ACTIVATION * batch * pixels * width
            + MEMORY_PER_WEIGHT * width * width + MEMORY_PER_TEST_PIXEL * test_count * pixels)


def check_options(steps: int, size: int, batch: int, width: int, seed: int = 0,
                  test_count: int = TEST_COUNT) -> None:
    """ValueError for options the model cannot run with, or this machine's memory."""
    n = options.number
    if size < 16 or size % 4:
        raise ValueError(f"demo: size must be a multiple of 4 and at least 16, got {n(size)}")
    if min(steps, batch, width) < 1:
        raise ValueError(f"demo: steps, batch and width must be positive, got {n(steps)}, "
                         f"{n(batch)}, {n(width)}")
    if steps > MAX_STEPS:
        raise ValueError(f"demo: steps must be at most {MAX_STEPS}, got {n(steps)}")
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f"demo: seed must be between 0 and {MAX_SEED}, got {n(seed)}")
    if max(size, batch, width) > options.MAX_SIZE:  # the memory estimate would overflow
        raise ValueError(f"demo: size, batch and width must be at most {options.MAX_SIZE} "
                         f"(the most elements an array holds), got {n(size)}, "
                         f"{n(batch)}, {n(width)}")
    needed, available = memory_needed(size, batch, width, test_count), options.memory_bytes()
    if needed > available:
        raise ValueError(f"demo: size {n(size)}, batch {n(batch)} and width {n(width)} need "
                         f"about {options.gib(needed)} of memory, more than this machine's "
                         f"{options.gib(available)}")


def beats_trivial(model_iou: float, trivial_iou: float) -> bool:
    """Whether the model does better than predicting background everywhere, by more than
    BEATS_TRIVIAL_BY (a model that has learnt nothing predicts background, the most
    frequent class, almost everywhere, and scores about the trivial predictor's IoU)."""
    return model_iou > trivial_iou + BEATS_TRIVIAL_BY


def run(steps: int = DEFAULT_STEPS, size: int = 32, batch: int = 16, seed: int = 0,
        out: str | options.Output = "unpool_demo.png", width: int = 24,
        test_count: int = TEST_COUNT, show: int = 4) -> dict[str, float]:
    """Train, evaluate on a held-out generated set, print the results, write the picture
    to `out` (a path, or an `Output` the command line opened), which is opened, and its
    first bytes written, before training."""
    check_options(steps, size, batch, width, seed, test_count)
    if isinstance(out, str):
        out = options.Output(out, picture.PNG_SIGNATURE)
    start = time.perf_counter()
    print(f"optimiser: {optimizer(5e-3, steps)[1]}")
    kept = index_bytes(size, batch, width)
    print(f"pool indices kept per step: {kept['window'] / 1024:.1f} KiB as window offsets "
          f"(index_format='window'), {kept['int32'] / 1024:.1f} KiB as int32")
    params, losses = train(steps, size, batch, seed, width,
                           progress=lambda it: progress_bar(it, steps))
    # A different seed: the test images were never seen in training.
    test_images, test_masks = make_dataset(test_count, size, seed + HELD_OUT_SEED_OFFSET)
    predicted = predict_in_batches(params, test_images, batch)
    model_iou = mean_iou(predicted, test_masks)
    # The trivial predictor: every pixel is background, the most frequent class.
    trivial_iou = mean_iou(np.zeros_like(test_masks), test_masks)
    tail = losses[-min(20, len(losses)):]
    print(f"loss: first step {losses[0]:.4f}, mean of last {len(tail)} steps "
          f"{np.mean(tail):.4f}")
    print(f"mean IoU on {test_count} held-out images: model {model_iou:.3f}, "
          f"trivial predictor (all background) {trivial_iou:.3f}")
    if not beats_trivial(model_iou, trivial_iou):
        print(f"note: the model does not beat the trivial predictor: it has not learnt the "
              f"shapes yet; train longer (--steps, default {DEFAULT_STEPS})")
    rgb = picture.picture(test_images[:show], test_masks[:show], predicted[:show])
    out.finish(picture.png(rgb)[len(picture.PNG_SIGNATURE):])
    print(f"wrote {out.path} (columns: input, true mask, prediction) in "
          f"{time.perf_counter() - start:.1f} s")
    return {"loss": float(np.mean(tail)), "iou": model_iou, "trivial_iou": trivial_iou}
