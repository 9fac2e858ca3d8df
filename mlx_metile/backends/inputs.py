"""The kernel inputs a call's arrays become, in the order the tile program declares them."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import mlx.core as mx

from .. import formats


def weight_inputs(weights: Sequence, biases: Sequence[mx.array | None]) -> list[mx.array]:
    """Per weight its arrays (a dense array, or packed weight, scales and biases), then its bias."""
    out: list[mx.array] = []
    for w, b in zip(weights, biases):
        out += formats.inputs(w)
        if b is not None:
            out.append(b)
    return out


def norm_inputs(norm) -> list[mx.array]:
    """The kernel input of a fused RMSNorm (its weight), or none."""
    return [] if norm is None else [norm[0]]


@lru_cache(maxsize=1024)
def binding_template(artifact) -> tuple[tuple[int, int | str], ...]:
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
