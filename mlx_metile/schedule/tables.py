"""Tuned tables: data files beside this module, read once. The rules in cuda_*.py consult them;
a tuner writes its decisions into files of the same form."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).parent / "tables"


@dataclass(frozen=True)
class CudaTables:
    simt_small_rows: int
    simt_small: dict
    simt_large: dict
    mma_shared: dict  # settings of every row bucket alike (part of the sum order): warps, wide
    mma_by_rows: dict  # row bucket (8, 16, 32) -> batch, tiles, minblocks, strided
    rings: dict  # name -> (KB, stages)
    stage_tables: dict  # layout table name -> {(bits, group): (stages at 1-8, 16, 32 rows)}
    direct_loads: dict  # (format short name, "single" | "swiglu") -> row buckets of TILES kept on the direct loads

    def mma_default(self, name: str, rows_bucket: int) -> int:
        """A setting of `mma_shared`, or of the smallest row bucket of `mma_by_rows` holding `rows_bucket`."""
        if name in self.mma_shared:
            return self.mma_shared[name]
        bucket = min(b for b in self.mma_by_rows if b >= rows_bucket)
        return self.mma_by_rows[bucket][name]


def _stage_table(entries: dict) -> dict:
    out = {}
    for key, stages in entries.items():
        bits, group = key.split("/")
        out[(int(bits), int(group))] = tuple(stages)
    return out


@lru_cache(maxsize=4)
def cuda_tables(name: str = "cuda") -> CudaTables:
    data = json.loads((HERE / f"{name}.json").read_text())
    mma = data["mma"]
    return CudaTables(
        simt_small_rows=data["simt"]["small_rows"],
        simt_small=dict(data["simt"]["small"]),
        simt_large=dict(data["simt"]["large"]),
        mma_shared={"warps": mma["warps"], "wide": mma["wide"]},
        mma_by_rows={int(b): dict(v) for b, v in mma["by_rows"].items()},
        rings={k: tuple(v) for k, v in data["rings"].items()},
        stage_tables={k: _stage_table(v) for k, v in data["stage_tables"].items()},
        direct_loads={
            (fmt, kind): frozenset(buckets)
            for fmt, kinds in data["direct_loads"].items()
            for kind, buckets in kinds.items()
        },
    )
