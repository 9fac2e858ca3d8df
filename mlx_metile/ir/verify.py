"""Structural checks on a tile program; errors name the op and the problem."""

from __future__ import annotations

from .nodes import BINARY_OPS, BITCASTS, DTYPES, For, Program, broadcast_shapes


class VerifyError(ValueError):
    pass


def verify(program: Program, *, bound: bool = True) -> None:
    defined: set[int] = {v.id for v in program.param_values.values()}
    buffers = {p.name: p for p in program.buffers}

    def need(v, where):
        if v.id not in defined:
            raise VerifyError(f"{program.name}: {where} uses {v!r} before it is defined")
        if bound and any(isinstance(d, str) for d in v.type.shape):
            raise VerifyError(f"{program.name}: {where}: shape {v.type.shape} has unbound meta-parameters")

    def check(nodes, depth):
        for n in nodes:
            if isinstance(n, For):
                for v in (n.start, n.stop, n.step, *n.init):
                    need(v, "for")
                for v in (n.start, n.stop, n.step):
                    if not v.type.is_scalar or v.type.dtype != "i32":
                        raise VerifyError(f"{program.name}: loop bounds must be i32 scalars")
                defined.update(v.id for v in (n.iv, *n.carried))
                check(n.body, depth + 1)
                for y, c in zip(n.yields, n.carried):
                    need(y, "yield")
                    if y.type != c.type:
                        raise VerifyError(f"{program.name}: loop yields {y.type} for a carried {c.type}")
                defined.update(v.id for v in n.results)
                continue
            where = f"{n.kind} op"
            if bound and n.kind == "meta":
                raise VerifyError(f"{program.name}: meta-parameter {n.attrs['name']} is not bound")
            for a in n.args:
                need(a, where)
            if n.kind == "program_id" and not 0 <= n.attrs["axis"] < program.grid_rank:
                raise VerifyError(f"{program.name}: program_id axis {n.attrs['axis']} out of range")
            if n.kind == "binary" and n.attrs["op"] not in BINARY_OPS:
                raise VerifyError(f"{program.name}: unknown binary op {n.attrs['op']}")
            if n.kind == "bitcast" and (n.args[0].type.dtype, n.attrs["dtype"]) not in BITCASTS:
                raise VerifyError(f"{program.name}: bitcast of {n.args[0].type.dtype} to {n.attrs['dtype']}")
            if n.kind == "cast" and n.attrs["dtype"] not in DTYPES:
                raise VerifyError(f"{program.name}: cast to unknown dtype")
            if n.kind in ("load", "store"):
                p = buffers.get(n.attrs["buffer"])
                if p is None:
                    raise VerifyError(f"{program.name}: {n.kind} of unknown buffer {n.attrs['buffer']!r}")
                if n.args[0].type.dtype not in ("i32", "u32"):
                    raise VerifyError(f"{program.name}: {n.kind} offsets must be integers")
                mask = (
                    n.args[-1]
                    if (n.kind == "load" and len(n.args) == 2) or (n.kind == "store" and len(n.args) == 3)
                    else None
                )
                if mask is not None:
                    if mask.type.dtype != "bool":
                        raise VerifyError(f"{program.name}: {n.kind} mask must be bool")
                    broadcast_shapes(n.args[0].type.shape, mask.type.shape)
                if n.kind == "store":
                    if not p.output:
                        raise VerifyError(f"{program.name}: store to input buffer {p.name!r}")
                    broadcast_shapes(n.args[0].type.shape, n.args[1].type.shape)
                elif p.output:
                    raise VerifyError(f"{program.name}: load from output buffer {p.name!r}")
            if n.kind == "dot" and depth == 0:
                raise VerifyError(f"{program.name}: dot must accumulate inside a loop over K")
            if n.result is not None:
                defined.add(n.result.id)

    check(program.body, 0)
