"""Shared by the engine tests: seeded random prompts and the no-cache greedy reference."""

from __future__ import annotations

import torch

from lab.engine.attention import DenseAttention
from lab.engine.model import LlamaModel


def random_prompts(n: int, seed: int = 1) -> list[list[int]]:
    """`n` prompts of 3..39 token ids in 1..94, the same for the same seed."""
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(1, 95, (int(torch.randint(3, 40, (1,), generator=g)),), generator=g).tolist()
        for _ in range(n)
    ]


def reference(model: LlamaModel, prompt: list[int], steps: int) -> list[int]:
    """Greedy tokens recomputing the whole sequence each step (no cache at all)."""
    tokens = list(prompt)
    with torch.inference_mode():
        for _ in range(steps):
            hidden = model(
                torch.tensor(tokens), torch.arange(len(tokens)), DenseAttention([len(tokens)])
            )
            tokens.append(int(model.logits(hidden[-1:]).argmax(-1)))
    return tokens[len(prompt) :]
