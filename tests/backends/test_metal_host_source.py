"""The Metal host code (src/metal/, and the Metal parts of src/tile_kernel.cpp and src/bindings.cpp)
is built only on macOS, which no machine here runs. Its C++ is still checked here, against what a
macOS build compiles it with: MLX 0.32.4's headers and metal-cpp as the mlx-metal wheel for macOS
ships them (fetched with pip, tests/mlx_metal.py), the flags MLX's CMake config gives an extension
(C++20, -D_METAL_, blocks as on Apple's clang), and declaration stubs of the few Apple SDK headers
metal-cpp includes (tests/backends/apple_stubs: the Objective-C runtime, CoreFoundation, dispatch,
IOSurface, mach, TargetConditionals).

1. Syntax and types: every file compiles (clang -fsyntax-only).
2. Symbols: compiled to objects, every MLX and metal-cpp symbol the Metal files leave undefined is
   one the wheel's libmlx.dylib exports - so the link on macOS cannot fail for want of one (MLX's
   is_nax_available(), for one, is not exported: the negative control below shows the check sees it).

Neither is a build or a run: no Metal header of Apple's is here, nothing is linked or executed, and
what only macOS's headers or runtime decide (Objective-C messaging, Metal's loader) is unchecked."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STUBS = Path(__file__).parent / "apple_stubs"
METAL_FILES = sorted((ROOT / "src" / "metal").glob("*.cpp"))
CLANG = shutil.which("clang++-19") or shutil.which("clang++")
NM = shutil.which("llvm-nm-19") or shutil.which("llvm-nm")

pytestmark = pytest.mark.skipif(CLANG is None, reason="no clang++ (scripts/test installs clang-19)")


@pytest.fixture(scope="module")
def wheel(mlx_metal) -> Path:
    return mlx_metal / "mlx"


def flags(wheel: Path) -> list[str]:
    """What MLX's MLXConfig.cmake gives a Metal extension (cxx_std_20, -D_METAL_, its include dirs),
    our CMakeLists' METILE_METAL, and the stubs."""
    include = wheel / "include"
    return [
        "-std=c++20",
        "-fblocks",  # (on by default for Apple targets: metal-cpp's completion handlers are blocks)
        "-D_METAL_",
        "-DACCELERATE_NEW_LAPACK",
        "-DMETILE_METAL=1",
        "-Wno-c++20-extensions",
        f"-I{ROOT / 'src'}",
        f"-I{ROOT / 'mlx_metile' / 'emu' / 'runtime'}",
        f"-I{include}",
        f"-I{include / 'metal_cpp'}",
        f"-I{STUBS}",
    ]


def compile_(wheel: Path, source: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([CLANG, *flags(wheel), *extra, str(source)], capture_output=True, text=True, timeout=300)


def python_flags() -> list[str]:
    nanobind = pytest.importorskip("nanobind", reason="nanobind's headers (the test extra) are not installed")
    import sysconfig

    return [f"-I{nanobind.include_dir()}", f"-I{sysconfig.get_paths()['include']}"]


def test_the_wheel_carries_metal_cpp_and_mlx_metal_headers(wheel):
    for header in ("metal_cpp/Metal/Metal.hpp", "metal_cpp/Metal/MTLBinaryArchive.hpp", "mlx/backend/metal/device.h"):
        assert (wheel / "include" / header).is_file(), header
    assert (wheel / "lib" / "libmlx.dylib").is_file()


@pytest.fixture(scope="module")
def metal_objects(wheel, tmp_path_factory) -> list[str]:
    """src/metal/*.cpp compiled to objects (-O0: inline functions stay defined, calls stay calls)."""
    out = tmp_path_factory.mktemp("metal_objects")
    return [compiled(wheel, source, out) for source in METAL_FILES]


def compiled(wheel: Path, source: Path, out: Path) -> str:
    obj = out / (source.stem + ".o")
    done = compile_(wheel, source, "-c", "-O0", "-fPIC", "-Wall", "-o", str(obj))
    assert done.returncode == 0, f"{source.name}:\n{done.stderr[-6000:]}"
    return str(obj)


def test_the_metal_files_compile_against_metal_cpp(metal_objects):
    assert [Path(o).stem for o in metal_objects] == [p.stem for p in METAL_FILES]
    assert {"eval_metal", "metal_archive", "metal_device"} <= {p.stem for p in METAL_FILES}


@pytest.mark.parametrize("name", ["tile_kernel.cpp", "bindings.cpp"])
def test_the_metal_parts_of_the_primitive_and_bindings_compile(wheel, name):
    extra = python_flags() if name == "bindings.cpp" else []
    done = compile_(wheel, ROOT / "src" / name, "-fsyntax-only", "-Wall", *extra)
    assert done.returncode == 0, done.stderr[-6000:]


def test_a_wrong_call_fails_the_check(wheel, tmp_path):
    """The check above can fail: a metal-cpp method that does not exist is an error."""
    bad = tmp_path / "bad.cpp"
    bad.write_text(
        '#include "mlx/backend/metal/device.h"\nvoid f(MTL::Device* d) { d->newBinaryArchiveFromNowhere(nullptr); }\n'
    )
    done = compile_(wheel, bad, "-fsyntax-only")
    assert done.returncode != 0 and "newBinaryArchiveFromNowhere" in done.stderr


# -- symbols -------------------------------------------------------------------------------------
def _demangled(args: list[str]) -> set[str]:
    out = subprocess.run([NM, "--demangle", *args], capture_output=True, text=True, timeout=300, check=True).stdout
    names = set()
    for line in out.splitlines():
        m = re.match(r"^\s*(?:[0-9a-f]+\s+)?[A-Za-z]\s+(.*)$", line)
        if m:
            names.add(_normal(m.group(1)))
    return names


def _normal(name: str) -> str:
    """One spelling for Linux (libstdc++, LP64: int64_t is long) and macOS (libc++: std::__1, long long)."""
    name = re.sub(r"std::__(?:cxx11|1)::", "std::", name)
    return name.replace("long long", "long").strip()


def _ours(name: str) -> bool:
    return name.startswith(("mlx::", "MTL::", "NS::"))


@pytest.fixture(scope="module")
def exported(wheel) -> set[str]:
    if NM is None:
        pytest.skip("no llvm-nm (scripts/test installs llvm-19)")
    return _demangled(["-gU", str(wheel / "lib" / "libmlx.dylib")])


def missing(objects: list[str], exported: set[str]) -> list[str]:
    """The MLX / metal-cpp symbols the objects need that neither they define nor libmlx exports."""
    defined = _demangled(["--defined-only", *objects])
    needed = {n for n in _demangled(["-u", *objects]) if _ours(n)}
    return sorted(needed - defined - exported)


def test_every_mlx_and_metal_cpp_symbol_the_metal_files_need_is_exported_by_libmlx(metal_objects, exported):
    assert any("MTL::Private::Selector::s_k" in n for n in exported)  # (metal-cpp's selectors, from libmlx)
    needed = {n for n in _demangled(["-u", *metal_objects]) if _ours(n)}
    assert (
        "mlx::core::metal::Device::get_library(std::string const&, std::string const&)".replace(
            "std::string", "std::basic_string<char, std::char_traits<char>, std::allocator<char>>"
        )
        in needed
    )  # (the metallib route's call, in the normalised spelling both sides share)
    assert missing(metal_objects, exported) == []


def test_a_symbol_libmlx_keeps_to_itself_is_found_missing(wheel, tmp_path, exported):
    """The check above can fail: MLX's is_nax_available() is declared in device.h but not exported."""
    probe = tmp_path / "probe.cpp"
    probe.write_text(
        '#include "mlx/backend/metal/device.h"\nbool f() { return mlx::core::metal::is_nax_available(); }\n'
    )
    assert missing([compiled(wheel, probe, tmp_path)], exported) == ["mlx::core::metal::is_nax_available()"]
