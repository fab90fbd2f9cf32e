"""The demo's parts: data, metric, optimiser, picture, that the model learns, and that it
runs without any of the optional libraries it prefers."""

import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from fresh_process import child_env

from jax_unpool.cli import demo, picture

pytestmark = pytest.mark.slow
# An independent PNG decoder: the release extra's (pip install '.[release]').
image = pytest.importorskip("matplotlib.image")

ROOT = Path(__file__).resolve().parents[2]


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
    (tmp_path / "x.png").write_bytes(picture.png(rgb))
    pixels = image.imread(tmp_path / "x.png")  # floats in [0, 1]
    np.testing.assert_array_equal(np.round(pixels * 255), rgb)


def test_the_picture_needs_no_imaging_library(tmp_path, monkeypatch):
    rgb = np.random.default_rng(1).integers(0, 256, (3, 9, 3), dtype=np.uint8)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "PIL", None)  # as if Pillow were not installed
        (tmp_path / "x.png").write_bytes(picture.png(rgb))
    np.testing.assert_array_equal(np.round(image.imread(tmp_path / "x.png") * 255), rgb)


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
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=child_env(),
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "optimiser: Adam (jax_unpool.cli.demo)" in out
    assert "training: step 10/10" in out
    assert "wrote p.png (columns: input, true mask, prediction)" in out
    # 4 examples, 3 columns, 4x; a band of 7-pixel letters, 3 pixels of white above and
    # below, for the labels above and the legend below
    shape = ((4 * 16 + 3 * 2) * 4 + 2 * 13, (3 * 16 + 2 * 2) * 4, 3)
    assert image.imread(tmp_path / "p.png").shape == shape


def test_training_is_deterministic():
    _, first = demo.train(3, 16, 4, seed=5, width=4)
    _, second = demo.train(3, 16, 4, seed=5, width=4)
    assert first == second


def test_a_model_that_has_learnt_nothing_gets_a_note(tmp_path, capsys):
    result = demo.run(steps=2, size=16, batch=4, width=4, out=str(tmp_path / "p.png"),
                      test_count=32)
    out = capsys.readouterr().out
    assert result["iou"] < result["trivial_iou"] + 0.05  # two steps learn nothing
    assert ("note: the model does not beat the trivial predictor: it has not learnt the "
            "shapes yet; train longer (--steps, default 800)") in out


def test_model_beats_the_trivial_predictor(tmp_path, capsys):
    result = demo.run(steps=300, size=32, batch=16, seed=0, width=16,
                      out=str(tmp_path / "p.png"), test_count=128)
    assert "note:" not in capsys.readouterr().out
    assert result["iou"] > result["trivial_iou"] + 0.1, result


# What docs/cli.md shows of the demo's output (its first ```text block).
CLI_PAGE = (ROOT / "docs" / "cli.md").read_text().split("## The demo", 1)[1]
DOCUMENTED = re.search(r"```text\n(.*?)```", CLI_PAGE, re.DOTALL).group(1)


def test_the_documented_seed_dependent_numbers_are_what_the_demo_prints(tmp_path, capsys):
    # The first step's loss and the trivial predictor's IoU depend only on the seed (the
    # initial weights and the generated images), on every CPU: a one-step run at the
    # default settings prints them.
    demo.run(steps=1, out=str(tmp_path / "p.png"))
    out = capsys.readouterr().out
    for pattern in (r"loss: first step (\d\.\d{4})",
                    r"trivial predictor \(all background\) (\d\.\d{3})"):
        assert re.search(pattern, DOCUMENTED).group(1) == re.search(pattern, out).group(1)


def test_the_documented_picture_shows_the_held_out_images_and_their_masks():
    # docs/demo.png is the picture of a default run: its labels, legend, input and
    # true-mask columns are those of the first four held-out images (the same on every
    # CPU), its prediction column is in the palette's colours.
    images, masks = demo.make_dataset(4, 32, 0 + demo.HELD_OUT_SEED_OFFSET)
    expected = picture.picture(images, masks, masks)
    shown = np.round(image.imread(ROOT / "docs" / "demo.png") * 255).astype(np.uint8)
    assert shown.shape == expected.shape
    band = picture.band_height(2)  # 32 pixels enlarged 4 times: letters enlarged twice
    first_two = (32 + 2 + 32 + 2) * 4
    np.testing.assert_array_equal(shown[:, :first_two], expected[:, :first_two])
    np.testing.assert_array_equal(shown[:band], expected[:band])
    np.testing.assert_array_equal(shown[-band:], expected[-band:])
    rows = [slice(band + n * 34 * 4, band + (n * 34 + 32) * 4) for n in range(4)]
    predicted = np.concatenate([shown[r, first_two:] for r in rows]).reshape(-1, 3)
    assert {tuple(c) for c in np.unique(predicted, axis=0)} <= {tuple(c)
                                                               for c in picture.PALETTE}


def trimmed(mask: np.ndarray) -> np.ndarray:
    """`mask` without its empty outer rows and columns."""
    ys, xs = np.nonzero(mask)
    return mask[ys.min():ys.max() + 1, xs.min():xs.max() + 1]


def test_the_picture_labels_its_columns_and_names_the_mask_colours():
    images, masks = demo.make_dataset(2, 32, 1)
    rgb = picture.picture(images, masks, masks)  # 4 times enlarged: 128-pixel columns
    s = 2  # "prediction", 10 letters of 6 pixels, fits twice enlarged in 128 pixels
    band = (7 + 6) * s
    assert rgb.shape == (band + (2 * 32 + 2) * 4 + band, (3 * 32 + 2 * 2) * 4, 3)
    header, legend = rgb[:band], rgb[-band:]
    assert set(np.unique(header)) == {0, 255}  # black letters on white
    for n, label in enumerate(("input", "true mask", "prediction")):
        ink = header[:, n * (128 + 8):n * (128 + 8) + 128, 0] == 0
        # The label's letters, enlarged s times, centred in its column (within a font
        # pixel: an "I" has a blank column on either side).
        np.testing.assert_array_equal(
            trimmed(ink), trimmed(picture.text_pixels(label).repeat(s, 0).repeat(s, 1)))
        xs = np.nonzero(ink.any(axis=0))[0]
        assert abs(xs.min() - (128 - xs.max() - 1)) <= s, label
    # The legend: a 5x7 swatch (enlarged) of each class's colour, left to right.
    swatches = []
    for colour in picture.PALETTE:
        ys, xs = np.nonzero((legend == colour).all(axis=-1))
        assert (np.ptp(ys) + 1, np.ptp(xs) + 1) == (7 * s, 5 * s)
        swatches.append(xs.min())
    assert swatches == sorted(swatches)


def test_text_pixels_spell_with_the_font():
    # "IT": I, a column of space, T; hand-drawn.
    expected = [".###..#####",
                "..#.....#..",
                "..#.....#..",
                "..#.....#..",
                "..#.....#..",
                "..#.....#..",
                ".###....#.."]
    np.testing.assert_array_equal(picture.text_pixels("it"),
                                  [[c == "#" for c in row] for row in expected])


@pytest.mark.parametrize("size,batch,width", [(128, 16, 24), (16, 1, 512)],
                         ids=["activations", "weights"])
def test_the_memory_estimate_bounds_what_a_run_takes(size, batch, width, tmp_path):
    # The peak resident memory of a child process that trains, evaluates and draws as
    # `run` does (two steps: every step takes the same memory): the kernel's VmHWM of the
    # child's own address space. getrusage's ru_maxrss would not do: exec keeps the
    # parent's peak in it (the pytest worker's, 7.7 GiB after test_large_offsets).
    script = (
        "from jax_unpool.cli import demo, picture\n"
        f"params, _ = demo.train(2, {size}, {batch}, 0, {width})\n"
        f"images, masks = demo.make_dataset(demo.TEST_COUNT, {size}, 1)\n"
        f"predicted = demo.predict_in_batches(params, images, {batch})\n"
        "picture.picture(images[:4], masks[:4], predicted[:4])\n"
        "status = open('/proc/self/status').read().split('VmHWM:')[1]\n"
        "print(int(status.split()[0]) * 1024)\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=child_env(),
                          capture_output=True, text=True, timeout=600, check=True)
    assert int(done.stdout) <= demo.memory_needed(size, batch, width)
