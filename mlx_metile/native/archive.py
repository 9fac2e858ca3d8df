"""Metal binary archives: the fat file, its slices, and the AppleGPU slice's compute objects.

Layout (public descriptions: dougallj/applegpu's metal-archive-extractor, Apple's mach-o
headers): a fat file whose slices are Mach-O objects, one of CPU type AppleGPU (0x01000013,
native code) and one AIR64 (0x01000017, Metal IR). In the AppleGPU object each `__TEXT,__compute`
section holds a nested Mach-O, the compute object: its `__TEXT,__text` holds the code and its
symbol table names functions (`_agc.main`); a function runs from its symbol to the next symbol in
that section, or the section's end. Everything else in the file - other sections, unknown load
commands, `__GPU_METADATA`, padding - is carried as bytes and never changed.

A patch replaces one function's code in place: same length, the one region of that name in the
whole file, its old bytes found nowhere else in the file, and no load command of the compute
object that this reader does not understand (it could checksum, sign or relocate the code).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import fat as fatfile
from . import macho
from .errors import ArchiveError
from .macho import LC_SEGMENT_64, LC_SYMTAB, MachO, SectionSpec

COMPUTE_SECTION = "__TEXT,__compute"
TEXT_SECTION = "__TEXT,__text"
MAIN = "_agc.main"
# load commands a compute object may hold for a patch to go ahead: understood ones only
UNDERSTOOD_COMMANDS = frozenset({LC_SEGMENT_64, LC_SYMTAB})


@dataclass(frozen=True)
class CodeRegion:
    """One function's code: where it lies in the whole file, and how it was reached."""

    function: str
    offset: int  # absolute, in the archive's bytes
    size: int
    slice_index: int
    compute_offset: int  # absolute offset of the compute object holding it
    path: str  # e.g. "slice 1 (AppleGPU) > __TEXT,__compute #0 > __TEXT,__text"


@dataclass
class ComputeObject:
    offset: int  # absolute
    macho: MachO
    path: str


@dataclass
class Archive:
    data: bytes
    fat: fatfile.Fat | None  # None: a bare Mach-O GPU object
    objects: list[MachO | None] = field(default_factory=list)  # per slice; None: not a Mach-O
    compute: list[ComputeObject] = field(default_factory=list)

    @classmethod
    def parse(cls, data: bytes) -> Archive:
        data = bytes(data)
        if fatfile.Fat.is_fat(data):
            fat = fatfile.Fat.parse(data)
            slices = [(s, s.offset, fat.contents(s), f"slice {k} ({s.name})") for k, s in enumerate(fat.slices)]
        elif data[:4] in (b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf"):
            fat = None
            slices = [(None, 0, data, "Mach-O")]
        else:
            shown = data[:4].hex() or "nothing"
            raise ArchiveError(
                f"bad magic {shown}: neither a fat archive (0xcafebabe, 0xcafebabf, 0xcbfebabe, either byte "
                "order) nor a 64-bit Mach-O (0xfeedfacf)"
            )
        out = cls(data, fat)
        for s, base, body, where in slices:
            if s is not None and body[:4] not in (b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf"):
                out.objects.append(None)  # a slice of another format: carried as bytes
                continue
            m = MachO.parse(body, where)
            out.objects.append(m)
            if m.cputype != fatfile.CPU_TYPE_APPLE_GPU:
                continue
            for j, sec in enumerate(m.find(COMPUTE_SECTION)):
                path = f"{where} > {COMPUTE_SECTION} #{j}"
                inner = MachO.parse(m.contents(sec), path)
                out.compute.append(ComputeObject(base + sec.offset, inner, path))
        return out

    def to_bytes(self) -> bytes:
        """The archive re-serialised level by level (fat records, slices, compute objects)."""
        out = bytearray(self.fat.to_bytes() if self.fat else self.data)
        bases = [s.offset for s in self.fat.slices] if self.fat else [0]
        for base, m in zip(bases, self.objects):
            if m is not None:
                body = m.to_bytes()
                out[base : base + len(body)] = body
        for c in self.compute:
            body = c.macho.to_bytes()
            out[c.offset : c.offset + len(body)] = body
        return bytes(out)

    def slice_index(self, c: ComputeObject) -> int:
        if self.fat is None:
            return 0
        return next(k for k, s in enumerate(self.fat.slices) if s.offset <= c.offset < s.offset + s.size)

    def functions(self) -> list[CodeRegion]:
        """Every named function of every compute object's __TEXT,__text."""
        out = []
        for c in self.compute:
            for sec in c.macho.find(TEXT_SECTION):
                start, end = sec.addr, sec.addr + sec.size
                inside = sorted({s.value for s in c.macho.symbols if start <= s.value < end})
                for sym in c.macho.symbols:
                    if not (start <= sym.value < end) or not sym.name:
                        continue
                    stop = next((v for v in inside if v > sym.value), end)
                    out.append(
                        CodeRegion(
                            sym.name,
                            c.offset + sec.offset + (sym.value - start),
                            stop - sym.value,
                            self.slice_index(c),
                            c.offset,
                            f"{c.path} > {TEXT_SECTION}",
                        )
                    )
        return out

    def locate(self, function: str = MAIN) -> list[CodeRegion]:
        return [r for r in self.functions() if r.function == function]

    def region(self, function: str = MAIN) -> CodeRegion:
        """The one code region of `function`; ArchiveError if there is none or several."""
        found = self.locate(function)
        if not found:
            raise ArchiveError(f"no function {function!r} in any compute object's {TEXT_SECTION}")
        if len(found) > 1:
            where = "; ".join(f"{r.path} at {r.offset}" for r in found)
            raise ArchiveError(f"several matches: {len(found)} regions named {function!r} ({where})")
        return found[0]

    def code(self, function: str = MAIN) -> bytes:
        r = self.region(function)
        return self.data[r.offset : r.offset + r.size]

    def patch(
        self,
        code: bytes,
        function: str = MAIN,
        *,
        expect: bytes | None = None,
        allow_commands: frozenset[int] = UNDERSTOOD_COMMANDS,
    ) -> bytes:
        """The archive's bytes with `function`'s code replaced by `code`, everything else as it was."""
        r = self.region(function)
        old = self.data[r.offset : r.offset + r.size]
        if len(code) != r.size:
            raise ArchiveError(f"size change: {function!r} has {r.size} bytes of code, the patch {len(code)}")
        if expect is not None and old != bytes(expect):
            raise ArchiveError(f"{function!r} at {r.offset} holds other bytes than the patch expects")
        copies = self.data.count(old)
        if copies != 1:
            raise ArchiveError(
                f"the code of {function!r} occurs {copies} times in the archive; only a unique copy is patched"
            )
        c = next(c for c in self.compute if c.offset == r.compute_offset)
        for cmd in c.macho.commands:
            if cmd.cmd not in allow_commands:
                raise ArchiveError(
                    f"{c.path}: unknown load command {cmd.cmd:#x} in the object holding the region "
                    "(it could checksum, sign or relocate the code); not patched"
                )
        outer = self.objects[r.slice_index]
        if outer is not None and any(cmd.cmd == macho.LC_CODE_SIGNATURE for cmd in outer.commands):
            raise ArchiveError(f"{outer.where}: LC_CODE_SIGNATURE covers the compute object; not patched")
        for sec in c.macho.find(TEXT_SECTION):
            if sec.nreloc:
                raise ArchiveError(f"{c.path}: {sec.nreloc} relocations over {TEXT_SECTION}; not patched")
        out = self.data[: r.offset] + bytes(code) + self.data[r.offset + r.size :]
        again = Archive.parse(out)  # the patched file still reads, with the same regions
        if [(x.function, x.offset, x.size) for x in again.functions()] != [
            (x.function, x.offset, x.size) for x in self.functions()
        ]:  # pragma: no cover - only code bytes changed
            raise ArchiveError("the patched archive does not have the functions of the original")
        return out


# ---- synthetic archives -------------------------------------------------------------------------
# No Apple archive exists on this machine: tests build these around golden encodings. The layout
# of what the reader does not interpret (the metadata, the AIR slice's contents) is ours.


def compute_object(functions: list[tuple[str, bytes]], metadata: bytes = b"", order: str = "<") -> bytes:
    """A compute object: `__TEXT,__text` holding the functions back to back, a symbol for each,
    and a `__GPU_METADATA` segment carrying `metadata` as it is."""
    text = b"".join(code for _, code in functions)
    sections = [SectionSpec("__TEXT", "__text", text, align=4)]
    if metadata:
        sections.append(SectionSpec("__GPU_METADATA", "__gpu_metadata", metadata, align=3))
    symbols, at = [], 0
    for name, code in functions:
        symbols.append((name, 0, at))
        at += len(code)
    return macho.build(fatfile.CPU_TYPE_APPLE_GPU, sections, symbols, order=order)


def gpu_object(compute: list[bytes], order: str = "<", extra_commands: list[tuple[int, bytes]] = ()) -> bytes:
    """An AppleGPU Mach-O with one `__TEXT,__compute` section per compute object."""
    sections = [SectionSpec("__TEXT", "__compute", c, align=4) for c in compute]
    return macho.build(fatfile.CPU_TYPE_APPLE_GPU, sections, order=order, extra_commands=extra_commands)


def air_object(ir: bytes, order: str = "<") -> bytes:
    """An AIR64 Mach-O carrying `ir` as it is (the reader never looks inside)."""
    return macho.build(fatfile.CPU_TYPE_AIR64, [SectionSpec("__TEXT", "__air", ir, align=4)], order=order)


def build(
    compute: list[bytes],
    ir: bytes = b"MTLB",
    magic: int = fatfile.FAT_MAGIC_METAL,
    order: str = "<",
    extra_commands: list[tuple[int, bytes]] = (),
    gpu_align: int = 14,
) -> bytes:
    """A synthetic archive: an AIR64 slice and an AppleGPU slice (aligned to 2**gpu_align)
    holding `compute` objects."""
    return fatfile.build(
        [
            (fatfile.CPU_TYPE_AIR64, 0, air_object(ir, order), 4),
            (fatfile.CPU_TYPE_APPLE_GPU, 0, gpu_object(compute, order, extra_commands), gpu_align),
        ],
        magic,
        order,
    )
