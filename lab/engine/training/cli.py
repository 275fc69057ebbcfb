"""Train the bundled tokenizer, target and draft models: `python -m lab.engine.training`.

Corpus: this Python's own standard-library source (freely licensed, on every machine), chosen
deterministically and recorded in `corpus_manifest.txt`. Models: Hugging Face
`LlamaForCausalLM` (the reference implementation), saved with `save_pretrained`, so the
safetensors names are exactly the HF names the engine loads. Nothing here imports the engine.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from lab.engine.training.corpus import (
    DEFAULT_CORPUS_MB,
    read_texts,
    select_corpus,
    stdlib_dir,
    write_manifest,
)
from lab.engine.training.loop import TrainSettings, evaluate_loss, greedy_sample, train_model
from lab.engine.training.models import draft_config, target_config
from lab.engine.training.report import log_header, model_record, write_readme
from lab.engine.training.tokenizer import token_stream, train_tokenizer

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM

SAMPLE_PROMPTS = ["def fib(", "import os\n", "class "]
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "weights"


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lab.engine.training", description=__doc__)
    p.add_argument("--minutes", type=float, default=18.0, help="budget for both models")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="weights directory")
    p.add_argument("--corpus-mb", type=float, default=DEFAULT_CORPUS_MB, help="corpus cap, 1e6 B")
    p.add_argument("--vocab-size", type=int, default=3072)
    # On shared cores use 1: oversubscribed torch threads ran 3-10x slower per step here.
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


# Budget shares (rest: data, eval, samples). The draft is ~5x faster per token, so it gets less.
PLAN = [("target", target_config, 0.85), ("draft", draft_config, 0.10)]


def main(argv: list[str] | None = None) -> dict:
    """Build corpus, tokenizer, target and draft; write everything under --out."""
    args, start = _parse(argv), time.perf_counter()
    torch.set_num_threads(args.threads)
    args.out.mkdir(parents=True, exist_ok=True)
    root = stdlib_dir()
    files = select_corpus(root, int(args.corpus_mb * 1e6))
    write_manifest(files, args.out / "corpus_manifest.txt")
    texts = {split: read_texts(root, files, split) for split in ("train", "heldout")}
    tokenizer = train_tokenizer(texts["train"], args.vocab_size)
    tokenizer.save(str(args.out / "tokenizer.json"))
    ids = {split: token_stream(tokenizer, texts[split]) for split in texts}
    log = log_header(args, argv, files, tokenizer, ids)
    for name, make_config, share in PLAN:
        torch.manual_seed(args.seed)
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM(make_config(tokenizer.get_vocab_size()))
        settings = TrainSettings(share * args.minutes * 60, seed=args.seed, device=args.device)
        stats = train_model(model, ids["train"], settings, label=name)
        model = _round_to_bf16(model)
        heldout = evaluate_loss(model, ids["heldout"])
        log["models"][name] = model_record(model, stats, settings, heldout)
        if name == "target":
            log["samples"] = [greedy_sample(model, tokenizer, p, 48) for p in SAMPLE_PROMPTS]
        model.to(torch.bfloat16).save_pretrained(args.out / name)
        print(f"{name}: {stats.steps} steps, held-out ppl {math.exp(heldout):.2f}", flush=True)
    log["total_wall_s"] = time.perf_counter() - start
    (args.out / "training_log.json").write_text(json.dumps(log, indent=2) + "\n")
    write_readme(args.out, log)
    return log


def _round_to_bf16(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """fp32 copy of the weights as they will be saved (bf16), so eval sees the real file."""
    return model.to(torch.bfloat16).to(torch.float32)
