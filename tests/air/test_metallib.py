"""The metallib reader and writer: MLX's Apple-built mlx.metallib read whole (every hash checked)
and written back byte for byte; metallibs of our own AIR written and read back; malformed files
rejected with a MetallibError naming what is wrong, never another exception."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest

from mlx_metile.air import Metallib, MetallibError, MetallibFunction
from mlx_metile.air.metallib import HEADER, unwrap_bitcode

from .own_air import assemble

# kernels the executor's proofs run (tests/air/test_mlx_kernels.py)
PROVEN = (
    "affine_qmv_fast_float_gs_64_b_4_batch_0_pr_0_hgs_0_r_4",
    "affine_qmv_fast_float16_t_gs_64_b_4_batch_0_pr_0_hgs_0_r_4",
    "affine_qmv_fast_bfloat16_t_gs_64_b_4_batch_0_pr_0_hgs_0_r_4",
    "steel_gemm_fused_nn_float32_float32_bm64_bn64_bk16_wm2_wn2",
    "row_reduce_simple_sumfloat32",
)


@pytest.fixture(scope="module")
def mlx_lib(mlx_metallib_bytes) -> Metallib:
    return Metallib.read(mlx_metallib_bytes)


def test_reads_every_function_of_mlx_metallib(mlx_lib, mlx_metallib_bytes):
    header = HEADER.unpack_from(mlx_metallib_bytes)
    (count,) = struct.unpack_from("<I", mlx_metallib_bytes, header[9])  # the function list's count field
    assert len(mlx_lib.functions) == count > 10000
    assert len(set(mlx_lib.names())) == count
    for f in mlx_lib.functions:
        assert hashlib.sha256(f.bitcode).digest() == dict(f.tags)["HASH"]
        assert f.kind == "kernel"
        assert unwrap_bitcode(f.bitcode)[:4] == b"BC\xc0\xde"
    for name in PROVEN:
        assert mlx_lib.function(name).name == name
    assert mlx_lib.version == (2, 7) and mlx_lib.os_version == (14, 0)


def test_writes_mlx_metallib_back_byte_for_byte(mlx_lib, mlx_metallib_bytes):
    assert mlx_lib.to_bytes() == mlx_metallib_bytes


def test_function_constants_are_those_mlx_host_code_sets(mlx_lib):
    # mlx/backend/metal/matmul.cpp (steel_matmul_regular_axpby): func_consts
    consts = mlx_lib.function(PROVEN[3]).function_constants()
    assert [(c.name, c.index, c.type) for c in consts] == [
        ("has_batch", 10, "bool"),
        ("use_out_source", 100, "bool"),
        ("do_axpby", 110, "bool"),
        ("align_M", 200, "bool"),
        ("align_N", 201, "bool"),
        ("align_K", 202, "bool"),
    ]
    assert mlx_lib.function(PROVEN[0]).function_constants() == ()


def _subset(mlx_lib: Metallib, names) -> Metallib:
    from dataclasses import replace

    return replace(mlx_lib, functions=tuple(mlx_lib.function(n) for n in names))


def test_a_subset_of_mlx_functions_round_trips(mlx_lib):
    small = _subset(mlx_lib, PROVEN)
    raw = small.to_bytes()
    back = Metallib.read(raw)
    assert back.names() == list(PROVEN)
    for a, b in zip(small.functions, back.functions):
        assert (a.bitcode, a.public_metadata, a.reflection, a.version) == (
            b.bitcode,
            b.public_metadata,
            b.reflection,
            b.version,
        )
    assert back.to_bytes() == raw


def test_own_air_written_and_read_back():
    bc = assemble()
    lib = Metallib.of_bitcode([("probe", bc), ("oob", bc)])
    raw = lib.to_bytes()
    back = Metallib.read(raw)
    assert back.names() == ["probe", "oob"]
    for f in back.functions:
        assert f.module_bitcode() == unwrap_bitcode(bc)
        assert dict(f.tags)["HASH"] == hashlib.sha256(f.bitcode).digest()
        assert f.version == (2, 6, 3, 1) and f.kind == "kernel"
    assert back.to_bytes() == raw
    assert raw[:4] == b"MTLB" and struct.unpack_from("<Q", raw, 16)[0] == len(raw)


# ------------------------------------------------------------------ malformed --
@pytest.fixture(scope="module")
def small(mlx_lib) -> bytes:
    """Three of MLX's functions (reflection list included) and a duplicate of the first under
    another name: a complete metallib of a few tens of kilobytes to corrupt."""
    from dataclasses import replace

    f0 = mlx_lib.function(PROVEN[4])
    lib = replace(mlx_lib, functions=(f0, mlx_lib.function(PROVEN[0]), replace(f0, name="copy_of_first")))
    return lib.to_bytes()


def _offt_positions(raw: bytes) -> list[int]:
    out, p = [], raw.find(b"OFFT\x18\x00")
    while p >= 0:
        out.append(p + 6)
        p = raw.find(b"OFFT\x18\x00", p + 1)
    return out


def test_bad_magic(small):
    with pytest.raises(MetallibError, match=r"header: magic is b'XTLB'"):
        Metallib.read(b"X" + small[1:])


def test_truncated_anywhere(small):
    rng = np.random.default_rng(0)
    cuts = sorted(set(rng.integers(0, len(small), 150).tolist()) | {0, 3, 4, 87, 88, 100, len(small) - 1})
    for cut in cuts:
        with pytest.raises(MetallibError):
            Metallib.read(small[:cut])
    with pytest.raises(MetallibError, match="truncated"):
        Metallib.read(small[:-1])


def test_hash_mismatch_names_the_function(small):
    lib = Metallib.read(small)
    bc_off = HEADER.unpack_from(small)[15]
    bad = bytearray(small)
    bad[bc_off + struct.unpack_from("<Q", small, _offt_positions(small)[1] + 16)[0] + 40] ^= 0x01
    with pytest.raises(MetallibError, match=rf"function 1 \('{lib.functions[1].name}'\): HASH does not match"):
        Metallib.read(bytes(bad))


def test_section_out_of_range(small):
    bad = bytearray(small)
    struct.pack_into("<Q", bad, 8 + 8 + 8 * 7, len(small))  # the bitcode section's offset
    with pytest.raises(MetallibError, match=r"header: bitcode at \d+ of \d+ bytes is outside the file"):
        Metallib.read(bytes(bad))


def test_function_bitcode_out_of_range(small):
    bad = bytearray(small)
    struct.pack_into("<Q", bad, _offt_positions(small)[2] + 16, 1 << 40)
    with pytest.raises(
        MetallibError, match=r"function 2 \('copy_of_first'\): bitcode at offset \d+ .* outside the bitcode section"
    ):
        Metallib.read(bytes(bad))


def test_overlapping_sections(small):
    bad = bytearray(small)
    struct.pack_into("<Q", bad, 8 + 8 + 8 * 3, HEADER.size + 8)  # public metadata inside the function list
    with pytest.raises(MetallibError, match="overlaps"):
        Metallib.read(bytes(bad))


def test_overlapping_function_bitcode(small):
    # function 2 holds the same bitcode as function 0: pointing it at function 0's keeps its hash valid
    bad = bytearray(small)
    struct.pack_into("<Q", bad, _offt_positions(small)[2] + 16, 0)
    with pytest.raises(
        MetallibError,
        match=r"bitcode of '(row_reduce_simple_sumfloat32|copy_of_first)' at 0 overlaps that of '(copy_of_first|row_reduce_simple_sumfloat32)'",
    ):
        Metallib.read(bytes(bad))


def test_random_corruption_is_an_error_or_a_valid_file(small):
    rng = np.random.default_rng(1)
    errors = 0
    for _ in range(300):
        bad = bytearray(small)
        for at in rng.integers(0, len(bad), int(rng.integers(1, 4))):
            bad[at] = int(rng.integers(0, 256))
        try:
            lib = Metallib.read(bytes(bad))
        except MetallibError:
            errors += 1
            continue
        # a corruption the format cannot see (a version, a UUID, reflection bytes): still a whole file
        assert lib.to_bytes() == bytes(bad)
    assert errors > 100  # most flips land in the hashed bitcode


def test_own_writer_rejects_bad_functions():
    with pytest.raises(MetallibError, match="empty or holds a NUL"):
        Metallib(functions=(MetallibFunction(name="", bitcode=b"x"),)).to_bytes()
    with pytest.raises(MetallibError, match="neither LLVM bitcode"):
        Metallib.of_bitcode([("k", b"not bitcode")])


def test_reads_paths_and_rejects_other_sources(tmp_path, small):
    p = tmp_path / "lib.metallib"
    p.write_bytes(small)
    assert Metallib.read(p).names() == Metallib.read(small).names()
    with pytest.raises(FileNotFoundError):
        Metallib.read(tmp_path / "missing.metallib")
    with pytest.raises(TypeError):
        Metallib.read(3)  # type: ignore[arg-type]
