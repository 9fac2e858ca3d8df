"""Building an AIR kernel for the CPU: disassemble (llvm-dis), retarget (retarget.py), optimize and
instrument (opt: O2, then ThreadSanitizer's pass), compile (llc) and link against the emulator's
runtime. The tools are those of the LLVM release of the emulator's clang (19 here): LLVM 19 reads
Apple's AIR bitcode and LLVM 14's alike.

Objects are cached under the settings' cache root (`<cache>/air/<key>/`), keyed by the bitcode,
the kernel, the function constants, this room's sources, the tools and the emulator runtime; each
file is sealed with its checksum and rebuilt when damaged (mlx_metile.cache).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

from .. import cache
from ..emu.build import runtime_library
from ..emu.toolchain import find_clang, run_clang, tool_beside_clang
from .errors import ToolError
from .module import Kernel
from .retarget import ConstantValue, retarget

HERE = Path(__file__).parent
EXECUTOR_VERSION = "1"
TSAN_FLAGS = ["-tsan-instrument-func-entry-exit=0", "-tsan-instrument-atomics=0"]
_lock = threading.Lock()


def tool(name: str) -> str:
    found = tool_beside_clang(name)
    if not found:
        raise ToolError(
            f"the AIR executor needs LLVM's {name} of the emulator's clang ({find_clang()}): "
            "install Debian's llvm-19 (apt-get install llvm-19)"
        )
    return found


def _run(args: list[str], what: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(args, input=stdin, capture_output=True, check=False)
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip()
        raise ToolError(f"{what} failed ({os.path.basename(args[0])}, exit {done.returncode}):\n{err[-4000:]}")
    return done


def symbolize(so: Path, offset: int) -> str | None:
    """`kernel.air.ll:LINE` for a code offset (a return address) in a built kernel object."""
    found = tool_beside_clang("llvm-symbolizer")
    if not found or offset <= 0:
        return None
    res = subprocess.run([found, f"--obj={so}", hex(offset - 1)], capture_output=True, text=True, check=False)
    for line in res.stdout.split("\n"):
        m = re.match(r"(.*\.ll):(\d+)", line.strip())
        if m:
            return f"{os.path.basename(m.group(1))}:{m.group(2)}"
    return None


def disassemble(bitcode: bytes, what: str) -> str:
    """LLVM assembly of a module's bitcode (bare or in LLVM's wrapper)."""
    return _run([tool("llvm-dis"), "-o", "-", "-"], f"disassembling {what}", bitcode).stdout.decode()


def _fingerprint() -> str:
    h = hashlib.sha256(EXECUTOR_VERSION.encode())
    for f in sorted(HERE.glob("*.py")):
        h.update(f.read_bytes())
    for t in ("llvm-dis", "opt", "llc"):
        h.update(tool(t).encode())
    h.update(find_clang().encode())
    return h.hexdigest()[:16]


def _key(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:24]


def build(ll: str, kernel: Kernel, constants: Mapping[str, ConstantValue], bitcode_digest: str) -> tuple[Path, Path]:
    """(shared object, the AIR disassembly it was built from) for `kernel` with `constants`."""
    rt = runtime_library()
    key = _key(_fingerprint(), bitcode_digest, kernel.name, repr(sorted(constants.items())), rt.name)
    workdir = cache.root("air") / key
    so, air_ll = workdir / "kernel.so", workdir / "kernel.air.ll"
    if cache.verified(so, key) and cache.verified(air_ll, key):
        return so, air_ll
    with _lock:
        if workdir.exists() and not workdir.is_dir():
            cache.discard(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        cache.store(air_ll, ll.encode(), key)
        x86 = retarget(ll, kernel, constants, air_ll.name, str(workdir))
        cache.store(workdir / "kernel.x86.ll", x86.encode(), key)
        obj, tmp, opt_bc = (cache.temporary(workdir / n) for n in ("kernel.o", "kernel.so", "kernel.opt.bc"))
        try:
            _run(
                [tool("opt"), "-passes=default<O2>,tsan-module,function(tsan)", *TSAN_FLAGS, "-o", str(opt_bc)],
                f"optimizing {kernel.name}",
                x86.encode(),
            )
            _run(
                [tool("llc"), "-O2", "-filetype=obj", "-relocation-model=pic", str(opt_bc), "-o", str(obj)],
                f"compiling {kernel.name}",
            )
            # the runtime by its SONAME, found in the emulator's cache folder beside ours
            rpath = "$ORIGIN/" + os.path.relpath(rt.parent, workdir)
            res = run_clang(
                ["-shared", "--rtlib=compiler-rt", str(obj), str(rt), f"-Wl,-rpath,{rpath}", "-lm", "-o", str(tmp)]
            )
            if res.returncode != 0:
                raise ToolError(f"linking {kernel.name} failed:\n{res.stderr[-4000:]}")
            os.replace(tmp, so)
            cache.seal(so, key)
        finally:
            for f in (obj, tmp, opt_bc):
                f.unlink(missing_ok=True)
    return so, air_ll
