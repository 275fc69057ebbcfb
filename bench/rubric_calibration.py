"""The rubric grader vs labelled answers: the blind set (tests/data/rubric_blind/, the
headline: answers written from the prompt alone, labelled by someone else) and the old set
(tests/data/rubric_eval/, written beside the claims; tuning data), each split by question.

    python -m bench.rubric_calibration            # blind held-out | blind tuning | old set
    python -m bench.rubric_calibration --tune     # tune on the TUNING parts, write tuned.json
    python -m bench.rubric_calibration --refit    # the estimate model only, thresholds kept

The split is by question, fixed by the slug: a question is held out iff
sha256(slug) % 10 < 4, so questions added later fall into a part without re-tuning. Tuning
(thresholds by grid search, then the logistic `estimate` model) reads the tuning part only;
the held-out figures are the ones to quote (docs/BENCHMARKS.md).

Point agreement = share of (answer, point) pairs where the grader's credit (hit, or unclear
with estimate >= 0.5; red flags: hit) equals the expert's. Ordering = strong > partial >
max(on-topic-wrong, off) in mean score, per question. ECE = expected calibration error of
`estimate` over non-penalty points (10 bins). Adversarial contradictions caught = share of
the points an adversarial answer states wrongly that get the verdict `contradicted`.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import os
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "rubric_eval"
LEVELS = ("strong", "partial", "on-topic-wrong", "off")
LABELS = (*LEVELS, "adversarial", "buzzword")


def bucket(slug: str, n: int, salt: str = "") -> int:
    """A question's fixed bucket of n, from its slug (salted for a split of its own)."""
    return int(hashlib.sha256((salt + slug).encode()).hexdigest(), 16) % n


def held_out(slug: str) -> bool:
    """Whether a question belongs to the held-out part (fixed by its slug)."""
    return bucket(slug, 10) < 4


FOLDS = 2


def fold(slug: str) -> int:
    """Cross-fitting: the estimate model is fitted on readings of tuning answers by a reader
    that never saw their question (trained on the other fold)."""
    return bucket(slug, FOLDS, "fold:")


def fold_path(f: int) -> Path:
    return ROOT / "var" / f"rubric_reader_fold{f}.safetensors"


@dataclass
class Case:
    slug: str
    label: str
    kind: str
    text: str
    expert: set[int]
    contradicts: set[int]


def _setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainer.settings")


def bank_points() -> tuple[dict[str, list], dict[str, str]]:
    """Every bank question's rubric as grader Points (expects evaluated), and its prompt."""
    _setup()
    from questions import rubric_points
    from questions.bank import read_bank
    from trainer.grading.rubric import Point

    points, prompts = {}, {}
    for q in read_bank().questions:
        variables = {
            k: v.model_dump(exclude_none=True) if hasattr(v, "model_dump") else v
            for k, v in (getattr(q, "variables", None) or {}).items()
        }
        scope = rubric_points.variables_scope(variables)
        rows = []
        for p in q.rubric:
            raw = p.model_dump(exclude_none=True)
            rows.append(Point.from_dict(rubric_points.resolve_point(raw, scope)))
        points[q.slug], prompts[q.slug] = rows, q.prompt
    return points, prompts


def load_cases(data: Path = DATA) -> list[Case]:
    cases = []
    for path in sorted(data.glob("*.yaml")):
        for q in yaml.safe_load(path.read_text())["questions"]:
            for a in q["answers"]:
                cases.append(
                    Case(
                        q["slug"],
                        a["label"],
                        a.get("kind", ""),
                        a["text"],
                        set(a.get("points") or []),
                        set(a.get("contradicts") or []),
                    )
                )
    return cases


class EmbeddingCache:
    """--cache FILE: sentence vectors kept between bench runs (tuning iterations only; the
    timing always uses the model)."""

    def __init__(self, path: Path):
        import pickle

        from trainer.grading.rubric import encoder

        self.path, self.encoder, self.original = path, encoder, encoder.embed
        self.vectors = pickle.loads(path.read_bytes()) if path.exists() else {}

    def embed(self, texts):
        import numpy as np

        fresh = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        if fresh:
            self.vectors.update(zip(fresh, self.original(fresh), strict=True))
        if not texts:
            return self.original(texts)
        return np.stack([self.vectors[t] for t in texts])

    def __enter__(self):
        self.encoder.embed = self.embed
        return self

    def __exit__(self, *exc):
        import pickle

        self.encoder.embed = self.original
        self.path.write_bytes(pickle.dumps(self.vectors))


def analyse(cases: Sequence[Case], points, prompts) -> list:
    """The expensive, threshold-free part (sentence embeddings), once per answer."""
    from trainer.grading.rubric import retrieve

    return [retrieve.retrieve(c.text, points[c.slug], prompts[c.slug]) for c in cases]


def expert_score(case: Case, points) -> float:
    earnable = sum(p.weight for p in points if not p.penalty) or 1.0
    earned = sum(p.weight for i, p in enumerate(points) if i in case.expert and not p.penalty)
    lost = sum(p.weight for i, p in enumerate(points) if i in case.expert and p.penalty)
    return max(0.0, min(1.0, (earned - lost) / earnable))


def credited(p) -> bool:
    if p.penalty:
        return p.verdict == "hit"
    return p.verdict == "hit" or (p.verdict == "unclear" and p.estimate >= 0.5)


def ece(pairs: Sequence[tuple[float, bool]], bins: int = 10) -> float:
    if not pairs:
        return 0.0
    total = 0.0
    for b in range(bins):
        inside = [
            (e, y)
            for e, y in pairs
            if b / bins <= e < (b + 1) / bins or (b == bins - 1 and e == 1.0)
        ]
        if inside:
            mean_e = statistics.mean(e for e, _ in inside)
            mean_y = statistics.mean(float(y) for _, y in inside)
            total += len(inside) / len(pairs) * abs(mean_e - mean_y)
    return total


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float:
    from scipy.stats import spearmanr

    if len(xs) < 3:
        return float("nan")
    return float(spearmanr(xs, ys).statistic)


def results_of(cases, points, retrievals, params):
    from trainer.grading.rubric import evaluate

    return [evaluate(r, points[c.slug], params) for c, r in zip(cases, retrievals, strict=True)]


def metrics(cases, points, results) -> dict:
    """Every figure of the table, for one part."""
    agree = total = 0
    calib, caught, adversarial = [], 0, 0
    hits = estimated = 0
    strong_points = strong_contra = 0
    scores: dict[tuple[str, str], list[float]] = {}
    grader_totals, expert_totals = [], []
    for case, result in zip(cases, results, strict=True):
        for p in result.points:
            expert = p.index in case.expert
            agree += credited(p) == expert
            total += 1
            if not p.penalty:
                calib.append((p.estimate, expert))
                hits += p.verdict == "hit"
                estimated += p.verdict == "unclear" and p.estimate >= 0.5
        if case.label == "strong":
            ordinary = [p for p in result.points if not p.penalty]
            strong_points += len(ordinary)
            strong_contra += sum(p.verdict == "contradicted" for p in ordinary)
        for i in case.contradicts if case.label == "adversarial" else ():
            adversarial += 1
            caught += result.points[i].verdict == "contradicted"
        scores.setdefault((case.slug, case.label), []).append(result.score)
        grader_totals.append(result.score)
        expert_totals.append(expert_score(case, points[case.slug]))
    slugs = sorted({c.slug for c in cases})
    ordered = complete = 0
    for slug in slugs:
        if not all((slug, lab) in scores for lab in LEVELS):
            continue
        complete += 1
        m = {lab: statistics.mean(scores[(slug, lab)]) for lab in LEVELS}
        ordered += m["strong"] > m["partial"] > max(m["on-topic-wrong"], m["off"])
    by_label = {
        lab: [s for (_, label), v in scores.items() if label == lab for s in v] for lab in LABELS
    }
    return {
        "questions": len(slugs),
        "answers": len(cases),
        "agreement": agree / total if total else float("nan"),
        "ordered": ordered,
        "ordered_of": complete,
        "mean": {lab: statistics.mean(v) if v else float("nan") for lab, v in by_label.items()},
        "count": {lab: len(v) for lab, v in by_label.items()},
        "spearman": spearman(grader_totals, expert_totals),
        "ece": ece(calib),
        "caught": caught,
        "contradictions": adversarial,
        "hits": hits,
        "estimated": estimated,
        "strong_points": strong_points,
        "strong_contradicted": strong_contra,
    }


def objective(m: dict) -> float:
    """What tuning maximises on the tuning part: agreement, ordering and low wrong-answer scores."""
    order = m["ordered"] / m["ordered_of"] if m["ordered_of"] else 0.0
    caught = m["caught"] / m["contradictions"] if m["contradictions"] else 0.0
    wrong = max(0.0, m["mean"]["on-topic-wrong"] - 0.2) + max(0.0, m["mean"]["off"] - 0.1)
    return m["agreement"] + 0.25 * order + 0.2 * caught - 0.5 * wrong


def analyse_cross_fit(cases: Sequence[Case], points, prompts) -> list | None:
    """Tuning answers analysed by the fold reader that never saw their question
    (bench.rubric_reader --fold N), so the estimate model is fitted on readings as unseen
    answers get them; None when the fold readers are not there."""
    from trainer.grading.rubric import reader

    paths = [fold_path(f) for f in range(FOLDS)]
    if not reader.available() or not all(p.exists() for p in paths):
        return None
    out: list = [None] * len(cases)
    try:
        for f, path in enumerate(paths):
            reader.use(reader.load(path))
            idx = [j for j, c in enumerate(cases) if fold(c.slug) == f]
            for j, r in zip(idx, analyse([cases[j] for j in idx], points, prompts), strict=True):
                out[j] = r
    finally:
        reader.use(None)
    return out


READER_FLOORS = (0.0, 0.15, 0.25, 0.35, 0.45, 0.55)


def fit_reader_floor(old, blind, points, retrievals, log=print):
    """The reader floor (and its estimate model) that does best on the tuning answers."""
    from bench import rubric_blind
    from trainer.grading.rubric import params

    base = params.load().thresholds
    fit_cases = [*old, *map(as_case, blind)]
    best = None
    for floor in READER_FLOORS:
        t = dataclasses.replace(base, reader_floor=floor)
        p = params.Params(t, fit_calibration(fit_cases, points, retrievals, t))
        m = metrics(old, points, results_of(old, points, retrievals[: len(old)], p))
        bm = rubric_blind.metrics(
            blind, points, results_of(blind, points, retrievals[len(old) :], p)
        )
        score = objective(m) + 2.0 * blind_objective(bm)
        log(
            f"  reader_floor {floor}: objective {score:.3f}; blind tuning {rubric_blind.summary(bm)}"
        )
        if best is None or score > best[0]:
            best = (score, p)
    return best[1]


def fit_calibration(cases, points, retrievals, thresholds):
    """The logistic estimate model fitted on these (tuning) answers' stage features."""
    from sklearn.linear_model import LogisticRegression

    from trainer.grading.rubric import estimate, params, verify

    xs, ys = [], []
    rates: dict[str, list[int]] = {"contradicted": [], "stuffed": []}
    for case, r in zip(cases, retrievals, strict=True):
        rubric = points[case.slug]
        decisions = verify.decide_all(rubric, r, thresholds)
        context = estimate.answer_context(decisions, [q.penalty for q in rubric])
        for i, point in enumerate(rubric):
            if point.penalty:
                continue
            d = decisions[i]
            credited_by_expert = int(i in case.expert)
            kind = estimate.kind(d)
            if kind != "model":
                rates[kind].append(credited_by_expert)
                continue
            xs.append(estimate.features(d, bool(point.key_terms), context))
            ys.append(credited_by_expert)
    model = LogisticRegression(C=1.0, max_iter=2000).fit(xs, ys)

    def rate(values: list[int]) -> float:  # Laplace-smoothed share credited
        return round((sum(values) + 1) / (len(values) + 2), 4)

    return params.Calibration(
        estimate.FEATURES,
        tuple(round(float(c), 4) for c in model.coef_[0]),
        round(float(model.intercept_[0]), 4),
        rate(rates["contradicted"]),
        rate(rates["stuffed"]),
    )


GRID = {
    "retrieve": [0.30, 0.35, 0.40, 0.45],
    "verify_floor": [0.40, 0.45, 0.50, 0.55, 0.60],
    "margin": [-0.05, 0.0, 0.03, 0.06],
    "contra_floor": [0.5, 0.55, 0.6, 0.7],
    "contra_margin": [0.0, 0.04, 0.08, 0.12],
    "key_share": [0.34, 0.5, 0.75, 1.0],
    "plain_share": [0.2, 0.3, 0.4, 0.5],
    "stuffed": [0.2, 0.25, 0.3, 0.4, 1.01],
    "penalty_sim": [0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75],
    "off_topic": [0.3, 0.35, 0.4],
}


def blind_objective(m: dict) -> float:
    """What tuning maximises on the blind tuning part: agreement and ordering, strong and
    terse answers near the labeller, wrong ones low, no contradiction of a strong answer."""
    order = m["ordered"] / m["ordered_of"] if m["ordered_of"] else 0.0
    contra = m["strong_contradicted"] / m["strong_points"] if m["strong_points"] else 0.0
    gap = abs(m["gap"]["strong"]) + abs(m["gap"]["terse"])
    wrong = max(0.0, m["mean"]["wrong"] - 0.2)
    return m["agreement"] + 0.25 * order - 2.0 * contra - 0.5 * gap - 0.5 * wrong


def tune(cases, points, retrievals, rounds: int = 2, log=print, blind=None):
    """Coordinate descent over GRID on the given (tuning) answers, the estimate model
    refitted for each candidate (on both sets' tuning answers); `blind` = (cases,
    retrievals) of the blind tuning part, which joins the objective. Returns the best Params
    and its metrics on the old set."""
    from bench import rubric_blind
    from trainer.grading.rubric import params

    b_cases, b_retrievals = blind or ([], [])
    fit_cases = list(cases) + [as_case(c) for c in b_cases]
    fit_retrievals = list(retrievals) + list(b_retrievals)

    def run(t):
        p = params.Params(t, fit_calibration(fit_cases, points, fit_retrievals, t))
        m = metrics(cases, points, results_of(cases, points, retrievals, p))
        score = objective(m)
        if b_cases:
            bm = rubric_blind.metrics(b_cases, points, results_of(b_cases, points, b_retrievals, p))
            score += 2.0 * blind_objective(bm)
        return score, p, m

    best = run(params.load().thresholds)  # warm start from the last tuning
    for _ in range(rounds):
        for name, values in GRID.items():
            for value in values:
                t = dataclasses.replace(best[1].thresholds, **{name: value})
                if t.verify_floor < t.retrieve or t == best[1].thresholds:
                    continue
                candidate = run(t)
                if candidate[0] > best[0] + 1e-9:
                    best = candidate
            log(f"  {name} = {getattr(best[1].thresholds, name)}: {summary(best[2])}")
    return best[1], best[2]


def as_case(c) -> Case:
    return Case(c.slug, c.label, "", c.text, c.expert, c.contradicted)


def timings_ms(cases, points, prompts) -> list[float]:
    from trainer.grading import rubric

    out = []
    for c in cases:  # warm: rubric embeddings cached, as in a running server
        t = time.perf_counter()
        rubric.grade(c.text, points[c.slug], prompts[c.slug])
        out.append((time.perf_counter() - t) * 1000)
    return sorted(out)


def pct(a: int, b: int) -> str:
    return f"{a}/{b} ({a / b:.0%})" if b else "—"


def table(parts: dict[str, dict]) -> list[str]:
    rows = [
        ("questions / answers", lambda m: f"{m['questions']} / {m['answers']}", ""),
        ("point agreement", lambda m: f"{m['agreement']:.1%}", "≥ 83% (stretch 85%)"),
        (
            "strong > partial > max(wrong, off)",
            lambda m: pct(m["ordered"], m["ordered_of"]),
            "≥ 75%",
        ),
    ]
    for lab in LABELS:
        target = {"on-topic-wrong": "≤ 0.20", "off": "≤ 0.10"}.get(lab, "")
        rows.append(
            (
                f"mean score: {lab}",
                lambda m, lab=lab: f"{m['mean'][lab]:.2f} (n={m['count'][lab]})",
                target,
            )
        )
    rows += [
        ("Spearman with expert total", lambda m: f"{m['spearman']:.2f}", "≥ 0.80"),
        ("ECE of estimate", lambda m: f"{m['ece']:.3f}", "≤ 0.10"),
        (
            "adversarial contradictions caught",
            lambda m: pct(m["caught"], m["contradictions"]),
            "≥ 80%",
        ),
        (
            "contradicted on strong answers' points",
            lambda m: pct(m["strong_contradicted"], m["strong_points"]),
            "",
        ),
        (
            "credited points: verified (verify) / estimated",
            lambda m: f"{m['hits']} / {m['estimated']}",
            "",
        ),
    ]
    return render(parts, rows)


def render(parts: dict[str, dict], rows) -> list[str]:
    """A Markdown table: one row per (name, format, target), one column per part."""
    names = list(parts)
    out = ["| figure | " + " | ".join(names) + " | target |", "|---" * (len(names) + 2) + "|"]
    for name, fmt, target in rows:
        out.append(f"| {name} | " + " | ".join(fmt(parts[n]) for n in names) + f" | {target} |")
    return out


def summary(m: dict) -> str:
    return (
        f"{m['questions']} questions, {m['answers']} answers: agreement {m['agreement']:.1%}, "
        f"ordering {pct(m['ordered'], m['ordered_of'])}, on-topic-wrong "
        f"{m['mean']['on-topic-wrong']:.2f}, off {m['mean']['off']:.2f}, Spearman "
        f"{m['spearman']:.2f}, ECE {m['ece']:.3f}, caught {pct(m['caught'], m['contradictions'])}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--tune", action="store_true", help="tune on the tuning part and write tuned.json"
    )
    parser.add_argument(
        "--refit",
        action="store_true",
        help="refit only the estimate model on both sets' tuning parts (thresholds kept) and "
        "write tuned.json",
    )
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--cache", type=Path, help="keep sentence vectors in this file")
    parser.add_argument(
        "--part",
        choices=("both", "tuning"),
        default="both",
        help="'tuning' while developing: the held-out part is not graded at all",
    )
    args = parser.parse_args(argv)
    from bench import rubric_blind

    points, prompts = bank_points()
    cases = [c for c in load_cases() if c.slug in points]
    blind = [c for c in rubric_blind.load() if c.slug in points]
    from trainer.grading import rubric
    from trainer.grading.rubric import params

    rubric.model()
    tuning = [c for c in cases if not held_out(c.slug)]
    held = [c for c in cases if held_out(c.slug)]
    b_tuning = [c for c in blind if not held_out(c.slug)]
    b_held = [c for c in blind if held_out(c.slug)]
    with EmbeddingCache(args.cache) if args.cache else contextlib.nullcontext():
        tuning_r = analyse(tuning, points, prompts)
        b_tuning_r = analyse(b_tuning, points, prompts)
        if args.refit:
            crossed = analyse_cross_fit([*tuning, *map(as_case, b_tuning)], points, prompts)
            if crossed is not None:
                print("estimate fitted on cross-fitted readings (bench.rubric_reader --fold)")
                best = fit_reader_floor(tuning, b_tuning, points, crossed)
            else:
                t = params.load().thresholds
                fit = fit_calibration(
                    [*tuning, *map(as_case, b_tuning)], points, [*tuning_r, *b_tuning_r], t
                )
                best = params.Params(t, fit)
            params.TUNED_PATH.write_text(best.as_json())
            print(f"wrote {params.TUNED_PATH.relative_to(ROOT)} (estimate model refitted)")
            return
        if args.tune:
            best, m = tune(tuning, points, tuning_r, blind=(b_tuning, b_tuning_r))
            params.TUNED_PATH.write_text(best.as_json())
            print(f"wrote {params.TUNED_PATH.relative_to(ROOT)}; old tuning part: {summary(m)}")
            return
        both = args.part == "both"
        held_r = analyse(held, points, prompts) if both else []
        b_held_r = analyse(b_held, points, prompts) if both else []
    p = params.load()

    def blind_metrics(part, retrievals):
        return rubric_blind.metrics(part, points, results_of(part, points, retrievals, p))

    blind_parts = {"blind tuning": blind_metrics(b_tuning, b_tuning_r)}
    parts = {"old tuning": metrics(tuning, points, results_of(tuning, points, tuning_r, p))}
    if both:
        blind_parts = {"blind held-out": blind_metrics(b_held, b_held_r)} | blind_parts
        parts = {"old held-out": metrics(held, points, results_of(held, points, held_r, p))} | parts
        print("BLIND HELD-OUT: " + rubric_blind.summary(blind_parts["blind held-out"]))
    else:
        print("TUNING PARTS ONLY (the held-out part is not graded)")
    print("\n".join(rubric_blind.table(blind_parts)))
    print()
    print("The old set (written beside the claims; tuning data, reported for comparison):")
    print("\n".join(table(parts)))
    print("verified by check or judge: 0 offline (checks and the judge run after submission)")
    if not args.no_timing and both:
        t = timings_ms([*cases, *blind], points, prompts)
        print(
            f"grading one answer (warm, {len(t)} answers): p50 {statistics.median(t):.0f} ms, "
            f"p95 {t[round(0.95 * (len(t) - 1))]:.0f} ms, max {t[-1]:.0f} ms"
        )


if __name__ == "__main__":
    main()
