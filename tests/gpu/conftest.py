"""The GPU tests' fixtures; their option, --gpu-matrix quick|full, is registered in tests/conftest.py
so that `pytest tests --gpu-matrix full` takes it too."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def gpu_matrix(pytestconfig) -> str:
    return pytestconfig.getoption("gpu_matrix", default="quick")
