"""64-bit Mach-O objects: read every field this room uses, write new ones, re-serialise exactly.

Understood: the mach_header_64, LC_SEGMENT_64 with its section_64 records, LC_SYMTAB with its
nlist_64 symbols and string table. Any other load command is kept as raw bytes. `to_bytes()`
packs every understood field back over the original bytes, so a field read wrongly shows as a
changed byte, and every byte not understood (padding, unknown commands, section contents) stays.
Either byte order is read; names are Latin-1 so no byte sequence fails to decode.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .errors import ArchiveError

MH_MAGIC_64 = 0xFEEDFACF
MH_GPU_EXECUTE = 0xD  # filetype of a GPU program (Apple's mach-o/loader.h)
MH_GPU_DYLIB = 0xE
LC_SYMTAB = 0x2
LC_SEGMENT_64 = 0x19
LC_UUID = 0x1B
LC_CODE_SIGNATURE = 0x1D
HEADER_SIZE, SEGMENT_SIZE, SECTION_SIZE, SYMTAB_SIZE, NLIST_SIZE = 32, 72, 80, 24, 16
_ZEROFILL_TYPES = (0x1, 0xC, 0x12)  # S_ZEROFILL, S_GB_ZEROFILL, S_THREAD_LOCAL_ZEROFILL: no file bytes
N_SECT, N_EXT = 0xE, 0x1

_HEADER = "IiiIIIII"
_SEGMENT = "II16sQQQQiiII"
_SECTION = "16s16sQQIIIIIIII"
_SYMTAB = "IIIIII"
_NLIST = "IBBHQ"


def _name(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("latin-1")


def _unpack(order: str, fmt: str, data: bytes, at: int, what: str) -> tuple:
    size = struct.calcsize(order + fmt)
    if at < 0 or at + size > len(data):
        raise ArchiveError(f"{what}: {size} bytes at offset {at} run past the end ({len(data)} bytes): truncated")
    return struct.unpack_from(order + fmt, data, at)


@dataclass(frozen=True)
class Section:
    segname_raw: bytes
    sectname_raw: bytes
    addr: int
    size: int
    offset: int
    align: int
    reloff: int
    nreloc: int
    flags: int
    reserved: tuple[int, int, int]
    at: int  # where its section_64 record sits in the object

    @property
    def name(self) -> str:
        return f"{_name(self.segname_raw)},{_name(self.sectname_raw)}"

    @property
    def zerofill(self) -> bool:
        return (self.flags & 0xFF) in _ZEROFILL_TYPES

    def pack(self, order: str) -> bytes:
        return struct.pack(
            order + _SECTION,
            self.sectname_raw,
            self.segname_raw,
            self.addr,
            self.size,
            self.offset,
            self.align,
            self.reloff,
            self.nreloc,
            self.flags,
            *self.reserved,
        )


@dataclass(frozen=True)
class Command:
    """A load command as it sits in the object: its type, size, offset and bytes."""

    cmd: int
    cmdsize: int
    at: int
    raw: bytes


@dataclass(frozen=True)
class Segment:
    name_raw: bytes
    vmaddr: int
    vmsize: int
    fileoff: int
    filesize: int
    maxprot: int
    initprot: int
    flags: int
    sections: tuple[Section, ...]
    at: int
    cmdsize: int

    @property
    def name(self) -> str:
        return _name(self.name_raw)

    def pack(self, order: str) -> bytes:
        head = struct.pack(
            order + _SEGMENT,
            LC_SEGMENT_64,
            self.cmdsize,
            self.name_raw,
            self.vmaddr,
            self.vmsize,
            self.fileoff,
            self.filesize,
            self.maxprot,
            self.initprot,
            len(self.sections),
            self.flags,
        )
        return head + b"".join(s.pack(order) for s in self.sections)


@dataclass(frozen=True)
class Symtab:
    symoff: int
    nsyms: int
    stroff: int
    strsize: int
    at: int
    cmdsize: int

    def pack(self, order: str) -> bytes:
        return struct.pack(order + _SYMTAB, LC_SYMTAB, self.cmdsize, self.symoff, self.nsyms, self.stroff, self.strsize)


@dataclass(frozen=True)
class Symbol:
    name: str
    strx: int
    type: int
    sect: int  # 1-based section number across all segments; 0: none
    desc: int
    value: int
    at: int

    def pack(self, order: str) -> bytes:
        return struct.pack(order + _NLIST, self.strx, self.type, self.sect, self.desc, self.value)


@dataclass
class MachO:
    data: bytes
    order: str
    cputype: int
    cpusubtype: int
    filetype: int
    ncmds: int
    sizeofcmds: int
    flags: int
    reserved: int
    commands: list[Command] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    symtab: Symtab | None = None
    symbols: list[Symbol] = field(default_factory=list)
    where: str = "Mach-O"

    @property
    def sections(self) -> list[Section]:
        return [s for seg in self.segments for s in seg.sections]

    def find(self, name: str) -> list[Section]:
        """Sections named "SEGMENT,section"."""
        return [s for s in self.sections if s.name == name]

    def contents(self, s: Section) -> bytes:
        return b"" if s.zerofill else self.data[s.offset : s.offset + s.size]

    @classmethod
    def parse(cls, data: bytes, where: str = "Mach-O") -> MachO:
        data = bytes(data)
        if len(data) < 4:
            raise ArchiveError(f"{where}: {len(data)} bytes, too short for a Mach-O magic")
        order = next((o for o in "<>" if struct.unpack_from(o + "I", data)[0] == MH_MAGIC_64), None)
        if order is None:
            magic = struct.unpack_from(">I", data)[0]
            raise ArchiveError(f"{where}: bad Mach-O magic {magic:#010x} (expected {MH_MAGIC_64:#x}, 64-bit)")
        head = _unpack(order, _HEADER, data, 0, f"{where}: mach_header_64")
        m = cls(data, order, *head[1:], where=where)
        m._load_commands()
        m._check_overlaps()
        return m

    def _load_commands(self) -> None:
        data, order, where = self.data, self.order, self.where
        end = HEADER_SIZE + self.sizeofcmds
        if end > len(data):
            raise ArchiveError(f"{where}: sizeofcmds {self.sizeofcmds} runs past the end ({len(data)} bytes)")
        if self.ncmds * 8 > self.sizeofcmds:
            raise ArchiveError(f"{where}: {self.ncmds} load commands cannot fit sizeofcmds {self.sizeofcmds}")
        at = HEADER_SIZE
        for k in range(self.ncmds):
            what = f"{where}: load command {k}"
            if at + 8 > end:
                raise ArchiveError(f"{what}: starts at {at}, past the load commands' end {end}")
            cmd, cmdsize = struct.unpack_from(order + "II", data, at)
            if cmdsize < 8 or at + cmdsize > end:
                raise ArchiveError(f"{what} (cmd {cmd:#x}): cmdsize {cmdsize} outside the load commands [{at}, {end})")
            self.commands.append(Command(cmd, cmdsize, at, data[at : at + cmdsize]))
            if cmd == LC_SEGMENT_64:
                self.segments.append(self._segment(at, cmdsize, what))
            elif cmd == LC_SYMTAB:
                if self.symtab is not None:
                    raise ArchiveError(f"{what}: a second LC_SYMTAB")
                self._symbols(at, cmdsize, what)
            at += cmdsize
        if at != end:
            raise ArchiveError(
                f"{where}: load commands take {at - HEADER_SIZE} bytes, sizeofcmds says {self.sizeofcmds}"
            )

    def _segment(self, at: int, cmdsize: int, what: str) -> Segment:
        data, order = self.data, self.order
        if cmdsize < SEGMENT_SIZE:
            raise ArchiveError(f"{what}: LC_SEGMENT_64 of cmdsize {cmdsize} < {SEGMENT_SIZE}")
        _, _, name, vmaddr, vmsize, fileoff, filesize, maxprot, initprot, nsects, flags = _unpack(
            order, _SEGMENT, data, at, what
        )
        if SEGMENT_SIZE + nsects * SECTION_SIZE > cmdsize:
            raise ArchiveError(
                f"{what}: segment {_name(name)!r} has {nsects} sections, more than cmdsize {cmdsize} holds"
            )
        if filesize and fileoff + filesize > len(self.data):
            raise ArchiveError(
                f"{what}: segment {_name(name)!r} file range [{fileoff}, {fileoff + filesize}) "
                f"is out of range ({len(self.data)} bytes)"
            )
        sections = []
        for j in range(nsects):
            rec = at + SEGMENT_SIZE + j * SECTION_SIZE
            f = _unpack(order, _SECTION, data, rec, f"{what}: section {j}")
            s = Section(f[1], f[0], *f[2:9], tuple(f[9:12]), rec)
            if not s.zerofill and s.size:
                if s.offset + s.size > len(data):
                    raise ArchiveError(
                        f"{what}: section {s.name} bytes [{s.offset}, {s.offset + s.size}) are out of range "
                        f"({len(data)} bytes)"
                    )
                if filesize and not (fileoff <= s.offset and s.offset + s.size <= fileoff + filesize):
                    raise ArchiveError(f"{what}: section {s.name} lies outside its segment's file range")
            sections.append(s)
        return Segment(name, vmaddr, vmsize, fileoff, filesize, maxprot, initprot, flags, tuple(sections), at, cmdsize)

    def _symbols(self, at: int, cmdsize: int, what: str) -> None:
        data, order = self.data, self.order
        if cmdsize < SYMTAB_SIZE:
            raise ArchiveError(f"{what}: LC_SYMTAB of cmdsize {cmdsize} < {SYMTAB_SIZE}")
        _, _, symoff, nsyms, stroff, strsize = _unpack(order, _SYMTAB, data, at, what)
        self.symtab = Symtab(symoff, nsyms, stroff, strsize, at, cmdsize)
        if symoff + nsyms * NLIST_SIZE > len(data):
            raise ArchiveError(f"{what}: symbol table [{symoff}, {symoff + nsyms * NLIST_SIZE}) is out of range")
        if stroff + strsize > len(data):
            raise ArchiveError(f"{what}: string table [{stroff}, {stroff + strsize}) is out of range")
        strings = data[stroff : stroff + strsize]
        for k in range(nsyms):
            rec = symoff + k * NLIST_SIZE
            strx, typ, sect, desc, value = struct.unpack_from(order + _NLIST, data, rec)
            if strx >= strsize and not (strx == 0 and strsize == 0):
                raise ArchiveError(
                    f"{what}: symbol {k}'s name offset {strx} is outside the {strsize}-byte string table"
                )
            name_end = strings.find(b"\0", strx)
            if strsize and name_end < 0:
                raise ArchiveError(f"{what}: symbol {k}'s name is not NUL-terminated inside the string table")
            self.symbols.append(Symbol(strings[strx:name_end].decode("latin-1"), strx, typ, sect, desc, value, rec))

    def _check_overlaps(self) -> None:
        spans = [(0, HEADER_SIZE + self.sizeofcmds, "the header and load commands")]
        for s in self.sections:
            if not s.zerofill and s.size:
                spans.append((s.offset, s.offset + s.size, f"section {s.name}"))
        if self.symtab is not None:
            t = self.symtab
            spans.append((t.symoff, t.symoff + t.nsyms * NLIST_SIZE, "the symbol table"))
            spans.append((t.stroff, t.stroff + t.strsize, "the string table"))
        spans = sorted(s for s in spans if s[1] > s[0])
        for (a0, a1, a), (b0, b1, b) in zip(spans, spans[1:]):
            if b0 < a1:
                raise ArchiveError(f"{self.where}: {a} [{a0}, {a1}) overlaps {b} [{b0}, {b1})")

    def to_bytes(self) -> bytes:
        """The object re-serialised: every understood field packed over the original bytes."""
        o = self.order
        out = bytearray(self.data)
        head = (MH_MAGIC_64, self.cputype, self.cpusubtype, self.filetype, self.ncmds, self.sizeofcmds)
        struct.pack_into(o + _HEADER, out, 0, *head, self.flags, self.reserved)
        for c in self.commands:
            struct.pack_into(o + "II", out, c.at, c.cmd, c.cmdsize)
        for seg in self.segments:
            packed = seg.pack(o)
            out[seg.at : seg.at + len(packed)] = packed
        if self.symtab is not None:
            out[self.symtab.at : self.symtab.at + SYMTAB_SIZE] = self.symtab.pack(o)
            for sym in self.symbols:
                out[sym.at : sym.at + NLIST_SIZE] = sym.pack(o)
        return bytes(out)


# ---- writer --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SectionSpec:
    segment: str
    name: str
    data: bytes
    align: int = 4  # log2 of the alignment, as in section_64
    flags: int = 0


def _fixed(name: str, what: str) -> bytes:
    raw = name.encode("latin-1")
    if len(raw) > 16:
        raise ArchiveError(f"{what} name {name!r} is longer than 16 bytes")
    return raw.ljust(16, b"\0")


def _aligned(n: int, log2: int) -> int:
    a = 1 << log2
    return (n + a - 1) // a * a


def build(
    cputype: int,
    sections: list[SectionSpec],
    symbols: list[tuple[str, int, int]] = (),
    *,
    cpusubtype: int = 0,
    filetype: int = MH_GPU_EXECUTE,
    order: str = "<",
    extra_commands: list[tuple[int, bytes]] = (),
    flags: int = 0,
) -> bytes:
    """A Mach-O laid out plainly: header, one LC_SEGMENT_64 per segment name (in first-seen
    order), `extra_commands` ((cmd, body) kept as given), LC_SYMTAB; then section contents
    aligned, the symbols (name, 0-based section index, offset in it) and their strings."""
    if order not in "<>" or len(order) != 1:
        raise ArchiveError(f"byte order {order!r}: '<' or '>'")
    segnames: list[str] = []
    for s in sections:
        if s.segment not in segnames:
            segnames.append(s.segment)
    ordered = [s for name in segnames for s in sections if s.segment == name]
    ncmds = len(segnames) + len(extra_commands) + (1 if symbols else 0)
    extra_size = sum(8 + _aligned(len(body), 3) for _, body in extra_commands)
    sizeofcmds = (
        len(segnames) * SEGMENT_SIZE + len(ordered) * SECTION_SIZE + extra_size + (SYMTAB_SIZE if symbols else 0)
    )
    at = HEADER_SIZE + sizeofcmds
    placed: list[tuple[SectionSpec, int]] = []
    for s in ordered:
        at = _aligned(at, s.align)
        placed.append((s, at))
        at += len(s.data)
    symoff = _aligned(at, 3)
    strings = bytearray(b"\0")
    nlist = bytearray()
    for name, index, value in symbols:
        if not 0 <= index < len(ordered):
            raise ArchiveError(f"symbol {name!r}: section index {index} of {len(ordered)}")
        strx = len(strings)
        strings += name.encode("latin-1") + b"\0"
        spec, off = placed[index]
        nlist += struct.pack(order + _NLIST, strx, N_SECT | N_EXT, index + 1, 0, off + value)
    stroff = symoff + len(nlist)
    total = stroff + len(strings) if symbols else at
    out = bytearray(total)
    struct.pack_into(order + _HEADER, out, 0, MH_MAGIC_64, cputype, cpusubtype, filetype, ncmds, sizeofcmds, flags, 0)
    cmd_at = HEADER_SIZE
    for segname in segnames:
        mine = [(s, off) for s, off in placed if s.segment == segname]
        start = min(off for _, off in mine)
        end = max(off + len(s.data) for s, off in mine)
        cmdsize = SEGMENT_SIZE + len(mine) * SECTION_SIZE
        seg = (LC_SEGMENT_64, cmdsize, _fixed(segname, "segment"), start, end - start, start, end - start, 7, 5)
        struct.pack_into(order + _SEGMENT, out, cmd_at, *seg, len(mine), 0)
        for j, (s, off) in enumerate(mine):
            rec = (_fixed(s.name, "section"), _fixed(s.segment, "segment"), off, len(s.data), off, s.align)
            struct.pack_into(
                order + _SECTION, out, cmd_at + SEGMENT_SIZE + j * SECTION_SIZE, *rec, 0, 0, s.flags, 0, 0, 0
            )
            out[off : off + len(s.data)] = s.data
        cmd_at += cmdsize
    for cmd, body in extra_commands:
        size = 8 + _aligned(len(body), 3)
        struct.pack_into(order + "II", out, cmd_at, cmd, size)
        out[cmd_at + 8 : cmd_at + 8 + len(body)] = body
        cmd_at += size
    if symbols:
        struct.pack_into(
            order + _SYMTAB, out, cmd_at, LC_SYMTAB, SYMTAB_SIZE, symoff, len(symbols), stroff, len(strings)
        )
        out[symoff:stroff] = nlist
        out[stroff:] = strings
    return bytes(out)
