"""The `mlx-metile` command run as a user types it (a subprocess of the installed script), its
output, files and exit codes checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import mlx_metile

SCRIPT = shutil.which("mlx-metile", path=str(Path(sys.executable).parent)) or "mlx-metile"


def run(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


@pytest.mark.parametrize(
    "args", [["--version"], ["generate", "--version"], ["bench", "--version"], ["info", "--version"]]
)
def test_version_everywhere(args):
    done = run(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"mlx-metile {mlx_metile.__version__} (MLX ")


def test_generate_compare_matches_stock_tokens(tiny_model):
    done = run("generate", "--model", str(tiny_model), "--prompt", "the a of", "--max-tokens", "8", "--compare")
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "== stock MLX" in out and "== mlx-metile" in out
    assert "greedy tokens match: yes (8 tokens)" in out, out
    assert "qkv          2 replaced (q4g32)" in out and "mlp_swiglu   2 replaced (q4g32)" in out, out
    for figure in ("Prompt: 3 tokens,", "Generation: 8 tokens,", "Peak memory:"):
        assert out.count(figure) == 2, (figure, out)
    # the streamed texts of both runs are the same line
    lines = out.splitlines()
    texts = [lines[lines.index(head) + 1] for head in ("== stock MLX", "== mlx-metile")]
    assert texts[0] == texts[1] and texts[0].strip()


def test_generate_speculative_with_a_patched_draft(tiny_model, tiny_draft):
    plain = run("generate", "--model", str(tiny_model), "--prompt", "the a of", "--max-tokens", "6")
    spec = run(
        "generate", "--model", str(tiny_model), "--prompt", "the a of", "--max-tokens", "6",
        "--draft-model", str(tiny_draft), "--num-draft", "2",
    )  # fmt: skip
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr[-2000:]
    assert "draft model: " in spec.stdout and " replaced" in spec.stdout
    # greedy speculative decoding gives plain greedy decoding's text
    text = [ln for ln in plain.stdout.splitlines() if ln.startswith("Prompt:")]
    assert (
        text
        and plain.stdout.split("\nPrompt:")[0].splitlines()[-1] == spec.stdout.split("\nPrompt:")[0].splitlines()[-1]
    )


@pytest.mark.parametrize(
    "model,message",
    [
        ("/nonexistent/model/dir", "no such model directory"),
        ("{dir}", "is not an mlx-lm model directory (it has no config.json)"),
    ],
)
def test_generate_refuses_what_is_no_model(tmp_path, model, message):
    done = run("generate", "--model", model.format(dir=tmp_path), "--prompt", "hi")
    assert done.returncode == 2
    assert "mlx-metile generate: error: --model: " in done.stderr and message in done.stderr, done.stderr


def test_bench_writes_json_markdown_and_png(tmp_path):
    out = tmp_path / "results"
    done = run(
        "bench",
        "--quick",
        "--formats",
        "int4",
        "mxfp4",
        "--rows",
        "1",
        "4",
        "--k",
        "256",
        "--n",
        "128",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    files = sorted(p.suffix for p in out.iterdir())
    assert files == [".json", ".md", ".png"], files
    data = json.loads(next(out.glob("*.json")).read_text())
    assert data["machine_info"]["mlx_metile_version"] == mlx_metile.__version__
    cases = {(b["extra_info"]["format"], b["extra_info"]["rows"], b["extra_info"]["impl"]) for b in data["benchmarks"]}
    assert cases == {(f, r, i) for f in ("int4", "mxfp4") for r in (1, 4) for i in ("mlx_metile", "stock")}
    assert all(b["stats"]["rounds"] == 5 and b["stats"]["median"] > 0 for b in data["benchmarks"])
    assert next(out.glob("*.png")).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = next(out.glob("*.md")).read_text()
    assert table.count("| mxfp4 |") == 2 and table.count("| int4 |") == 2 and table in done.stdout + "\n"


def test_bench_refuses_an_unknown_format(tmp_path):
    done = run("bench", "--formats", "int7", "--out", str(tmp_path))
    assert done.returncode == 2 and "--formats: int7 not among" in done.stderr


def test_info_names_routes_and_caches():
    done = run("info")
    assert done.returncode == 0, done.stderr
    for words in ("routes:", "CPU path (C++)", "Metal emulator", "CUDA", "NAX", "caches:"):
        assert words in done.stdout, done.stdout


def test_cache_clear_empties_the_cache(tmp_path):
    root = tmp_path / "cache"
    (root / "emu").mkdir(parents=True)
    (root / "emu" / "kernel.so").write_bytes(b"x" * 2048)
    env = {"MLX_METILE_CACHE": str(root)}
    shown = run("cache", env=env)
    assert shown.returncode == 0 and "emu" in shown.stdout and "2.0 KB" in shown.stdout, shown.stdout
    dry = run("cache", "clear", "--dry-run", env=env)
    assert dry.returncode == 0 and (root / "emu" / "kernel.so").exists() and "would free 2.0 KB" in dry.stdout
    done = run("cache", "clear", env=env)
    assert done.returncode == 0 and not (root / "emu").exists() and "freed 2.0 KB" in done.stdout


def test_generate_says_when_patch_used_its_verification_record(tiny_model, tmp_path):
    env = {"MLX_METILE_CACHE": str(tmp_path / "cache"), "MLX_METILE_VERIFY_RECORD": "1"}
    args = ("generate", "--model", str(tiny_model), "--prompt", "the a of", "--max-tokens", "2")
    first, second = run(*args, env=env), run(*args, env=env)
    assert first.returncode == 0 and second.returncode == 0, second.stderr[-2000:]
    assert "  verified     max |logits - " in first.stdout and "; recorded " in first.stdout, first.stdout
    key = first.stdout.split("; recorded ")[1].split()[0]
    assert f"  verified     cached record {key} (max |logits - " in second.stdout, second.stdout
    assert "float32 reference" in first.stdout and "float32 reference" not in second.stdout
