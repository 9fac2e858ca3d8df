"""Compiling emulated kernels: the runtime library once, each kernel once per
(source, flags, emulator version), with a lint pass that rejects what MSL
rejects. Results are cached under the user cache directory."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import threading
from pathlib import Path

from .. import cache
from .preprocess import KERNEL_STD, METAL_DEFINES
from .toolchain import cache_dir, find_clang, run_clang, tool_beside_clang
from .translate import UNSET_CONSTANT, Translation, entry_point

HERE = Path(__file__).parent
INCLUDE = HERE / "include"
RUNTIME = HERE / "runtime"
EMULATOR_VERSION = "1"

COMMON_FLAGS = [
    "-fPIC",
    "-fno-exceptions",
    "-fno-rtti",
    "-ffp-contract=off",  # round after every operation, as written
    "-fno-math-errno",
    "-Xclang",
    "-ffloat16-excess-precision=none",
    "-Xclang",
    "-fbfloat16-excess-precision=none",
    f"-I{INCLUDE}",
    f"-I{RUNTIME}",
]
KERNEL_FLAGS = [
    "-x",
    "c++",
    KERNEL_STD,
    "-O2",
    "-gline-tables-only",
    "-include",
    "metile_metal.h",
    *METAL_DEFINES,
    "-Wno-unknown-attributes",
    "-Wno-unknown-pragmas",
    "-Wno-duplicate-decl-specifier",
    "-Werror=return-type",
    "-Werror=vla",
    "-Werror=infinite-recursion",
]
# ThreadSanitizer's instrumentation, with our runtime's callbacks instead of
# TSan's: every load and store of the kernel is checked and counted.
INSTRUMENT_FLAGS = [
    # TSan instruments accesses of 1 to 16 bytes only: no vector code, so none is wider
    "-fno-vectorize",
    "-fno-slp-vectorize",
    "-fsanitize=thread",
    "-mllvm",
    "-tsan-instrument-func-entry-exit=0",
    "-mllvm",
    "-tsan-instrument-atomics=0",
]

_lock = threading.Lock()


class CompileError(ValueError):
    """The kernel does not compile, or uses what MSL rejects. Carries file:line."""


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:20]


def _emulator_fingerprint() -> str:
    files = sorted(INCLUDE.rglob("*")) + sorted(RUNTIME.iterdir()) + [Path(__file__)]
    return _digest(EMULATOR_VERSION, find_clang(), *(f.read_bytes() for f in files if f.is_file()))


def _atomic_write(path: Path, data: str) -> None:
    tmp = cache.temporary(path)
    try:
        tmp.write_text(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _install(tmp: Path, target: Path, key: str) -> None:
    """A tool's output, renamed into the cache and sealed with its checksum."""
    if target.is_dir() and not target.is_symlink():
        cache.discard(target)
    os.replace(tmp, target)
    cache.seal(target, key)


def runtime_library() -> Path:
    """Build (once) the shared runtime every kernel object links against. Its SONAME is its file
    name, so kernels record that name (not a path) and find it beside their folder: a cache that
    is copied or moved still works."""
    fp = _emulator_fingerprint()
    lib = cache_dir() / f"libmetile_emu_rt-{fp}.so"
    with _lock:
        if cache.verified(lib, fp):
            return lib
        tmp = cache.temporary(lib)
        args = [*COMMON_FLAGS, "-std=c++17", "-O2", "-g", "-U_FORTIFY_SOURCE", "-shared", "--rtlib=compiler-rt"]
        args += [f"-Wl,-soname,{lib.name}"]
        try:
            res = run_clang([*args, str(RUNTIME / "runtime.cpp"), "-o", str(tmp), "-ldl", "-lstdc++"])
            if res.returncode != 0:
                raise CompileError(f"building the emulator runtime failed:\n{res.stderr}")
            _install(tmp, lib, fp)
        finally:
            tmp.unlink(missing_ok=True)
    return lib


def _clean_diagnostics(text: str, workdir: Path) -> str:
    text = text.replace(str(workdir) + os.sep, "")
    return text.replace("METILE_TG_PTR", "threadgroup").replace("METILE_TG_STORAGE", "threadgroup")


def _lint(t: Translation, workdir: Path, address_spaces: bool) -> None:
    """What a plain C++ compile would accept but MSL rejects."""
    src = workdir / t.filename
    # 1. address spaces as distinct clang address spaces (C++ cannot copy a class object from one
    # to another, which Metal can: code that does so is built with address_spaces=False)
    if address_spaces:
        res = run_clang([*COMMON_FLAGS, *KERNEL_FLAGS, "-DMETILE_LINT", "-fsyntax-only", str(src)])
        if res.returncode != 0:
            raise CompileError(_clean_diagnostics(res.stderr, workdir))
    # 2. recursion and mutable program-scope variables, read off the IR
    res = run_clang([*COMMON_FLAGS, *KERNEL_FLAGS, "-O0", "-S", "-emit-llvm", "-o", "-", str(src)])
    if res.returncode != 0:
        raise CompileError(_clean_diagnostics(res.stderr, workdir))
    check_ir(res.stdout, t.filename)


def _demangle(names: list[str]) -> list[str]:
    tool = tool_beside_clang("llvm-cxxfilt")
    if not tool:
        return names
    out = subprocess.run([tool, *names], capture_output=True, text=True, check=False).stdout.split("\n")
    return out[: len(names)] if len(out) >= len(names) else names


def check_ir(ir: str, filename: str) -> None:
    for m in re.finditer(r'^@("?[^\s=]+"?) = ([^\n]*)$', ir, re.M):
        name, rest = m.group(1).strip('"'), m.group(2)
        if name.startswith(("llvm.", ".str", "__start_", "__stop_", "metile_")) or "metile_tg" in rest:
            continue
        if re.search(r"\bglobal\b", rest) and not re.search(r"\bconstant\b", rest.split(",")[0]):
            (pretty,) = _demangle([name])
            raise CompileError(
                f"{filename}: program-scope variable `{pretty}` is not `constant`; MSL allows only "
                "constant program-scope variables (use threadgroup or thread storage inside the kernel)"
            )
    calls: dict[str, set[str]] = {}
    current = None
    for line in ir.split("\n"):
        d = re.match(r"define [^@]*@(\"?[\w.$]+\"?)\(", line)
        if d:
            current = d.group(1).strip('"')
            calls[current] = set()
        elif line.startswith("}"):
            current = None
        elif current:
            for c in re.findall(r"(?:call|invoke) [^@]*@(\"?[\w.$]+\"?)\(", line):
                calls[current].add(c.strip('"'))
    # depth-first search for a cycle among defined functions
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(f: str) -> list[str] | None:
        state[f] = 1
        stack.append(f)
        for g in sorted(calls.get(f, ())):
            if g not in calls:
                continue
            if state.get(g) == 1:
                return stack[stack.index(g) :] + [g]
            if g not in state:
                cycle = visit(g)
                if cycle:
                    return cycle
        stack.pop()
        state[f] = 2
        return None

    for f in sorted(calls):
        if f not in state:
            cycle = visit(f)
            if cycle:
                pretty = " -> ".join(_demangle(cycle))
                raise CompileError(f"{filename}: recursion is not supported in MSL: {pretty}")


def build_kernel(t: Translation, extra_flags: tuple[str, ...] = (), *, address_space_lint: bool = True) -> Path:
    """Compile and link a translated kernel; returns its shared object, checked against the
    checksum recorded when it was built (a damaged one is rebuilt)."""
    rt = runtime_library()
    key = _digest(t.cpp, t.name, " ".join(extra_flags), rt.name)
    workdir = cache_dir() / key
    so = workdir / f"{t.name}.so"
    if cache.verified(so, key):
        return so
    if workdir.exists() and not workdir.is_dir():
        cache.discard(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    src = workdir / t.filename
    _atomic_write(src, t.cpp)
    _lint(t, workdir, address_space_lint)
    full = workdir / f"{t.name}.full.cpp"
    _atomic_write(full, t.cpp + entry_point(t))
    obj, tmp = cache.temporary(workdir / f"{t.name}.o"), cache.temporary(so)
    try:
        flags = [*COMMON_FLAGS, *KERNEL_FLAGS, *INSTRUMENT_FLAGS, *extra_flags]
        res = run_clang([*flags, "-c", str(full), "-o", str(obj)])
        if res.returncode != 0:
            raise CompileError(_clean_diagnostics(res.stderr, workdir))
        # the runtime by its SONAME, found beside the kernel's folder ($ORIGIN/..)
        link = ["-shared", "--rtlib=compiler-rt", str(obj), str(rt), "-Wl,-rpath,$ORIGIN/..", "-o", str(tmp)]
        res = run_clang([*link, "-lm", "-Wl,-z,defs"])
        if res.returncode != 0:
            unset = sorted(set(re.findall(UNSET_CONSTANT + r"(\d+)_(\w+)", res.stderr)))
            if unset:
                names = ", ".join(f"`{n}` (index {i})" for i, n in unset)
                raise CompileError(
                    f"{t.filename}: the kernel uses function constant {names} but no value was given: pass "
                    "function_constants={index or name: value}"
                )
            raise CompileError(f"linking {t.name} failed:\n{res.stderr}")
        _install(tmp, so, key)
    finally:
        obj.unlink(missing_ok=True)
        tmp.unlink(missing_ok=True)
    return so


def _in_shim(path: str) -> bool:
    """Whether a debug-info path is one of the shim's headers - by its path below emu/include, so
    that an object built from another checkout of the package (a shared cache) is read alike."""
    parts = Path(path).parts
    return any(parts[i : i + 2] == ("emu", "include") for i in range(len(parts) - 2))


def symbolize(so: Path, offset: int) -> str | None:
    """file:line in the kernel's source for a code offset (a return address): the innermost inlined
    frame that is the kernel's own code (its .metal file or its headers), not the emulator's."""
    tool = tool_beside_clang("llvm-symbolizer")
    if not tool or offset <= 0:
        return None
    res = subprocess.run([tool, f"--obj={so}", hex(offset - 1)], capture_output=True, text=True, check=False)
    for line in res.stdout.split("\n"):
        m = re.match(r"(.+):(\d+):\d+$", line.strip())
        if not m or m.group(1).startswith("<") or _in_shim(m.group(1)):
            continue
        if m.group(1).endswith((".metal", ".h", ".hpp", ".inc")) or "." not in os.path.basename(m.group(1)):
            return f"{os.path.basename(m.group(1))}:{m.group(2)}"
    return None
