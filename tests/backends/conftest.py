"""Fixtures of the backend tests: the recorded CUDA launch is the op tests' (tests/ops/conftest.py)."""

from ..ops.conftest import fake_cuda

__all__ = ["fake_cuda"]
