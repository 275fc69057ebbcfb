"""`python -m lab.loadgen --url http://127.0.0.1:8100/v1 --concurrency 4 --num-requests 50`:
benchmark an OpenAI-compatible endpoint and print vLLM-style results (see lab.loadgen)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from tqdm import tqdm

from lab.loadgen.arrivals import ARRIVALS, parse_rates
from lab.loadgen.client import ENDPOINTS, LoadgenError
from lab.loadgen.metrics import SLO_KEYS, RequestRecord, format_summary
from lab.loadgen.retry import POLICIES
from lab.loadgen.runner import LEN_DISTS, LoadConfig, run

PROG = "python -m lab.loadgen"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if math.isnan(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _slo(text: str) -> dict[str, float]:
    """ "ttft_ms=500,tpot_ms=50" -> {"ttft_ms": 500.0, "tpot_ms": 50.0}."""
    slo = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key not in SLO_KEYS:
            raise argparse.ArgumentTypeError(
                f"expected KEY=MS[,KEY=MS] with KEY in {', '.join(SLO_KEYS)}, got {part!r}"
            )
        slo[key] = _positive_float(value)
    return slo


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _rates(text: str) -> list[float]:
    try:
        return parse_rates(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="base URL, e.g. http://127.0.0.1:8100/v1")
    p.add_argument("--model", help="default: the first model GET {url}/models lists")
    p.add_argument("--endpoint", choices=list(ENDPOINTS), default="completions")
    p.add_argument(
        "--api-key",
        default=os.environ.get("OPENAI_API_KEY"),
        help="Bearer token (default: $OPENAI_API_KEY)",
    )

    load = p.add_argument_group("load (default: --concurrency 1)")
    mode = load.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", type=_positive_int, help="closed loop: N workers")
    mode.add_argument(
        "--rate", type=_positive_float, help="open loop: requests/s (inf: all at once)"
    )
    mode.add_argument(
        "--sweep", type=_rates, metavar="R1,R2,...", help="one open-loop run per rate"
    )
    load.add_argument("--arrival", choices=ARRIVALS, help="open-loop process (default poisson)")
    load.add_argument(
        "--burstiness",
        type=_positive_float,
        help="gamma shape (with --arrival gamma): 1 = Poisson, < 1 burstier",
    )
    load.add_argument(
        "--num-requests",
        type=_positive_int,
        help="stop after N requests (default 100 unless --duration)",
    )
    load.add_argument(
        "--duration",
        type=_positive_float,
        metavar="S",
        help="stop sending after S seconds (in-flight requests are waited for)",
    )
    load.add_argument(
        "--warmup", type=int, default=0, metavar="N", help="N unrecorded requests first"
    )

    shape = p.add_argument_group("requests")
    shape.add_argument("--input-len", type=_positive_int, default=64)
    shape.add_argument("--output-len", type=_positive_int, default=64, help="max_tokens")
    shape.add_argument("--len-dist", choices=LEN_DISTS, default="fixed")
    shape.add_argument("--range-ratio", type=float, default=0.0)
    shape.add_argument("--temperature", type=float, default=0.0)
    shape.add_argument("--ignore-eos", action="store_true", help="generate exactly max_tokens")
    shape.add_argument(
        "--extra-body",
        type=_json_object,
        default={},
        metavar="JSON",
        help="fields merged into every request body",
    )
    shape.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="tokenizer.json for prompts and token counts (default: bundled)",
    )

    failures = p.add_argument_group("timeouts and retries")
    failures.add_argument(
        "--timeout",
        type=_positive_float,
        metavar="S",
        help="total deadline per attempt (default: none)",
    )
    failures.add_argument("--retry", choices=POLICIES, default="none")
    failures.add_argument("--max-retries", type=int, default=3)
    failures.add_argument("--backoff-base", type=float, default=0.1, metavar="S")
    failures.add_argument("--backoff-cap", type=float, default=2.0, metavar="S")
    failures.add_argument(
        "--retry-budget",
        type=float,
        default=0.1,
        metavar="RATIO",
        help="tokens each request adds to the retry budget",
    )
    failures.add_argument("--retry-budget-cap", type=float, default=10.0, metavar="TOKENS")

    out = p.add_argument_group("output")
    out.add_argument(
        "--slo",
        type=_slo,
        default={},
        metavar="ttft_ms=500,tpot_ms=50",
        help=f"goodput SLOs, keys {', '.join(SLO_KEYS)}",
    )
    out.add_argument("--out", type=Path, help="write the result JSON here")
    out.add_argument("--no-progress", action="store_true")
    out.add_argument("--seed", type=int, default=0)
    return p


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    """ValueError for combinations LoadConfig rejects."""
    open_loop = args.rate is not None or args.sweep is not None
    if args.arrival is not None and not open_loop:
        raise ValueError("--arrival needs --rate or --sweep")
    if args.burstiness is not None and args.arrival != "gamma":
        raise ValueError("--burstiness needs --arrival gamma")
    return LoadConfig(
        base_url=args.url,
        model=args.model,
        endpoint=args.endpoint,
        concurrency=args.concurrency,
        rate=args.rate if args.sweep is None else args.sweep[0],
        arrival=args.arrival or "poisson",
        burstiness=args.burstiness or 1.0,
        num_requests=args.num_requests or (None if args.duration else 100),
        duration_s=args.duration,
        input_len=args.input_len,
        output_len=args.output_len,
        len_dist=args.len_dist,
        range_ratio=args.range_ratio,
        temperature=args.temperature,
        ignore_eos=args.ignore_eos,
        extra_body=args.extra_body,
        api_key=args.api_key,
        timeout_s=args.timeout,
        retry=args.retry,
        max_retries=args.max_retries,
        backoff_base=args.backoff_base,
        backoff_cap=args.backoff_cap,
        budget_ratio=args.retry_budget,
        budget_cap=args.retry_budget_cap,
        tokenizer=args.tokenizer,
        seed=args.seed,
        slo=args.slo,
        warmup=args.warmup,
    )


def _run_one(config: LoadConfig, show_progress: bool, label: str) -> dict[str, Any]:
    """run() with a tqdm bar on stderr, opened at the first finished request (so a setup
    error prints alone)."""
    total = config.num_requests if config.duration_s is None else None
    bars: list[tqdm] = []

    def progress(record: RequestRecord) -> None:
        if not bars:
            bars.append(tqdm(total=total, desc=label, unit="req", file=sys.stderr))
        bars[0].update(1)

    try:
        return run(config, progress if show_progress else None)
    finally:
        for bar in bars:
            bar.close()


def format_sweep(results: list[dict[str, Any]]) -> str:
    head = f"{'rate':>8} {'req/s':>8} {'tok/s':>9} {'TTFT p50':>9} {'TTFT p99':>9} "
    head += f"{'TPOT p50':>9} {'E2EL p99':>9} {'goodput':>8} {'failed':>6}"
    lines = [head]

    def f(value: Any, width: int) -> str:
        return f"{'n/a':>{width}}" if value is None else f"{value:>{width}.1f}"

    for result in results:
        s = result["summary"]
        lines.append(
            f"{result['config']['rate']!s:>8} {f(s['request_throughput'], 8)} "
            f"{f(s['output_throughput'], 9)} {f(s['ttft_ms']['median'], 9)} "
            f"{f(s['ttft_ms']['p99'], 9)} {f(s['tpot_ms']['median'], 9)} "
            f"{f(s['e2el_ms']['p99'], 9)} {f(s['goodput'], 8)} {s['failed']:>6}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
    except ValueError as exc:
        parser.error(str(exc))
    rates = args.sweep or [config.rate]
    show = not args.no_progress
    results = []
    try:
        for rate in rates:
            one = dataclasses.replace(config, rate=rate)
            label = "requests" if rate is None else f"rate {rate:g}/s"
            result = _run_one(one, show, label)
            title = "Serving Benchmark Result" + ("" if args.sweep is None else f" ({label})")
            print(format_summary(result["summary"], title), flush=True)
            results.append(result)
    except LoadgenError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    if args.sweep is not None:
        print(format_sweep(results))
    if args.out is not None:
        data = results if args.sweep is not None else results[0]
        args.out.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {args.out}", file=sys.stderr)
    if all(r["summary"]["completed"] == 0 for r in results):
        # A run where nothing succeeded measured nothing: fail loudly (scripts check $?).
        first = next((q["error"] for r in results for q in r["requests"] if q.get("error")), "")
        print(f"{PROG}: error: no request succeeded (first error: {first})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
