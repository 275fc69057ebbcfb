"""What a training run writes besides the weights: training_log.json and README.md."""

from __future__ import annotations

import datetime
import math
import platform
import sys
from dataclasses import asdict
from pathlib import Path

import torch
from tokenizers import Tokenizer

from lab.engine.training.corpus import SourceFile
from lab.engine.training.loop import TrainSettings, TrainStats, unigram_loss
from lab.engine.training.models import count_params
from lab.engine.training.tokenizer import SPECIAL_TOKENS

SHAPE_KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads"]
SHAPE_KEYS += ["intermediate_size", "max_position_embeddings"]


def model_record(model, stats: TrainStats, s: TrainSettings, heldout_loss: float) -> dict:
    return {
        "params": count_params(model),
        "config": {k: getattr(model.config, k) for k in SHAPE_KEYS},
        "settings": asdict(s),
        **asdict(stats),
        "heldout_loss": heldout_loss,
        "heldout_perplexity": math.exp(heldout_loss),
    }


README_HEAD = """# Bundled weights for lab/engine

Trained from scratch by `{command}` ({date}; Python {python}, torch {torch},
transformers {transformers}; {threads} CPU threads, bf16 autocast, AdamW + cosine).

- `tokenizer.json`: byte-level BPE, vocab {vocab}; `<|bos|>`=0, `<|eos|>`=1, `<|pad|>`=2.
  Encoding prepends `<|bos|>`; decoding drops special tokens (exact round trip).
- `target/`, `draft/`: HF `LlamaForCausalLM` (`config.json` + `model.safetensors`, bf16),
  GQA, untied `lm_head`, context 512.
- Corpus: {files_train} train / {files_heldout} held-out CPython stdlib files
  ({bytes_train:,} / {bytes_heldout:,} bytes; {heldout_bytes_per_token:.2f} bytes/token
  held out), listed with sha256 in `corpus_manifest.txt`. Details: `training_log.json`.
  No-context baseline: a unigram model scores held-out perplexity
  {heldout_unigram_perplexity:.0f}.

| model | params | steps | tokens seen | tokens/s | wall s | train loss | held-out loss | ppl |
|---|---|---|---|---|---|---|---|---|
"""
README_ROW = (
    "| {name} | {params:,} | {steps} | {tokens_seen:,} | {tokens_per_s:.0f} | {wall_s:.0f} | "
    "{final_train_loss:.3f} | {heldout_loss:.3f} | {heldout_perplexity:.2f} |\n"
)


def write_readme(out: Path, log: dict) -> None:
    """A human summary of training_log.json, with the target's greedy samples."""
    text = README_HEAD.format(**log, **log["corpus"], vocab=log["tokenizer"]["vocab_size"])
    text += "".join(README_ROW.format(name=k, **m) for k, m in log["models"].items())
    text += "\nLosses are nats/token; held-out loss is fp32 on the saved (bf16) weights.\n"
    text += "\n## Greedy samples (target, HF `generate(do_sample=False, max_new_tokens=48)`,"
    text += " no repetition penalty)\n"
    text += "".join(f"\n```python\n{sample}\n```\n" for sample in log["samples"])
    (out / "README.md").write_text(text)


def log_header(args, argv, files: list[SourceFile], tokenizer: Tokenizer, ids: dict) -> dict:
    import tokenizers
    import transformers

    nbytes = {sp: sum(f.num_bytes for f in files if f.split == sp) for sp in ids}
    return {
        "command": " ".join(
            ["python -m lab.engine.training", *(sys.argv[1:] if argv is None else argv)]
        ),
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
        **{"threads": args.threads, "device": args.device, "seed": args.seed},
        "corpus": {
            **{f"files_{sp}": sum(f.split == sp for f in files) for sp in ids},
            **{f"bytes_{sp}": nbytes[sp] for sp in ids},
            **{f"tokens_{sp}": len(ids[sp]) for sp in ids},
            "heldout_bytes_per_token": nbytes["heldout"] / len(ids["heldout"]),
            "heldout_unigram_perplexity": math.exp(
                unigram_loss(ids["train"], ids["heldout"], tokenizer.get_vocab_size())
            ),
        },
        "tokenizer": {"vocab_size": tokenizer.get_vocab_size(), "special": SPECIAL_TOKENS},
        "models": {},
    }
