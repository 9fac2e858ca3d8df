"""`mlx_metile.autotune(model_or_projection, rows=(1, 2, 4, 8, 16, 32))`: a decision for every
projection call a model (or a Projection) makes, at each row bucket - read from the store where
its key is there, else decided by a tournament and stored - installed so the calls run it.

A model's calls are found by running it once (`inputs`, by default one token of an mlx-lm
language model) with the dispatch capturing every checked call; each distinct site (formats,
shapes, epilogue, residual and dtypes: what a decision is keyed by) is tuned once, on the weights
of its first call. Calls with a fused RMSNorm keep
choose's rules (the tournament takes no norm); their product without it is tuned.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn

from .. import dispatch
from ..formats import QuantizedWeight
from ..projection import Projection
from ..schedule import ROW_BUCKETS
from .protocol import Clock, Protocol
from .site import Site
from .store import Store
from .tournament import Decision, buckets_of, decide, install_routes, store_of


@dataclass
class Tuning:
    """What autotune decided: one Decision per site and row bucket."""

    decisions: list[Decision] = field(default_factory=list)
    installed: int = 0

    def __str__(self) -> str:
        stored = sum(d.from_store for d in self.decisions)
        lines = [
            f"mlx_metile.autotune: {len(self.decisions)} decisions ({stored} from the store), {self.installed} installed"
        ]
        for d in self.decisions:
            why = "" if d.chosen != "native" or not d.rejected else f" - {_shortest(d.rejected)}"
            lines.append(f"  {d.site}, rows <= {d.bucket}: {d.chosen}{why}")
        return "\n".join(lines)

    def chosen(self) -> dict[tuple[str, int], str]:
        """(site, bucket) -> the chosen candidate's name."""
        return {(d.site, d.bucket): d.chosen for d in self.decisions}


def _shortest(rejected: dict[str, str]) -> str:
    name, why = next(iter(rejected.items()))
    return f"{name}: {why[:100]}"


def sites_of_model(model: nn.Module, inputs=None) -> list[Site]:
    """The distinct call sites the model's forward on `inputs` makes (default: one token)."""
    if inputs is None:
        inputs = mx.zeros((1, 1), dtype=mx.int32)
    with dispatch.capture() as calls:
        out = model(inputs)
        mx.eval(out)
    sites, seen = [], set()
    for call in calls:
        if call.norm is not None or call.empty:
            continue
        site = Site.of_call(call)
        # calls of one signature (formats, shapes, epilogue, dtypes: every layer's q/k/v) share
        # their decisions, which are keyed by it: the first one's weights stand for all
        ident = json.dumps([site.backend, site.signature()], sort_keys=True)
        if ident not in seen:
            seen.add(ident)
            sites.append(site)
    return sites


def site_of_projection(p: Projection, dtype: mx.Dtype | None = None, residual: bool = False) -> Site:
    """The site of a Projection's calls: x of `dtype` (default: its first weight's, or its scales')."""
    w0 = p.weights[0]
    K = w0.K if isinstance(w0, QuantizedWeight) else w0.shape[-1]
    dtype = dtype or (w0.scales.dtype if isinstance(w0, QuantizedWeight) else w0.dtype)
    x = mx.zeros((1, K), dtype=dtype)
    n0 = w0.N if isinstance(w0, QuantizedWeight) else w0.shape[0]
    res = mx.zeros((1, n0), dtype=dtype) if residual else None
    return Site.of(x, p.weights, p.biases, p.epilogue, res)


def stderr_progress(total: int) -> Callable[[str, bool], None]:
    """A progress bar on stderr: [####....] decisions made / total, and what is being tuned."""
    state = {"done": 0}
    width = 24

    def show(message: str, finished: bool) -> None:
        state["done"] += finished
        done = state["done"]
        filled = width * done // max(total, 1)
        bar = "#" * filled + "." * (width - filled)
        sys.stderr.write(f"\r[{bar}] {done}/{total} {message[:100]:100s}")
        if done >= total and finished:
            sys.stderr.write("\n")
        sys.stderr.flush()

    return show


def autotune(
    model_or_projection: nn.Module | Projection,
    rows: Sequence[int] | int = ROW_BUCKETS,
    *,
    inputs=None,
    dtype: mx.Dtype | None = None,
    residual: bool = False,
    extra: Sequence[tuple[str, Callable]] = (),
    draws: int = 3,
    invariant: bool = False,
    protocol: Protocol | None = None,
    clock: Clock | None = None,
    seed: int | None = None,
    store: Store | bool | None = True,
    retune: bool = False,
    install: bool = True,
    progress: bool | Callable[[str, bool], None] = False,
) -> Tuning:
    """Decide every projection call of a patched model (or of a Projection) at each row bucket of
    `rows`, and install the decisions (install=False: only return them).

    inputs: what the model is called with to find its calls (default: one token, [[0]]).
    dtype, residual: a Projection's activations' dtype and whether its calls add a residual.
    store: the default store (True), a Store, or None (decide afresh, keep nothing); retune:
    decide again even where the store has a decision. progress: True for a progress line on
    stderr, or a function taking each message and whether a decision was finished. The rest as `tournament` takes them."""
    if isinstance(model_or_projection, Projection):
        sites = [site_of_projection(model_or_projection, dtype, residual)]
    elif isinstance(model_or_projection, nn.Module):
        sites = sites_of_model(model_or_projection, inputs)
        if not sites:
            raise ValueError(
                "model_or_projection: the model makes no mlx_metile projection calls; patch it first "
                "(mlx_metile.patch(model, tune=True) patches and tunes)"
            )
    else:
        raise TypeError(
            f"model_or_projection: expected an mlx.nn.Module or an mlx_metile.Projection, got "
            f"{type(model_or_projection).__name__}"
        )
    buckets, _ = buckets_of(rows if not isinstance(rows, int) else [rows], 1)
    st = store_of(store)
    total = len(sites) * len(buckets)
    report: Callable[[str, bool], None] | None
    report = stderr_progress(total) if progress is True else (progress or None)
    tuning = Tuning()
    for site in sites:
        for b in buckets:
            tuning.decisions.append(
                decide(
                    site,
                    b,
                    extra,
                    draws=draws,
                    invariant=invariant,
                    protocol=protocol,
                    clock=clock,
                    seed=seed,
                    store=st,
                    retune=retune,
                    progress=report,
                )  # fmt: skip
            )
    if install:
        tuning.installed = install_routes(tuning.decisions)
    return tuning
