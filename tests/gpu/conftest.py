"""Options of the GPU tests: --gpu-matrix quick|full (the correctness matrix's size). Given with
`pytest tests/gpu ...` (this file is read at start-up only when tests/gpu is named)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    parser.addoption(
        "--gpu-matrix",
        choices=("quick", "full"),
        default="quick",
        help="tests/gpu: the quick correctness matrix (default) or the full one",
    )


@pytest.fixture(scope="session")
def gpu_matrix(pytestconfig) -> str:
    return pytestconfig.getoption("gpu_matrix", default="quick")
