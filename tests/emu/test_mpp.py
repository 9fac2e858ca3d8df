"""The MetalPerformancePrimitives subset: the cooperative-tensor layout pinned slot by slot against
the lane map MLX's NAX kernels write directly, matmul2d over tensors and cooperative tensors, the
reductions, and each broken rule reported as a fault."""

import numpy as np
import pytest

from mlx_metile.emu import Kernel, KernelFault

from . import mpp_src as S


def lane_map(lane: int, slot: int) -> tuple[int, int]:
    """(row, col) in a 16 x 16 fragment of slot `slot` (0..7) of `lane`: the map MLX's
    steel/gemm/nax.h BaseNAXFrag::get_coord writes slots by."""
    qid = lane >> 2
    row = ((qid & 4) | ((lane >> 1) & 3)) + (slot >> 2) * 8
    col = ((qid & 2) | (lane & 1)) * 4 + slot % 4
    return row, col


def operand_coord(rows: int, cols: int, lane: int, slot: int) -> tuple[int, int]:
    """A rows x cols cooperative operand: 16 x 16 fragments in row-major order, 8 slots each."""
    frag, j = divmod(slot, 8)
    fr, fc = divmod(frag, cols // 16)
    r, c = lane_map(lane, j)
    return fr * 16 + r, fc * 16 + c


def unpack(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """A destination dumped as out[lane][slot] back to its rows x cols matrix."""
    m = np.full((rows, cols), np.nan)
    for lane in range(32):
        for slot in range(raw.shape[1]):
            r, c = operand_coord(rows, cols, lane, slot)
            m[r, c] = raw[lane, slot]
    return m


@pytest.fixture(scope="module")
def probes():
    return {name: Kernel(S.ONE_HOT, name) for name in ("left_16x32x16", "right_16x32x16", "left_16x16x32")} | {
        name: Kernel(S.ONE_HOT, name) for name in ("left_t_16x16x32", "right_16x16x32")
    }


def test_lane_map_covers_each_fragment_element_once():
    seen = {lane_map(lane, slot) for lane in range(32) for slot in range(8)}
    assert seen == {(r, c) for r in range(16) for c in range(16)}


# (kernel, M, N, K, transpose_left, cooperative operand, its stored rows x cols)
PROBES = [
    ("left_16x32x16", 16, 32, 16, False, "left", (16, 16)),
    ("right_16x32x16", 16, 32, 16, False, "right", (16, 32)),
    ("left_16x16x32", 16, 16, 32, False, "left", (16, 32)),
    ("left_t_16x16x32", 16, 16, 32, True, "left", (32, 16)),
    ("right_16x16x32", 16, 16, 32, False, "right", (32, 16)),
]


@pytest.mark.parametrize("name,m,n,k,tl,which,stored", PROBES, ids=[p[0] for p in PROBES])
def test_one_hot_per_lane_and_slot(probes, name, m, n, k, tl, which, stored):
    """Slot s of lane l alone is 1: the product must have that element where MLX's map puts it.
    The other operand is a device tensor of distinct powers of two, so every (row, col) of the
    one-hot lands on its own destination values."""
    rows, cols = stored
    slots = rows * cols // 32
    other_shape = (k, n) if which == "left" else ((k, m) if tl else (m, k))
    # exact in half and in float sums: small integers
    other = (np.arange(np.prod(other_shape)).reshape(other_shape) % 7 + 1).astype(np.float16)
    dest_slots = m * n // 32
    out = np.full((32 * slots, 32, dest_slots), np.nan, np.float32)
    probes[name].dispatch_threadgroups(32 * slots, 32, [other, out])
    o = other.astype(np.float64)
    for g in range(32 * slots):
        lane, slot = divmod(g, slots)
        r, c = operand_coord(rows, cols, lane, slot)
        one_hot = np.zeros(stored)
        one_hot[r, c] = 1
        if which == "left":
            a = one_hot.T if tl else one_hot
            expected = a @ o
        else:
            a = o.T if tl else o
            expected = a @ one_hot
        # products of exact small integers, accumulated in f32: exact
        np.testing.assert_array_equal(unpack(out[g], m, n), expected, err_msg=f"{name}: lane {lane} slot {slot}")


@pytest.fixture(scope="module")
def simdgroups4():
    return {name: Kernel(S.SIMDGROUPS4, name) for name in ("gemm_nn", "gemm_nt")}


@pytest.mark.parametrize("m,n,k", [(64, 32, 48), (100, 70, 37)])
@pytest.mark.parametrize("name", ["gemm_nn", "gemm_nt"])
def test_simdgroups4_tensor_operands_with_edges(simdgroups4, name, m, n, k, rng):
    a = rng.standard_normal((m, k)).astype(np.float16)
    b = rng.standard_normal((n, k) if name == "gemm_nt" else (k, n)).astype(np.float16)
    c = np.full((m, n), np.nan, np.float32)
    grid = (-(-n // 32), -(-m // 64))
    stats = simdgroups4[name].dispatch_threadgroups(grid, 128, [a, b, c, np.array([m, n, k], np.uint32)])
    bm = b.astype(np.float64).T if name == "gemm_nt" else b.astype(np.float64)
    # half inputs are exact in f32; f32 accumulation over k <= 48 terms of size ~1
    np.testing.assert_allclose(c, a.astype(np.float64) @ bm, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    # one run per threadgroup reads each element of its A and B tiles once; C is written once
    assert stats.bytes_written[2] == c.nbytes
    assert stats.bytes_read[0] == a.nbytes * grid[0] and stats.bytes_read[1] == b.nbytes * grid[1]


def test_cooperative_accumulation_threadgroup_operand_and_reductions(rng):
    k = 48
    a = rng.standard_normal((32, k)).astype(np.float32)
    b = rng.standard_normal((k, 32)).astype(np.float32)
    bf = lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)  # noqa: E731  (truncated to bfloat16)
    a16, b16 = bf(a), bf(b)
    c = np.full((32, 32), np.nan, np.float32)
    rows, cols, row_max = (np.full(32, np.nan, np.float32) for _ in range(3))
    kern = Kernel(S.COOPERATIVE, "coop")
    kern.dispatch_threadgroups(1, 32, [a16, b16, c, rows, cols, row_max, k])
    f = lambda x: (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)  # noqa: E731
    ref = f(a16) @ f(b16)
    # bfloat16 inputs are exact in f32; f32 accumulation over 48 terms
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-5 * np.sqrt(k))
    # f32 sums of 32 f32 values: 32 roundings at most
    np.testing.assert_allclose(rows, c.astype(np.float64).sum(axis=1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(cols, c.astype(np.float64).sum(axis=0), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(row_max, c.max(axis=1))


@pytest.fixture(scope="module")
def faults():
    names = [
        "lane_skips_run",
        "lane_at_barrier",
        "slot_out_of_range",
        "slice_out_of_range",
        "four_simdgroups",
        "per_lane_tensor",
    ]
    return {n: Kernel(S.FAULTS, n) for n in names + ["tensor_past_buffer"]}


def _line(name: str, text: str) -> int:
    """The line of `text` in the FAULTS source after its kernel `name` starts (the source the
    preprocessor saw: line 1 is the first line of S.FAULTS)."""
    lines = S.FAULTS.split("\n")
    start = next(i for i, s in enumerate(lines) if f"kernel void {name}(" in s)
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def test_lane_returning_before_run(faults):
    with pytest.raises(KernelFault, match=r"lane 5 of simdgroup 0 returned without calling it") as e:
        faults["lane_skips_run"].dispatch_threadgroups(1, 32, [np.zeros(32, np.float32)])
    assert e.value.kind == "collective"
    assert e.value.location == f"lane_skips_run.metal:{_line('lane_skips_run', 'op.run(a, b, c)')}"


def test_lane_waiting_elsewhere(faults):
    with pytest.raises(KernelFault, match=r"matmul2d::run: thread \d+ waits for threads of its execution scope") as e:
        faults["lane_at_barrier"].dispatch_threadgroups(1, 32, [np.zeros(32, np.float32)])
    assert e.value.kind == "collective"


def test_slot_past_capacity(faults):
    with pytest.raises(KernelFault, match=r"slot 8 is out of range: its capacity is 8") as e:
        faults["slot_out_of_range"].dispatch_threadgroups(1, 32, [np.zeros(32, np.float32)])
    assert e.value.kind == "out_of_bounds"
    assert e.value.location == f"slot_out_of_range.metal:{_line('slot_out_of_range', 'a[i] = 1.0h')}"


def test_slice_past_extent(faults):
    out = np.zeros((16, 16), np.float32)
    faults["slice_out_of_range"].dispatch_threadgroups(1, 1, [out, 0])
    assert out[0, 0] == 1
    with pytest.raises(KernelFault, match=r"tensor::slice: \[4, 20\) of dimension 1 is outside its extent 16") as e:
        faults["slice_out_of_range"].dispatch_threadgroups(1, 1, [out, 4])
    assert e.value.kind == "out_of_bounds"
    assert e.value.location == f"slice_out_of_range.metal:{_line('slice_out_of_range', 'auto s = t.slice')}"


@pytest.mark.parametrize("threads", [64, 160])
def test_simdgroup_count_other_than_scope(faults, threads):
    a = np.ones(64 * 16, np.float16)
    with pytest.raises(KernelFault, match=rf"execution_simdgroups<4> but the threadgroup has {threads} threads") as e:
        faults["four_simdgroups"].dispatch_threadgroups(1, threads, [a, np.zeros(64 * 32, np.float32)])
    assert e.value.kind == "collective"


def test_simdgroups4_runs_with_four(faults):
    a = np.ones(64 * 16, np.float16)
    c = np.zeros((64, 32), np.float32)
    faults["four_simdgroups"].dispatch_threadgroups(1, 128, [a, c])
    np.testing.assert_array_equal(c, np.full((64, 32), 16.0))  # sums of 16 ones, exact


def test_partial_simdgroup(faults):
    with pytest.raises(KernelFault, match=r"whole SIMD group of 32 threads; simdgroup 0 of this threadgroup has 20"):
        faults["lane_skips_run"].dispatch_threadgroups(1, 20, [np.zeros(32, np.float32)])


def test_tensor_operand_differing_between_lanes(faults):
    with pytest.raises(KernelFault, match=r"left operand differs between thread 0 and thread 7") as e:
        faults["per_lane_tensor"].dispatch_threadgroups(1, 32, [np.ones(512, np.float16), np.zeros(256, np.float32)])
    assert e.value.kind == "collective"


def test_tensor_operand_past_its_buffer(faults):
    a = np.ones(16 * 15, np.float16)  # one row short of the 16 x 16 the tensor claims
    with pytest.raises(KernelFault, match=r"in matmul2d::run: out-of-bounds device access") as e:
        faults["tensor_past_buffer"].dispatch_threadgroups(1, 32, [a, np.zeros(256, np.float32)])
    assert e.value.kind == "out_of_bounds"
    assert e.value.location == f"tensor_past_buffer.metal:{_line('tensor_past_buffer', 'op.run(tA, tA, tC)')}"
