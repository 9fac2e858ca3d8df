"""A rank that does what it is told, for the launcher's own tests (tests/integrations/test_launch.py):

    python -m tests.integrations.toy_rank OUT BEHAVIOUR

ok: every rank writes its JSON; fail: rank 1 prints a message and exits 1; hang: rank 1 sleeps.
Each rank writes OUT/rank{r}.pid first, so the test can see the process is gone afterwards."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    out, behaviour = Path(argv[0]), argv[1]
    rank = int(os.environ["MLX_RANK"])
    (out / f"rank{rank}.pid").write_text(str(os.getpid()))
    with open(out / f"rank{rank}.log", "w") as log:
        if rank == 1 and behaviour == "fail":
            print("rank 1: deliberate failure", file=log, flush=True)
            return 1
        if rank == 1 and behaviour == "hang":
            log.write("rank 1: sleeping\n")
            log.flush()
            time.sleep(600)
    (out / f"rank{rank}.json").write_text(json.dumps({"rank": rank}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
