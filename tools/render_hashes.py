"""Hashes of every generated kernel: MSL and CUDA for each variant, row bucket and format.

A refactoring of the compiler that must not change what it generates is checked with this:
run it before and after, compare the combined hash, and where it differs the per-variant file
says which variants changed.

    python tools/render_hashes.py --out hashes.json          # writes per-variant hashes
    python tools/render_hashes.py --compare a.json b.json    # lists the variants that differ

A variant is (knob settings, spec, K, output widths, rows, target); what is hashed is the
artifact as the backends receive it: source, entry point, threads per group, grid for the rows,
dynamic shared memory and parameter order. Errors (a knob a spec does not take) are hashed as
their type and message, so a refactoring must keep them too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROWS = (1, 2, 4, 8, 16, 32, 33)

# (K, output widths, epilogue): shapes of every column layout on the CUDA path, and small ones
SINGLE_SHAPES = [
    (128, (96,)),
    (256, (1000,)),
    (4096, (4096,)),
    (4096, (14336,)),
    (14336, (4096,)),
    (1536, (8960,)),
    (8960, (1536,)),
    (2048, (8192,)),
    (3072, (8192,)),
    (3584, (18944,)),
    (2048, (11008,)),
    (4096, (1024,)),
    (8192, (2048,)),
    (4096, (2048,)),
]
DENSE_ONLY_SHAPES = [(100, (37,)), (96, (1000,))]  # K not a multiple of 32
FUSED_SHAPES = [
    (4096, (14336, 14336), "swiglu"),
    (1536, (8960, 8960), "swiglu"),
    (3072, (8192, 8192), "swiglu"),
    (128, (64, 64), "swiglu"),
    (4096, (4096, 1024, 1024), None),
    (1536, (1536, 256, 256), None),
    (3072, (3072, 1024, 1024), None),
    (256, (128, 64, 64), None),
]

QUANTIZED = [(bits, group) for bits in (4, 8) for group in (32, 64, 128)]

# Knob settings the CUDA lowerings read (each alone, over a reduced set of variants)
KNOBS = {
    "MLX_METILE_CUDA_MMA": ["0"],
    "MLX_METILE_CUDA_ARCH": ["sm_80", "sm_86", "compute_75", "compute_90"],
    "MLX_METILE_CUDA_TUNE": ["sg=4,budget=48,nc=4", "sg=2,nc=8"],
    "MLX_METILE_CUDA_MMA_WARPS": ["1", "2", "8", "16"],
    "MLX_METILE_CUDA_MMA_BATCH": ["1", "2", "4"],
    "MLX_METILE_CUDA_MMA_TILES": ["1", "2", "4"],
    "MLX_METILE_CUDA_MMA_WIDE": ["1"],
    "MLX_METILE_CUDA_MMA_MINBLOCKS": ["0", "3"],
    "MLX_METILE_CUDA_MMA_GROUPS": ["2", "4", "8"],
    "MLX_METILE_CUDA_MMA_STAGES": ["2", "3", "6"],
    "MLX_METILE_CUDA_MMA_SMEM": ["64", "100", "227"],
    "MLX_METILE_CUDA_MMA_Q8SPLIT": ["0"],
    "MLX_METILE_CUDA_MMA_XSECTOR": ["0", "1"],
    "MLX_METILE_CUDA_MMA_STRIDED": ["0", "1"],
    "MLX_METILE_CUDA_MMA_INTERLEAVE": ["1"],
    "MLX_METILE_CUDA_MMA_SWIZZLE": ["0", "1", "2"],
    "MLX_METILE_CUDA_MMA_LATE": ["1", "2", "3"],
    "MLX_METILE_CUDA_MMA_BANKPAD": ["0", "1"],
    "MLX_METILE_CUDA_MMA_XSHARE": ["0", "2", "4", "8"],
    "MLX_METILE_CUDA_MMA_LAYOUT": ["0", "1", "2", "3", "4", "5"],
    "MLX_METILE_CUDA_MMA_DENSE": ["0", "1"],
    "MLX_METILE_CUDA_MMA_FUSED": ["0"],
    "MLX_METILE_CUDA_MMA_STAGED": ["0"],
}


def variants(full: bool):
    """(label, act, formats, epilogue, residual, K, Ns, norm_eps) of every spec hashed."""
    from mlx_metile.spec import WeightFormat

    out = []
    for act in ("bf16", "f16", "f32"):
        dense = WeightFormat(act)
        fmts = [("dense", dense)] + [
            (f"q{b}g{g}", WeightFormat(act if act != "f32" else "f32", b, g)) for b, g in QUANTIZED
        ]
        if act == "bf16":
            fmts.append(("q4g64-f32scales", WeightFormat("f32", 4, 64)))
            fmts.append(("dense-f32w", WeightFormat("f32")))
        for name, f in fmts:
            shapes = SINGLE_SHAPES + (DENSE_ONLY_SHAPES if not f.bits else [])
            if not full and act == "f32":
                shapes = shapes[:3]
            for K, Ns in shapes:
                if f.bits and K % f.group_size:
                    continue
                out.append((f"{act}/{name}/K{K}N{Ns}", act, (f,), None, False, K, Ns, None))
                if K == 4096 or K < 512:
                    fb = WeightFormat(f.dtype, f.bits, f.group_size, True, act)
                    out.append((f"{act}/{name}+bias/K{K}N{Ns}", act, (fb,), None, False, K, Ns, None))
                    out.append((f"{act}/{name}+res/K{K}N{Ns}", act, (f,), None, True, K, Ns, None))
                    for epi in ("gelu", "silu", "gelu_approx"):
                        out.append((f"{act}/{name}+{epi}/K{K}N{Ns}", act, (f,), epi, False, K, Ns, None))
                if act == "bf16" and K >= 1536 and Ns[0] <= 8192:
                    out.append((f"{act}/{name}+rms/K{K}N{Ns}", act, (f,), None, False, K, Ns, 1e-5))
            for K, Ns, epi in FUSED_SHAPES:
                if f.bits and K % f.group_size:
                    continue
                fs = (f,) * len(Ns)
                out.append((f"{act}/{name}/fused{epi}/K{K}N{Ns}", act, fs, epi, False, K, Ns, None))
                if epi is None and act == "bf16":
                    out.append((f"{act}/{name}/fused+rms/K{K}N{Ns}", act, fs, None, False, K, Ns, 1e-5))
                    fb = tuple(WeightFormat(f.dtype, f.bits, f.group_size, True, act) for _ in Ns)
                    out.append((f"{act}/{name}/fused+bias/K{K}N{Ns}", act, fb, None, False, K, Ns, None))
    # mixed formats in one fused call (the SIMT path)
    mixed = (WeightFormat("bf16", 4, 64), WeightFormat("bf16"), WeightFormat("bf16", 8, 32))
    out.append(("bf16/mixed/fused/K256N(64,32,48)", "bf16", mixed, None, False, 256, (64, 32, 48), None))
    return out


def knob_variants(all_variants, full: bool):
    """The reduced set the knob settings run over: bf16 and f16, the benchmark shapes."""
    keep = ("K4096N(4096,)", "K4096N(14336,)", "K14336N(4096,)", "K4096N(14336, 14336)", "K4096N(4096, 1024, 1024)")
    if full:
        keep += ("K1536N(8960,)", "K8960N(1536,)", "K3072N(8192,)", "K3072N(8192, 8192)", "K128N(96,)")
    out = []
    for v in all_variants:
        label = v[0]
        if label.split("/")[0] in ("bf16", "f16") and label.endswith(keep) and "+gelu" not in label:
            if "+silu" in label or "+gelu_approx" in label or "f32" in label:
                continue
            out.append(v)
    return out


def _artifact_hash(artifact, rows: int, Ns, epilogue) -> str:
    cols = Ns[0] if epilogue == "swiglu" else sum(Ns)
    params = ",".join(f"{p.name}:{p.kind}:{p.dtype}:{int(p.output)}" for p in artifact.params)
    text = "\0".join(
        [
            artifact.target,
            artifact.entry,
            artifact.source,
            str(artifact.threads_per_group),
            str(artifact.grid(rows, cols)),
            str(artifact.dynamic_shared),
            params,
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def clear_caches() -> None:
    """After the environment changed: settings parsed again (schedules and builds are keyed by them)."""
    from mlx_metile import settings

    settings.reload()


def artifact_for(act, formats, epilogue, residual, K, Ns, rows, target, norm_eps):
    """The artifact the ops compile for such a call (None where they would not compile one)."""
    from mlx_metile.backends.cuda_device import build_target
    from mlx_metile.pipeline import compile_projection
    from mlx_metile.schedule import Shape, choose, fuses_norm
    from mlx_metile.spec import ProjectionSpec
    from mlx_metile.targets import CPU

    tgt = build_target() if target == "cuda" else CPU
    k_multiple = math.gcd(K, 256 if target == "cuda" else 64)
    cols = Ns[0] if epilogue == "swiglu" else sum(Ns)
    spec = ProjectionSpec(act, formats, epilogue, residual, k_multiple=k_multiple, norm_eps=norm_eps)
    shape = Shape(K, cols)
    if norm_eps is not None and not (target == "cuda" and fuses_norm(spec, rows, tgt, shape)):
        return None
    return compile_projection(spec, choose(spec, rows, tgt, shape), tgt.language)


def run(full: bool, only: str | None = None) -> dict[str, str]:
    base = variants(full)
    jobs = [((), v, t) for v in base for t in ("msl", "cuda")]
    for var, values in KNOBS.items():
        for value in values:
            jobs += [(((var, value),), v, "cuda") for v in knob_variants(base, full)]
    if only:
        pattern = re.compile(only)
        jobs = [
            j for j in jobs if pattern.search(f"{','.join(f'{k}={x}' for k, x in j[0]) or 'default'}|{j[2]}|{j[1][0]}")
        ]
    hashes: dict[str, str] = {}
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("MLX_METILE_")}
    current: tuple = ()
    start = time.time()
    try:
        for n, (knobs, v, target) in enumerate(jobs):
            if knobs != current:
                for k, _ in current:
                    os.environ.pop(k, None)
                for k, value in knobs:
                    os.environ[k] = value
                clear_caches()
                current = knobs
            label, act, formats, epilogue, residual, K, Ns, norm_eps = v
            for rows in ROWS:
                if target == "msl" and norm_eps is not None:
                    continue
                key = f"{','.join(f'{k}={x}' for k, x in knobs) or 'default'}|{target}|{label}|rows={rows}"
                try:
                    art = artifact_for(act, formats, epilogue, residual, K, Ns, rows, target, norm_eps)
                    if art is None:
                        continue
                    hashes[key] = _artifact_hash(art, rows, Ns, epilogue)
                except Exception as e:  # noqa: BLE001 - a refused variant is part of what is compared
                    hashes[key] = "error:" + hashlib.sha256(f"{type(e).__name__}: {e}".encode()).hexdigest()[:20]
            if n % 200 == 0:
                print(f"  {n}/{len(jobs)} variants, {time.time() - start:.0f} s", file=sys.stderr, flush=True)
    finally:
        for k, _ in current:
            os.environ.pop(k, None)
        os.environ.update(saved)
    return hashes


def combined(hashes: dict[str, str]) -> str:
    return hashlib.sha256("\n".join(f"{k} {v}" for k, v in sorted(hashes.items())).encode()).hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, help="where to write the per-variant hashes (JSON)")
    ap.add_argument("--quick", action="store_true", help="fewer f32 shapes and knob variants")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two hash files")
    ap.add_argument("--only", help="a regular expression: hash only the variants whose key it matches")
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(p.read_text())["variants"] for p in args.compare)
        keys = a.keys() & b.keys() if args.only else a.keys() | b.keys()  # --only: the variants both hashed
        if args.only:
            keys = {k for k in keys if re.search(args.only, k)}
        differ = sorted(k for k in keys if a.get(k) != b.get(k))
        for k in differ:
            print(f"{k}: {a.get(k, '-')} -> {b.get(k, '-')}")
        print(f"{len(differ)} of {len(keys)} variants differ")
        sys.exit(1 if differ else 0)
    hashes = run(full=not args.quick, only=args.only)
    total = combined(hashes)
    errors = sum(v.startswith("error:") for v in hashes.values())
    print(f"{len(hashes)} variants ({errors} refused), combined hash {total}")
    if args.out:
        args.out.write_text(json.dumps({"combined": total, "variants": hashes}, indent=0, sort_keys=True))


if __name__ == "__main__":
    main()
