"""The catalog agrees with itself and with the fact sheet's figures (shared/facts/catalog.md).

No Django needed: questions.catalog is plain Python.
"""

from __future__ import annotations

import copy
import importlib.util
import math
from pathlib import Path

import pytest
import yaml

from questions.catalog import (
    DEFAULT_PATH,
    Catalog,
    CatalogError,
    active_param_count,
    kv_bytes_per_token,
    kv_values_per_layer,
    load_catalog,
    param_count,
    parse_catalog,
    ridge_flop_per_byte,
    variables,
)

CATALOG = load_catalog()
MODELS = sorted(CATALOG.models)
GPUS = sorted(CATALOG.gpus)

EXPECTED_MODELS = {
    "llama-2-7b",
    "llama-2-13b",
    "llama-2-70b",
    "llama-3-8b",
    "llama-3.1-8b",
    "llama-3-70b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "mistral-7b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen2.5-7b",
    "qwen2.5-72b",
    "deepseek-v3",
}
EXPECTED_GPUS = {
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h100-pcie",
    "h200",
    "b200",
    "l4",
    "l40s",
    "mi300x",
}


def raw() -> dict:
    """A fresh copy of the parsed YAML, to break in validation tests."""
    return copy.deepcopy(yaml.safe_load(DEFAULT_PATH.read_text(encoding="utf-8")))


def published_tolerance(count: float) -> float:
    """Absolute tolerance a published figure implies: half a unit in its last printed digit
    (in billions, e.g. "70B" -> 0.5e9, "46.7B" -> 0.05e9), plus 1% for counting conventions
    (e.g. "70B" for Llama-2-70B, whose config gives 68.98B)."""
    text = f"{count / 1e9:g}"
    decimals = len(text.partition(".")[2])
    return 0.5 * 10.0**-decimals * 1e9 + 0.01 * count


# --- contents -------------------------------------------------------------------------------


def test_catalog_has_the_expected_entries() -> None:
    assert isinstance(CATALOG, Catalog)
    assert set(CATALOG.models) == EXPECTED_MODELS
    assert set(CATALOG.gpus) == EXPECTED_GPUS
    assert {s: d.bytes for s, d in CATALOG.dtypes.items()} == {
        "bf16": 2,
        "fp16": 2,
        "fp8": 1,
        "int8": 1,
        "int4": 0.5,
    }


def test_default_load_is_cached() -> None:
    assert load_catalog() is load_catalog()
    assert load_catalog(DEFAULT_PATH) == load_catalog()


# --- parameter counts -----------------------------------------------------------------------


@pytest.mark.parametrize("slug", MODELS)
def test_param_count_matches_sheet_computed_figure(slug: str) -> None:
    model = CATALOG.models[slug]
    computed = param_count(model)
    assert isinstance(computed, int)
    assert computed == pytest.approx(model.published.params_computed_count, rel=0.005)


@pytest.mark.parametrize("slug", MODELS)
def test_param_count_matches_published_figure(slug: str) -> None:
    pub = CATALOG.models[slug].published
    assert pub.params_count is not None, f"{slug} has no published count"
    assert f"{pub.params_count / 1e9:g}" in pub.params  # the number matches the text
    tolerance = published_tolerance(pub.params_count)
    assert abs(param_count(CATALOG.models[slug]) - pub.params_count) <= tolerance


@pytest.mark.parametrize("slug", MODELS)
def test_active_params(slug: str) -> None:
    model = CATALOG.models[slug]
    active = active_param_count(model)
    pub = model.published
    if model.moe is None:
        assert active == param_count(model)
        assert pub.active_params_count is None
        return
    assert active < param_count(model)
    assert pub.active_params_count is not None
    assert abs(active - pub.active_params_count) <= published_tolerance(pub.active_params_count)
    if pub.active_params_computed_count is not None:
        assert active == pytest.approx(pub.active_params_computed_count, rel=0.005)


def test_spot_checks_from_table_a3() -> None:
    m = CATALOG.models
    assert param_count(m["llama-3-70b"]) / 1e9 == pytest.approx(70.55, abs=0.01)
    assert param_count(m["llama-3.2-1b"]) / 1e9 == pytest.approx(1.24, abs=0.01)
    assert param_count(m["mixtral-8x7b"]) / 1e9 == pytest.approx(46.70, abs=0.01)
    assert active_param_count(m["mixtral-8x7b"]) / 1e9 == pytest.approx(12.88, abs=0.01)
    assert param_count(m["qwen2.5-72b"]) / 1e9 == pytest.approx(72.71, abs=0.01)
    assert param_count(m["deepseek-v3"]) / 1e9 == pytest.approx(671.0, abs=0.5)


def test_qwen_non_embedding_counts_match_cards() -> None:
    for slug, published in [("qwen2.5-7b", 6.53e9), ("qwen2.5-72b", 70.0e9)]:
        model = CATALOG.models[slug]
        non_embedding = param_count(model) - 2 * model.vocab * model.hidden
        assert abs(non_embedding - published) <= published_tolerance(published)


def test_tied_embeddings_count_once() -> None:
    model = CATALOG.models["llama-3.2-1b"]
    untied = type(model)(**{**model.__dict__, "tie_embeddings": False})
    assert param_count(untied) - param_count(model) == model.vocab * model.hidden


# --- KV cache -------------------------------------------------------------------------------


@pytest.mark.parametrize("slug", MODELS)
def test_kv_bytes_per_token_equals_table_a4(slug: str) -> None:
    model = CATALOG.models[slug]
    assert kv_bytes_per_token(model) == model.published.kv_bytes_per_token_bf16
    if model.mla is None:
        assert kv_bytes_per_token(model) == 2 * model.layers * model.kv_heads * model.head_dim * 2


def test_kv_gqa_trap_and_mla() -> None:
    llama3_8b = CATALOG.models["llama-3-8b"]
    assert kv_bytes_per_token(llama3_8b) == 131_072  # 8 KV heads, not 32 query heads
    assert 2 * llama3_8b.layers * llama3_8b.heads * llama3_8b.head_dim * 2 == 524_288
    deepseek = CATALOG.models["deepseek-v3"]
    assert kv_values_per_layer(deepseek) == 576
    assert kv_bytes_per_token(deepseek) == 70_272
    assert kv_bytes_per_token(deepseek, dtype_bytes=1) == 35_136


# --- GPUs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("slug", GPUS)
def test_ridge_point_matches_sheet(slug: str) -> None:
    gpu = CATALOG.gpus[slug]
    assert ridge_flop_per_byte(gpu) == pytest.approx(gpu.published.ridge_flop_per_byte, rel=0.01)


# L40S datasheet: BF16 362 dense vs 733 sparse (366.5 would be exactly half).
KNOWN_ROUNDING = {("l40s", "bf16"): 0.015}


@pytest.mark.parametrize("slug", ["h100-sxm", "h100-pcie", "h200", "b200", "l4", "l40s"])
def test_nvidia_dense_is_half_of_sparse(slug: str) -> None:
    gpu = CATALOG.gpus[slug]
    pairs = {
        "bf16": (gpu.bf16_dense_tflops, gpu.bf16_sparse_tflops),
        "fp8": (gpu.fp8_dense_tflops, gpu.fp8_sparse_tflops),
    }
    for precision, (dense, sparse) in pairs.items():
        assert dense is not None and sparse is not None
        rel = KNOWN_ROUNDING.get((slug, precision))
        if rel is None:  # datasheets round; allow 1 TFLOPS
            assert abs(dense - sparse / 2) <= 1, (slug, precision)
        else:
            assert dense == pytest.approx(sparse / 2, rel=rel), (slug, precision)
    assert gpu.int8_dense_tops == pytest.approx(gpu.fp8_dense_tflops)


def test_fp4_only_on_blackwell_and_dense_is_half_of_sparse() -> None:
    with_fp4 = {slug for slug, gpu in CATALOG.gpus.items() if gpu.fp4_dense_tflops is not None}
    assert with_fp4 == {"b200"}
    b200 = CATALOG.gpus["b200"]
    assert (b200.fp4_dense_tflops, b200.fp4_sparse_tflops) == (9000, 18000)
    assert b200.fp4_dense_tflops == 2 * b200.fp8_dense_tflops  # "18 PF FP4" is sparse
    assert "fp4_tflops" not in variables("gpus", "h200", "gpu")
    assert variables("gpus", "b200", "gpu")["gpu_fp4_tflops"].to("TFLOPS").magnitude == 9000


def test_a100_has_no_fp8_and_others_do() -> None:
    for slug, gpu in CATALOG.gpus.items():
        has_fp8 = not slug.startswith("a100")
        assert (gpu.fp8_dense_tflops is not None) == has_fp8, slug
        assert (gpu.fp8_sparse_tflops is not None) == has_fp8, slug


def test_gpu_spot_checks() -> None:
    g = CATALOG.gpus
    assert g["h100-sxm"].fp8_dense_tflops == 1979  # the 3,958 headline is sparse
    assert g["b200"].memory_gb == 180  # as shipped, not the announced 192
    assert g["l40s"].link_bandwidth_gb_s == 64  # PCIe Gen4 x16, bidirectional
    assert g["mi300x"].bf16_dense_tflops == 1307.4


# --- shapes ---------------------------------------------------------------------------------


def test_head_dim_explicit_for_llama_3_2() -> None:
    for slug, head_dim in [("llama-3.2-1b", 64), ("llama-3.2-3b", 128)]:
        model = CATALOG.models[slug]
        assert model.head_dim == head_dim
        assert model.head_dim_source == "config"
        assert model.tie_embeddings is True
    assert CATALOG.models["llama-3-70b"].head_dim_source == "derived"


def test_shape_facts() -> None:
    m = CATALOG.models
    assert [s for s, x in m.items() if x.sliding_window_tokens is not None] == ["mistral-7b"]
    assert m["mistral-7b"].sliding_window_tokens == 4096
    assert {s for s, x in m.items() if x.attention == "mha"} == {"llama-2-7b", "llama-2-13b"}
    assert {s for s, x in m.items() if x.qkv_bias} == {"qwen2.5-7b", "qwen2.5-72b"}
    assert {s for s, x in m.items() if x.moe} == {"mixtral-8x7b", "mixtral-8x22b", "deepseek-v3"}
    assert "32768" in m["mixtral-8x22b"].notes
    assert "nominal" in m["deepseek-v3"].notes and "576" in m["deepseek-v3"].notes
    moe = m["deepseek-v3"].moe
    assert moe is not None and (moe.dense_layers, moe.moe_layers) == (3, 58)


# --- validation -----------------------------------------------------------------------------


def test_missing_field_names_entry_and_field() -> None:
    data = raw()
    del data["models"]["llama-3-70b"]["kv_heads"]
    with pytest.raises(CatalogError, match=r"Model 'llama-3-70b'.*'kv_heads'"):
        parse_catalog(data)


def test_wrong_type_names_entry_and_field() -> None:
    data = raw()
    data["gpus"]["h100-sxm"]["bandwidth_gb_s"] = "3.35 TB/s"
    with pytest.raises(CatalogError, match=r"Gpu 'h100-sxm' field 'bandwidth_gb_s'.*number"):
        parse_catalog(data)


@pytest.mark.parametrize(
    ("path", "value", "pattern"),
    [
        (("models", "llama-2-7b", "layers"), True, r"'llama-2-7b' field 'layers'.*integer"),
        (("models", "llama-2-7b", "layers"), 32.5, r"'llama-2-7b' field 'layers'.*integer"),
        (("models", "llama-2-7b", "attention"), "mqa", r"'llama-2-7b' field 'attention'"),
        (
            ("models", "mixtral-8x7b", "moe", "experts"),
            "8",
            r"'mixtral-8x7b' field 'moe' field 'experts'",
        ),
        (
            ("models", "qwen2.5-7b", "published", "params_count"),
            "7.61e9",  # how PyYAML reads an unsigned exponent
            r"'qwen2.5-7b' field 'published' field 'params_count'",
        ),
        (("dtypes", "int4", "bytes"), None, r"Dtype 'int4' field 'bytes'"),
    ],
)
def test_wrong_types_are_rejected(path: tuple[str, ...], value: object, pattern: str) -> None:
    data = raw()
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(CatalogError, match=pattern):
        parse_catalog(data)


def test_missing_nested_field_and_unknown_field() -> None:
    data = raw()
    del data["models"]["deepseek-v3"]["mla"]["kv_lora_rank"]
    with pytest.raises(CatalogError, match=r"'deepseek-v3' field 'mla'.*'kv_lora_rank'"):
        parse_catalog(data)
    data = raw()
    data["gpus"]["l4"]["bandwith_gb_s"] = 300
    with pytest.raises(CatalogError, match=r"Gpu 'l4'.*bandwith_gb_s"):
        parse_catalog(data)


def test_inconsistent_shape_is_rejected() -> None:
    data = raw()
    data["models"]["llama-2-7b"]["head_dim"] = 64
    with pytest.raises(CatalogError, match=r"Model 'llama-2-7b' field 'head_dim'"):
        parse_catalog(data)


def test_load_catalog_from_a_path_validates(tmp_path: Path) -> None:
    data = raw()
    del data["gpus"]["h200"]["tdp_w"]
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(CatalogError, match=r"Gpu 'h200'.*'tdp_w'"):
        load_catalog(path)


# --- expression variables --------------------------------------------------------------------

MODEL_VARS = {
    "name",
    "layers",
    "hidden",
    "intermediate",
    "heads",
    "kv_heads",
    "head_dim",
    "vocab",
    "max_position",
    "params",
    "active_params",
    "kv_values_per_layer",
}
MOE_VARS = {"experts", "experts_per_token", "expert_intermediate", "shared_experts", "moe_layers"}
GPU_VARS = {"name", "memory", "bandwidth", "bf16_tflops", "int8_tops", "link_bandwidth", "tdp"}

needs_expressions = pytest.mark.skipif(
    importlib.util.find_spec("questions.expressions") is None,
    reason="questions/expressions.py (which defines UREG) does not exist yet",
)


@needs_expressions
def test_variables_names_and_units() -> None:
    def names(d: dict[str, object], prefix: str) -> set[str]:
        assert all(k.startswith(prefix + "_") for k in d)
        return {k.removeprefix(prefix + "_") for k in d}

    assert names(variables("models", "llama-3-70b", "model"), "model") == MODEL_VARS
    assert names(variables("models", "mistral-7b", "m"), "m") == MODEL_VARS | {"sliding_window"}
    assert names(variables("models", "deepseek-v3", "t"), "t") == MODEL_VARS | MOE_VARS
    assert names(variables("gpus", "h100-sxm", "gpu"), "gpu") == GPU_VARS | {"fp8_tflops"}
    assert names(variables("gpus", "a100-80gb", "gpu"), "gpu") == GPU_VARS
    assert names(variables("dtypes", "int4", "dtype"), "dtype") == {"name", "bytes", "bits"}

    v = variables("models", "llama-3-70b", "model")
    assert v["model_name"] == "Llama-3-70B"
    assert v["model_layers"] == 80 and isinstance(v["model_layers"], int)
    assert v["model_params"] == param_count(CATALOG.models["llama-3-70b"])
    assert v["model_active_params"] == v["model_params"]
    assert str(v["model_max_position"].to("token")) == "8192 token"
    assert variables("models", "deepseek-v3", "m")["m_kv_values_per_layer"] == 576

    g = variables("gpus", "h100-sxm", "gpu")
    assert g["gpu_memory"].to("GB").magnitude == 80
    assert g["gpu_bandwidth"].to("GB/s").magnitude == 3350
    assert g["gpu_bf16_tflops"].to("TFLOPS").magnitude == 989
    assert g["gpu_tdp"].to("W").magnitude == 700
    assert math.isclose(
        (g["gpu_bf16_tflops"] / g["gpu_bandwidth"]).to("FLOP/B").magnitude, 295.2, rel_tol=0.001
    )

    d = variables("dtypes", "int4", "dtype")
    assert d["dtype_bytes"].to("B").magnitude == 0.5
    assert d["dtype_bits"].to("bit").magnitude == 4


def test_variables_rejects_unknown_entries() -> None:
    if importlib.util.find_spec("questions.expressions") is None:
        pytest.skip("questions/expressions.py (which defines UREG) does not exist yet")
    with pytest.raises(CatalogError, match="no entry 'gpt-5'"):
        variables("models", "gpt-5", "model")
    with pytest.raises(CatalogError, match="Unknown catalog kind"):
        variables("model", "llama-3-70b", "model")


def test_every_catalog_entry_names_its_source():
    for section in (CATALOG.models, CATALOG.gpus, CATALOG.dtypes):
        for slug, spec in section.items():
            assert spec.source.strip(), f"{slug} has an empty source"
