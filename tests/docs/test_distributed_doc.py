"""docs/DISTRIBUTED.md's script, started by the doc's own one-machine command (`mlx.launch --backend
ring --hosts 127.0.0.1 -n 2 python script.py`) on a tiny 4-bit qwen3 saved with mlx-lm's
utilities: both ranks patch the sharded model and generate, as a user would run it."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from mlx_metile.integrations.launch import LAUNCHER, free_port_base

from ..integrations.sharded_models import save

DOC = Path(__file__).resolve().parents[2] / "docs" / "DISTRIBUTED.md"
TIMEOUT = 300.0


def _doc_parts() -> tuple[str, list[str]]:
    text = DOC.read_text()
    script = re.search(r"```python\n(.*?)```", text, flags=re.S).group(1)
    command = re.search(r"One machine, several ranks[^`]*`(mlx\.launch [^`]+)`", text).group(1)
    return script, shlex.split(command)


def test_the_documented_script_runs_on_two_ring_ranks(tmp_path):
    script, command = _doc_parts()
    assert command[0] == "mlx.launch" and command[-2:] == ["python", "script.py"], command
    assert '"path/or/hf-repo"' in script
    model_dir = save(tmp_path / "qwen3-q4g32", "qwen3", "q4g32")
    (tmp_path / "script.py").write_text(script.replace('"path/or/hf-repo"', repr(str(model_dir))))
    # `python` is the environment's interpreter, as after activating it; a free port for the ring
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    argv = [sys.executable, "-c", LAUNCHER, "--starting-port", str(free_port_base(2)), *command[1:]]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"the ranks outlived {TIMEOUT} s:\n{out[-4000:]}") from None
    # mlx.launch exits 0 even when a rank fails; it says so in a warning
    assert proc.returncode == 0 and "exited with code" not in out, out[-4000:]
    lines = out.splitlines()
    head = [i for i, line in enumerate(lines) if line.startswith("mlx_metile.patch (rank 0 of 2)")]
    assert head and any("replaced qkv" in line for line in lines), out[-4000:]
    body = [i for i, line in enumerate(lines) if i > head[0] and line.startswith("  ")]  # the report's lines
    assert any(line.strip() for line in lines[body[-1] + 1 :]), out[-4000:]  # then rank 0's streamed text
