"""How the scripts time MLX work: medians of whole evaluations (with the host's part), pairs
timed alternately, and the copy roofline of the machine."""

from __future__ import annotations

import statistics
import time

import mlx.core as mx


def timed(fn, repeat: int = 7) -> float:
    return timed_with_host(fn, repeat)[0]


def timed_with_host(fn, repeat: int = 7) -> tuple[float, float]:
    """(median time of a whole evaluation, median time until `mx.async_eval` returned - the
    host's part: building and submitting the work, which the GPU runs behind, plus any wait MLX
    makes for the GPU while too many command buffers are in flight). Where the two are close,
    the host is the limit only if the GPU's own time is known to be shorter."""
    mx.eval(fn())
    mx.synchronize()
    total, host = [], []
    for _ in range(repeat):
        mx.synchronize()
        t0 = time.perf_counter()
        mx.async_eval(fn())
        t1 = time.perf_counter()
        mx.synchronize()
        total.append(time.perf_counter() - t0)
        host.append(t1 - t0)
    return statistics.median(total), statistics.median(host)


def timed_pair(fa, fb, repeat: int = 15) -> tuple[float, float]:
    """Median times of whole evaluations of fa and of fb, alternating between them, so that both
    see the same drift of the machine (clocks, other work) - for ratios of two ways to do one job.
    Which of the two runs first changes every round: on the H200 one schedule timed always first
    and always second measured 0.96x apart (h200-tune-v2-vs-rules-paired-2026-12-02.json)."""
    for fn in (fa, fb):
        mx.eval(fn())
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(repeat):
        order = ((fa, times[0]), (fb, times[1]))
        for fn, out in order if i % 2 == 0 else order[::-1]:
            mx.synchronize()
            t0 = time.perf_counter()
            mx.eval(fn())
            out.append(time.perf_counter() - t0)
    return statistics.median(times[0]), statistics.median(times[1])


def copy_roofline() -> tuple[float, str]:
    """(bytes read + written per second of a large device copy, how it was taken):
    PyTorch's copy_ between two preallocated 1 GiB buffers where PyTorch has CUDA, else MLX's
    `a + 1` - which also allocates its 1 GiB output each time and measured 2.4-3.1 TB/s on the
    H200 against PyTorch's 4.26."""
    try:
        import torch

        if torch.cuda.is_available():
            src = torch.empty(256 << 20, dtype=torch.float32, device="cuda")
            dst = torch.empty_like(src)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            samples = []
            for _ in range(8):
                start.record()
                dst.copy_(src)
                end.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(end) / 1e3)
            del src, dst
            return 2 * (1 << 30) / statistics.median(samples[1:]), "torch copy_, 1 GiB, CUDA events"
    except ImportError:
        pass
    a = mx.zeros((256 << 20,), dtype=mx.float32)  # 1 GiB
    mx.eval(a)
    t = timed(lambda: [a + 1.0])
    return 2 * a.nbytes / t, "mlx a + 1, 1 GiB"
