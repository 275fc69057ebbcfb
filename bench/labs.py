"""Every lab with its default parameters, run as a lab worker runs it (one process, CPU):
wall time (target ≤ 120 s each), time to the first point, points, and headline results.

    python -m bench.labs [--labs two-phase,kv-cache-growth] [--threads N]

The first lab in a process also pays one-off costs (imports, model loads, tokenising the
held-out text), as the first run on a fresh worker would; those are reported separately
by running a tiny warm-up first unless --cold is given.
"""

from __future__ import annotations

import argparse
import datetime
import os
import time

import torch

from lab.labs import LABS
from lab.labs.base import RunContext
from lab.labs.common import device_name

TARGET_S = 120.0


def run_lab(slug: str) -> dict:
    lab = LABS[slug]
    ctx = RunContext(params=lab.clean({}))
    started = time.perf_counter()
    first, points = None, 0
    for _ in lab.run(ctx):
        points += 1
        if first is None:
            first = time.perf_counter() - started
    return {"wall": time.perf_counter() - started, "first": first or 0.0, "points": points,
            "summary": ctx.summary}  # fmt: skip


def headline(summary: dict, limit: int = 4) -> str:
    items = []
    for key, value in summary.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        items.append(f"{key} {value:.4g}")
        if len(items) == limit:
            break
    return "; ".join(items)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.labs", description=__doc__)
    parser.add_argument("--labs", default=",".join(LABS))
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--cold", action="store_true", help="no warm-up of shared caches")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    if not args.cold:  # load the bundled models and the held-out text once, as a warm worker
        from lab.labs import common

        common.bundled_model("target"), common.bundled_model("draft"), common.heldout_ids()
    now = datetime.datetime.now().isoformat(timespec="seconds")
    print(f"# python -m bench.labs ({now}); {device_name('cpu')}; load average "
          f"{os.getloadavg()[0]:.1f}\n")  # fmt: skip
    print("| lab | wall s | first point s | points | within 120 s | headline (summary) |")
    print("|---|---|---|---|---|---|")
    for slug in args.labs.split(","):
        r = run_lab(slug)
        ok = "yes" if r["wall"] <= TARGET_S else "**no**"
        print(f"| {slug} | {r['wall']:.1f} | {r['first']:.2f} | {r['points']} | {ok} | "
              f"{headline(r['summary'])} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
