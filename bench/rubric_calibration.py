"""Rubric grader vs expert marks on tests/data/rubric_calibration.yaml.

    python -m bench.rubric_calibration            # evaluate the tuned thresholds
    python -m bench.rubric_calibration --tune     # grid-search them (prints the best)

Point-level agreement = share of (answer, rubric point) pairs where the grader's hit/miss
equals the expert's. Ordering = strong > partial > buzzword and off-topic, per question.
Also times grading one answer (after warm-up): the issue's budget is p95 <= 150 ms.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "rubric_calibration.yaml"


@dataclass
class Case:
    slug: str
    label: str
    text: str
    expert: set[int]


def load_cases():
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")
    from questions.bank import read_bank
    from trainer.grading import rubric

    bank = {q.slug: q for q in read_bank().questions}
    cases, points, prompts = [], {}, {}
    for q in yaml.safe_load(DATA.read_text())["questions"]:
        question = bank[q["slug"]]
        points[q["slug"]] = [
            rubric.Point(p.text, p.weight, tuple(p.concepts), p.penalty) for p in question.rubric
        ]
        prompts[q["slug"]] = question.prompt
        for a in q["answers"]:
            cases.append(Case(q["slug"], a["label"], a["text"], set(a["points"])))
    return cases, points, prompts


def evaluate(cases, points, analyses, thresholds):
    from trainer.grading import rubric

    agree = total = 0
    scores: dict[tuple[str, str], list[float]] = {}
    for case, analysis in zip(cases, analyses, strict=True):
        result = rubric.decide(analysis, points[case.slug], thresholds)
        for p in result.points:
            agree += p.hit == (p.index in case.expert)
            total += 1
        scores.setdefault((case.slug, case.label), []).append(result.score)
    ordered = 0
    slugs = sorted({c.slug for c in cases})
    for slug in slugs:
        mean = {
            lab: statistics.mean(scores[(slug, lab)])
            for lab in ("strong", "partial", "buzzword", "off-topic")
        }
        ordered += mean["strong"] > mean["partial"] > max(mean["buzzword"], mean["off-topic"])
    return agree / total, ordered, len(slugs), scores


def tune(cases, points, analyses):
    from trainer.grading.rubric import Thresholds

    best = None
    grid = itertools.product(
        [0.48, 0.50, 0.51, 0.52, 0.53, 0.54, 0.56],  # sim_alone
        [0.38, 0.40, 0.41, 0.42, 0.43, 0.44, 0.46],  # sim_with_concepts
        [0.0, 0.05, 0.10, 0.2],  # concept_share
        [0.65, 0.70, 0.75],  # penalty_sim
        [0.15, 0.20, 0.25, 0.30],  # stuffing_discount
        [0.05, 1.0],  # numbers_required
    )
    for values in grid:
        t = Thresholds(*values)
        if t.sim_with_concepts >= t.sim_alone:
            continue
        agreement, ordered, n, _ = evaluate(cases, points, analyses, t)
        key = (ordered == n, agreement)
        if best is None or key > best[0]:
            best = (key, t, agreement, ordered)
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tune", action="store_true")
    args = parser.parse_args(argv)
    cases, points, prompts = load_cases()
    from trainer.grading import rubric

    rubric.model()
    analyses = [rubric.analyse(c.text, points[c.slug], prompts[c.slug]) for c in cases]
    timings = []
    for c in cases:  # warm: rubric/prompt embeddings cached, as in a running server
        t = time.perf_counter()
        rubric.grade(c.text, points[c.slug], prompts[c.slug])
        timings.append((time.perf_counter() - t) * 1000)
    if args.tune:
        (_, t, agreement, ordered) = tune(cases, points, analyses)
        print(f"best: {t}  agreement {agreement:.1%}  ordering {ordered}")
        return
    agreement, ordered, n, scores = evaluate(cases, points, analyses, rubric.TUNED)
    print(
        f"{len(cases)} answers to {n} questions; point-level agreement {agreement:.1%}; "
        f"ordering strong > partial > buzzword/off-topic holds on {ordered}/{n}"
    )
    print("| label | answers | mean score | min | max |")
    print("|---|---|---|---|---|")
    for label in ("strong", "partial", "buzzword", "off-topic"):
        values = [s for (slug, lab), v in scores.items() if lab == label for s in v]
        print(
            f"| {label} | {len(values)} | {statistics.mean(values):.2f} | {min(values):.2f} | {max(values):.2f} |"
        )
    timings.sort()
    print(
        f"grading one answer (warm): p50 {statistics.median(timings):.1f} ms, "
        f"p95 {timings[round(0.95 * (len(timings) - 1))]:.1f} ms, max {timings[-1]:.1f} ms"
    )


if __name__ == "__main__":
    main()
