"""mlx_metile.native.archive / fat / macho. No Apple archive exists on this machine: every archive
here is synthetic, written by this room's writer around Mesa's golden G13 encodings, in the layout
the public sources describe (fat file, AppleGPU and AIR64 slices, a nested compute object)."""

from __future__ import annotations

import dataclasses
import random
import struct

import pytest

from mlx_metile.native import archive, fat, g13, macho, rewrite
from mlx_metile.native.archive import Archive
from mlx_metile.native.errors import ArchiveError

from .test_rewrite import GOLDEN, STOP

MAIN = GOLDEN + g13.parse("ffma r6, r4, 1.0, -0.0").encode() + STOP
PROLOG = bytes.fromhex("620000007e05400a8000")  # ldimm r0l, 0; mov r1, r0
META = b"\x01metadata kept as bytes\x00"


def small(**kw) -> bytes:
    obj = archive.compute_object([("_agc.prolog", PROLOG), ("_agc.main", MAIN)], META)
    return archive.build([obj], gpu_align=4, **kw)


@pytest.mark.parametrize("magic", fat.MAGICS, ids=hex)
@pytest.mark.parametrize("order", ["<", ">"])
def test_round_trip_and_regions_in_every_magic_and_byte_order(magic, order):
    obj = archive.compute_object([("_agc.prolog", PROLOG), ("_agc.main", MAIN)], META, order=order)
    data = archive.build([obj], magic=magic, order=order)
    a = Archive.parse(data)
    assert a.to_bytes() == data
    assert a.fat.magic == magic and a.fat.order == order
    assert [s.cputype for s in a.fat.slices] == [fat.CPU_TYPE_AIR64, fat.CPU_TYPE_APPLE_GPU]
    assert a.code("_agc.main") == MAIN and a.code("_agc.prolog") == PROLOG
    main = a.region()
    assert data[main.offset : main.offset + main.size] == MAIN and main.slice_index == 1
    inner = a.compute[0].macho
    assert {s.name for s in inner.sections} == {"__TEXT,__text", "__GPU_METADATA,__gpu_metadata"}
    assert inner.contents(inner.find("__GPU_METADATA,__gpu_metadata")[0]) == META


def test_the_metal_magic_is_read_as_either_byte_order_on_disk():
    little, big = small(order="<"), small(order=">")
    assert little[:4] == bytes.fromhex("bebafecb") and big[:4] == bytes.fromhex("cbfebabe")
    assert Archive.parse(little).code() == Archive.parse(big).code() == MAIN


def test_a_bare_gpu_object_is_read_too():
    gpu = archive.gpu_object([archive.compute_object([("_agc.main", MAIN)])])
    assert Archive.parse(gpu).code() == MAIN


def test_a_patch_changes_the_region_and_nothing_else():
    data = small()
    a = Archive.parse(data)
    r = a.region()
    new_code = MAIN.replace(bytes.fromhex("2a05c2f2"), g13.parse("fadd r1, ^r1, 0.125").encode())
    out = a.patch(new_code, expect=MAIN)
    changed = [k for k in range(len(data)) if data[k] != out[k]]
    assert len(out) == len(data) and changed and all(r.offset <= k < r.offset + r.size for k in changed)
    assert Archive.parse(out).code() == new_code


def test_rewrite_then_patch_end_to_end():
    data = small()
    a = Archive.parse(data)
    region = g13.decode(a.code())
    outcome = rewrite.run(region)
    assert outcome.accepted and rewrite.verify(region, outcome.region).ok
    out = a.patch(g13.encode(outcome.region))
    assert g13.decode(Archive.parse(out).code()) == outcome.region
    assert Archive.parse(out).code("_agc.prolog") == PROLOG


def test_refusals_name_the_reason():
    a = Archive.parse(small())
    with pytest.raises(ArchiveError, match="size change"):
        a.patch(MAIN + b"\0\0")
    with pytest.raises(ArchiveError, match="no function"):
        a.region("_agc.other")
    with pytest.raises(ArchiveError, match="other bytes than"):
        a.patch(MAIN, expect=PROLOG + MAIN[len(PROLOG) :])
    two = archive.build([archive.compute_object([("_agc.main", MAIN)])] * 2, gpu_align=4)
    with pytest.raises(ArchiveError, match="several matches: 2 regions"):
        Archive.parse(two).patch(MAIN)
    copied = archive.build([archive.compute_object([("_agc.main", MAIN)], META + MAIN)], gpu_align=4)
    with pytest.raises(ArchiveError, match="occurs 2 times"):
        Archive.parse(copied).patch(MAIN)


def test_an_unknown_load_command_in_the_compute_object_blocks_a_patch():
    sections = [macho.SectionSpec("__TEXT", "__text", MAIN)]
    inner = macho.build(fat.CPU_TYPE_APPLE_GPU, sections, [("_agc.main", 0, 0)], extra_commands=[(0x1B, bytes(16))])
    a = Archive.parse(archive.build([inner], gpu_align=4))
    assert a.code() == MAIN and a.compute[0].macho.commands[1].cmd == 0x1B
    with pytest.raises(ArchiveError, match="unknown load command 0x1b"):
        a.patch(MAIN)
    assert a.patch(MAIN, allow_commands=archive.UNDERSTOOD_COMMANDS | {0x1B}) == a.data  # when a caller vouches


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda d, a: b"\0" * 64, "bad magic"),
        (lambda d, a: d[:6], "truncated"),
        (lambda d, a: d[: len(d) // 2], "out of range"),
        (lambda d, a: _put(d, a.fat.slices[1].at + 8, ">I", 0xFFFFFF00, a), "out of range"),
        (lambda d, a: _put(d, a.fat.slices[1].at + 8, ">I", a.fat.slices[0].offset, a), "overlap"),
        (lambda d, a: _put(d, a.compute[0].offset + 20, "I", a.compute[0].macho.sizeofcmds + 8, a), "load commands"),
        (lambda d, a: _put(d, a.compute[0].offset + a.compute[0].macho.symbols[0].at, "I", 10**6, a), "name offset"),
        (lambda d, a: _put(d, a.compute[0].offset + 16, "I", 10**6, a), "cannot fit"),
    ],
    ids=["bad-magic", "short-header", "truncated", "slice-range", "slice-overlap", "sizeofcmds", "symbol", "ncmds"],
)
def test_malformed_archives_are_errors_naming_the_fault(mutate, match):
    data = small()
    with pytest.raises(ArchiveError, match=match) as info:
        Archive.parse(mutate(data, Archive.parse(data)))
    assert isinstance(info.value, ValueError)


def _put(data: bytes, at: int, fmt: str, value: int, a: Archive) -> bytes:
    order = a.fat.order if fmt.startswith(">") else a.compute[0].macho.order
    out = bytearray(data)
    struct.pack_into(order + fmt.lstrip("<>"), out, at, value)
    return bytes(out)


def test_overlapping_sections_are_an_error():
    sections = [macho.SectionSpec("__TEXT", "__text", MAIN), macho.SectionSpec("__TEXT", "__const", META)]
    inner = macho.build(fat.CPU_TYPE_APPLE_GPU, sections, [("_agc.main", 0, 0)])
    data = archive.build([inner], gpu_align=4)
    a = Archive.parse(data)
    text, const = a.compute[0].macho.sections
    out = bytearray(data)
    struct.pack_into("<I", out, a.compute[0].offset + const.at + 48, text.offset)  # section_64's offset field
    with pytest.raises(
        ArchiveError, match=rf"section __TEXT,__const \[{text.offset}, \d+\) overlaps section __TEXT,__text"
    ):
        Archive.parse(bytes(out))


def test_fuzzed_archives_are_errors_or_read_back_byte_identical():
    data = small()
    rng = random.Random(2)
    mutants = [data[:k] for k in range(0, len(data), 3)]
    for _ in range(1500):
        out = bytearray(data)
        for _ in range(rng.choice([1, 1, 2, 4])):
            at = rng.randrange(len(out)) if rng.random() < 0.5 else rng.randrange(min(len(out), 400))
            out[at] ^= rng.randrange(1, 256)
        mutants.append(bytes(out))
    errors = 0
    for m in mutants:
        try:
            a = Archive.parse(m)
        except ArchiveError:
            errors += 1
            continue
        assert a.to_bytes() == m
        a.functions()
    assert 0 < errors < len(mutants)


def test_a_signed_gpu_object_is_not_patched():
    compute = archive.compute_object([("_agc.main", MAIN)])
    a = Archive.parse(archive.build([compute], gpu_align=4, extra_commands=[(macho.LC_CODE_SIGNATURE, bytes(8))]))
    with pytest.raises(ArchiveError, match="LC_CODE_SIGNATURE"):
        a.patch(MAIN)


def test_to_bytes_repacks_fields_rather_than_copying():
    data = small()
    a = Archive.parse(data)
    inner = a.compute[0].macho
    seg = inner.segments[0]
    inner.segments[0] = dataclasses.replace(seg, vmaddr=seg.vmaddr + 0x1000)
    out = a.to_bytes()
    at = a.compute[0].offset + seg.at + 24  # segment_command_64's vmaddr
    assert [k for k in range(len(data)) if data[k] != out[k]] == [at + 1]  # 0x1000 changes one byte
    before = a.region().offset
    sym = inner.symbols[1]
    inner.symbols[1] = dataclasses.replace(sym, value=sym.value + 2)
    assert Archive.parse(a.to_bytes()).region().offset == before + 2


def test_the_writer_lays_out_what_it_is_given():
    sections = [macho.SectionSpec("__TEXT", "__text", MAIN, align=4), macho.SectionSpec("__DATA", "__d", META, align=3)]
    m = macho.MachO.parse(macho.build(fat.CPU_TYPE_APPLE_GPU, sections, [("_f", 0, 6), ("_g", 1, 0)], order=">"))
    assert m.order == ">" and m.cputype == fat.CPU_TYPE_APPLE_GPU and m.filetype == macho.MH_GPU_EXECUTE
    assert [s.name for s in m.sections] == ["__TEXT,__text", "__DATA,__d"]
    assert [m.contents(s) for s in m.sections] == [MAIN, META]
    assert all(s.offset % (1 << s.align) == 0 for s in m.sections)
    assert [(s.name, s.sect, s.value) for s in m.symbols] == [
        ("_f", 1, m.sections[0].addr + 6),
        ("_g", 2, m.sections[1].addr),
    ]


def test_the_command_line_describes_an_archive(tmp_path, capsys):
    from mlx_metile.native.__main__ import main

    path = tmp_path / "archive.bin"
    path.write_bytes(small())
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "slice 1: AppleGPU" in out and f"_agc.main: {len(MAIN)} bytes" in out
    assert "ffma r5, r6, u9, r5" in out and "<opaque 8800: stop" in out
    path.write_bytes(b"\0" * 8)
    assert main([str(path)]) == 1 and "bad magic" in capsys.readouterr().err
