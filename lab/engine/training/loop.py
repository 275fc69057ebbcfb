"""The training loop (AdamW, warmup + cosine, bf16 autocast) and the evaluation of a model:
held-out loss, the unigram baseline, greedy samples."""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from lab.engine.training.tokenizer import PAD

if TYPE_CHECKING:  # transformers and tqdm load lazily: the corpus helpers are used at run time
    from transformers import LlamaForCausalLM


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
