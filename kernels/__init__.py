"""Kernel programs written with the tile IR builder."""

from .projection import projection_program

__all__ = ["projection_program"]
