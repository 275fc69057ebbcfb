"""Handing one request's KV from a prefill engine to a decode engine (disaggregation).

`LLMEngine.export_kv(id)` returns a `KVHandoff` (the prompt's K/V, only the tokens it holds,
plus the first sampled token); `LLMEngine.add_prefilled(handoff, params)` writes it into
another engine's blocks and decodes on. Between processes a handoff travels as one frame on
a stream socket (a Unix domain socket in the lab):

    16-byte prefix  "KVH1", then three big-endian uint32: meta, ids and KV lengths in bytes
    meta            UTF-8 JSON: request id, first token, shape, dtype, sender's timestamp
    ids             the prompt's token ids, int32
    kv              the K/V tensor's raw bytes [layers, 2, tokens, kv_heads, head_dim]

so the KV part is exactly 2 × layers × kv_heads × head_dim × dtype bytes × tokens. Every
count returned here is bytes that went through the socket, not a formula.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any

import torch

MAGIC = b"KVH1"
PREFIX = struct.Struct("!4sIII")
DTYPES = {str(d).removeprefix("torch."): d for d in (torch.float32, torch.bfloat16, torch.float16)}


@dataclass
class KVHandoff:
    """A prefilled request: prompt ids, first sampled token, KV [layers, 2, tokens, h, d]."""

    prompt_ids: list[int]
    first_token: int
    kv: torch.Tensor
    meta: dict[str, Any] = field(default_factory=dict)  # what the lab sends along


@dataclass(frozen=True)
class WireBytes:
    """Bytes of one frame on the socket, by part (header = prefix + meta)."""

    header: int
    ids: int
    kv: int

    @property
    def total(self) -> int:
        return self.header + self.ids + self.kv


def slots_of(block_table: list[int], num_tokens: int, block_size: int) -> torch.Tensor:
    """Pool slots (block × block_size + offset) of a sequence's first `num_tokens` tokens."""
    t = torch.arange(num_tokens)
    blocks = torch.tensor(block_table, dtype=torch.long)[t // block_size]
    return blocks * block_size + t % block_size


def send_handoff(sock: socket.socket, handoff: KVHandoff) -> WireBytes:
    """Send one frame; `meta` gains `t_send` (time.perf_counter() just before the first
    byte: CLOCK_MONOTONIC on Linux, comparable across processes)."""
    kv = handoff.kv.contiguous()
    ids = torch.tensor(handoff.prompt_ids, dtype=torch.int32).numpy().tobytes()
    payload = memoryview(kv.view(torch.uint8).reshape(-1).numpy())
    dtype = str(kv.dtype).removeprefix("torch.")
    handoff.meta["t_send"] = time.perf_counter()
    meta = {**handoff.meta, "first_token": handoff.first_token, "shape": list(kv.shape),
            "dtype": dtype}  # fmt: skip
    meta_bytes = json.dumps(meta).encode()
    prefix = PREFIX.pack(MAGIC, len(meta_bytes), len(ids), payload.nbytes)
    sock.sendall(prefix + meta_bytes + ids)
    sock.sendall(payload)
    return WireBytes(len(prefix) + len(meta_bytes), len(ids), payload.nbytes)


def _recv_exact(sock: socket.socket, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError(f"The socket closed after {got} of {n} bytes of a KV frame.")
        got += k
    return buf


def recv_handoff(sock: socket.socket) -> tuple[KVHandoff, WireBytes] | None:
    """The next frame as (handoff, bytes received per part), or None on a clean close
    before a frame starts. `meta["t_received"]` is stamped after its last byte."""
    first = sock.recv(PREFIX.size)
    if not first:
        return None
    prefix = bytes(first) + bytes(_recv_exact(sock, PREFIX.size - len(first)))
    magic, meta_len, ids_len, kv_len = PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise ValueError(f"Not a KV frame (starts {magic!r}); both sides must speak KVH1.")
    meta = json.loads(bytes(_recv_exact(sock, meta_len)))
    ids = torch.frombuffer(_recv_exact(sock, ids_len), dtype=torch.int32).tolist()
    raw = _recv_exact(sock, kv_len)
    meta["t_received"] = time.perf_counter()
    kv = torch.frombuffer(raw, dtype=torch.uint8).view(DTYPES[meta["dtype"]])
    handoff = KVHandoff(ids, int(meta["first_token"]), kv.view(meta["shape"]), meta)
    return handoff, WireBytes(PREFIX.size + meta_len, ids_len, kv_len)
