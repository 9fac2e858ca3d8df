import os
import tempfile

import pytest

# Tests build emulated kernels into a private cache unless one is given.
os.environ.setdefault("MLX_METILE_CACHE", os.path.join(tempfile.gettempdir(), "mlx_metile_test_cache"))


@pytest.fixture(scope="session")
def rng():
    import numpy as np

    return np.random.default_rng(0)
