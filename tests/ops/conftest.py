"""Fixtures of the op tests."""

from __future__ import annotations

import mlx.core as mx
import pytest

from mlx_metile import dispatch
from mlx_metile.backends import cuda_compile


@pytest.fixture
def fake_cuda(monkeypatch):
    """ops on the CUDA path with MLX's precompiled-kernel op replaced by a recorder (no GPU
    here); yields the keyword arguments of each launch."""
    calls = []

    def precompiled_cuda_kernel(**kw):
        calls.append(kw)
        # stands in for the kernel (zeros of the requested shapes): only the plumbing is under test
        return [mx.zeros(shape, dtype) for shape, dtype in zip(kw["output_shapes"], kw["output_dtypes"])]

    monkeypatch.setattr(dispatch, "backend_of", lambda stream: "cuda")
    monkeypatch.setattr(mx.fast, "precompiled_cuda_kernel", precompiled_cuda_kernel)
    monkeypatch.setattr(cuda_compile, "ptx", lambda artifact, arch=None: b"PTX:" + artifact.entry.encode())
    dispatch.clear_kernel_caches()
    yield calls
    dispatch.clear_kernel_caches()
