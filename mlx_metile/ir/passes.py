"""Program-to-program transformations that every backend needs."""

from __future__ import annotations

from .nodes import For, Op, Program, TileType, Value


def bind_meta(program: Program, values: dict[str, int]) -> Program:
    """Substitute meta-parameters (tile sizes) by integers in every type and attribute."""
    missing = [m for m in program.meta if m not in values]
    if missing:
        raise ValueError(f"{program.name}: meta-parameters not bound: {missing}")
    mapping: dict[int, Value] = {}

    def dim(d):
        return values[str(d)] if isinstance(d, str) else d

    def val(v: Value) -> Value:
        if v.id not in mapping:
            mapping[v.id] = Value(TileType(v.type.dtype, tuple(dim(d) for d in v.type.shape)), v.name)
        return mapping[v.id]

    def attrs(a: dict) -> dict:
        out = dict(a)
        for key in ("n",):
            if key in out:
                out[key] = dim(out[key])
        if "shape" in out:
            out["shape"] = tuple(dim(d) for d in out["shape"])
        return out

    def body(nodes):
        out = []
        for n in nodes:
            if isinstance(n, For):
                out.append(
                    For(
                        val(n.iv),
                        val(n.start),
                        val(n.stop),
                        val(n.step),
                        tuple(map(val, n.init)),
                        tuple(map(val, n.carried)),
                        body(n.body),
                        tuple(map(val, n.yields)),
                        tuple(map(val, n.results)),
                    )
                )
            elif n.kind == "meta":
                out.append(Op("const", (), {"value": values[n.attrs["name"]]}, val(n.result)))
            else:
                out.append(Op(n.kind, tuple(map(val, n.args)), attrs(n.attrs), val(n.result) if n.result else None))
        return out

    new_body = body(program.body)
    params = {k: val(v) for k, v in program.param_values.items()}
    return Program(
        program.name, list(program.params), new_body, program.grid_rank, {k: values[k] for k in program.meta}, params
    )
