"""Gradients for kernels launched without the C++ primitive (the CUDA path):
an `mx.custom_function` whose forward is the kernel and whose vjp is that of
the stock MLX composition of the same projection - the rule the C++ primitive
(`TileKernel::vjp`) follows on the CPU and Metal paths.

Forward mode (`mx.jvp`) is not provided: MLX 0.32.4 differentiates a custom
function's forward graph in jvp, and its precompiled-CUDA-kernel op has no jvp.

The kernel's inputs arrive flat (x, then per weight its arrays and bias, then
the residual); the caller's `reference` rebuilds the composition from them
(`ops._reference_of_flat`), so gradients flow to x, dense weights, biases,
residual, and quantization scales and biases. Packed uint32 weights get zero
cotangents (they are integers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mlx.core as mx

FLOATS = (mx.float32, mx.float16, mx.bfloat16)


def differentiable(
    forward: Callable[[list[mx.array]], list[mx.array]],
    reference: Callable[[list[mx.array]], list[mx.array]],
    inputs: Sequence[mx.array],
) -> list[mx.array]:
    """forward(inputs), differentiated (reverse mode) as reference(inputs) is."""
    floats = [i for i, a in enumerate(inputs) if a.dtype in FLOATS]

    def on_floats(primals: Sequence[mx.array]):
        def fn(*sub):
            args = list(primals)
            for i, v in zip(floats, sub):
                args[i] = v
            return reference(args)

        return fn, [primals[i] for i in floats]

    @mx.custom_function
    def op(*arrays):
        return forward(list(arrays))

    @op.vjp
    def op_vjp(primals, cotangents, outputs):
        fn, sub = on_floats(primals)
        cots = list(cotangents) if isinstance(cotangents, (list, tuple)) else [cotangents]
        _, grads = mx.vjp(fn, sub, cots)
        full = [mx.zeros_like(p) for p in primals]
        for i, g in zip(floats, grads):
            full[i] = g
        return tuple(full)

    outs = op(*inputs)
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]
