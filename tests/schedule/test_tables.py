"""The tuned tables (mlx_metile/schedule/tables/cuda.json): the file loads as the rules read it,
and every entry is read by some decision of tests/schedule/decisions.py's grid - an entry no
decision reads is dead data, or the grid misses a case the table was measured for."""

from __future__ import annotations

import importlib
import json
from dataclasses import fields

from mlx_metile import settings
from mlx_metile.schedule import cuda_mma, simt
from mlx_metile.schedule.tables import HERE, CudaTables, cuda_tables
from tests.schedule import decisions

RAW = json.loads((HERE / "cuda.json").read_text())
CHOOSE = importlib.import_module("mlx_metile.schedule.choice")


def test_the_file_loads_as_the_rules_read_it():
    t = cuda_tables()
    assert t.simt_small_rows == RAW["simt"]["small_rows"]
    assert (t.simt_small, t.simt_large) == (RAW["simt"]["small"], RAW["simt"]["large"])
    assert t.mma_shared == {"warps": RAW["mma"]["warps"], "wide": RAW["mma"]["wide"]}
    assert t.mma_by_rows == {int(b): v for b, v in RAW["mma"]["by_rows"].items()}
    assert t.rings == {k: tuple(v) for k, v in RAW["rings"].items()}
    for name, table in RAW["stage_tables"].items():
        want = {tuple(int(n) for n in key.split("/")): tuple(v) for key, v in table.items()}
        assert t.stage_tables[name] == want, name
    # settings shared by every row bucket, else by the smallest bucket holding the rows
    assert [t.mma_default("batch", b) for b in (1, 8, 9, 16, 32)] == [
        RAW["mma"]["by_rows"][b]["batch"] for b in ("8", "8", "16", "16", "32")
    ]
    assert t.mma_default("warps", 32) == RAW["mma"]["warps"]


def leaves(node, path=()) -> set[tuple]:
    """Paths of the file's values (a stage list's every row bucket; a ring's pair as one entry)."""
    if isinstance(node, dict):
        return {leaf for k, v in node.items() for leaf in leaves(v, (*path, k))}
    if isinstance(node, list) and path[0] == "stage_tables":
        return {(*path, i) for i in range(len(node))}
    return {path}


class Read(dict):
    """A dict recording the keys read (`path` names it in the file)."""

    def __init__(self, data, path, seen):
        super().__init__(data)
        self.path, self.seen = path, seen

    def __getitem__(self, key):
        value = super().__getitem__(key)
        name = "/".join(map(str, key)) if isinstance(key, tuple) else str(key)
        if isinstance(value, tuple) and self.path[0] == "stage_tables":
            return ReadRow(value, (*self.path, name), self.seen)
        self.seen.add((*self.path, name))
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __iter__(self):  # (copies, dict(...), go through __getitem__)
        return iter(list(super().keys()))

    def keys(self):
        return list(super().keys())


class ReadPairs(dict):
    """direct_loads, keyed (format, kind): a lookup records ("direct_loads", format, kind)."""

    def __init__(self, data, seen):
        super().__init__(data)
        self.seen = seen

    def get(self, key, default=None):
        if key in self:
            self.seen.add(("direct_loads", *key))
        return super().get(key, default)


class ReadRow(tuple):
    def __new__(cls, values, path, seen):
        row = super().__new__(cls, values)
        row.path, row.seen = path, seen
        return row

    def __getitem__(self, i):
        self.seen.add((*self.path, i))
        return super().__getitem__(i)


def tracked(seen: set) -> CudaTables:
    t = cuda_tables()

    class Tracked(CudaTables):
        def __getattribute__(self, name):
            if name == "simt_small_rows":
                seen.add(("simt", "small_rows"))
            return super().__getattribute__(name)

    by_rows = Read({b: Read(v, ("mma", "by_rows", str(b)), seen) for b, v in t.mma_by_rows.items()}, ("-",), set())
    stage_tables = {k: Read(v, ("stage_tables", k), seen) for k, v in t.stage_tables.items()}
    values = {f.name: getattr(t, f.name) for f in fields(t)}
    values |= {
        "simt_small": Read(t.simt_small, ("simt", "small"), seen),
        "simt_large": Read(t.simt_large, ("simt", "large"), seen),
        "mma_shared": Read(t.mma_shared, ("mma",), seen),
        "mma_by_rows": by_rows,
        "rings": Read(t.rings, ("rings",), seen),
        "stage_tables": Read(stage_tables, ("-",), set()),
        "direct_loads": ReadPairs(t.direct_loads, seen),
    }
    return Tracked(**values)


# Entries that no default decision reads, each with why: 0s (the default's stages) of 8-bit
# group-64 ONE_WAVE products at 16 and 32 rows, which bucket_layout moves to TILES from 8 rows;
# a product takes them only where MLX_METILE_CUDA_MMA_LAYOUT forces ONE_WAVE (=4)
UNREAD = {("stage_tables", "one_wave", "8/64", 1): "4", ("stage_tables", "one_wave", "8/64", 2): "4"}


def read_entries(monkeypatch, cfg=None, targets=decisions.TARGETS) -> set:
    seen: set = set()
    table = tracked(seen)
    with monkeypatch.context() as m:
        m.setattr(cuda_mma, "cuda_tables", lambda: table)
        m.setattr(simt, "cuda_tables", lambda: table)
        CHOOSE._choose.cache_clear()  # (decide afresh, through the tracked tables)
        try:
            decisions.decide(cfg, targets)
        finally:
            CHOOSE._choose.cache_clear()
    return seen


def test_every_entry_is_read_by_some_decision(monkeypatch):
    seen = read_entries(monkeypatch)
    want = leaves({k: v for k, v in RAW.items() if k != "about"})
    assert seen <= want, seen - want
    assert want - seen == set(UNREAD), f"entries no decision reads: {sorted(want - seen)}"
    sm90 = {"sm_90": decisions.TARGETS["sm_90"]}
    for layout in set(UNREAD.values()):
        forced = read_entries(monkeypatch, settings.parse({"MLX_METILE_CUDA_MMA_LAYOUT": layout}), sm90)
        for entry in (e for e, v in UNREAD.items() if v == layout):
            _, name, key, i = entry
            assert RAW["stage_tables"][name][key][i] == 0 and entry in forced, entry  # (placeholders: the default)
