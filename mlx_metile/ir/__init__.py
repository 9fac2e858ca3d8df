"""The tile IR: typed tiles, a builder, a verifier, a printer and the numpy
reference interpreter that defines what every backend must compute."""

from .builder import Builder, T
from .interpret import interpret
from .nodes import For, Op, Param, Program, TileType, Value
from .passes import bind_meta
from .printer import format_program
from .verify import VerifyError, verify

__all__ = [
    "Builder",
    "For",
    "Op",
    "Param",
    "Program",
    "T",
    "TileType",
    "Value",
    "VerifyError",
    "bind_meta",
    "format_program",
    "interpret",
    "verify",
]
