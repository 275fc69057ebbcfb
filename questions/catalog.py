"""The catalog of real models, GPUs and dtypes that the question bank draws numbers from.

`catalog.yaml` (beside this module) holds figures from the checked fact sheet
(`shared/facts/catalog.md`). This module loads and validates it into frozen dataclasses and
derives figures from the shapes alone (parameter counts, KV-cache bytes, roofline ridge
points), so the tests can check them against the sheet's published values.

Plain Python: no Django import, so it can be used from scripts and tests without settings.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

DEFAULT_PATH = Path(__file__).with_name("catalog.yaml")


class CatalogError(ValueError):
    """The catalog YAML is missing a field, has a wrong type or an unknown field."""


@dataclass(frozen=True)
class MoeSpec:
    """Mixture-of-experts shape (counts are dimensionless)."""

    experts: int  # routed experts per MoE layer
    experts_per_token: int  # routed experts chosen per token (top-k)
    expert_intermediate: int  # FFN width of one expert
    shared_experts: int  # always-on experts per MoE layer (DeepSeek), 0 for Mixtral
    moe_layers: int
    dense_layers: int  # layers with a dense FFN of width `intermediate`


@dataclass(frozen=True)
class MlaSpec:
    """DeepSeek multi-head latent attention dimensions (values per head or per layer)."""

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_lora_rank: int


@dataclass(frozen=True)
class PublishedModel:
    """Figures from the fact sheet, recorded for cross-checks (counts in parameters)."""

    params: str  # as published, e.g. "70B"
    kv_bytes_per_token_bf16: int  # bytes per token, all layers, K and V (sheet table A4)
    params_computed_count: float  # the sheet's "Computed from config" figure
    params_count: float | None = None  # published figure as a number
    active_params_count: float | None = None
    active_params_computed_count: float | None = None


@dataclass(frozen=True)
class ModelSpec:
    """One model's shape (HF config values; counts dimensionless)."""

    slug: str
    name: str
    attention: Literal["mha", "gqa", "mla"]
    layers: int
    hidden: int
    intermediate: int  # dense FFN width (MoE models: see `moe.expert_intermediate`)
    heads: int
    kv_heads: int
    head_dim: int
    head_dim_source: Literal["config", "derived"]
    vocab: int
    max_position_tokens: int  # tokens
    tie_embeddings: bool
    published: PublishedModel
    source: str
    notes: str = ""
    rope_theta: float | None = None
    sliding_window_tokens: int | None = None  # tokens
    qkv_bias: bool = False
    moe: MoeSpec | None = None
    mla: MlaSpec | None = None


@dataclass(frozen=True)
class PublishedGpu:
    """Figures from the fact sheet, recorded for cross-checks."""

    ridge_flop_per_byte: float  # FLOP/byte, dense BF16 over memory bandwidth


@dataclass(frozen=True)
class GpuSpec:
    """One GPU's datasheet figures (decimal units; dense = without 2:4 sparsity)."""

    slug: str
    name: str
    memory_gb: float  # GB (1e9 bytes)
    memory_type: str
    bandwidth_gb_s: float  # GB/s
    bf16_dense_tflops: float  # TFLOPS (1e12 FLOP/s)
    bf16_sparse_tflops: float
    int8_dense_tops: float  # TOPS (1e12 op/s)
    link: str
    link_bandwidth_gb_s: float  # GB/s, total bidirectional as printed
    tdp_w: float  # W
    published: PublishedGpu
    source: str
    notes: str = ""
    fp8_dense_tflops: float | None = None  # absent on GPUs without FP8 (A100)
    fp8_sparse_tflops: float | None = None
    fp4_dense_tflops: float | None = None  # FP4 tensor-core math (Blackwell); absent before it
    fp4_sparse_tflops: float | None = None


@dataclass(frozen=True)
class DtypeSpec:
    """A number format: `bytes` per element (0.5 for int4)."""

    slug: str
    name: str
    bytes: float
    source: str


@dataclass(frozen=True)
class Catalog:
    """The loaded catalog: slug -> spec for each section."""

    models: dict[str, ModelSpec]
    gpus: dict[str, GpuSpec]
    dtypes: dict[str, DtypeSpec]


# --- loading and validation ---------------------------------------------------------------

_SECTIONS: dict[str, type] = {"models": ModelSpec, "gpus": GpuSpec, "dtypes": DtypeSpec}


def _type_name(tp: Any) -> str:
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[tp]


def _convert(value: Any, tp: Any, where: str) -> Any:
    """Check `value` against annotation `tp` (nested dataclasses allowed); return it typed."""
    args = typing.get_args(tp)
    if isinstance(tp, types.UnionType):  # `X | None`: None only reaches here if explicit
        (inner,) = [a for a in args if a is not type(None)]
        if value is None:
            return None
        return _convert(value, inner, where)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        str: isinstance(value, str),
    }.get(tp)
    if typing.get_origin(tp) is Literal:
        ok = value in args
    if not ok:
        raise CatalogError(f"{where} should be {_type_name(tp)}, got {value!r}.")
    return float(value) if tp is float else value


def _build(cls: type, data: Any, where: str, slug: str | None = None) -> Any:
    """Build dataclass `cls` from a YAML mapping, naming `where` in any error."""
    if not isinstance(data, dict):
        raise CatalogError(f"{where} should be a mapping of fields, got {data!r}.")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "slug"}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise CatalogError(f"{where} has unknown field(s): {', '.join(map(str, unknown))}.")
    kwargs: dict[str, Any] = {} if slug is None else {"slug": slug}
    for name, field in fields.items():
        required = field.default is dataclasses.MISSING
        if name not in data:
            if required:
                raise CatalogError(f"{where} is missing required field '{name}'.")
            continue
        kwargs[name] = _convert(data[name], hints[name], f"{where} field '{name}'")
    return cls(**kwargs)


def _check_model(m: ModelSpec) -> None:
    where = f"Model '{m.slug}'"
    if (m.attention == "mla") != (m.mla is not None):
        raise CatalogError(f"{where} field 'mla' must be given exactly when attention is mla.")
    if m.moe is not None and m.moe.moe_layers + m.moe.dense_layers != m.layers:
        raise CatalogError(f"{where} field 'moe': moe_layers + dense_layers != layers.")
    if m.attention == "mha" and m.kv_heads != m.heads:
        raise CatalogError(f"{where} field 'kv_heads' must equal heads for mha.")
    if m.head_dim_source == "derived" and m.head_dim * m.heads != m.hidden:
        raise CatalogError(f"{where} field 'head_dim' is marked derived but != hidden/heads.")


def parse_catalog(data: Any) -> Catalog:
    """Validate parsed YAML `data` and build a `Catalog`; raise `CatalogError` if invalid."""
    if not isinstance(data, dict):
        raise CatalogError("The catalog should be a mapping with models, gpus and dtypes.")
    unknown = sorted(set(data) - set(_SECTIONS))
    if unknown:
        raise CatalogError(f"The catalog has unknown section(s): {', '.join(map(str, unknown))}.")
    sections: dict[str, dict[str, Any]] = {}
    for section, cls in _SECTIONS.items():
        entries = data.get(section)
        if not isinstance(entries, dict) or not entries:
            raise CatalogError(f"The catalog section '{section}' is missing or empty.")
        label = section[:-1].capitalize()
        sections[section] = {
            str(slug): _build(cls, fields, f"{label} '{slug}'", slug=str(slug))
            for slug, fields in entries.items()
        }
    for model in sections["models"].values():
        _check_model(model)
    return Catalog(**sections)


def _load(path: Path) -> Catalog:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path} is not valid YAML: {exc}") from exc
    return parse_catalog(data)


@functools.lru_cache(maxsize=1)
def _load_default() -> Catalog:
    return _load(DEFAULT_PATH)


def load_catalog(path: Path | None = None) -> Catalog:
    """Load and validate the catalog (default: `catalog.yaml` beside this module, cached)."""
    return _load_default() if path is None else _load(Path(path))


# --- derived figures (from the shapes only) -------------------------------------------------


def _attention_params(m: ModelSpec) -> int:
    """Attention weights (and biases) of one layer, in parameters."""
    h = m.hidden
    if m.mla is not None:
        a = m.mla
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        return (
            h * a.q_lora_rank  # q_a_proj
            + a.q_lora_rank  # q_a_layernorm
            + a.q_lora_rank * m.heads * qk_head  # q_b_proj
            + h * (a.kv_lora_rank + a.qk_rope_head_dim)  # kv_a_proj_with_mqa
            + a.kv_lora_rank  # kv_a_layernorm
            + a.kv_lora_rank * m.heads * (a.qk_nope_head_dim + a.v_head_dim)  # kv_b_proj
            + m.heads * a.v_head_dim * h  # o_proj
        )
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    weights = h * q + 2 * h * kv + q * h  # q, k, v, o
    return weights + (q + 2 * kv if m.qkv_bias else 0)


def _ffn_params(m: ModelSpec, *, active: bool) -> int:
    """FFN weights over all layers; with `active`, only the experts one token uses."""
    h = m.hidden
    if m.moe is None:
        return m.layers * 3 * h * m.intermediate
    e = m.moe
    routed = e.experts_per_token if active else e.experts
    per_moe_layer = e.experts * h + (routed + e.shared_experts) * 3 * h * e.expert_intermediate
    return e.dense_layers * 3 * h * m.intermediate + e.moe_layers * per_moe_layer


def _param_count(m: ModelSpec, *, active: bool) -> int:
    embeddings = m.vocab * m.hidden * (1 if m.tie_embeddings else 2)
    norms = 2 * m.hidden * m.layers + m.hidden
    return embeddings + m.layers * _attention_params(m) + _ffn_params(m, active=active) + norms


def param_count(model: ModelSpec) -> int:
    """Total parameters (dimensionless count) computed from the shape.

    Embeddings (+ untied LM head), per-layer attention (q/k/v/o with head_dim and KV heads,
    QKV biases where present, or DeepSeek's MLA projections), FFN (gate/up/down, or router
    + routed and shared experts) and RMSNorm weights. Excludes DeepSeek-V3's MTP module.
    """
    return _param_count(model, active=False)


def active_param_count(model: ModelSpec) -> int:
    """Parameters used per token (count): as `param_count` but with only the top-k routed
    experts plus shared experts; equals `param_count` for dense models."""
    return _param_count(model, active=True)


def kv_values_per_layer(model: ModelSpec) -> int:
    """Values cached per token per layer (count): 2 x kv_heads x head_dim, or for MLA the
    latent plus the decoupled RoPE key (512 + 64 = 576 for DeepSeek-V3)."""
    if model.mla is not None:
        return model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
    return 2 * model.kv_heads * model.head_dim


def kv_bytes_per_token(model: ModelSpec, dtype_bytes: float = 2) -> float:
    """KV-cache bytes per token over all layers, with `dtype_bytes` bytes per value."""
    return model.layers * kv_values_per_layer(model) * dtype_bytes


def ridge_flop_per_byte(gpu: GpuSpec) -> float:
    """Roofline ridge point in FLOP/byte: dense BF16 TFLOPS over memory bandwidth (GB/s)."""
    return gpu.bf16_dense_tflops * 1e12 / (gpu.bandwidth_gb_s * 1e9)


# --- expression variables --------------------------------------------------------------------


def _model_variables(m: ModelSpec, ureg: Any) -> dict[str, object]:
    out: dict[str, object] = {
        "name": m.name,
        "layers": m.layers,
        "hidden": m.hidden,
        "intermediate": m.intermediate,
        "heads": m.heads,
        "kv_heads": m.kv_heads,
        "head_dim": m.head_dim,
        "vocab": m.vocab,
        "max_position": ureg.Quantity(m.max_position_tokens, "token"),
        "params": param_count(m),
        "active_params": active_param_count(m),
        "kv_values_per_layer": kv_values_per_layer(m),
    }
    if m.sliding_window_tokens is not None:
        out["sliding_window"] = ureg.Quantity(m.sliding_window_tokens, "token")
    if m.moe is not None:
        out["experts"] = m.moe.experts
        out["experts_per_token"] = m.moe.experts_per_token
        out["expert_intermediate"] = m.moe.expert_intermediate
        out["shared_experts"] = m.moe.shared_experts
        out["moe_layers"] = m.moe.moe_layers
    return out


def _gpu_variables(g: GpuSpec, ureg: Any) -> dict[str, object]:
    q = ureg.Quantity
    out: dict[str, object] = {
        "name": g.name,
        "memory": q(g.memory_gb, "GB"),
        "bandwidth": q(g.bandwidth_gb_s, "GB/s"),
        "bf16_tflops": q(g.bf16_dense_tflops, "TFLOPS"),
        "int8_tops": q(g.int8_dense_tops, "TFLOPS"),
        "link_bandwidth": q(g.link_bandwidth_gb_s, "GB/s"),
        "tdp": q(g.tdp_w, "W"),
    }
    if g.fp8_dense_tflops is not None:
        out["fp8_tflops"] = q(g.fp8_dense_tflops, "TFLOPS")
    if g.fp4_dense_tflops is not None:
        out["fp4_tflops"] = q(g.fp4_dense_tflops, "TFLOPS")
    return out


def _dtype_variables(d: DtypeSpec, ureg: Any) -> dict[str, object]:
    return {
        "name": d.name,
        "bytes": ureg.Quantity(d.bytes, "B"),
        "bits": ureg.Quantity(d.bytes * 8, "bit"),
    }


def variables(kind: str, slug: str, prefix: str) -> dict[str, object]:
    """Expression variables for one catalog entry, named `<prefix>_<field>`.

    `kind` is a catalog section ("models", "gpus" or "dtypes"). Counts are plain ints;
    quantities are pint quantities from `questions.expressions.UREG` (token, GB, GB/s,
    TFLOPS, W, B, bit), as listed in docs/BANK_FORMAT.md "Catalog variables".
    """
    from questions.expressions import UREG

    catalog = load_catalog()
    builders = {
        "models": (catalog.models, _model_variables),
        "gpus": (catalog.gpus, _gpu_variables),
        "dtypes": (catalog.dtypes, _dtype_variables),
    }
    if kind not in builders:
        raise CatalogError(f"Unknown catalog kind '{kind}' (expected models, gpus or dtypes).")
    entries, build = builders[kind]
    if slug not in entries:
        raise CatalogError(f"The catalog section '{kind}' has no entry '{slug}'.")
    return {f"{prefix}_{key}": value for key, value in build(entries[slug], ureg=UREG).items()}
