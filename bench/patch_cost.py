"""What `mt.patch` costs against loading the model, on the default device: a random-weight Llama
(bench/random_llama.py; int4 with group 64, 4 layers of hidden 1024 by default) saved with mlx-lm's
own save_model / save_config and a word-level tokenizer into a temporary directory; then, each
round, `mlx_lm.load` of that directory and `mt.patch` of the model it loaded (verification
included), with the report's phases. `import mlx_lm` is timed once in a fresh process. The first
round includes what a process does once (first calls) and verifies; with the verification record on
(MLX_METILE_VERIFY_RECORD, the default) the later rounds use the record the first one made (in the
cache root: point MLX_METILE_CACHE at an empty folder for a first round that verifies). The medians
are over the rounds after the first. `--tolerance` is patch()'s (0 by default; a bf16 model within it
of its float32 logits verifies without running the unpatched model).

    python -m bench.patch_cost --out bench/results/cpu-patch-cost-<date>.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IMPORT = "import time; t = time.perf_counter(); import mlx_lm; print(time.perf_counter() - t)"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--format", default="int4", choices=("bf16", "int4", "int8"))
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--intermediate", type=int, default=2816)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tolerance", type=float, default=0.0, help="patch()'s tolerance")
    p.add_argument("--out", type=Path, help="the JSON file")
    return p.parse_args(argv)


def save(path: Path, args: argparse.Namespace) -> None:
    """The model directory mlx_lm.load reads, nothing downloaded."""
    from mlx_lm.utils import save_config, save_model
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from .random_llama import random_llama

    model = random_llama(args.format, args.layers, args.hidden, args.intermediate, args.head_dim)
    config = dict(
        model_type="llama", hidden_size=args.hidden, num_hidden_layers=args.layers,
        intermediate_size=args.intermediate, num_attention_heads=args.hidden // args.head_dim,
        num_key_value_heads=args.hidden // args.head_dim // 4, rms_norm_eps=1e-5,
        vocab_size=model.args.vocab_size, tie_word_embeddings=False,
    )  # fmt: skip
    if args.format != "bf16":
        config["quantization"] = {"group_size": 64, "bits": int(args.format[3:])}
    save_model(path, model)
    save_config(config, path / "config.json")
    vocab = {f"w{i}": i for i in range(model.args.vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="w0", eos_token="w1").save_pretrained(path)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    import mlx_lm

    import mlx_metile as mt
    from mlx_metile.cli.machine import facts

    import_s = float(subprocess.run([sys.executable, "-c", IMPORT], capture_output=True, text=True, check=True).stdout)
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        save(Path(tmp), args)
        size = sum(f.stat().st_size for f in Path(tmp).iterdir())
        for i in range(args.rounds):
            start = time.perf_counter()
            model, _ = mlx_lm.load(tmp)
            loaded = time.perf_counter()
            report = mt.patch(model, tolerance=args.tolerance)
            done = time.perf_counter()
            rounds.append(
                {
                    "load_s": loaded - start,
                    "patch_s": done - loaded,
                    "phases_s": report.phases,
                    "patched_model_runs": report.runs,
                    "record": report.record,
                    "criterion": report.criterion,
                    "replaced": len(report.replaced),
                    "declined": len(report.declined),
                }
            )
            print(f"round {i + 1}: load {loaded - start:.2f} s, patch {done - loaded:.1f} s ({report.timings()})")
    later = rounds[1:] or rounds
    out = {
        **facts(),
        "load_average": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        "model": {k: getattr(args, k) for k in ("format", "layers", "hidden", "intermediate", "head_dim")},
        "tolerance": args.tolerance,
        "model_bytes": size,
        "import_mlx_lm_s": import_s,
        "rounds": rounds,
        "median_load_s": statistics.median(r["load_s"] for r in later),
        "median_patch_s": statistics.median(r["patch_s"] for r in later),
        "report": str(report),
    }
    text = json.dumps(out, indent=1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(
        f"import mlx_lm {import_s:.2f} s; median load {out['median_load_s']:.2f} s, patch {out['median_patch_s']:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
