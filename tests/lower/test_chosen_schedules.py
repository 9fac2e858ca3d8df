"""Every Schedule `choose` makes over the grid of tests/schedule/decisions.py is legal for its
spec - the lowering (mlx_metile.lower.lower) raises no LowerError - and the kernel it builds asks
for no more shared memory than the target gives.

Which (spec, Schedule) pairs are lowered (all 5,500 would take minutes):
- every tensor-core pair of sm_90, with the bias and the residual left out of the spec (they add
  loads and stores to the epilogue only, which no Schedule field shapes);
- of sm_80, the pairs that are not sm_90's but for the shared-memory facts, and those whose rings
  the facts touch (dynamic shared memory, shared x); of sm_86, the shared-x pairs (the lowering
  checks their rings against the block's shared memory);
- each SIMT Schedule once, with the plainest spec it was chosen for;
- the fused RMSNorm's Schedules on sm_90 (wherever fuses_norm takes it), each once.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest
from mlx_metile.kernels import projection_program

from mlx_metile.ir import bind_meta, verify
from mlx_metile.lower import LowerError, lower
from mlx_metile.schedule import choose, fuses_norm
from mlx_metile.schedule.geometry import TILE, slot_bytes
from mlx_metile.targets import cuda_target
from mlx_metile.targets.cuda import DRIVER_SHARED_PER_BLOCK, STATIC_SHARED_BYTES
from tests.schedule import decisions


def plain(spec):
    """The spec without biases and residual."""
    weights = tuple(replace(w, has_bias=False, bias_dtype="f32") for w in spec.weights)
    return replace(spec, weights=weights, has_residual=False)


def facts_free(s):
    return s.with_fields(smem_block=0, smem_sm=0)


def ring_touched(spec, s) -> bool:
    """Whether the target's shared memory can change the kernel: shared x, or rings over 48 KB."""
    if s.xshare:
        return True
    return s.staged and s.SG * s.stages * slot_bytes(spec, s.BN // TILE, s.groups, s.row_pad) > STATIC_SHARED_BYTES


def pairs() -> list[tuple]:
    table = decisions.table()
    by_target: dict[str, set] = {"sm_90": set(), "sm_80": set()}
    simt: dict = {}
    for case, chosen in table.items():
        for s in chosen:
            if s.kind == "mma":
                by_target[case.target].add((plain(case.spec), s))
            else:
                simt.setdefault(s, set()).add(case.spec)
    sm90 = by_target["sm_90"]
    seen = {(spec, facts_free(s)) for spec, s in sm90}
    sm80 = {(sp, s) for sp, s in by_target["sm_80"] if (sp, facts_free(s)) not in seen or ring_touched(sp, s)}
    sm86 = decisions.decide(targets={"sm_86": cuda_target("sm_86")})
    sm86_x = {(plain(c.spec), s) for c, ss in sm86.items() for s in ss if s.xshare}
    norms: dict = {}
    target, cfg = decisions.TARGETS["sm_90"], decisions.defaults()
    for case in table:
        spec = plain(case.spec)
        if case.target == "sm_90" and spec.act_dtype == "bf16" and spec.epilogue is None:
            normed = replace(spec, norm_eps=1e-5)
            for rows in decisions.ROWS:
                if fuses_norm(normed, rows, target, case.shape, cfg):
                    norms.setdefault(choose(normed, rows, target, case.shape, cfg), normed)
    plainest = {
        s: min(specs, key=lambda sp: (len(sp.weights), sp.epilogue or "", sp.has_residual, sp.name()))
        for s, specs in simt.items()
    }
    return sorted(sm90 | sm80 | sm86_x | {(sp, s) for s, sp in norms.items()}, key=str) + sorted(
        ((sp, s) for s, sp in plainest.items()), key=str
    )


@lru_cache(maxsize=1)
def lowered() -> list[tuple]:
    """(spec, Schedule, KernelDef or the LowerError) of each pair."""
    out = []
    for spec, s in pairs():
        program = bind_meta(projection_program(spec), s.meta())
        verify(program)
        try:
            out.append((spec, s, lower(program, s, spec)))
        except LowerError as e:
            out.append((spec, s, e))
    return out


def test_every_chosen_schedule_lowers():
    done = lowered()
    failed = [f"{spec.name()} {s}: {k}" for spec, s, k in done if isinstance(k, LowerError)]
    assert not failed, f"{len(failed)} of {len(done)} pairs:\n" + "\n".join(failed[:10])
    kinds = {(s.kind, s.staged, bool(s.xshare), spec.norm_eps is not None) for spec, s, _ in done}
    assert {("mma", False, False, False), ("mma", True, False, False), ("mma", True, True, False)} <= kinds
    assert {("mma", True, False, True), ("simd_splitk", False, False, False), ("tiled", False, False, False)} <= kinds


@pytest.mark.parametrize("arch", ["sm_90", "sm_80"])
def test_kernels_ask_for_the_shared_memory_the_target_has(arch):
    """Dynamic shared memory (over the 48 KB a kernel may declare) only for the staged rings and at
    most a block's; the blocks per SM asked for (the launch bound) no more than the rings let share
    an SM, nor than the Schedule's `blocks`."""
    target = cuda_target(arch)
    kernels = [(spec, s, k) for spec, s, k in lowered() if s.kind == "mma" and s.smem_block == target.smem_block]
    dynamic = 0
    for spec, s, k in kernels:
        assert k.dynamic_shared == 0 or STATIC_SHARED_BYTES < k.dynamic_shared <= target.smem_block, (spec.name(), s)
        assert k.dynamic_shared == 0 or s.staged, (spec.name(), s)
        assert k.min_groups <= s.blocks, (spec.name(), s)
        if k.dynamic_shared and k.min_groups > 1:
            assert k.min_groups * (k.dynamic_shared + DRIVER_SHARED_PER_BLOCK) <= target.smem_sm, (spec.name(), s)
        dynamic += k.dynamic_shared > 0
    assert dynamic > 20, dynamic
