"""Metal library archives (`.metallib`): read, check and write, in pure Python.

Layout (little-endian), as Apple's `metallib` tool writes it:

    header   "MTLB", platform u16, version u16.u16, library type u8, target OS u8, OS version u16.u16,
             file size u64, then (offset u64, size u64) of: the function list, the public metadata,
             the private metadata and the bitcode
    function list   u32 count, then per function a u32 size (counting itself) and tags up to ENDT:
             NAME (C string), TYPE (u8), HASH (SHA-256 of the bitcode), OFFT (u64 offsets into the
             public metadata, private metadata and bitcode sections), VERS (AIR and language
             versions, 4 x u16), MDSZ (u64 bitcode size), RFLT (u64 offset into the reflection list);
             each tag is a 4-byte name, a u16 payload size, the payload
    header extension   tags up to ENDT: RLST (offset, size of the reflection list), UUID, ...
    public / private metadata   per function a u32 size (counting itself), tags, ENDT
    bitcode   per function its LLVM bitcode in LLVM's wrapper (0x0B17C0DE)
    reflection list   u32 count, per function a u32 size (counting itself) and its reflection tags

A file is checked before anything of it is used: every offset and size in range, no two sections
and no two functions' bitcode overlapping, every tag list closed, every hash matching its bitcode.
What is wrong is raised as `MetallibError`, naming the field.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

MAGIC = b"MTLB"
HEADER = struct.Struct("<4sHHHBBHHQQQQQQQQQ")
BITCODE_WRAPPER_MAGIC = 0x0B17C0DE
BITCODE_MAGIC = b"BC\xc0\xde"

PLATFORM_MACOS = 0x8001
TARGET_OS_MACOS = 0x81
LIBRARY_EXECUTABLE = 0

FUNCTION_TYPES = {0: "vertex", 1: "fragment", 2: "kernel", 3: "unqualified", 4: "visible", 5: "extern"}
KERNEL = 2

# MTLDataType codes of function constants (CNST tags) that MLX's kernels use.
CONSTANT_TYPES = {
    3: "float",
    16: "half",
    29: "int",
    33: "uint",
    37: "short",
    41: "ushort",
    45: "char",
    49: "uchar",
    53: "bool",
    81: "long",
    85: "ulong",
    121: "bfloat",
}


class MetallibError(ValueError):
    """A malformed metallib; the message names the field or function that is wrong."""


@dataclass(frozen=True)
class FunctionConstant:
    """A [[function_constant(index)]] as the public metadata declares it."""

    name: str
    index: int
    type: str
    required: bool


@dataclass(frozen=True)
class MetallibFunction:
    """One function of a metallib. `bitcode` is the stored bytes (LLVM's bitcode wrapper and all);
    `tags` the function-list tags in file order, those the writer derives (HASH, OFFT, MDSZ, RFLT)
    included as placeholders so that the order is kept."""

    name: str
    bitcode: bytes
    type: int = KERNEL
    version: tuple[int, int, int, int] = (2, 6, 3, 1)  # AIR major, minor; language major, minor
    public_metadata: tuple[tuple[str, bytes], ...] = ()
    private_metadata: tuple[tuple[str, bytes], ...] = ()
    reflection: bytes | None = None  # the entry's tags, raw (they are not all u16-sized)
    tags: tuple[tuple[str, bytes], ...] = ()

    @property
    def sha256(self) -> bytes:
        return hashlib.sha256(self.bitcode).digest()

    @property
    def kind(self) -> str:
        return FUNCTION_TYPES.get(self.type, f"type {self.type}")

    def module_bitcode(self) -> bytes:
        """The bitcode without LLVM's wrapper header (what LLVM's tools read either way)."""
        return unwrap_bitcode(self.bitcode, self.name)

    def function_constants(self) -> tuple[FunctionConstant, ...]:
        out: list[FunctionConstant] = []
        for tag, payload in self.public_metadata:
            if tag == "CNST":
                out.extend(_parse_constants(payload, self.name))
        return tuple(out)


@dataclass(frozen=True)
class Metallib:
    functions: tuple[MetallibFunction, ...]
    platform: int = PLATFORM_MACOS
    version: tuple[int, int] = (2, 7)
    library_type: int = LIBRARY_EXECUTABLE
    target_os: int = TARGET_OS_MACOS
    os_version: tuple[int, int] = (14, 0)
    extension: tuple[tuple[str, bytes], ...] = field(default=())  # header extension tags but ENDT

    # -- access ------------------------------------------------------------
    def names(self) -> list[str]:
        return [f.name for f in self.functions]

    def function(self, name: str) -> MetallibFunction:
        for f in self.functions:
            if f.name == name:
                return f
        close = sorted(n for n in self.names() if name.split("_")[0] in n)[:5]
        hint = f"; similar: {', '.join(close)}" if close else ""
        raise KeyError(f"no function {name!r} in this metallib ({len(self.functions)} functions){hint}")

    # -- reading -----------------------------------------------------------
    @classmethod
    def read(cls, source: str | Path | bytes | bytearray | memoryview) -> Metallib:
        """Parse and check a metallib given as a path or as its bytes."""
        data = _bytes_of(source)
        return _Reader(data).metallib()

    # -- writing -----------------------------------------------------------
    def to_bytes(self) -> bytes:
        return _write(self)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_bytes(self.to_bytes())
        return path

    @classmethod
    def of_bitcode(cls, functions: Sequence[tuple[str, bytes]], *, air_version=(2, 6), language=(3, 1)) -> Metallib:
        """A metallib of kernels given as (name, LLVM bitcode) - bare or already wrapped."""
        out = []
        for name, bc in functions:
            out.append(
                MetallibFunction(
                    name=name,
                    bitcode=wrap_bitcode(bc),
                    type=KERNEL,
                    version=(air_version[0], air_version[1], language[0], language[1]),
                )
            )
        return cls(functions=tuple(out))


# ------------------------------------------------------------------ bitcode --
def wrap_bitcode(bitcode: bytes) -> bytes:
    """LLVM's bitcode wrapper around bare bitcode (as Apple stores it), padded to 16 bytes."""
    if len(bitcode) >= 4 and struct.unpack_from("<I", bitcode)[0] == BITCODE_WRAPPER_MAGIC:
        return bytes(bitcode)
    if bitcode[:4] != BITCODE_MAGIC:
        raise MetallibError("bitcode: neither LLVM bitcode (BC 0xC0DE) nor a bitcode wrapper (0x0B17C0DE)")
    head = struct.pack("<IIIII", BITCODE_WRAPPER_MAGIC, 0, 20, len(bitcode), 0xFFFFFFFF)
    body = head + bytes(bitcode)
    return body + b"\0" * (-len(body) % 16)


def unwrap_bitcode(data: bytes, what: str = "bitcode") -> bytes:
    if data[:4] == BITCODE_MAGIC:
        return bytes(data)
    if len(data) < 20 or struct.unpack_from("<I", data)[0] != BITCODE_WRAPPER_MAGIC:
        raise MetallibError(f"{what}: bitcode starts with neither BC 0xC0DE nor the wrapper magic 0x0B17C0DE")
    _, _, offset, size, _ = struct.unpack_from("<IIIII", data)
    if offset + size > len(data) or offset < 20:
        raise MetallibError(f"{what}: bitcode wrapper says {size} bytes at {offset}, but it holds {len(data)} bytes")
    body = data[offset : offset + size]
    if body[:4] != BITCODE_MAGIC:
        raise MetallibError(f"{what}: the wrapped bitcode does not start with BC 0xC0DE")
    return bytes(body)


# ------------------------------------------------------------------ reading --
def _bytes_of(source) -> bytes:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise FileNotFoundError(f"no metallib at {path}")
        return path.read_bytes()
    raise TypeError(f"a metallib is read from a path or bytes, not {type(source).__name__}")


def _parse_constants(payload: bytes, fname: str) -> list[FunctionConstant]:
    where = f"function {fname!r}: CNST"
    if len(payload) < 2:
        raise MetallibError(f"{where}: {len(payload)} bytes, too short for its count")
    (count,) = struct.unpack_from("<H", payload)
    p, out = 2, []
    for i in range(count):
        end = payload.find(b"\0", p)
        if end < 0 or end + 5 > len(payload):
            raise MetallibError(f"{where}: constant {i} of {count} runs past the tag's {len(payload)} bytes")
        try:
            name = payload[p:end].decode("utf-8")
        except UnicodeDecodeError:
            raise MetallibError(f"{where}: the name of constant {i} is not UTF-8") from None
        ctype, index, required = struct.unpack_from("<BHB", payload, end + 1)
        out.append(FunctionConstant(name, index, CONSTANT_TYPES.get(ctype, f"MTLDataType {ctype}"), bool(required)))
        p = end + 5
    if p != len(payload):
        raise MetallibError(f"{where}: {len(payload) - p} bytes left after its {count} constants")
    return out


class _Reader:
    def __init__(self, data: bytes):
        self.d = data

    def _u(self, fmt: str, at: int, what: str):
        size = struct.calcsize(fmt)
        if at < 0 or at + size > len(self.d):
            raise MetallibError(f"{what}: needs {size} bytes at offset {at}, the file has {len(self.d)}")
        return struct.unpack_from(fmt, self.d, at)

    def _tags(self, start: int, end: int, what: str) -> tuple[list[tuple[str, bytes]], int]:
        """Tags from `start` up to and including ENDT, not past `end`; returns (tags, end of ENDT)."""
        p, tags = start, []
        while True:
            if p + 4 > end:
                raise MetallibError(f"{what}: tag list not closed by ENDT before offset {end}")
            name = self.d[p : p + 4]
            p += 4
            if name == b"ENDT":
                return tags, p
            if p + 2 > end:
                raise MetallibError(f"{what}: tag {name!r} has no size before offset {end}")
            (n,) = struct.unpack_from("<H", self.d, p)
            p += 2
            if p + n > end:
                raise MetallibError(f"{what}: tag {name!r} of {n} bytes at {p} runs past offset {end}")
            try:
                tname = name.decode("ascii")
            except UnicodeDecodeError:
                raise MetallibError(f"{what}: tag name {name!r} at {p - 6} is not ASCII") from None
            tags.append((tname, self.d[p : p + n]))
            p += n

    def _sized_entry(self, base: int, limit: int, offset: int, what: str) -> tuple[int, int]:
        """A u32-size-prefixed entry at base+offset inside [base, limit): returns (start, end)."""
        at = base + offset
        if offset < 0 or at + 4 > limit:
            raise MetallibError(f"{what}: offset {offset} is outside its section ({limit - base} bytes)")
        (size,) = self._u("<I", at, what)
        if size < 8 or at + size > limit:
            raise MetallibError(f"{what}: entry of {size} bytes at section offset {offset} does not fit its section")
        return at, at + size

    def metallib(self) -> Metallib:
        d = self.d
        if len(d) < HEADER.size:
            raise MetallibError(f"header: the file has {len(d)} bytes, a metallib header needs {HEADER.size}")
        (magic, platform, vmaj, vmin, ltype, tos, osmaj, osmin, fsize, *sections) = HEADER.unpack_from(d)
        if magic != MAGIC:
            raise MetallibError(f"header: magic is {magic!r}, a metallib starts with {MAGIC!r}")
        if fsize != len(d):
            raise MetallibError(f"header: file size field says {fsize} bytes, the file has {len(d)} (truncated?)")
        names = ("function list", "public metadata", "private metadata", "bitcode")
        spans = {}
        for i, what in enumerate(names):
            off, size = sections[2 * i], sections[2 * i + 1]
            if off < HEADER.size or off + size > len(d):
                raise MetallibError(f"header: {what} at {off} of {size} bytes is outside the file ({len(d)} bytes)")
            spans[what] = (off, off + size)
        flo, flend = spans["function list"]
        (count,) = self._u("<I", flo, "function list: count")
        # the list's size field counts the entries, not the count before them
        flend += 4
        if flend > len(d):
            raise MetallibError("header: function list runs past the end of the file")
        spans["function list"] = (flo, flend)
        _no_overlap(spans)
        pub0, pub1 = spans["public metadata"]
        prv0, prv1 = spans["private metadata"]
        bc0, bc1 = spans["bitcode"]
        if pub0 < flend:
            raise MetallibError(f"header: public metadata at {pub0} lies before the function list's end ({flend})")
        ext_tags, ext_end = self._tags(flend, pub0, "header extension")
        extension = tuple(ext_tags)
        refl_span = None
        for tag, payload in extension:
            if tag == "RLST":
                if len(payload) != 16:
                    raise MetallibError(f"header extension: RLST has {len(payload)} bytes, expected 16")
                off, size = struct.unpack("<QQ", payload)
                if off + size > len(d) or off < HEADER.size or size < 4:
                    raise MetallibError(
                        f"header extension: reflection list at {off} of {size} bytes is outside the file"
                    )
                refl_span = (off, off + size)
        spans["function list"] = (flo, ext_end)
        if refl_span:
            spans["reflection list"] = refl_span
        _no_overlap(spans)
        _in_order(spans, len(d))
        if refl_span:
            (refl_count,) = self._u("<I", refl_span[0], "reflection list: count")
            if refl_count != count:
                raise MetallibError(f"reflection list: count {refl_count}, the function list has {count} functions")

        functions, used = [], {"public metadata": [], "private metadata": [], "bitcode": [], "reflection list": []}
        p = flo + 4
        for i in range(count):
            (size,) = self._u("<I", p, f"function {i}: size")
            if size < 8 or p + size > flend:
                raise MetallibError(f"function {i}: entry of {size} bytes at {p} runs past the function list ({flend})")
            tags, end = self._tags(p + 4, p + size, f"function {i}")
            if end != p + size:
                raise MetallibError(f"function {i}: {p + size - end} bytes after ENDT inside its entry")
            p += size
            functions.append(self._function(i, tags, (pub0, pub1), (prv0, prv1), (bc0, bc1), refl_span, used))
        if p != flend:
            raise MetallibError(f"function list: {count} entries end at {p}, the list's size says {flend}")
        for what, parts in used.items():
            if what in spans:
                lo, hi = spans[what]
                _tiled(what, parts, lo + (4 if what == "reflection list" else 0), hi)
        return Metallib(
            functions=tuple(functions),
            platform=platform,
            version=(vmaj, vmin),
            library_type=ltype,
            target_os=tos,
            os_version=(osmaj, osmin),
            extension=extension,
        )

    def _function(self, i, tags, pub, prv, bc, refl, used) -> MetallibFunction:
        t = dict(tags)
        if len(t) != len(tags):
            raise MetallibError(f"function {i}: a tag appears twice")
        for need in ("NAME", "TYPE", "HASH", "OFFT", "MDSZ"):
            if need not in t:
                raise MetallibError(f"function {i}: no {need} tag")
        raw = t["NAME"]
        if not raw.endswith(b"\0"):
            raise MetallibError(f"function {i}: NAME is not a NUL-terminated string")
        try:
            name = raw[:-1].decode("utf-8")
        except UnicodeDecodeError:
            raise MetallibError(f"function {i}: NAME {raw[:-1]!r} is not UTF-8") from None
        what = f"function {i} ({name!r})"
        if len(t["OFFT"]) != 24 or len(t["MDSZ"]) != 8 or len(t["HASH"]) != 32 or len(t["TYPE"]) != 1:
            raise MetallibError(f"{what}: OFFT/MDSZ/HASH/TYPE have the wrong sizes")
        po, pro, bo = struct.unpack("<QQQ", t["OFFT"])
        (bsize,) = struct.unpack("<Q", t["MDSZ"])
        if bo + bsize > bc[1] - bc[0]:
            raise MetallibError(
                f"{what}: bitcode at offset {bo} of {bsize} bytes is outside the bitcode section "
                f"({bc[1] - bc[0]} bytes)"
            )
        bitcode = self.d[bc[0] + bo : bc[0] + bo + bsize]
        if hashlib.sha256(bitcode).digest() != t["HASH"]:
            raise MetallibError(f"{what}: HASH does not match the SHA-256 of its {bsize} bytes of bitcode")
        used["bitcode"].append((bc[0] + bo, bc[0] + bo + bsize, name))
        a, b = self._sized_entry(pub[0], pub[1], po, f"{what}: public metadata")
        used["public metadata"].append((a, b, name))
        public, end = self._tags(a + 4, b, f"{what}: public metadata")
        if end != b:
            raise MetallibError(f"{what}: public metadata has {b - end} bytes after ENDT")
        a, b = self._sized_entry(prv[0], prv[1], pro, f"{what}: private metadata")
        used["private metadata"].append((a, b, name))
        private, end = self._tags(a + 4, b, f"{what}: private metadata")
        if end != b:
            raise MetallibError(f"{what}: private metadata has {b - end} bytes after ENDT")
        reflection = None
        if "RFLT" in t:
            if refl is None:
                raise MetallibError(f"{what}: RFLT tag but the header extension has no reflection list (RLST)")
            if len(t["RFLT"]) != 8:
                raise MetallibError(f"{what}: RFLT has {len(t['RFLT'])} bytes, expected 8")
            (ro,) = struct.unpack("<Q", t["RFLT"])
            a, b = self._sized_entry(refl[0], refl[1], ro, f"{what}: reflection")
            used["reflection list"].append((a, b, name))
            reflection = self.d[a + 4 : b]
        version = (2, 6, 3, 1)
        if "VERS" in t:
            if len(t["VERS"]) != 8:
                raise MetallibError(f"{what}: VERS has {len(t['VERS'])} bytes, expected 8")
            version = struct.unpack("<HHHH", t["VERS"])
        fn = MetallibFunction(
            name=name,
            bitcode=bitcode,
            type=t["TYPE"][0],
            version=version,
            public_metadata=tuple(public),
            private_metadata=tuple(private),
            reflection=reflection,
            tags=tuple(tags),
        )
        fn.function_constants()  # checks CNST
        return fn


_ORDER = ("function list", "public metadata", "private metadata", "bitcode", "reflection list")


def _in_order(spans: dict[str, tuple[int, int]], size: int) -> None:
    """Sections back to back in Apple's order, from the header to the end of the file: a layout the
    writer reproduces byte for byte (nothing of the file is left unread)."""
    at = HEADER.size
    for what in _ORDER:
        if what not in spans:
            continue
        lo, hi = spans[what]
        if lo != at:
            raise MetallibError(f"header: {what} starts at {lo}, expected {at} (right after the section before it)")
        at = hi
    if at != size:
        raise MetallibError(f"header: the sections end at {at}, the file has {size} bytes")


def _tiled(what: str, parts: list[tuple[int, int, str]], lo: int, hi: int) -> None:
    """Functions' entries of a section: no two overlapping, together covering it."""
    parts = sorted(parts)
    at, prev = lo, None
    for a, b, name in parts:
        if a < at:
            raise MetallibError(f"{what} of {name!r} at {a - lo} overlaps that of {prev!r} (ending at {at - lo})")
        if a > at:
            raise MetallibError(f"{what}: bytes {at - lo}..{a - lo} belong to no function")
        at, prev = b, name
    if at != hi:
        raise MetallibError(f"{what}: bytes {at - lo}..{hi - lo} belong to no function")


def _no_overlap(spans: dict[str, tuple[int, int]]) -> None:
    items = sorted((a, b, n) for n, (a, b) in spans.items() if b > a)
    for (a0, a1, an), (b0, b1, bn) in zip(items, items[1:]):
        if b0 < a1:
            raise MetallibError(f"header: {bn} ({b0}..{b1}) overlaps {an} ({a0}..{a1})")


# ------------------------------------------------------------------ writing --
_DERIVED = ("HASH", "OFFT", "MDSZ", "RFLT")
_DEFAULT_TAGS = (("NAME", b""), ("TYPE", b""), ("HASH", b""), ("OFFT", b""), ("VERS", b""), ("MDSZ", b""))


def _tag(name: str, payload: bytes) -> bytes:
    if len(name) != 4:
        raise MetallibError(f"tag name {name!r} is not 4 characters")
    if len(payload) > 0xFFFF:
        raise MetallibError(f"tag {name}: {len(payload)} bytes exceed a tag's u16 size")
    return name.encode("ascii") + struct.pack("<H", len(payload)) + payload


def _tag_list(tags) -> bytes:
    return b"".join(_tag(n, p) for n, p in tags) + b"ENDT"


def _sized(body: bytes) -> bytes:
    return struct.pack("<I", len(body) + 4) + body


def _write(lib: Metallib) -> bytes:
    pub, prv, bcs, refl = bytearray(), bytearray(), bytearray(), bytearray()
    has_refl = any(f.reflection is not None for f in lib.functions)
    if has_refl:
        refl += struct.pack("<I", len(lib.functions))
    entries = bytearray()
    for f in lib.functions:
        if not f.name or "\0" in f.name:
            raise MetallibError(f"function name {f.name!r} is empty or holds a NUL")
        derived = {
            "NAME": f.name.encode() + b"\0",
            "TYPE": bytes([f.type]),
            "HASH": f.sha256,
            "OFFT": struct.pack("<QQQ", len(pub), len(prv), len(bcs)),
            "VERS": struct.pack("<HHHH", *f.version),
            "MDSZ": struct.pack("<Q", len(f.bitcode)),
        }
        if has_refl:
            if f.reflection is None:
                raise MetallibError(f"function {f.name!r}: no reflection entry while others have one")
            derived["RFLT"] = struct.pack("<Q", len(refl))
            refl += _sized(f.reflection)
        order = list(f.tags) if f.tags else list(_DEFAULT_TAGS)
        names = [n for n, _ in order]
        if has_refl and "RFLT" not in names:
            order.append(("RFLT", b""))
        if not has_refl:
            order = [(n, p) for n, p in order if n != "RFLT"]
        tags = [(n, derived.get(n, p)) for n, p in order]
        entries += _sized(_tag_list(tags))
        pub += _sized(_tag_list(f.public_metadata))
        prv += _sized(_tag_list(f.private_metadata))
        bcs += f.bitcode
    flist = struct.pack("<I", len(lib.functions)) + entries
    off_flist = HEADER.size
    ext_tags = [t for t in lib.extension if t[0] != "RLST"]
    ext_len = len(_tag_list(ext_tags)) + (22 if has_refl else 0)
    off_pub = off_flist + len(flist) + ext_len
    off_prv = off_pub + len(pub)
    off_bc = off_prv + len(prv)
    off_refl = off_bc + len(bcs)
    if has_refl:
        rlst = ("RLST", struct.pack("<QQ", off_refl, len(refl)))
        # RLST keeps its place among the extension tags (first, where Apple's tool puts it)
        names = [n for n, _ in lib.extension]
        at = names.index("RLST") if "RLST" in names else 0
        ext_tags.insert(at, rlst)
    ext = _tag_list(ext_tags)
    total = off_refl + len(refl)
    header = HEADER.pack(
        MAGIC,
        lib.platform,
        lib.version[0],
        lib.version[1],
        lib.library_type,
        lib.target_os,
        lib.os_version[0],
        lib.os_version[1],
        total,
        off_flist,
        len(entries),
        off_pub,
        len(pub),
        off_prv,
        len(prv),
        off_bc,
        len(bcs),
    )
    out = b"".join((header, flist, ext, bytes(pub), bytes(prv), bytes(bcs), bytes(refl)))
    assert len(out) == total
    return out


def with_function(lib: Metallib, fn: MetallibFunction) -> Metallib:
    """`lib` with `fn` added, or replacing the function of its name."""
    rest = tuple(f for f in lib.functions if f.name != fn.name)
    return replace(lib, functions=rest + (fn,))
