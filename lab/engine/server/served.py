"""What the app serves: the engine in its worker thread, the model's name and the API key;
`make_served` loads a model directory into one."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from lab.engine.dtypes import Choice
from lab.engine.server.worker import EngineWorker

WEIGHTS = Path(__file__).resolve().parents[1] / "weights"


@dataclass
class Served:
    """One model behind the API: its engine thread, the name clients ask for, the API key."""

    worker: EngineWorker
    model_name: str
    api_key: str | None = None
    created: int = field(default_factory=lambda: int(time.time()))
    dtype: Choice | None = None  # which dtype the engine runs in, and why


def make_served(
    model_dir: Path,
    *,
    max_num_seqs: int = 16,
    max_queue: int = 64,
    max_num_batched_tokens: int = 512,
    block_size: int = 16,
    num_blocks: int | None = None,
    mode: str = "paged",
    abort_on_disconnect: bool = True,
    served_model_name: str | None = None,
    api_key: str | None = None,
    device: str = "cpu",
    dtype: str = "auto",
) -> Served:
    """Load the HF-format model in `model_dir` into an engine and start its thread, in
    `dtype` ("auto": the fastest correct dtype for this model's shape on this machine,
    measured once, lab.engine.dtypes)."""
    from lab.engine import dtypes
    from lab.engine.config import EngineConfig, ModelConfig
    from lab.engine.engine import LLMEngine

    shape = ModelConfig.from_hf(model_dir / "config.json")
    config = EngineConfig(
        mode=mode,
        block_size=block_size,
        num_blocks=num_blocks,
        max_model_len=shape.max_position_embeddings,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    choice = dtypes.choose(device, dtype, shape=shape.to_hf(), path=dtypes.cache_path())
    engine = LLMEngine.from_pretrained(model_dir, config, dtype=choice.torch_dtype, device=device)
    if engine.tokenizer is None:
        raise SystemExit(f"No tokenizer.json in or beside {model_dir}.")
    worker = EngineWorker(engine, max_queue=max_queue, abort_on_disconnect=abort_on_disconnect)
    worker.start()
    return Served(worker, served_model_name or model_dir.name, api_key, dtype=choice)
