"""lab.engine.config + lab.engine.model against Hugging Face transformers on random weights."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from lab.engine.attention import DenseAttention
from lab.engine.config import ModelConfig, RopeScaling
from lab.engine.model import LlamaModel, load_model, save_model, weight_bytes

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}
# eos/bos None so HF generate never stops early; initializer_range 0.1 gives peaked logits,
# so greedy ties (which fp32 rounding could break either way) are implausible.
COMMON = dict(vocab_size=512, initializer_range=0.1, bos_token_id=None, eos_token_id=None)
CONFIGS = {
    "llama_gqa_llama3_rope": (
        "LlamaConfig",
        dict(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=4,
            num_attention_heads=8,
            num_key_value_heads=2,
            rope_theta=500000.0,
            rope_scaling=dict(LLAMA3_ROPE),  # a copy: HF adds keys to it
        ),
    ),
    "qwen2_qkv_bias": (
        "Qwen2Config",
        dict(
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            rope_theta=1000000.0,
        ),
    ),
    "llama_tied_head_dim_bias": (
        "LlamaConfig",
        dict(
            hidden_size=96,
            intermediate_size=192,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=32,  # explicit, != hidden / heads
            attention_bias=True,
            tie_word_embeddings=True,
        ),
    ),
}
TOL = 1e-4


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def hf_checkpoint(request, tmp_path_factory) -> tuple[object, Path]:
    """(HF model, folder it was saved to with save_pretrained) for each test config."""
    config_class, kwargs = CONFIGS[request.param]
    config = getattr(transformers, config_class)(**COMMON, **kwargs)
    torch.manual_seed(1234)
    hf = transformers.AutoModelForCausalLM.from_config(config).eval()
    folder = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(folder, safe_serialization=True)
    return hf, folder


def flatten(seqs: list[list[int]], start: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Concatenated token ids and absolute positions (from `start`) of whole sequences."""
    ids = torch.tensor([t for s in seqs for t in s])
    positions = torch.cat([torch.arange(start, start + len(s)) for s in seqs])
    return ids, positions


def random_seqs(lengths: list[int], vocab: int, seed: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in lengths]


def greedy_dense(model: LlamaModel, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy decoding with no cache: re-run whole sequences through DenseAttention each step."""
    seqs = [list(p) for p in prompts]
    for _ in range(new_tokens):
        lens = [len(s) for s in seqs]
        ids, positions = flatten(seqs)
        hidden = model(ids, positions, DenseAttention(lens))
        last_rows = torch.tensor(lens).cumsum(0) - 1
        next_tokens = model.logits(hidden[last_rows]).argmax(-1).tolist()
        for seq, token in zip(seqs, next_tokens, strict=True):
            seq.append(token)
    return [s[len(p) :] for s, p in zip(seqs, prompts, strict=True)]


@torch.inference_mode()
def test_parameter_names_and_counts_match_hf(hf_checkpoint):
    hf, folder = hf_checkpoint
    model = load_model(folder)
    assert set(model.state_dict()) == set(hf.state_dict())
    assert model.config.param_count() == hf.num_parameters()
    assert weight_bytes(model) == 4 * hf.num_parameters()
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight is model.model.embed_tokens.weight


@torch.inference_mode()
def test_batched_logits_match_hf(hf_checkpoint):
    hf, folder = hf_checkpoint
    model = load_model(folder)
    lengths = [5, 1, 12, 33, 2]  # several lengths in one flattened batch
    seqs = random_seqs(lengths, model.config.vocab_size, seed=7)
    ids, positions = flatten(seqs)
    logits = model.logits(model(ids, positions, DenseAttention(lengths)))
    expected = torch.cat([hf(torch.tensor([s])).logits[0] for s in seqs])
    assert logits.shape == (sum(lengths), model.config.vocab_size)
    assert (logits - expected).abs().max().item() <= TOL


@torch.inference_mode()
def test_rope_at_large_absolute_positions_matches_hf(hf_checkpoint):
    """Positions far past original_max_position_embeddings (llama3 scaling at work)."""
    hf, folder = hf_checkpoint
    model = load_model(folder)
    seq = random_seqs([9], model.config.vocab_size, seed=3)[0]
    ids, positions = flatten([seq], start=700)
    logits = model.logits(model(ids, positions, DenseAttention([9])))
    expected = hf(torch.tensor([seq]), position_ids=positions[None]).logits[0]
    assert (logits - expected).abs().max().item() <= TOL
    assert torch.equal(model.rotary.inv_freq_cpu, hf.model.rotary_emb.inv_freq)


@torch.inference_mode()
def test_greedy_generation_matches_hf_generate(hf_checkpoint):
    hf, folder = hf_checkpoint
    model = load_model(folder)
    new_tokens = 12
    prompts = random_seqs([1, 2, 3, 4, 5, 7, 8, 11, 13, 16, 20], model.config.vocab_size, 11)
    ours = greedy_dense(model, prompts, new_tokens)
    for prompt, generated in zip(prompts, ours, strict=True):
        out = hf.generate(
            torch.tensor([prompt]), do_sample=False, max_new_tokens=new_tokens, pad_token_id=0
        )[0].tolist()
        assert len(out) == len(prompt) + new_tokens
        assert generated == out[len(prompt) :]


@torch.inference_mode()
def test_save_model_loads_in_transformers(hf_checkpoint, tmp_path):
    hf, folder = hf_checkpoint
    save_model(load_model(folder), tmp_path)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(reloaded) is type(hf)
    seq = torch.tensor(random_seqs([17], hf.config.vocab_size, seed=5))
    assert (reloaded(seq).logits - hf(seq).logits).abs().max().item() <= TOL
    ours_again = load_model(tmp_path)
    assert ours_again.config == load_model(folder).config


def test_load_model_casts_dtype(hf_checkpoint):
    _, folder = hf_checkpoint
    model = load_model(folder, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and model.device.type == "cpu"
    assert weight_bytes(model) == 2 * model.config.param_count()
    with torch.inference_mode():
        hidden = model(*flatten([[1, 2, 3]]), DenseAttention([3]))
    assert hidden.dtype == torch.bfloat16 and torch.isfinite(hidden.float()).all()


def test_load_errors_name_missing_and_unexpected_keys(hf_checkpoint, tmp_path):
    _, folder = hf_checkpoint
    shutil.copy(folder / "config.json", tmp_path / "config.json")
    state = load_file(folder / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    state["model.layers.9.mlp.extra.weight"] = torch.zeros(2)
    save_file(state, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match="missing keys") as err:
        load_model(tmp_path)
    assert "model.layers.1.mlp.up_proj.weight" in str(err.value)
    assert "model.layers.9.mlp.extra.weight" in str(err.value)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors"):
        load_model(tmp_path)


def test_dense_attention_rejects_partial_sequences():
    q = torch.zeros(4, 2, 8)
    with pytest.raises(ValueError, match="seq_lens sum to 5"):
        DenseAttention([2, 3]).attend(0, q, q, q)


# --- config parsing -------------------------------------------------------------------------

LLAMA_3_2_1B = {  # the published shape of meta-llama/Llama-3.2-1B
    "model_type": "llama",
    "vocab_size": 128256,
    "hidden_size": 2048,
    "intermediate_size": 8192,
    "num_hidden_layers": 16,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 32.0,
        "high_freq_factor": 4.0,
        "low_freq_factor": 1.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "tie_word_embeddings": True,
    "max_position_embeddings": 131072,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "torch_dtype": "bfloat16",
}


def test_config_llama_3_2_1b_arithmetic():
    config = ModelConfig.from_hf(LLAMA_3_2_1B)
    assert config.param_count() == 1_235_814_400
    assert config.kv_bytes_per_token(2) == 2 * 16 * 8 * 64 * 2 == 32768
    assert config.rope_scaling == RopeScaling(32.0, 1.0, 4.0, 8192)
    assert (config.bos_token_id, config.eos_token_ids, config.dtype) == (
        128000,
        (128001,),
        "bfloat16",
    )


def test_config_head_dim_explicit_or_derived():
    base = {k: v for k, v in LLAMA_3_2_1B.items() if k != "head_dim"}
    assert ModelConfig.from_hf(base).head_dim == 2048 // 32
    assert ModelConfig.from_hf({**base, "head_dim": 128}).head_dim == 128
    no_kv = {k: v for k, v in base.items() if k != "num_key_value_heads"}
    assert ModelConfig.from_hf(no_kv).num_key_value_heads == 32  # MHA default


LEGACY_ROPE = {k: v for k, v in LLAMA3_ROPE.items() if k != "rope_type"}


@pytest.mark.parametrize(
    "rope_keys",
    [
        {"rope_theta": 5e5, "rope_scaling": {**LEGACY_ROPE, "type": "llama3"}},  # old key name
        {"rope_theta": 5e5, "rope_scaling": LLAMA3_ROPE},  # transformers v4
        {"rope_parameters": {**LLAMA3_ROPE, "rope_theta": 5e5}},  # transformers v5
    ],
)
def test_config_llama3_rope_scaling_formats(rope_keys):
    unscaled = {k: v for k, v in LLAMA_3_2_1B.items() if k not in ("rope_theta", "rope_scaling")}
    raw = {**unscaled, **rope_keys}
    config = ModelConfig.from_hf(raw)
    assert config.rope_theta == 5e5
    assert config.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 64)


def test_config_default_rope_and_unsupported_type():
    raw = {**LLAMA_3_2_1B, "rope_scaling": None}
    assert ModelConfig.from_hf(raw).rope_scaling is None
    with pytest.raises(ValueError, match="'yarn' is not supported"):
        ModelConfig.from_hf({**raw, "rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    with pytest.raises(ValueError, match="model_type 'gpt2' is not supported"):
        ModelConfig.from_hf({**raw, "model_type": "gpt2"})


def test_config_qwen2_bias_and_sliding_window():
    qwen = {**LLAMA_3_2_1B, "model_type": "qwen2", "rope_scaling": None, "sliding_window": 4096}
    qwen.pop("head_dim")
    config = ModelConfig.from_hf({**qwen, "use_sliding_window": False})
    assert config.attention_bias and not config.o_proj_bias  # no attention_bias key needed
    assert config.sliding_window is None  # unused unless use_sliding_window
    assert ModelConfig.from_hf({**qwen, "use_sliding_window": True}).sliding_window == 4096
    llama = ModelConfig.from_hf(LLAMA_3_2_1B)
    assert not llama.attention_bias and not llama.o_proj_bias
    mistral = ModelConfig.from_hf({**qwen, "model_type": "mistral"})
    assert mistral.sliding_window == 4096 and not mistral.attention_bias


def test_config_llama_3_8b_kv_uses_kv_heads():
    raw = {
        **LLAMA_3_2_1B,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "head_dim": 128,
        "eos_token_id": [128001, 128009],
    }
    config = ModelConfig.from_hf(raw)
    assert config.kv_bytes_per_token(2) == 131072  # 128 KiB, not 4x that (GQA)
    assert config.eos_token_ids == (128001, 128009) and config.eos_token_id == 128001


def test_config_from_folder_and_round_trip(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_3_2_1B))
    config = ModelConfig.from_hf(tmp_path)
    assert ModelConfig.from_hf(tmp_path / "config.json") == config
    assert ModelConfig.from_hf(config.to_hf()) == config
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        ModelConfig.from_hf(tmp_path / "nowhere")
