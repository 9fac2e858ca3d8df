from pathlib import Path

import pytest

from ..conftest import requires_emulator

_HERE = Path(__file__).parent
# executing AIR needs the emulator's fiber runtime; reading and writing metallibs does not
_EXECUTES = {"test_executor.py", "test_mlx_kernels.py"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        path = Path(str(item.fspath))
        if path.parent == _HERE and path.name in _EXECUTES:
            item.add_marker(requires_emulator)


@pytest.fixture(scope="session")
def mlx_metallib_bytes(mlx_metal) -> bytes:
    """The bytes of MLX's Apple-compiled mlx.metallib (mlx-metal 0.32.4)."""
    from tests.mlx_metal import METALLIB

    return (mlx_metal / METALLIB).read_bytes()


@pytest.fixture(scope="session")
def mlx_library(mlx_metallib_bytes):
    from mlx_metile.air import Library

    return Library.read(mlx_metallib_bytes)
