"""The two configs, frozen dataclasses that flow one way, downward.

ModelConfig: a Hugging Face config.json (llama / mistral / qwen2), the model's shape.
EngineConfig: how the engine caches and schedules (read by the engine and its model runner).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# model_type -> the transformers class that loads the same weights.
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
}


MODES = ("paged", "contiguous", "none")


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3.1 RoPE frequency scaling (rope_type "llama3").

    Wavelengths longer than original_max_position_embeddings / low_freq_factor (tokens) are
    stretched by `factor`; shorter than .../high_freq_factor are kept; in between, blended.
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a Llama-family decoder; config flows one way, from here downward."""

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q/k/v projections
    o_proj_bias: bool = False  # bias on the output projection (Llama's attention_bias only)
    max_position_embeddings: int = 2048
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    sliding_window: int | None = None  # stored for arithmetic only; attention is full causal
    dtype: str | None = None  # dtype name declared in config.json, e.g. "bfloat16"

    def __post_init__(self) -> None:
        if self.model_type not in ARCHITECTURES:
            raise ValueError(
                f"model_type {self.model_type!r} is not supported; "
                f"use one of {sorted(ARCHITECTURES)}."
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention."
            )

    @classmethod
    def from_hf(cls, source: str | Path | Mapping[str, Any]) -> ModelConfig:
        """Parse a HF config: a dict, a config.json file, or a folder holding config.json."""
        raw = dict(source) if isinstance(source, Mapping) else _read_config_json(Path(source))
        model_type = raw.get("model_type")
        if model_type not in ARCHITECTURES:
            raise ValueError(
                f"model_type {model_type!r} is not supported; use a config.json whose "
                f"model_type is one of {sorted(ARCHITECTURES)}."
            )
        _check_supported(raw)
        heads = int(raw["num_attention_heads"])
        rope_theta, rope_scaling = _parse_rope(raw)
        bias = model_type == "qwen2" or bool(raw.get("attention_bias", False))
        return cls(
            model_type=model_type,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=int(raw["hidden_size"]),
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or raw["hidden_size"] // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            attention_bias=bias and model_type != "mistral",
            o_proj_bias=bias and model_type == "llama",
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_ids=_token_ids(raw.get("eos_token_id")),
            sliding_window=_sliding_window(raw),
            dtype=raw.get("dtype") or raw.get("torch_dtype"),
        )

    def to_hf(self, dtype: str | None = None) -> dict[str, Any]:
        """A config.json dict that transformers (v4 and v5) loads as the same model."""
        out: dict[str, Any] = {
            "architectures": [ARCHITECTURES[self.model_type]],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": _rope_scaling_dict(self.rope_scaling),
            "tie_word_embeddings": self.tie_word_embeddings,
            "max_position_embeddings": self.max_position_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": _token_ids_json(self.eos_token_ids),
            "sliding_window": self.sliding_window,
            "dtype": dtype or self.dtype or "float32",
        }
        if self.model_type == "llama":
            out["attention_bias"] = self.attention_bias
        if self.model_type == "qwen2":
            out["use_sliding_window"] = self.sliding_window is not None
        return out

    @property
    def eos_token_id(self) -> int | None:
        """The first end-of-sequence id (None when the config names none)."""
        return self.eos_token_ids[0] if self.eos_token_ids else None

    @property
    def num_queries_per_kv(self) -> int:
        """Query heads served by each KV head (GQA group size)."""
        return self.num_attention_heads // self.num_key_value_heads

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """KV-cache bytes per token: 2 (K and V) * layers * KV heads * head_dim * dtype_bytes."""
        return 2 * self.num_hidden_layers * self.num_key_value_heads * self.head_dim * dtype_bytes

    def param_count(self) -> int:
        """Number of parameters (a tied lm_head counted once)."""
        hidden, q_dim = self.hidden_size, self.num_attention_heads * self.head_dim
        kv_dim = self.num_key_value_heads * self.head_dim
        attention = hidden * (q_dim + 2 * kv_dim) + q_dim * hidden
        attention += (q_dim + 2 * kv_dim) * self.attention_bias + hidden * self.o_proj_bias
        mlp = 3 * hidden * self.intermediate_size
        layer = attention + mlp + 2 * hidden  # two RMSNorm weights
        embed = self.vocab_size * hidden
        lm_head = 0 if self.tie_word_embeddings else embed
        return embed + self.num_hidden_layers * layer + hidden + lm_head


def _read_config_json(path: Path) -> dict[str, Any]:
    file = path / "config.json" if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(
            f"{file} does not exist; point at a HF model folder or its config.json."
        )
    return json.loads(file.read_text())


def _check_supported(raw: Mapping[str, Any]) -> None:
    """Refuse configs whose weights this decoder would silently compute wrongly."""
    if raw.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {raw['hidden_act']!r} is not supported; only 'silu' is.")
    if raw.get("mlp_bias"):
        raise ValueError("mlp_bias=true is not supported; use a config without MLP biases.")
    if float(raw.get("partial_rotary_factor", 1.0)) != 1.0:
        raise ValueError("partial_rotary_factor != 1 is not supported; RoPE must span head_dim.")


def _parse_rope(raw: Mapping[str, Any]) -> tuple[float, RopeScaling | None]:
    """(rope_theta, scaling) from either the v4 keys (rope_theta, rope_scaling) or v5's
    rope_parameters dict."""
    params = {**(raw.get("rope_scaling") or {}), **(raw.get("rope_parameters") or {})}
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise ValueError(
            f"RoPE scaling type {rope_type!r} is not supported; use a model with default "
            "or 'llama3' RoPE."
        )
    original = params.get("original_max_position_embeddings", raw.get("max_position_embeddings"))
    scaling = RopeScaling(
        factor=float(params["factor"]),
        low_freq_factor=float(params["low_freq_factor"]),
        high_freq_factor=float(params["high_freq_factor"]),
        original_max_position_embeddings=int(original),
    )
    return theta, scaling


def _rope_scaling_dict(scaling: RopeScaling | None) -> dict[str, Any] | None:
    if scaling is None:
        return None
    return {
        "rope_type": "llama3",
        "factor": scaling.factor,
        "low_freq_factor": scaling.low_freq_factor,
        "high_freq_factor": scaling.high_freq_factor,
        "original_max_position_embeddings": scaling.original_max_position_embeddings,
    }


def _token_ids(value: int | list[int] | None) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, list | tuple) else (int(value),)


def _token_ids_json(ids: tuple[int, ...]) -> int | list[int] | None:
    if not ids:
        return None
    return ids[0] if len(ids) == 1 else list(ids)


def _sliding_window(raw: Mapping[str, Any]) -> int | None:
    """Qwen2 ships a sliding_window value but only uses it when use_sliding_window is true."""
    if raw.get("model_type") == "qwen2" and not raw.get("use_sliding_window", False):
        return None
    window = raw.get("sliding_window")
    return int(window) if window else None


@dataclass(frozen=True)
class EngineConfig:
    """How the engine caches and schedules. Sizes in tokens unless named otherwise."""

    mode: str = "paged"  # paged | contiguous | none (recompute the whole prefix every step)
    scheduling: str = "continuous"  # continuous | static
    block_size: int = 16
    num_blocks: int | None = None  # default: enough for max_num_seqs full-length sequences
    max_model_len: int = 512
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    static_batch_size: int = 8
    # Speed knobs, off by default (labs and tests run eager): pad decode batches up to the
    # next bucket size so shapes repeat; torch.compile the model for decode steps; capture
    # decode steps as CUDA graphs (CUDA only; implies bucketing).
    bucket_batches: bool = False
    compile: bool = False
    cuda_graphs: bool = False

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}.")
        if self.scheduling not in ("continuous", "static"):
            raise ValueError(f"scheduling must be continuous or static, not {self.scheduling!r}.")

    @property
    def batch_buckets(self) -> tuple[int, ...]:
        """Decode batch sizes that are padded to: 1, 2, 4, 8, then multiples of 8 up to
        max_num_seqs (which is always the last)."""
        small = [b for b in (1, 2, 4) if b < self.max_num_seqs]
        return (*small, *range(8, self.max_num_seqs, 8), self.max_num_seqs)

    @property
    def num_kv_blocks(self) -> int:
        """Blocks of the paged cache: `num_blocks`, or enough for max_num_seqs full sequences."""
        if self.num_blocks:
            return self.num_blocks
        return self.max_num_seqs * math.ceil(self.max_model_len / self.block_size)
