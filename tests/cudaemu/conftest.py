import platform
from pathlib import Path

import pytest

_HERE = Path(__file__).parent
_LINUX = pytest.mark.skipif(
    platform.system() != "Linux",
    reason="the CUDA-on-CPU harness runs a block's threads as fibers written for Linux (cuda_emu.h)",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if Path(str(item.fspath)).parent == _HERE:
            item.add_marker(_LINUX)


@pytest.fixture(autouse=True)
def cuda_kernels(env):
    """CUDA kernels built for sm_90 (the H200's) under the default settings otherwise."""
    env.set("MLX_METILE_CUDA_ARCH", "sm_90")
