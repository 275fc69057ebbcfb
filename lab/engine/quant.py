"""Weight-only quantisation: int8 (per output channel) and int4 (group-wise) linear layers.

Weights are stored as integers plus floating-point scales and dequantised on the fly in the
forward pass; activations stay floating point (as in gpt-fast). Formats, for a weight [N, K]:

- int8, symmetric per output row: w ≈ q·s, q ∈ [-127, 127], s = max|w_row| / 127.
  Buffers: ``weight_int8`` int8 [N, K], ``scale`` [N].
- int4, asymmetric per group of ``group_size`` inputs: w ≈ (q - 8)·s + z, q ∈ [0, 15],
  s = (max - min) / 15, z = min + 8·s (the value of the middle code; tinygemm convention).
  Buffers: ``weight_int4`` uint8 [N, K/2] (two codes per byte, see `pack_int4`),
  ``scales_and_zeros`` [K/group_size, N, 2].

Scales and zeros keep the float weight's dtype and follow `module.to(dtype)`. The codes are
rounded against the stored (dtype-rounded) scales and zeros, so |w - dequantised w| ≤ s/2
for the stored s, in fp32 and bf16 alike. (int4 in bf16 widens s slightly where the stored
zero moved; in fp32 s is (max - min) / 15 up to rounding.)

On CPU with bf16 activations and few rows (decode), PyTorch's packed-weight kernels
(``torch._weight_int8pack_mm``, ``torch._weight_int4pack_mm_for_cpu``) replace the
dequantise-then-matmul path, but only after a one-time probe shows that, on this build and
CPU, they compute the same product from our buffers. Everywhere else (CUDA, fp32, prefill)
the plain path runs. Nothing here touches CUDA at import.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Set

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lab.engine.model import weight_bytes

SUPPORTED_BITS = (4, 8)
INT4_GROUP_SIZES = (32, 64, 128, 256)
_TINY = torch.finfo(torch.float32).tiny  # keeps all-zero rows/groups from dividing by zero
_TILE_ROWS = 64  # int4 rows per tile: the layout of PyTorch's AVX-512 int4 CPU kernel
# Rough crossovers measured on the 2-core dev CPU: the fp32/fp16 CPU kernels are slower than
# dequantise + matmul at any row count; the bf16 ones win up to about these many rows.
_KERNEL_DTYPES = (torch.bfloat16,)
_KERNEL_MAX_ROWS = {"int8": 32, "int4": 128}
_kernel_probes: dict[tuple[object, ...], bool] = {}


# ---------------------------------------------------------------- int8 per output channel


def quantize_int8(weight: Tensor) -> tuple[Tensor, Tensor]:
    """Symmetric per-row int8 of a weight [N, K] → (codes int8 [N, K], scale [N] in its dtype)."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127).clamp(min=_TINY).to(weight.dtype)
    q = torch.round(w / scale.float().clamp(min=_TINY)[:, None]).clamp(-127, 127)
    return q.to(torch.int8), scale


class Int8Linear(nn.Module):
    """`nn.Linear` replacement holding int8 weights and one scale per output channel."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        shape = (out_features, in_features)
        self.register_buffer("weight_int8", torch.zeros(shape, dtype=torch.int8, device=device))
        self.register_buffer("scale", torch.ones(out_features, dtype=dtype, device=device))
        zeros = torch.zeros(out_features, dtype=dtype, device=device) if bias else None
        self.register_buffer("bias", zeros)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        """Quantise `linear` (same device and float dtype for scale and bias)."""
        return cls.from_weight(linear.weight, linear.bias)

    @classmethod
    def from_weight(cls, weight: Tensor, bias: Tensor | None = None) -> Int8Linear:
        """Quantise a weight [N, K] (+ bias [N]); uses no random numbers."""
        out_features, in_features = weight.shape
        module = cls(in_features, out_features, bias is not None, weight.dtype, weight.device)
        module.weight_int8, module.scale = quantize_int8(weight)
        if bias is not None:
            module.bias = bias.detach().clone()
        return module

    def dequantize(self, dtype: torch.dtype | None = None) -> Tensor:
        """The weight [N, K] as floats (default: the scale's dtype)."""
        dtype = dtype or self.scale.dtype
        return self.weight_int8.to(dtype).mul_(self.scale.to(dtype)[:, None])

    def forward(self, x: Tensor) -> Tensor:
        """x [..., K] → [..., N] in x's dtype."""
        if _kernel_wanted(x, "int8") and _kernel_works("int8", x.dtype):
            rows = x.reshape(-1, self.in_features).contiguous()
            out = torch._weight_int8pack_mm(rows, self.weight_int8, self.scale.to(x.dtype))
            return _add_bias(out, self.bias).view(*x.shape[:-1], self.out_features)
        return F.linear(x, self.dequantize(x.dtype), _cast(self.bias, x.dtype))

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


# ---------------------------------------------------------------- int4 group-wise


def pack_int4(codes: Tensor) -> Tensor:
    """Codes [N, K] in 0..15 → bytes uint8 [N, K/2], two codes per byte (low nibble first).

    N a multiple of 64: tiles of 64 rows; byte (tile, k, d) holds rows d (low) and d+32
    (high) of column k, the layout PyTorch's AVX-512 int4 CPU kernel reads directly.
    Otherwise: byte (n, j) holds columns 2j (low) and 2j+1 (high) of row n."""
    n, k = codes.shape
    codes = codes.to(torch.uint8)
    if n % _TILE_ROWS == 0:
        tiles = codes.view(n // _TILE_ROWS, 2, _TILE_ROWS // 2, k).transpose(2, 3)
        low, high = tiles[:, 0], tiles[:, 1]  # [tiles, K, 32] each
    else:
        low, high = codes[:, 0::2], codes[:, 1::2]
    return (low | (high << 4)).reshape(n, k // 2).contiguous()


def unpack_int4(packed: Tensor) -> Tensor:
    """Inverse of `pack_int4`: bytes uint8 [N, K/2] → codes uint8 [N, K]."""
    n, k = packed.shape[0], packed.shape[1] * 2
    codes = torch.empty(n, k, dtype=torch.uint8, device=packed.device)
    if n % _TILE_ROWS == 0:
        half = _TILE_ROWS // 2
        bytes_ = packed.view(n // _TILE_ROWS, k, half)
        rows = codes.view(n // _TILE_ROWS, 2, half, k)
        rows[:, 0] = (bytes_ & 15).transpose(1, 2)
        rows[:, 1] = (bytes_ >> 4).transpose(1, 2)
    else:
        pairs = codes.view(n, k // 2, 2)
        pairs[..., 0] = packed & 15
        pairs[..., 1] = packed >> 4
    return codes


def quantize_int4(weight: Tensor, group_size: int) -> tuple[Tensor, Tensor]:
    """Asymmetric group-wise int4 of a weight [N, K] → (packed uint8 [N, K/2],
    scales_and_zeros [K/group_size, N, 2] in the weight's dtype)."""
    n, k = weight.shape
    w = weight.detach().float().view(n, k // group_size, group_size)
    low, high = w.amin(dim=-1), w.amax(dim=-1)
    zero = _stored(low + 8 * (high - low) / 15, weight.dtype)
    # Widen the scale just enough that codes 0..15 around the *stored* zero reach both ends
    # of the group (in bf16 the zero may round by more than a scale); exact for fp32.
    scale = torch.maximum((high - zero) / 7, (zero - low) / 8).clamp(min=_TINY)
    scale = _stored(scale, weight.dtype).clamp(min=_TINY)
    codes = torch.round((w - zero[..., None]) / scale[..., None] + 8).clamp(0, 15)
    scales_and_zeros = torch.stack([scale, zero], dim=-1).transpose(0, 1).contiguous()
    return pack_int4(codes.view(n, k)), scales_and_zeros.to(weight.dtype)


def _stored(values: Tensor, dtype: torch.dtype) -> Tensor:
    """`values` rounded to the dtype they will be stored in, back in fp32."""
    return values.to(dtype).float()


class Int4Linear(nn.Module):
    """`nn.Linear` replacement holding packed int4 weights with a scale and zero per group."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        group_size: int = 128,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        _check_int4_layer(in_features, group_size, "Int4Linear")
        self.in_features, self.out_features = in_features, out_features
        self.group_size = group_size
        packed = torch.zeros(out_features, in_features // 2, dtype=torch.uint8, device=device)
        self.register_buffer("weight_int4", packed)
        groups = (in_features // group_size, out_features, 2)
        self.register_buffer("scales_and_zeros", torch.zeros(groups, dtype=dtype, device=device))
        zeros = torch.zeros(out_features, dtype=dtype, device=device) if bias else None
        self.register_buffer("bias", zeros)

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = 128) -> Int4Linear:
        """Quantise `linear` (same device and float dtype for scales, zeros and bias)."""
        return cls.from_weight(linear.weight, linear.bias, group_size)

    @classmethod
    def from_weight(
        cls, weight: Tensor, bias: Tensor | None = None, group_size: int = 128
    ) -> Int4Linear:
        """Quantise a weight [N, K] (+ bias [N]); uses no random numbers."""
        out_features, in_features = weight.shape
        module = cls(in_features, out_features, bias is not None, group_size,
                     weight.dtype, weight.device)  # fmt: skip
        module.weight_int4, module.scales_and_zeros = quantize_int4(weight, group_size)
        if bias is not None:
            module.bias = bias.detach().clone()
        return module

    def dequantize(self, dtype: torch.dtype | None = None) -> Tensor:
        """The weight [N, K] as floats (default: the scales' dtype)."""
        dtype = dtype or self.scales_and_zeros.dtype
        n, k, g = self.out_features, self.in_features, self.group_size
        codes = unpack_int4(self.weight_int4).view(n, k // g, g).to(dtype)
        params = self.scales_and_zeros.to(dtype).transpose(0, 1)  # [N, K/g, 2]
        # In place: a fresh full-size tensor per op costs more (page faults) than the math.
        return codes.sub_(8).mul_(params[..., :1]).add_(params[..., 1:]).view(n, k)

    def forward(self, x: Tensor) -> Tensor:
        """x [..., K] → [..., N] in x's dtype."""
        if (
            _kernel_wanted(x, "int4")
            and self.out_features % _TILE_ROWS == 0
            and _kernel_works("int4", x.dtype, self.group_size)
        ):
            rows = x.reshape(-1, self.in_features).contiguous()
            params = self.scales_and_zeros.to(x.dtype)
            out = torch._weight_int4pack_mm_for_cpu(rows, self.weight_int4, self.group_size, params)
            return _add_bias(out, self.bias).view(*x.shape[:-1], self.out_features)
        return F.linear(x, self.dequantize(x.dtype), _cast(self.bias, x.dtype))

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"int4, group_size={self.group_size}"
        )


# ---------------------------------------------------------------- CPU kernel dispatch


def _cast(bias: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    return None if bias is None else bias.to(dtype)


def _add_bias(out: Tensor, bias: Tensor | None) -> Tensor:
    return out if bias is None else out + bias.to(out.dtype)


def _kernel_wanted(x: Tensor, kind: str) -> bool:
    """CPU, a dtype whose packed kernel beats dequantise+matmul, and few rows (decode)."""
    return (
        x.device.type == "cpu"
        and x.dtype in _KERNEL_DTYPES
        and x.numel() <= _KERNEL_MAX_ROWS[kind] * x.shape[-1]
    )


def _kernel_works(kind: str, dtype: torch.dtype, group_size: int = 0) -> bool:
    """Once per (kind, dtype, group): does PyTorch's CPU kernel exist, accept our buffers
    and match the plain path? (Its int4 layout depends on the CPU's vector width.)"""
    key = (kind, dtype, group_size)
    if key not in _kernel_probes:
        _kernel_probes[key] = _probe(kind, dtype, group_size)
    return _kernel_probes[key]


def _probe(kind: str, dtype: torch.dtype, group_size: int) -> bool:
    """Run the kernel on a small random layer (own generator: global RNG untouched)."""
    generator = torch.Generator().manual_seed(0)
    in_features = 2 * max(group_size, 32)
    weight = torch.randn(_TILE_ROWS, in_features, generator=generator)
    x = torch.randn(3, in_features, generator=generator).to(dtype)
    try:  # private ops: they may be missing, reject our buffers, or use another layout
        if kind == "int8":
            layer: Int8Linear | Int4Linear = Int8Linear.from_weight(weight)
            got = torch._weight_int8pack_mm(x, layer.weight_int8, layer.scale.to(dtype))
        else:
            layer = Int4Linear.from_weight(weight, group_size=group_size)
            params = layer.scales_and_zeros.to(dtype)
            got = torch._weight_int4pack_mm_for_cpu(x, layer.weight_int4, group_size, params)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    want = F.linear(x.float(), layer.dequantize(torch.float32))
    return bool((got.float() - want).norm() <= 1e-2 * want.norm())


# ---------------------------------------------------------------- whole-model quantisation


@dataclasses.dataclass(frozen=True)
class QuantReport:
    """What `quantize_model` did. Bytes are exact (parameters + buffers)."""

    bits: int
    group_size: int | None  # None for int8 (one scale per output channel)
    layers: tuple[str, ...]  # qualified names of the replaced nn.Linear modules
    model_bytes_before: int
    model_bytes_after: int
    linear_bytes_before: int  # the replaced layers only: weight + bias
    linear_bytes_after: int  # their replacements: codes + scales (+ zeros) + bias
    max_abs_error: dict[str, float]  # per layer: max |w - dequantised w| (weight units)

    @property
    def linear_compression(self) -> float:
        """linear_bytes_before / linear_bytes_after (e.g. ≈3.9 for int8 from fp32)."""
        return self.linear_bytes_before / max(self.linear_bytes_after, 1)

    def __str__(self) -> str:
        kind = "int8" if self.bits == 8 else f"int4 g{self.group_size}"
        worst = max(self.max_abs_error.values(), default=0.0)
        return (
            f"{kind}: {len(self.layers)} linear layers {self.linear_bytes_before / 1e6:.2f} MB "
            f"→ {self.linear_bytes_after / 1e6:.2f} MB ({self.linear_compression:.2f}x); "
            f"model {self.model_bytes_before / 1e6:.2f} MB → "
            f"{self.model_bytes_after / 1e6:.2f} MB; max |Δw| {worst:.3g}"
        )


def quantize_model(
    model: nn.Module,
    bits: int,
    group_size: int = 128,
    skip: Set[str] = frozenset({"lm_head"}),
) -> QuantReport:
    """Replace every `nn.Linear` inside `model` in place by an Int8Linear (bits=8) or an
    Int4Linear (bits=4, `group_size` inputs per scale/zero). Embeddings are untouched;
    a layer is skipped when its qualified name or its attribute name is in `skip`.
    Everything is validated first: on error the model is unchanged (ValueError)."""
    targets = list(_linear_children(model, skip))
    _check_request(bits, group_size, targets)
    model_bytes_before = weight_bytes(model)
    linear_bytes_before = linear_bytes_after = 0
    errors: dict[str, float] = {}
    for name, parent, attr, linear in targets:
        quantized = (
            Int8Linear.from_linear(linear)
            if bits == 8
            else Int4Linear.from_linear(linear, group_size)
        )
        delta = linear.weight.detach().float() - quantized.dequantize(torch.float32)
        errors[name] = delta.abs().max().item()
        linear_bytes_before += weight_bytes(linear)
        linear_bytes_after += weight_bytes(quantized)
        setattr(parent, attr, quantized)
    return QuantReport(
        bits=bits,
        group_size=group_size if bits == 4 else None,
        layers=tuple(name for name, *_ in targets),
        model_bytes_before=model_bytes_before,
        model_bytes_after=weight_bytes(model),
        linear_bytes_before=linear_bytes_before,
        linear_bytes_after=linear_bytes_after,
        max_abs_error=errors,
    )


def _linear_children(
    model: nn.Module, skip: Set[str]
) -> Iterator[tuple[str, nn.Module, str, nn.Linear]]:
    """(qualified name, parent, attribute, layer) for each plain nn.Linear not skipped.
    Subclasses are left alone: e.g. MultiheadAttention reads its out_proj.weight directly."""
    for parent_name, parent in model.named_modules():
        for attr, child in parent.named_children():
            name = f"{parent_name}.{attr}" if parent_name else attr
            if type(child) is nn.Linear and name not in skip and attr not in skip:
                yield name, parent, attr, child


def _check_request(
    bits: int, group_size: int, targets: list[tuple[str, nn.Module, str, nn.Linear]]
) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(
            f"bits={bits} is not supported: use bits=8 (int8, one scale per output channel) "
            f"or bits=4 (int4, a scale and zero per group of inputs)."
        )
    if bits == 4:
        for name, _, _, linear in targets:
            _check_int4_layer(linear.in_features, group_size, name)


def _check_int4_layer(in_features: int, group_size: int, name: str) -> None:
    if group_size not in INT4_GROUP_SIZES:
        raise ValueError(
            f"group_size={group_size} is not supported for int4: use one of "
            f"{', '.join(map(str, INT4_GROUP_SIZES))}."
        )
    if in_features % group_size:
        fits = [g for g in INT4_GROUP_SIZES if in_features % g == 0]
        hint = f"use group_size={fits[-1]}" if fits else "skip it"
        raise ValueError(
            f"group_size={group_size} does not divide in_features={in_features} of layer "
            f"'{name}': {hint}, or add '{name}' to skip."
        )
