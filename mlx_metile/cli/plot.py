"""A line plot as a PNG with the standard library only (zlib): speedup over stock by rows, one line
per format, a dashed line at 1x, labelled axes and a legend in a 3x5 pixel font."""

from __future__ import annotations

import math
import struct
import zlib
from pathlib import Path

# 3x5 glyphs, rows top to bottom, bits left to right
_FONT = {
    "0": "111101101101111",
    "1": "010110010010111",
    "2": "111001111100111",
    "3": "111001111001111",
    "4": "101101111001001",
    "5": "111100111001111",
    "6": "111100111101111",
    "7": "111001001001001",
    "8": "111101111101111",
    "9": "111101111001111",
    ".": "000000000000010",
    "x": "000101010101000",
    "-": "000000111000000",
    " ": "000000000000000",
    "=": "000111000111000",
    **{
        c: g
        for c, g in zip(
            "abcdefghijklmnopqrstuvwyz",
            (
                "010101111101101",
                "110101110101110",
                "011100100100011",
                "110101101101110",
                "111100110100111",
                "111100110100100",
                "011100101101011",
                "101101111101101",
                "111010010010111",
                "001001001101010",
                "101101110101101",
                "100100100100111",
                "101111111101101",
                "110101101101101",
                "010101101101010",
                "110101110100100",
                "010101101110011",
                "110101110101101",
                "011100010001110",
                "111010010010010",
                "101101101101111",
                "101101101101010",
                "101101111111101",
                "101101010010010",
                "111001010100111",
            ),
        )
    },
}
COLOURS = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
]


class Canvas:
    def __init__(self, width: int, height: int):
        self.w, self.h = width, height
        self.px = bytearray(b"\xff" * (width * height * 3))

    def dot(self, x: int, y: int, c: tuple[int, int, int]) -> None:
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i : i + 3] = bytes(c)

    def line(self, x0: float, y0: float, x1: float, y1: float, c, thick: int = 1, dash: int = 0) -> None:
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 1
        for i in range(n + 1):
            if dash and (i // dash) % 2:
                continue
            x, y = x0 + (x1 - x0) * i / n, y0 + (y1 - y0) * i / n
            for dx in range(thick):
                for dy in range(thick):
                    self.dot(round(x) + dx, round(y) + dy, c)

    def text(self, x: int, y: int, s: str, c=(0, 0, 0), scale: int = 2) -> None:
        for ch in s.lower():
            glyph = _FONT.get(ch, _FONT[" "])
            for r in range(5):
                for col in range(3):
                    if glyph[r * 3 + col] == "1":
                        for dx in range(scale):
                            for dy in range(scale):
                                self.dot(x + col * scale + dx, y + r * scale + dy, c)
            x += 4 * scale

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3 : (y + 1) * self.w * 3]) for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        header = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")
        )


def speedup_plot(series: dict[str, dict[int, float]], path: Path, title: str = "speedup over stock mlx") -> None:
    """series: format -> {rows: speedup}. x: rows on a log2 axis; y: speedup, linear from 0."""
    w, h, left, right, top, bottom = 640, 400, 60, 150, 40, 50
    cv = Canvas(w, h)
    rows = sorted({r for s in series.values() for r in s})
    top_y = max([1.0, *(v for s in series.values() for v in s.values())]) * 1.1
    lx0, lx1 = math.log2(rows[0]), math.log2(rows[-1]) if rows[-1] > rows[0] else math.log2(rows[0]) + 1

    def X(r: float) -> float:
        return left + (math.log2(r) - lx0) / (lx1 - lx0) * (w - left - right)

    def Y(v: float) -> float:
        return h - bottom - v / top_y * (h - top - bottom)

    cv.line(left, top, left, h - bottom, (0, 0, 0))
    cv.line(left, h - bottom, w - right, h - bottom, (0, 0, 0))
    cv.line(left, Y(1.0), w - right, Y(1.0), (120, 120, 120), dash=4)
    for r in rows:
        cv.line(X(r), h - bottom, X(r), h - bottom + 4, (0, 0, 0))
        cv.text(int(X(r)) - 4, h - bottom + 8, str(r))
    step = max(0.5, round(top_y / 5 * 2) / 2)
    v = 0.0
    while v <= top_y:
        cv.line(left - 4, Y(v), left, Y(v), (0, 0, 0))
        cv.text(4, int(Y(v)) - 5, f"{v:g}x")
        v += step
    cv.text(left, 10, title)
    cv.text(w - right - 40, h - 18, "rows")
    for i, (name, points) in enumerate(series.items()):
        c = COLOURS[i % len(COLOURS)]
        pts = sorted(points.items())
        for (r0, v0), (r1, v1) in zip(pts, pts[1:]):
            cv.line(X(r0), Y(v0), X(r1), Y(v1), c, thick=2)
        for r, v in pts:
            cv.line(X(r) - 2, Y(v) - 2, X(r) + 2, Y(v) - 2, c, thick=4)
        cv.line(w - right + 10, top + 20 * i + 5, w - right + 30, top + 20 * i + 5, c, thick=3)
        cv.text(w - right + 36, top + 20 * i, name)
    path.write_bytes(cv.png())
