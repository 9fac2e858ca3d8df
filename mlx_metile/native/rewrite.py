"""Rewrites of a decoded code region, each accepted only if interpretation shows identical bits.

Numerical policy (what a rewrite may assume):
- Exactness is bits, under every model of `floats.MODELS`: the public applegpu description
  (binary32 flushed, canonical NaNs, fmul as fma with +0.0) and IEEE 754 with and without
  flushing (NaN payloads propagated). Where the hardware's choice is not public, a rewrite must
  be right under each choice, so none hangs on an unknown.
- `fma-identity`: `ffma d, a, 1.0, -0.0` (and hfma) becomes `mov d, a` only when `a` was written
  earlier in the same block by a float operation of the same width (saturated or not): such a
  value is already rounded, flushed and NaN-canonical as the model makes it, so a * 1.0 + -0.0
  gives a back, -0 and +0 included (+0 + -0 is +0 when rounding to nearest). A live-in `a`
  could be a subnormal (flushed by fma, kept by mov) or a signalling or payload NaN (quieted or
  canonicalised by fma, kept by mov): refused. The -0.0 addend needs the 8-byte fma form and mov
  has 6 bytes, so the nearest instruction of the block in a short form takes its long form (the
  same fields) and the block keeps its length; without one, the rewrite is refused.
- `interleave`: independent instructions are reordered (list scheduling that puts distance
  between a result and its first use). A dependency is any shared 16-bit half between a write
  and a later read or write, addends included; a read with the discard hint (^) orders like a
  write. Nothing moves across an opaque instruction.
Every candidate is interpreted against the original over edge values (+-0, +-Inf, quiet and
signalling NaNs with payloads, subnormals, the extremes, values next to 1) and random bits;
the first difference rejects it, with the inputs that show it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from . import floats, g13, interp
from .errors import EncodingError, InterpretError, RewriteError
from .floats import Model
from .g13 import Decoded, Instruction, Src

# The version of the rewrites and their checks: part of the key a patched archive is stored under
# (a change to a rewrite or to what it is verified over makes every archive patched before stale).
REWRITE_VERSION = 1

F32_EDGES = (
    0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FC01234, 0x7FA00000,
    0xFF812345, 0x00000001, 0x807FFFFF, 0x00800000, 0x3F800000, 0xBF800000, 0x7F7FFFFF, 0x34000000,
    0x3F800001, 0x0DA24260,
)  # fmt: skip
F16_EDGES = (
    0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7E15, 0x7D00, 0xFD55, 0x0001, 0x83FF, 0x0400,
    0x3C00, 0xBC00, 0x7BFF, 0x3C01, 0x1400,
)  # fmt: skip


@dataclass(frozen=True)
class Policy:
    """How rewrites are chosen and checked: which, under which models, with how many trials."""

    rewrites: tuple[str, ...] = ("fma-identity", "interleave")
    models: tuple[Model, ...] = floats.MODELS
    trials: int = 96  # random trials, on top of one trial per (live-in, edge value)
    seed: int = 0
    # byte offsets inside the region that code elsewhere may branch to: instruction boundaries
    # there are kept and nothing moves across them (control flow is opaque, so the caller says)
    entries: tuple[int, ...] = ()


@dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: str = ""


@dataclass
class Outcome:
    """What a pass did: the region it returns, and each rewrite tried with its verdict."""

    region: list[Decoded]
    accepted: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str]] = field(default_factory=list)


# ---- dependencies ---------------------------------------------------------------------------------


def _touches(ins: Decoded) -> tuple[frozenset[int], frozenset[int]]:
    """(halves read, halves written or discarded)."""
    assert isinstance(ins, Instruction)
    return ins.reads(), ins.writes() | ins.discards()


def depends(first: Decoded, later: Decoded) -> bool:
    """Whether `later` must stay after `first`: any opaque one, or a half written by one and read
    or written by the other."""
    if first.opaque or later.opaque:
        return True
    r1, w1 = _touches(first)
    r2, w2 = _touches(later)
    return bool(w1 & (r2 | w2) or r1 & w2)


def check_order(region: list[Decoded], order: list[int]) -> None:
    """RewriteError unless `order` (a permutation of positions) keeps every dependency."""
    if sorted(order) != list(range(len(region))):
        raise RewriteError(f"order {order}: not a permutation of {len(region)} positions")
    where = {old: new for new, old in enumerate(order)}
    for i in range(len(region)):
        for j in range(i + 1, len(region)):
            if where[i] > where[j] and depends(region[i], region[j]):
                raise RewriteError(f"moves {region[j].text} (#{j}) before {region[i].text} (#{i}), which it depends on")


def offsets(region: list[Decoded]) -> list[int]:
    out, at = [], 0
    for ins in region:
        out.append(at)
        at += ins.size
    return out


def blocks(region: list[Decoded], entries: Iterable[int] = ()) -> list[tuple[int, int]]:
    """[start, end) spans of interpretable instructions entered only at their first: split at
    every opaque instruction and before every instruction that starts at an entry offset."""
    cut = set(entries)
    out, start = [], 0
    for k, (ins, at) in enumerate(zip(region, offsets(region))):
        if at in cut and k > start:
            out.append((start, k))
            start = k
        if ins.opaque:
            if k > start:
                out.append((start, k))
            start = k + 1
    if start < len(region):
        out.append((start, len(region)))
    return out


# ---- verification ---------------------------------------------------------------------------------


def _segments(region: list[Decoded], entries: tuple[int, ...]) -> tuple[list[list[Decoded]], list[tuple[int, bytes]]]:
    """The blocks (as instruction lists), and what must not move: each opaque instruction's
    (byte offset, bytes) and each entry offset's (offset, b"")."""
    runs = [region[a:b] for a, b in blocks(region, entries)]
    at = offsets(region)
    fixed = [(at[k], ins.encode()) for k, ins in enumerate(region) if ins.opaque]
    fixed += [(e, b"") for e in entries if e in at]
    return runs, sorted(fixed)


def _live_in(programs: Iterable[list[Decoded]]) -> tuple[list[int], list[int], set[int], set[int]]:
    """Halves read before written (registers, uniforms), and which of them are read as 16-bit
    values and which as halves of 32-bit ones (each gets the edge values of its width)."""
    regs: set[int] = set()
    uniforms: set[int] = set()
    narrow: set[int] = set()
    wide: set[int] = set()
    for program in programs:
        written: set[int] = set()
        for ins in program:
            assert isinstance(ins, Instruction)
            for s in ins.srcs:
                if s.kind not in ("reg", "uniform"):
                    continue
                fresh = [h for h in s.halves if s.kind == "uniform" or h not in written]
                (regs if s.kind == "reg" else uniforms).update(fresh)
                key = (lambda h: h) if s.kind == "reg" else (lambda h: -1 - h)
                (wide if s.size == 32 else narrow).update(key(h) for h in fresh)
            written.update(ins.writes())
    return sorted(regs), sorted(uniforms), narrow, wide


def _near_one(rng: random.Random) -> int:
    return rng.getrandbits(1) << 31 | rng.randint(118, 136) << 23 | rng.getrandbits(23)


def _fill(file: list[int], halves: list[int], pick: Callable[[], int], rng: random.Random) -> None:
    """Fill `halves` of a file: whole 32-bit pairs from `pick`, or from binary16 edges."""
    for h in halves:
        if h & 1 == 0 or h - 1 not in halves:
            v = pick()
            if rng.random() < 0.25:
                v = rng.choice(F16_EDGES) | rng.choice(F16_EDGES) << 16
            file[h & ~1] = v & 0xFFFF
            file[h | 1] = v >> 16


def _inputs(regs: list[int], uniforms: list[int], narrow: set[int], wide: set[int], trials: int, seed: int):
    """States to run: one per (live-in, edge value of the width it is read at) over near-one
    values, then random ones mixing random bits, edges and near-one values."""
    rng = random.Random(seed)
    base = interp.State()
    _fill(base.regs, regs, lambda: _near_one(rng), rng)
    _fill(base.uniforms, uniforms, lambda: _near_one(rng), rng)
    yield base
    for file_name, halves, key in (("regs", regs, lambda h: h), ("uniforms", uniforms, lambda h: -1 - h)):
        for p in sorted({h & ~1 for h in halves if key(h) in wide}):
            for edge in F32_EDGES:
                s = base.copy()
                f = getattr(s, file_name)
                f[p], f[p + 1] = edge & 0xFFFF, edge >> 16
                yield s
        for h in (h for h in halves if key(h) in narrow):
            for edge in F16_EDGES:
                s = base.copy()
                getattr(s, file_name)[h] = edge
                yield s
    kinds = (lambda: rng.getrandbits(32), lambda: rng.choice(F32_EDGES), lambda: _near_one(rng))
    for _ in range(trials):
        s = interp.State()
        _fill(s.regs, regs, lambda: rng.choice(kinds)(), rng)
        _fill(s.uniforms, uniforms, lambda: rng.choice(kinds)(), rng)
        yield s


def verify(original: list[Decoded], rewritten: list[Decoded], policy: Policy = Policy()) -> Verdict:
    """Whether `rewritten` gives the same bits as `original` in every register, for every input
    tried, under every model of the policy; same length, opaque bytes unmoved."""
    for k, ins in enumerate(rewritten):  # what is verified is what gets written
        try:
            same = ins.opaque or g13.decode(ins.encode()) == [ins]
        except EncodingError as e:
            return Verdict(False, f"#{k} cannot be encoded: {e}")
        if not same:
            return Verdict(False, f"#{k} ({ins.text}) does not decode back to itself")
    size_a, size_b = sum(i.size for i in original), sum(i.size for i in rewritten)
    if size_a != size_b:
        return Verdict(False, f"length changes from {size_a} to {size_b} bytes")
    for e in policy.entries:
        if e not in offsets(original):
            return Verdict(False, f"entry offset {e} is not an instruction boundary of the original")
    runs_a, fixed_a = _segments(original, policy.entries)
    runs_b, fixed_b = _segments(rewritten, policy.entries)
    if fixed_a != fixed_b or len(runs_a) != len(runs_b):
        return Verdict(False, "an opaque instruction or an entry moved; no rewrite may cross one")
    for k, (a, b) in enumerate(zip(runs_a, runs_b)):
        if sum(i.size for i in a) != sum(i.size for i in b):
            return Verdict(False, f"block {k} changes length; instruction boundaries outside it would move")
    for k, (a, b) in enumerate(zip(runs_a, runs_b)):
        regs, uniforms, narrow, wide = _live_in([a, b])
        for n, state in enumerate(_inputs(regs, uniforms, narrow, wide, policy.trials, policy.seed + k)):
            for model in policy.models:
                try:
                    got_a = interp.run(a, state, model).regs
                    got_b = interp.run(b, state, model).regs
                except InterpretError as e:
                    return Verdict(False, f"cannot be interpreted: {e}")
                if got_a != got_b:
                    h = next(i for i in range(len(got_a)) if got_a[i] != got_b[i])
                    shown = {f"r{x >> 1}{'lh'[x & 1]}": f"{state.regs[x]:#06x}" for x in regs}
                    return Verdict(
                        False,
                        f"block {k}, trial {n}, model {model.name}: r{h >> 1}{'lh'[h & 1]} is "
                        f"{got_a[h]:#06x} originally, {got_b[h]:#06x} rewritten; inputs {shown}",
                    )
    return Verdict(True, "identical bits")


def accept(original: list[Decoded], rewritten: list[Decoded], policy: Policy = Policy()) -> list[Decoded]:
    """`rewritten`, or RewriteError saying why it is not the same computation."""
    verdict = verify(original, rewritten, policy)
    if not verdict.ok:
        raise RewriteError(f"rewrite refused: {verdict.detail}")
    return rewritten


# ---- rewrites ------------------------------------------------------------------------------------

_ONE, _MINUS_ZERO = 0x30, 0x80  # 8-bit float immediates 1.0 and -0.0


def _is_fimm(s: Src, bits: int) -> bool:
    return s.kind == "fimm" and s.value == bits and not s.abs and not s.neg


def _identity_source(ins: Instruction) -> Src | None:
    """`a` of `fma d, a, 1.0, -0.0` (either multiplicand), else None."""
    if ins.op not in ("ffma", "hfma") or ins.sat:
        return None
    a, b, c = ins.srcs
    if not _is_fimm(c, _MINUS_ZERO):
        return None
    x = a if _is_fimm(b, _ONE) else b if _is_fimm(a, _ONE) else None
    if x is None or x.kind != "reg" or x.abs or x.neg:
        return None
    return x


def _canonical_producer(block: list[Decoded], k: int, x: Src) -> bool:
    """Whether the halves of `x` were last written, before position k of the block, all at once by
    a float operation whose result has the width of `x`."""
    for j in range(k - 1, -1, -1):
        w = block[j].writes()
        if not w & set(x.halves):
            continue
        prod = block[j]
        assert isinstance(prod, Instruction)
        return bool(prod.form.arith) and prod.dest.halves == x.halves
    return False


def _as_mov(block: list[Decoded], k: int) -> list[Decoded] | None:
    """The block with its fma identity at k as a mov (6 bytes); an 8-byte fma's two spare bytes go
    to the nearest instruction of the block in a short form, re-encoded in its long form (the same
    fields), so the block keeps its length; boundaries move inside the block only, which is entered
    at its start alone. None: no instruction of the block has a short form to lengthen."""
    ins = block[k]
    assert isinstance(ins, Instruction)
    x = _identity_source(ins)
    assert x is not None
    mov = Instruction("mov", ins.dest, (x,))
    out = list(block)
    out[k] = mov
    spare = ins.size - mov.size
    if spare == 0:
        return out
    for j in sorted(range(len(out)), key=lambda j: (abs(j - k), -j)):
        if j != k and isinstance(out[j], Instruction):
            lengths = out[j].form.lengths
            if len(lengths) > 1 and out[j].size == lengths[0] and lengths[1] - lengths[0] == spare:
                out[j] = out[j].with_size(lengths[1])
                return out
    return None


def fma_identity(region: list[Decoded], entries: tuple[int, ...] = ()) -> Iterable[tuple[str, list[Decoded] | str]]:
    """Candidates: one per `fma d, a, 1.0, -0.0` whose `a` is a float result of the same block."""
    for start, end in blocks(region, entries):
        block = region[start:end]
        for k, ins in enumerate(block):
            assert isinstance(ins, Instruction)
            x = _identity_source(ins)
            if x is None:
                continue
            label = f"fma-identity at #{start + k} ({ins.text})"
            new = _as_mov(block, k)
            if not _canonical_producer(block, k, x):
                yield label, f"{x.text} is not a float result of this block: -0, subnormals, NaN payloads unproven"
            elif new is None:
                yield label, "no instruction of the block has a short form to take up the two spare bytes"
            else:
                yield label, region[:start] + new + region[end:]


def fma_identity_unchecked(region: list[Decoded], k: int) -> list[Decoded]:
    """The mov replacement at position k with no provenance check (for tests of the checker)."""
    ins = region[k]
    if not isinstance(ins, Instruction) or _identity_source(ins) is None:
        raise RewriteError(f"#{k} ({ins.text}) is no fma of a register by 1.0 plus -0.0")
    new = _as_mov(region, k)
    if new is None:
        raise RewriteError(f"#{k} ({ins.text}): no instruction in a short form takes up the spare bytes")
    return new


def schedule(block: list[Decoded]) -> list[int]:
    """A dependency-respecting order: at each step the ready instruction whose inputs were
    produced longest ago (ties: original order), so that chains interleave."""
    n = len(block)
    preds = [{i for i in range(j) if depends(block[i], block[j])} for j in range(n)]
    placed: dict[int, int] = {}
    order: list[int] = []
    while len(order) < n:
        ready = [j for j in range(n) if j not in placed and preds[j] <= placed.keys()]
        producers = [
            max((placed[i] for i in preds[j] if block[i].writes() & block[j].reads()), default=-1) for j in ready
        ]
        best = min(range(len(ready)), key=lambda r: (producers[r], ready[r]))
        placed[ready[best]] = len(order)
        order.append(ready[best])
    return order


def interleave(region: list[Decoded], entries: tuple[int, ...] = ()) -> Iterable[tuple[str, list[Decoded] | str]]:
    out = list(region)
    for start, end in blocks(region, entries):
        block = region[start:end]
        order = schedule(block)
        if order != list(range(len(block))):
            check_order(block, order)
            out[start:end] = [block[i] for i in order]
    if out != region:
        yield "interleave", out


# each yields (label, candidate region), or (label, reason) for one the policy refuses untried
REWRITES: dict[str, Callable[[list[Decoded], tuple[int, ...]], Iterable[tuple[str, list[Decoded] | str]]]] = {
    "fma-identity": fma_identity,
    "interleave": interleave,
}


def run(region: list[Decoded], policy: Policy = Policy()) -> Outcome:
    """Try each rewrite of the policy in turn on the current region; keep those that verify."""
    for name in policy.rewrites:
        if name not in REWRITES:
            raise RewriteError(f"rewrite {name!r}: not one of {', '.join(REWRITES)}")
    outcome = Outcome(list(region))
    tried: set[str] = set()  # a candidate refused once stays refused
    for name in policy.rewrites:
        progress = True
        while progress:
            progress = False
            for label, candidate in REWRITES[name](outcome.region, policy.entries):
                if label in tried:
                    continue
                tried.add(label)
                if isinstance(candidate, str):  # not tried: the policy refuses it before interpreting
                    outcome.rejected.append((label, candidate))
                    continue
                verdict = verify(outcome.region, candidate, policy)
                if verdict.ok:
                    outcome.region = candidate
                    outcome.accepted.append(label)
                    progress = name != "interleave"
                    break
                outcome.rejected.append((label, verdict.detail))
    return outcome
