"""KV handoff between engines (disaggregation): a decode engine that imports a request's
prompt KV from a prefill engine produces the greedy tokens one engine produces alone, and a
frame on a socket carries exactly the KV formula's bytes."""

from __future__ import annotations

import socket

import pytest
import torch
from engine_helpers import random_prompts

from lab.engine.config import EngineConfig, ModelConfig
from lab.engine.engine import LLMEngine
from lab.engine.kv_transfer import KVHandoff, recv_handoff, send_handoff
from lab.engine.model import LlamaModel
from lab.engine.sampler import SamplingParams

CONFIG = ModelConfig.from_hf({
    "model_type": "llama", "vocab_size": 97, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "eos_token_id": 96, "bos_token_id": 0,
})  # fmt: skip
GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def model(seed: int = 0) -> LlamaModel:
    torch.manual_seed(seed)  # both "processes" build the same weights from the same seed
    m = LlamaModel(CONFIG)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.3) if p.dim() > 1 else p.fill_(1.0)
    return m.eval()


def engine(block_size: int = 4) -> LLMEngine:
    return LLMEngine(model(), EngineConfig(block_size=block_size, num_blocks=256,
                                           max_model_len=128, max_num_seqs=4,
                                           enable_prefix_caching=False))  # fmt: skip


def prefill(eng: LLMEngine, prompts: list[list[int]]) -> list[KVHandoff]:
    ids = [eng.add_request(p, GREEDY) for p in prompts]
    while any(eng.requests[i].seq.num_generated_tokens == 0 for i in ids):
        eng.step()
    return [eng.export_kv(i) for i in ids]


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_imported_kv_decodes_the_tokens_of_one_engine(block_size):
    prompts = random_prompts(3, seed=5)
    alone = engine(block_size).generate(prompts, GREEDY)
    prefill_engine, decode_engine = engine(block_size), engine(block_size)
    handoffs = prefill(prefill_engine, prompts)
    assert not prefill_engine.has_unfinished()  # released after export
    assert prefill_engine.manager.num_free_blocks == 256
    ids = [decode_engine.add_prefilled(h, GREEDY) for h in handoffs]
    while decode_engine.has_unfinished():
        decode_engine.step()
    got = [decode_engine.requests[i].seq.generated_token_ids for i in ids]
    assert got == alone
    assert all(len(g) == GREEDY.max_tokens for g in got)
    assert all(s["prefill_tokens"] == 0 for s in decode_engine.step_log)  # decode only


def test_export_holds_only_the_prompt_tokens():
    prompt = random_prompts(1, seed=2)[0]
    (h,) = prefill(engine(), [prompt])
    mc = CONFIG
    assert tuple(h.kv.shape) == (mc.num_hidden_layers, 2, len(prompt),
                                 mc.num_key_value_heads, mc.head_dim)  # fmt: skip
    assert h.prompt_ids == prompt
    assert torch.isfinite(h.kv).all() and h.kv.abs().sum() > 0


def test_export_refuses_a_request_not_just_prefilled():
    eng = engine()
    rid = eng.add_request([5, 6, 7], GREEDY)
    with pytest.raises(ValueError, match="not just past its prefill"):
        eng.export_kv(rid)


def test_import_refuses_kv_of_another_shape():
    (h,) = prefill(engine(), [[5, 6, 7, 8]])
    bad = KVHandoff(h.prompt_ids, h.first_token, h.kv[:1])
    with pytest.raises(ValueError, match="same model on both sides"):
        engine().add_prefilled(bad, GREEDY)


def test_frame_carries_exactly_the_kv_formula_bytes():
    prompts = random_prompts(2, seed=9)
    handoffs = prefill(engine(), prompts)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        for h in handoffs:
            h.meta["request"] = 7
            sent = send_handoff(a, h)
            got, received = recv_handoff(b)
            n = len(h.prompt_ids)
            formula = (
                2 * CONFIG.num_hidden_layers * CONFIG.num_key_value_heads * CONFIG.head_dim * 4 * n
            )
            assert sent == received and received.kv == formula and received.ids == 4 * n
            assert got.prompt_ids == h.prompt_ids and got.first_token == h.first_token
            assert torch.equal(got.kv, h.kv) and got.meta["request"] == 7
            assert got.meta["t_received"] >= got.meta["t_send"]
        a.close()
        assert recv_handoff(b) is None
