"""PyTorch beside mlx-metile on the GPU machine: cuBLAS's F.linear (bf16) and PyTorch's int4
kernel, each over a weight pool of the same size, replayed from a CUDA graph (so Python launch
overhead is not timed, as mx.compile removes MLX's)."""

from __future__ import annotations

import statistics

from .cases import POOL_BYTES, PRODUCTS_PER_EVAL


def graph_timing(torch, pool: list, product, rows: int, K: int, nbytes: int, timing: str, count: int) -> dict:
    """`count` products over a pool of PyTorch weights captured once in a CUDA graph, replays
    timed with CUDA events; `nbytes` is one weight's bytes."""
    size = len(pool)
    x = torch.randn(rows, K, device="cuda", dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up outside the capture, as CUDA graphs need
        for i in range(size):
            product(x, pool[i])
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [product(x, pool[i % size]) for i in range(count)]
    samples = []
    for rep in range(8):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        torch.cuda.synchronize()
        if rep:  # the first is warm-up
            samples.append(start.elapsed_time(stop) / 1e3 / count)
    del outs, graph
    t = statistics.median(samples)
    return {"t": t, "gbs": nbytes / t / 1e9, "timing": timing}


_pools: dict = {}


def _pool(key: tuple, make) -> list:
    """One PyTorch weight pool kept across row counts (one at a time: each is ~480 MB)."""
    if key not in _pools:
        _pools.clear()
        _pools[key] = make()
    return _pools[key]


def linear(torch, K: int, N: int, rows: int, nbytes: int, count: int = PRODUCTS_PER_EVAL) -> dict:
    """PyTorch F.linear (cuBLAS) on bf16 weights from a pool of the same size."""
    size = max(4, int(POOL_BYTES // nbytes) + 1)
    pool = _pool(
        ("bf16", K, N),
        lambda: [torch.randn(N, K, device="cuda", dtype=torch.bfloat16) * K**-0.5 for _ in range(size)],
    )
    return graph_timing(torch, pool, torch.nn.functional.linear, rows, K, nbytes, "F.linear, CUDA graph replay", count)


def int4(torch, K: int, N: int, rows: int, count: int = PRODUCTS_PER_EVAL) -> dict:
    """PyTorch's int4 kernel (`_weight_int4pack_mm`, group 64, bf16 activations) on random
    4-bit weights; bytes are the packed weights plus its bf16 scales and zeros."""
    group = 64
    nbytes = N * K // 2 + (K // group) * N * 2 * 2
    size = max(4, int(POOL_BYTES // nbytes) + 1)

    def make() -> list:
        pool = []
        for _ in range(size):
            q = torch.randint(0, 16, (N, K), dtype=torch.int32, device="cuda")
            packed = ((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8)  # [N, K/2], as the op takes it
            scales_zeros = torch.randn(K // group, N, 2, device="cuda", dtype=torch.bfloat16) * 0.01
            pool.append((torch._convert_weight_to_int4pack(packed, 8), scales_zeros))
            del q, packed
        return pool

    pool = _pool(("int4", K, N), make)

    def product(x, p):
        return torch._weight_int4pack_mm(x, p[0], group, p[1])

    return graph_timing(torch, pool, product, rows, K, nbytes, "_weight_int4pack_mm, CUDA graph replay", count)


def cuda_torch():
    """PyTorch where it is installed and has CUDA, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None
