"""Text form of a tile program (MLX_METILE_DEBUG=ir)."""

from __future__ import annotations

from .nodes import For, Program


def format_program(program: Program) -> str:
    params = ", ".join(
        f"{p.name}: {p.dtype}*{' out' if p.output else ''}" if p.kind == "buffer" else f"{p.name}: i32"
        for p in program.params
    )
    meta = ", ".join(f"{k}={v}" for k, v in program.meta.items())
    lines = [f"program {program.name}({params}) grid_rank={program.grid_rank}" + (f" meta({meta})" if meta else "")]

    def emit(nodes, indent):
        pad = "  " * indent
        for n in nodes:
            if isinstance(n, For):
                carry = ", ".join(f"{c!r} = {i!r}" for c, i in zip(n.carried, n.init))
                res = ", ".join(map(repr, n.results))
                lines.append(
                    f"{pad}{res} = for {n.iv!r} in range({n.start!r}, {n.stop!r}, {n.step!r}) carry({carry}) {{"
                )
                emit(n.body, indent + 1)
                lines.append(f"{pad}  yield {', '.join(map(repr, n.yields))}")
                lines.append(f"{pad}}}")
                continue
            attrs = " ".join(f"{k}={v}" for k, v in n.attrs.items())
            args = ", ".join(map(repr, n.args))
            head = f"{n.result!r} = " if n.result is not None else ""
            tail = f" : {n.result.type}" if n.result is not None else ""
            lines.append(f"{pad}{head}{n.kind}({args}){' ' + attrs if attrs else ''}{tail}")

    emit(program.body, 1)
    return "\n".join(lines)
