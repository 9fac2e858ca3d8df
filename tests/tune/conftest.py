import mlx.core as mx
import pytest

from mlx_metile import tune
from mlx_metile.formats import QuantizedWeight
from mlx_metile.tune import Protocol, Store

K, N = 128, 64


def quantized(n: int, k: int, seed: int, dtype=mx.bfloat16, bits: int = 4, group: int = 64) -> QuantizedWeight:
    w = (mx.random.normal((n, k), key=mx.random.key(seed)) * k**-0.5).astype(dtype)
    return QuantizedWeight(*mx.quantize(w, group_size=group, bits=bits), group, bits)


@pytest.fixture(scope="module")
def weight():
    return quantized(N, K, 1)


@pytest.fixture(scope="module")
def gate_up():
    return [quantized(N, K, 2), quantized(N, K, 3)]


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "decisions.sqlite3")


@pytest.fixture
def quick():
    """A protocol of few rounds (the planted clock decides them at the first check)."""
    return Protocol(min_rounds=3, max_rounds=6, confirm_min_rounds=3, confirm_max_rounds=6)


@pytest.fixture(autouse=True)
def no_decisions():
    """Each test starts and ends with no installed decisions."""
    tune.forget()
    yield
    tune.forget()
