"""The decision table of `mlx_metile.schedule.choose` over a grid of calls, and its snapshot.

The grid: weight formats (dense bf16 / f16; affine 4- and 8-bit, groups 32 / 64 / 128, scales
bf16 / f16 / f32; mxfp4, mxfp8, nvfp4; affine 2, 3, 5 and 6-bit, groups 32 / 64 / 128, bf16 scales) x fusions (one weight, with a bias, with a residual, a SwiGLU gate/up pair,
concatenated q/k/v) x shapes (the CUDA benchmarks' products, their SwiGLU and q/k/v versions, a
few small and odd ones) x rows (1, 2, 4, 8, 16, 32, 33) x targets (CPU's MSL, CUDA sm_90, sm_80,
compute_75), under the default settings. Each entry is the whole Schedule (`Schedule.knobs()`).

decisions.json holds the table; test_decisions.py compares `choose` with it. A deliberate change of
a rule or a tuned table regenerates it, in the same commit:

    .venv/bin/python -m tests.schedule.decisions --write
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, fields
from functools import lru_cache
from pathlib import Path

from mlx_metile import settings
from mlx_metile.schedule import Schedule, Shape, choose
from mlx_metile.spec import ProjectionSpec, WeightFormat
from mlx_metile.targets import CPU, Target, cuda_target

SNAPSHOT = Path(__file__).with_name("decisions.json")
REGENERATE = ".venv/bin/python -m tests.schedule.decisions --write"

ROWS = (1, 2, 4, 8, 16, 32, 33)
TARGETS: dict[str, Target] = {
    "msl": CPU,
    "sm_90": cuda_target("sm_90"),
    "sm_80": cuda_target("sm_80"),
    "compute_75": cuda_target("compute_75"),
}

DENSE = [WeightFormat("bf16"), WeightFormat("f16")]
AFFINE = [WeightFormat(s, b, g) for b in (4, 8) for g in (32, 64, 128) for s in ("bf16", "f16", "f32")]
MICROSCALED = [WeightFormat("u8", b, g, mode=m) for m, b, g in (("mxfp4", 4, 32), ("mxfp8", 8, 32), ("nvfp4", 4, 16))]
LOWBIT = [WeightFormat("bf16", b, g) for b in (2, 3, 5, 6) for g in (32, 64, 128)]
FORMATS = DENSE + AFFINE + MICROSCALED + LOWBIT

# (K, N): the CUDA benchmarks' single products, then small and odd ones (K not a multiple of 32 or 64)
SINGLE_SHAPES = [
    (4096, 4096),
    (4096, 14336),
    (14336, 4096),
    (1536, 8960),
    (8960, 1536),
    (3072, 8192),
    (3584, 18944),
    (2048, 11008),
    (4096, 1024),
    (2048, 8192),
    (128, 96),
    (256, 1000),
    (96, 1000),
    (100, 37),
]
# (K, N of each weight): the gate/up products above as SwiGLU pairs
SWIGLU_SHAPES = [(4096, 14336), (1536, 8960), (3072, 8192), (3584, 18944), (2048, 11008), (2048, 8192), (128, 64)]
# (K, (q, k, v)): the attention projections of the benchmarks' models
QKV_SHAPES = [
    (4096, (4096, 1024, 1024)),
    (1536, (1536, 256, 256)),
    (3072, (3072, 1024, 1024)),
    (3584, (3584, 512, 512)),
    (2048, (2048, 256, 256)),
    (2048, (2048, 512, 512)),
    (256, (128, 64, 64)),
]
FUSIONS = ("single", "bias", "residual", "swiglu", "qkv")


@dataclass(frozen=True)
class Case:
    """One (target, spec, shape) of the grid; its decisions are one Schedule per entry of ROWS."""

    target: str
    spec: ProjectionSpec
    shape: Shape

    @property
    def key(self) -> str:
        return f"{self.target} {self.spec.name()} {self.shape.K}x{self.shape.columns}"


def activation(w: WeightFormat) -> str:
    """The activations a format is used with: its own 2-byte dtype, bf16 beside f32 or uint8 scales."""
    return w.dtype if w.dtype in ("bf16", "f16") else "bf16"


def spec_of(fusion: str, w: WeightFormat, K: int, target: Target) -> ProjectionSpec:
    """The spec a call of this fusion gets: k_multiple as mlx_metile.dispatch.spec_of computes it."""
    act = activation(w)
    k_multiple = math.gcd(K, 256 if target.language == "cuda" else 64)
    if fusion == "bias":
        w = WeightFormat(w.dtype, w.bits, w.group_size, True, act, w.mode)
    weights = {"swiglu": 2, "qkv": 3}.get(fusion, 1)
    epilogue = "swiglu" if fusion == "swiglu" else None
    return ProjectionSpec(act, (w,) * weights, epilogue, fusion == "residual", k_multiple=k_multiple)


def shapes_of(fusion: str) -> Iterator[tuple[int, int]]:
    """(K, the columns choose reads: the weights' summed N, one weight's N for SwiGLU)."""
    if fusion == "swiglu":
        yield from SWIGLU_SHAPES
    elif fusion == "qkv":
        yield from ((K, sum(ns)) for K, ns in QKV_SHAPES)
    else:
        yield from SINGLE_SHAPES


def cases(targets: dict[str, Target] = TARGETS) -> Iterator[Case]:
    for name, target in targets.items():
        for w in FORMATS:
            for fusion in FUSIONS:
                for K, columns in shapes_of(fusion):
                    if w.quantized and K % w.group_size:
                        continue  # (no such weight: K is a whole number of groups)
                    yield Case(name, spec_of(fusion, w, K, target), Shape(K, columns))


def defaults() -> settings.Settings:
    """The settings of an empty environment: the table is that of the defaults, wherever it runs."""
    return settings.parse({})


def decide(cfg: settings.Settings | None = None, targets: dict[str, Target] = TARGETS) -> dict[Case, list[Schedule]]:
    """Each case's Schedules (one per entry of ROWS) under `cfg` (default: defaults())."""
    cfg = cfg or defaults()
    return {c: [choose(c.spec, rows, targets[c.target], c.shape, cfg) for rows in ROWS] for c in cases(targets)}


@lru_cache(maxsize=1)
def table() -> dict[Case, list[Schedule]]:
    """The grid's decisions under the defaults, computed once per process (the tests share it)."""
    return decide()


FIELDS = [f.name for f in fields(Schedule)]


def schedule_id(values: list) -> str:
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()[:8]


def encode(table: dict[Case, list[Schedule]]) -> dict:
    """The snapshot: each distinct Schedule once (its fields' values, named by a hash of them), and
    per case the ids of its Schedules, one per entry of ROWS."""
    schedules: dict[str, list] = {}
    ids: dict[Schedule, str] = {}
    for s in {s for chosen in table.values() for s in chosen}:
        knobs = s.knobs()
        values = [knobs[f] for f in FIELDS]
        ids[s] = schedule_id(values)
        assert schedules.setdefault(ids[s], values) == values, f"schedule id collision: {ids[s]}"
    decisions = {case.key: " ".join(ids[s] for s in chosen) for case, chosen in table.items()}
    return {
        "about": f"choose() over the grid of tests/schedule/decisions.py; regenerate: {REGENERATE}",
        "rows": list(ROWS),
        "fields": FIELDS,
        "schedules": dict(sorted(schedules.items())),
        "decisions": dict(sorted(decisions.items())),
    }


def dumps(data: dict) -> str:
    """JSON with one schedule and one case per line (short diffs when a decision changes)."""
    lines = ["{"]
    for name in ("about", "rows", "fields"):
        lines.append(f"  {json.dumps(name)}: {json.dumps(data[name])},")
    for name in ("schedules", "decisions"):
        items = [f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in data[name].items()]
        tail = "," if name == "schedules" else ""
        lines.append(f"  {json.dumps(name)}: {{\n" + ",\n".join(items) + f"\n  }}{tail}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def load(path: Path = SNAPSHOT) -> dict:
    return json.loads(path.read_text())


def differences(want: dict, got: dict, limit: int = 40) -> list[str]:
    """What changed from snapshot `want` to table `got`: per case and row count, the fields."""
    if want["fields"] != got["fields"] or want["rows"] != got["rows"]:
        return [f"Schedule fields or rows changed: {want['fields']} {want['rows']} -> {got['fields']} {got['rows']}"]
    out = []
    old, new = want["decisions"], got["decisions"]
    for key in sorted(old.keys() | new.keys()):
        if key not in new:
            out.append(f"{key}: no longer in the grid")
        elif key not in old:
            out.append(f"{key}: not in the snapshot")
        else:
            for rows, a, b in zip(got["rows"], old[key].split(), new[key].split()):
                if a != b:
                    va, vb = want["schedules"][a], got["schedules"][b]
                    changed = ", ".join(f"{f} {x!r} -> {y!r}" for f, x, y in zip(got["fields"], va, vb) if x != y)
                    out.append(f"{key} rows {rows}: {changed}")
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help=f"write {SNAPSHOT.name}")
    args = parser.parse_args(argv)
    got = encode(decide())
    if args.write:
        SNAPSHOT.write_text(dumps(got))
        print(f"wrote {SNAPSHOT}: {len(got['decisions'])} cases, {len(got['schedules'])} distinct schedules")
        return 0
    diff = differences(load(), got)
    print("\n".join(diff) or "the snapshot matches")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
