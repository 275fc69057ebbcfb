"""KV memory: the preallocated pool tensor and its byte accounting."""

from __future__ import annotations

import torch

from lab.engine.block_manager import BlockManager
from lab.engine.contiguous_allocator import ContiguousAllocator


def kv_bytes_per_token(
    num_layers: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
) -> int:
    """Bytes of K and V one token occupies across all layers (KV heads, not query heads)."""
    return num_layers * 2 * num_kv_heads * head_dim * dtype.itemsize


class KVPool:
    """One preallocated tensor [num_layers, 2 (K, V), num_blocks, block_size, kv_heads, dim]."""

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ):
        shape = (num_layers, 2, num_blocks, block_size, num_kv_heads, head_dim)
        self.kv = torch.zeros(shape, dtype=dtype, device=device)  # finite: see attention.attend()
        self.block_size = block_size
        self.bytes_per_token = kv_bytes_per_token(num_layers, num_kv_heads, head_dim, dtype)

    @property
    def bytes_total(self) -> int:
        """Bytes of the whole pool."""
        return self.kv.numel() * self.kv.element_size()


def kv_usage(manager: BlockManager | ContiguousAllocator, kv_bytes_per_token: int) -> dict:
    """Allocated vs used KV bytes right now, and the wasted fraction of what is allocated."""
    stats = manager.stats(kv_bytes_per_token)
    allocated, used = stats["allocated_bytes"], stats["used_bytes"]
    return {
        "allocated_bytes": allocated,
        "used_bytes": used,
        "wasted_bytes": allocated - used,
        "waste_fraction": (allocated - used) / allocated if allocated else 0.0,
    }
