"""Generated CUDA run on the CPU, for tests: the kernel's own source, compiled as C++ against
cuda_emu.h (beside this file), a block's CUDA threads run as fibers on the calling thread, so
that CI checks the values of the CUDA kernels (the GPU machine is lent only briefly)
and not only that they compile.

What differs from the GPU build: the inline PTX statements of the helpers become calls into
cuda_emu.h (mma.sync -> an exchange of the warp's fragments with f32 accumulation in k order;
lop3 -> (a & b) | c; cp.async -> a copy, the commit / wait no-ops); everything else - the
kernel body, its unpacking, K split, ring layout, reductions and epilogue - is the generated
text itself. The PTX itself is checked only on the GPU (tests/gpu/).

    run(artifact, buffers, scalars, rows, cols)      # the op's grid for rows x cols
    launch(artifact, buffers, scalars, (gx, gy))     # a given grid of blocks
(buffers: numpy arrays of the element bits in the kernel's order, outputs written in place)
"""

from __future__ import annotations

import ctypes
import hashlib
import mmap
import os
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from mlx_metile.codegen.cuda import CUDARenderer
from mlx_metile.emu.toolchain import cache_root, run_clang

HEADER = Path(__file__).with_name("cuda_emu.h")

# inline PTX of codegen/cuda.py's helpers -> the emulator's statement, by what the asm says
_ASM_REPLACEMENTS = (
    ("mma.sync.aligned.m16n8k16.row.col.f32.bf16", "metile_emu::mma_bf16(c, a0, a1, a2, a3, b0, b1);"),
    ("mma.sync.aligned.m16n8k16.row.col.f32.f16", "metile_emu::mma_f16(c, a0, a1, a2, a3, b0, b1);"),
    ("lop3.b32", "d = (a & mask) | magic;"),
    ("cp.async.cg.shared.global", "metile_emu::copy(dst, src, ok ? 16 : 0, 16);"),
    ("cp.async.ca.shared.global", "metile_emu::copy(dst, src, ok ? N : 0, N);"),
    ("cp.async.commit_group", "(void)0;"),
    ("cp.async.wait_group", "(void)0;"),
)
_ASM = re.compile(r"asm(?: volatile)?\((?:[^;]|;(?!\s*$))*?\);", re.MULTILINE)


class CudaEmulationError(RuntimeError):
    """The generated CUDA could not be turned into, or built as, C++ for the CPU."""


def host_source(source: str, dynamic_shared: int = 0) -> str:
    """The generated CUDA as C++ for cuda_emu.h: its includes swapped, its PTX replaced, and
    its dynamic shared array (if any) declared with the `dynamic_shared` bytes of a launch."""
    if "#include <cuda_fp16.h>" not in source:
        raise CudaEmulationError("not a generated CUDA kernel: its cuda_fp16 include is missing")
    text = source.replace("#include <cuda_fp16.h>", '#include "cuda_emu.h"').replace("#include <cuda_bf16.h>", "")
    dynamic = re.compile(r"extern __shared__ (__align__\(\d+\) )?unsigned char (\w+)\[\];")
    if dynamic.search(text):
        if dynamic_shared <= 0:
            raise CudaEmulationError("the kernel declares dynamic shared memory but no size was given")
        text = dynamic.sub(
            lambda m: f"__shared__ {m.group(1) or ''}unsigned char {m.group(2)}[{dynamic_shared}];", text
        )

    def replace(m: re.Match) -> str:
        for marker, statement in _ASM_REPLACEMENTS:
            if marker in m.group(0):
                return statement
        raise CudaEmulationError(f"no CPU version of this inline PTX: {m.group(0)[:120]}")

    text = _ASM.sub(replace, text)
    if re.search(r"\basm\b", text):
        raise CudaEmulationError("inline PTX left after translation")
    return text


def _launcher(entry: str, params) -> str:
    """extern "C" metile_emu_launch(args, gx, gy, threads, stacks, bytes): the kernel over the
    grid, its buffers and scalars from `args` in the kernel's order; cuda_emu.h's launch status."""
    types = CUDARenderer.types
    args = []
    for i, p in enumerate(params):
        if p.kind == "scalar":
            args.append(f"*static_cast<const int*>(args[{i}])")
        else:
            const = "" if p.output else "const "
            args.append(f"static_cast<{const}{types[p.dtype]}*>(args[{i}])")
    return (
        f"static void metile_emu_body(void** args) {{ {entry}({', '.join(args)}); }}\n"
        'extern "C" int metile_emu_launch(void** args, int gx, int gy, int threads, char** stacks, size_t bytes) {\n'
        "  return metile_emu::launch(gx, gy, threads, metile_emu_body, args, stacks, bytes);\n"
        "}\n"
    )


def build(artifact) -> Path:
    """The artifact as a shared library for the CPU, cached by its text."""
    built = _built.get((artifact.key, artifact.dynamic_shared))
    if built is not None:
        return built
    text = host_source(artifact.source, artifact.dynamic_shared) + "\n" + _launcher(artifact.entry, artifact.params)
    key = hashlib.sha256(f"{text}\0{_header()}".encode()).hexdigest()[:24]
    out = cache_root("cuda_emu") / f"{artifact.entry}-{key}.so"
    if not out.exists():
        src = out.with_suffix(".cpp")
        src.write_text(text)
        tmp = out.with_suffix(f".{os.getpid()}.tmp.so")  # another process may build the same
        flags = ["-x", "c++", "-std=c++20", "-O1", "-fPIC", "-shared", "-w", f"-I{HEADER.parent}"]
        res = run_clang([*flags, str(src), "-o", str(tmp), "-lstdc++", "-lm"])
        if res.returncode != 0:
            raise CudaEmulationError(f"building {artifact.entry} for the CPU failed:\n{res.stderr[-4000:]}")
        tmp.replace(out)
    _built[artifact.key, artifact.dynamic_shared] = out
    return out


@lru_cache(maxsize=1)
def _header() -> str:
    return HEADER.read_text()


_built: dict[tuple[str, int], Path] = {}  # (artifact key, dynamic shared bytes) -> its library
STACK_BYTES = 256 * 1024  # a CUDA thread's stack; its pages are committed when touched
MAX_THREADS = 1024  # a block's (cuda_emu.h's MAX_WARPS)


@lru_cache(maxsize=1)
def _stacks():
    """MAX_THREADS stack pointers (the top of each), each stack above a guard page that faults on
    overflow: mapped once per process and reused by every launch, which so touches no new pages."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    page, span = mmap.PAGESIZE, mmap.PAGESIZE + STACK_BYTES
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_NORESERVE", 0)
    base = libc.mmap(None, span * MAX_THREADS, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    if base in (None, ctypes.c_void_p(-1).value):
        raise CudaEmulationError(f"no address space for the thread stacks: errno {ctypes.get_errno()}")
    for t in range(MAX_THREADS):
        if libc.mprotect(base + span * t, page, 0):  # (PROT_NONE)
            raise CudaEmulationError(f"cannot protect a stack's guard page: errno {ctypes.get_errno()}")
    return (ctypes.c_void_p * MAX_THREADS)(*(base + span * t + page for t in range(MAX_THREADS)))


_loaded: dict[Path, ctypes.CDLL] = {}
_FAILURES = {  # cuda_emu.h's launch status
    1: "deadlock: every thread left waits at a barrier that cannot open",
    2: "a block size the emulator does not take (a multiple of 32 up to 1024)",
}


def run(artifact, buffers: list[np.ndarray], scalars: dict[str, int], rows: int, cols: int) -> None:
    """Launch the artifact's kernel on the CPU over the grid the op would use for `rows` x
    `cols` (see launch)."""
    gx, gy, _ = artifact.grid(rows, cols)
    launch(artifact, buffers, scalars, (gx, gy))


def launch(artifact, buffers: list[np.ndarray], scalars: dict[str, int], blocks: tuple[int, int]) -> None:
    """The artifact's kernel on the CPU over `blocks` (x, y): `buffers` are the kernel's
    buffer arguments in order (C-contiguous numpy arrays of the element bits; outputs are
    written in place), `scalars` its int arguments by name."""
    path = build(artifact)
    if path not in _loaded:
        _loaded[path] = ctypes.CDLL(str(path))
        _loaded[path].metile_emu_launch.restype = ctypes.c_int
    lib = _loaded[path]
    keep, pointers = [], []
    it = iter(buffers)
    for p in artifact.params:
        if p.kind == "scalar":
            value = np.array([scalars[p.name]], dtype=np.int32)
            keep.append(value)
            pointers.append(value.ctypes.data)
        else:
            arr = next(it)
            if not arr.flags["C_CONTIGUOUS"]:
                raise ValueError(f"{p.name}: the emulator takes C-contiguous arrays")
            pointers.append(arr.ctypes.data)
    if next(it, None) is not None:
        raise ValueError(f"{artifact.entry}: more buffers given than the kernel takes")
    threads = artifact.threads_per_group[0]
    argv = (ctypes.c_void_p * len(pointers))(*pointers)
    status = lib.metile_emu_launch(
        argv, ctypes.c_int(blocks[0]), ctypes.c_int(blocks[1]), ctypes.c_int(threads), _stacks(),
        ctypes.c_size_t(STACK_BYTES),
    )  # fmt: skip
    if status:
        raise CudaEmulationError(
            f"{artifact.entry}: {_FAILURES.get(status, status)} ({threads} threads, {blocks} blocks)"
        )
