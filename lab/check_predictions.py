"""Run every lab at small size on this machine and judge each prediction against its claim.

    python -m lab.check_predictions [--json] [--labs two-phase,kv-vs-no-cache]

Prints lab · series · claim · band · measured/predicted (median, worst) · tight/loose ·
verdict, one row per predicted series, and exits 1 when any verdict missed, or a bound the
lab marks tight (Series.tight; docs/LABS.md lists them) came out loose. A lab whose run was
contended (load above the cores, or the run got little CPU) and whose verdicts failed is run
once more, and both runs are reported: the second decides, the first is never hidden. An
inconclusive verdict (a miss measured under contention) does not fail. The sizes below keep
the whole run to a few minutes on 2 CPU cores; the verdict rules are lab/labs/verdicts.py's,
the bands each lab's BANDS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from typing import Any

# Small, and still on each lab's curve: the strict band check is this tool's job.
# fmt: off
SMALL: dict[str, dict[str, Any]] = {
    "two-phase": {"max_prompt_tokens": 256, "max_batch": 16, "repeats": 3},
    "kv-cache-growth": {"tokens": 96, "prompt_tokens": 16, "every": 16, "block_size": 8},
    "kv-vs-no-cache": {"prompt_tokens": 16, "new_tokens": 160, "every": 8},
    "batching": {"requests": 12, "slots": 4, "prompt_max": 8, "output_max": 24},
    "paging": {"sequences": 6, "max_len": 96, "max_model_len": 128},
    "prefix-caching": {"turns": 4, "system_tokens": 64, "user_tokens": 12, "answer_tokens": 4},
    "quantization": {"group_size": "32", "windows": 10, "window_tokens": 32, "decode_tokens": 4},
    "speculative-decoding": {
        "max_k": 4,
        "prompts": 2,
        "prompt_tokens": 16,
        "new_tokens": 16,
        "max_batch": "4",
    },
    "attention-memory": {"min_seq_len": 64, "max_seq_len": 512, "heads": 2, "block": 32},
    "cancellation": {
        "requests": 3,
        "max_tokens": 32,
        "others_max_tokens": 12,
        "disconnect_after": 4,
    },
    "http-cancellation": {"clients": 2, "max_tokens": 48, "leave_after": 3},
    "latency-vs-load": {
        "max_rate": 8.0,
        "levels": 2,
        "seconds_per_level": 3,
        "output_len": 8,
        "input_len": 16,
    },
    "waterfall": {
        "max_rate": 6.0,
        "levels": 2,
        "seconds_per_level": 3,
        "output_len": 8,
        "input_len": 16,
    },
    "retry-storm": {"seconds_per_policy": 3},
    "long-context-admission": {"replicas": 2, "short_rate": 4.0, "long_count": 2,
                               "horizon_s": 30.0},
    "disaggregation": {"long_prompts": 10, "decodes": 20, "decode_output": 64},
}
# fmt: on


def check_lab(slug: str) -> list[dict[str, Any]]:
    """One small run of `slug`: a row per predicted series (or one error row)."""
    import torch

    from lab.conditions import Meter
    from lab.labs import get_lab
    from lab.labs.base import RunContext
    from lab.labs.verdicts import contention, judge_run

    lab = get_lab(slug)
    ctx = RunContext(lab.clean(SMALL.get(slug, {})))
    meter, started = Meter.start(), time.perf_counter()
    try:
        points = list(lab.run(ctx))
    except Exception as exc:  # a refused calibration, a lab bug: reported as the row
        return [{"lab": slug, "series": "(run)", "claim": "", "band": None,
                 "median": None, "worst": None, "status": "error",
                 "verdict": f"{type(exc).__name__}: {exc}"}]  # fmt: skip
    wall_s = time.perf_counter() - started
    record = meter.end_record()
    contended = contention(record)
    by_name = lab.series_by_name()
    rows = []
    for v in judge_run(lab, points, record):
        expected = by_name[v.series].tight
        status, text = v.status, v.text
        if expected and v.tightness == "loose":
            if contended:  # slowed steps read loose: not a verdict on the bound
                status = "inconclusive"
                text += (f"; marked tight (docs/LABS.md), but measured under contention "
                         f"({contended}), so not a verdict on the bound")  # fmt: skip
            else:
                status = "missed"
                text += "; marked tight (docs/LABS.md), so a loose bound fails this check"
        rows.append({
            "lab": slug, "series": v.series, "claim": v.claim, "band": v.band,
            "median": _num(v.median_ratio), "worst": _num(v.worst_ratio), "status": status,
            "tightness": v.tightness, "tight_expected": expected, "verdict": text,
            "points": v.points, "wall_s": round(wall_s, 1), "threads": torch.get_num_threads(),
            "contended": contended, "load_start": record.get("load_start"),
            "load_end": record.get("load_end"), "cpu_share_pct": record.get("cpu_share_pct"),
        })  # fmt: skip
    return rows


FAILING = ("missed", "error")


def check_with_rerun(slug: str, check=None) -> list[dict[str, Any]]:
    """`check_lab(slug)`; when its run was contended and a verdict failed, once more. Both
    runs' rows are returned (the first marked "first run", the second "rerun"): the rerun's
    statuses decide, and the first run's stay in the report."""
    check = check or check_lab
    rows = check(slug)
    failed = any(r["status"] in (*FAILING, "inconclusive") for r in rows)
    if not (failed and any(r.get("contended") for r in rows)):
        return rows
    again = check(slug)
    first = [{**r, "run": "first run", "status": f"{r['status']} (first run, contended: "
              f"{r.get('contended')}; rerun below decides)"} for r in rows]  # fmt: skip
    return first + [{**r, "run": "rerun"} for r in again]


def _num(value: float) -> float | None:
    return round(value, 4) if value is not None and math.isfinite(value) else None


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table (docs/LABS.md carries one)."""
    out = ["| lab | series | claim | band | measured/predicted median | worst | tight? | verdict "
           "| why |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        band = "" if r["band"] is None else ("—" if r["claim"] == "exact" else f"±{r['band']:.0%}")
        med = "—" if r["median"] is None else f"{r['median']:.3g}"
        worst = "—" if r["worst"] is None else f"{r['worst']:.3g}"
        tight = r.get("tightness") or ""
        if r.get("tight_expected"):
            tight = f"{tight or '—'} (marked tight)"
        out.append(f"| {r['lab']} | {r['series']} | {r['claim']} | {band} | {med} | {worst} "
                   f"| {tight} | {r['status']} | {r['verdict']} |")  # fmt: skip
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")
    import django

    django.setup()  # questions.expressions (the formulas) reads the bank's units
    from lab.labs import LABS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON list instead of a table")
    parser.add_argument("--labs", default="", help="comma-separated slugs (default: all)")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads, as a lab worker running one run per core (1)",
    )
    args = parser.parse_args(argv)
    slugs = [s.strip() for s in args.labs.split(",") if s.strip()] or list(LABS)
    unknown = [s for s in slugs if s not in LABS]
    if unknown:
        parser.error(f"unknown lab(s) {', '.join(unknown)}; known: {', '.join(LABS)}")
    import torch

    torch.set_num_threads(max(1, args.threads))
    started, rows = time.perf_counter(), []
    for slug in slugs:
        rows.extend(check_with_rerun(slug))
        if not args.json:
            print(f"… {slug} done ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table(rows))
        load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
        print(f"\n{len(slugs)} labs in {time.perf_counter() - started:.0f} s; load average "
              f"{load} on {os.cpu_count()} cores; torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads")  # fmt: skip
    return 1 if any(r["status"] in FAILING for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
