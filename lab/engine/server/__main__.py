"""`python -m lab.engine.server --model lab/engine/weights/target --port 8100`: the engine
behind an OpenAI-compatible HTTP API.

The command line: load the model, start the engine thread, serve the app on uvicorn until
interrupted, then stop the engine thread.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from lab.engine.server.app import build_app
from lab.engine.server.served import WEIGHTS, make_served


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m lab.engine.server", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--model", type=Path, default=WEIGHTS / "target", help="HF-format model dir")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--served-model-name", default=None, help="default: the model dir's name")
    p.add_argument("--max-num-seqs", type=int, default=16, help="running requests at most")
    p.add_argument(
        "--max-queue", type=int, default=64, help="waiting requests at most; more get 429"
    )
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument(
        "--num-blocks",
        type=int,
        default=None,
        help="KV blocks in the paged pool (default: max-num-seqs full-length sequences)",
    )
    p.add_argument("--mode", choices=["paged", "contiguous", "none"], default="paged")
    p.add_argument(
        "--no-abort-on-disconnect",
        action="store_true",
        help="keep decoding for clients that went away (the contrast)",
    )
    p.add_argument("--api-key", default=os.environ.get("ENGINE_API_KEY"))
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--dtype",
        choices=["auto", "fp32", "bf16", "fp16"],
        default=os.environ.get("ENGINE_DTYPE", "auto"),
        help="auto (default): the fastest dtype that passes the logits check, measured once "
        "per machine and model shape and kept in var/engine_dtype.json",
    )
    args = p.parse_args(argv)
    for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "port"):
        if getattr(args, name) < (0 if name == "port" else 1):
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.num_blocks is not None and args.num_blocks < 1:
        p.error("--num-blocks must be positive")
    if args.max_queue < 0:
        p.error("--max-queue must be >= 0")
    if not (args.model / "config.json").exists():
        p.error(f"no model at {args.model} (expected config.json and model.safetensors)")
    return args


def main(argv: list[str] | None = None) -> int:
    import torch
    import uvicorn

    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    served = make_served(
        args.model,
        max_num_seqs=args.max_num_seqs,
        max_queue=args.max_queue,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        num_blocks=args.num_blocks,
        mode=args.mode,
        abort_on_disconnect=not args.no_abort_on_disconnect,
        served_model_name=args.served_model_name,
        api_key=args.api_key,
        device=args.device,
        dtype=args.dtype,
    )
    print(f"Serving {served.model_name} on http://{args.host}:{args.port}/v1 in "
          f"{served.dtype.describe()}", flush=True)  # fmt: skip
    uvicorn.run(
        build_app(served),
        host=args.host,
        port=args.port,
        log_level="warning",
        timeout_graceful_shutdown=5,
    )
    served.worker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
