"""`python -m lab.engine generate "def fib(" --max-tokens 64`: stream from the bundled model."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

WEIGHTS = Path(__file__).resolve().parent / "weights"


def main(argv: list[str] | None = None) -> int:
    from lab.engine.config import EngineConfig
    from lab.engine.engine import LLMEngine
    from lab.engine.sampler import SamplingParams

    parser = argparse.ArgumentParser(prog="python -m lab.engine")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="stream a completion")
    gen.add_argument("prompt")
    gen.add_argument("--model", type=Path, default=WEIGHTS / "target")
    gen.add_argument("--max-tokens", type=int, default=64)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--seed", type=int, default=None)
    gen.add_argument("--mode", choices=["paged", "contiguous", "none"], default="paged")
    gen.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)

    if not (args.model / "config.json").exists():
        print(
            f"No model at {args.model}: train one with `python -m lab.engine.training`.",
            file=sys.stderr,
        )
        return 2
    engine = LLMEngine.from_pretrained(args.model, EngineConfig(mode=args.mode), device=args.device)
    params = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, seed=args.seed, max_tokens=args.max_tokens
    )
    rid = engine.add_request(args.prompt, params)
    sys.stdout.write(args.prompt)
    tokens: list[int] = []
    shown = ""
    for token in engine.stream(rid):
        tokens.append(token)
        text = engine.decode(tokens)
        sys.stdout.write(text[len(shown) :])
        sys.stdout.flush()
        shown = text
    m = engine.metrics(rid)
    print(
        f"\n-- {m['output_tokens']} tokens, TTFT {m['ttft_ms']:.1f} ms, "
        f"TPOT {m['tpot_ms'] or 0:.2f} ms, E2E {m['e2e_ms']:.1f} ms",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
