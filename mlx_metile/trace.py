"""`with mlx_metile.trace() as t:` records each op call so users can see what
was accelerated and how."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class TraceRecord:
    op: str  # "linear" | "quantized_linear" | "fused_linear"
    rows: int
    K: int
    N: tuple[int, ...]
    weight_format: tuple[str, ...]  # e.g. ("bf16",) or ("q4g64",)
    epilogue: str | None
    residual: bool
    backend: str  # "cpu" | "emulator" | "metal" | "cuda" | "mlx" (stock fallback)
    kernel: str | None  # entry point of the compiled kernel, if one ran


class Trace:
    def __init__(self) -> None:
        self.records: list[TraceRecord] = []

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def summary(self) -> str:
        lines = [f"{len(self.records)} mlx_metile op calls"]
        for r in self.records:
            lines.append(
                f"  {r.op:16s} rows={r.rows:<4d} K={r.K:<6d} N={','.join(map(str, r.N)):<14s} "
                f"{'+'.join(r.weight_format):10s} epilogue={r.epilogue} residual={r.residual} backend={r.backend}"
            )
        return "\n".join(lines)


_local = threading.local()
_open = [0]  # traces open on any thread: while none is, tracing() needs no thread-local lookup
_open_lock = threading.Lock()


def _active() -> list[Trace]:
    if not hasattr(_local, "traces"):
        _local.traces = []
    return _local.traces


@contextmanager
def trace():
    t = Trace()
    _active().append(t)
    with _open_lock:
        _open[0] += 1
    try:
        yield t
    finally:
        with _open_lock:
            _open[0] -= 1
        _active().remove(t)


def tracing() -> bool:
    """Whether a trace() is open on this thread (so callers can skip building records). A
    thread's own trace() raised the count before its calls, so a zero read is never stale
    for it; another thread's count only sends the check on to the thread-local lookup."""
    return _open[0] > 0 and bool(getattr(_local, "traces", None))


def record(rec: TraceRecord) -> None:
    for t in _active():
        t.records.append(rec)
