"""The AIR executor's API, shaped like the emulator's (mlx_metile.emu.Kernel):

    lib = Library.read("mlx.metallib")                  # a metallib: path or bytes
    fn = lib.function("steel_gemm_...", constants={"has_batch": False, ...})
    fn.dispatch_threadgroups(grid=(4, 4, 1), threadgroup=(32, 2, 2), buffers=[a, b, None, d, params])

A `Library` is also made of bare modules (`Library.of_modules`), which is how our own AIR runs
through the same executor before it is packed into a metallib. Dispatches run on the emulator's
fiber runtime, so faults are the emulator's (`mlx_metile.emu.KernelFault`: out of bounds, barrier,
collective, uninitialized threadgroup read, trap, deadlock).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..emu.kernel import FAULT_KINDS, BufferArg, DispatchStats, KernelFault, _load_runtime
from ..emu.kernel import Kernel as _EmulatedKernel
from .build import build, disassemble, symbolize
from .errors import AirError
from .metallib import Metallib
from .module import Kernel, Param, kernels
from .retarget import ConstantValue, resolve_constants


@dataclass(frozen=True)
class _Binding:
    """What the emulator's launcher asks of a kernel's parameters (emu.translate.Translation's
    protocol): `params` with kind / index / name, `buffer(i)` with `elem` for scalars."""

    params: tuple
    kernel: Kernel

    def buffer(self, index: int) -> Param | None:
        return self.kernel.buffer(index)


@dataclass(frozen=True)
class _Required:
    kind: str
    index: int
    name: str


class Function(_EmulatedKernel):
    """One AIR kernel with its function constants set, compiled for the CPU.

    It is the emulator's `Kernel` with another build: its launcher (argument packing, the runtime
    call, fault reporting) reads `translation.params` / `translation.buffer(i)`, which `_Binding`
    provides from the AIR metadata. `dispatch_threadgroups(grid, threadgroup, buffers,
    threadgroup_memory)` and `dispatch_threads(...)` behave as the emulator's: numpy buffers are
    read and written in place, Python scalars are packed to the parameter's type, bytes are passed
    as they are."""

    def __init__(self, ll: str, kernel: Kernel, constants: Mapping[str, ConstantValue], digest: str):
        self.name = kernel.name
        self.kernel = kernel
        self.constants = dict(constants)
        self.path, self.source = build(ll, kernel, self.constants, digest)
        self.translation = _Binding(self._required(), kernel)  # type: ignore[assignment]
        self._runtime = _load_runtime()
        self._lib = ctypes.CDLL(str(self.path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self._info = ctypes.c_void_p.in_dll(self._lib, "metile_kernel")
        self._info_addr = ctypes.addressof(self._info)

    def _required(self) -> tuple[_Required, ...]:
        """Bindings a dispatch must have: used buffers whose function-constant predicate holds."""
        out = []
        for p in self.kernel.params:
            if p.kind not in ("buffer", "threadgroup") or p.unused:
                continue
            if p.predicate is not None and not self.constants.get(p.predicate, True):
                continue
            out.append(_Required(p.kind, p.index, p.name))
        return tuple(out)

    @property
    def buffers(self) -> tuple[Param, ...]:
        return tuple(p for p in self.kernel.params if p.kind == "buffer")

    def pack(self, index: int, **values: int | float) -> bytes:
        """The bytes of the struct [[buffer(index)]] takes, laid out as the kernel's metadata
        says (air.struct_type_info), every member given by name."""
        p = self.kernel.buffer(index)
        if p is None or not p.fields:
            raise ValueError(f"{self.name}: buffer({index}) is not a struct the metadata lays out")
        names = [f.name for f in p.fields]
        unknown = sorted(set(values) - set(names))
        missing = [n for n in names if n not in values]
        if unknown or missing:
            raise ValueError(
                f"{self.name}: {p.elem} members are {', '.join(names)}; "
                + (f"unknown: {', '.join(unknown)} " if unknown else "")
                + (f"missing: {', '.join(missing)}" if missing else "")
            )
        out = bytearray(p.elem_size or max(f.offset + f.size for f in p.fields))
        for f in p.fields:
            code = _STRUCT_CODES.get((f.type, f.size))
            if code is None:
                raise ValueError(f"{self.name}: member {f.name} of type {f.type} ({f.size} bytes) cannot be packed")
            struct.pack_into("<" + code, out, f.offset, values[f.name])
        return bytes(out)

    def _raise(self, r) -> None:
        """The emulator's fault as its exception, located in the AIR disassembly."""
        kind = FAULT_KINDS.get(r.fault_kind, "fault")
        message = r.message.decode(errors="replace")
        location = None
        if r.fault_line > 0:
            location = f"{os.path.basename(r.fault_file.decode())}:{r.fault_line}"
        elif r.fault_pc_offset:
            location = symbolize(self.path, r.fault_pc_offset)
        if kind == "launch":
            raise ValueError(f"{self.name}: {message}")
        raise KernelFault(kind, location, f"{self.name}: {message}")

    def _check_size(self, tg: tuple[int, int, int]) -> None:
        limit = self.kernel.max_threads
        n = tg[0] * tg[1] * tg[2]
        if limit is not None and n > limit:
            raise ValueError(f"{self.name}: threadgroup {tg} has {n} threads; the kernel allows at most {limit}")

    def dispatch_threadgroups(
        self,
        grid: Sequence[int] | int,
        threadgroup: Sequence[int] | int,
        buffers: Sequence[BufferArg] = (),
        threadgroup_memory: Sequence[int] = (),
        *,
        order: str = "forward",
        seed: int = 0,
    ) -> DispatchStats:
        self._check_size(_dims(threadgroup))
        return super().dispatch_threadgroups(grid, threadgroup, buffers, threadgroup_memory, order=order, seed=seed)

    def dispatch_threads(
        self,
        grid: Sequence[int] | int,
        threadgroup: Sequence[int] | int,
        buffers: Sequence[BufferArg] = (),
        threadgroup_memory: Sequence[int] = (),
        *,
        order: str = "forward",
        seed: int = 0,
    ) -> DispatchStats:
        self._check_size(_dims(threadgroup))
        return super().dispatch_threads(grid, threadgroup, buffers, threadgroup_memory, order=order, seed=seed)


_STRUCT_CODES = {
    ("int", 4): "i",
    ("uint", 4): "I",
    ("long", 8): "q",
    ("ulong", 8): "Q",
    ("short", 2): "h",
    ("ushort", 2): "H",
    ("float", 4): "f",
    ("half", 2): "e",
    ("bool", 1): "?",
    ("char", 1): "b",
    ("uchar", 1): "B",
}


def _dims(v: Sequence[int] | int) -> tuple[int, int, int]:
    vals = (v,) if isinstance(v, int) else tuple(v)
    vals = tuple(int(x) for x in vals) + (1,) * (3 - len(vals))
    return vals[:3]  # type: ignore[return-value]


class Library:
    """AIR modules by function name: a metallib's functions, or modules given as bitcode."""

    def __init__(self, modules: Mapping[str, bytes], metallib: Metallib | None = None):
        self._bitcode = dict(modules)  # function name -> bare bitcode of its module
        self.metallib = metallib
        self._ll: dict[str, str] = {}
        self._functions: dict[tuple, Function] = {}

    @classmethod
    def read(cls, source: str | Path | bytes | bytearray | memoryview) -> Library:
        """A metallib, from its path or its bytes."""
        lib = Metallib.read(source)
        return cls({f.name: f.bitcode for f in lib.functions}, lib)

    @classmethod
    def of_modules(cls, modules: Sequence[bytes]) -> Library:
        """Bare AIR modules (bitcode): each kernel of each, by its name."""
        out = {}
        for bc in modules:
            ll = disassemble(bc, "an AIR module")
            for name in kernels(ll):
                if name in out:
                    raise AirError(f"kernel {name!r} is defined by two of the modules")
                out[name] = bytes(bc)
        return cls(out)

    def names(self) -> list[str]:
        return list(self._bitcode)

    def __contains__(self, name: str) -> bool:
        return name in self._bitcode

    def disassembly(self, name: str) -> str:
        if name not in self._bitcode:
            raise KeyError(f"no function {name!r} in this library ({len(self._bitcode)} functions)")
        if name not in self._ll:
            self._ll[name] = disassemble(self._bitcode[name], name)  # llvm-dis reads the wrapper too
        return self._ll[name]

    def kernel(self, name: str) -> Kernel:
        """The kernel's parameters and function constants, as its module's metadata declares them."""
        found = kernels(self.disassembly(name))
        if name not in found:
            raise AirError(f"{name!r} is in the library but its module declares no kernel of that name (!air.kernel)")
        return found[name]

    def function(self, name: str, constants: Mapping[str | int, ConstantValue] | None = None) -> Function:
        """The kernel `name`, compiled for the CPU with its function constants set (by name or index)."""
        kernel = self.kernel(name)
        values = resolve_constants(kernel, constants or {})
        key = (name, tuple(sorted(values.items())))
        if key not in self._functions:
            ll = self.disassembly(name)
            digest = hashlib.sha256(self._bitcode[name]).hexdigest()
            self._functions[key] = Function(ll, kernel, values, digest)
        return self._functions[key]
