"""The model runner (a scheduled batch -> model inputs -> logits) and the one causal
attention every backend shares."""

from __future__ import annotations

import pytest
import torch

from lab.engine.attention import DenseAttention, causal_attention, causal_mask
from lab.engine.batch import ScheduledBatch, ScheduledSeq
from lab.engine.block_manager import BlockManager
from lab.engine.config import EngineConfig, ModelConfig
from lab.engine.model import LlamaModel
from lab.engine.model_runner import ModelRunner
from lab.engine.sequence import Sequence

SHAPE = {
    "model_type": "llama",
    "vocab_size": 64,
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
}


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    torch.manual_seed(0)
    model = LlamaModel(ModelConfig.from_hf(SHAPE))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2) if p.dim() > 1 else p.fill_(1.0)
    return model.requires_grad_(False).eval()


def full_logits(model: LlamaModel, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        hidden = model(
            torch.tensor(tokens), torch.arange(len(tokens)), DenseAttention([len(tokens)])
        )
        return model.logits(hidden)


def test_prepare_flattens_new_tokens_positions_and_sample_rows(model):
    config = EngineConfig(block_size=4, max_model_len=32, max_num_seqs=2)
    runner = ModelRunner(model, config)
    manager = BlockManager(config.num_kv_blocks, config.block_size)
    a, b = Sequence(0, [5, 6, 7, 8, 9, 10]), Sequence(1, [11, 12, 13])
    for seq in (a, b):
        manager.allocate(seq)
    batch = ScheduledBatch([ScheduledSeq.plan(a, 4), ScheduledSeq.plan(b, 3)])  # a: a chunk

    inputs = runner.prepare(batch)

    assert inputs.input_ids.tolist() == [5, 6, 7, 8, 11, 12, 13]
    assert inputs.positions.tolist() == [0, 1, 2, 3, 0, 1, 2]
    assert inputs.sample_rows == [6]  # only b computes its last token
    assert runner.pool is not None and runner.pool.kv.shape[2] == config.num_kv_blocks


@pytest.mark.parametrize("mode", ["paged", "contiguous", "none"])
def test_run_chunked_prefill_then_decode_matches_full_attention(model, mode):
    config = EngineConfig(mode=mode, block_size=4, max_model_len=32, max_num_seqs=2)
    runner = ModelRunner(model, config)
    seq = Sequence(0, [3, 1, 4, 1, 5, 9, 2])
    if mode == "contiguous":
        seq.block_table = [1]
    else:
        BlockManager(config.num_kv_blocks, config.block_size).allocate(seq)

    assert runner.run(ScheduledBatch([ScheduledSeq.plan(seq, 5)])) is None  # mid-prefill
    seq.num_computed_tokens = 5
    logits = runner.run(ScheduledBatch([ScheduledSeq.plan(seq, 2)]))

    expected = full_logits(model, seq.token_ids)[-1:]
    assert logits.shape == expected.shape
    assert (logits - expected).abs().max().item() <= 1e-5
    assert (runner.pool is None) == (mode == "none")


def test_causal_attention_infers_the_mask_it_is_not_given():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 4, 8), torch.randn(7, 2, 8), torch.randn(7, 2, 8)
    explicit = causal_attention(q, k, v, causal_mask(4, 3, q.device))
    assert torch.equal(causal_attention(q, k, v), explicit)  # cached history: mask built
    whole = causal_attention(k.repeat(1, 2, 1), k, v)  # no history: SDPA's is_causal
    mask = causal_mask(0, 7, q.device)
    assert torch.allclose(whole, causal_attention(k.repeat(1, 2, 1), k, v, mask), atol=1e-6)
    one = causal_attention(q[:1], k, v)  # a lone new token sees every key
    assert torch.allclose(one, causal_attention(q[:1], k, v, torch.ones(1, 7, dtype=torch.bool)))
