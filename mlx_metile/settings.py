"""Every environment setting of mlx-metile, declared once: name, type, default, one line of doc.

The environment is read here and nowhere else. It is parsed on first use into a frozen
`Settings` value; a malformed value is a `ValueError` naming the variable. A process that
changes the environment later calls `reload()` (or uses `override(...)`, which restores what
was there): settings are not re-read on every call.

Settings of the CUDA schedules (`MLX_METILE_CUDA_MMA_*`, `MLX_METILE_CUDA_TUNE`) are overrides of
`Schedule` fields: `mlx_metile.schedule.choose` applies them, and the compile cache is keyed by
the resulting `Schedule`, so a changed setting builds another kernel rather than reusing one.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "MLX_METILE_"
_SHOWN = 80  # characters of a bad value quoted in an error

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _quote(value: str) -> str:
    return repr(value if len(value) <= _SHOWN else value[:_SHOWN] + "...")


def _fail(name: str, value: str, expected: str) -> ValueError:
    return ValueError(f"{name}: expected {expected}, got {_quote(value)}")


def _boolean(name: str, value: str) -> bool:
    low = value.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise _fail(name, value, "one of 0/1/true/false/yes/no/on/off")


def _digits(value: str) -> bool:
    """Only ASCII digits (str.isdigit also takes '²', which int() refuses)."""
    return value.isascii() and value.isdigit()


def _count(minimum: int) -> Callable[[str, str], int]:
    def parse(name: str, value: str) -> int:
        if not _digits(value.strip()) or int(value) < minimum:
            raise _fail(name, value, f"a whole number >= {minimum}")
        return int(value)

    return parse


def _choice(*allowed: str) -> Callable[[str, str], str]:
    def parse(name: str, value: str) -> str:
        if value.strip() not in allowed:
            raise _fail(name, value, "one of " + ", ".join(allowed))
        return value.strip()

    return parse


def _int_choice(allowed: tuple[int, ...]) -> Callable[[str, str], int]:
    def parse(name: str, value: str) -> int:
        value = value.strip()
        if not _digits(value) or int(value) not in allowed:
            shown = f"{allowed[0]}..{allowed[-1]}" if len(allowed) > 12 else ", ".join(map(str, allowed))
            raise _fail(name, value, f"one of {shown}")
        return int(value)

    return parse


def _stat_errors(parse: Callable[[str, str], Any]) -> Callable[[str, str], Any]:
    """A path check whose OSError (a name too long, a loop of links) is a ValueError naming the variable."""

    def checked(name: str, value: str):
        try:
            return parse(name, value)
        except OSError as e:
            raise ValueError(f"{name}: cannot use {_quote(value)} ({e.strerror or type(e).__name__})") from None

    return checked


@_stat_errors
def _executable(name: str, value: str) -> str:
    """A program: a path, or a name found on PATH; an existing, executable regular file."""
    if value.startswith("-"):
        raise _fail(name, value, "a program's path (not an option)")
    found = shutil.which(value) if os.sep not in value else value
    path = Path(found or value)
    if not path.exists():
        raise ValueError(f"{name}: {_quote(value)} does not exist")
    if not path.is_file():
        raise ValueError(f"{name}: {_quote(value)} is not a file")
    if not os.access(path, os.X_OK):
        raise ValueError(f"{name}: {_quote(value)} is not executable")
    return str(path)


@_stat_errors
def _existing_file(name: str, value: str) -> str:
    if value.startswith("-") or not Path(value).is_file():
        raise _fail(name, value, "the path of an existing file")
    return value


@_stat_errors
def _decisions(name: str, value: str) -> str:
    """ "off" (or "0"): no decisions file; else the path of one."""
    if value.strip().lower() in ("off", "0"):
        return ""
    return _existing_file(name, value)


@_stat_errors
def _directory(name: str, value: str) -> Path:
    """A directory to use (it need not exist yet); never something that reads as an option."""
    if value.startswith("-") or "\0" in value:
        raise _fail(name, value, "a directory path")
    path = Path(value).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name}: {_quote(value)} exists and is not a directory")
    return path


@_stat_errors
def _file_path(name: str, value: str) -> Path:
    """A file to use (it need not exist yet): not a directory, never something that reads as an option."""
    if value.startswith("-") or "\0" in value or value.endswith(os.sep):
        raise _fail(name, value, "a file path")
    path = Path(value).expanduser()
    if path.is_dir():
        raise ValueError(f"{name}: {_quote(value)} is a directory, not a file")
    return path


@_stat_errors
def _existing_dir(name: str, value: str) -> str:
    if value.startswith("-") or not Path(value).is_dir():
        raise _fail(name, value, "an existing directory")
    return value


_ARCH = re.compile(r"^(sm|compute)_(\d+)[a-z]?$")


def _cuda_arch(name: str, value: str) -> str:
    if not _ARCH.fullmatch(value):
        raise _fail(name, value, "sm_NN or compute_NN (e.g. sm_90, compute_80)")
    return value


_DEBUG_STAGES = ("all", "ir", "schedule", "msl", "cuda", "air", "trace")


def _debug(name: str, value: str) -> frozenset[str]:
    stages = frozenset(s.strip() for s in value.split(",") if s.strip())
    unknown = sorted(stages - set(_DEBUG_STAGES))
    if unknown:
        raise _fail(name, value, "a comma-separated list of " + ", ".join(_DEBUG_STAGES))
    return stages


TUNE_KEYS = ("sg", "budget", "nc")


def _cuda_tune(name: str, value: str) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for item in filter(None, value.split(",")):
        key, _, v = item.partition("=")
        if key.strip() not in TUNE_KEYS or not _digits(v.strip()) or int(v) < 1:
            raise ValueError(f"{name}: cannot use {_quote(item)}; expected e.g. sg=4,budget=48,nc=4")
        out[key.strip()] = int(v)
    if out.get("sg", 1) > 32:
        raise ValueError(f"{name}: sg must be at most 32 (1024 threads per block)")
    return tuple(sorted(out.items()))


# The CUDA tensor-core schedule's fields a setting may override, with the values each takes:
# MLX_METILE_CUDA_MMA_<NAME>. What each means is documented on the Schedule field it sets
# (mlx_metile/schedule/schedule.py) and in docs/SCHEDULES.md.
MMA_KNOBS: dict[str, tuple[int, ...]] = {
    "warps": (1, 2, 4, 8, 16),
    "batch": (1, 2, 4),
    "tiles": (1, 2, 4),
    "wide": (0, 1),
    "minblocks": tuple(range(9)),
    "groups": (2, 4, 8),
    "stages": (2, 3, 4, 5, 6, 7, 8),
    "smem": tuple(range(48, 228)),
    "q8split": (0, 1),
    "xsector": (0, 1),
    "strided": (0, 1),
    "interleave": (0, 1),
    "swizzle": (0, 1, 2),
    "late": (0, 1, 2, 3),
    "bankpad": (0, 1),
    "xshare": (0, 2, 4, 8),
    "layout": (0, 1, 2, 3, 4, 5),
}


# MLX_METILE_METAL_SCHEDULE: the simdgroup MSL schedules (simd_splitk / tiled, the default) or a
# NAX one (schedule/nax.py, docs/NAX.md); a NAX schedule on a target without NAX is an error
METAL_SCHEDULES = ("simdgroup", "nax_direct", "nax_staged")


@dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str, str], Any]
    default: Any
    doc: str
    field: str = ""  # the Settings attribute it fills


def _declare() -> dict[str, Setting]:
    items = [
        Setting("EMULATE", _boolean, False, "run CPU ops through the Metal-on-CPU emulator (the generated MSL)"),
        Setting("DEBUG", _debug, frozenset(), "stages to print to stderr: ir, schedule, msl, cuda, air, trace or all"),
        Setting("CACHE", _directory, None, "root of the kernel caches (default: $XDG_CACHE_HOME/mlx_metile)"),
        Setting("CLANG", _executable, None, "the clang (>= 17) the emulator compiles with"),
        Setting(
            "NVCC",
            _executable,
            None,
            "the nvcc to build CUDA kernels with (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc)",
        ),
        Setting("NVRTC", _existing_file, None, "the libnvrtc to build CUDA kernels with"),
        Setting("CUDA_INCLUDE", _existing_dir, None, "a directory holding cuda_fp16.h / cuda_bf16.h for NVRTC"),
        Setting("CUDA_COMPILER", _choice("nvcc", "nvrtc"), None, "nvcc or nvrtc (default: nvcc where found)"),
        Setting("CUDA_BINARY", _choice("cubin", "fatbin"), "fatbin", "what nvcc builds for sm_NN: fatbin or cubin"),
        Setting(
            "CUDA_ARCH", _cuda_arch, None, "the CUDA architecture to build for (default: MLX's device, else sm_90)"
        ),
        Setting("CUDA_MAX_ROWS", _count(0), 32, "calls of more rows run stock MLX on CUDA"),
        Setting("CUDA_GRADIENTS", _boolean, False, "CUDA launches through a custom function with the stock vjp"),
        Setting("CUDA_NATIVE_LAUNCH", _boolean, True, "build CUDA launches in C++ where the extension has it"),
        Setting("CUDA_PRIMITIVE", _boolean, True, "launch through the extension's own CUDA primitive where built"),
        Setting("CUDA_POOL_MB", _count(0), 512, "MB of released output buffers the CUDA primitive's pool keeps"),
        Setting("CUDA_MMA", _boolean, True, "the tensor-core schedules on sm_80+ (0: the SIMT schedule)"),
        Setting("CUDA_TUNE", _cuda_tune, (), "SIMT schedule: sg=,budget=,nc= overrides"),
        Setting(
            "CUDA_MMA_DENSE", _choice("0", "1", "staged"), "staged", "dense weights: staged ring, 1 direct, 0 SIMT"
        ),
        Setting("CUDA_MMA_FUSED", _boolean, True, "concatenated weights (q/k/v) take the tensor-core schedule"),
        Setting("CUDA_MMA_STAGED", _boolean, True, "the staged ring (0: the direct loads)"),
        Setting(
            "CUDA_MMA_STAGED_LOWBIT",
            _boolean,
            True,
            "the staged ring for affine 2, 3, 5 and 6-bit weights too (0: their direct loads)",
        ),
        Setting(
            "CUDA_DECISIONS",
            _decisions,
            None,
            "tuned CUDA routes used where the tuner installed none: a decisions file, or off "
            "(default: the package's, measured on the H200; docs/TUNING.md)",
        ),
        Setting(
            "TUNE_STORE",
            _file_path,
            None,
            "the tuner's sqlite store of decisions (default: <cache root>/tune/decisions.sqlite3)",
        ),
        Setting(
            "METAL_SCHEDULE",
            _choice(*METAL_SCHEDULES),
            "simdgroup",
            "Metal schedule: simdgroup, or nax_direct / nax_staged (never measured; NAX targets only)",
        ),
        Setting(
            "PATCHED_ARCHIVES",
            _boolean,
            False,
            "patched Metal binary archives as tournament candidates (mlx_metile.native; needs macOS)",
        ),
        Setting(
            "VERIFY_RECORD",
            _boolean,
            True,
            "patch() records a verification that kept every part and skips it for the same model (0: always verify)",
        ),
    ]
    for knob, allowed in MMA_KNOBS.items():
        items.append(Setting(f"CUDA_MMA_{knob.upper()}", _int_choice(allowed), None, f"Schedule override: {knob}"))
    out = {}
    for s in items:
        full = PREFIX + s.name
        out[full] = Setting(full, s.parse, s.default, s.doc, s.name.lower())
    return out


DECLARED: dict[str, Setting] = _declare()
# Variables of other programs read here: where caches go, and where a CUDA toolkit is
EXTERNAL = ("XDG_CACHE_HOME", "CUDA_HOME")


@dataclass(frozen=True)
class Settings:
    emulate: bool = False
    debug: frozenset[str] = frozenset()
    cache: Path | None = None
    clang: str | None = None
    nvcc: str | None = None
    nvrtc: str | None = None
    cuda_include: str | None = None
    cuda_compiler: str | None = None
    cuda_binary: str = "fatbin"
    cuda_arch: str | None = None
    cuda_max_rows: int = 32
    cuda_gradients: bool = False
    cuda_native_launch: bool = True
    cuda_primitive: bool = True
    cuda_pool_mb: int = 512
    cuda_mma: bool = True
    cuda_tune: tuple[tuple[str, int], ...] = ()  # MLX_METILE_CUDA_TUNE's (key, value) pairs
    cuda_mma_dense: str = "staged"
    cuda_mma_fused: bool = True
    cuda_mma_staged: bool = True
    cuda_mma_staged_lowbit: bool = True  # MLX_METILE_CUDA_MMA_STAGED_LOWBIT
    cuda_decisions: str | None = None  # MLX_METILE_CUDA_DECISIONS: None the package's file, "" off
    tune_store: Path | None = None
    metal_schedule: str = "simdgroup"  # MLX_METILE_METAL_SCHEDULE (METAL_SCHEDULES)
    patched_archives: bool = False  # MLX_METILE_PATCHED_ARCHIVES (docs/NATIVE.md)
    verify_record: bool = True  # MLX_METILE_VERIFY_RECORD (integrations/record.py)
    # MLX_METILE_CUDA_MMA_<KNOB>: the knobs set, (knob, value) pairs (MMA_KNOBS); a tuple, so that
    # a Settings value is hashable and can key the schedule cache
    mma: tuple[tuple[str, int], ...] = ()
    xdg_cache_home: str | None = None
    cuda_home: str | None = None

    def knob(self, name: str) -> int | None:
        """MLX_METILE_CUDA_MMA_<NAME>, or None where it is not set."""
        for key, value in self.mma:
            if key == name:
                return value
        return None

    def tune(self, name: str) -> int | None:
        """MLX_METILE_CUDA_TUNE's value for `name` (sg, budget, nc), or None."""
        return dict(self.cuda_tune).get(name)

    def debugging(self, stage: str) -> bool:
        return stage in self.debug or "all" in self.debug

    @property
    def cache_root(self) -> Path:
        """The root of every cache: MLX_METILE_CACHE, else $XDG_CACHE_HOME/mlx_metile, else ~/.cache/mlx_metile."""
        if self.cache is not None:
            return self.cache
        base = Path(self.xdg_cache_home) if self.xdg_cache_home else Path.home() / ".cache"
        return base / "mlx_metile"

    @property
    def tune_store_path(self) -> Path:
        """The tuner's store: MLX_METILE_TUNE_STORE, else tune/decisions.sqlite3 under the cache root."""
        return self.tune_store if self.tune_store is not None else self.cache_root / "tune" / "decisions.sqlite3"


def parse(environ: Mapping[str, str]) -> Settings:
    """Settings from an environment mapping; ValueError naming the first malformed variable."""
    values: dict[str, Any] = {}
    mma: dict[str, int] = {}
    for name, setting in DECLARED.items():
        raw = environ.get(name)
        if raw is None or raw == "":
            continue
        value = setting.parse(name, raw)
        if setting.field.startswith("cuda_mma_") and setting.field[9:] in MMA_KNOBS:
            mma[setting.field[9:]] = value
        else:
            values[setting.field] = value
    values["mma"] = tuple(sorted(mma.items()))
    values["xdg_cache_home"] = environ.get("XDG_CACHE_HOME") or None
    values["cuda_home"] = environ.get("CUDA_HOME") or None
    return Settings(**values)


def unknown(environ: Mapping[str, str]) -> list[str]:
    """MLX_METILE_* variables set that no setting declares (misspellings)."""
    return sorted(n for n in environ if n.startswith(PREFIX) and n not in DECLARED)


_current: list[Settings] = []
_generation = [0]


def current() -> Settings:
    """The settings of this process, parsed from the environment on first use."""
    if not _current:
        _current.append(parse(os.environ))
    return _current[0]


def reload() -> Settings:
    """Parse the environment again (after it changed)."""
    _current.clear()
    _generation[0] += 1
    return current()


def generation() -> int:
    """Counts reload()s: what a cache of decisions made under the settings keys on."""
    return _generation[0]


@contextmanager
def override(**variables: str | None) -> Iterator[Settings]:
    """`with override(MLX_METILE_CUDA_MMA_STAGES="3"):` sets (None: unsets) variables for the block,
    reparsed; the environment and settings before it come back afterwards. Names without the
    MLX_METILE_ prefix get it."""
    names = {(k if k.startswith(PREFIX) or k in EXTERNAL else PREFIX + k): v for k, v in variables.items()}
    for name in names:
        if name not in DECLARED and name not in EXTERNAL:
            raise ValueError(f"{name}: not a setting of mlx-metile")
    saved = {n: os.environ.get(n) for n in names}
    try:
        for n, v in names.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
        yield reload()
    finally:
        for n, v in saved.items():
            if v is None:
                os.environ.pop(n, None)
            else:
                os.environ[n] = v
        reload()


def describe() -> str:
    """Every setting with its doc and current value (what `python -m mlx_metile.settings` prints)."""
    now = current()
    lines = []
    for name, s in DECLARED.items():
        knob = s.field[9:] if s.field.startswith("cuda_mma_") and s.field[9:] in MMA_KNOBS else None
        value = now.knob(knob) if knob else getattr(now, s.field)
        lines.append(f"{name:34s} {value!s:10s} {s.doc}")
    return "\n".join(lines)


def environment_path() -> list[str]:
    """The directories of PATH (where the emulator looks for clang-NN)."""
    return [d for d in os.environ.get("PATH", "").split(os.pathsep) if d]


if __name__ == "__main__":  # pragma: no cover - `python -m mlx_metile.settings` lists them
    print(describe())
    sys.exit(0)
