"""A line table for a module without debug info: every instruction of every function defined in the
AIR disassembly gets a debug location naming its own line of that file, so that a fault's code
address symbolizes to `kernel.air.ll:LINE` (the file the build keeps beside the object)."""

from __future__ import annotations

import re


def _next_id(lines: list[str]) -> int:
    ids = [int(m.group(1)) for line in lines for m in [re.match(r"^!(\d+) = ", line)] if m]
    return max(ids, default=-1) + 1


def add_line_table(lines: list[str], filename: str, directory: str) -> None:
    """Annotate `lines` (the disassembly, numbered from 1) in place; a module that has debug info
    (a compile unit) is left as it is."""
    if any(line.startswith("!llvm.dbg.cu = ") for line in lines):
        return
    nid = _next_id(lines)
    file_id, cu_id, type_id, flag_id = nid, nid + 1, nid + 2, nid + 3
    nid += 4
    nodes = [
        f'!{file_id} = !DIFile(filename: "{filename}", directory: "{directory}")',
        f'!{cu_id} = distinct !DICompileUnit(language: DW_LANG_C99, file: !{file_id}, producer: "mlx_metile.air", '
        "isOptimized: true, runtimeVersion: 0, emissionKind: LineTablesOnly)",
        f"!{type_id} = !DISubroutineType(types: !{{}})",
        f'!{flag_id} = !{{i32 2, !"Debug Info Version", i32 3}}',
    ]
    scope = None
    in_multiline = False
    for i, line in enumerate(lines):
        if line.startswith("define "):
            m = re.search(r"@\"?([\w.$]+)\"?\(", line)
            scope = nid
            nid += 1
            nodes.append(
                f'!{scope} = distinct !DISubprogram(name: "{m.group(1) if m else "?"}", scope: !{file_id}, '
                f"file: !{file_id}, line: {i + 1}, type: !{type_id}, scopeLine: {i + 1}, "
                f"spFlags: DISPFlagDefinition | DISPFlagOptimized, unit: !{cu_id})"
            )
            lines[i] = re.sub(r"\s*\{\s*$", f" !dbg !{scope} {{", line)
            continue
        if scope is None:
            continue
        if line.startswith("}"):
            scope = None
            continue
        if not line.startswith("  ") or line.lstrip().startswith(";"):
            continue
        stripped = line.rstrip()
        if in_multiline:  # a switch's cases: the location goes on its closing bracket
            if stripped.lstrip().startswith("]"):
                in_multiline = False
            else:
                continue
        elif stripped.endswith("["):
            in_multiline = True
            continue
        loc = nid
        nid += 1
        nodes.append(f"!{loc} = !DILocation(line: {i + 1}, column: 3, scope: !{scope})")
        lines[i] = f"{stripped}, !dbg !{loc}"
    flags = next((i for i, line in enumerate(lines) if line.startswith("!llvm.module.flags = !{")), None)
    if flags is None:
        nodes.append(f"!llvm.module.flags = !{{!{flag_id}}}")
    else:
        lines[flags] = re.sub(r"\}\s*$", f", !{flag_id}}}", lines[flags])
    nodes.append(f"!llvm.dbg.cu = !{{!{cu_id}}}")
    lines.extend(nodes)
