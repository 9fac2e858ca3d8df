"""Candidates as values: for a call site and row bucket, every route the backend has, plus the
stock composition (native), which is always one and wins unless beaten by its margin.

A candidate kind is one registration: a family name, the margin a candidate of it must beat native
by, and a function (site, bucket) -> the candidates it admits there. Built in:

- `cpu`: the C++ path of the CPU backend;
- `emulator`: the generated MSL run by the Metal-on-CPU emulator (MLX_METILE_EMULATE=1);
- `cuda_schedule`: on CUDA, the schedule choose's rules give and its variants along the knobs
  that only move loads (tiles, batch, stages, minblocks, staged or direct loads; the SIMT
  schedule's warps and columns) - the settings MLX_METILE_CUDA_MMA_* / _TUNE as values;
- `cuda_compiler`: on CUDA, the rules' schedule built by the other compiler (nvcc or NVRTC);
- `metal`: on Metal, the simdgroup schedule's MSL (the rules' schedule for a GPU without NAX);
- `metal_nax`: on Metal where the target has NAX (GPU generation >= 17, macOS >= 26.2) and on the
  emulator (which runs the MPP subset), the NAX rules' schedules: weights direct from device memory
  into the fragments (`nax_direct`) and staged through threadgroup memory (`nax_staged`);
- `air`: on Metal and the emulator, the simdgroup schedule as our AIR in each distinct form of
  mlx_metile.air.candidate.FORMS, packed into a metallib (where LLVM 14's llvm-as is found); the
  emulator runs the metallib's bitcode on the CPU;
- `metal_archive`: on Metal with MLX_METILE_PATCHED_ARCHIVES, a GPU whose code the native room
  decodes (G13) and LLVM 14: the plain AIR metallib with its pipeline's archive patched.

A candidate with a `route` runs through mlx_metile's own dispatch with that route forced
(schedule.tuned.forcing), so what is timed is what a decided call runs; `extra` candidates are the
user's functions.

The incumbent (`Candidate.incumbent`) is the candidate that runs what the dispatch runs with no
decision installed - the hand rules' schedule, from the source build, with the default compiler:
`cpu`, `emulator`, CUDA's `cuda`, and on Metal `msl` or the NAX kind MLX_METILE_METAL_SCHEDULE asks
for. A tournament has at most one; its variants must beat it pairwise (tune.protocol, rule 7).
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import mlx.core as mx

from .. import dispatch, native, settings
from ..air import llvm14
from ..air.candidate import FORMS, distinct_forms
from ..backends.metal_archive import ARCHIVE_FORM, launch_layout, rewrite_identity
from ..codegen.air import AIR_VERSION
from ..native.patching import CODECS
from ..ops import fused_linear
from ..schedule import Route, Schedule, rules, tuned
from ..schedule.nax import has_nax, nax_schedule, unsupported
from ..schedule.schedule import NAX_KINDS
from ..settings import MMA_KNOBS, Settings
from ..targets import MetalTarget
from .site import Site

Runner = Callable[[mx.array, "mx.array | None"], list[mx.array]]
NATIVE = "native"
EXTRA = "extra"


@dataclass(frozen=True)
class Candidate:
    name: str
    family: str
    route: Route | None = None  # what the dispatch runs where it is chosen; None: not installable
    fn: Callable | None = None  # an extra candidate's function (fused_linear's arguments)
    identity: str = ""  # what keys it in the store (its route, or its function's code)
    operand_rounding: bool = False  # its kernel rounds each dequantized weight to x's dtype (tolerance.OPERAND)
    incumbent: bool = False  # it runs what the hand rules give the call (no decision installed)

    def runner(self, site: Site) -> Runner:
        """x, residual -> the outputs as a list."""
        if self.family == NATIVE:
            return site.stock
        if self.fn is not None:
            fn = self.fn
            weights, biases = list(site.weights), list(site.biases)

            def extra(x, residual):
                return _as_list(fn(x, weights, biases=biases, epilogue=site.epilogue, residual=residual))

            return extra
        route = self.route
        if route is None or site.spec is None:
            raise ValueError(f"candidate {self.name!r}: no route to run on backend {site.backend!r}")
        weights, biases = list(site.weights), list(site.biases)

        def routed(x, residual):
            with tuned.forcing(site.target, site.spec, site.shape, route):
                return _as_list(fused_linear(x, weights, biases=biases, epilogue=site.epilogue, residual=residual))

        return routed


def _as_list(outs) -> list:
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


@dataclass(frozen=True)
class Kind:
    family: str
    margin: float
    admit: Callable[[Site, int], list[Candidate]]


KINDS: dict[str, Kind] = {}


def register(family: str, margin: float) -> Callable:
    """`@register("metal_nax", 0.03)` over `def admit(site, bucket) -> list[Candidate]`: a new
    candidate kind, whose candidates must beat native by `margin` (a fraction)."""
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin: expected a fraction in [0, 1), got {margin}")

    def add(admit: Callable[[Site, int], list[Candidate]]):
        KINDS[family] = Kind(family, margin, admit)
        return admit

    return add


EXTRA_MARGIN = 0.05


def margin_of(family: str) -> float:
    if family == EXTRA:
        return EXTRA_MARGIN
    return KINDS[family].margin


def native_candidate(site: Site) -> Candidate:
    return Candidate(NATIVE, NATIVE, Route(site.backend, NATIVE, native=True), identity="stock composition")


def extra_candidates(extra: Sequence[tuple[str, Callable]]) -> list[Candidate]:
    out = []
    for i, item in enumerate(extra):
        if not isinstance(item, tuple) or len(item) != 2 or not isinstance(item[0], str) or not callable(item[1]):
            raise TypeError(f"extra[{i}]: expected a (name, function) pair")
        name, fn = item
        out.append(Candidate(name, EXTRA, None, fn, identity=f"extra {_code_identity(fn)}"))
    return out


def _code_identity(fn: Callable) -> str:
    """The function's source (or its code's bytes) hashed: a changed function is another candidate."""
    try:
        text = inspect.getsource(fn)
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        text = repr(code.co_code) if code is not None else getattr(fn, "__qualname__", repr(type(fn)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def candidates(site: Site, bucket: int, extra: Sequence[tuple[str, Callable]] = ()) -> list[Candidate]:
    """Native, every registered kind's candidates for the site and bucket, then the extras."""
    out = [native_candidate(site)]
    for kind in KINDS.values():
        out.extend(kind.admit(site, bucket))
    out.extend(extra_candidates(extra))
    seen = set()
    for c in out:
        if c.name in seen:
            raise ValueError(f"extra: candidate name {c.name!r} is taken (names must be unique in a tournament)")
        seen.add(c.name)
    incumbents = [c.name for c in out if c.incumbent]
    if len(incumbents) > 1:
        raise ValueError(f"candidates: {incumbents} are each marked the incumbent (a tournament has at most one)")
    return out


def incumbent_of(cands: Sequence[Candidate]) -> Candidate | None:
    """The candidate that runs what the hand rules give the call, if one is listed."""
    return next((c for c in cands if c.incumbent), None)


# -- the built-in kinds ---------------------------------------------------------------------
@register("cpu", 0.05)
def _cpu(site: Site, bucket: int) -> list[Candidate]:
    if site.backend != "cpu":
        return []
    return [Candidate("cpu", "cpu", Route("cpu", "cpu"), identity="C++ path", incumbent=True)]


@register("emulator", 0.05)
def _emulator(site: Site, bucket: int) -> list[Candidate]:
    if site.backend != "emulator":
        return []
    route = Route("emulator", "emulator")  # (no schedule: the rules')
    return [Candidate("emulator", "emulator", route, identity="MSL on the emulator", incumbent=True)]


# Knobs of the CUDA schedules that move loads only (a row's sum order stays), with the values tried
# one at a time around the rules' schedule; docs/SCHEDULES.md says what each does.
CUDA_MMA_VARIANTS = {"tiles": (1, 2, 4), "batch": (1, 2, 4), "stages": (2, 3, 4), "minblocks": (0, 2, 4)}
CUDA_SIMT_VARIANTS = {"sg": (2, 4, 8), "nc": (2, 4, 8)}


def cuda_schedules(site: Site, bucket: int, cfg: Settings | None = None) -> list[tuple[str, object]]:
    """(name, Schedule) of the rules' schedule ("cuda") and each distinct variant of it."""
    cfg = cfg or settings.current()
    base = rules(site.spec, bucket, site.target, site.shape, cfg)
    found = [("cuda", base)]
    seen = {base}
    variants: list[tuple[str, Settings]] = []
    if base.kind == "mma":
        for knob, values in CUDA_MMA_VARIANTS.items():
            for v in values:
                if v in MMA_KNOBS[knob]:
                    variants.append((f"cuda:{knob}={v}", replace(cfg, mma=_with(cfg.mma, knob, v))))
        variants.append(("cuda:staged=0", replace(cfg, cuda_mma_staged=False)))  # (every format's direct loads)
    else:
        for knob, values in CUDA_SIMT_VARIANTS.items():
            for v in values:
                variants.append((f"cuda:{knob}={v}", replace(cfg, cuda_tune=_with(cfg.cuda_tune, knob, v))))
    for name, variant in variants:
        try:
            schedule = rules(site.spec, bucket, site.target, site.shape, variant)
        except ValueError:  # a variant the rules refuse for this spec
            continue
        if schedule not in seen:
            seen.add(schedule)
            found.append((name, schedule))
    return found


def _with(pairs: tuple, key: str, value: int) -> tuple:
    d = dict(pairs)
    d[key] = value
    return tuple(sorted(d.items()))


def _cuda_kernels(site: Site, bucket: int) -> bool:
    """Whether the CUDA kernels take the bucket's calls (more rows than MLX_METILE_CUDA_MAX_ROWS run stock)."""
    return site.backend == "cuda" and site.spec is not None and bucket <= dispatch.cuda_max_rows()


@register("cuda_schedule", 0.03)
def _cuda_schedules(site: Site, bucket: int) -> list[Candidate]:
    if not _cuda_kernels(site, bucket):
        return []
    out = []
    for name, schedule in cuda_schedules(site, bucket):
        rules_own = name == "cuda"  # (cuda_schedules lists the rules' schedule first, under this name)
        route = Route("cuda", name, schedule=None if rules_own else schedule)
        out.append(Candidate(name, "cuda_schedule", route, identity=repr(schedule), incumbent=rules_own))
    return out


@register("cuda_compiler", 0.02)
def _cuda_compilers(site: Site, bucket: int) -> list[Candidate]:
    if not _cuda_kernels(site, bucket):
        return []
    from ..backends.cuda_compile import CudaCompileError, compiler, find_nvcc
    from ..backends.nvrtc import find_nvrtc

    try:
        default = compiler()[0]
    except CudaCompileError:
        return []
    other = "nvrtc" if default == "nvcc" else "nvcc"
    if (find_nvrtc() if other == "nvrtc" else find_nvcc()) is None:
        return []
    route = Route("cuda", f"cuda+{other}", compiler=other)
    return [Candidate(route.name, "cuda_compiler", route, identity=f"rules' schedule, {other}")]


# -- Metal and the emulator ------------------------------------------------------------------
def _metal(site: Site) -> bool:
    return site.backend == "metal" and site.spec is not None and isinstance(site.target, MetalTarget)


def _msl(site: Site) -> bool:
    """Metal, or the emulator standing in for it (MSL and AIR run there)."""
    return _metal(site) or (site.backend == "emulator" and site.spec is not None)


def simdgroup_schedule(site: Site, bucket: int) -> Schedule:
    """The rules' simdgroup schedule (whatever MLX_METILE_METAL_SCHEDULE asks): what the MSL, AIR
    and archive candidates run."""
    cfg = replace(settings.current(), metal_schedule="simdgroup")
    return rules(site.spec, bucket, site.target, site.shape, cfg)


def nax_schedules(site: Site, bucket: int) -> list[tuple[str, Schedule]]:
    """(kind, Schedule) of the NAX candidates - the NAX rules' `nax_direct` and `nax_staged`
    (schedule.nax) - where the target has NAX (a Metal GPU of generation >= 17 on macOS >= 26.2, or
    the emulator) and the lowerings take the spec; none anywhere else."""
    if not _msl(site) or not has_nax(site.target) or unsupported(site.spec) is not None:
        return []
    return [(kind, nax_schedule(site.spec, bucket, kind, site.target)) for kind in NAX_KINDS]


def _rules_give(site: Site, bucket: int, schedule: Schedule) -> bool:
    """Whether the hand rules give the site `schedule` on Metal (MLX_METILE_METAL_SCHEDULE picks
    the simdgroup or a NAX one; the MSL source build is the dispatch's default)."""
    try:
        return rules(site.spec, bucket, site.target, site.shape) == schedule
    except ValueError:  # (a NAX schedule asked for where the target or the spec cannot take it)
        return False


@register("metal", 0.05)
def _metal_msl(site: Site, bucket: int) -> list[Candidate]:
    if not _metal(site):
        return []
    schedule = simdgroup_schedule(site, bucket)
    route = Route("metal", "msl", schedule=schedule)
    return [
        Candidate("msl", "metal", route, identity=f"MSL {schedule!r}", incumbent=_rules_give(site, bucket, schedule))
    ]


@register("metal_nax", 0.03)
def _metal_nax(site: Site, bucket: int) -> list[Candidate]:
    out = []
    for kind, schedule in nax_schedules(site, bucket):
        route = Route(site.backend, kind, schedule=schedule)
        # matmul2d's operands are x's dtype: each dequantized weight is rounded to it first
        ident = f"MSL with MPP matmul2d {schedule!r}"
        # on the emulator the `emulator` candidate runs the rules' schedule, whichever it is
        rules_own = _metal(site) and _rules_give(site, bucket, schedule)
        out.append(Candidate(kind, "metal_nax", route, identity=ident, operand_rounding=True, incumbent=rules_own))
    return out


def air_forms(site: Site, bucket: int) -> list[str]:
    """The distinct AIR forms of the site's simdgroup kernel (the plain one alone where it cannot be
    rendered: its build fails the gate, with the reason)."""
    try:
        return distinct_forms(site.spec, simdgroup_schedule(site, bucket))
    except Exception:  # (e.g. a statement the AIR dialect does not print: RenderError, recorded by the gate)
        return ["air"]


@register("air", 0.05)
def _air(site: Site, bucket: int) -> list[Candidate]:
    if not _msl(site) or not llvm14.available():
        return []
    schedule = simdgroup_schedule(site, bucket)
    out = []
    for name in air_forms(site, bucket):
        route = Route(site.backend, name, schedule=schedule, build=name)
        ident = f"AIR {'.'.join(map(str, AIR_VERSION))} {FORMS[name].describe()}, {llvm14.version()}, {schedule!r}"
        out.append(Candidate(name, "air", route, identity=ident))
    return out


@register("metal_archive", 0.10)
def _metal_archive(site: Site, bucket: int) -> list[Candidate]:
    if not (_metal(site) and native.enabled() and site.target.generation in CODECS and llvm14.available()):
        return []
    schedule = simdgroup_schedule(site, bucket)
    # the device, OS build and compiler are the decision's context (tune.identity); these, the rest
    ident = (
        f"patched archive of {ARCHIVE_FORM} ({FORMS[ARCHIVE_FORM].describe()}, {llvm14.version()}), launch "
        f"{launch_layout(schedule)}, {rewrite_identity()}, {schedule!r}"
    )
    return [
        Candidate(
            "archive", "metal_archive", Route("metal", "archive", schedule=schedule, build="archive"), identity=ident
        )
    ]
