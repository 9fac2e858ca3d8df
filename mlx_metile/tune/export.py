"""Decisions as a decisions file (schedule.decisions): what tools/h200/tune_cuda.py writes on a GPU
so that the package can ship them, and what a user may write to carry decisions to machines of the
same GPU (MLX_METILE_CUDA_DECISIONS)."""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from ..schedule import decisions as decisions_file
from ..targets import CudaTarget
from . import identity
from .candidates import NATIVE
from .tournament import Decision


def judged(d: Decision) -> bool:
    """Whether a kernel candidate passed the gate, so that timing decided (else native won only
    because every kernel was gated out)."""
    return any(r.gate == "pass" for r in d.records.values() if r.family != NATIVE)


def entries_of(decisions: Iterable[Decision], unjudged: list | None = None) -> list[dict]:
    """One entry per CUDA decision with a route that timing decided (`judged`); the others go
    into `unjudged` (site, bucket, the first rejection) when it is given. The compiler a decision
    names is dropped: a machine the file travels to builds with its own (nvcc where installed,
    else NVRTC)."""
    out = []
    for d in decisions:
        site = d._site
        if d.route is None or site is None or site.spec is None or not isinstance(site.target, CudaTarget):
            continue
        if not judged(d):
            if unjudged is not None:
                why = next(iter(d.rejected.values()), "no kernel candidate")
                unjudged.append({"site": d.site, "bucket": d.bucket, "why": why})
            continue
        route = replace(d.route, compiler=None)
        chosen = d.records.get(d.chosen)
        out.append(
            {
                "arch": site.target.arch,
                "spec": site.spec.name(),
                "K": site.shape.K,
                "columns": site.shape.columns,
                "bucket": d.bucket,
                "site": d.site,
                "chosen": d.chosen,
                "ratio": None if chosen is None or chosen.ratio is None else [round(r, 4) for r in chosen.ratio],
                "route": route.as_dict(),
            }
        )
    return sorted(out, key=lambda e: (e["arch"], e["spec"], e["K"], e["columns"], e["bucket"]))


def export_decisions(decisions: Iterable[Decision], path: str | Path, about: str = "") -> Path:
    """Write the decisions' CUDA entries that timing decided as a decisions file at `path`, the
    others listed under "not_written"; returns the path."""
    decisions, unjudged = list(decisions), []
    entries = entries_of(decisions, unjudged)
    backend = "cuda"
    data = {
        "format": decisions_file.FORMAT,
        "about": about or "tuned CUDA routes (mlx_metile.tune.export_decisions); docs/TUNING.md",
        "measured": {
            "date": datetime.date.today().isoformat(),
            "device": identity.device_identity(backend),
            "versions": identity.versions(),
        },
        "entries": entries,
        # decisions not written: every kernel candidate failed the accuracy gate, so the calls keep
        # the hand rules - the failure is the finding, not a route to ship
        "not_written": unjudged,
    }
    path = Path(path)
    path.write_text(json.dumps(data, indent=1, sort_keys=False, default=str) + "\n")
    return path
