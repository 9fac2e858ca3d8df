"""The H200 benchmark's cases: model shapes, weight formats, weight pools larger than the L2, and
one product of each side (mlx-metile's op, or the stock MLX composition it replaces)."""

from __future__ import annotations

import mlx.core as mx

import mlx_metile as mt

SHAPES = {
    "llama8b_qkvo_4096x4096": (4096, 4096),
    "llama8b_gateup_4096x14336": (4096, 14336),
    "llama8b_down_14336x4096": (14336, 4096),
    "qwen1.5b_gateup_1536x8960": (1536, 8960),
    "qwen1.5b_down_8960x1536": (8960, 1536),
    # the layout rules' shapes: one-tile dense grids of 2-4 blocks per SM; 4/8-bit products over
    # 2048 <= K < 4096 with wide outputs
    "llama3b_gateup_3072x8192": (3072, 8192),
    "qwen7b_gateup_3584x18944": (3584, 18944),
}
# Fused products, timed like the single ones: one mlx-metile kernel per product against stock
# MLX's separate products (then SwiGLU, as mlx-lm computes it) in the same compiled loop.
# K, the weights' output widths, the epilogue; N below is their sum.
FUSED_SHAPES = {
    "llama8b_gateup_swiglu_fused_4096x2x14336": (4096, (14336, 14336), "swiglu"),
    "llama8b_qkv_fused_4096x6144": (4096, (4096, 1024, 1024), None),
    "llama3b_gateup_swiglu_fused_3072x2x8192": (3072, (8192, 8192), "swiglu"),  # x shared at 32 rows
}
ROWS = [1, 2, 3, 4, 8, 16, 32]
POOL_BYTES = 480 << 20  # 8x the H200's 60 MB L2
PRODUCTS_PER_EVAL = 64  # products per mx.eval by default (a decode step evaluates a few hundred)

# benchmark formats: (bits, group size) of MLX's affine quantization; bf16 dense
FORMATS = {
    "bf16": (16, 0),
    "int4": (4, 64),
    "int8": (8, 64),
    "int4g32": (4, 32),
    "int4g128": (4, 128),
    "int8g32": (8, 32),
    "int8g128": (8, 128),
    # affine 2, 3, 5 and 6 bits (the tensor cores' direct loads at every group; at group 64 a lane's
    # quarter of a 3 or 5-bit group starts or ends inside a word)
    "int2": (2, 64),
    "int3": (3, 64),
    "int3g128": (3, 128),
    "int5": (5, 64),
    "int5g128": (5, 128),
    "int6": (6, 64),
    # MLX's microscaling modes: uint8 scales, no biases
    "mxfp4": (4, 32),
    "mxfp8": (8, 32),
    "nvfp4": (4, 16),
}
MICROSCALED = ("mxfp4", "mxfp8", "nvfp4")  # benchmark format -> MLX's quantization mode of that name


def mode_of(fmt: str) -> str:
    return fmt if fmt in MICROSCALED else "affine"


def quantized_weight(fmt: str, p: tuple) -> mt.QuantizedWeight:
    """A pool entry of a quantized format as a QuantizedWeight."""
    bits, group = FORMATS[fmt]
    return mt.QuantizedWeight(p[0], p[1], p[2] if len(p) == 3 else None, group, bits, mode_of(fmt))


def make_weight(fmt: str, K: int, N: int, seed: int) -> tuple:
    """(w,) for bf16, else MLX's (packed, scales, biases) in that format ((packed, scales) for
    the microscaling modes)."""
    w = (mx.random.normal((N, K), key=mx.random.key(seed)) * K**-0.5).astype(mx.bfloat16)
    bits, group = FORMATS[fmt]
    if fmt == "bf16":
        return (w,)
    return tuple(mx.quantize(w, group_size=group, bits=bits, mode=mode_of(fmt)))


def make_pool(fmt: str, K: int, N: int, widths: tuple[int, ...] = (), pool_bytes: int = POOL_BYTES):
    """Weights of one product each, enough to fill `pool_bytes`; with `widths` (a fused
    product), each entry is a tuple of one weight per width. Returns (pool, bytes per entry)."""
    one = K * N * FORMATS[fmt][0] / 8
    count = max(4, int(pool_bytes // one) + 1)
    pool = []
    for i in range(count):
        if widths:
            pool.append(tuple(make_weight(fmt, K, n, i * len(widths) + j) for j, n in enumerate(widths)))
        else:
            pool.append(make_weight(fmt, K, N, i))
        mx.eval(pool[-1])
    nbytes = sum(a.nbytes for a in flat(pool[0]))
    return pool, nbytes


def flat(entry: tuple) -> tuple:
    """The arrays of a pool entry (a fused entry holds one tuple per weight)."""
    return tuple(a for part in entry for a in (part if isinstance(part, tuple) else (part,)))


def product(impl: str, fmt: str, x, p):
    """One projection of x by pool entry p: mlx_metile's op or stock MLX's."""
    bits, group = FORMATS[fmt]
    if fmt == "bf16":
        return mt.linear(x, p[0]) if impl == "mlx_metile" else x @ p[0].T
    if impl == "mlx_metile":
        return mt.quantized_linear(x, *p, group_size=group, bits=bits, mode=mode_of(fmt))
    return mx.quantized_matmul(x, *p, transpose=True, group_size=group, bits=bits, mode=mode_of(fmt))


def fused_product(impl: str, fmt: str, x, entry: tuple, epilogue: str | None) -> list:
    """One fused product of x by a pool entry (a weight per output): mlx_metile's one kernel,
    or stock MLX's products and then SwiGLU (silu(gate) * up, as mlx-lm's MLP)."""
    if impl == "mlx_metile":
        ws = [p[0] if fmt == "bf16" else quantized_weight(fmt, p) for p in entry]
        out = mt.fused_linear(x, ws, epilogue=epilogue)
        return out if isinstance(out, list) else [out]
    outs = [product("stock", fmt, x, p) for p in entry]
    if epilogue == "swiglu":
        gate, up = outs
        return [gate * mx.sigmoid(gate) * up]
    return outs


def product_step(impl: str, fmt: str, fused: str | None | bool = False):
    """(x, pool entry) -> the list of one product's outputs, `impl`'s way; `fused`: False for a
    single product, else the fused product's epilogue."""
    if fused is False:
        return lambda x, entry: [product(impl, fmt, x, entry)]
    return lambda x, entry: fused_product(impl, fmt, x, entry, fused)


def products(fmt: str, pool: list, fused: str | None | bool = False, count: int = PRODUCTS_PER_EVAL):
    """(mlx_metile, stock) functions of x computing `count` products, each with the pool's next
    weight; `fused`: False for single products, else the fused products' epilogue."""

    def over_pool(impl):
        one = product_step(impl, fmt, fused)

        # fused products take a list of one x per product: with a single x, stock MLX's
        # products followed by SwiGLU measured 2 x 117 MB of bf16 weights in 8 us - not all
        # computed, presumably mx.compile merging the repeats (same x, same pool entry) - so
        # each product gets its own x
        def x_of(x, i):
            return x[i] if fused is not False else x

        return lambda x: [y for i in range(count) for y in one(x_of(x, i), pool[i % len(pool)])]

    return over_pool("mlx_metile"), over_pool("stock")


def chain(step, pool: list, count: int = PRODUCTS_PER_EVAL):
    """x -> the outputs of `count` products step(x, entry) (a list of outputs each), each x made
    from the previous product's output (x + 0 * its first element: one small elementwise kernel,
    the same for every side), so that the products run one after another as a model's
    projections do. Without it the products of an evaluation are independent and MLX lets their
    kernels run side by side: a grid that leaves SMs idle (stock MLX's 32-row kernels: 112 blocks
    of 128 columns on 132 SMs) is then filled by the next products' blocks, which a model's
    dependent chain does not allow."""

    def run(x):
        outs = []
        for i in range(count):
            ys = step(x, pool[i % len(pool)])
            outs += ys
            x = x + 0 * ys[0].reshape(-1)[:1].astype(x.dtype)
        return outs

    return run
