"""Start real ranks with `mlx.launch` (the ring backend over 127.0.0.1) and collect what each wrote.

mlx.launch returns 0 even when a rank fails (it logs a warning and stops the others), so a rank
counts as done only when it wrote its rank{r}.json; otherwise the run fails with every rank's own
output, the failing ranks first."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = "from mlx._distributed_utils.launch import main; main()"  # what the mlx.launch script runs


class RankFailure(AssertionError):
    pass


def _free_ports(n: int) -> int:
    """A base port such that base .. base+n-1 are free on 127.0.0.1 now (the ring listens there)."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - n)
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no run of free ports on 127.0.0.1")


def launch(ranks: int, module: str, args: list[str], out: Path, timeout: float) -> list[dict]:
    """Run `python -m module out *args` on `ranks` ring ranks; every rank's JSON, in rank order.
    Raises RankFailure with the ranks' logs where a rank did not finish, or when the whole run
    took longer than `timeout` seconds (then every rank is killed)."""
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-c", LAUNCHER, "--backend", "ring", "--hosts", "127.0.0.1", "-n", str(ranks)]
    command += ["--starting-port", str(_free_ports(ranks)), "--cwd", str(ROOT), "--"]
    command += [sys.executable, "-m", module, str(out), *args]
    launcher_log = out / "launcher.log"
    with open(launcher_log, "w") as log:
        # stdin: a pipe never written to (the launcher forwards its stdin to the ranks and would
        # spin on an always-readable /dev/null); a process group of its own (start_new_session),
        # so a timeout kills every rank
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=log, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            timed_out = True
        finally:
            proc.stdin.close()
    done = [(out / f"rank{r}.json").exists() for r in range(ranks)]
    if timed_out or not all(done):
        order = sorted(range(ranks), key=lambda r: done[r])
        why = f"timed out after {timeout:.0f} s" if timed_out else "a rank failed"
        text = [f"{why}: ranks done {done}"]
        for r in order:
            path = out / f"rank{r}.log"
            body = path.read_text()[-6000:] if path.exists() else "(no log: the rank did not start)"
            text.append(f"--- rank {r} ({'done' if done[r] else 'FAILED'}) ---\n{body}")
        text.append(f"--- mlx.launch ---\n{launcher_log.read_text()[-3000:]}")
        raise RankFailure("\n".join(text))
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]
