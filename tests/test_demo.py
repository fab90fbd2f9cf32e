"""The demo's parts, in-process: data, metric, PNG writer, and that the model learns."""

import numpy as np
import pytest
from matplotlib import image

from jax_unpool import demo


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


def test_write_png_is_read_back_by_matplotlib(tmp_path):
    rgb = np.random.default_rng(0).integers(0, 256, (7, 5, 3), dtype=np.uint8)
    demo.write_png(str(tmp_path / "x.png"), rgb)
    # matplotlib (Pillow) decodes to floats in [0, 1].
    np.testing.assert_array_equal(np.round(image.imread(tmp_path / "x.png") * 255), rgb)


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
