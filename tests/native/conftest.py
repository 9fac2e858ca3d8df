"""Golden G13 encodings (Mesa's Asahi test vectors, tests/native/fixtures) for the native room."""

from __future__ import annotations

from pathlib import Path

import pytest

CASES = Path(__file__).parent / "fixtures" / "g13-float-alu-cases.txt"
PADDING = bytes.fromhex("cafebabe") * 4  # what Mesa's decoder tests put after each instruction


def load_cases() -> list[tuple[bytes, str]]:
    out = []
    for line in CASES.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            hexed, text = line.split(None, 1)
            out.append((bytes.fromhex(hexed), " ".join(text.split())))
    return out


@pytest.fixture(scope="session")
def golden() -> list[tuple[bytes, str]]:
    return load_cases()
