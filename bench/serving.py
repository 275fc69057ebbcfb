"""The engine server under load, measured with our load generator.

1. Abort on disconnect vs not: N streaming clients each read k chunks and leave; the server's
   own counters give the tokens it generated and the seconds its engine thread was busy.
2. Latency vs request rate (Poisson arrivals) against the bundled server: TTFT/TPOT p50/p99,
   throughput, goodput.

    .venv/bin/python -m bench.serving [--clients 16] [--leave-after 8] [--rates 2,4,8,16]
"""

from __future__ import annotations

import argparse

from lab.engine.server.launch import spawn, wait_idle
from lab.labs.http_cancellation import leave_early
from lab.loadgen import LoadConfig, sweep
from lab.loadgen.runner import run_blocking


def abort_vs_not(clients: int, leave_after: int, max_tokens: int) -> None:
    rows = {}
    params = {"max_tokens": max_tokens, "leave_after": leave_after}
    for label, args in (("abort on disconnect", ()), ("no abort", ("--no-abort-on-disconnect",))):
        with spawn(*args) as url:
            run_blocking(leave_early(url, clients, params))
            rows[label] = wait_idle(url)
    print(f"\n{clients} streaming clients, each leaves after {leave_after} chunks "
          f"(max_tokens {max_tokens})\n")  # fmt: skip
    print("| server | tokens generated | tokens after disconnect | engine busy s | aborted |")
    print("|---|---:|---:|---:|---:|")
    for label, m in rows.items():
        print(f"| {label} | {m.get('generated_tokens_total', 0):.0f} | "
              f"{m.get('tokens_after_disconnect_total', 0):.0f} | "
              f"{m.get('engine_busy_seconds_total', 0):.2f} | "
              f"{m.get('aborted_requests_total', 0):.0f} |")  # fmt: skip
    on, off = rows["abort on disconnect"], rows["no abort"]
    print(f"\nengine busy time, no abort / abort: "
          f"{off['engine_busy_seconds_total'] / on['engine_busy_seconds_total']:.1f}x")  # fmt: skip


def latency_vs_rate(rates: list[float], duration: float) -> None:
    with spawn() as url:
        config = LoadConfig(base_url=url, rate=1.0, num_requests=None, duration_s=duration,
                            input_len=64, output_len=32, ignore_eos=True, seed=0,
                            slo={"ttft_ms": 500, "tpot_ms": 100})  # fmt: skip
        results = sweep(config, rates)
    print(
        f"\nPoisson arrivals, 64-token prompts, 32 output tokens, {duration:g} s per rate; "
        "SLO TTFT ≤ 500 ms and TPOT ≤ 100 ms\n"
    )
    print(
        "| rate req/s | done | req/s | out tok/s | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 "
        "| ITL p99 | goodput req/s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for rate, r in zip(rates, results, strict=True):
        s = r["summary"]
        print(f"| {rate:g} | {s['completed']} | {s['request_throughput']:.2f} | "
              f"{s['output_throughput']:.0f} | {s['ttft_ms']['median']:.0f} | "
              f"{s['ttft_ms']['p99']:.0f} | {s['tpot_ms']['median']:.1f} | "
              f"{s['tpot_ms']['p99']:.1f} | {s['itl_ms']['p99']:.1f} | {s['goodput']:.2f} |")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--leave-after", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--rates", default="2,4,8,16")
    p.add_argument("--duration", type=float, default=10)
    args = p.parse_args()
    abort_vs_not(args.clients, args.leave_after, args.max_tokens)
    latency_vs_rate([float(r) for r in args.rates.split(",")], args.duration)


if __name__ == "__main__":
    main()
