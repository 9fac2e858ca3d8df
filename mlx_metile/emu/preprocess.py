"""Expanding a kernel's own headers and macros before translation.

A kernel that includes headers of its own (MLX's kernels, say) or defines macros is run through
clang's preprocessor first, so the translator sees the text the compiler will see: template
kernels instantiated by macros, `#if` branches taken. The emulator's Metal headers (<metal_stdlib>,
<metal_tensor>, <MetalPerformancePrimitives/...>) are *not* expanded: during this pass each
resolves to a stub that leaves `#pragma metile_include <name>` behind, which the translator turns
back into an `#include` of the shim. Line markers keep every line attributed to its own file.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .toolchain import cache_dir, run_clang

HERE = Path(__file__).parent
INCLUDE = HERE / "include"

# Metal 4's tensor ops take class-type template arguments (matmul2d<descriptor, scope>): C++20.
KERNEL_STD = "-std=c++20"

# What the Metal compiler predefines and the emulator stands for (Metal 4 with tensors, macOS).
METAL_DEFINES = (
    "-D__METAL__=1",
    "-D__METAL_VERSION__=400",
    "-D__METAL_MACOS__=1",
    "-D__HAVE_TENSOR__=1",
    "-D__HAVE_BFLOAT__=1",
)

_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(\w+)(.*)$", re.M)
_SHIM_INCLUDE = re.compile(r"^[ \t]*<([^>]+)>")
_STUB_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+metile_include[ \t]+(<[^>\n]+>)[ \t]*$", re.M)


class PreprocessError(ValueError):
    """The preprocessor rejected the source (a missing header, a bad directive); carries file:line."""


def shim_headers() -> list[str]:
    """The header names the emulator provides, relative to its include directory."""
    names = []
    for root, _dirs, files in os.walk(INCLUDE):
        for f in files:
            names.append(os.path.relpath(os.path.join(root, f), INCLUDE))
    return sorted(names)


def needs_preprocessing(source: str, include_dirs: Sequence[str | os.PathLike]) -> bool:
    """True where the translator must see expanded text: headers of the kernel's own, or any
    directive other than `#include <shim header>` and `#pragma`."""
    if include_dirs:
        return True
    shim = set(shim_headers())
    for m in _DIRECTIVE.finditer(source):
        word, rest = m.group(1), m.group(2)
        if word == "pragma":
            continue
        if word == "include":
            inc = _SHIM_INCLUDE.match(rest)
            if inc and inc.group(1) in shim:
                continue
        return True
    return False


def _stub_dir() -> Path:
    """One stub per shim header, each leaving a pragma the translator turns back into an include."""
    names = shim_headers()
    stamp = "\n".join(names)
    root = cache_dir() / "shim-stubs"
    marker = root / ".names"
    if marker.is_file() and marker.read_text() == stamp:
        return root
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        stub = root / name
        stub.parent.mkdir(parents=True, exist_ok=True)
        tmp = stub.with_name(stub.name + f".{os.getpid()}.tmp")
        tmp.write_text(f"#pragma metile_include <{name}>\n")
        os.replace(tmp, stub)
    tmp = marker.with_name(f".names.{os.getpid()}.tmp")
    tmp.write_text(stamp)
    os.replace(tmp, marker)
    return root


def preprocess(source: str, filename: str, include_dirs: Sequence[str | os.PathLike] = ()) -> str:
    """The source with its own headers and macros expanded, shim headers kept as includes."""
    dirs = []
    for d in include_dirs:
        p = Path(d)
        if not p.is_dir():
            raise PreprocessError(f"include_dirs: {str(d)!r} is not a directory")
        dirs.append(str(p.resolve()))
    stubs = _stub_dir()
    with tempfile.TemporaryDirectory(prefix="metile-pp-") as work:
        src = Path(work) / filename
        src.write_text(source)
        args = ["-x", "c++", KERNEL_STD, "-E", "-nostdinc", "-nostdinc++", "-Wno-unknown-pragmas"]
        args += [*METAL_DEFINES, *(f"-I{d}" for d in dirs), "-isystem", str(stubs)]
        res = run_clang([*args, str(src)])
        if res.returncode != 0:
            said = res.stderr.replace(str(src), filename).replace(work + os.sep, "")
            raise PreprocessError(said.strip())
        text = res.stdout.replace(f'"{src}"', f'"{filename}"')
    return _STUB_PRAGMA.sub(r"#include \1", text)
