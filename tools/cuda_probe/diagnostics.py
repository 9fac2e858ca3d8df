"""Diagnostic rewrites of a generated staged kernel's source, for the A/B harness only:
each removes one part of the work, so that timing the rest shows what that part costs.
Their outputs are wrong by design (the harness reports how wrong in rel_diff); nothing
outside tools/cuda_probe uses them.

    nox     x is never loaded: every x value a constant (the weights stream, the math runs)
    nomath  each stage's copies are issued and waited for, nothing else: the ring alone
    noscales  the scales' and biases' copies are never issued (their ring bytes stay as they
            were): what those small copies cost
    noxsum  the MMAs that sum x over each group (A = ones, for the biases' term) are left out:
            what those tensor-core instructions cost
    xl1     x loaded as before (the same instructions and registers), but every chunk's address
            folded into the first 8 chunks of its rows: x comes from L1, not L2 - what x's
            traffic from L2 (every block reloads all of x) costs, apart from its loads

    khalf   twice the blocks, each taking half of its columns' K (the two halves of a column
            block are blocks 2c and 2c + 1; the harness doubles the grid): the time of a split of K
            across blocks without the fix-up that would add the halves (both halves store)

Two rewrites keep the results (probes of a layout or a copy mechanism, not diagnostics):

    rowsfirst  the grid's x enumerates row blocks and y column blocks (the harness swaps the
            launch's dimensions), so that the blocks of one weight tile run back to back and
            its second row block finds the weights in L2 (with BUCKET=b below the row count)
    bulkw   each warp's stage of weights by bulk copies, a ring row's run per lane
            (bulk_rewrite.py; padded rings only); bulkwnf the same without the proxy fence
            before each refill
"""

from __future__ import annotations

import re

from .bulk_rewrite import bulk_weights, bulk_weights_unfenced

X_LOAD = re.compile(r"\(xok\d+\) \? \*reinterpret_cast<const uint4\*>\([^;]*?\) : make_uint4\(0u, 0u, 0u, 0u\)")
SLOT = re.compile(r"const unsigned char\* const slot = ring \+ rd \* \d+;")
RING = re.compile(r"int rd = 0, wr = (\d+);")


def replace_all(name: str, pattern: re.Pattern, by: str, source: str) -> str:
    """Every match of `pattern` replaced by `by`; a kernel without one is refused by name."""
    out, n = pattern.subn(by, source)
    if not n:
        raise ValueError(f"{name}: nothing to remove in this kernel ({pattern.pattern[:40]}...)")
    return out


def no_x(source: str) -> str:
    return replace_all("nox", X_LOAD, "make_uint4(0x3F803F80u, 0x3F803F80u, 0x3F803F80u, 0x3F803F80u)", source)


X_CHUNK = re.compile(r"(reinterpret_cast<const uint4\*>\(x \+ xrow\d+ \* K \+ )\((ch0 \+ \d+)\) \* (\d+)")


def x_in_l1(source: str) -> str:
    return replace_all("xl1", X_CHUNK, r"\1((\2) & 7) * \3", source)


def no_math(source: str) -> str:
    ring = RING.search(source)
    if ring is None or not SLOT.search(source):
        raise ValueError("nomath: not a staged kernel (no ring)")
    stages = int(ring.group(1)) + 1
    skip = (
        f"{{ rd = rd + 1 == {stages} ? 0 : rd + 1; wr = wr + 1 == {stages} ? 0 : wr + 1; continue; }}\n"
        "const unsigned char* const slot = ring;"
    )
    return SLOT.sub(skip, source, count=1)


SCALE_COPY = re.compile(r"metile_cp_small<\d+>\([^;]*\);")


def no_scales(source: str) -> str:
    return replace_all("noscales", SCALE_COPY, "(void)0;", source)


PIDS = re.compile(r"const int pid0 = \(int\)blockIdx\.x;\n(\s*)const int pid1 = \(int\)blockIdx\.y;")


def rows_first(source: str) -> str:
    return replace_all(
        "rowsfirst", PIDS, "const int pid0 = (int)blockIdx.y;\n\\1const int pid1 = (int)blockIdx.x;", source
    )


# an MMA whose A operand is four registers of ones (lower_mma.ONES, bf16 or f16)
X_SUM = re.compile(r"metile_mma_(?:bf16|f16)\(cx\d+, (?:(?:0x3F803F80u|0x3C003C00u), ){4}[^;]*;")


def no_x_sum(source: str) -> str:
    return replace_all("noxsum", X_SUM, "(void)0;", source)


PER_WARP = re.compile(r"const int per_warp = ([^;]*);\n(\s*)const int c_begin = warp \* per_warp;")


def k_half(source: str) -> str:
    source = replace_all(
        "khalf", PIDS, "const int pid0 = (int)blockIdx.x >> 1;\n\\1const int pid1 = (int)blockIdx.y;", source
    )
    source = source.replace(
        "const int pid0 = (int)blockIdx.x >> 1;", "const int pid0 = (int)blockIdx.x >> 1, khalf = blockIdx.x & 1;"
    )
    return replace_all(
        "khalf",
        PER_WARP,
        "const int per_warp = (\\1) / 2;\n\\2const int c_begin = (khalf * (int)(blockDim.x >> 5) + warp) * per_warp;",
        source,
    )


HACKS = {
    "nox": no_x,
    "noxsum": no_x_sum,
    "xl1": x_in_l1,
    "nomath": no_math,
    "noscales": no_scales,
    "rowsfirst": rows_first,
    "khalf": k_half,
    "bulkw": bulk_weights,
    "bulkwnf": bulk_weights_unfenced,
}


def apply(names: str, source: str) -> str:
    for name in filter(None, names.split(",")):
        if name not in HACKS:
            raise ValueError(f"unknown diagnostic {name!r}; known: {sorted(HACKS)}")
        source = HACKS[name](source)
    return source
