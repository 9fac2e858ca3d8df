"""Fat (universal) files as Metal writes binary archives: a header, then one record per slice.

Magics: 0xcafebabe (FAT_MAGIC, 20-byte fat_arch records), 0xcafebabf (FAT_MAGIC_64, 32-byte
fat_arch_64) and 0xcbfebabe, the Metal variant with 20-byte records that dougallj/applegpu's
metal-archive-extractor reads from real archives. Apple's headers store fat headers big-endian;
the extractor accepts 0xcbfebabe in either byte order (FAT_MAGIC_METAL / FAT_CIGAM_METAL), so
every field is read in the order in which the magic reads as one of these values.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .errors import ArchiveError

FAT_MAGIC = 0xCAFEBABE
FAT_MAGIC_64 = 0xCAFEBABF
FAT_MAGIC_METAL = 0xCBFEBABE
MAGICS = (FAT_MAGIC, FAT_MAGIC_64, FAT_MAGIC_METAL)

CPU_TYPE_APPLE_GPU = 0x01000013
CPU_TYPE_AMD_GPU = 0x01000014
CPU_TYPE_INTEL_GPU = 0x01000015
CPU_TYPE_AIR64 = 0x01000017
CPU_NAMES = {
    CPU_TYPE_APPLE_GPU: "AppleGPU",
    CPU_TYPE_AMD_GPU: "AMDGPU",
    CPU_TYPE_INTEL_GPU: "IntelGPU",
    CPU_TYPE_AIR64: "AIR64",
}


def cpu_name(cputype: int) -> str:
    return CPU_NAMES.get(cputype, f"cputype {cputype:#x}")


@dataclass(frozen=True)
class Slice:
    cputype: int
    cpusubtype: int
    offset: int
    size: int
    align: int
    reserved: int  # fat_arch_64 only
    at: int  # where its record sits

    @property
    def name(self) -> str:
        return cpu_name(self.cputype)


@dataclass
class Fat:
    data: bytes
    magic: int
    order: str
    slices: list[Slice] = field(default_factory=list)

    @property
    def record(self) -> str:
        return "IIIQII" if self.magic == FAT_MAGIC_64 else "IIIII"

    @staticmethod
    def is_fat(data: bytes) -> bool:
        return len(data) >= 4 and any(struct.unpack_from(o + "I", data)[0] in MAGICS for o in "<>")

    @classmethod
    def parse(cls, data: bytes) -> Fat:
        data = bytes(data)
        if len(data) < 8:
            raise ArchiveError(f"fat header: {len(data)} bytes, a fat header is 8: truncated")
        for order in "><":
            magic, count = struct.unpack_from(order + "II", data)
            if magic in MAGICS:
                break
        else:
            raise ArchiveError(
                f"fat header: bad magic {struct.unpack_from('>I', data)[0]:#010x} "
                f"(expected one of {', '.join(hex(m) for m in MAGICS)}, in either byte order)"
            )
        fat = cls(data, magic, order)
        rec = struct.calcsize(order + fat.record)
        table_end = 8 + count * rec
        if table_end > len(data):
            raise ArchiveError(f"fat header: {count} slice records need {table_end} bytes, the file has {len(data)}")
        for k in range(count):
            at = 8 + k * rec
            f = struct.unpack_from(order + fat.record, data, at)
            cputype, cpusubtype, offset, size, align = f[:5]
            reserved = f[5] if len(f) > 5 else 0
            s = Slice(cputype, cpusubtype, offset, size, align, reserved, at)
            if offset < table_end or offset + size > len(data):
                raise ArchiveError(
                    f"fat slice {k} ({s.name}): bytes [{offset}, {offset + size}) are out of range "
                    f"(slices lie in [{table_end}, {len(data)}))"
                )
            fat.slices.append(s)
        spans = sorted((s.offset, s.offset + s.size, k) for k, s in enumerate(fat.slices) if s.size)
        for (a0, a1, a), (b0, b1, b) in zip(spans, spans[1:]):
            if b0 < a1:
                raise ArchiveError(f"fat slices {a} [{a0}, {a1}) and {b} [{b0}, {b1}) overlap")
        return fat

    def contents(self, s: Slice) -> bytes:
        return self.data[s.offset : s.offset + s.size]

    def to_bytes(self, replaced: dict[int, bytes] | None = None) -> bytes:
        """The file re-serialised; `replaced` maps slice indices to new contents of equal size."""
        out = bytearray(self.data)
        struct.pack_into(self.order + "II", out, 0, self.magic, len(self.slices))
        for k, s in enumerate(self.slices):
            fields = [s.cputype, s.cpusubtype, s.offset, s.size, s.align]
            if self.magic == FAT_MAGIC_64:
                fields.append(s.reserved)
            struct.pack_into(self.order + self.record, out, s.at, *fields)
            if replaced and k in replaced:
                body = replaced[k]
                if len(body) != s.size:
                    raise ArchiveError(f"fat slice {k}: {len(body)} bytes replace {s.size}; sizes are kept")
                out[s.offset : s.offset + s.size] = body
        return bytes(out)


def build(slices: list[tuple[int, int, bytes, int]], magic: int = FAT_MAGIC_METAL, order: str = "<") -> bytes:
    """A fat file of (cputype, cpusubtype, contents, log2 alignment) slices."""
    if magic not in MAGICS:
        raise ArchiveError(f"fat magic {magic:#x}: expected one of {', '.join(hex(m) for m in MAGICS)}")
    record = "IIIQII" if magic == FAT_MAGIC_64 else "IIIII"
    rec = struct.calcsize(order + record)
    at = 8 + len(slices) * rec
    placed = []
    for _, _, body, align in slices:
        at = (at + (1 << align) - 1) >> align << align
        placed.append(at)
        at += len(body)
    out = bytearray(at)
    struct.pack_into(order + "II", out, 0, magic, len(slices))
    for k, ((cputype, sub, body, align), off) in enumerate(zip(slices, placed)):
        fields = [cputype, sub, off, len(body), align] + ([0] if magic == FAT_MAGIC_64 else [])
        struct.pack_into(order + record, out, 8 + k * rec, *fields)
        out[off : off + len(body)] = body
    return bytes(out)
