"""lab.engine.training: the bundled corpus manifest, tokenizer, target/draft weights and log,
plus a few-step smoke run through the same training code path. Everything loads from local
paths (nothing touches a hub)."""

from __future__ import annotations

import hashlib
import json
import math
import platform
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from lab.engine import training as train

WEIGHTS = Path(train.__file__).resolve().parents[1] / "weights"
PARAM_RANGES = {"target": (5_000_000, 10_000_000), "draft": (500_000, 2_000_000)}
TRICKY_SOURCE = (
    'def f(x):\n\t"""Tabs, CRLF\r\n, unicode: café — λ ✓ 🐍."""\n'
    "    return x  # trailing spaces   \n\n\n"
)


@pytest.fixture(scope="module")
def manifest() -> tuple[str, list[train.SourceFile]]:
    return train.read_manifest(WEIGHTS / "corpus_manifest.txt")


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.from_file(str(WEIGHTS / "tokenizer.json"))


@pytest.fixture(scope="module")
def training_log() -> dict:
    return json.loads((WEIGHTS / "training_log.json").read_text())


def _require_same_python(version: str) -> None:
    if version != platform.python_version():
        pytest.skip(
            f"the manifest was built from Python {version}'s stdlib, this is "
            f"{platform.python_version()}: its files differ, so hashes cannot match"
        )


def test_manifest_is_split_by_file_and_capped(manifest):
    version, files = manifest
    assert version
    splits = [f.split for f in files]
    assert splits.count("heldout") >= 5 and splits.count("train") >= 100
    assert splits[train.HELDOUT_EVERY - 1] == "heldout" and splits[0] == "train"
    assert [f.rel_path for f in files] == sorted(f.rel_path for f in files)
    assert sum(f.num_bytes for f in files) <= train.DEFAULT_CORPUS_MB * 1e6  # a few MB
    assert not any(set(f.rel_path.split("/")[:-1]) & train.SKIP_DIRS for f in files)


def test_manifest_files_exist_and_match_sha256(manifest):
    version, files = manifest
    _require_same_python(version)
    root = train.stdlib_dir()
    for f in files:
        data = (root / f.rel_path).read_bytes()
        assert len(data) == f.num_bytes, f.rel_path
        assert hashlib.sha256(data).hexdigest() == f.sha256, f.rel_path


def test_corpus_selection_is_reproducible(manifest, training_log):
    version, files = manifest
    _require_same_python(version)
    assert "--corpus-mb" not in training_log["command"]  # the run used the default cap
    cap_bytes = int(train.DEFAULT_CORPUS_MB * 1e6)
    assert train.select_corpus(train.stdlib_dir(), cap_bytes) == files
    assert training_log["corpus"]["bytes_train"] == sum(
        f.num_bytes for f in files if f.split == "train"
    )


def test_tokenizer_round_trips_python_source_exactly(tokenizer, manifest):
    version, files = manifest
    texts = [TRICKY_SOURCE]
    if version == platform.python_version():
        heldout = [f for f in files if f.split == "heldout"][:3]
        texts += train.read_texts(train.stdlib_dir(), heldout, "heldout")
    for text in texts:
        ids = tokenizer.encode(text).ids
        assert ids[0] == 0  # <|bos|> prepended
        assert tokenizer.decode(ids) == text


def test_tokenizer_specials_and_hf_loading(tokenizer):
    assert 2048 <= tokenizer.get_vocab_size() <= 4096
    assert [tokenizer.token_to_id(t) for t in train.SPECIAL_TOKENS] == [0, 1, 2]
    hf = PreTrainedTokenizerFast(
        tokenizer_file=str(WEIGHTS / "tokenizer.json"),
        bos_token=train.BOS,
        eos_token=train.EOS,
        pad_token=train.PAD,
    )
    assert hf("import os\n")["input_ids"] == tokenizer.encode("import os\n").ids
    assert hf.decode(hf(TRICKY_SOURCE)["input_ids"], skip_special_tokens=True) == TRICKY_SOURCE


@pytest.mark.parametrize("name", ["target", "draft"])
def test_bundled_model_loads_offline(name, tokenizer, training_log):
    model = LlamaForCausalLM.from_pretrained(WEIGHTS / name)
    config = model.config
    low, high = PARAM_RANGES[name]
    assert low <= train.count_params(model) <= high
    assert train.count_params(model) == training_log["models"][name]["params"]
    assert config.vocab_size == tokenizer.get_vocab_size()
    assert config.num_key_value_heads < config.num_attention_heads  # GQA
    assert (config.bos_token_id, config.eos_token_id) == (0, 1)
    ids = torch.tensor([tokenizer.encode("def fib(n):\n    return").ids])
    with torch.no_grad():
        logits = model(input_ids=ids.long()).logits
    assert logits.shape == (1, ids.shape[1], config.vocab_size)
    assert torch.isfinite(logits).all()


def test_bundled_weights_fit_the_size_budget():
    total_bytes = sum(p.stat().st_size for p in WEIGHTS.rglob("*") if p.is_file())
    assert total_bytes <= 30_000_000


def test_training_log_records_heldout_perplexity(training_log):
    for name in ("target", "draft"):
        record = training_log["models"][name]
        for key in ("params", "steps", "tokens_seen", "tokens_per_s", "wall_s"):
            assert record[key] > 0, key
        assert math.isclose(record["heldout_perplexity"], math.exp(record["heldout_loss"]))
        # Trained, clearly: an untrained model sits near the vocab size (3072).
        assert record["heldout_perplexity"] < 100


def test_target_beats_its_draft_and_the_no_context_baseline(training_log):
    target, draft = training_log["models"]["target"], training_log["models"]["draft"]
    assert target["heldout_loss"] < draft["heldout_loss"]
    # A model that learnt context, not token frequencies: far below a unigram model.
    assert target["heldout_perplexity"] < training_log["corpus"]["heldout_unigram_perplexity"] / 10
    assert training_log["command"].startswith("python -m lab.engine.training ")
    assert training_log["python"] and training_log["torch"] and training_log["date"]
    assert training_log["total_wall_s"] <= 20 * 60


def test_target_greedy_samples_are_not_one_token_loops(training_log, tokenizer):
    assert len(training_log["samples"]) == len(train.SAMPLE_PROMPTS)
    for prompt, sample in zip(train.SAMPLE_PROMPTS, training_log["samples"], strict=True):
        assert sample.startswith(prompt)
        continuation = tokenizer.encode(sample[len(prompt) :]).ids[1:]
        assert len(set(continuation)) >= 10, sample


def test_lr_schedule_warms_up_then_decays_to_the_floor():
    s = train.TrainSettings(budget_s=1.0, peak_lr=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert train.lr_at(0, 0.0, s) == pytest.approx(1e-4)
    assert train.lr_at(9, 0.0, s) == pytest.approx(1e-3)
    assert train.lr_at(50, 0.5, s) == pytest.approx(0.55e-3)
    assert train.lr_at(100, 1.0, s) == pytest.approx(1e-4)


def _tiny_model(vocab_size: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


def test_smoke_training_three_steps_lowers_the_loss():
    tokens = torch.arange(4000) % 17  # a learnable repeating pattern
    model = _tiny_model(vocab_size=32)
    settings = train.TrainSettings(
        budget_s=600, max_steps=3, seq_len=32, batch_size=4, peak_lr=1e-2, warmup_steps=1
    )
    before = train.evaluate_loss(model, tokens, seq_len=32, max_tokens=256)
    stats = train.train_model(model, tokens, settings, label="smoke")
    after = train.evaluate_loss(model, tokens, seq_len=32, max_tokens=256)
    assert stats.steps == 3 and stats.tokens_seen == 3 * 4 * 32
    assert math.isfinite(stats.final_train_loss) and stats.tokens_per_s > 0
    assert after < before


def test_cli_end_to_end_on_a_tiny_budget(tmp_path):
    args = ["--minutes", "0.03", "--corpus-mb", "0.15", "--vocab-size", "400", "--threads", "1"]
    threads = torch.get_num_threads()
    try:
        log = train.main([*args, "--out", str(tmp_path)])
    finally:
        torch.set_num_threads(threads)  # main() sets it process-wide
    for name in ("target", "draft"):
        assert (tmp_path / name / "model.safetensors").exists()
        assert log["models"][name]["steps"] >= 1
    assert (tmp_path / "README.md").read_text().count("```python") == 3
    assert (
        json.loads((tmp_path / "training_log.json").read_text())["tokenizer"]["vocab_size"] == 400
    )
    _, files = train.read_manifest(tmp_path / "corpus_manifest.txt")
    assert sum(f.num_bytes for f in files) <= 150_000


def test_clean_source_drops_only_decoration_comment_lines():
    text = "#\n# Copyright 2001\n#\n# ------\nx = 1  # keep\n    ####\n\n    #: doc\ny = '#'\n"
    assert train.clean_source(text) == "# Copyright 2001\nx = 1  # keep\n\n    #: doc\ny = '#'\n"
