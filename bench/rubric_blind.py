"""The blind evaluation set (issue 29): answers written from the prompt alone, labelled point
by point by someone who wrote neither the answers nor the rubric.

    tests/data/rubric_blind/answers/batch_N.yaml   the writers' files, verbatim
    tests/data/rubric_blind/labels/batch_N.yaml    the labellers' files, verbatim

Per published scenario/design question: a strong prose answer, the same content as terse
notes, a partial answer and a fluent wrong answer with its errors listed by the writer. The
labeller gives per answer the points covered, the points contradicted, the red flags
committed, an own score, and maps each listed error to the point it bears on.

`metrics()` gives every figure the issue's targets name, for one part (held out or tuning;
the split is bench.rubric_calibration.held_out, by question).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.rubric_calibration import credited, ece, pct, render
from trainer.grading.rubric.verify import DENIAL_REASON

ROOT = Path(__file__).resolve().parent.parent
BLIND = ROOT / "tests" / "data" / "rubric_blind"
LEVELS = ("strong", "terse", "partial", "wrong")


@dataclass
class BlindCase:
    slug: str
    label: str
    text: str
    writer: str
    labeller: str
    covered: set[int]
    contradicted: set[int]
    red_flags: set[int]
    score: float
    errors: list[dict] = field(default_factory=list)  # {error, point, real} (wrong answers)

    @property
    def expert(self) -> set[int]:
        """The points the labeller credits: covered ones and red flags committed (the shape
        bench.rubric_calibration.Case uses)."""
        return self.covered | self.red_flags


def load(root: Path = BLIND) -> list[BlindCase]:
    """Every labelled blind answer (an answer without a label is skipped, and so counted
    nowhere: the loader test checks that none is missing)."""
    texts: dict[tuple[str, str], tuple[str, str]] = {}
    for path in sorted((root / "answers").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for q in data["questions"]:
            for a in q["answers"]:
                texts[(q["slug"], a["label"])] = (a["text"], str(data.get("writer", path.stem)))
    cases = []
    for path in sorted((root / "labels").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        for q in data["questions"]:
            for a in q["answers"]:
                key = (q["slug"], a["label"])
                if key not in texts:
                    continue
                text, writer = texts[key]
                cases.append(
                    BlindCase(
                        q["slug"],
                        a["label"],
                        text,
                        writer,
                        str(data.get("labeller", path.stem)),
                        set(a.get("covered") or []),
                        set(a.get("contradicted") or []),
                        set(a.get("red_flags") or []),
                        float(a.get("score") or 0.0),
                        list(a.get("errors") or []),
                    )
                )
    return cases


def labeller_score(case: BlindCase, points) -> float:
    """The labeller's points as a score (covered weight, less red flags, over the
    earnable weight): the same formula the grader's score uses."""
    earnable = sum(p.weight for p in points if not p.penalty) or 1.0
    earned = sum(p.weight for i, p in enumerate(points) if i in case.covered and not p.penalty)
    lost = sum(p.weight for i, p in enumerate(points) if i in case.red_flags and p.penalty)
    return max(0.0, min(1.0, (earned - lost) / earnable))


def _surfaced(p) -> bool:
    """An error on this point reaches the learner: stated wrongly, or a check offered."""
    return p.verdict == "contradicted" or (p.verdict == "unclear" and p.check is not None)


def metrics(cases: Sequence[BlindCase], points, results) -> dict:
    agree = total = 0
    scores: dict[str, list[float]] = {lab: [] for lab in LEVELS}
    labeller: dict[str, list[float]] = {lab: [] for lab in LEVELS}
    gap: dict[str, list[float]] = {lab: [] for lab in LEVELS}
    by_q: dict[str, dict[str, float]] = {}
    strong_pts = strong_contra = strong_flags = 0
    errors = surfaced = 0
    wrong_contra = wrong_contra_right = 0
    denied = denied_right = 0
    hits = estimated = 0
    calib: list[tuple[float, bool]] = []  # (estimate, labeller covers it), ordinary points
    for case, result in zip(cases, results, strict=True):
        pts = points[case.slug]
        lab = case.label
        for p in result.points:
            expert = p.index in case.expert
            agree += credited(p) == expert
            total += 1
            if not p.penalty:
                calib.append((float(p.estimate or 0.0), p.index in case.covered))
                hits += p.verdict == "hit"
                estimated += p.verdict == "unclear" and p.estimate >= 0.5
            if p.verdict == "contradicted" and p.reason.startswith(DENIAL_REASON):
                denied += 1
                denied_right += p.index in case.contradicted
        if lab in ("strong", "terse"):
            ordinary = [p for p in result.points if not p.penalty]
            strong_pts += len(ordinary)
            strong_contra += sum(p.verdict == "contradicted" for p in ordinary)
            strong_flags += sum(p.penalty and p.verdict == "hit" for p in result.points)
        if lab == "wrong":
            mapped = {e.get("point") for e in case.errors if e.get("real", True)}
            for e in case.errors:
                if not e.get("real", True):
                    continue
                errors += 1
                i = e.get("point")
                if i is not None and 0 <= i < len(result.points):
                    surfaced += _surfaced(result.points[i])
            for p in result.points:
                if p.verdict == "contradicted":
                    wrong_contra += 1
                    wrong_contra_right += p.index in case.contradicted or p.index in mapped
        if lab in scores:
            scores[lab].append(result.score)
            mine = labeller_score(case, pts)
            labeller[lab].append(mine)
            gap[lab].append(result.score - mine)
            by_q.setdefault(case.slug, {})[lab] = result.score
    complete = [q for q in by_q.values() if all(lab in q for lab in LEVELS)]
    ordered = sum(min(q["strong"], q["terse"]) > q["partial"] > q["wrong"] for q in complete)
    mean = {lab: statistics.mean(v) if v else float("nan") for lab, v in scores.items()}
    return {
        "questions": len(by_q),
        "answers": len(cases),
        "agreement": agree / total if total else float("nan"),
        "mean": mean,
        "labeller": {lab: statistics.mean(v) if v else float("nan") for lab, v in labeller.items()},
        "gap": {lab: statistics.mean(v) if v else float("nan") for lab, v in gap.items()},
        "count": {lab: len(v) for lab, v in scores.items()},
        "ordered": ordered,
        "ordered_of": len(complete),
        "strong_points": strong_pts,
        "strong_contradicted": strong_contra,
        "strong_flags": strong_flags,
        "errors": errors,
        "surfaced": surfaced,
        "wrong_contradicted": wrong_contra,
        "wrong_contradicted_right": wrong_contra_right,
        "denied": denied,
        "denied_right": denied_right,
        "hits": hits,
        "estimated": estimated,
        "ece": ece(calib),
    }


def table(parts: dict[str, dict]) -> list[str]:
    """The blind figures, one column per part, with the issue's targets."""
    rows = [
        ("questions / answers", lambda m: f"{m['questions']} / {m['answers']}", ""),
    ]
    targets = {"strong": "≥ 0.70", "terse": "≥ 0.60", "partial": "between", "wrong": "≤ 0.20"}
    for lab in LEVELS:
        rows.append(
            (
                f"mean score: {lab} (labeller's own)",
                lambda m, lab=lab: (
                    f"{m['mean'][lab]:.2f} ({m['labeller'][lab]:.2f}, n={m['count'][lab]})"
                ),
                targets[lab] + (" and within 0.15" if lab in ("strong", "terse") else ""),
            )
        )
    rows += [
        (
            "min(strong, terse) > partial > wrong",
            lambda m: pct(m["ordered"], m["ordered_of"]),
            "≥ 90%",
        ),
        (
            "contradicted on strong/terse points",
            lambda m: pct(m["strong_contradicted"], m["strong_points"]),
            "≤ 2%",
        ),
        ("red flags raised on strong/terse", lambda m: str(m["strong_flags"]), "0"),
        (
            "wrong answers: listed errors surfaced",
            lambda m: pct(m["surfaced"], m["errors"]),
            "≥ 60%",
        ),
        (
            "wrong answers: contradicted verdicts right",
            lambda m: pct(m["wrong_contradicted_right"], m["wrong_contradicted"]),
            "≥ 90%",
        ),
        (
            "negation rule: denials the labeller marks contradicted",
            lambda m: pct(m["denied_right"], m["denied"]),
            "≥ 95%",
        ),
        ("point agreement", lambda m: f"{m['agreement']:.1%}", "≥ 85%"),
        ("ECE of estimate (vs the labeller's covered)", lambda m: f"{m['ece']:.3f}", ""),
        (
            "credited points: verified / estimated",
            lambda m: f"{m['hits']} / {m['estimated']}",
            "",
        ),
    ]
    return render(parts, rows)


def summary(m: dict) -> str:
    return (
        f"{m['questions']} questions, {m['answers']} answers: strong {m['mean']['strong']:.2f}, "
        f"terse {m['mean']['terse']:.2f}, partial {m['mean']['partial']:.2f}, wrong "
        f"{m['mean']['wrong']:.2f}; ordered {pct(m['ordered'], m['ordered_of'])}; contradicted "
        f"on strong/terse {pct(m['strong_contradicted'], m['strong_points'])}; flags "
        f"{m['strong_flags']}; errors surfaced {pct(m['surfaced'], m['errors'])}; agreement "
        f"{m['agreement']:.1%}"
    )
