"""Append the hand-written bulk-copy prototypes (bulk_proto.cuh) to a harness that
generated_harness.py wrote with one variant (`default=`), so that both are timed and
compared in one binary:  python bench/cuda_probe/proto_harness.py IN.cu OUT.cu CONFIG ...
CONFIG: "KC,CT,D,MINB" (one wave of blocks), "pKC,D,MINB,PER_SM" (persistent) or
"wKC,D,MINB,PER_SM" (warp-specialized). Prototype only: 4-bit group 64, columns a multiple of
16 * CT, K a multiple of KC."""

from __future__ import annotations

import re
import sys
from pathlib import Path

LAUNCHERS = {"p": "launchp", "w": "launchws"}  # a config's prefix: persistent, warp-specialized


def main() -> None:
    src, out, *configs = sys.argv[1:]
    text = Path(src).read_text()
    block = re.search(r"    if \(rows > 0 && rows <= 1\) \n    \{  // variant default m1\n.*?\n    \}\n", text, re.S)
    assert block, "no default m1 variant"
    template = block.group(0)
    launch = re.search(r"      auto launch = \[&\]\(int p\) \{\n.*?\n      \};\n", template, re.S).group(0)
    extra = []
    for config in configs:
        name = "bulk " + config
        body = template.replace("if (rows > 0 && rows <= 1) ", "if (rows <= 8) ")
        body = body.replace("variant default m1", f"variant {name}").replace('\\"default m1\\"', f'\\"{name}\\"')
        body = body.replace(
            launch,
            "      auto launch = [&](int p) {\n"
            f"        proto::{LAUNCHERS[config[0]] if config[0] in LAUNCHERS else 'launch'}<{config.lstrip('pw')}>(x, sets[p][0], sets[p][1], sets[p][2], y, rows, K, N[0]);\n"
            "      };\n",
        )
        body = re.sub(r"      cudaFuncSetAttribute\(.*?\n", "", body)
        body = body.replace("true ? ref.data()", "false ? ref.data()").replace("true ? r :", "false ? r :")
        extra.append(body)
    end = text.rindex("\n  }\n  return 0;")
    text = '#include "../bulk_proto.cuh"\n' + text[:end] + "\n" + "".join(extra) + text[end:]
    Path(out).write_text(text)


if __name__ == "__main__":
    main()
