import os
import platform
import tempfile

import pytest

# Tests build emulated kernels into a private cache unless one is given.
os.environ.setdefault("MLX_METILE_CACHE", os.path.join(tempfile.gettempdir(), "mlx_metile_test_cache"))

EMULATOR_HOST = platform.system() == "Linux" and platform.machine() == "x86_64"
requires_emulator = pytest.mark.skipif(
    not EMULATOR_HOST, reason="the Metal emulator's fiber runtime is written for x86-64 Linux only"
)


@pytest.fixture(scope="session")
def rng():
    import numpy as np

    return np.random.default_rng(0)
