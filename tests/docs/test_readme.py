"""The README's code as a new user would run it: each Python block in a fresh interpreter, unchanged;
each shell block through `bash -n` (they install packages, so they are syntax-checked, not run)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", README.read_text(), flags=re.S)
PYTHON = [code for lang, code in BLOCKS if lang == "python"]
SHELL = [code for lang, code in BLOCKS if lang == "bash"]


def test_the_readme_has_code_to_run():
    assert len(PYTHON) >= 2 and len(SHELL) >= 2, [lang for lang, _ in BLOCKS]


@pytest.mark.parametrize("code", PYTHON, ids=[f"python{i}" for i in range(len(PYTHON))])
def test_python_blocks_run_unchanged(code, tmp_path):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, f"README block failed:\n{code}\n--- stderr:\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("code", SHELL, ids=[f"bash{i}" for i in range(len(SHELL))])
def test_shell_blocks_parse(code):
    done = subprocess.run(["bash", "-n"], input=code, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
