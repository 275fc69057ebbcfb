"""The shapes of the bundled target and draft models (Hugging Face `LlamaConfig`s)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # transformers loads lazily: the corpus helpers are used at run time
    from transformers import LlamaConfig


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
