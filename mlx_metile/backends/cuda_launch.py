"""CUDA launch plans: everything a CUDA call repeats for arrays of the same shapes and dtypes
(the casts of x and the residual, the launch's arguments but its inputs), built once per call
shape and replayed. A plan launches through the extension's own primitive (src/cuda/cuda_kernel.h:
the module loaded once, outputs from its pool), through MLX's precompiled-kernel op from C++
(`_ext.CudaLaunch`), or through that op from Python (`mx.fast.precompiled_cuda_kernel`)."""

from __future__ import annotations

import mlx.core as mx

from ..settings import current
from . import cuda_compile
from .extension import _ext
from .inputs import binding_template, norm_inputs, weight_inputs

_STOCK_PRECOMPILED = getattr(mx.fast, "precompiled_cuda_kernel", None)


def native_launch() -> bool:
    """Whether a new plan launches from C++: where the extension has it, MLX_METILE_CUDA_NATIVE_LAUNCH
    is on, and MLX's precompiled-kernel op is MLX's own (tests that replace it with a recorder or
    the CPU emulator go through theirs)."""
    return (
        _ext is not None
        and hasattr(_ext, "CudaLaunch")
        and getattr(mx.fast, "precompiled_cuda_kernel", None) is _STOCK_PRECOMPILED
        and current().cuda_native_launch
    )


def own_primitive() -> bool:
    """Whether a native launch builds the extension's own CUDA primitive rather than MLX's
    precompiled-kernel op: where the extension was built with it and MLX_METILE_CUDA_PRIMITIVE is on.
    Its output pool keeps MLX_METILE_CUDA_POOL_MB of released buffers (set here, from the settings)."""
    if not (getattr(_ext, "HAS_CUDA_PRIMITIVE", False) and current().cuda_primitive):
        return False
    _ext.cuda_set_output_pool_limit(current().cuda_pool_mb)
    return True


def launch_kind() -> str:
    """How a new plan launches: "primitive", "native" or "python" (for result files)."""
    if not native_launch():
        return "python"
    return "primitive" if own_primitive() else "native"


class CudaPlan:
    """One call shape's launch. x, the residual and the outputs keep their leading dimensions:
    the kernel sees only row-contiguous buffers (MLX copies any other input), so a reshape would
    be one more graph node to build and evaluate per array."""

    def __init__(self, artifact, x_cast, res_cast, out_dtype, rows, cols, scalars, lead, out_ns, compiler=None):
        self.x_cast, self.res_cast = x_cast, res_cast
        names = tuple(name for kind, name in binding_template(artifact) if kind == 2)
        (tx, ty, tz), (gx, gy, gz) = artifact.threads_per_group, artifact.grid(rows, cols)
        # MLX's precompiled-kernel op passes inputs, outputs, then scalars; the grid is in threads
        self.kwargs = dict(
            name=artifact.entry,
            compiled_source=cuda_compile.ptx(artifact)
            if compiler is None
            else cuda_compile.ptx(artifact, tool=compiler),
            output_shapes=[(*lead, n) for n in out_ns],
            output_dtypes=[out_dtype] * len(out_ns),
            scalars=[scalars[name] for name in names],
            grid=(gx * tx, gy * ty, gz * tz),
            threadgroup=(tx, ty, tz),
            shared_memory=artifact.dynamic_shared,
            ensure_row_contiguous=True,
        )
        self.native = None  # the same launch built from C++ (_ext.CudaLaunch), where it can be used
        if native_launch():
            kw = self.kwargs
            self.native = _ext.CudaLaunch(
                kw["name"], kw["compiled_source"], list(out_ns), out_dtype, kw["scalars"], kw["grid"],
                kw["threadgroup"], kw["shared_memory"], x_cast, res_cast, primitive=own_primitive(),
            )  # fmt: skip

    def inputs_with(self, x, weight_arrays: list[mx.array], residual) -> list[mx.array]:
        """The kernel's inputs from x, the weights' arrays (weight_inputs) and the residual."""
        if self.x_cast is not None:
            x = x.astype(self.x_cast)
        if residual is None:
            return [x, *weight_arrays]
        if self.res_cast is not None:
            residual = residual.astype(self.res_cast)
        return [x, *weight_arrays, residual]

    def launch(self, inputs: list[mx.array], stream) -> list[mx.array]:
        return mx.fast.precompiled_cuda_kernel(inputs=inputs, stream=stream, **self.kwargs)

    def run(self, x, weights, biases, residual, stream, norm=None) -> list[mx.array]:
        return self.run_with(x, norm_inputs(norm) + weight_inputs(weights, biases), residual, stream)

    def run_with(self, x, weight_arrays: list[mx.array], residual, stream=None) -> list[mx.array]:
        """run() with the weights' arrays gathered beforehand (weight_inputs; Projection keeps them)."""
        if self.native is not None:
            return self.native(x, weight_arrays, residual, stream)
        return self.launch(self.inputs_with(x, weight_arrays, residual), stream)


class NormFirstPlan:
    """The plan of a call whose RMSNorm is its own op: mx.fast.rms_norm, then the plain call's
    plan (without it every such call took the whole checking path)."""

    def __init__(self, inner: CudaPlan, eps: float):
        self.inner, self.eps = inner, eps

    def run(self, x, weights, biases, residual, stream, norm=None) -> list[mx.array]:
        return self.inner.run(mx.fast.rms_norm(x, norm[0], norm[1], stream=stream), weights, biases, residual, stream)

    def run_with(self, x, weight_arrays: list[mx.array], residual, stream=None) -> list[mx.array]:
        """weight_arrays: the norm's weight first (norm_inputs), then the weights' arrays."""
        xn = mx.fast.rms_norm(x, weight_arrays[0], self.eps, stream=stream)
        return self.inner.run_with(xn, weight_arrays[1:], residual, stream)


def plan_of(artifact, x, residual, out_dtype, rows, cols, scalars, lead, out_ns, compiler=None) -> CudaPlan:
    """The plan of a checked call, from its original x and residual; `compiler` ("nvcc", "nvrtc";
    None: the settings') builds its binary."""
    x_cast = out_dtype if x.dtype != out_dtype else None
    res_cast = out_dtype if residual is not None and residual.dtype != out_dtype else None
    return CudaPlan(artifact, x_cast, res_cast, out_dtype, rows, cols, scalars, lead, out_ns, compiler)
