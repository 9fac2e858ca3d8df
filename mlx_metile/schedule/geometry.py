"""Sizes the tensor-core schedules are built from: chunks, ring rows and slots. Shared by the
rules that size a Schedule and the lowerings that lay out its memory, so both count alike."""

from __future__ import annotations

from ..spec import ProjectionSpec

TILE = 16  # output columns per m16 tile of mma.sync m16n8k16
FOLDED_K = 32  # k per chunk of nvfp4 weights: two groups of 16, each lane's 8 k in one of them


def chunk_k(spec: ProjectionSpec, wide: bool = False) -> int:
    """k per chunk: the quantization group (one scale per column), two groups when `wide`, 32 for
    dense weights, and 32 for nvfp4 (two groups of 16, whose scales the lanes fold into their
    A operands: a lane's quarter of the chunk lies in one group)."""
    w = spec.weights[0]
    if not w.quantized:
        return 32
    if w.mode == "nvfp4":
        return FOLDED_K
    return 2 * w.group_size if wide else w.group_size


def chunk_bytes(spec: ProjectionSpec, wide: bool = False) -> int:
    """Bytes of one column per chunk (chunk_k of a quantized weight, or of a 2-byte dense one)."""
    w = spec.weights[0]
    return chunk_k(spec, wide) * (w.bits if w.quantized else 16) // 8


def scale_bytes_of(spec: ProjectionSpec) -> int:
    """Bytes of one column's scales (and again of its biases) per chunk; dense: none."""
    w = spec.weights[0]
    if not w.quantized:
        return 0
    if not w.affine:  # microscaled: a uint8 scale per group (nvfp4: two groups a chunk)
        return chunk_k(spec) // w.group_size
    return 4 if w.dtype == "f32" else 2


def lane_load_bytes(spec: ProjectionSpec, sector: bool, wide: bool = False) -> int:
    """Bytes a lane reads from a ring row in one shared load of its weight words: 16 dense; else
    its words of a chunk, at most 4, or one x slice's with the sector layout."""
    w = spec.weights[0]
    if not w.quantized:
        return 16
    if sector:
        return w.bits // 4 * 4
    lane_bits = chunk_k(spec, wide) // 4 * w.bits
    if w.affine and w.bits not in (4, 8):  # 2, 3, 5, 6 bits: 1, 2 or 4 words dividing the lane's; a stream's one by one
        words = lane_bits // 32 if lane_bits % 32 == 0 else 1
        return 4 * max(n for n in (1, 2, 4) if words % n == 0)
    return min(lane_bits // 32, 4) * 4


def copy_bytes(spec: ProjectionSpec, row_bytes: int) -> int:
    """Bytes of one copy into a ring row: 16, or 8 for affine 2, 3, 5 and 6-bit stages of an odd
    number of 16 bytes a column (3 and 5 bits at group 32: 48 and 80)."""
    w = spec.weights[0]
    lowbit = w.affine and w.bits not in (4, 8)
    return 8 if lowbit and row_bytes % 32 else 16


def copy_run(row_bytes: int, piece: int = 16) -> int:
    """Pieces (copies of `piece` bytes) of a column's stage that one copy's lanes take side by
    side: all of them, or where they are 3 or 5 times a power of two (affine 3, 5 and 6 bits)
    the power of two, the stage copied in 3 or 5 such runs."""
    pieces = row_bytes // piece
    return pieces & -pieces


def ring_rows(spec: ProjectionSpec, tiles: int = 1) -> int:
    """Rows of a stage: 16 columns per tile and accumulator, ordered (accumulator, tile, column)."""
    return TILE * tiles * (2 if spec.epilogue == "swiglu" else 1)


def slot_bytes(spec: ProjectionSpec, tiles: int, groups: int, row_pad: int) -> int:
    """One stage of one warp: the weight rows (padded), then scales, then biases (none microscaled)."""
    w = spec.weights[0]
    params = 1 if w.quantized and not w.affine else 2
    return ring_rows(spec, tiles) * (groups * chunk_bytes(spec) + row_pad + params * groups * scale_bytes_of(spec))
