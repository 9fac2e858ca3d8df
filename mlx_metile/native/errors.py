"""The errors of the native room: every refusal is a ValueError naming what is wrong."""

from __future__ import annotations


class ArchiveError(ValueError):
    """A binary archive (fat file, Mach-O, nested compute object) that is malformed, or a patch refused."""


class EncodingError(ValueError):
    """An instruction that cannot be encoded as asked (a field out of range, a form too short)."""


class InterpretError(ValueError):
    """A region the interpreter cannot run (an opaque instruction, a register out of range)."""


class RewriteError(ValueError):
    """A rewrite refused: it crosses an opaque instruction, breaks a dependency, or changes bits."""
