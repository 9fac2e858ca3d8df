"""Row buckets: calls of up to 32 rows compile per bucket (a kernel for 1, 2, 4, ... rows)."""

from __future__ import annotations

ROW_BUCKETS = (1, 2, 4, 8, 16, 32)
MAX_ROWS_PER_PROGRAM = 32
TILED_BUCKET = 64  # more than 32 rows: the tiled schedule, 64 rows per threadgroup


def row_bucket(rows: int) -> int:
    for b in ROW_BUCKETS:
        if rows <= b:
            return b
    return TILED_BUCKET
