"""The public ops: projections computed by compiled tile kernels.

Every op flattens x's leading dimensions into rows, checks its arguments
(ValueError / TypeError naming the argument), compiles (once per spec and row
bucket) and builds one MLX array node; evaluation happens lazily like any MLX
op, on the stream's device:

- CPU: the C++ implementation, or with MLX_METILE_EMULATE=1 the generated MSL
  run through the Metal-on-CPU emulator;
- Metal (macOS builds): the generated MSL;
- CUDA (MLX's CUDA build): the generated CUDA through
  `mx.fast.precompiled_cuda_kernel`, for calls of up to `cuda_max_rows()` rows;
- anything else (another device, larger CUDA calls, operands past 32-bit
  indexing): the stock MLX composition (`reference.py`), recorded as backend
  "mlx" in `mlx_metile.trace()`.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from functools import lru_cache

import mlx.core as mx

from . import settings
from .gradients import differentiable
from .reference import fused_reference
from .backends import cuda_compile as cuda_runtime
from .backends.cuda_device import build_target
from .backends.emulated import emulator_object
from .pipeline import compile_projection
from .schedule import Shape, choose, fuses_norm, row_bucket
from .spec import EPILOGUE_CODES, EPILOGUES, ProjectionSpec, WeightFormat
from .targets import CPU
from .trace import TraceRecord, record, tracing

try:  # the C++ core: CPU, emulator and Metal paths (the CUDA path does not need it)
    from . import _ext
except ImportError as e:  # pragma: no cover - only where the extension was not built
    _ext = None
    _EXT_ERROR = str(e)

_DTYPES = {mx.float32: "f32", mx.float16: "f16", mx.bfloat16: "bf16"}
SUPPORTED_BITS = (4, 8)
_INDEX_LIMIT = 2**31 - 2**20  # elements; offsets in the kernels are int32
SUPPORTED_GROUP_SIZES = (32, 64, 128)
StreamLike = mx.Stream | mx.Device | None


def _float_dtype(a: mx.array, what: str) -> str:
    if a.dtype not in _DTYPES:
        raise TypeError(f"{what}: dtype {a.dtype} is not supported; use float32, float16 or bfloat16")
    return _DTYPES[a.dtype]


def _require_array(a, what: str) -> mx.array:
    if not isinstance(a, mx.array):
        raise TypeError(f"{what}: expected an mlx.core.array, got {type(a).__name__}")
    return a


_VALIDATED: dict[tuple, tuple] = {}  # (ids, settings) -> weak references to the arrays validated, signature
_VALIDATED_LIMIT = 4096


class QuantizedWeight:
    """A weight in MLX's affine quantized format, used as stored (no repacking):
    `w` uint32 [N, K*bits/32] packed least-significant bits first, `scales` and
    `biases` [N, K/group_size]; element (n, k) is scales*q + biases."""

    def __init__(self, w: mx.array, scales: mx.array, biases: mx.array, group_size: int = 64, bits: int = 4):
        # Arrays never change shape or dtype, so the same three arrays (the same
        # objects, checked through weak references: an id alone may be reused)
        # with the same settings need validating once - this runs on every eager call.
        key = (id(w), id(scales), id(biases), group_size, bits)
        entry = _VALIDATED.get(key)
        if entry is None or entry[0]() is not w or entry[1]() is not scales or entry[2]() is not biases:
            self._validate(w, scales, biases, group_size, bits)
            if len(_VALIDATED) >= _VALIDATED_LIMIT:
                _VALIDATED.clear()
            q = (w, scales, biases)
            signature = (group_size, bits, *(a.shape for a in q), *(a.dtype for a in q))
            entry = _VALIDATED[key] = (weakref.ref(w), weakref.ref(scales), weakref.ref(biases), signature)
        # immutable, so that what calls with it are planned by (_plan_key) stays true of it:
        # set through its __dict__ (signature: its format and shapes)
        self.__dict__.update(w=w, scales=scales, biases=biases, group_size=group_size, bits=bits, signature=entry[3])

    def __setattr__(self, name, value):
        raise AttributeError(f"QuantizedWeight is immutable: make a new one rather than set {name!r}")

    @staticmethod
    def _validate(w, scales, biases, group_size: int, bits: int) -> None:
        w = _require_array(w, "w")
        scales = _require_array(scales, "scales")
        biases = _require_array(biases, "biases")
        if bits not in SUPPORTED_BITS:
            raise ValueError(f"bits: {bits} is not supported; use one of {SUPPORTED_BITS}")
        if group_size not in SUPPORTED_GROUP_SIZES:
            raise ValueError(f"group_size: {group_size} is not supported; use one of {SUPPORTED_GROUP_SIZES}")
        if w.dtype != mx.uint32 or w.ndim != 2:
            raise ValueError(f"w: expected a 2-D uint32 array of packed values, got {w.dtype} with shape {w.shape}")
        n, words = w.shape
        k = words * 32 // bits
        if k % group_size:
            raise ValueError(
                f"group_size: K={k} (from w's {words} words per row at bits={bits}) is not a multiple of {group_size}"
            )
        expect = (n, k // group_size)
        for name, a in (("scales", scales), ("biases", biases)):
            if tuple(a.shape) != expect:
                raise ValueError(
                    f"{name}: expected shape {expect} for N={n}, K={k}, group_size={group_size}, got {a.shape}"
                )
            _float_dtype(a, name)
        if scales.dtype != biases.dtype:
            raise ValueError(f"biases: dtype {biases.dtype} differs from scales' {scales.dtype}")

    @property
    def N(self) -> int:
        return self.w.shape[0]

    @property
    def K(self) -> int:
        return self.w.shape[1] * 32 // self.bits

    @classmethod
    def from_quantized_linear(cls, layer, arrays=None) -> QuantizedWeight:
        """From an `mlx.nn.QuantizedLinear` (affine mode); its weight, scales and biases read from
        `arrays` (a module holding them under the same names) where given."""
        mode = getattr(layer, "mode", "affine")
        if mode != "affine":
            raise ValueError(f"layer: quantization mode {mode!r} is not supported; only 'affine'")
        src = layer if arrays is None else arrays
        return cls(src["weight"], src["scales"], src["biases"], layer.group_size, layer.bits)

    def __repr__(self) -> str:
        return f"QuantizedWeight(N={self.N}, K={self.K}, bits={self.bits}, group_size={self.group_size})"


Weight = mx.array | QuantizedWeight
Norm = tuple[mx.array, float]  # an RMSNorm applied to x first: (its weight of shape (K,), eps)


def _weight_format(w: Weight, bias: mx.array | None, i: int) -> WeightFormat:
    bias_dtype = _float_dtype(bias, f"biases[{i}]") if bias is not None else "f32"
    if isinstance(w, QuantizedWeight):
        return _format(_DTYPES[w.scales.dtype], w.bits, w.group_size, bias is not None, bias_dtype)
    return _format(_float_dtype(w, f"weights[{i}]"), 0, 0, bias is not None, bias_dtype)


@lru_cache(maxsize=256)
def _format(dtype: str, bits: int, group: int, has_bias: bool, bias_dtype: str) -> WeightFormat:
    return WeightFormat(dtype, bits, group, has_bias, bias_dtype)


@lru_cache(maxsize=1024)
def _compiled(
    act: str,
    formats: tuple,
    epilogue: str | None,
    residual: bool,
    k_multiple: int,
    bucket: int,
    target,
    shape: Shape,
    norm_eps: float | None = None,
    generation: int = 0,
) -> tuple[ProjectionSpec, object]:
    """Spec and artifact for hashable primitives: the per-call cache lookup (`generation`: the
    settings' reload count, so a reload chooses again)."""
    spec = ProjectionSpec(act, formats, epilogue, residual, k_multiple=k_multiple, norm_eps=norm_eps)
    schedule = choose(spec, bucket, target, shape)
    return spec, compile_projection(spec, schedule, target.language)


@lru_cache(maxsize=64)
def _promote(a: mx.Dtype, b: mx.Dtype) -> mx.Dtype:
    return (mx.zeros((1,), a) + mx.zeros((1,), b)).dtype


def _stream(stream: StreamLike) -> mx.Stream:
    if stream is None:
        return mx.default_stream(mx.default_device())
    if isinstance(stream, mx.Device):
        return mx.default_stream(stream)
    if isinstance(stream, mx.Stream):
        return stream
    raise TypeError(f"stream: expected an mlx Stream, Device or None, got {type(stream).__name__}")


def _backend(stream: mx.Stream) -> str:
    if stream.device.type == mx.DeviceType.cpu:
        return "emulator" if settings.current().emulate else "cpu"
    return _gpu_backend()


@lru_cache(maxsize=1)
def _gpu_backend() -> str:
    if _ext is not None and _ext.HAS_METAL and mx.metal.is_available():
        return "metal"
    if mx.cuda.is_available():
        return "cuda"
    return "mlx"


def _project(
    op: str,
    x: mx.array,
    weights: Sequence[Weight],
    biases: Sequence[mx.array | None],
    epilogue: str | None,
    residual: mx.array | None,
    stream: StreamLike,
    norm: Norm | None = None,
) -> list[mx.array]:
    plannable = stream is None and not tracing()  # (explicit streams and traced calls take the full path)
    key = None
    if plannable and _PLANS:
        key = _plan_key(op, x, weights, biases, epilogue, residual, norm)
        plan = _PLANS.get(key)
        if plan is not None:  # a call like one already checked and planned: only its arrays differ
            return plan.run(x, weights, biases, residual, None, norm)
    x_in, residual_in = x, residual
    x = _require_array(x, "x")
    act = _float_dtype(x, "x")
    if x.ndim < 1:
        raise ValueError("x: expected at least one dimension (..., K)")
    K = x.shape[-1]
    lead = tuple(x.shape[:-1])
    rows = math.prod(lead)
    if rows == 0 or K == 0:
        raise ValueError(f"x: empty input of shape {tuple(x.shape)}")
    if not weights:
        raise ValueError("weights: at least one weight is needed")
    for i, w in enumerate(weights):
        if isinstance(w, QuantizedWeight):
            if w.K != K:
                raise ValueError(f"weights[{i}]: K={w.K} does not match x's last dimension {K}")
            continue
        w = _require_array(w, f"weights[{i}]")
        _float_dtype(w, f"weights[{i}]")
        if w.ndim != 2:
            raise ValueError(f"weights[{i}]: expected a 2-D [N, K] array, got shape {tuple(w.shape)}")
        if w.shape[1] != K:
            raise ValueError(f"weights[{i}]: K={w.shape[1]} does not match x's last dimension {K}")
    Ns = [w.N if isinstance(w, QuantizedWeight) else w.shape[0] for w in weights]
    check_bias_count(weights, biases)
    for i, (b, n) in enumerate(zip(biases, Ns)):
        if b is None:
            continue
        b = _require_array(b, f"biases[{i}]")
        _float_dtype(b, f"biases[{i}]")
        if tuple(b.shape) != (n,):
            raise ValueError(f"biases[{i}]: expected shape ({n},), got {tuple(b.shape)}")
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue: {epilogue!r} is not one of {EPILOGUES}")
    if epilogue == "swiglu":
        if len(weights) != 2:
            raise ValueError(f"epilogue: 'swiglu' takes exactly two weights (gate, up), got {len(weights)}")
        if Ns[0] != Ns[1]:
            raise ValueError(f"weights: gate and up must have the same N for 'swiglu', got {Ns[0]} and {Ns[1]}")
    single = epilogue == "swiglu" or len(weights) == 1
    if residual is not None:
        residual = _require_array(residual, "residual")
        if not single:
            raise ValueError("residual: a residual is added to a single output; it needs one weight or 'swiglu'")
        if tuple(residual.shape) != lead + (Ns[0],):
            raise ValueError(f"residual: expected shape {lead + (Ns[0],)}, got {tuple(residual.shape)}")
        _float_dtype(residual, "residual")

    if norm is not None:
        _check_norm(norm, K)

    # The output dtype follows MLX's promotion of x with the dense weights.
    out_dtype = x.dtype
    for w in weights:
        if isinstance(w, mx.array):
            out_dtype = _promote(out_dtype, w.dtype)
    if out_dtype != x.dtype:
        x = x.astype(out_dtype)
        act = _DTYPES[out_dtype]
    if residual is not None and residual.dtype != out_dtype:
        residual = residual.astype(out_dtype)

    s = _stream(stream)
    backend = _backend(s)
    formats = tuple(_weight_format(w, b, i) for i, (w, b) in enumerate(zip(weights, biases)))
    x2 = x if len(lead) == 1 else x.reshape(rows, K)
    res2 = residual if residual is None or len(lead) == 1 else residual.reshape(rows, Ns[0])

    # Kernels index with 32-bit integers: larger operands take the stock path.
    largest = max(
        [x2.size, rows * max(Ns)] + [(w.w.size if isinstance(w, QuantizedWeight) else w.size) for w in weights]
    )
    if largest >= _INDEX_LIMIT:
        backend = "mlx"
    if backend == "cuda" and rows > cuda_max_rows():
        backend = "mlx"  # SIMT kernels lose to MLX's tensor-core GEMMs there (bench/results/h200-*)
    target = build_target() if backend == "cuda" else CPU
    # CUDA: up to 256, so the mma schedule knows when K holds whole multiples of 4 groups (aligned K split)
    k_multiple = math.gcd(K, 256 if target.language == "cuda" else 64)
    cols = Ns[0] if epilogue == "swiglu" else sum(Ns)
    shape = Shape(K, cols)
    norm_eps = None if norm is None else float(norm[1])
    if norm is not None:
        spec = ProjectionSpec(act, formats, epilogue, residual is not None, k_multiple=k_multiple, norm_eps=norm_eps)
        if not (backend == "cuda" and norm[0].dtype == mx.bfloat16 and fuses_norm(spec, rows, target, shape)):
            # the norm, then the product
            xn = mx.fast.rms_norm(x_in, norm[0], norm[1], stream=s)
            outs = _project(op, xn, weights, biases, epilogue, residual_in, stream)
            inner = planned(op, xn, weights, biases, epilogue, residual_in) if plannable else None
            if inner is not None:  # the next such call: the norm, then this plan, without the checks
                key = key or _plan_key(op, x_in, weights, biases, epilogue, residual_in, norm)
                if key is not None:
                    _keep_plan(key, _NormFirstPlan(inner, norm_eps))
            return outs
    if backend == "mlx":
        outs = fused_reference(x2, weights, biases, epilogue, res2)
        _record(op, rows, K, Ns, formats, epilogue, residual is not None, backend, None)
        return [o.reshape(*lead, o.shape[-1]) for o in outs]

    _, artifact = _compiled(
        act,
        formats,
        epilogue,
        residual is not None,
        k_multiple,
        row_bucket(rows),
        target,
        shape,
        norm_eps,
        settings.generation(),
    )
    scalars = {"M": rows, "K": K, **{f"N{i}": n for i, n in enumerate(Ns)}}
    out_ns = [Ns[0]] if single else Ns
    if backend == "cuda":
        plan = _cuda_plan_of(artifact, x_in, residual_in, out_dtype, rows, cols, scalars, lead, out_ns)
        if settings.current().cuda_gradients:
            # opt-in: it passed the H200 gradient check, but what it costs an eager call is unmeasured
            inputs = plan.inputs_with(x_in, weight_inputs(weights, biases), residual_in)
            outs = differentiable(
                lambda arrays: plan.launch(arrays, s),
                lambda arrays: _reference_of_flat(arrays, weights, biases, epilogue, res2 is not None),
                inputs,
            )
        else:
            outs = plan.run(x_in, weights, biases, residual_in, None if stream is None else s, norm)  # as planned
            if plannable and key is None:  # (not computed above while no plan existed)
                key = _plan_key(op, x_in, weights, biases, epilogue, residual_in, norm)
            if key is not None:
                _keep_plan(key, plan)
        _record(op, rows, K, Ns, formats, epilogue, residual is not None, backend, artifact.entry)
        return outs
    inputs = [x2, *weight_inputs(weights, biases)]
    if res2 is not None:
        inputs.append(res2)
    if _ext is None:
        raise RuntimeError(f"mlx_metile: the C++ extension is not built ({_EXT_ERROR}); reinstall the package")
    bindings = [(kind, scalars[at] if kind == 2 else at) for kind, at in _binding_template(artifact)]
    obj = emulator_object(artifact) if backend == "emulator" else ""
    outs = _ext.tile_kernel(
        inputs,
        [[rows, n] for n in out_ns],
        [out_dtype] * len(out_ns),
        artifact.target,
        artifact.source if backend == "metal" else "",  # only the Metal path compiles it
        artifact.entry,
        artifact.grid(rows, cols),
        artifact.threads_per_group,
        bindings,
        artifact.key,
        [f.bits for f in formats],
        [f.group_size for f in formats],
        [int(f.has_bias) for f in formats],
        EPILOGUE_CODES[epilogue],
        residual is not None,
        obj,
        stream=s,
    )
    _record(op, rows, K, Ns, formats, epilogue, residual is not None, backend, artifact.entry)
    return outs if len(lead) == 1 else [o.reshape(*lead, n) for o, n in zip(outs, out_ns)]


def _reference_of_flat(arrays, weights, biases, epilogue, has_residual) -> list[mx.array]:
    """The stock composition over the kernel's flat inputs (x, per weight its
    arrays and bias, the residual): what gradients on the CUDA path follow."""
    it = iter(arrays)
    x = next(it)
    ws, bs = [], []
    for w, b in zip(weights, biases):
        if isinstance(w, QuantizedWeight):
            ws.append(QuantizedWeight(next(it), next(it), next(it), w.group_size, w.bits))
        else:
            ws.append(next(it))
        bs.append(next(it) if b is not None else None)
    res = next(it) if has_residual else None
    return fused_reference(x, ws, bs, epilogue, res)


def cuda_max_rows() -> int:
    """Calls with more rows than this run stock MLX on CUDA (default 32, the
    split-K kernels; MLX_METILE_CUDA_MAX_ROWS raises it, e.g. to test the tiled
    kernel there). Row invariance on CUDA therefore covers calls up to it."""
    return settings.current().cuda_max_rows


def _record(op, rows, K, Ns, formats, epilogue, residual, backend, kernel) -> None:
    if tracing():  # records are built only when someone is looking
        names = tuple(f"q{f.bits}g{f.group_size}" if f.quantized else f.dtype for f in formats)
        record(TraceRecord(op, rows, K, tuple(Ns), names, epilogue, residual, backend, kernel))


@lru_cache(maxsize=1024)
def _binding_template(artifact) -> tuple[tuple[int, int | str], ...]:
    """Per kernel argument: (0, input index), (1, output index) or (2, scalar name)."""
    out, n_in, n_out = [], 0, 0
    for p in artifact.params:
        if p.kind == "scalar":
            out.append((2, p.name))
        elif p.output:
            out.append((1, n_out))
            n_out += 1
        else:
            out.append((0, n_in))
            n_in += 1
    return tuple(out)


class _CudaPlan:
    """Everything a CUDA call repeats for arrays of the same shapes and dtypes: the casts
    of x and the residual, and MLX's precompiled-kernel arguments but the inputs. The op
    builds one per call it checks, and keeps it (see _plan_key) so that the next such call
    skips the checks and derivations - an eager call's host time. x, the residual and the
    outputs keep their leading dimensions: the kernel sees only row-contiguous buffers
    (MLX copies any other input), so a reshape would be one more graph node to build and
    evaluate per array (three to four per projection in a decoding step)."""

    def __init__(self, artifact, x_cast, res_cast, out_dtype, rows, cols, scalars, lead, out_ns):
        self.x_cast, self.res_cast = x_cast, res_cast
        names = tuple(name for kind, name in _binding_template(artifact) if kind == 2)
        (tx, ty, tz), (gx, gy, gz) = artifact.threads_per_group, artifact.grid(rows, cols)
        # the artifact as a fatbin / cubin through MLX's precompiled-kernel op (inputs,
        # outputs, then scalars; the grid is given in threads)
        self.kwargs = dict(
            name=artifact.entry,
            compiled_source=cuda_runtime.ptx(artifact),
            output_shapes=[(*lead, n) for n in out_ns],
            output_dtypes=[out_dtype] * len(out_ns),
            scalars=[scalars[name] for name in names],
            grid=(gx * tx, gy * ty, gz * tz),
            threadgroup=(tx, ty, tz),
            shared_memory=artifact.dynamic_shared,
            ensure_row_contiguous=True,
        )
        self.native = None  # the same launch built from C++ (_ext.CudaLaunch), where it can be used
        if _native_launch():
            kw = self.kwargs
            self.native = _ext.CudaLaunch(
                kw["name"], kw["compiled_source"], list(out_ns), out_dtype, kw["scalars"], kw["grid"],
                kw["threadgroup"], kw["shared_memory"], x_cast, res_cast, primitive=_own_primitive(),
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

    def run(self, x, weights, biases, residual, stream, norm: Norm | None = None) -> list[mx.array]:
        return self.run_with(x, norm_inputs(norm) + weight_inputs(weights, biases), residual, stream)

    def run_with(self, x, weight_arrays: list[mx.array], residual, stream=None) -> list[mx.array]:
        """run() with the weights' arrays gathered beforehand (weight_inputs; Projection keeps them)."""
        if self.native is not None:
            return self.native(x, weight_arrays, residual, stream)
        return self.launch(self.inputs_with(x, weight_arrays, residual), stream)


class _NormFirstPlan:
    """The plan of a call whose RMSNorm ops composes (norm_pays): mx.fast.rms_norm, then the
    plain call's plan. Without it every such call took the op's whole checking path (a patched
    model whose gate/up were handed such a norm ran 0.54-0.81x end to end on the H200)."""

    def __init__(self, inner: _CudaPlan, eps: float):
        self.inner, self.eps = inner, eps

    def run(self, x, weights, biases, residual, stream, norm: Norm | None = None) -> list[mx.array]:
        return self.inner.run(mx.fast.rms_norm(x, norm[0], norm[1], stream=stream), weights, biases, residual, stream)

    def run_with(self, x, weight_arrays: list[mx.array], residual, stream=None) -> list[mx.array]:
        """weight_arrays: the norm's weight first (norm_inputs), then the weights' arrays."""
        xn = mx.fast.rms_norm(x, weight_arrays[0], self.eps, stream=stream)
        return self.inner.run_with(xn, weight_arrays[1:], residual, stream)


_STOCK_PRECOMPILED = getattr(mx.fast, "precompiled_cuda_kernel", None)


def _native_launch() -> bool:
    """Whether a new plan launches through _ext.CudaLaunch: where the extension is built,
    MLX_METILE_CUDA_NATIVE_LAUNCH is not "0", and MLX's precompiled-kernel op is MLX's own
    (tests and probes that replace it with a recorder or the CPU emulator go through theirs)."""
    return (
        _ext is not None
        and hasattr(_ext, "CudaLaunch")
        and getattr(mx.fast, "precompiled_cuda_kernel", None) is _STOCK_PRECOMPILED
        and settings.current().cuda_native_launch
    )


def _own_primitive() -> bool:
    """Whether a native launch builds the extension's own CUDA primitive (src/cuda/cuda_kernel.h:
    the module loaded once, no per-launch hash of the binary) rather than MLX's precompiled-kernel
    op: where the extension was built with it and MLX_METILE_CUDA_PRIMITIVE is not "0". Its output
    pool's limit, MLX_METILE_CUDA_POOL_MB (read by the extension at its first launch), is checked
    here, where a bad value can still raise."""
    return getattr(_ext, "HAS_CUDA_PRIMITIVE", False) and settings.current().cuda_primitive


def cuda_launch_kind() -> str:
    """How a new CUDA plan launches: "primitive" (the extension's own), "native" (MLX's
    precompiled-kernel op from C++) or "python" (the same op from Python); for result files."""
    if not _native_launch():
        return "python"
    return "primitive" if _own_primitive() else "native"


def weight_inputs(weights: Sequence[Weight], biases: Sequence[mx.array | None]) -> list[mx.array]:
    """The kernel inputs that come from the weights: per weight its array (or packed weight,
    scales and biases), then its bias where it has one."""
    inputs: list[mx.array] = []
    for w, b in zip(weights, biases):
        if isinstance(w, QuantizedWeight):
            inputs += (w.w, w.scales, w.biases)
        else:
            inputs.append(w)
        if b is not None:
            inputs.append(b)
    return inputs


def norm_inputs(norm: Norm | None) -> list[mx.array]:
    """The kernel input of a fused RMSNorm (its bf16 weight: _norm_fusable), or none."""
    return [] if norm is None else [norm[0]]


def _check_norm(norm, K: int) -> None:
    if not isinstance(norm, tuple) or len(norm) != 2:
        raise TypeError("norm: expected (weight, eps) of an RMSNorm, weight of shape (K,)")
    g, eps = norm
    g = _require_array(g, "norm[0]")
    _float_dtype(g, "norm[0]")
    if tuple(g.shape) != (K,):
        raise ValueError(f"norm[0]: expected the RMSNorm weight of shape ({K},), got {tuple(g.shape)}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"norm[1]: expected a positive finite eps, got {eps!r}")


def _cuda_plan_of(artifact, x, residual, out_dtype, rows, cols, scalars, lead, out_ns) -> _CudaPlan:
    """The plan of a checked call, from its original x and residual."""
    x_cast = out_dtype if x.dtype != out_dtype else None
    res_cast = out_dtype if residual is not None and residual.dtype != out_dtype else None
    return _CudaPlan(artifact, x_cast, res_cast, out_dtype, rows, cols, scalars, lead, out_ns)


_PLANS: dict[tuple, _CudaPlan | _NormFirstPlan] = {}
_PLANS_LIMIT = 4096


def _keep_plan(key: tuple, plan: _CudaPlan | _NormFirstPlan) -> None:
    """Keep a checked call's plan for the next call with its key (at most _PLANS_LIMIT at once)."""
    if len(_PLANS) >= _PLANS_LIMIT:
        _PLANS.clear()
    _PLANS[key] = plan


_per_call_settings = settings.generation


def _plan_key(op, x, weights, biases, epilogue, residual, norm: Norm | None = None) -> tuple | None:
    """What a call's checks and plan depend on besides its arrays' data: the shapes and
    dtypes of every array, the quantization settings, the default device's type and the two
    settings read per call; None for arguments the full path must look at (and reject)."""
    if type(x) is not mx.array or type(weights) is not list or type(biases) is not list:
        return None
    # the default device's type picks the backend (a Device itself hashes by identity)
    key = [op, epilogue, x.shape, x.dtype, mx.default_device().type]
    key.append(_per_call_settings())
    for w in weights:
        if type(w) is QuantizedWeight:
            key.append(w.signature)
        elif type(w) is mx.array:
            key.append((w.shape, w.dtype))
        else:
            return None
    for b in biases:
        if b is not None and type(b) is not mx.array:
            return None
        key.append(None if b is None else (b.shape, b.dtype))
    if residual is not None and type(residual) is not mx.array:
        return None
    key.append(None if residual is None else (residual.shape, residual.dtype))
    if norm is not None:
        if type(norm) is not tuple or len(norm) != 2 or type(norm[0]) is not mx.array or type(norm[1]) is not float:
            return None
        key.append((norm[0].shape, norm[0].dtype, norm[1]))
    return tuple(key)


def planned(op, x, weights, biases, epilogue, residual, norm: Norm | None = None) -> _CudaPlan | _NormFirstPlan | None:
    """The plan the last call with these arguments' shapes, dtypes and settings left (CUDA)."""
    key = _plan_key(op, x, weights, biases, epilogue, residual, norm)
    return None if key is None else _PLANS.get(key)


def plans_generation() -> int:
    """Counts clear_kernel_caches() calls: plans kept elsewhere (Projection) hold it."""
    return _GENERATION[0]


_GENERATION = [0]


def clear_kernel_caches() -> None:
    """Forget compiled kernels and call plans (after changing MLX_METILE_CUDA_* settings)."""
    _compiled.cache_clear()
    _PLANS.clear()
    _GENERATION[0] += 1


def linear(x: mx.array, weight: mx.array, bias: mx.array | None = None, *, stream: StreamLike = None) -> mx.array:
    """`x @ weight.T + bias` with weight [N, K] as `nn.Linear` stores it; x is [..., K]."""
    try:
        return _project("linear", x, [weight], [bias], None, None, stream)[0]
    except ValueError as e:
        raise ValueError(str(e).replace("weights[0]", "weight").replace("biases[0]", "bias")) from None
    except TypeError as e:
        raise TypeError(str(e).replace("weights[0]", "weight").replace("biases[0]", "bias")) from None


def quantized_linear(
    x: mx.array,
    w: mx.array,
    scales: mx.array,
    biases: mx.array,
    *,
    group_size: int = 64,
    bits: int = 4,
    bias: mx.array | None = None,
    stream: StreamLike = None,
) -> mx.array:
    """`mx.quantized_matmul(x, w, scales, biases, transpose=True, group_size, bits)` (+ bias)."""
    qw = QuantizedWeight(w, scales, biases, group_size, bits)
    try:
        return _project("quantized_linear", x, [qw], [bias], None, None, stream)[0]
    except ValueError as e:
        raise ValueError(str(e).replace("weights[0]", "w").replace("biases[0]", "bias")) from None


def weight_lists(weights, biases) -> tuple[list[Weight], list[mx.array | None]]:
    """fused_linear's weights and biases as lists (biases None: one None per weight)."""
    if isinstance(weights, (mx.array, QuantizedWeight)) or not isinstance(weights, (list, tuple)):
        raise TypeError("weights: expected a list or tuple of arrays / QuantizedWeight")
    return list(weights), list(biases) if biases is not None else [None] * len(weights)


def check_bias_count(weights: Sequence, biases: Sequence) -> None:
    if len(biases) != len(weights):
        raise ValueError(f"biases: expected {len(weights)} entries (one per weight, None for none), got {len(biases)}")


def fused_linear(
    x: mx.array,
    weights: Sequence[Weight],
    *,
    biases: Sequence[mx.array | None] | None = None,
    epilogue: str | None = None,
    residual: mx.array | None = None,
    norm: Norm | None = None,
    stream: StreamLike = None,
) -> mx.array | list[mx.array]:
    """Several projections of one x, reading x once.

    - epilogue=None: one output per weight (q/k/v);
    - "swiglu": two weights (gate, up) -> silu(x@W0.T) * (x@W1.T);
    - "gelu" / "gelu_approx" / "silu": applied to each output;
    - residual: added to the single output (down projection + residual);
    - norm=(weight, eps): x goes through an RMSNorm first, `mx.fast.rms_norm(x, weight, eps)`;
      on CUDA with bf16 activations, where it measured faster (norm_pays: no SwiGLU, at most
      NORM_FUSED_MAX_COLUMNS outputs, i.e. q/k/v), inside the projection's kernel (x * weight
      rounded once to bf16, each row's sums scaled by 1 / rms in f32 - one op fewer), elsewhere as
      that op.
    Biases, epilogue and residual are applied in f32 and rounded once.
    Returns a list when there are several outputs, else one array."""
    ws, bs = weight_lists(weights, biases)
    if norm is not None and isinstance(norm, tuple) and len(norm) == 2 and isinstance(norm[1], int):
        norm = (norm[0], float(norm[1]))
    outs = _project("fused_linear", x, ws, bs, epilogue, residual, stream, norm)
    return outs[0] if len(outs) == 1 and (epilogue == "swiglu" or residual is not None or len(weights) == 1) else outs
