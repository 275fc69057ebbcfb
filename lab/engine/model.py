"""Llama-family decoder (llama / mistral / qwen2) with Hugging Face parameter names.

The model never stores K/V: each layer hands its new q/k/v to an attention backend
(`backend.attend(layer, q, k, v)`), so one model serves the paged, contiguous and no-cache
modes. The backends, `DenseAttention` (no cache) included, are in attention.py.
"""

from __future__ import annotations

import functools
import json
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from lab.engine.attention import AttentionBackend
from lab.engine.config import ModelConfig, RopeScaling

# Old checkpoints saved RoPE tables; they are recomputed here, never loaded.
_IGNORED_KEY_SUFFIXES = ("rotary_emb.inv_freq",)


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in float32 and cast back as HF does."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == torch.float32:  # one fused kernel, bit-identical to the formula below
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None) -> Tensor:
    """Inverse frequencies [head_dim // 2] (radians per position), float32, on CPU."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device="cpu").float() / head_dim
    inv_freq = 1.0 / (theta**exponents)
    return inv_freq if scaling is None else _llama3_scale(inv_freq, scaling)


def _llama3_scale(inv_freq: Tensor, s: RopeScaling) -> Tensor:
    """Llama-3.1 scaling: stretch long wavelengths by `factor`, keep short ones, blend between."""
    low_freq_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_freq_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rotate_half(x: Tensor) -> Tensor:
    """HF's convention: the two halves of head_dim form the (real, imaginary) pairs."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Rotary:
    """RoPE for arbitrary absolute positions. The frequency table is no module buffer, so it
    stays float32 whatever dtype the model is cast to; one copy per device."""

    def __init__(self, config: ModelConfig) -> None:
        self.inv_freq_cpu = rope_inv_freq(config.head_dim, config.rope_theta, config.rope_scaling)
        self._inv_freq_by_device: dict[torch.device, Tensor] = {}

    def cos_sin(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos, sin tables [T, head_dim] for `positions` [T], in `dtype`."""
        inv_freq = self._inv_freq_by_device.get(positions.device)
        if inv_freq is None:
            inv_freq = self.inv_freq_cpu.to(positions.device)
            self._inv_freq_by_device[positions.device] = inv_freq
        freqs = positions.float()[:, None] * inv_freq[None, :]
        angles = torch.cat((freqs, freqs), dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate x [T, heads, head_dim] by the per-token angles in cos/sin [T, head_dim]."""
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


@functools.cache
def mv_reads_faster() -> bool:
    """Whether `torch.mv` reads a bf16 weight faster than `F.linear` for one row on this CPU,
    timed once per process on 48 MB of weights (more than most L3s). It depends on the
    CPU: ~1.5x faster on an Intel server with AMX, ~1.6x slower on an AMD EPYC with
    avx512_bf16 (issue 31), so it is measured, not assumed."""
    weights = [torch.randn(4096, 2048).to(torch.bfloat16) for _ in range(3)]
    x = torch.randn(1, 2048).to(torch.bfloat16)
    ways = {
        "mv": lambda w: torch.mv(w, x[0]),
        "linear": lambda w: F.linear(x, w),
    }
    best = {k: float("inf") for k in ways}
    for _ in range(3):
        for name, way in ways.items():
            start = time.perf_counter()
            for w in weights:
                way(w)
            best[name] = min(best[name], time.perf_counter() - start)
    return best["mv"] < best["linear"]


def linear(layer: nn.Module, x: Tensor) -> Tensor:
    """`layer(x)`; a single bf16 row on CPU goes through `torch.mv` where that reads the
    weight faster than the GEMM `F.linear` picks (mv_reads_faster: measured per machine)."""
    single_bf16_row = x.shape[0] == 1 and x.dtype == torch.bfloat16 and x.device.type == "cpu"
    if single_bf16_row and type(layer) is nn.Linear and mv_reads_faster():
        out = torch.mv(layer.weight, x[0])[None]
        return out if layer.bias is None else out + layer.bias
    return layer(x)


class FusedLinears(nn.Module):
    """Holds one weight for several HF linears that read the same input (q/k/v, gate/up):
    one matmul instead of three or two. `state_dict()` still names the HF parts
    (`q_proj.weight`, ...), and `load_state_dict` accepts them, so checkpoints stay HF."""

    def __init__(self, fused: dict[str, tuple[tuple[str, int], ...]]) -> None:
        super().__init__()
        self._fused = fused  # fused attribute -> ((HF name, output rows), ...)
        self.register_state_dict_post_hook(FusedLinears._split_parts)
        self.register_load_state_dict_pre_hook(FusedLinears._join_parts)

    def _split_parts(self, state: dict, prefix: str, _metadata) -> None:
        for fused, parts in self._fused.items():
            if type(getattr(self, fused)) is not nn.Linear:  # quantised: keep its buffers
                continue
            for kind in ("weight", "bias"):
                tensor = state.pop(f"{prefix}{fused}.{kind}", None)
                if tensor is not None:
                    pieces = tensor.split([rows for _, rows in parts])
                    state.update(
                        {
                            f"{prefix}{name}.{kind}": t
                            for (name, _), t in zip(parts, pieces, strict=True)
                        }
                    )

    def _join_parts(self, state: dict, prefix: str, *_args) -> None:
        for fused, parts in self._fused.items():
            for kind in ("weight", "bias"):
                keys = [f"{prefix}{name}.{kind}" for name, _ in parts]
                if all(key in state for key in keys):
                    state[f"{prefix}{fused}.{kind}"] = torch.cat([state.pop(key) for key in keys])


class Attention(FusedLinears):
    """Projections (q/k/v fused into `qkv_proj`) and RoPE; the attention is the backend's."""

    def __init__(self, config: ModelConfig) -> None:
        hidden, head_dim = config.hidden_size, config.head_dim
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        super().__init__(
            {
                "qkv_proj": (
                    ("q_proj", heads * head_dim),
                    ("k_proj", kv_heads * head_dim),
                    ("v_proj", kv_heads * head_dim),
                )
            }
        )
        self.num_heads, self.num_kv_heads, self.head_dim = heads, kv_heads, head_dim
        bias = config.attention_bias
        self.qkv_proj = nn.Linear(hidden, (heads + 2 * kv_heads) * head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=config.o_proj_bias)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, layer: int, backend: AttentionBackend
    ) -> Tensor:
        tokens, heads, kv_heads = x.shape[0], self.num_heads, self.num_kv_heads
        qkv = linear(self.qkv_proj, x).view(tokens, heads + 2 * kv_heads, self.head_dim)
        q, k = apply_rope(qkv[:, : heads + kv_heads], cos, sin).split([heads, kv_heads], dim=1)
        out = backend.attend(layer, q, k, qkv[:, heads + kv_heads :])
        return linear(self.o_proj, out.reshape(tokens, heads * self.head_dim))


class MLP(FusedLinears):
    """SiLU-gated feed-forward: down(silu(gate(x)) * up(x)); gate and up fused."""

    def __init__(self, config: ModelConfig) -> None:
        hidden, inner = config.hidden_size, config.intermediate_size
        super().__init__({"gate_up_proj": (("gate_proj", inner), ("up_proj", inner))})
        self.gate_up_proj = nn.Linear(hidden, 2 * inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        gate, up = linear(self.gate_up_proj, x).chunk(2, dim=-1)
        return linear(self.down_proj, F.silu(gate) * up)


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attn(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self, x: Tensor, cos: Tensor, sin: Tensor, layer: int, backend: AttentionBackend
    ) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, layer, backend)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderStack(nn.Module):
    """HF's `model.` prefix: embeddings, layers and the final norm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaModel(nn.Module):
    """Decoder over flattened new tokens; parameter names match HF's *ForCausalLM."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = DecoderStack(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.rotary = Rotary(config)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids: Tensor, positions: Tensor, backend: AttentionBackend) -> Tensor:
        """input_ids, positions (absolute): LongTensor [T] -> final-norm hidden [T, hidden]."""
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        for layer, block in enumerate(self.model.layers):
            x = block(x, cos, sin, layer, backend)
        return self.model.norm(x)

    def logits(self, hidden: Tensor) -> Tensor:
        """hidden [rows, hidden] -> logits [rows, vocab] in the model's dtype."""
        return linear(self.lm_head, hidden)

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype


def load_model(
    path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu"
) -> LlamaModel:
    """Build the model from a HF folder (config.json + model.safetensors, or shards)."""
    path = Path(path)
    config = ModelConfig.from_hf(path)
    with torch.device("meta"):
        model = LlamaModel(config)
    state = _drop_unused(_read_weights(path, device), config)
    _check_keys(model, state, path)
    model.load_state_dict({k: t.to(dtype) for k, t in state.items()}, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.requires_grad_(False).eval()


def _read_weights(path: Path, device: str | torch.device) -> dict[str, Tensor]:
    single = path / "model.safetensors"
    if single.is_file():
        return load_file(single, device=str(device))
    index = path / "model.safetensors.index.json"
    if not index.is_file():
        raise FileNotFoundError(
            f"{path} has neither model.safetensors nor model.safetensors.index.json; "
            "save the model with safe_serialization=True."
        )
    shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    state: dict[str, Tensor] = {}
    for shard in shards:
        state.update(load_file(path / shard, device=str(device)))
    return state


def _drop_unused(state: dict[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """Remove saved RoPE tables, and the lm_head copy some tied checkpoints carry."""
    tied = config.tie_word_embeddings
    return {
        k: t
        for k, t in state.items()
        if not k.endswith(_IGNORED_KEY_SUFFIXES) and not (tied and k == "lm_head.weight")
    }


def _check_keys(model: LlamaModel, state: dict[str, Tensor], path: Path) -> None:
    """Raise, naming the keys, when the checkpoint does not match the config."""
    tied = model.config.tie_word_embeddings
    expected = {k for k in model.state_dict() if not (tied and k == "lm_head.weight")}
    missing, unexpected = sorted(expected - state.keys()), sorted(state.keys() - expected)
    if missing or unexpected:
        raise ValueError(
            f"The weights in {path} do not match its config.json "
            f"({model.config.model_type}, {model.config.num_hidden_layers} layers): "
            f"missing keys {_preview(missing)}; unexpected keys {_preview(unexpected)}. "
            "Check that config.json and the safetensors file belong to the same model."
        )


def _preview(keys: list[str], limit: int = 8) -> str:
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"{keys[:limit]}{more}"


def random_model(
    shape: dict,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> LlamaModel:
    """Our model of an HF config dict's shape with HF-style random init (normal(0, 0.02)
    matrices, unit norms): it times like a trained one, since timing depends on shapes."""
    torch.manual_seed(seed)
    model = LlamaModel(ModelConfig.from_hf(shape))
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02) if p.dim() > 1 else p.fill_(1.0)
    return model.requires_grad_(False).eval().to(device=device, dtype=dtype)


def save_model(model: LlamaModel, path: str | Path) -> None:
    """Write config.json + model.safetensors in HF format (transformers can load them)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    dtype_name = str(model.dtype).removeprefix("torch.")
    config = model.config.to_hf(dtype=dtype_name)
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    state = {
        k: t.detach().to("cpu").contiguous()
        for k, t in model.state_dict().items()
        if not (model.config.tie_word_embeddings and k == "lm_head.weight")
    }
    save_file(state, path / "model.safetensors", metadata={"format": "pt"})


def weight_bytes(model: nn.Module) -> int:
    """Bytes of parameters and buffers (shared tensors once): what each decode step reads.

    Exact for quantized modules too (their codes and scales are buffers)."""
    tensors = {id(t): t for t in (*model.parameters(), *model.buffers())}
    return sum(t.numel() * t.element_size() for t in tensors.values())
