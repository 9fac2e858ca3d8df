"""Benchmark setup: the sizes given on the command line, and the machine, versions, date and
changed settings in pytest-benchmark's JSON (machine_info)."""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("mlx-metile benchmarks")
    # bench/test_bench_projections.py: the weights of each workload
    group.addoption("--bench-k", type=int, default=2048, help="projections: input width K (default 2048)")
    group.addoption("--bench-n", type=int, default=2048, help="projections: output columns N (default 2048)")
    group.addoption("--bench-pool", type=int, default=4, help="projections: weights used in turn (default 4)")
    # bench/test_bench_generate.py: the random Llama and what is timed
    group.addoption("--bench-hidden", type=int, default=512, help="generation: hidden size (default 512)")
    group.addoption("--bench-layers", type=int, default=2, help="generation: layers (default 2)")
    group.addoption("--bench-intermediate", type=int, default=None, help="generation: MLP width (default 3 x hidden)")
    group.addoption("--bench-head-dim", type=int, default=64, help="generation: head dimension (default 64)")
    group.addoption("--bench-decode", type=int, default=8, help="generation: tokens decoded per round (default 8)")
    group.addoption(
        "--bench-formats", default="bf16,int4", help="generation: of bf16,int4,int8 (group 64; default bf16,int4)"
    )
    group.addoption(
        "--bench-max-rows", type=int, default=None, help="generation: patch's max_rows (default: patch's own)"
    )
    group.addoption(
        "--bench-impls",
        default="stock,mlx_metile",
        help="generation: of stock, mlx_metile, mlx_metile_norms_apart, mlx_metile_norms_fused (default stock,mlx_metile)",
    )


def pytest_benchmark_update_machine_info(config, machine_info):
    from mlx_metile.cli import machine

    facts = machine.facts()
    machine_info["mlx_version"] = facts["mlx"]
    machine_info["mlx_metile_version"] = facts["mlx_metile"]
    machine_info["device"] = facts["device"]
    machine_info["platform"] = facts["platform"]
    machine_info["date"] = facts["date"]
    machine_info["mlx_metile_settings"] = facts["settings"]  # those not at their defaults


def _positive(config, name: str) -> int:
    value = config.getoption(name)
    if value is not None and value < 1:
        raise pytest.UsageError(f"--{name.replace('_', '-')}: expected a positive number, got {value}")
    return value


@pytest.fixture(scope="session")
def bench_size(pytestconfig):
    from mlx_metile.cli.workloads import Size

    return Size(*(_positive(pytestconfig, n) for n in ("bench_k", "bench_n", "bench_pool")))
