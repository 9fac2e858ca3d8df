"""`python -m mlx_metile.native ARCHIVE`: an archive's slices, compute objects and functions, with
each function's G13 code decoded (opaque where outside the subset)."""

from __future__ import annotations

import sys
from pathlib import Path

from . import g13
from .archive import Archive
from .errors import ArchiveError
from .fat import cpu_name


def describe(data: bytes) -> str:
    a = Archive.parse(data)
    lines = []
    if a.fat is not None:
        lines.append(f"fat magic {a.fat.magic:#010x} ({'little' if a.fat.order == '<' else 'big'}-endian)")
        for k, (s, m) in enumerate(zip(a.fat.slices, a.objects)):
            kind = "not a Mach-O" if m is None else f"Mach-O filetype {m.filetype:#x}, {len(m.commands)} load commands"
            lines.append(f"slice {k}: {s.name}, {s.size} bytes at {s.offset}: {kind}")
    else:
        lines.append(f"Mach-O of {cpu_name(a.objects[0].cputype)}")
    for r in a.functions():
        lines.append(f"{r.function}: {r.size} bytes at {r.offset} ({r.path})")
        at = 0
        for ins in g13.decode(data[r.offset : r.offset + r.size]):
            lines.append(f"  {at:5x}: {ins.encode().hex():24s} {ins.text}")
            at += ins.size
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m mlx_metile.native ARCHIVE", file=sys.stderr)
        return 2
    try:
        print(describe(Path(argv[0]).read_bytes()))
    except (OSError, ArchiveError) as e:
        print(f"{argv[0]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
