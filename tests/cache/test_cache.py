"""The kernel caches as a user meets them: damaged, swapped, moved or unwritable entries, and
several threads and processes building into one empty cache. Every case runs in a fresh process
(a damaged object loaded into a process crashes it) and checks the results against float64."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from ..conftest import requires_emulator

# One emulated call of each of two kernels (a dense and a 4-bit product) against float64: the
# largest error relative to the tolerance of one bf16 rounding plus f32 accumulation.
SCRIPT = textwrap.dedent(
    """
    import json, sys, threading
    import mlx.core as mx, numpy as np
    import mlx_metile as mt
    from mlx_metile.formats import dequantize_exact

    def run(kind, seed):
        rng = np.random.default_rng(seed)
        x = mx.array(rng.standard_normal((1, 64)).astype(np.float32))  # 1 row: the smallest kernels
        w = mx.array((0.1 * rng.standard_normal((24, 64))).astype(np.float32))
        x64 = np.array(x, np.float64)
        if kind == "dense":
            y, w64 = mt.linear(x, w), np.array(w, np.float64)
        else:
            q = mx.quantize(w, group_size=64, bits=4)
            y, w64 = mt.quantized_linear(x, *q, group_size=64, bits=4), dequantize_exact(*q, 64, 4)
        exact = x64 @ w64.T
        tol = 2.0**-24 * np.abs(exact) + 64 * 2.0**-24 * (np.abs(x64) @ np.abs(w64).T) + 1e-30
        return float((np.abs(np.array(y, np.float64) - exact) / tol).max())

    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    if threads:
        out = [None] * threads
        def job(i):
            out[i] = run("quantized" if i % 2 else "dense", i)
        ts = [threading.Thread(target=job, args=(i,)) for i in range(threads)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print(json.dumps({"ratios": out}))
    else:
        print(json.dumps({"ratios": [run("dense", 0), run("quantized", 1)]}))
    """
)

pytestmark = requires_emulator


def _run(cache: Path, *args: str, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLX_METILE_")}
    env.update(MLX_METILE_CACHE=str(cache), MLX_METILE_EMULATE="1", **(extra_env or {}))
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, *args], env=env, capture_output=True, text=True, timeout=600, check=False
    )


def _ratios(res: subprocess.CompletedProcess) -> list[float]:
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stderr[-3000:]}"
    return json.loads(res.stdout.strip().splitlines()[-1])["ratios"]


def _kernels(cache: Path) -> list[Path]:
    return sorted(p for p in (cache / "emu").glob("*/*.so"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A cache holding the two kernels (and the emulator's runtime), built once."""
    cache = tmp_path_factory.mktemp("cache")
    ratios = _ratios(_run(cache))
    assert all(r <= 1.0 for r in ratios), ratios
    assert len(_kernels(cache)) == 2
    return cache


def _copy(built: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "cache"
    shutil.copytree(built, dst, symlinks=True)
    return dst


def _text_section(path: Path) -> tuple[int, int]:
    """(offset, size) of an ELF64 object's .text section."""
    data = path.read_bytes()
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    strtab = sections[shstrndx]
    names = data[strtab[4] : strtab[4] + strtab[5]]
    for sec in sections:
        name = names[sec[0] : names.index(b"\0", sec[0])]
        if name == b".text":
            return sec[4], sec[5]
    raise AssertionError(f"{path} has no .text")


def _damage_truncate(so: Path) -> None:
    so.write_bytes(so.read_bytes()[: so.stat().st_size // 3])


def _damage_zero_text(so: Path) -> None:
    offset, size = _text_section(so)
    data = bytearray(so.read_bytes())
    data[offset : offset + size] = bytes(size)
    so.write_bytes(bytes(data))


def _damage_flip_bits(so: Path) -> None:
    offset, size = _text_section(so)
    data = bytearray(so.read_bytes())
    rng = np.random.default_rng(7)
    for pos in rng.integers(offset, offset + size, 40):
        data[pos] ^= 1 << int(rng.integers(0, 8))
    so.write_bytes(bytes(data))


def _damage_garbage(so: Path) -> None:
    so.write_bytes(b"not an object")


def _damage_empty(so: Path) -> None:
    so.write_bytes(b"")


def _damage_directory(so: Path) -> None:
    so.unlink()
    (so / "inside").mkdir(parents=True)


def _damage_mode_000(so: Path) -> None:
    so.chmod(0)


# pairs of damages, one to each kernel's object, each pair in one fresh process
DAMAGES = [
    (_damage_truncate, _damage_zero_text),
    (_damage_flip_bits, _damage_garbage),
    (_damage_empty, _damage_directory),
    (_damage_mode_000, _damage_flip_bits),
]


@pytest.mark.parametrize("damages", DAMAGES, ids=lambda d: "+".join(f.__name__[8:] for f in d))
def test_a_damaged_kernel_object_is_rebuilt_never_loaded(built, tmp_path, damages):
    cache = _copy(built, tmp_path)
    for so, damage in zip(_kernels(cache), damages):
        damage(so)
    res = _run(cache)
    assert all(r <= 1.0 for r in _ratios(res))
    assert "damaged" in res.stderr, res.stderr[-2000:]  # (mode 000 is read by root as any file: its pair warns)
    assert len(_kernels(cache)) == 2


def test_a_damaged_runtime_library_is_rebuilt(built, tmp_path):
    cache = _copy(built, tmp_path)
    (lib,) = (cache / "emu").glob("libmetile_emu_rt-*.so")
    _damage_truncate(lib)
    res = _run(cache)
    assert all(r <= 1.0 for r in _ratios(res)) and "damaged" in res.stderr


def test_swapped_kernel_objects_are_detected(built, tmp_path):
    cache = _copy(built, tmp_path)
    a, b = _kernels(cache)
    data_a, data_b = a.read_bytes(), b.read_bytes()
    a.write_bytes(data_b)  # each object where the other should be, sidecars left as they are
    b.write_bytes(data_a)
    res = _run(cache)
    assert all(r <= 1.0 for r in _ratios(res)) and "damaged" in res.stderr


def test_swapped_entries_are_detected(built, tmp_path):
    """Each object and its sidecar where the other kernel's should be: the sidecars name their key."""
    cache = _copy(built, tmp_path)
    a, b = _kernels(cache)
    side_a, side_b = a.with_name(a.name + ".sum"), b.with_name(b.name + ".sum")
    entry_a, entry_b = (a.read_bytes(), side_a.read_bytes()), (b.read_bytes(), side_b.read_bytes())
    a.write_bytes(entry_b[0]), side_a.write_bytes(entry_b[1])
    b.write_bytes(entry_a[0]), side_b.write_bytes(entry_a[1])
    res = _run(cache)
    assert all(r <= 1.0 for r in _ratios(res)) and "another key" in res.stderr


def test_a_file_where_a_folder_should_be(built, tmp_path):
    cache = _copy(built, tmp_path)
    folder = _kernels(cache)[0].parent
    shutil.rmtree(folder)
    folder.write_bytes(b"a file")
    assert all(r <= 1.0 for r in _ratios(_run(cache)))
    shutil.rmtree(cache / "emu")
    (cache / "emu").write_bytes(b"a file where the emulator's folder should be")
    assert all(r <= 1.0 for r in _ratios(_run(cache)))


def test_a_moved_cache_works_without_rebuilding(built, tmp_path):
    moved = tmp_path / "elsewhere"
    shutil.copytree(built, moved, symlinks=True)
    before = {p: p.stat().st_mtime_ns for p in _kernels(moved)}
    res = _run(moved)
    assert all(r <= 1.0 for r in _ratios(res))
    assert "damaged" not in res.stderr
    assert {p: p.stat().st_mtime_ns for p in _kernels(moved)} == before  # loaded, not rebuilt


def test_a_cache_that_cannot_be_written_falls_back_to_a_private_one(tmp_path):
    res = _run(Path("/proc/mlx_metile_cache"))  # no folder can be made under /proc
    assert all(r <= 1.0 for r in _ratios(res))
    assert "cannot be written" in res.stderr


def test_threads_building_into_an_empty_cache(tmp_path):
    ratios = _ratios(_run(tmp_path / "cache", "8"))
    assert len(ratios) == 8 and all(r <= 1.0 for r in ratios), ratios


def test_processes_building_into_an_empty_cache(tmp_path):
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLX_METILE_")}
    env.update(MLX_METILE_CACHE=str(cache), MLX_METILE_EMULATE="1")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, "2"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(4)
    ]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-3000:]
        ratios = json.loads(out.strip().splitlines()[-1])["ratios"]
        assert all(r <= 1.0 for r in ratios), ratios
    assert not list(cache.rglob("*.tmp"))  # every temporary renamed or removed
