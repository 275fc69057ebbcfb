"""Time to grade one arithmetic step, over the whole bank.

    python -m bench.grading [--seeds 20]

"ours" is `trainer.grading.arithmetic.grade_step` on a fresh chain (reference solve, the
learner's chain for error carried forward, authored misconceptions, generic slips).
"baseline" is what a plain checker does: solve the reference chain once and compare the
answer within tolerance. Both run side by side on the same answers in one process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")
    from questions import problems
    from questions.bank import _problem_dict, read_bank
    from trainer.grading.arithmetic import Chain, grade_step

    specs = [
        problems.from_dict(_problem_dict(q.problem)) for q in read_bank().questions if q.problem
    ]
    timings: dict[str, list[float]] = {
        "ours: correct answer": [],
        "ours: wrong first step, ECF": [],
        "ours: misconception": [],
        "baseline: plain check": [],
    }
    for spec in specs:
        for seed in range(args.seeds):
            variant = problems.draw_variant(spec, seed)
            reference = problems.solve(spec, variant.variables)
            first = spec.steps[0]
            wrong = {first.name: reference[first.name] * 1.37}
            mine = problems.solve(spec, variant.variables, overrides=wrong)
            for step in spec.steps:
                t = time.perf_counter()
                grade_step(Chain(spec, variant.variables), step.name, reference[step.name])
                timings["ours: correct answer"].append(time.perf_counter() - t)
                t = time.perf_counter()
                grade_step(Chain(spec, variant.variables, dict(wrong)), step.name, mine[step.name])
                timings["ours: wrong first step, ECF"].append(time.perf_counter() - t)
                if step.misconceptions:
                    scope = {
                        **variant.variables,
                        **{k: v for k, v in reference.items() if k != step.name},
                    }
                    answer = problems.misconception_values(step, scope)[-1][1]
                    t = time.perf_counter()
                    grade_step(Chain(spec, variant.variables), step.name, answer)
                    timings["ours: misconception"].append(time.perf_counter() - t)
                t = time.perf_counter()
                expected = problems.solve(spec, variant.variables)[step.name]
                _ = abs(reference[step.name].m - expected.m) <= step.rtol * abs(expected.m)
                timings["baseline: plain check"].append(time.perf_counter() - t)
    base = statistics.median(timings["baseline: plain check"])
    print(f"Grading one step: {len(specs)} problems x {args.seeds} seeds x every step")
    print("| path | steps timed | p50 ms | p95 ms | max ms | p50 vs baseline |")
    print("|---|---|---|---|---|---|")
    for name, values in timings.items():
        ms = [v * 1000 for v in values]
        print(
            f"| {name} | {len(ms)} | {statistics.median(ms):.2f} | {_percentile(ms, 0.95):.2f} "
            f"| {max(ms):.2f} | {statistics.median(values) / base:.2f}x |"
        )


if __name__ == "__main__":
    main()
