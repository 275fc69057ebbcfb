"""The engine: requests in, tokens out, one scheduler step at a time.

`LLMEngine.add_request(prompt, params) -> id`, `step()`, `stream(id)`, `abort(id)`,
`generate(prompts, params)`, and metrics per request (queue time, TTFT, TPOT, ITL, token
counts) and per step (batch size, prefill/decode tokens, KV blocks used/free, prefix hits).
Metric meanings follow vLLM's serving benchmark (TTFT to the first token; TPOT =
(E2E - TTFT) / (output tokens - 1); ITL per token). Plain PyTorch, no Django.

The engine keeps the requests and the step loop: schedule, run, sample, postprocess. The
model runner (model_runner.py) turns a scheduled batch into model inputs and logits.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field
from pathlib import Path

import torch

from lab.engine.block_manager import BlockManager
from lab.engine.config import EngineConfig
from lab.engine.contiguous_allocator import ContiguousAllocator
from lab.engine.kv_pool import KVPool, kv_usage
from lab.engine.kv_transfer import KVHandoff, slots_of
from lab.engine.model import LlamaModel, load_model, mv_reads_faster
from lab.engine.model_runner import ModelRunner
from lab.engine.sampler import SamplingParams, make_generator, sample
from lab.engine.scheduler import Scheduler
from lab.engine.sequence import Sequence, SequenceStatus
from lab.engine.static_scheduler import StaticScheduler


@dataclass
class RequestState:
    seq: Sequence
    params: SamplingParams
    generator: torch.Generator | None
    arrival: float
    first_scheduled: float | None = None
    token_times: list[float] = field(default_factory=list)
    delivered: int = 0  # output tokens already handed out by stream()

    def metrics(self) -> dict[str, float | int | list[float] | None]:
        """Times in ms. TTFT: arrival -> first token; ITL: gaps between tokens."""
        times = self.token_times
        ttft = (times[0] - self.arrival) * 1000 if times else None
        e2e = (times[-1] - self.arrival) * 1000 if times else None
        n = len(times)
        return {
            "prompt_tokens": self.seq.num_prompt_tokens,
            "output_tokens": n,
            "queue_ms": (self.first_scheduled - self.arrival) * 1000
            if self.first_scheduled
            else None,
            "ttft_ms": ttft,
            "tpot_ms": (e2e - ttft) / (n - 1) if n > 1 and ttft is not None else None,
            "itl_ms": [(b - a) * 1000 for a, b in itertools.pairwise(times)],
            "e2e_ms": e2e,
            "preemptions": self.seq.num_preemptions,
            "status": self.seq.status.value,
        }


class LLMEngine:
    """Continuous batching over a paged KV cache (or the contrast modes)."""

    def __init__(self, model: LlamaModel, config: EngineConfig | None = None, tokenizer=None):
        self.model = model
        self.config = config or EngineConfig()
        self.tokenizer = tokenizer
        self.device = model.device
        self._ids = itertools.count()
        self.requests: dict[int, RequestState] = {}
        self.step_log: list[dict] = []
        self.manager = self._build_manager()  # before the pool: its checks come first
        self.runner = ModelRunner(model, self.config)
        if model.dtype == torch.bfloat16 and self.device.type == "cpu":
            mv_reads_faster()  # timed once per process here, not inside the first decode step
        scheduler_kwargs = {"is_finished": self._is_finished}
        if self.config.scheduling == "static":
            self.scheduler = StaticScheduler(
                self.manager, self.config.static_batch_size, **scheduler_kwargs
            )
        else:
            self.scheduler = Scheduler(
                self.manager,
                self.config.max_num_seqs,
                self.config.max_num_batched_tokens,
                self.config.enable_chunked_prefill,
                **scheduler_kwargs,
            )

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        config: EngineConfig | None = None,
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
    ) -> LLMEngine:
        """Load HF-format weights (config.json + model.safetensors) and, if present beside
        them or one folder up, tokenizer.json."""
        from tokenizers import Tokenizer

        path = Path(path)
        tokenizer_file = next(
            (p for p in (path / "tokenizer.json", path.parent / "tokenizer.json") if p.exists()),
            None,
        )
        tokenizer = Tokenizer.from_file(str(tokenizer_file)) if tokenizer_file else None
        return cls(load_model(path, dtype=dtype, device=device), config, tokenizer)

    # --- cache ---------------------------------------------------------------------------
    def _build_manager(self) -> BlockManager | ContiguousAllocator:
        """Who holds which KV slots; the runner's pool holds the K/V themselves."""
        c = self.config
        if c.mode == "contiguous":
            return ContiguousAllocator(c.max_num_seqs, c.max_model_len)
        prefix = c.enable_prefix_caching and c.mode == "paged"
        return BlockManager(c.num_kv_blocks, c.block_size, enable_prefix_caching=prefix)

    @property
    def pool(self) -> KVPool | None:
        """The KV pool (the runner's; None in mode "none")."""
        return self.runner.pool

    def kv_bytes_per_token(self) -> int:
        return self.model.config.kv_bytes_per_token(
            torch.empty(0, dtype=self.model.dtype).element_size()
        )

    def kv_usage(self) -> dict:
        """Allocated vs used KV bytes right now (none mode: what a cache would hold)."""
        return kv_usage(self.manager, self.kv_bytes_per_token())

    # --- requests ------------------------------------------------------------------------
    def encode(self, prompt: str | Seq[int]) -> list[int]:
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise ValueError("This engine has no tokenizer: pass token ids, not text.")
            return self.tokenizer.encode(prompt).ids
        return list(prompt)

    def decode(self, token_ids: Seq[int]) -> str:
        return self.tokenizer.decode(list(token_ids)) if self.tokenizer else str(list(token_ids))

    def add_request(self, prompt: str | Seq[int], params: SamplingParams | None = None) -> int:
        """Queue a request; returns its id. Raises ValueError when it cannot fit."""
        params = params or SamplingParams()
        tokens = self.encode(prompt)
        limit = self.config.max_model_len
        if not tokens:
            raise ValueError("The prompt is empty; give at least one token.")
        if len(tokens) + params.max_tokens > limit:
            raise ValueError(
                f"Prompt ({len(tokens)} tokens) + max_tokens ({params.max_tokens}) exceeds "
                f"max_model_len ({limit}); shorten the prompt or lower max_tokens."
            )
        request_id = next(self._ids)
        seq = Sequence(request_id, tokens, sampling_params=params)
        self.requests[request_id] = RequestState(
            seq, params, make_generator(params, self.device), time.perf_counter()
        )
        seq.arrival_time = self.requests[request_id].arrival
        self.scheduler.add(seq)
        return request_id

    # --- prefill/decode disaggregation (kv_transfer.py) ----------------------------------
    def export_kv(self, request_id: int, release: bool = True) -> KVHandoff:
        """The KV of a request whose prefill is done (its prompt tokens only), its first
        sampled token and the position that token takes; `release` aborts the request
        here, freeing its blocks (a prefill engine hands it off and forgets it)."""
        seq = self.requests[request_id].seq
        if seq.num_generated_tokens != 1 or seq.num_computed_tokens != seq.num_prompt_tokens:
            raise ValueError(
                f"Request {request_id} is not just past its prefill (generated "
                f"{seq.num_generated_tokens} tokens); export right after its first token."
            )
        if self.pool is None or self.config.mode != "paged":
            raise ValueError("KV export needs the paged KV cache (EngineConfig.mode 'paged').")
        slots = slots_of(seq.block_table, seq.num_prompt_tokens, self.config.block_size)
        kv = self.pool.kv.flatten(2, 3)[:, :, slots].contiguous()  # [layers, 2, tokens, h, d]
        handoff = KVHandoff(seq.token_ids[: seq.num_prompt_tokens], seq.last_token, kv)
        if release:
            self.abort(request_id)
        return handoff

    def add_prefilled(self, handoff: KVHandoff, params: SamplingParams | None = None,
                      arrival: float | None = None) -> int:  # fmt: skip
        """Add a request whose prompt KV was computed elsewhere: allocate its blocks, write
        the KV, and let it decode from its first token (which counts as generated). Raises
        RuntimeError when there is no room now (retry after some requests finish)."""
        params = params or SamplingParams()
        if params.max_tokens < 2:
            raise ValueError("A prefilled request already has its one token: max_tokens ≥ 2.")
        tokens = [*handoff.prompt_ids, handoff.first_token]
        if len(tokens) - 1 + params.max_tokens > self.config.max_model_len:
            raise ValueError(
                f"Prompt ({len(tokens) - 1} tokens) + max_tokens ({params.max_tokens}) exceeds "
                f"max_model_len ({self.config.max_model_len})."
            )
        expected = (self.model.config.num_hidden_layers, 2, len(tokens) - 1,
                    self.model.config.num_key_value_heads, self.model.config.head_dim)  # fmt: skip
        if tuple(handoff.kv.shape) != expected or handoff.kv.dtype != self.model.dtype:
            raise ValueError(
                f"The handed-off KV is {tuple(handoff.kv.shape)} {handoff.kv.dtype}; this "
                f"engine's model needs {expected} {self.model.dtype} (same model on both sides)."
            )
        scheduler = self.scheduler
        request_id = next(self._ids)
        seq = Sequence(request_id, tokens, num_prompt_tokens=len(tokens) - 1,
                       sampling_params=params)  # fmt: skip
        if (not isinstance(scheduler, Scheduler) or len(scheduler.running) >= scheduler.max_num_seqs
                or not self.manager.can_allocate(seq)):  # fmt: skip
            raise RuntimeError("No room for a prefilled request now (sequences or KV blocks).")
        self.manager.allocate(seq)
        slots = slots_of(seq.block_table, seq.num_prompt_tokens, self.config.block_size)
        self.pool.kv.flatten(2, 3)[:, :, slots] = handoff.kv.to(self.device)
        seq.num_computed_tokens = seq.num_prefill_tokens = seq.num_prompt_tokens
        seq.status = SequenceStatus.RUNNING
        now = time.perf_counter()
        state = RequestState(seq, params, make_generator(params, self.device), arrival or now)
        state.first_scheduled = now
        self.requests[request_id] = state
        seq.arrival_time = state.arrival
        scheduler.add_running(seq)
        return request_id

    def abort(self, request_id: int) -> bool:
        """Stop a request now; its KV blocks are freed at once. False if already done."""
        return self.scheduler.abort(request_id) is not None

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    def _is_finished(self, seq: Sequence) -> bool:
        params: SamplingParams = seq.sampling_params
        if seq.num_generated_tokens >= params.max_tokens:
            return True
        last = seq.last_token
        if last in params.stop_token_ids:
            return True
        return not params.ignore_eos and last in self.model.config.eos_token_ids

    # --- one step ------------------------------------------------------------------------
    def step(self, flush: bool = True) -> dict[int, int]:
        """Run one scheduler step; returns {request_id: new token} for tokens emitted now."""
        batch = (
            self.scheduler.schedule(flush=flush)
            if isinstance(self.scheduler, StaticScheduler)
            else self.scheduler.schedule()
        )
        if batch.is_empty:
            return {}
        started = time.perf_counter()
        for item in batch.items:
            state = self.requests[item.seq.seq_id]
            state.first_scheduled = state.first_scheduled or started
        logits_rows = self.runner.run(batch)
        emitting = [item for item in batch.items if item.emits_token]
        new_tokens: dict[int, int | None] = {item.seq.seq_id: None for item in batch.items}
        if emitting:
            states = [self.requests[item.seq.seq_id] for item in emitting]
            tokens = sample(logits_rows, [s.params for s in states], [s.generator for s in states])
            for item, token in zip(emitting, tokens.tolist(), strict=True):
                new_tokens[item.seq.seq_id] = token
        self.scheduler.postprocess(batch, new_tokens)
        now = time.perf_counter()
        emitted = {sid: t for sid, t in new_tokens.items() if t is not None}
        for sid in emitted:
            self.requests[sid].token_times.append(now)
        self._log_step(batch, started, now)
        return emitted

    def _log_step(self, batch, started: float, finished: float) -> None:
        stats = self.manager.stats(self.kv_bytes_per_token())
        self.step_log.append(
            {
                "ms": (finished - started) * 1000,
                "num_seqs": batch.num_seqs,
                "prefill_tokens": batch.num_prefill_tokens,
                "decode_tokens": batch.num_decode_tokens,
                "kv_allocated_bytes": stats.get("allocated_bytes"),
                "kv_used_bytes": stats.get("used_bytes"),
                "free_blocks": stats.get("free_blocks"),
                "prefix_hits": stats.get("prefix_hits", 0),
            }
        )

    # --- convenience ---------------------------------------------------------------------
    def stream(self, request_id: int) -> Iterator[int]:
        """Yield a request's tokens as they are produced (drives step() as needed)."""
        state = self.requests[request_id]
        while True:
            generated = state.seq.generated_token_ids
            while state.delivered < len(generated):
                state.delivered += 1
                yield generated[state.delivered - 1]
            if state.seq.is_done:
                return
            self.step()

    def generate(
        self, prompts: Seq[str | Seq[int]], params: SamplingParams | Seq[SamplingParams]
    ) -> list[list[int]]:
        """Run prompts to completion together; output token ids per prompt, in order."""
        plist = list(params) if isinstance(params, list | tuple) else [params] * len(prompts)
        ids = [self.add_request(p, sp) for p, sp in zip(prompts, plist, strict=True)]
        while self.has_unfinished():
            self.step()
        return [self.requests[i].seq.generated_token_ids for i in ids]

    def metrics(self, request_id: int) -> dict:
        return self.requests[request_id].metrics()
