"""spec -> tile program -> schedule -> thread-level kernel -> source: each
stage a plain function, the whole cached per (spec, row bucket, target)."""

from __future__ import annotations

import os
from functools import lru_cache

from ..codegen import RENDERERS
from ..compiler import choose, lower
from ..compiler.lower_mma import chunk_k as mma_chunk
from ..compiler.lower_mma import mma_supported
from ..compiler.lower_mma_staged import LAYOUTS, block_warps, mma_warps, ring_rule, staged_max_tiles, wave_blocks
from ..compiler.lower_mma_xshare import xshare_warps
from ..ir import bind_meta, format_program, verify
from ..kernels import projection_program
from ..spec import ProjectionSpec
from .artifact import Artifact
from .debug import dump


@lru_cache(maxsize=512)
def compile_projection(spec: ProjectionSpec, rows_bucket: int, target: str = "msl", layout: int = 0) -> Artifact:
    """The kernel of `spec` for calls of up to `rows_bucket` rows on `target`; `layout`
    (CUDA: lower_mma_staged.column_layout of the weight's shape - the same for all row
    buckets but where bucket_layout gives some single products TILES in some buckets, which
    keeps the sums; 0 several column tiles per block, 1 one tile, so that narrow
    outputs still spread over the GPU, 2 and 3 one tile and K split over more warps,
    4 one tile and, at 1-8 rows, 5 blocks per SM (single dense products: 2 warps), 5 one tile
    and the 48 KB ring for dense weights at 1-4 rows)."""
    if target not in RENDERERS:
        raise ValueError(f"unknown target {target!r}; known: {sorted(RENDERERS)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS} (lower_mma_staged.column_layout), got {layout!r}")
    program = projection_program(spec)
    mma = target == "cuda" and tensor_cores() and mma_supported(spec)
    if spec.norm_eps is not None and not mma:
        raise ValueError(
            f"{spec.name()}: a fused RMSNorm needs CUDA's tensor-core schedule (sm_80+, bf16/f16 activations); "
            "elsewhere normalise x first (mx.fast.rms_norm)"
        )
    ranges = mma_warps(spec, layout) if mma else 0  # K ranges: the sum order
    warps = block_warps(spec, layout, rows_bucket, ranges) if mma else 0
    schedule = choose(
        rows_bucket,
        spec.accumulators,
        tuple(w.bits for w in spec.weights),
        tuple(w.group_size for w in spec.weights),
        tuple(w.dtype for w in spec.weights),
        spec.act_dtype,
        target,
        mma_chunk(spec) if mma else 0,
        warps,
        staged_max_tiles(spec, warps, layout, rows_bucket) if mma else 4,
        ranges,
        wave_blocks(spec, layout, rows_bucket) if mma else 0,
        xshare_warps(spec, layout, rows_bucket) if mma else 0,
        ring_rule(spec, layout, rows_bucket) if mma else (0, 0),
    )
    bound = bind_meta(program, schedule.meta())
    verify(bound)
    dump("ir", spec.name(), format_program(bound))
    dump("schedule", spec.name(), schedule.describe())
    kernel = lower(bound, schedule, {"K": spec.k_divisor}, spec.vector_buffers(), spec)
    kernel.name = f"{spec.name()}_m{schedule.BM}"
    source = RENDERERS[target]().render(kernel)
    dump(target, kernel.name, source)
    return Artifact(target, source, kernel.name, schedule, tuple(kernel.params), kernel.dynamic_shared)


def tensor_cores() -> bool:
    """Whether the CUDA build target has mma.sync m16n8k16 (sm_80 and later);
    MLX_METILE_CUDA_MMA=0 turns the tensor-core schedule off."""
    from ..cuda_arch import arch_number, cuda_arch

    if os.environ.get("MLX_METILE_CUDA_MMA", "1") == "0":
        return False
    return arch_number(cuda_arch()) >= 80


@lru_cache(maxsize=512)
def emulator_object(artifact: Artifact) -> str:
    """Build the MSL artifact for the CPU emulator; the path of its object."""
    from ..emu.build import build_kernel
    from ..emu.translate import translate

    return str(build_kernel(translate(artifact.source, artifact.entry)))


def emulation_enabled() -> bool:
    return os.environ.get("MLX_METILE_EMULATE", "") not in ("", "0")
