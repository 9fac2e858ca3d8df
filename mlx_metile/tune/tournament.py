"""A tournament: for one call site and row bucket, every candidate gated for accuracy, the ones that
pass timed against native, and a decision - stored, and installed where the dispatch reads it.

    d = mlx_metile.tune.tournament(x, [w], rows=8, extra=[("mine", my_fused_linear)])
    d.chosen      # "native", "cpu", "mine", ...
    d.records     # per candidate: gate result, times, ratios to native, status
    d.rejected    # candidate -> why it was not chosen
"""

from __future__ import annotations

import hashlib
import json
import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial

import mlx.core as mx
import numpy as np

from .. import dispatch
from ..schedule import Route, row_bucket, tuned
from . import gate as gates
from . import identity
from .candidates import NATIVE, Candidate, candidates, incumbent_of, margin_of
from .protocol import CONTROL, Clock, Protocol, compete
from .site import Site
from .store import Store, StoreError
from .tolerance import TOLERANCE_VERSION

Progress = Callable[[str, bool], None]  # (message, whether a decision is finished)


@dataclass
class Record:
    """One candidate in one tournament."""

    name: str
    family: str
    gate: str  # "pass", "fail", or "reference" (native: measured, never gated)
    error: float  # the largest |error| / bound over the gate's finite elements (inf: a failure of kind)
    status: str  # chosen | native | beaten | gated out | slower | within margin | inconclusive | ...
    reason: str = ""
    compile_s: float | None = None
    per_call_s: float | None = None
    calls: int = 0  # calls per timed sample
    ratio: tuple[float, float, float] | None = None  # (low quantile, median, high quantile) of t / t_native
    confirm: tuple[float, float, float] | None = None  # the same, of the pairwise confirmation
    threshold: float | None = None  # the high quantile it had to be under
    incumbent: bool = False  # it runs what the hand rules give the call (protocol, rule 7)
    versus_incumbent: tuple[float, float, float] | None = None  # its pairwise t / t_incumbent (rule 7)

    def as_dict(self) -> dict:
        return {k: (_finite(v) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _finite(v: float):
    return v if math.isfinite(v) else str(v)


@dataclass
class Decision:
    chosen: str
    bucket: int
    site: str  # what was tuned, in words
    route: Route | None  # what the dispatch runs; None where nothing can be installed (an extra, no backend)
    records: dict[str, Record]
    rejected: dict[str, str]
    key: str
    context: dict = field(repr=False)
    from_store: bool = False
    seconds: float = 0.0
    seed: int | None = None
    _site: Site | None = field(default=None, repr=False)

    def __str__(self) -> str:
        origin = "stored" if self.from_store else f"tuned in {self.seconds:.1f}s"
        lines = [f"{self.site}, rows <= {self.bucket}: {self.chosen} ({origin}, key {self.key[:12]})"]
        for r in self.records.values():
            ratio = (
                "" if r.ratio is None else f" ratio q-lo/median/q-hi {r.ratio[0]:.3f}/{r.ratio[1]:.3f}/{r.ratio[2]:.3f}"
            )
            name = f"{r.name} (incumbent)" if r.incumbent else r.name
            lines.append(f"  {name:24s} {r.status:14s} gate {r.gate}{ratio}")
        for name, why in self.rejected.items():
            lines.append(f"  rejected {name}: {why}")
        return "\n".join(lines)

    @property
    def table_key(self):
        s = self._site
        if s is None or s.spec is None:
            return None
        return tuned.key(s.target, s.spec, self.bucket, s.shape)


# -- keys -------------------------------------------------------------------------------------
def context(site: Site, bucket: int, cands: list[Candidate], protocol: Protocol, draws: int, invariant: bool) -> dict:
    """Everything a decision depends on: what it is keyed by in the store."""
    return {
        "versions": identity.versions(),
        "device": identity.device_identity(site.backend),
        "compiler": identity.compiler_identity(site.backend),
        "sources": identity.sources_hash(),
        "settings": identity.keyed_settings(),
        "site": site.signature(),
        "bucket": bucket,
        "candidates": [[c.name, c.family, c.identity, c.incumbent] for c in cands],
        "margins": {c.family: margin_of(c.family) for c in cands if c.family != NATIVE},
        "protocol": protocol.key(),
        "gate": {"draws": draws, "invariant": invariant, "tolerance": TOLERANCE_VERSION},
    }


def key_of(ctx: dict) -> str:
    return hashlib.sha256(json.dumps(ctx, sort_keys=True, default=str).encode()).hexdigest()


def route_dict(route: Route | None) -> dict | None:
    return None if route is None else route.as_dict()


def route_of(d: dict | None) -> Route | None:
    return None if d is None else Route.from_dict(d)


# -- one tournament ------------------------------------------------------------------------------
def decide(
    site: Site,
    bucket: int,
    extra: Sequence[tuple[str, Callable]] = (),
    *,
    draws: int = 3,
    invariant: bool = False,
    protocol: Protocol | None = None,
    clock: Clock | None = None,
    rng: np.random.Generator | None = None,
    seed: int | None = None,
    store: Store | None = None,
    retune: bool = False,
    progress: Progress | None = None,
) -> Decision:
    """The decision for `site` at row bucket `bucket`: from the store where its key is there (and
    not `retune`), else from a tournament (then stored)."""
    protocol = protocol or Protocol()
    cands = candidates(site, bucket, extra)
    by_name = {c.name: c for c in cands}
    ctx = context(site, bucket, cands, protocol, draws, invariant)
    key = key_of(ctx)
    if store is not None and not retune:
        found = _stored(store, key, by_name, site, bucket)
        if found is not None:
            if progress:
                progress(f"{site.describe()}, rows <= {bucket}: {found.chosen} (stored)", True)
            return found
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    rng = rng or np.random.default_rng(seed)
    t0 = time.perf_counter()
    if progress:
        progress(f"{site.describe()}, rows <= {bucket}: gating {len(cands)} candidates", False)
    runners = {c.name: c.runner(site) for c in cands}
    rounding = {c.name: c.operand_rounding for c in cands}
    results = gates.gate(site, runners, bucket, rng, draws, invariant, rounding)
    records: dict[str, Record] = {}
    rejected: dict[str, str] = {}
    for c in cands:
        g = results[c.name]
        if c.family == NATIVE:
            records[c.name] = Record(c.name, c.family, "reference", g.worst, "native")
        elif g.passed:
            records[c.name] = Record(c.name, c.family, "pass", g.worst, "timed", incumbent=c.incumbent)
        else:
            records[c.name] = Record(
                c.name, c.family, "fail", g.worst, "gated out", g.reason or "", incumbent=c.incumbent
            )
            rejected[c.name] = g.reason or "failed the gate"
    timed = [c for c in cands if c.family != NATIVE and results[c.name].passed]
    incumbent = incumbent_of(timed)  # (one failing the gate is never timed, so never chosen)
    if progress and timed:
        progress(
            f"{site.describe()}, rows <= {bucket}: timing {', '.join(c.name for c in timed)} against native", False
        )
    x, residual = site.draw(bucket, rng)
    pool = site.pool(protocol.pool_bytes)
    native_runs = [runners[NATIVE]] + [by_name[NATIVE].runner(p) for p in pool[1:]]
    timer = _timed_call if not protocol.chain else partial(_chained_call, length=protocol.chain)
    fns = {c.name: timer([runners[c.name]] + [c.runner(p) for p in pool[1:]], x, residual) for c in timed}
    outcome = compete(
        timer(native_runs, x, residual), fns, {c.name: margin_of(c.family) for c in timed}, protocol, clock,
        incumbent=None if incumbent is None else incumbent.name,
    )  # fmt: skip
    del pool, native_runs
    q = protocol.quantile
    for name, t in outcome.timings.items():
        if name == CONTROL:
            continue
        rec = records[name]
        rec.compile_s, rec.calls = t.compile_s, t.calls
        rec.per_call_s = t.per_call_s() if t.samples else None
        rec.ratio = t.quantiles(q) if t.ratios else None
        rec.confirm = t.quantiles(q, t.confirm_ratios) if t.confirm_ratios else None
        rec.versus_incumbent = t.quantiles(q, t.incumbent_ratios) if t.incumbent_ratios else None
        if name != NATIVE:
            rec.threshold = t.threshold
            rec.status = t.status or rec.status
    for name, why in outcome.rejected.items():
        rejected[name] = why
        if name in records:
            records[name].reason = why
            if records[name].status == "timed":
                records[name].status = "error"
    control = outcome.timings[CONTROL]
    records[CONTROL] = Record(
        CONTROL, NATIVE, "reference", records[NATIVE].error, "control",
        f"native's function timed again: ratios q-lo/median/q-hi {'/'.join(f'{v:.3f}' for v in outcome.control)}",
        control.compile_s, control.per_call_s() if control.samples else None, control.calls,
        outcome.control if control.ratios else None,
    )  # fmt: skip
    chosen = by_name[outcome.chosen]
    records[NATIVE].status = "chosen" if chosen.family == NATIVE else "beaten"
    decision = Decision(
        chosen.name, bucket, site.describe(), _installable(chosen, site), records, rejected, key, ctx,
        seconds=time.perf_counter() - t0, seed=seed, _site=site,
    )  # fmt: skip
    if store is not None:
        _put(store, decision)
    if progress:
        progress(f"{site.describe()}, rows <= {bucket}: {decision.chosen}", True)
    return decision


def _timed_call(runs: list, x, residual):
    """One call per invocation, each with the next of the pool's weights."""
    turn = [0]

    def call():
        run = runs[turn[0] % len(runs)]
        turn[0] += 1
        mx.eval(run(x, residual))

    return call


def _chained_call(runs: list, x, residual, length: int):
    """One compiled evaluation of `length` products per invocation, each x the previous x plus 0 times
    the previous output's first element (bench/cases.py's chain), each product with the next of the
    pool's weights. Traced once (the first, compile-timed call), with the candidate's route forced."""

    def chained(x0):
        xx, outs = x0, []
        for i in range(length):
            ys = runs[i % len(runs)](xx, residual)
            outs += ys
            xx = xx + 0 * ys[0].reshape(-1)[:1].astype(xx.dtype)
        return outs

    compiled = mx.compile(chained)

    def call():
        mx.eval(compiled(x))

    return call


def _installable(c: Candidate, site: Site) -> Route | None:
    """The route a chosen candidate gives the dispatch: none for extras, none without a backend."""
    if c.route is None or site.spec is None:
        return None
    return c.route


def _stored(store: Store, key: str, by_name: dict, site: Site, bucket: int) -> Decision | None:
    try:
        entry = store.get(key)
    except StoreError as e:
        warnings.warn(f"mlx_metile.tune: {e}; tuning without the store", RuntimeWarning, stacklevel=3)
        return None
    if entry is None or entry["chosen"] not in by_name:
        return None
    try:
        records = {name: _record(r) for name, r in entry["records"].items()}
    except (TypeError, KeyError, ValueError):
        return None
    chosen = by_name[entry["chosen"]]
    return Decision(
        chosen.name, bucket, entry["site"], _installable(chosen, site), records, entry["rejected"], key,
        entry["context"], from_store=True, _site=site,
    )  # fmt: skip


def _record(d: dict) -> Record:
    d = dict(d)
    for k in ("ratio", "confirm", "versus_incumbent"):
        if d.get(k) is not None:
            d[k] = tuple(float(v) for v in d[k])
    for k in ("error", "compile_s", "per_call_s", "threshold"):
        if isinstance(d.get(k), str):
            d[k] = float(d[k])
    return Record(**d)


def _put(store: Store, d: Decision) -> None:
    entry = {
        "context": d.context,
        "site": d.site,
        "bucket": d.bucket,
        "chosen": d.chosen,
        "route": route_dict(d.route),
        "records": {name: r.as_dict() for name, r in d.records.items()},
        "rejected": d.rejected,
    }
    try:
        store.put(d.key, entry)
    except StoreError as e:
        warnings.warn(f"mlx_metile.tune: {e}; the decision was not stored", RuntimeWarning, stacklevel=3)


# -- installing -------------------------------------------------------------------------------
def install_routes(decisions: Sequence[Decision]) -> int:
    """Put the decisions' routes where choose and the dispatch read them; how many went in."""
    entries = {}
    for d in decisions:
        k = d.table_key
        if k is not None and d.route is not None:
            entries[k] = d.route
    if entries:
        tuned.install(entries)
        dispatch.forget_plans()  # (plans kept before the decisions would not see them)
    return len(entries)


# -- the public entry ----------------------------------------------------------------------------
def buckets_of(rows, default: int) -> tuple[list[int], bool]:
    """(row buckets, whether one was asked for as a single number)."""
    if rows is None:
        rows = default
    if isinstance(rows, bool):
        raise TypeError("rows: expected a row count or a sequence of them")
    if isinstance(rows, (int, np.integer)):
        if rows < 1:
            raise ValueError(f"rows: expected a positive row count, got {rows}")
        return [row_bucket(int(rows))], True
    if not isinstance(rows, (list, tuple)) or not rows:
        raise TypeError(f"rows: expected a row count or a non-empty sequence of them, got {rows!r}")
    out = []
    for r in rows:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 1:
            raise ValueError(f"rows: expected positive row counts, got {r!r}")
        b = row_bucket(int(r))
        if b not in out:
            out.append(b)
    return out, False


def store_of(store) -> Store | None:
    if store is None or store is False:
        return None
    if store is True:
        return Store()
    if isinstance(store, Store):
        return store
    raise TypeError(f"store: expected True, False, None or a Store, got {type(store).__name__}")


def tournament(
    x: mx.array,
    weights: Sequence,
    epilogue: str | None = None,
    residual: mx.array | None = None,
    rows: int | Sequence[int] | None = None,
    extra: Sequence[tuple[str, Callable]] = (),
    *,
    biases: Sequence | None = None,
    draws: int = 3,
    invariant: bool = False,
    protocol: Protocol | None = None,
    clock: Clock | None = None,
    seed: int | None = None,
    store: Store | bool | None = None,
    retune: bool = False,
    install: bool = False,
    progress: Progress | None = None,
) -> Decision | dict[int, Decision]:
    """The tournament of `fused_linear(x, weights, biases=..., epilogue=..., residual=...)`.

    x (and residual) give the call's K and dtypes (their values are not used: the gate and the
    timing draw fresh ones). rows: a row count (default: x's), whose bucket is decided - a
    Decision is returned; or a sequence of them - a dict bucket -> Decision. extra: (name, fn)
    candidates, fn taking fused_linear's arguments and returning its outputs. invariant: also
    gate on bitwise row invariance. store: a Store, True (the default store) or None (none).
    install: make the dispatch run what was chosen (an extra's decision cannot be)."""
    if not isinstance(draws, int) or isinstance(draws, bool) or draws < 1:
        raise ValueError(f"draws: expected a positive number of draws, got {draws!r}")
    site = Site.of(x, weights, biases, epilogue, residual)
    lead_rows = math.prod(x.shape[:-1]) or 1
    buckets, single = buckets_of(rows, lead_rows)
    st = store_of(store)
    decisions = {}
    for b in buckets:
        decisions[b] = decide(
            site, b, extra, draws=draws, invariant=invariant, protocol=protocol, clock=clock, seed=seed, store=st,
            retune=retune, progress=progress,
        )  # fmt: skip
    if install:
        install_routes(list(decisions.values()))
    return decisions[buckets[0]] if single else decisions
