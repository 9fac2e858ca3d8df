"""The emulator's Python API: compile an MSL kernel, dispatch it on numpy data."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .build import build_kernel, runtime_library, symbolize
from .translate import FunctionConstant, Translation, translate

MAX_BUFFERS = 31
MAX_THREADS_PER_THREADGROUP = 1024
ORDERS = {"forward": 0, "reversed": 1, "shuffled": 2}

FAULT_KINDS = {
    1: "launch",
    2: "barrier",
    3: "collective",
    4: "out_of_bounds",
    5: "uninitialized_threadgroup_read",
    6: "trap",
    7: "deadlock",
}

# Scalars passed as buffers are packed to the parameter's declared type.
_SCALAR_DTYPES = {
    "float": np.float32,
    "half": np.float16,
    "int": np.int32,
    "uint": np.uint32,
    "short": np.int16,
    "ushort": np.uint16,
    "char": np.int8,
    "uchar": np.uint8,
    "long": np.int64,
    "ulong": np.uint64,
    "bool": np.bool_,
    "int32_t": np.int32,
    "uint32_t": np.uint32,
    "int64_t": np.int64,
    "uint64_t": np.uint64,
}

BufferArg = np.ndarray | bytes | bytearray | memoryview | int | float | None


class EmulatorError(RuntimeError):
    """Base class of emulator failures."""


class KernelFault(EmulatorError):
    """A fault while the kernel ran; `kind` names the class, `location` the MSL file:line."""

    def __init__(self, kind: str, location: str | None, message: str):
        self.kind = kind
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class _Launch(ctypes.Structure):
    _fields_ = [
        ("threadgroups", ctypes.c_uint32 * 3),
        ("threads_per_group", ctypes.c_uint32 * 3),
        ("grid_threads", ctypes.c_uint32 * 3),
        ("num_buffers", ctypes.c_uint32),
        ("buffers", ctypes.c_void_p * MAX_BUFFERS),
        ("buffer_sizes", ctypes.c_uint64 * MAX_BUFFERS),
        ("num_tg_buffers", ctypes.c_uint32),
        ("tg_sizes", ctypes.c_uint64 * MAX_BUFFERS),
        ("order", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
    ]


class _Result(ctypes.Structure):
    _fields_ = [
        ("bytes_read", ctypes.c_uint64 * MAX_BUFFERS),
        ("bytes_written", ctypes.c_uint64 * MAX_BUFFERS),
        ("threads_run", ctypes.c_uint64),
        ("fault_kind", ctypes.c_int32),
        ("fault_line", ctypes.c_int32),
        ("fault_pc_offset", ctypes.c_uint64),
        ("fault_file", ctypes.c_char * 256),
        ("message", ctypes.c_char * 1024),
    ]


@dataclass(frozen=True)
class DispatchStats:
    """Bytes each [[buffer(i)]] was read / written by the kernel, and threads run."""

    bytes_read: tuple[int, ...]
    bytes_written: tuple[int, ...]
    threads: int


def _triple(value: Sequence[int] | int, what: str) -> tuple[int, int, int]:
    vals = (value,) if isinstance(value, int) else tuple(value)
    if not 1 <= len(vals) <= 3 or any(not isinstance(v, (int, np.integer)) or v < 0 for v in vals):
        raise ValueError(f"{what} must be 1 to 3 non-negative integers, got {value!r}")
    return tuple(int(v) for v in vals) + (1,) * (3 - len(vals))  # type: ignore[return-value]


_runtime = None


def _load_runtime() -> ctypes.CDLL:
    global _runtime
    if _runtime is None:
        lib = ctypes.CDLL(str(runtime_library()), mode=os.RTLD_NOW | ctypes.RTLD_GLOBAL)
        lib.metile_emu_dispatch.argtypes = [ctypes.c_void_p, ctypes.POINTER(_Launch), ctypes.POINTER(_Result)]
        lib.metile_emu_dispatch.restype = ctypes.c_int
        _runtime = lib
    return _runtime


class Kernel:
    """An MSL compute kernel compiled for the CPU emulator.

    `Kernel(source, name)` compiles (or loads from cache) the kernel `name` in
    `source`; compile errors raise `CompileError` with the MSL file:line. `name` is a kernel
    function's name or the `[[host_name(...)]]` of an explicit instantiation of a template kernel.
    `include_dirs` are searched for the source's own `#include`s; `function_constants` give the
    values of its `[[function_constant(i)]]` constants, by index or by name (Metal's
    MTLFunctionConstantValues): a parameter under a false constant takes no buffer.
    `address_space_lint=False` skips the check that models Metal's address spaces as clang's, for
    code valid in Metal that C++ address spaces cannot express (copying a class object from
    device to threadgroup memory, as MLX's steel loaders do).
    """

    def __init__(
        self,
        source: str,
        name: str,
        *,
        flags: Sequence[str] = (),
        include_dirs: Sequence[str | os.PathLike] = (),
        function_constants: Mapping[int | str, FunctionConstant] | None = None,
        address_space_lint: bool = True,
    ):
        self.source = source
        self.name = name
        self.translation: Translation = translate(
            source, name, include_dirs=include_dirs, function_constants=function_constants
        )
        self.path: Path = build_kernel(self.translation, tuple(flags), address_space_lint=address_space_lint)
        self._runtime = _load_runtime()
        self._lib = ctypes.CDLL(str(self.path), mode=os.RTLD_NOW | os.RTLD_LOCAL)
        self._info = ctypes.c_void_p.in_dll(self._lib, "metile_kernel")
        self._info_addr = ctypes.addressof(self._info)

    # -- argument packing -------------------------------------------------
    def _pack(self, index: int, arg: BufferArg, keep: list) -> tuple[int, int, np.ndarray | None]:
        if arg is None:
            return 0, 0, None
        if isinstance(arg, np.ndarray):
            if not arg.flags.c_contiguous:
                raise ValueError(f"buffers[{index}]: numpy arrays must be C-contiguous")
            if not arg.flags.writeable:
                arg = arg.copy()
            keep.append(arg)
            return arg.ctypes.data, arg.nbytes, arg
        if isinstance(arg, (bytes, bytearray, memoryview)):
            raw = np.frombuffer(bytes(arg), dtype=np.uint8).copy()
            keep.append(raw)
            return raw.ctypes.data, raw.nbytes, None
        if isinstance(arg, (bool, int, float, np.integer, np.floating)):
            param = self.translation.buffer(index)
            elem = param.elem if param else ("float" if isinstance(arg, float) else "int")
            dtype = _SCALAR_DTYPES.get(elem)
            if dtype is None:
                raise TypeError(f"buffers[{index}]: cannot pass a Python scalar for a `{elem}` parameter")
            raw = np.array([arg], dtype=dtype)
            keep.append(raw)
            return raw.ctypes.data, raw.nbytes, None
        raise TypeError(
            f"buffers[{index}]: expected a numpy array, bytes, int, float or None, got {type(arg).__name__}"
        )

    def _launch(
        self,
        groups: tuple[int, int, int],
        tg: tuple[int, int, int],
        grid_threads: tuple[int, int, int],
        buffers: Sequence[BufferArg],
        threadgroup_memory: Sequence[int],
        order: str,
        seed: int,
    ) -> DispatchStats:
        if len(buffers) > MAX_BUFFERS:
            raise ValueError(f"buffers: at most {MAX_BUFFERS} buffers, got {len(buffers)}")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {sorted(ORDERS)}, got {order!r}")
        for p in self.translation.params:
            if not p.active:
                continue
            if p.kind == "buffer" and (p.index >= len(buffers) or buffers[p.index] is None):
                raise ValueError(f"buffers[{p.index}] is not bound but the kernel reads `{p.name}` from it")
            if p.kind == "threadgroup" and p.index >= len(threadgroup_memory):
                raise ValueError(f"threadgroup_memory[{p.index}] is not given but the kernel declares `{p.name}`")
        launch = _Launch()
        for a in range(3):
            launch.threadgroups[a] = groups[a]
            launch.threads_per_group[a] = tg[a]
            launch.grid_threads[a] = grid_threads[a]
        keep: list = []
        launch.num_buffers = len(buffers)
        for i, arg in enumerate(buffers):
            ptr, size, _ = self._pack(i, arg, keep)
            launch.buffers[i] = ptr or None
            launch.buffer_sizes[i] = size
        launch.num_tg_buffers = len(threadgroup_memory)
        for i, n in enumerate(threadgroup_memory):
            launch.tg_sizes[i] = int(n)
        launch.order = ORDERS[order]
        launch.seed = seed
        result = _Result()
        if groups[0] * groups[1] * groups[2] == 0:
            return DispatchStats((0,) * len(buffers), (0,) * len(buffers), 0)
        kind = self._runtime.metile_emu_dispatch(self._info_addr, ctypes.byref(launch), ctypes.byref(result))
        if kind:
            self._raise(result)
        n = len(buffers)
        return DispatchStats(tuple(result.bytes_read[:n]), tuple(result.bytes_written[:n]), result.threads_run)

    def _raise(self, r: _Result) -> None:
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

    # -- public dispatch --------------------------------------------------
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
        """Run `grid` threadgroups of `threadgroup` threads each (Metal's
        dispatchThreadgroups). numpy buffers are read and written in place."""
        groups = _triple(grid, "grid")
        tg = _triple(threadgroup, "threadgroup")
        self._check_tg(tg)
        return self._launch(groups, tg, (0, 0, 0), buffers, threadgroup_memory, order, seed)

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
        """Run exactly `grid` threads (Metal's dispatchThreads): edge
        threadgroups are smaller, and threads_per_threadgroup says so."""
        threads = _triple(grid, "grid")
        tg = _triple(threadgroup, "threadgroup")
        self._check_tg(tg)
        groups = tuple(-(-threads[a] // tg[a]) for a in range(3))
        return self._launch(groups, tg, threads, buffers, threadgroup_memory, order, seed)  # type: ignore[arg-type]

    @staticmethod
    def _check_tg(tg: tuple[int, int, int]) -> None:
        n = tg[0] * tg[1] * tg[2]
        if not 1 <= n <= MAX_THREADS_PER_THREADGROUP:
            raise ValueError(
                f"threadgroup {tg} has {n} threads; Metal allows 1..{MAX_THREADS_PER_THREADGROUP} per threadgroup"
            )
