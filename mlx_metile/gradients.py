"""Transforms of the kernels: an `mx.custom_function` whose forward is the kernel and whose vjp
and jvp are those of the stock MLX composition of the same projection (`reference.py`, the one
reference of the numerics). The CPU, emulator and Metal paths always go through it; the CUDA
path where MLX_METILE_CUDA_GRADIENTS is on (the wrapper adds host time to every eager call).

The kernel's inputs arrive flat (x, then per weight its arrays and bias, then the residual); the
caller's `reference` rebuilds the composition from them, so gradients flow to x, dense weights,
biases, residual, and quantization scales and biases. Packed uint32 weights get zero cotangents
(they are integers).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mlx.core as mx

FLOATS = (mx.float32, mx.float16, mx.bfloat16)


def differentiable(
    forward: Callable[[list[mx.array]], list[mx.array]],
    reference: Callable[[list[mx.array]], list[mx.array]],
    inputs: Sequence[mx.array],
    batched: Callable[[mx.array, mx.array | None], list[mx.array]] | None = None,
    residual: bool = False,
) -> list[mx.array]:
    """forward(inputs), differentiated (reverse and forward mode) as reference(inputs) is.

    Under mx.vmap: where only x (inputs[0]) and the residual (the last input, if `residual`) are
    mapped, `batched(x, residual)` computes the call with the mapped axis as a leading one of x
    (the kernel again, on more rows); where a weight is mapped, the reference, vmapped."""
    floats = [i for i, a in enumerate(inputs) if a.dtype in FLOATS]

    def on_floats(primals: Sequence[mx.array], which: Sequence[int] = floats):
        def fn(*sub):
            args = list(primals)
            for i, v in zip(which, sub):
                args[i] = v
            return reference(args)

        return fn, [primals[i] for i in which]

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

    @op.jvp
    def op_jvp(primals, tangents):
        # along the inputs that have a tangent only (MLX's quantized product has no jvp with
        # respect to scales and biases, so those are not differentiated unless asked)
        which = [i for i in floats if tangents[i] is not None]
        if not which:
            return [mx.zeros_like(o) for o in forward(list(primals))]
        fn, sub = on_floats(primals, which)
        _, out = mx.jvp(fn, sub, [tangents[i] for i in which])
        return out

    @op.vmap
    def op_vmap(arrays, axes):
        axes = list(axes) if isinstance(axes, (list, tuple)) else [axes]
        last = len(arrays) - 1 if residual else None
        foldable = all(a is None for i, a in enumerate(axes) if i not in (0, last))
        if batched is None or not foldable:
            fn = mx.vmap(lambda *a: reference(list(a)), in_axes=tuple(axes))
            outs = fn(*arrays)
            outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
            return outs, [0] * len(outs)
        size = next(a.shape[ax] for a, ax in zip(arrays, axes) if ax is not None)

        def leading(i: int) -> mx.array:
            a = arrays[i]
            if axes[i] is None:
                return mx.broadcast_to(a[None], (size, *a.shape))
            return mx.moveaxis(a, axes[i], 0)

        outs = batched(leading(0), leading(last) if residual else None)
        return outs, [0] * len(outs)

    outs = op(*inputs)
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]
