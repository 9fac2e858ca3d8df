"""The `bulkw` rewrite of a generated staged kernel, for the A/B harness only: each warp's
stage of weights comes by bulk copies (cp.async.bulk, Hopper's copy engine without a tensor
map) - lane r copies ring row r's whole run of the stage (its column's G groups) in one
instruction, completing on the warp's mbarrier of the slot - instead of 16-byte cp.async
pieces. Scales and biases keep their cp.async copies; the ring's layout, the K split and the
math are unchanged, so the outputs are the kernel's bit for bit.

Why: the copy-only probe (ring_patterns.cu -DBITS=8) streamed the 8-bit group-64 weights of
4096 -> 14336 in 19.4 us with per-warp rings of 4-group stages fed so, against 23.2 us for the
generated kernel's 2-group cp.async ring (its whole kernel: 23.8 us;
bench/results/h200-kernel-ab-2026-11-30-stage-tables.json).

Needs: one accumulator (ring rows = the block's columns, at most 32), padded rows (a bulk copy
cannot swizzle: MLX_METILE_CUDA_MMA_BANKPAD=1 or =0), sm_90, and bulk_copy.cuh included before
the kernel (the harness does that when a variant asks for this rewrite).
"""

from __future__ import annotations

import re

DEST = re.compile(r"const int cwd0 = \(0 \+ lane / (\d+)\) \* (\d+) \+ \(lane % \d+\) \* 16;")
SWIZZLED = re.compile(r"const int cwd0 = [^;]*\^")
COLUMN = re.compile(r"pid0 \* (\d+) \+ 0 \+ lane / \d+\) - \(0\)\) \* \(size_t\)K \* (\d+) / 8")
RING = re.compile(r"(unsigned char\* const ring = metile_ring \+ warp \* \d+;\n)")
STAGES = re.compile(r"int rd = 0, wr = (\d+);")
ISSUE = re.compile(
    r"(unsigned char\* const dst = ring \+ \((\w+)\) \* \d+;\n(\s*)const size_t wo = [^;]*;\n)"
    r"(?:\s*metile_cp16\(dst \+ cwd\d+, cw\d+ \+ wo, cwok\d+\);\n)+"
)
LOOP_WAIT = re.compile(r"(for \(int st = 0; st < nst; \+\+st\) \{.*?metile_cp_wait<\d+>\(\);\n)(\s*)", re.S)


def bulk_weights(source: str, fence: bool = True) -> str:
    """The rewrite; fence=False leaves out the proxy fence before each refill (the slot's
    earlier shared loads have landed in registers by then - the MMAs consumed them - so the
    fence orders nothing the data dependence does not; a probe of what the fence costs)."""
    dest, column, stages = DEST.search(source), COLUMN.search(source), STAGES.search(source)
    if SWIZZLED.search(source) or not (dest and column and stages):
        raise ValueError("bulkw: needs a staged kernel with padded ring rows (MLX_METILE_CUDA_MMA_BANKPAD=1)")
    lanes_per_row, row_bytes = int(dest.group(1)), int(dest.group(2))
    copies = len(re.findall(r"const char\* cw\d+; bool cwok\d+;", source))
    rows, run = copies * 32 // lanes_per_row, lanes_per_row * 16
    block_columns, bits = int(column.group(1)), int(column.group(2))
    slots = int(stages.group(1)) + 1
    if rows != block_columns or rows > 32:
        raise ValueError(f"bulkw: one accumulator of at most 32 ring rows only (rows {rows}, columns {block_columns})")
    setup = (
        f"  __shared__ __align__(8) unsigned long long metile_bars[16][{slots}];  // a warp's slots\n"
        f"  if (lane == 0) {{\n    for (int i = 0; i < {slots}; ++i) mbar_init(&metile_bars[warp][i], 1);\n"
        "    mbar_init_fence();\n  }\n  __syncwarp();\n"
        f"  const int bcol = pid0 * {rows} + lane;  // lane r copies ring row r\n"
        f"  const bool bok = lane < {rows} && bcol < N0;\n"
        f"  const char* const bw = reinterpret_cast<const char*>(w0) + (size_t)(bok ? bcol : 0) * (size_t)K * {bits} / 8;\n"
        f"  const unsigned bbytes = {run}u * (unsigned)max(0, min({rows}, N0 - pid0 * {rows}));\n"
    )
    source = RING.sub(lambda m: m.group(1) + setup, source, count=1)

    def issue(m: re.Match) -> str:
        slot, pad = m.group(2), m.group(3)
        bar = f"&metile_bars[warp][{slot}]"
        fenced = f'{pad}asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // after the slot\'s reads\n'
        return (
            m.group(1)
            + (fenced if fence else "")
            + f"{pad}if (lane == 0) mbar_expect({bar}, bbytes);\n{pad}__syncwarp();\n"
            + f"{pad}if (bok) bulk(dst + lane * {row_bytes}, bw + wo, {run}, {bar});\n"
        )

    source, n = ISSUE.subn(issue, source)
    if not n:
        raise ValueError("bulkw: no stage copies found")
    wait = f"\\1\\2mbar_wait(&metile_bars[warp][rd], (st / {slots}) & 1);\n\\2"
    source, n = LOOP_WAIT.subn(wait, source, count=1)
    if not n:
        raise ValueError("bulkw: no wait in the stage loop")
    return source


def bulk_weights_unfenced(source: str) -> str:
    return bulk_weights(source, fence=False)
