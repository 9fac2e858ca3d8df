"""The accuracy gate's tolerances, per output dtype, in one place.

An output element may differ from the float64 reference (x and the weights as given, quantized
weights dequantized exactly, the epilogue in float64) by

    ROUNDING[dtype] * |reference|                    the output's rounding (unit roundoff, doubled
                                                     for the f32 bias / epilogue / residual steps)
  + ACCUMULATION * K * (|x| @ |W|^T), through the epilogue's slope
                                                     f32 accumulation over K (the worst-case bound
                                                     of a sum of K terms in any order)
  + INTERMEDIATE * (|x| @ |W|^T + |bias| + |residual|)
                                                     the f32 roundings of the steps after the sum
  + FLOOR[dtype]                                     the dtype's smallest normal (flushed subnormals)
  + OPERAND[x dtype] * (|x| @ |W|^T), through the epilogue's slope - only for a candidate that
    rounds each dequantized weight to x's dtype before its products (`operand_rounding`: NAX's
    matmul2d operands are bf16 / f16, as MLX's own quantized kernels round them; a dense weight
    of x's dtype is exact and adds nothing)

Stock MLX's composition is not held to this (its bf16 products on the CPU are several per cent off
float64); it is the native fallback, and the gate compares candidates with it only for non-finite
values (see gate.py).
"""

from __future__ import annotations

import mlx.core as mx

ROUNDING = {mx.float32: 2.0**-23, mx.float16: 2.0**-10, mx.bfloat16: 2.0**-7}
FLOOR = {mx.float32: 2.0**-126, mx.float16: 2.0**-14, mx.bfloat16: 2.0**-126}
OPERAND = {mx.float32: 0.0, mx.float16: 2.0**-11, mx.bfloat16: 2.0**-8}  # unit roundoff of an operand
ACCUMULATION = 2.0**-24  # f32 unit roundoff, per term of the sum
INTERMEDIATE = 2.0**-20  # a few f32 roundings of values up to |x| @ |W|^T
# The epilogues' largest slopes |f'(z)|: SiLU's is 1.0998, GELU's (exact and tanh) 1.1289.
SLOPE = {None: 1.0, "silu": 1.1, "gelu": 1.13, "gelu_approx": 1.13}

TOLERANCE_VERSION = 2  # part of a decision's key: changing a number above invalidates decisions
