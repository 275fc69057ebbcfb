"""The engine end to end on a small random GQA model: every cache mode and scheduling
option produces the tokens of the plain no-cache reference."""

from __future__ import annotations

import pytest
import torch
from engine_helpers import random_prompts, reference

from lab.engine.config import EngineConfig, ModelConfig
from lab.engine.engine import LLMEngine
from lab.engine.model import LlamaModel
from lab.engine.sampler import SamplingParams

CONFIG = ModelConfig.from_hf(
    {
        "model_type": "llama",
        "vocab_size": 97,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "eos_token_id": 96,
        "bos_token_id": 0,
    }
)
GREEDY = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def model() -> LlamaModel:
    torch.manual_seed(0)
    m = LlamaModel(CONFIG)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.2)
    return m.eval()


def prompts(n: int = 6, seed: int = 1) -> list[list[int]]:
    return random_prompts(n, seed)


@pytest.fixture(scope="module")
def expected(model):
    return [reference(model, p, GREEDY.max_tokens) for p in prompts()]


@pytest.mark.parametrize(
    "config",
    [
        EngineConfig(mode="paged"),
        EngineConfig(mode="contiguous", max_model_len=64),
        EngineConfig(mode="none"),
        EngineConfig(mode="paged", enable_prefix_caching=False),
        EngineConfig(mode="paged", max_num_batched_tokens=16, max_num_seqs=4),  # chunked prefill
        EngineConfig(mode="paged", scheduling="static", static_batch_size=4),
        EngineConfig(
            mode="paged", num_blocks=4, max_num_seqs=6, max_num_batched_tokens=64
        ),  # preemption
    ],
    ids=["paged", "contiguous", "none", "no-prefix-cache", "chunked", "static", "preempting"],
)
def test_every_mode_gives_the_reference_tokens(model, expected, config):
    engine = LLMEngine(model, config)
    assert engine.generate(prompts(), GREEDY) == expected
    assert engine.manager.num_free_blocks == (
        engine.manager.max_seqs if config.mode == "contiguous" else len(engine.manager.blocks)
    )


def test_preemption_happened_under_pressure(model, expected):
    engine = LLMEngine(model, EngineConfig(num_blocks=4, max_num_seqs=6, max_num_batched_tokens=64))
    assert engine.generate(prompts(), GREEDY) == expected
    assert engine.scheduler.num_preemptions > 0


def test_prefix_cache_hits_for_a_shared_prompt_and_same_tokens(model):
    shared = list(range(1, 40))
    engine = LLMEngine(model, EngineConfig())
    first = engine.generate([shared], GREEDY)
    second = engine.generate([[*shared, 5]], GREEDY)
    hits = engine.manager.stats(engine.kv_bytes_per_token())["prefix_hits"]
    assert hits >= 2
    assert first[0] == reference(model, shared, GREEDY.max_tokens)
    assert second[0] == reference(model, [*shared, 5], GREEDY.max_tokens)


def test_abort_frees_every_block_at_once(model):
    engine = LLMEngine(model, EngineConfig())
    total = engine.manager.num_free_blocks
    ids = [engine.add_request(p, GREEDY) for p in prompts()]
    engine.step()
    engine.step()
    assert engine.manager.num_free_blocks < total
    for i in ids:
        assert engine.abort(i)
    assert engine.manager.num_free_blocks == total
    assert not engine.has_unfinished()
    assert engine.metrics(ids[0])["status"] == "aborted"


def test_stream_yields_tokens_as_they_come_and_metrics_follow_vllm(model, expected):
    engine = LLMEngine(model, EngineConfig())
    rid = engine.add_request(prompts()[0], GREEDY)
    assert list(engine.stream(rid)) == expected[0]
    m = engine.metrics(rid)
    assert m["output_tokens"] == GREEDY.max_tokens and len(m["itl_ms"]) == GREEDY.max_tokens - 1
    assert m["ttft_ms"] > 0 and m["tpot_ms"] == pytest.approx(
        (m["e2e_ms"] - m["ttft_ms"]) / (GREEDY.max_tokens - 1)
    )


def test_seeded_sampling_is_reproducible_across_batching(model):
    params = SamplingParams(temperature=0.9, top_p=0.95, seed=7, max_tokens=10, ignore_eos=True)
    alone = LLMEngine(model, EngineConfig()).generate([prompts()[0]], params)[0]
    batched = LLMEngine(model, EngineConfig()).generate(prompts(), [params] + [GREEDY] * 5)[0]
    assert alone == batched


def test_paged_allocation_tracks_use_and_contiguous_reserves_everything(model):
    paged = LLMEngine(model, EngineConfig(mode="paged", enable_prefix_caching=False))
    contiguous = LLMEngine(model, EngineConfig(mode="contiguous", max_model_len=64))
    for engine in (paged, contiguous):
        for p in prompts():
            engine.add_request(p, GREEDY)
        engine.step()
    p_usage, c_usage = paged.kv_usage(), contiguous.kv_usage()
    per_token = paged.kv_bytes_per_token()
    # The allocators count the freshly sampled token (KV not yet written) differently.
    assert abs(p_usage["used_bytes"] - c_usage["used_bytes"]) <= 6 * per_token
    assert p_usage["used_bytes"] > 0
    assert p_usage["allocated_bytes"] < p_usage["used_bytes"] + 6 * 16 * paged.kv_bytes_per_token()
    assert c_usage["allocated_bytes"] == 6 * 64 * contiguous.kv_bytes_per_token()


def test_requests_that_cannot_fit_are_refused_with_a_reason(model):
    engine = LLMEngine(model, EngineConfig(max_model_len=32))
    with pytest.raises(ValueError, match="exceeds max_model_len"):
        engine.add_request(list(range(1, 30)), GREEDY)
    with pytest.raises(ValueError, match="no tokenizer"):
        engine.add_request("def fib(", GREEDY)
