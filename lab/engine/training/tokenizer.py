"""The bundled tokenizer: byte-level BPE trained on the corpus, and corpus -> token ids."""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD]  # ids 0, 1, 2 in this order


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
