"""Start ranks on this host with `mlx.launch` (the ring backend over 127.0.0.1) and collect what
they wrote: the driver of the tensor-parallel tests (tests/integrations) and benchmark
(bench/sharded_decode.py).

mlx.launch returns 0 even when a rank fails (it logs a warning and stops the others), so a rank
counts as done only when it wrote its rank{r}.json; otherwise the run fails with every rank's own
log (rank{r}.log, where the rank program writes one), the failing ranks first."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

LAUNCHER = "from mlx._distributed_utils.launch import main; main()"  # what the mlx.launch script runs


class RankFailure(RuntimeError):
    """A rank did not write its result, or the ranks outlived the timeout (then all were killed)."""


def free_port_base(n: int) -> int:
    """A base port such that base .. base+n-1 are free on 127.0.0.1 now (the ring listens there)."""
    if n < 1:
        raise ValueError(f"n: expected at least 1 port, got {n}")
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


def launch(
    ranks: int,
    program: Sequence[str],
    out: Path,
    timeout: float,
    *,
    cwd: Path,
    results: Sequence[int] | None = None,
    log: bool = True,
) -> list[dict]:
    """Run `program` (a command line: `[sys.executable, "-m", module, ...]`) on `ranks` ring ranks
    from `cwd`; the JSON each rank of `results` (default: every rank) wrote to out/rank{r}.json,
    in that order. log: the launcher's own output goes to out/launcher.log (else to this process's
    stdout and stderr, as the ranks' output then does). Raises RankFailure with the ranks' logs
    where one of `results` did not write its JSON, or when the whole run took longer than
    `timeout` seconds (then every rank is killed)."""
    if ranks < 1:
        raise ValueError(f"ranks: expected at least 1, got {ranks}")
    wanted = list(range(ranks)) if results is None else list(results)
    if not wanted or any(not 0 <= r < ranks for r in wanted):
        raise ValueError(f"results: expected ranks of 0..{ranks - 1}, got {wanted}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-c", LAUNCHER, "--backend", "ring", "--hosts", "127.0.0.1", "-n", str(ranks)]
    command += ["--starting-port", str(free_port_base(ranks)), "--cwd", str(cwd), "--", *program]
    launcher_log = out / "launcher.log"
    sink = open(launcher_log, "w") if log else None
    try:
        # stdin: a pipe never written to (the launcher forwards its stdin to the ranks and would
        # spin on an always-readable /dev/null); a process group of its own (start_new_session),
        # so a timeout kills every rank
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=sink, stderr=sink, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            timed_out = True
        finally:
            proc.stdin.close()
    finally:
        if sink is not None:
            sink.close()
    done = {r: (out / f"rank{r}.json").exists() for r in range(ranks)}
    if timed_out or not all(done[r] for r in wanted):
        why = f"timed out after {timeout:.0f} s" if timed_out else "a rank failed"
        raise RankFailure(_failure(why, out, ranks, wanted, done, launcher_log if log else None))
    return [json.loads((out / f"rank{r}.json").read_text()) for r in wanted]


def _failure(
    why: str, out: Path, ranks: int, wanted: list[int], done: dict[int, bool], launcher_log: Path | None
) -> str:
    """The message of a failed run: every rank's log, the ranks that wrote no result first."""
    text = [f"{why}: ranks done {[done[r] for r in range(ranks)]}"]
    for r in sorted(range(ranks), key=lambda r: done[r] or r not in wanted):
        state = "done" if done[r] else "FAILED" if r in wanted else "no result expected"
        path = out / f"rank{r}.log"
        body = path.read_text()[-6000:] if path.exists() else "(no log of its own)"
        text.append(f"--- rank {r} ({state}) ---\n{body}")
    if launcher_log is not None:
        text.append(f"--- mlx.launch ---\n{launcher_log.read_text()[-3000:]}")
    return "\n".join(text)
