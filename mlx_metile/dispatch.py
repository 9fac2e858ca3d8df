"""Where a checked call runs: the device's backend, the stock fallback, the kernel and its launch.

- CPU: the C++ implementation, or with MLX_METILE_EMULATE the generated MSL run through the
  Metal-on-CPU emulator;
- Metal (macOS builds): the generated MSL, or where a tuned decision says so our AIR as a metallib
  or a patched binary archive (backends/metal_builds.py); NAX schedules only where MLX runs NAX
  (the device's GPU generation and macOS, backends/metal_device.py), else the simdgroup schedule;
- CUDA (MLX's CUDA build): the generated CUDA, for calls of up to MLX_METILE_CUDA_MAX_ROWS rows;
- anything else (another device, larger CUDA calls, operands past 32-bit indexing): the stock MLX
  composition (`reference.fused_reference`), recorded as backend "mlx" in `mlx_metile.trace()`.

The kernel is `pipeline.compile_projection(spec, choose(spec, rows, target, shape))`; the CUDA
path keeps a launch plan per call shape, which `replay` reuses without checking again. A decision
of the tuner (schedule.tuned, written by mlx_metile.tune) may send a call to the stock composition
(recorded as backend "mlx (tuned)") or name its kernel's schedule and CUDA compiler.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from functools import lru_cache

import mlx.core as mx

from . import settings
from .artifact import Artifact
from .backends import cuda_compile, cuda_launch, emulated, metal_builds, primitive
from .backends.cuda_device import build_target
from .backends.extension import has_metal
from .backends.inputs import binding_template, norm_inputs, weight_inputs
from .backends.metal_device import metal_target
from .call import Call, Norm, check, product_dtypes
from .formats import QuantizedWeight
from .gradients import differentiable
from .pipeline import compile_projection
from .reference import StockPlan, finish, fused_reference
from .schedule import Route, Shape, choose, fuses_norm, row_bucket, tuned
from .spec import ProjectionSpec
from .targets import CPU, EMULATOR, MetalTarget, Target
from .trace import TraceRecord, record, tracing

INDEX_LIMIT = 2**31 - 2**20  # elements; offsets in the kernels are int32
StreamLike = mx.Stream | mx.Device | mx.DeviceType | None


def stream_of(stream: StreamLike) -> mx.Stream:
    """A stream from what stock MLX ops take: None, a Stream, a Device or a DeviceType (mx.cpu)."""
    if stream is None:
        return mx.default_stream(mx.default_device())
    if isinstance(stream, mx.DeviceType):
        return mx.default_stream(mx.Device(stream))
    if isinstance(stream, mx.Device):
        return mx.default_stream(stream)
    if isinstance(stream, mx.Stream):
        return stream
    raise TypeError(f"stream: expected an mlx Stream, Device, DeviceType or None, got {type(stream).__name__}")


def backend_of(stream: mx.Stream) -> str:
    """ "cpu", "emulator", "metal", "cuda" or "mlx" (stock MLX) for a stream's device."""
    if stream.device.type == mx.DeviceType.cpu:
        return "emulator" if settings.current().emulate else "cpu"
    return gpu_backend()


@lru_cache(maxsize=1)
def gpu_backend() -> str:
    if has_metal() and mx.metal.is_available():
        return "metal"
    if mx.cuda.is_available():
        return "cuda"
    return "mlx"


def cuda_max_rows() -> int:
    """Calls with more rows than this run stock MLX on CUDA (MLX_METILE_CUDA_MAX_ROWS, 32)."""
    return settings.current().cuda_max_rows


@lru_cache(maxsize=1024)
def _compiled(
    spec: ProjectionSpec, bucket: int, target: Target, shape: Shape, generation: int, route: Route | None = None
) -> Artifact:
    """The artifact of a spec: the per-call cache lookup (`generation`: the settings' reload count;
    `route`: the tuned decision choose reads, if any, and its Metal build)."""
    schedule = choose(spec, bucket, target, shape)
    build = None if route is None or route.native else route.build
    return metal_builds.build(spec, schedule, target.language, build)


def target_of(backend: str) -> Target:
    """The target a backend's kernels are built for: the CUDA device's architecture; the Metal
    device's GPU generation and macOS, which decide NAX (backends/metal_device.py); the emulator's
    (it runs the MPP subset: NAX); else the CPU's MSL."""
    if backend == "cuda":
        return build_target()
    if backend == "metal":
        return metal_target()
    return EMULATOR if backend == "emulator" else CPU


def tuning_site(call: Call, stream: StreamLike = None) -> tuple[str, Target, ProjectionSpec, Shape] | None:
    """(backend, target, spec, shape) under which a checked call (without a norm) looks up tuned
    decisions, or None where it runs stock MLX whatever is decided (no kernel backend)."""
    backend = backend_of(stream_of(stream))
    if backend == "mlx" or call.norm is not None:
        return None
    target = target_of(backend)
    return backend, target, spec_of(call, target, None), Shape(call.K, call.columns)


def spec_of(call: Call, target: Target, norm_eps: float | None) -> ProjectionSpec:
    # CUDA: K's divisor up to 256, so the mma schedule knows when K holds whole multiples of 4 groups
    k_multiple = math.gcd(call.K, 256 if target.language == "cuda" else 64)
    return _spec(call.act, call.formats, call.epilogue, call.residual is not None, k_multiple, norm_eps)


@lru_cache(maxsize=1024)
def _spec(act, formats, epilogue, residual, k_multiple, norm_eps) -> ProjectionSpec:
    return ProjectionSpec(act, formats, epilogue, residual, k_multiple=k_multiple, norm_eps=norm_eps)


def _record(call: Call, backend: str, kernel: str | None) -> None:
    if tracing():  # records are built only when someone is looking
        names = tuple(f.short() for f in call.formats)
        rec = TraceRecord(
            call.op, call.rows, call.K, call.Ns, names, call.epilogue, call.residual is not None, backend, kernel
        )
        record(rec)


def run(call: Call, stream: StreamLike) -> list[mx.array]:
    """The outputs of a checked call, each in the dtype the stock composition gives it."""
    if call.empty:
        return _empty(call)
    parts = _split(call, stream)
    if parts is not None:  # more buffers than a Metal kernel takes: several calls
        return [out for part in parts for out in run(part, stream)]
    outs = _run(call, stream)
    casts = call.casts()
    if any(casts):
        outs = [o if c is None else o.astype(c) for o, c in zip(outs, casts)]
    return outs


def _empty(call: Call) -> list[mx.array]:
    """No rows, no K or no columns: x @ W.T is zeros (or empty), then biases, epilogue and
    residual as the stock composition applies them (without its products, which fault at K = 0)."""
    dtypes = product_dtypes(call.x.dtype, call.weights)
    zs = [mx.zeros((*call.lead, n), d) for n, d in zip(call.Ns, dtypes)]
    _record(call, "mlx", None)
    return finish(zs, list(call.biases), call.epilogue, call.residual)


def _split(call: Call, stream: StreamLike) -> list[Call] | None:
    """A call of several outputs whose MSL kernel would take more buffers than Metal allows, as
    calls of fewer weights each (the outputs are independent, so nothing else changes); None
    where it fits, or runs elsewhere."""
    if call.norm is not None or call.single or len(call.weights) < 2:
        return None
    limit = MetalTarget.max_buffers
    if _buffers(call.weights, call.biases) <= limit or backend_of(stream_of(stream)) in ("cuda", "mlx"):
        return None
    groups, start = [], 0
    while start < len(call.weights):
        end = start + 1
        while (
            end < len(call.weights) and _buffers(call.weights[start : end + 1], call.biases[start : end + 1]) <= limit
        ):
            end += 1
        groups.append((start, end))
        start = end
    return [check(call.op, call.x, call.weights[a:b], call.biases[a:b], call.epilogue, None) for a, b in groups]


def _buffers(weights, biases) -> int:
    """Buffer slots of a kernel of several outputs: x, each weight's arrays, bias and output, and
    the scalars M, K and N_i."""
    count = 1 + 2
    for w, b in zip(weights, biases):
        count += (len(w.arrays()) if isinstance(w, QuantizedWeight) else 1) + (b is not None) + 1 + 1
    return count


_CAPTURES: list[list[Call]] = []


@contextmanager
def capture():
    """`with capture() as calls:` collects every checked call that reaches a backend (what the
    tuner tunes), inside a trace so that no plan replays one unseen."""
    from .trace import trace

    calls: list[Call] = []
    with trace():
        _CAPTURES.append(calls)
        try:
            yield calls
        finally:
            _CAPTURES.remove(calls)


def _run(call: Call, stream: StreamLike) -> list[mx.array]:
    if _CAPTURES:
        for calls in _CAPTURES:
            calls.append(call)
    plannable = stream is None and not tracing()  # (explicit streams and traced calls take the full path)
    s = stream_of(stream)
    backend = backend_of(s)
    lead, K, rows, Ns = call.lead, call.K, call.rows, call.Ns
    x, residual = call.x, call.residual
    if x.dtype != call.out_dtype:
        x = x.astype(call.out_dtype)
    if residual is not None and residual.dtype != call.out_dtype:
        residual = residual.astype(call.out_dtype)
    x2 = x if len(lead) == 1 else x.reshape(rows, K)
    res2 = residual if residual is None or len(lead) == 1 else residual.reshape(rows, Ns[0])

    # Kernels index with 32-bit integers: larger operands take the stock path.
    sizes = [(w.w.size if isinstance(w, QuantizedWeight) else w.size) for w in call.weights]
    if max([x2.size, rows * max(Ns)] + sizes) >= INDEX_LIMIT:
        backend = "mlx"
    if backend == "cuda" and rows > cuda_max_rows():
        backend = "mlx"  # the SIMT kernels lose to MLX's tensor-core GEMMs there
    target = target_of(backend)
    shape = Shape(K, call.columns)
    norm = call.norm
    if norm is not None:
        spec = spec_of(call, target, float(norm[1]))
        if not (backend == "cuda" and norm[0].dtype == mx.bfloat16 and fuses_norm(spec, rows, target, shape)):
            return _norm_first(call, norm, s, stream, plannable)
    route, replay_native = None, False
    if backend != "mlx" and tuned.active(cuda=backend == "cuda"):
        spec = spec_of(call, target, None if norm is None else float(norm[1]))
        route = tuned.lookup(target, spec, row_bucket(rows), shape)
        if route is not None and route.backend != backend:
            route = None  # decided for another backend of the device (the emulator, the C++ path)
        if route is not None and route.native:
            replay_native = backend == "cuda" and plannable and norm is None
            backend = "mlx (tuned)"
    if backend.startswith("mlx"):
        outs = fused_reference(x2, list(call.weights), list(call.biases), call.epilogue, res2)
        _record(call, backend, None)
        if replay_native:  # replayed without the checks next time, as stock MLX runs it (CUDA keeps plans)
            key = plan_key(call.op, call.x, list(call.weights), list(call.biases), call.epilogue, call.residual)
            if key is not None:
                keep_plan(key, StockPlan(call.weights, call.biases, call.epilogue, call.out_dtype))
        return [o.reshape(*lead, o.shape[-1]) for o in outs]

    spec = spec_of(call, target, None if norm is None else float(norm[1]))
    if backend == "cpu":
        artifact = primitive.CpuKernel(spec.name())
    else:
        artifact = _compiled(spec, row_bucket(rows), target, shape, settings.generation(), route)
    scalars = {"M": rows, "K": K, **{f"N{i}": n for i, n in enumerate(Ns)}}
    if backend == "cuda":
        compiler = None if route is None else route.compiler
        outs = _run_cuda(call, artifact, scalars, s, stream, plannable and not any(call.casts()), compiler)
        _record(call, backend, artifact.entry)
        return outs
    inputs = [x2, *weight_inputs(call.weights, call.biases)]
    if res2 is not None:
        inputs.append(res2)
    weights, biases = list(call.weights), list(call.biases)

    def batched(xb: mx.array, rb: mx.array | None) -> list[mx.array]:  # under mx.vmap: more rows
        return run(check(call.op, xb, weights, biases, call.epilogue, rb), stream)

    outs = differentiable(
        lambda arrays: primitive.launch(artifact, arrays, call, rows, scalars, backend, s),
        lambda arrays: reference_of_flat(arrays, weights, biases, call.epilogue, res2 is not None),
        inputs,
        batched,
        res2 is not None,
    )
    _record(call, backend, artifact.entry)
    return outs if len(lead) == 1 else [o.reshape(*lead, n) for o, n in zip(outs, call.out_ns)]


def _norm_first(call: Call, norm: Norm, s: mx.Stream, stream: StreamLike, plannable: bool) -> list[mx.array]:
    """The norm as its own op (mx.fast.rms_norm), then the product; on CUDA a plan for the pair."""
    xn = mx.fast.rms_norm(call.x, norm[0], norm[1], stream=s)
    outs = run(check(call.op, xn, call.weights, call.biases, call.epilogue, call.residual), stream)
    if plannable:
        key = plan_key(call.op, xn, list(call.weights), list(call.biases), call.epilogue, call.residual)
        inner = None if key is None else _PLANS.get(key)
        if inner is not None:  # the next such call: the norm, then this plan, without the checks
            outer = plan_key(call.op, call.x, list(call.weights), list(call.biases), call.epilogue, call.residual, norm)
            if outer is not None:
                keep_plan(outer, cuda_launch.NormFirstPlan(inner, float(norm[1])))
    return outs


def _run_cuda(
    call: Call, artifact, scalars, s: mx.Stream, stream: StreamLike, plannable: bool, compiler: str | None = None
) -> list[mx.array]:
    plan = cuda_launch.plan_of(
        artifact, call.x, call.residual, call.out_dtype, call.rows, call.columns, scalars, call.lead, call.out_ns,
        compiler,
    )  # fmt: skip
    weights, biases = list(call.weights), list(call.biases)
    if settings.current().cuda_gradients:
        # opt-in: it passed the H200 gradient check, but what it costs an eager call is unmeasured
        inputs = plan.inputs_with(call.x, weight_inputs(weights, biases), call.residual)
        return differentiable(
            lambda arrays: plan.launch(arrays, s),
            lambda arrays: reference_of_flat(arrays, weights, biases, call.epilogue, call.residual is not None),
            inputs,
        )
    outs = plan.run(call.x, weights, biases, call.residual, None if stream is None else s, call.norm)
    if plannable:
        key = plan_key(call.op, call.x, weights, biases, call.epilogue, call.residual, call.norm)
        if key is not None:
            keep_plan(key, plan)
    return outs


def reference_of_flat(arrays, weights, biases, epilogue, has_residual) -> list[mx.array]:
    """The stock composition over the kernel's flat inputs (x, per weight its arrays and bias, the
    residual): what the kernels' gradients follow."""
    it = iter(arrays)
    x = next(it)
    ws, bs = [], []
    for w, b in zip(weights, biases):
        if isinstance(w, QuantizedWeight):
            ws.append(w.with_arrays([next(it) for _ in w.arrays()]))
        else:
            ws.append(next(it))
        bs.append(next(it) if b is not None else None)
    res = next(it) if has_residual else None
    return fused_reference(x, ws, bs, epilogue, res)


# -- launch plans (CUDA) ---------------------------------------------------------------------
_PLANS: dict[tuple, cuda_launch.CudaPlan | cuda_launch.NormFirstPlan] = {}
_PLANS_LIMIT = 4096
_GENERATION = [0]


def keep_plan(key: tuple, plan) -> None:
    """Keep a checked call's plan for the next call with its key (at most _PLANS_LIMIT at once)."""
    if len(_PLANS) >= _PLANS_LIMIT:
        _PLANS.clear()
    _PLANS[key] = plan


def plan_key(op, x, weights, biases, epilogue, residual, norm: Norm | None = None) -> tuple | None:
    """What a call's checks and plan depend on besides its arrays' data: the shapes and dtypes of
    every array, the quantization settings, the default device's type, the settings' reload
    count and the tuned table's state; None for arguments the full path must look at (and reject)."""
    if type(x) is not mx.array or type(weights) is not list or type(biases) is not list:
        return None
    # the default device's type picks the backend (a Device itself hashes by identity)
    key = [op, epilogue, x.shape, x.dtype, mx.default_device().type, settings.generation(), tuned.state()]
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


def has_plans() -> bool:
    return bool(_PLANS)


def replay(op, x, weights, biases, epilogue, residual, stream, norm: Norm | None = None) -> list[mx.array] | None:
    """The outputs of a call like one already checked and planned (only its arrays differ), or None."""
    if stream is not None or not _PLANS or tracing():
        return None
    key = plan_key(op, x, weights, biases, epilogue, residual, norm)
    plan = None if key is None else _PLANS.get(key)
    return None if plan is None else plan.run(x, weights, biases, residual, None, norm)


def planned(op, x, weights, biases, epilogue, residual, norm: Norm | None = None):
    """The plan the last call with these arguments' shapes, dtypes and settings left (CUDA), or None."""
    key = plan_key(op, x, weights, biases, epilogue, residual, norm)
    return None if key is None else _PLANS.get(key)


def plans_generation() -> int:
    """Counts clear_kernel_caches() calls: plans kept elsewhere (Projection) hold it."""
    return _GENERATION[0]


def forget_plans() -> None:
    """Forget call plans (the dispatch's, and through plans_generation those Projections keep)."""
    _PLANS.clear()
    _GENERATION[0] += 1


def clear_kernel_caches() -> None:
    """Forget compiled kernels (sources, binaries and emulator objects held in memory) and call plans."""
    _compiled.cache_clear()
    compile_projection.cache_clear()
    metal_builds.forget()
    cuda_compile.forget()
    emulated.emulator_object.cache_clear()
    binding_template.cache_clear()
    _PLANS.clear()
    _GENERATION[0] += 1


__all__ = [
    "backend_of",
    "capture",
    "clear_kernel_caches",
    "forget_plans",
    "cuda_max_rows",
    "has_plans",
    "keep_plan",
    "norm_inputs",
    "plan_key",
    "planned",
    "plans_generation",
    "replay",
    "run",
    "stream_of",
    "target_of",
    "tuning_site",
    "weight_inputs",
]
