"""LLVM 14's tools for our own AIR: Metal's loader takes LLVM <= 15 bitcode with typed pointers, which
LLVM 14 writes (Debian's llvm-14; scripts/test installs it). `assemble` runs llvm-as, whose verifier
rejects an ill-formed module; `verify` and `optimize` run opt (the verifier is target independent,
and opt is given x86-64 because LLVM 14 knows no air64 target)."""

from __future__ import annotations

import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

from .errors import ToolError

LLVM14_BIN = Path("/usr/lib/llvm-14/bin")
# Homebrew's llvm@14 kegs (macOS, Apple silicon and Intel), whose tools carry no -14 suffix
LLVM14_KEGS = (Path("/opt/homebrew/opt/llvm@14/bin"), Path("/usr/local/opt/llvm@14/bin"))


def tool14(name: str) -> str:
    for cand in (f"{name}-14", str(LLVM14_BIN / name), *(str(keg / name) for keg in LLVM14_KEGS)):
        found = shutil.which(cand) or (cand if Path(cand).is_file() else None)
        if found:
            return found
    raise ToolError(
        f"LLVM 14's {name} is not installed: apt-get install llvm-14 (scripts/test does), or brew install llvm@14"
    )


@lru_cache(maxsize=1)
def available() -> bool:
    """Whether LLVM 14's llvm-as is installed (our AIR is assembled by it)."""
    try:
        tool14("llvm-as")
    except ToolError:
        return False
    return True


@lru_cache(maxsize=1)
def version() -> str:
    """llvm-as's version line (a compiler identity of our AIR builds), or why there is none."""
    try:
        done = subprocess.run([tool14("llvm-as"), "--version"], capture_output=True, text=True, timeout=60)
    except (ToolError, OSError, subprocess.SubprocessError) as e:
        return f"unavailable ({type(e).__name__})"
    lines = [line.strip() for line in done.stdout.splitlines() if "version" in line.lower()]
    return lines[0] if lines else done.stdout.strip()[:200]


def _run(args: list[str], stdin: bytes, what: str) -> bytes:
    done = subprocess.run(args, input=stdin, capture_output=True, check=False)
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        raise ToolError(f"{what} failed ({Path(args[0]).name}, exit {done.returncode}):\n{err[-4000:]}")
    return done.stdout


def assemble(text: str, what: str = "an AIR module") -> bytes:
    """The bitcode of LLVM 14 assembly `text`, verified by llvm-as."""
    return _run([tool14("llvm-as"), "-o", "-", "-"], text.encode(), f"assembling {what}")


def verify(module: str | bytes, what: str = "an AIR module") -> None:
    """Run LLVM 14's verifier over assembly or bitcode; ToolError with its diagnostics if it fails."""
    data = module.encode() if isinstance(module, str) else module
    _run(
        [tool14("opt"), "-mtriple=x86_64-unknown-linux-gnu", "-verify", "-disable-output", "-"],
        data,
        f"verifying {what}",
    )


def optimize(module: str | bytes, passes: str = "default<O2>", what: str = "an AIR module") -> str:
    """The module after LLVM 14's `passes`, as assembly (to compare what forms become)."""
    data = module.encode() if isinstance(module, str) else module
    args = [tool14("opt"), "-mtriple=x86_64-unknown-linux-gnu", f"-passes={passes}", "-S", "-o", "-", "-"]
    return _run(args, data, f"optimizing {what}").decode()


def x86_assembly(module: str | bytes, attrs: str = "+fma", what: str = "an AIR module") -> str:
    """x86-64 assembly of the module after O2, for `attrs` (an FMA-capable CPU by default): what a
    form's fast-math flags let a backend with fused multiply-add do, which the CPU executor's
    generic x86-64 (no FMA) cannot show in results."""
    optimized = optimize(module, what=what).encode()
    args = [tool14("llc"), "-mtriple=x86_64-unknown-linux-gnu", f"-mattr={attrs}", "-O2", "-o", "-", "-"]
    return _run(args, optimized, f"compiling {what} for x86-64 ({attrs})").decode()
