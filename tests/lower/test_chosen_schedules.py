"""Every Schedule `choose` makes over the grid of tests/schedule/decisions.py is legal for its
spec - the lowering (mlx_metile.lower.lower) raises no LowerError - and the kernel it builds asks
for no more shared memory than the target gives.

Which (spec, Schedule) pairs are lowered (all 5,500 would take minutes; these take seconds):
- of the tensor-core pairs of sm_90 and of the fused RMSNorm (wherever fuses_norm takes it), each
  Schedule with each fusion it was chosen for (the weights' count, epilogue, norm), and each spec,
  at least once - bias and residual left out (they add epilogue loads that no Schedule field
  shapes);
- of sm_80, the pairs that are not sm_90's but for the shared-memory facts, and those whose rings
  the facts touch (dynamic shared memory, shared x); of sm_86, the shared-x pairs (the lowering
  checks their rings against the block's shared memory);
- the SIMT Schedules: each combination of their fields but the tile's rows and columns (BM, NC)
  with its smallest tile, and each BM - the SIMT lowerings check the tile only through the
  meta-parameters bound from the Schedule - each with the plainest spec it was chosen for.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache

import pytest

from mlx_metile import kernels
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


def fusion(spec) -> tuple:
    return (len(spec.weights), spec.epilogue, spec.norm_eps is not None)


def covering(candidates) -> list[tuple]:
    """Of (spec, Schedule) pairs, enough to have each Schedule with each fusion it was chosen for,
    and each spec, at least once."""
    have, specs, out = set(), set(), []
    for spec, s in sorted(candidates, key=str):
        key = (facts_free(s), fusion(spec))
        if key not in have or spec not in specs:
            out.append((spec, s))
            have.add(key)
            specs.add(spec)
    return out


def plainest(specs):
    return min(specs, key=lambda sp: (len(sp.weights), sp.epilogue or "", sp.has_residual, sp.name()))


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
    target, cfg = decisions.TARGETS["sm_90"], decisions.defaults()
    for case in table:
        spec = plain(case.spec)
        if case.target == "sm_90" and spec.act_dtype == "bf16" and spec.epilogue is None:
            normed = replace(spec, norm_eps=1e-5)
            for rows in decisions.ROWS:
                if fuses_norm(normed, rows, target, case.shape, cfg):
                    sm90.add((normed, choose(normed, rows, target, case.shape, cfg)))
    seen = {(spec, facts_free(s)) for spec, s in sm90}
    sm80 = {(sp, s) for sp, s in by_target["sm_80"] if (sp, facts_free(s)) not in seen or ring_touched(sp, s)}
    sm86 = decisions.decide(targets={"sm_86": cuda_target("sm_86")})
    sm86_x = {(plain(c.spec), s) for c, ss in sm86.items() for s in ss if s.xshare}
    tiles: dict = {}
    for s in sorted(simt, key=lambda s: (s.BM * s.NC, str(s))):
        tiles.setdefault(s.with_fields(BM=0, NC=0), s)
        tiles.setdefault((s.kind, s.BM), s)
    simt_pairs = [(plainest(simt[s]), s) for s in set(tiles.values())]
    return covering(sm90) + sorted(sm80 | sm86_x, key=str) + sorted(simt_pairs, key=str)


@lru_cache(maxsize=1)
def lowered() -> list[tuple]:
    """(spec, Schedule, KernelDef or the LowerError) of each pair."""
    out = []
    for spec, s in pairs():
        program = bind_meta(kernels.projection_program(spec), s.meta())
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
