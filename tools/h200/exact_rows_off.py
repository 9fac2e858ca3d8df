"""Runs a script with the affine tensor-core kernels' recomputation of rows holding an Inf or a NaN
left out (lower/mma.py's `exact_rows` emits nothing): the B side of an A/B of what that check costs
rows that are finite. Its kernels differ from the package's, so results are for measuring only.

    python tools/h200/exact_rows_off.py SCRIPT [ARGS ...]
    e.g. python tools/h200/exact_rows_off.py bench/h200.py --out off.json --modes chained ...
         python tools/h200/exact_rows_off.py tools/h200/precompile.py table ...  (kernels for it)
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mlx_metile.lower import mma  # noqa: E402

mma.MMALowering.exact_rows = lambda self, value: []

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) >= 2 else 2)
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")
