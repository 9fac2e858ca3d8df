"""Benchmark setup: the default device, and machine/version facts in the JSON."""

from __future__ import annotations

import datetime
import platform

import mlx.core as mx
import pytest


def pytest_benchmark_update_machine_info(config, machine_info):
    import mlx_metile

    machine_info["mlx_version"] = mx.__version__
    machine_info["mlx_metile_version"] = mlx_metile.__version__
    machine_info["device"] = str(mx.default_device())
    machine_info["platform"] = platform.platform()
    machine_info["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@pytest.fixture(scope="session")
def device() -> mx.Device:
    return mx.default_device()
