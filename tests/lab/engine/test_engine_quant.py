"""Weight-only int8/int4 quantisation (lab/engine/quant.py) on random layers and a random
Hugging Face Llama (built from a config, no download)."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from lab.engine import quant
from lab.engine.quant import (
    Int4Linear,
    Int8Linear,
    pack_int4,
    quantize_int4,
    quantize_int8,
    quantize_model,
    unpack_int4,
    weight_bytes,
)

FP32 = 4  # bytes


def random_weight(out_features: int, in_features: int, seed: int = 0) -> torch.Tensor:
    """Gaussian weights with an all-zero row, a constant group and an outlier."""
    w = torch.randn(out_features, in_features, generator=torch.Generator().manual_seed(seed))
    w[1] = 0.0
    w[2, :128] = 0.7  # constant groups (any group size up to 128)
    w[3, 5] = 25.0
    return w


def linear_from(weight: torch.Tensor, bias: bool = False) -> nn.Linear:
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias)
    linear.weight.data.copy_(weight)
    return linear


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).eval()


def token_ids() -> torch.Tensor:
    return torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))


@torch.no_grad()
def logits(model: nn.Module) -> torch.Tensor:
    return model(token_ids()).logits.float()


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return F.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_round_trip_is_within_half_a_scale_per_element(dtype):
    w = random_weight(96, 128).to(dtype)
    codes, scale = quantize_int8(w)
    assert codes.dtype == torch.int8 and scale.shape == (96,) and scale.dtype == dtype
    expected_scale = (w.float().abs().amax(dim=1) / 127).clamp(min=quant._TINY).to(dtype)
    assert torch.equal(scale, expected_scale)
    scale = scale.float()[:, None]
    error = (w.float() - codes.float() * scale).abs()
    assert (error <= scale / 2 * (1 + 1e-6)).all()
    assert error[1].max() == 0  # an all-zero row stays exactly zero


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("out_features", [64, 96])  # tiled and row-pair int4 layouts
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_int4_round_trip_is_within_half_a_group_scale(out_features, group_size, dtype):
    w = random_weight(out_features, 256).to(dtype)
    w[4, :32] += 3.0  # a group far from zero: its zero point rounds in bf16
    layer = Int4Linear.from_weight(w, group_size=group_size)
    assert layer.scales_and_zeros.dtype == dtype
    scale = layer.scales_and_zeros[..., 0].t().float().repeat_interleave(group_size, dim=1)
    error = (w.float() - layer.dequantize(torch.float32)).abs()
    assert (error <= scale / 2 * (1 + 1e-5) + 1e-6).all()
    assert error[2, :128].max() < 1e-6  # a constant group is exact
    if dtype == torch.float32:  # the scale is the group's range / 15
        groups = w.view(out_features, -1, group_size)
        ranges = (groups.amax(dim=-1) - groups.amin(dim=-1)).t()
        nonconstant = ranges > 0
        ratio = layer.scales_and_zeros[..., 0][nonconstant] / (ranges[nonconstant] / 15)
        assert torch.allclose(ratio, torch.ones_like(ratio), atol=1e-4)


@pytest.mark.parametrize("out_features", [32, 64, 96, 128])
def test_pack_int4_puts_two_codes_in_each_byte_and_unpacks_exactly(out_features):
    codes = torch.randint(0, 16, (out_features, 64), generator=torch.Generator().manual_seed(0))
    packed = pack_int4(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (out_features, 32)
    assert packed.is_contiguous()
    assert torch.equal(unpack_int4(packed), codes.to(torch.uint8))


def test_int4_scales_and_zeros_layout_matches_the_documented_formula():
    w = random_weight(64, 64)
    packed, scales_and_zeros = quantize_int4(w, 32)
    assert scales_and_zeros.shape == (2, 64, 2)  # [K/group, N, 2]
    codes = unpack_int4(packed).float().view(64, 2, 32)
    scale, zero = scales_and_zeros[..., 0].t(), scales_and_zeros[..., 1].t()  # [N, K/group]
    rebuilt = ((codes - 8) * scale[..., None] + zero[..., None]).view(64, 64)
    assert ((rebuilt - w).abs() <= scale.repeat_interleave(32, dim=1) / 2 + 1e-6).all()
    assert torch.allclose(zero, w.view(64, 2, 32).amin(dim=-1) + 8 * scale, atol=1e-6)


# ---------------------------------------------------------------- storage


def test_int8_layer_stores_one_byte_per_weight_plus_a_scale_per_row():
    layer = Int8Linear.from_linear(linear_from(random_weight(96, 128), bias=True))
    assert layer.weight_int8.dtype == torch.int8
    assert weight_bytes(layer) == 96 * 128 + 96 * FP32 + 96 * FP32  # codes + scales + bias


@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_int4_layer_stores_half_a_byte_per_weight_plus_group_params(group_size):
    layer = Int4Linear.from_linear(linear_from(random_weight(96, 256), bias=True), group_size)
    groups = 256 // group_size
    assert layer.weight_int4.dtype == torch.uint8
    assert layer.weight_int4.numel() == 96 * 256 // 2
    assert weight_bytes(layer) == 96 * 256 // 2 + 96 * groups * 2 * FP32 + 96 * FP32


def test_weight_bytes_counts_tied_weights_once():
    model = nn.ModuleDict({"embed": nn.Embedding(10, 8), "head": nn.Linear(8, 10, bias=False)})
    model["head"].weight = model["embed"].weight
    assert weight_bytes(model) == 10 * 8 * FP32


@pytest.mark.parametrize(
    ("bits", "group_size", "linear_bytes_per_weight", "min_compression"),
    [(8, 128, None, 3.8), (4, 32, 0.5 + 8 / 32, 5.3), (4, 128, 0.5 + 8 / 128, 7.1)],
)
def test_quantize_model_reports_exact_bytes(
    bits, group_size, linear_bytes_per_weight, min_compression
):
    model = tiny_llama()
    linears = {n: m for n, m in model.named_modules() if type(m) is nn.Linear and n != "lm_head"}
    before = weight_bytes(model)
    report = quantize_model(model, bits, group_size)

    assert set(report.layers) == set(linears) and len(report.layers) == 14
    shapes = [(m.out_features, m.in_features) for m in linears.values()]
    assert report.linear_bytes_before == sum(n * k * FP32 for n, k in shapes)
    if bits == 8:
        expected_after = sum(n * k + n * FP32 for n, k in shapes)
    else:
        expected_after = sum(int(n * k * linear_bytes_per_weight) for n, k in shapes)
    assert report.linear_bytes_after == expected_after
    assert report.linear_compression > min_compression
    assert report.model_bytes_before == before
    assert report.model_bytes_after == weight_bytes(model)
    saved = report.linear_bytes_before - report.linear_bytes_after
    assert before - report.model_bytes_after == saved
    assert type(model.lm_head) is nn.Linear
    assert type(model.model.embed_tokens) is nn.Embedding
    assert "linear layers" in str(report)


def test_reported_errors_are_the_max_abs_weight_errors():
    model = tiny_llama()
    originals = {
        n: m.weight.detach().clone() for n, m in model.named_modules() if type(m) is nn.Linear
    }
    report = quantize_model(model, 8)
    for name in report.layers:
        layer = model.get_submodule(name)
        expected = (originals[name] - layer.dequantize(torch.float32)).abs().max().item()
        assert report.max_abs_error[name] == pytest.approx(expected)
        assert report.max_abs_error[name] <= layer.scale.max().item() / 2 * (1 + 1e-6)


def test_skip_is_configurable_and_embeddings_are_never_quantised():
    model = tiny_llama()
    report = quantize_model(model, 8, skip={"down_proj"})
    assert "lm_head" in report.layers
    assert isinstance(model.lm_head, Int8Linear)
    assert type(model.model.layers[0].mlp.down_proj) is nn.Linear
    assert type(model.model.embed_tokens) is nn.Embedding


# ---------------------------------------------------------------- model outputs


@pytest.mark.parametrize(
    ("bits", "group_size", "min_cosine"),
    # measured over seeds 0-2: int8 0.99993, int4 g32 0.9906-0.9927, g128 0.9812-0.9882
    [(8, 128, 0.9995), (4, 32, 0.985), (4, 128, 0.975)],
)
def test_quantised_llama_logits_stay_close_to_the_float_model(bits, group_size, min_cosine):
    model = tiny_llama()
    expected = logits(model)
    quantize_model(model, bits, group_size)
    assert cosine(logits(model), expected) > min_cosine


def test_smaller_int4_groups_are_more_accurate():
    model = tiny_llama()
    expected = logits(model)
    cosines = {}
    for group_size in (32, 128):
        quantized = copy.deepcopy(model)
        quantize_model(quantized, 4, group_size)
        cosines[group_size] = cosine(logits(quantized), expected)
    assert cosines[32] > cosines[128]


@pytest.mark.parametrize(("bits", "min_cosine"), [(8, 0.9995), (4, 0.985)])
def test_quantised_llama_runs_with_bf16_activations(bits, min_cosine):
    model = tiny_llama()
    expected = logits(model)
    quantize_model(model, bits, group_size=32)
    model.to(torch.bfloat16)
    layer = model.model.layers[0].self_attn.q_proj
    codes, params = (
        (layer.weight_int8, layer.scale)
        if bits == 8
        else (layer.weight_int4, layer.scales_and_zeros)
    )
    assert codes.dtype in (torch.int8, torch.uint8)  # integer codes survive dtype moves
    assert params.dtype == torch.bfloat16
    assert cosine(logits(model), expected) > min_cosine


@pytest.mark.parametrize("rows", [1, 40, 600])
@pytest.mark.parametrize("bits", [8, 4])
def test_cpu_kernel_path_matches_the_plain_dequantise_path(bits, rows, monkeypatch):
    linear = linear_from(random_weight(128, 256), bias=True)
    layer = Int8Linear.from_linear(linear) if bits == 8 else Int4Linear.from_linear(linear, 64)
    layer.to(torch.bfloat16)
    x = torch.randn(rows, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    exact = F.linear(x.float(), layer.dequantize(torch.float32), layer.bias.float())
    kind, op = (
        ("int8", "_weight_int8pack_mm") if bits == 8 else ("int4", "_weight_int4pack_mm_for_cpu")
    )
    kernel_expected = rows <= quant._KERNEL_MAX_ROWS[kind] and quant._kernel_works(
        kind, torch.bfloat16, getattr(layer, "group_size", 0)
    )
    calls = []
    kernel = getattr(torch, op)
    monkeypatch.setattr(torch, op, lambda *args: calls.append(1) or kernel(*args))
    fast = layer(x)
    assert len(calls) == int(kernel_expected)
    monkeypatch.setattr(quant, "_KERNEL_DTYPES", ())
    plain = layer(x)
    assert fast.dtype == plain.dtype == torch.bfloat16 and fast.shape == (rows, 128)
    for out in (fast, plain):
        assert (out.float() - exact).norm() <= 1e-2 * exact.norm()


def test_first_bf16_forward_probes_the_kernels_without_touching_the_global_rng(monkeypatch):
    layer = Int4Linear.from_weight(random_weight(64, 128), group_size=32).to(torch.bfloat16)
    monkeypatch.setattr(quant, "_kernel_probes", {})
    state = torch.random.get_rng_state()
    layer(torch.ones(1, 128, dtype=torch.bfloat16))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert set(quant._kernel_probes) == {("int4", torch.bfloat16, 32)}


@pytest.mark.parametrize("bits", [8, 4])
def test_plain_path_with_bias_and_leading_dims_equals_dequantised_linear(bits):
    linear = linear_from(random_weight(96, 128), bias=True)
    layer = Int8Linear.from_linear(linear) if bits == 8 else Int4Linear.from_linear(linear, 32)
    x = torch.randn(2, 3, 128, generator=torch.Generator().manual_seed(3))
    expected = F.linear(x, layer.dequantize(), layer.bias)
    assert torch.allclose(layer(x), expected, atol=1e-5)
    assert layer(x).shape == (2, 3, 96)


# ---------------------------------------------------------------- state and moves


@pytest.mark.parametrize("bits", [8, 4])
def test_state_dict_round_trips_into_a_fresh_quantised_model(bits):
    source, target = tiny_llama(seed=0), tiny_llama(seed=1)
    quantize_model(source, bits, 32)
    quantize_model(target, bits, 32)
    target.load_state_dict(source.state_dict())
    assert torch.equal(logits(target), logits(source))


@pytest.mark.parametrize("bits", [8, 4])
def test_device_and_dtype_moves_keep_codes_and_cast_scales(bits):
    model = tiny_llama()
    quantize_model(model, bits, 32)
    expected = logits(model)
    model.to(torch.float64)
    assert torch.allclose(logits(model), expected, atol=1e-4)
    model.to("meta")
    for buffer in model.model.layers[0].mlp.up_proj.buffers():
        assert buffer.device.type == "meta"
        assert buffer.dtype in (torch.int8, torch.uint8, torch.float64)


# ---------------------------------------------------------------- errors


def test_unsupported_bits_is_a_sentence_and_leaves_the_model_unchanged():
    model = tiny_llama()
    with pytest.raises(ValueError, match=r"bits=3 is not supported: use bits=8 .* or bits=4"):
        quantize_model(model, 3)
    assert type(model.model.layers[0].self_attn.q_proj) is nn.Linear


def test_group_size_that_does_not_divide_in_features_names_the_layer():
    model = nn.Sequential(nn.Linear(128, 96), nn.ReLU(), nn.Linear(96, 64))
    with pytest.raises(
        ValueError, match=r"group_size=64 does not divide in_features=96 of layer '2'"
    ):
        quantize_model(model, 4, group_size=64)
    assert type(model[0]) is nn.Linear  # validated before anything was replaced
    with pytest.raises(ValueError, match="use group_size=32"):
        Int4Linear(96, 64, group_size=64)


def test_unsupported_group_size_lists_the_supported_ones():
    with pytest.raises(
        ValueError, match=r"group_size=48 is not supported for int4: use one of 32, 64"
    ):
        quantize_model(tiny_llama(), 4, group_size=48)
