"""The demo's picture, drawn and written with numpy and the standard library alone (no
imaging library, so that the base install draws it): a grid of input, true mask and
predicted mask per example, its columns labelled above and the mask colours named below
in a 5x7 pixel font, written as a PNG."""

from __future__ import annotations

import struct
import zlib

import numpy as np

CLASSES = ("background", "disc", "triangle")
# Mask colours, one RGB triple per class: nearly black, orange, blue.
PALETTE = np.array([[30, 30, 30], [230, 90, 60], [70, 160, 230]], np.uint8)
COLUMNS = ("input", "true mask", "prediction")
WHITE, INK = 255, 0  # the gaps and bands, the letters
GAP = 2  # pixels between cells, before enlarging
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# A 5x7 pixel font of the letters the labels use ('#' = ink); a swatch is a full cell.
_GLYPHS = {
    "A": ".###. #...# #...# ##### #...# #...# #...#",
    "B": "####. #...# #...# ####. #...# #...# ####.",
    "C": ".###. #...# #.... #.... #.... #...# .###.",
    "D": "####. #...# #...# #...# #...# #...# ####.",
    "E": "##### #.... #.... ####. #.... #.... #####",
    "G": ".###. #...# #.... #.### #...# #...# .###.",
    "I": ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###.",
    "K": "#...# #..#. #.#.. ##... #.#.. #..#. #...#",
    "L": "#.... #.... #.... #.... #.... #.... #####",
    "M": "#...# ##.## #.#.# #.#.# #...# #...# #...#",
    "N": "#...# #...# ##..# #.#.# #..## #...# #...#",
    "O": ".###. #...# #...# #...# #...# #...# .###.",
    "P": "####. #...# #...# ####. #.... #.... #....",
    "R": "####. #...# #...# ####. #.#.. #..#. #...#",
    "S": ".#### #.... #.... .###. ....# ....# ####.",
    "T": "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#..",
    "U": "#...# #...# #...# #...# #...# #...# .###.",
    " ": "..... ..... ..... ..... ..... ..... .....",
}
FONT = {c: np.array([[p == "#" for p in row] for row in g.split()]) for c, g in _GLYPHS.items()}
GLYPH_H, GLYPH_W = 7, 5


def text_pixels(text: str) -> np.ndarray:
    """`text` (upper-cased) as a bool array (7, 6 * len - 1): glyphs 1 pixel apart."""
    cells = [np.pad(FONT[c], ((0, 0), (0, 1))) for c in text.upper()]
    return np.concatenate(cells, axis=1)[:, :-1]


# The legend: per class, a swatch of its colour and its name; two spaces between classes.
_LEGEND = [(colour, f" {name}  ") for colour, name in zip(PALETTE, CLASSES)]
_LEGEND[-1] = (PALETTE[-1], f" {CLASSES[-1]}")
_LEGEND_CELLS = sum(1 + len(text) for _, text in _LEGEND)


def text_scale(column_width: int) -> int:
    """The enlargement of the font (1 to 3) at which the longest column label fits its
    column."""
    longest = max(len(c) for c in COLUMNS)
    return max(1, min(3, column_width // (6 * longest - 1)))


def band_height(s: int) -> int:
    return (GLYPH_H + 6) * s  # 3 font pixels of white above and below


def _band(width: int, s: int) -> np.ndarray:
    return np.full((band_height(s), width, 3), WHITE, np.uint8)


def _draw(band: np.ndarray, x: int, mask: np.ndarray, colour, s: int) -> None:
    """Draws `mask` (font pixels), enlarged `s` times, at column x, 3s pixels down."""
    big = mask.repeat(s, axis=0).repeat(s, axis=1)
    region = band[3 * s:3 * s + big.shape[0], x:x + big.shape[1]]
    region[big] = colour


def header(column_width: int, gap: int, s: int) -> np.ndarray:
    """The column labels, each centred above its column."""
    band = _band(len(COLUMNS) * column_width + (len(COLUMNS) - 1) * gap, s)
    for n, label in enumerate(COLUMNS):
        mask = text_pixels(label)
        x = n * (column_width + gap) + (column_width - mask.shape[1] * s) // 2
        _draw(band, x, mask, INK, s)
    return band


def legend(width: int, s: int) -> np.ndarray:
    """The mask colours named, centred: a swatch of each class's colour and its name."""
    s = max(1, min(s, width // (6 * _LEGEND_CELLS)))
    band = _band(width, s)
    x = (width - (6 * _LEGEND_CELLS - 1) * s) // 2
    for colour, text in _LEGEND:
        _draw(band, x, np.ones((GLYPH_H, GLYPH_W), bool), colour, s)
        _draw(band, x + 6 * s, text_pixels(text), INK, s)
        x += 6 * (1 + len(text)) * s
    return band


def grid(images: np.ndarray, masks: np.ndarray, predicted: np.ndarray) -> np.ndarray:
    """One row per example: input (grey levels), true mask, predicted mask (PALETTE),
    GAP white pixels apart; RGB uint8, not enlarged."""
    gray = np.clip(images[..., 0], 0.0, 1.0)
    gap = np.full((gray.shape[1], GAP, 3), WHITE, np.uint8)
    rows = []
    for g, m, p in zip(gray, masks, predicted):
        rgb = np.repeat((g * 255).astype(np.uint8)[..., None], 3, axis=-1)
        rows.append(np.concatenate([rgb, gap, PALETTE[m], gap, PALETTE[p]], axis=1))
        rows.append(np.full((GAP, rows[-1].shape[1], 3), WHITE, np.uint8))
    return np.concatenate(rows[:-1], axis=0)


def picture(images: np.ndarray, masks: np.ndarray, predicted: np.ndarray,
            scale: int = 4) -> np.ndarray:
    """The grid enlarged `scale` times, the column labels above it, the legend below."""
    cells = grid(images, masks, predicted).repeat(scale, axis=0).repeat(scale, axis=1)
    column_width = images.shape[2] * scale
    s = text_scale(column_width)
    return np.concatenate([header(column_width, GAP * scale, s), cells,
                           legend(cells.shape[1], s)], axis=0)


def png(rgb: np.ndarray) -> bytes:
    """`rgb` (H, W, 3) uint8 as a PNG (the W3C PNG specification's IHDR, IDAT and IEND
    chunks: 8-bit RGB, no interlace, filter type 0 on every row)."""
    rgb = np.ascontiguousarray(rgb, np.uint8)
    height, width, _ = rgb.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data)))

    # Each row starts with its filter type, 0 (none).
    rows = np.concatenate([np.zeros((height, 1), np.uint8), rgb.reshape(height, -1)], axis=1)
    head = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (PNG_SIGNATURE + chunk(b"IHDR", head)
            + chunk(b"IDAT", zlib.compress(rows.tobytes(), 9)) + chunk(b"IEND", b""))

