"""Patched Metal binary archives, proven without a GPU: the room of the third route.

- `fat`, `macho`, `archive`: read, write and patch Metal binary archives (fat files of Mach-O
  slices, the AppleGPU slice's nested compute object) byte for byte.
- `g13`: a codec of G13's float ALU subset; `g17`: what is public of G17's compact FMA.
- `floats`, `interp`: a bit-exact interpreter of the decoded subset under explicit models.
- `rewrite`: rewrites of a code region, each accepted only when interpreting the original and the
  rewritten region gives identical bits.

Loading a patched archive needs macOS and Metal (docs/NATIVE.md); whether a caller may use the
route at all is MLX_METILE_PATCHED_ARCHIVES, off by default.
"""

from __future__ import annotations

from .. import settings


def enabled() -> bool:
    """MLX_METILE_PATCHED_ARCHIVES: whether patched archives may enter a tournament (off by default)."""
    return settings.current().patched_archives
