"""Train the bundled tokenizer, target and draft models: `python -m lab.engine.train`.

Corpus: this Python's own standard-library source (freely licensed, on every machine), chosen
deterministically and recorded in `corpus_manifest.txt`. Models: Hugging Face
`LlamaForCausalLM` (the reference implementation), saved with `save_pretrained`, so the
safetensors names are exactly the HF names the engine loads. Nothing here imports the engine.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import platform
import re
import sys
import sysconfig
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

if TYPE_CHECKING:  # transformers and tqdm load lazily: the corpus helpers are used at run time
    from transformers import LlamaConfig, LlamaForCausalLM

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD]  # ids 0, 1, 2 in this order
SKIP_DIRS = {"test", "tests", "idlelib", "turtledemo", "site-packages", "lib2to3"}
SKIP_DIRS |= {"encodings", "pydoc_data"}  # generated codec tables / pydoc topic dump
MAX_FILE_BYTES = 100_000  # larger stdlib files are mostly generated or one-off giants
HELDOUT_EVERY = 20  # every 20th selected file (sorted by path) is held out
SAMPLE_PROMPTS = ["def fib(", "import os\n", "class "]
DEFAULT_OUT = Path(__file__).resolve().parent / "weights"
DEFAULT_CORPUS_MB = 6.0  # corpus cap (1e6 bytes): ~1.6M train tokens, seen about twice a run


# ---------------------------------------------------------------- corpus


@dataclass(frozen=True)
class SourceFile:
    """One stdlib .py file: path relative to the stdlib root, sha256 of its bytes, size."""

    rel_path: str
    sha256: str
    num_bytes: int
    split: str  # "train" or "heldout"


def stdlib_dir() -> Path:
    """The directory holding this interpreter's standard-library .py files."""
    return Path(sysconfig.get_paths()["stdlib"])


def _candidates(root: Path) -> list[Path]:
    """Sorted stdlib .py files, minus tests, IDLE, demos, site-packages and huge files."""
    files = []
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        parts = path.relative_to(root).parts
        if SKIP_DIRS & set(parts[:-1]) or path.stat().st_size > MAX_FILE_BYTES:
            continue
        files.append(path)
    return files


def select_corpus(root: Path, cap_bytes: int) -> list[SourceFile]:
    """Pick files up to `cap_bytes` (bytes) and split them by file into train / held-out.

    Files are ranked by sha256 of their relative path (a fixed, well-spread order that does
    not favour early letters), taken until the cap, then re-sorted by path; every
    HELDOUT_EVERY-th file of that sorted list is held out.
    """
    ranked = sorted(_candidates(root), key=lambda p: _sha(p.relative_to(root).as_posix()))
    chosen, total = [], 0
    for path in ranked:
        data = path.read_bytes()
        if total + len(data) > cap_bytes or "\ufffd" in data.decode("utf-8", "replace"):
            continue
        chosen.append((path.relative_to(root).as_posix(), data))
        total += len(data)
    chosen.sort()
    return [
        SourceFile(rel, hashlib.sha256(data).hexdigest(), len(data), _split_of(i))
        for i, (rel, data) in enumerate(chosen)
    ]


def _split_of(index: int) -> str:
    return "heldout" if index % HELDOUT_EVERY == HELDOUT_EVERY - 1 else "train"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def write_manifest(files: list[SourceFile], path: Path) -> None:
    """Write the corpus manifest: a Python-version header, then split/sha256/bytes/path."""
    lines = [
        "# lab.engine corpus: CPython standard-library source files (PSF licence)",
        f"# python_version: {platform.python_version()}",
        f"# cap rules: skip dirs {sorted(SKIP_DIRS)}, files > {MAX_FILE_BYTES} bytes",
        "# columns: split<TAB>sha256<TAB>bytes<TAB>path relative to sysconfig stdlib",
    ]
    lines += [f"{f.split}\t{f.sha256}\t{f.num_bytes}\t{f.rel_path}" for f in files]
    path.write_text("\n".join(lines) + "\n")


def read_manifest(path: Path) -> tuple[str, list[SourceFile]]:
    """Parse a manifest written by `write_manifest`: (python_version, files)."""
    version, files = "", []
    for line in path.read_text().splitlines():
        if line.startswith("# python_version:"):
            version = line.split(":", 1)[1].strip()
        elif line and not line.startswith("#"):
            split, sha, num_bytes, rel = line.split("\t")
            files.append(SourceFile(rel, sha, int(num_bytes), split))
    return version, files


_DECORATION_LINE = re.compile(r"^[ \t]*#[ \t#=*~-]*\n", re.MULTILINE)


def clean_source(text: str) -> str:
    """Drop comment lines that are pure decoration (`#`, `# ----`, `#####`): licence
    banners and separators are runs of them, and a small model learns to emit them
    forever. Everything else is the file as written."""
    return _DECORATION_LINE.sub("", text)


def read_texts(root: Path, files: list[SourceFile], split: str) -> list[str]:
    """The source text of every manifest file in `split` (decoration lines dropped)."""
    return [
        clean_source((root / f.rel_path).read_text(encoding="utf-8"))
        for f in files
        if f.split == split
    ]


# ---------------------------------------------------------------- tokenizer


def train_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """Byte-level BPE (GPT-2 style) with <|bos|>=0, <|eos|>=1, <|pad|>=2.

    Encoding prepends <|bos|> (like Llama); decoding skips special tokens, so
    `decode(encode(src).ids) == src` for any text.
    """
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2,
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", special_tokens=[(BOS, 0)]
    )
    return tokenizer


def token_stream(tokenizer: Tokenizer, texts: list[str]) -> torch.Tensor:
    """All texts as one LongTensor: <|bos|> file <|eos|> <|bos|> file <|eos|> ..."""
    eos = tokenizer.token_to_id(EOS)
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(texts):
        ids += [*encoding.ids, eos]
    return torch.tensor(ids, dtype=torch.long)


# ---------------------------------------------------------------- models


def target_config(vocab_size: int) -> LlamaConfig:
    """~5.1M-parameter target (vocab 3072): 5 layers, 8 query heads sharing 2 KV heads.

    Five layers, not six: on the shared CPU budget, steps matter more than depth."""
    return _llama(vocab_size, hidden=256, layers=5, heads=8, kv_heads=2, intermediate=704)


def draft_config(vocab_size: int) -> LlamaConfig:
    """~1.2M-parameter draft (vocab 3072) for speculative decoding: 2 layers, GQA 4:2."""
    return _llama(vocab_size, hidden=128, layers=2, heads=4, kv_heads=2, intermediate=352)


def _llama(vocab_size: int, *, hidden: int, layers: int, heads: int, kv_heads: int,
           intermediate: int, context: int = 512) -> LlamaConfig:  # fmt: skip
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size, hidden_size=hidden, intermediate_size=intermediate,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=context, rms_norm_eps=1e-6,
        tie_word_embeddings=False,  # an explicit lm_head.weight: simplest for any loader
        bos_token_id=0, eos_token_id=1, pad_token_id=2,
    )  # fmt: skip


def count_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# ---------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainSettings:
    """One model's run. Stops at `budget_s` seconds of wall clock or `max_steps`."""

    budget_s: float
    max_steps: int | None = None
    seq_len: int = 512  # tokens per row (the models' full context)
    batch_size: int = 2  # rows per step: at a fixed wall-clock budget, more updates win
    peak_lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "cpu"
    autocast_bf16: bool = True


@dataclass
class TrainStats:
    """What one training run did; token counts are input tokens, times are seconds."""

    steps: int = 0
    tokens_seen: int = 0
    wall_s: float = 0.0
    tokens_per_s: float = 0.0
    first_loss: float = float("nan")
    final_train_loss: float = float("nan")  # mean of the last 10 steps (nats/token)
    loss_curve: list[tuple[int, float]] = field(default_factory=list)


def lr_at(step: int, progress: float, s: TrainSettings) -> float:
    """Linear warmup over steps, then cosine to min_lr_ratio over `progress` in [0, 1]."""
    warm = min(1.0, (step + 1) / max(1, s.warmup_steps))
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return s.peak_lr * warm * (s.min_lr_ratio + (1 - s.min_lr_ratio) * cosine)


def _optimizer(model: torch.nn.Module, s: TrainSettings) -> torch.optim.AdamW:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # RMSNorm gains
    groups = [{"params": decay, "weight_decay": s.weight_decay}, {"params": no_decay}]
    return torch.optim.AdamW(groups, lr=s.peak_lr, betas=(0.9, 0.95), weight_decay=0.0)


def _batch(tokens: torch.Tensor, s: TrainSettings, gen: torch.Generator) -> torch.Tensor:
    """`batch_size` random windows of seq_len + 1 tokens (inputs and shifted targets)."""
    starts = torch.randint(0, len(tokens) - s.seq_len - 1, (s.batch_size,), generator=gen)
    return torch.stack([tokens[i : i + s.seq_len + 1] for i in starts.tolist()])


def _loss(model: LlamaForCausalLM, window: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=window[:, :-1]).logits
    return F.cross_entropy(logits.float().flatten(0, 1), window[:, 1:].flatten())


def train_model(
    model: LlamaForCausalLM, tokens: torch.Tensor, s: TrainSettings, label: str = "train"
) -> TrainStats:
    """Train `model` in place on random windows of `tokens` (AdamW, warmup + cosine).

    The cosine runs over the fraction of the budget used (time, or steps if `max_steps` is
    the tighter limit), so a run stopped by the clock still ends at the minimum lr.
    """
    gen = torch.Generator().manual_seed(s.seed)
    model.to(s.device).train()
    opt, stats = _optimizer(model, s), TrainStats()
    start, recent = time.perf_counter(), []
    from tqdm import tqdm

    bar = tqdm(total=round(s.budget_s), desc=label, unit="s", mininterval=5, file=sys.stderr)
    while stats.steps < (s.max_steps or sys.maxsize):
        elapsed = time.perf_counter() - start
        progress = max(elapsed / s.budget_s, stats.steps / (s.max_steps or sys.maxsize))
        if progress >= 1.0:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(stats.steps, progress, s)
        window = _batch(tokens, s, gen).to(s.device)
        with torch.autocast(torch.device(s.device).type, torch.bfloat16, s.autocast_bf16):
            loss = _loss(model, window)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), s.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        _record(stats, loss.item(), window.numel() - s.batch_size, recent)
        bar.update(round(time.perf_counter() - start) - bar.n)
        bar.set_postfix(step=stats.steps, loss=f"{stats.final_train_loss:.3f}", refresh=False)
    bar.close()
    stats.wall_s = time.perf_counter() - start
    stats.tokens_per_s = stats.tokens_seen / max(stats.wall_s, 1e-9)
    return stats


def _record(stats: TrainStats, loss: float, num_tokens: int, recent: list[float]) -> None:
    if stats.steps == 0:
        stats.first_loss = loss
    stats.steps += 1
    stats.tokens_seen += num_tokens
    recent[:] = [*recent[-9:], loss]
    stats.final_train_loss = sum(recent) / len(recent)
    if stats.steps % 10 == 0 or stats.steps == 1:
        stats.loss_curve.append((stats.steps, round(loss, 4)))


@torch.no_grad()
def evaluate_loss(
    model: LlamaForCausalLM, tokens: torch.Tensor, seq_len: int = 512, max_tokens: int = 65_536
) -> float:
    """Mean cross-entropy (nats/token) in fp32 over non-overlapping windows of `tokens`.

    Uses at most `max_tokens` predicted tokens (from the start of the stream) to bound time.
    """
    model.eval()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for i in range(0, len(tokens) - 1, seq_len):
        window = tokens[i : i + seq_len + 1].unsqueeze(0).to(device)
        if window.shape[1] < 2 or count >= max_tokens:
            break
        total += _loss(model, window).item() * (window.shape[1] - 1)
        count += window.shape[1] - 1
    return total / count


def unigram_loss(train_ids: torch.Tensor, heldout_ids: torch.Tensor, vocab_size: int) -> float:
    """Held-out nats/token of an add-one unigram model of the train tokens: the no-context
    baseline a trained model's held-out loss should beat by far."""
    counts = torch.bincount(train_ids, minlength=vocab_size).double() + 1.0
    log_probs = (counts / counts.sum()).log()
    return -log_probs[heldout_ids].mean().item()


# ---------------------------------------------------------------- samples and outputs


@torch.no_grad()
def greedy_sample(model: LlamaForCausalLM, tokenizer: Tokenizer, prompt: str, n: int) -> str:
    """The prompt plus `n` greedy tokens from HF `generate` (prompt gets <|bos|>)."""
    ids = torch.tensor([tokenizer.encode(prompt).ids], device=next(model.parameters()).device)
    out = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=n,
        pad_token_id=tokenizer.token_to_id(PAD),
    )
    return tokenizer.decode(out[0].tolist())


def _round_to_bf16(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """fp32 copy of the weights as they will be saved (bf16), so eval sees the real file."""
    return model.to(torch.bfloat16).to(torch.float32)


SHAPE_KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads"]
SHAPE_KEYS += ["intermediate_size", "max_position_embeddings"]


def _model_record(model, stats: TrainStats, s: TrainSettings, heldout_loss: float) -> dict:
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


# ---------------------------------------------------------------- CLI


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m lab.engine.train", description=__doc__)
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
    log = _log_header(args, argv, files, tokenizer, ids)
    for name, make_config, share in PLAN:
        torch.manual_seed(args.seed)
        from transformers import LlamaForCausalLM

        model = LlamaForCausalLM(make_config(tokenizer.get_vocab_size()))
        settings = TrainSettings(share * args.minutes * 60, seed=args.seed, device=args.device)
        stats = train_model(model, ids["train"], settings, label=name)
        model = _round_to_bf16(model)
        heldout = evaluate_loss(model, ids["heldout"])
        log["models"][name] = _model_record(model, stats, settings, heldout)
        if name == "target":
            log["samples"] = [greedy_sample(model, tokenizer, p, 48) for p in SAMPLE_PROMPTS]
        model.to(torch.bfloat16).save_pretrained(args.out / name)
        print(f"{name}: {stats.steps} steps, held-out ppl {math.exp(heldout):.2f}", flush=True)
    log["total_wall_s"] = time.perf_counter() - start
    (args.out / "training_log.json").write_text(json.dumps(log, indent=2) + "\n")
    write_readme(args.out, log)
    return log


def _log_header(args, argv, files: list[SourceFile], tokenizer: Tokenizer, ids: dict) -> dict:
    import tokenizers
    import transformers

    nbytes = {sp: sum(f.num_bytes for f in files if f.split == sp) for sp in ids}
    return {
        "command": " ".join(
            ["python -m lab.engine.train", *(sys.argv[1:] if argv is None else argv)]
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


if __name__ == "__main__":
    main()
