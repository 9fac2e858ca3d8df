import os
import platform
import tempfile

import pytest

# Tests build emulated kernels into a private cache unless one is given.
os.environ.setdefault("MLX_METILE_CACHE", os.path.join(tempfile.gettempdir(), "mlx_metile_test_cache"))
# Tests of verification verify: patch()'s record (tests/integrations/test_record.py turns it on) would
# skip the runs a planted wrong kernel is caught by.
os.environ.setdefault("MLX_METILE_VERIFY_RECORD", "0")

EMULATOR_HOST = platform.system() == "Linux" and platform.machine() == "x86_64"
requires_emulator = pytest.mark.skipif(
    not EMULATOR_HOST, reason="the Metal emulator's fiber runtime is written for x86-64 Linux only"
)


def pytest_addoption(parser):
    parser.addoption(
        "--gpu-matrix",
        choices=("quick", "full"),
        default="quick",
        help="tests/gpu: the quick correctness matrix (default) or the full one",
    )


@pytest.fixture(scope="session")
def mlx_metal():
    """MLX's macOS wheel unpacked (tests/mlx_metal.py): its Metal headers and its mlx.metallib."""
    from tests.mlx_metal import wheel_root

    return wheel_root()


@pytest.fixture(scope="session")
def rng():
    import numpy as np

    return np.random.default_rng(0)


class Env:
    """Settings for one test: `env.set(NAME, value)` changes the environment and re-parses the
    settings (mlx_metile.settings reads them once); everything is undone after the test."""

    def __init__(self, monkeypatch):
        self._mp = monkeypatch

    def set(self, name: str, value: str) -> None:
        from mlx_metile import settings

        self._mp.setenv(name, value)
        settings.reload()

    def unset(self, name: str) -> None:
        from mlx_metile import settings

        self._mp.delenv(name, raising=False)
        settings.reload()


@pytest.fixture
def env(monkeypatch):
    from mlx_metile import settings

    yield Env(monkeypatch)
    monkeypatch.undo()
    settings.reload()
