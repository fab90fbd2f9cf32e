"""The demo's parts: data, metric, optimiser, picture, that the model learns, and that it
runs without any of the optional libraries it prefers."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from matplotlib import image

from jax_unpool.cli import demo


def test_mean_iou_against_hand_counts():
    masks = np.array([[0, 0, 1, 1], [0, 2, 2, 1]])
    predicted = np.array([[0, 1, 1, 1], [0, 0, 2, 2]])
    # Counted by hand (intersection / union of positions "row column"):
    # class 0: mask {00, 01, 10}, pred {00, 10, 11}: 2 / 4
    # class 1: mask {02, 03, 13}, pred {01, 02, 03}: 2 / 4
    # class 2: mask {11, 12},     pred {12, 13}:     1 / 3
    assert demo.mean_iou(predicted, masks) == pytest.approx((0.5 + 0.5 + 1 / 3) / 3)


def test_mean_iou_skips_a_class_absent_from_both():
    masks = np.array([[0, 1]])
    assert demo.mean_iou(masks, masks) == 1.0


def test_dataset_labels_and_images():
    images, masks = demo.make_dataset(64, 32, seed=3)
    assert images.shape == (64, 32, 32, 1) and images.dtype == np.float32
    assert masks.shape == (64, 32, 32) and set(np.unique(masks)) == {0, 1, 2}
    assert (masks > 0).any(axis=(1, 2)).all()  # every image holds a shape


def test_dataset_is_determined_by_the_seed():
    a, b, c = (demo.make_dataset(4, 16, seed) for seed in (1, 1, 2))
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


def test_picture_is_a_png_read_back_by_matplotlib(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (7, 5, 3), dtype=np.uint8)
    assert demo.save_png(str(tmp_path / "x.png"), rgb)
    pixels = image.imread(tmp_path / "x.png")  # floats in [0, 1]
    np.testing.assert_array_equal(np.round(pixels * 255), rgb)


def test_no_picture_without_pillow(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL", None)  # as if Pillow were not installed
    assert not demo.save_png(str(tmp_path / "x.png"), np.zeros((2, 2, 3), np.uint8))
    assert not (tmp_path / "x.png").exists()


def test_written_out_adam_equals_optax():
    schedule = lambda count: 0.1 * 0.5 * (1.0 + jnp.cos(jnp.pi * count / 5))
    ours, theirs = demo.adam(schedule), optax.adam(schedule)
    params = {"w": jnp.array([1.0, -2.0, 3.0]), "b": jnp.array(0.5)}
    grad = jax.grad(lambda p: jnp.sum(p["w"] ** 3) + p["b"] ** 2)
    a, b = params, params
    sa, sb = ours.init(params), theirs.init(params)
    for _ in range(5):
        ua, sa = ours.update(grad(a), sa, a)
        ub, sb = theirs.update(grad(b), sb, b)
        a, b = optax.apply_updates(a, ua), optax.apply_updates(b, ub)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5), a, b)


def test_demo_runs_without_any_optional_library(tmp_path):
    # A child process where optax, tqdm, rich and Pillow cannot be imported.
    script = (
        "import sys\n"
        "for name in ('optax', 'tqdm', 'rich', 'PIL'):\n"
        "    sys.modules[name] = None\n"
        "from jax_unpool.cli.main import main\n"
        "sys.exit(main(['demo', '--steps', '10', '--size', '16', '--batch', '4', "
        "'--width', '4', '--out', 'p.png']))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "optimiser: Adam (jax_unpool.cli.demo)" in out
    assert "training: step 10/10" in out
    assert "no picture: it needs Pillow (pip install 'jax-unpool[demo]')" in out
    assert not (tmp_path / "p.png").exists()


def test_training_is_deterministic():
    _, first = demo.train(3, 16, 4, seed=5, width=4)
    _, second = demo.train(3, 16, 4, seed=5, width=4)
    assert first == second


def test_model_beats_the_trivial_predictor():
    params, losses = demo.train(300, 32, 16, seed=0, width=16)
    images, masks = demo.make_dataset(128, 32, seed=99)
    model = demo.mean_iou(np.asarray(demo.predict(params, images)), masks)
    trivial = demo.mean_iou(np.zeros_like(masks), masks)
    assert np.mean(losses[-20:]) < 0.5 * losses[0]
    assert model > trivial + 0.1, (model, trivial)
