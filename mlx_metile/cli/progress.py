"""A one-line progress report on stderr where it is a terminal (else one line per step)."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: int, what: str):
        self.total, self.what, self.done, self.t0 = total, what, 0, time.perf_counter()
        self.tty = sys.stderr.isatty()

    def step(self, label: str) -> None:
        self.done += 1
        width = 24
        filled = width * self.done // max(self.total, 1)
        line = f"{self.what} [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        line += f" ({time.perf_counter() - self.t0:.0f} s)"
        if self.tty:
            print("\r" + line.ljust(100), end="" if self.done < self.total else "\n", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)
