"""The CPU, emulator and Metal launch: one `TileKernel` node of the C++ primitive
(src/tile_kernel.cpp), evaluated lazily by MLX. The primitive never compiles tile programs: the
CPU path runs its C++ implementation, the emulator the object built from the artifact's MSL (or
its metallib's AIR), Metal the artifact by its route - MSL source, a metallib or a patched archive
in the cache (backends/metal_builds.py). A NAX kernel goes to Metal only where MLX runs NAX."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from ..spec import EPILOGUE_CODES
from . import metal_device
from .emulated import emulator_object
from .extension import require
from .inputs import binding_template
from .metal_builds import files

# WeightFormat.mode -> src/tile_kernel.h QuantMode (dense weights: 0, told apart by bits 0)
QUANT_MODE_CODES = {"dense": 0, "affine": 0, "mxfp4": 1, "mxfp8": 2, "nvfp4": 3}


@dataclass(frozen=True)
class CpuKernel:
    """What the primitive holds on the C++ CPU path, which computes from the call's description
    (src/cpu/projection.cpp): no compiled code, so nothing is lowered for it."""

    entry: str  # the spec's name, for traces
    target: str = "cpu"
    route: str = "cpu"
    source: str = ""
    params: tuple = ()
    threads_per_group: tuple[int, int, int] = (1, 1, 1)

    @property
    def key(self) -> str:
        return "cpu:" + self.entry

    def grid(self, rows: int, cols: int) -> tuple[int, int, int]:
        return (1, 1, 1)


def launch(
    artifact,
    inputs: list[mx.array],
    call,
    rows: int,
    scalars: dict[str, int],
    backend: str,
    stream: mx.Stream,
) -> list[mx.array]:
    """The call's outputs ([rows, N] each) from `inputs` (x, the weights' arrays, the residual)."""
    ext = require()
    out_ns = call.out_ns
    bindings = [(kind, scalars[at] if kind == 2 else at) for kind, at in binding_template(artifact)]
    obj = emulator_object(artifact) if backend == "emulator" else ""
    library, archive = "", ""
    if backend == "metal":
        if artifact.schedule.nax and not metal_device.nax_available():
            raise RuntimeError(
                f"mlx_metile: {artifact.entry} is a NAX kernel ({artifact.schedule.kind}); MLX does not run NAX on "
                "this device (GPU generation >= 17 and macOS >= 26.2 needed)"
            )
        library, archive = files(artifact)
    return ext.tile_kernel(
        inputs,
        [[rows, n] for n in out_ns],
        [call.out_dtype] * len(out_ns),
        artifact.target,
        artifact.source if backend == "metal" and artifact.route == "msl" else "",  # only the Metal path compiles it
        artifact.entry,
        artifact.grid(rows, call.columns),
        artifact.threads_per_group,
        bindings,
        artifact.key,
        [f.bits for f in call.formats],
        [f.group_size for f in call.formats],
        [QUANT_MODE_CODES[f.mode] for f in call.formats],
        [int(f.has_bias) for f in call.formats],
        EPILOGUE_CODES[call.epilogue],
        call.residual is not None,
        obj,
        artifact.route,
        library,
        archive,
        stream=stream,
    )
