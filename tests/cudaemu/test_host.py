"""The CUDA-on-CPU harness itself (host.py, cuda_emu.h) on small hand-written kernels: barriers
with threads that returned, warp shuffles, blocks' indices, and the failures it names."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import numpy as np
import pytest

from mlx_metile.codegen.ast import KernelParam

from . import host


def hand_written(body: str, threads: int, params: tuple[KernelParam, ...]):
    """An artifact-like kernel `probe(...)` of `params` with `body`, for host.launch."""
    args = ", ".join(
        f"int {p.name}" if p.kind == "scalar" else f"{'' if p.output else 'const '}unsigned int* {p.name}"
        for p in params
    )
    source = f"#include <cuda_fp16.h>\n__global__ void probe({args}) {{\n{body}\n}}\n"
    return SimpleNamespace(
        source=source,
        entry="probe",
        params=params,
        dynamic_shared=0,
        key=hashlib.sha256(source.encode()).hexdigest()[:24],
        threads_per_group=(threads, 1, 1),
    )


OUT = KernelParam("out", "buffer", "u32", output=True)
N = KernelParam("n", "scalar", "i32")


def test_threads_that_return_leave_the_barriers_of_the_rest():
    """Threads past `n` return at once; the rest meet at __syncthreads and __syncwarp (their warps
    partly returned), exchange values through shared memory and warp shuffles, in every block."""
    body = """
  __shared__ unsigned seen[128];
  const unsigned t = threadIdx.x;
  if ((int)t >= n) return;
  seen[t] = t * 3u + blockIdx.x;
  __syncthreads();
  unsigned v = seen[(t + 1) % n];
  __syncwarp();
  if (t < 32) v += __shfl_xor_sync(0xFFFFFFFFu, t, 1);  // (warp 0 is whole: n > 32)
  out[blockIdx.x * 128 + t] = v;"""
    art = hand_written(body, 128, (OUT, N))
    for n in (33, 70, 128):
        out = np.zeros(3 * 128, np.uint32)
        host.launch(art, [out], {"n": n}, (3, 1))
        b, t = np.divmod(np.arange(3 * 128), 128)
        want = ((t + 1) % n) * 3 + b + np.where(t < 32, t ^ 1, 0)
        assert np.array_equal(out, np.where(t < n, want, 0)), n


def test_threads_waiting_at_different_barriers_are_a_deadlock_by_name():
    """Half a warp at __syncthreads, the other half at __syncwarp: neither barrier can open; the
    launch fails with a message (a GPU would hang) instead of running on or hanging."""
    body = """
  if (threadIdx.x < 16) __syncthreads(); else __syncwarp();
  out[threadIdx.x] = 1u;"""
    art = hand_written(body, 64, (OUT,))
    with pytest.raises(host.CudaEmulationError, match="deadlock"):
        host.launch(art, [np.zeros(64, np.uint32)], {}, (1, 1))


def test_a_block_size_the_emulator_does_not_take_is_refused():
    art = hand_written("out[threadIdx.x] = 1u;", 48, (OUT,))
    with pytest.raises(host.CudaEmulationError, match="multiple of 32"):
        host.launch(art, [np.zeros(48, np.uint32)], {}, (1, 1))


def test_unknown_inline_ptx_is_refused_by_name():
    """A PTX statement the emulator has no C++ for stops the translation (it never runs as
    something else), and so does text that is not a generated kernel."""
    source = '#include <cuda_fp16.h>\n__device__ void f(unsigned d) { asm("brev.b32 %0, %0;" : "+r"(d)); }\n'
    with pytest.raises(host.CudaEmulationError, match="brev.b32"):
        host.host_source(source)
    with pytest.raises(host.CudaEmulationError, match="not a generated CUDA kernel"):
        host.host_source("kernel void f() {}")
