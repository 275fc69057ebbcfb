"""Bank ⇄ database: upsert validated bank files by slug; export the database back to YAML.

The canonical form of a question is what `questions.bank.QuestionIn` dumps, so
"unchanged" means the database already holds exactly what the file says, and
load → export → load is a fixed point.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction
from django.db.models import Model

from questions import bank as bank_files
from questions import problems, rubric_points
from questions.models import (
    Loop,
    LoopItem,
    Misconception,
    Problem,
    Question,
    RubricPoint,
    Step,
    Topic,
)

QUESTION_FIELDS = (
    "kind",
    "title",
    "difficulty",
    "competencies",
    "status",
    "prompt",
    "model_answer",
    "related_labs",
)


# --- database → canonical dicts --------------------------------------------------------------


def question_dict(question: Question) -> dict[str, Any]:
    data: dict[str, Any] = {"slug": question.slug}
    data.update({name: getattr(question, name) for name in QUESTION_FIELDS})
    data["follow_ups"] = [
        {"prompt": f["prompt"], "rubric": [_bank_point(p) for p in f["rubric"]]}
        for f in question.follow_up_items()
    ]
    data["variables"] = question.variables or {}
    data["rubric"] = [_bank_point(p.point_dict()) for p in question.rubric.all()]
    data["sources"] = question.sources
    problem = getattr(question, "problem", None)
    if problem is not None:
        data["problem"] = {
            "parameters": problem.parameters,
            "condition": problem.condition,
            "steps": [_step_dict(s) for s in problem.steps.all()],
        }
    return _canonical(bank_files.QuestionIn, data)


def resolved_expects(question: Question, raw_expects: list) -> list[dict[str, Any]]:
    """`expects` entries as authored, evaluated against the question's variables to
    {"value", "unit", "tol" (fraction), "label"}; raises ExpressionError if one is wrong."""
    scope = question.variable_scope()
    return [rubric_points.resolve_number(e, scope) for e in raw_expects]


def question_points(question: Question) -> list[dict[str, Any]]:
    """as_point() of every rubric point in order, the variables resolved once."""
    scope = question.variable_scope()
    return [rubric_points.resolve_point(p.point_dict(), scope) for p in question.rubric.all()]


def _bank_point(point: dict[str, Any]) -> dict[str, Any]:
    """A normalised point dict as the bank model takes it (no check: None, not {})."""
    return {**point, "check": point["check"] or None}


def _point_row(point: bank_files.RubricPointIn) -> dict[str, Any]:
    """A RubricPoint row's fields from a bank point (metadata in its canonical bank form)."""
    authored = point.model_dump(mode="json", exclude_defaults=True)
    row = point.model_dump(mode="json", exclude={"check", "expects"})
    row["expects"] = authored.get("expects", [])
    row["check_spec"] = authored.get("check", {})
    return row


def _follow_up_row(follow_up: bank_files.FollowUpIn) -> dict[str, Any]:
    """A stored follow-up: {"prompt", "rubric": [points as the bank writes them]}."""
    return {
        "prompt": follow_up.prompt,
        "rubric": [p.model_dump(mode="json", exclude_defaults=True) for p in follow_up.rubric],
    }


def _step_dict(step: Step) -> dict[str, Any]:
    return {
        "name": step.name,
        "prompt": step.prompt,
        "expression": step.expression,
        "unit": step.unit,
        "rtol": step.rtol,
        "atol": step.atol,
        "hints": step.hints,
        "misconceptions": [
            {"expression": m.expression, "feedback": m.feedback} for m in step.misconceptions.all()
        ],
        "explanation": step.explanation,
        "integer": step.integer or None,
    }


def problem_spec(problem: Problem) -> problems.Problem:
    """The plain-data problem (questions.problems) of a saved Problem row."""
    return problems.from_dict(
        {
            "parameters": problem.parameters,
            "condition": problem.condition,
            "steps": [_step_dict(s) for s in problem.steps.prefetch_related("misconceptions")],
        }
    )


def _canonical(model: type, data: Any) -> dict[str, Any]:
    parsed = data if not isinstance(data, dict) else model.model_validate(data)
    return parsed.model_dump(mode="json", exclude_defaults=True)


def topic_file_dict(topic: Topic) -> dict[str, Any]:
    questions = topic.questions.order_by("order", "slug").prefetch_related(
        "rubric", "problem__steps__misconceptions"
    )
    return {
        "topic": _canonical(
            bank_files.TopicIn,
            {
                "slug": topic.slug,
                "title": topic.title,
                "summary": topic.summary,
                "order": topic.order,
            },
        ),
        "questions": [question_dict(q) for q in questions],
    }


def loops_file_dict() -> dict[str, Any]:
    loops = []
    for loop in Loop.objects.prefetch_related("items__question"):
        loops.append(
            _canonical(
                bank_files.LoopIn,
                {
                    "slug": loop.slug,
                    "title": loop.title,
                    "description": loop.description,
                    "items": [
                        {"question": i.question.slug, "minutes": i.minutes}
                        for i in loop.items.all()
                    ],
                },
            )
        )
    return {"loops": loops}


# --- YAML output -----------------------------------------------------------------------------


class _BankDumper(yaml.SafeDumper):
    pass


def _str_representer(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    if style:
        value = value if value.endswith("\n") else value + "\n"
        # YAML cannot keep trailing spaces on block lines; strip them so `|` always applies.
        value = "\n".join(line.rstrip() for line in value.split("\n"))
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BankDumper.add_representer(str, _str_representer)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_BankDumper, sort_keys=False, allow_unicode=True, width=100)


def bank_export(directory: Path, topics: list[Topic] | None = None) -> list[Path]:
    """Write one file per topic (and loops.yaml when exporting everything)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for topic in topics if topics is not None else Topic.objects.all():
        path = directory / f"{topic.slug}.yaml"
        path.write_text(dump_yaml(topic_file_dict(topic)), encoding="utf-8")
        written.append(path)
    if topics is None and Loop.objects.exists():
        path = directory / bank_files.LOOPS_FILE
        path.write_text(dump_yaml(loops_file_dict()), encoding="utf-8")
        written.append(path)
    return written


# --- canonical dicts → database --------------------------------------------------------------


def _sync_ordered(existing: list[Model], rows: list[dict], create) -> list[Model]:
    """Update rows in place by position, create the missing, delete the extra."""
    kept = []
    for order, row in enumerate(rows):
        if order < len(existing):
            obj = existing[order]
            for name, value in row.items():
                setattr(obj, name, value)
            obj.order = order
            obj.save()
        else:
            obj = create(order=order, **row)
        kept.append(obj)
    for obj in existing[len(rows) :]:
        obj.delete()
    return kept


def _question_apply(question: Question, data: dict[str, Any]) -> None:
    full = bank_files.QuestionIn.model_validate(data)
    for name in QUESTION_FIELDS:
        setattr(question, name, getattr(full, name))
    question.sources = [s.model_dump(mode="json", exclude_defaults=True) for s in full.sources]
    question.follow_ups = [_follow_up_row(f) for f in full.follow_ups]
    question.variables = {n: p.spec() for n, p in full.variables.items()}
    question.save()
    _sync_ordered(
        list(question.rubric.all()),
        [_point_row(p) for p in full.rubric],
        lambda **kw: RubricPoint.objects.create(question=question, **kw),
    )
    if full.problem is None:
        Problem.objects.filter(question=question).delete()
        return
    problem, _ = Problem.objects.get_or_create(question=question)
    problem.parameters = {n: p.spec() for n, p in full.problem.parameters.items()}
    problem.condition = full.problem.condition
    problem.save()
    step_rows = []
    for s in full.problem.steps:
        row = s.model_dump(exclude={"misconceptions"})
        row["expression"] = str(row["expression"])
        row["integer"] = row["integer"] or ""
        step_rows.append(row)
    existing = list(problem.steps.all())
    if [s.name for s in existing[: len(step_rows)]] != [r["name"] for r in step_rows][
        : len(existing)
    ]:
        # Names move between rows (a step dropped or reordered): free them first, or the
        # in-place update trips the unique (problem, name) constraint.
        for step in existing:
            step.name = f"~{step.pk}"
        Step.objects.bulk_update(existing, ["name"])
    steps = _sync_ordered(
        existing,
        step_rows,
        lambda **kw: Step.objects.create(problem=problem, **kw),
    )
    for step, s in zip(steps, full.problem.steps, strict=True):
        _sync_ordered(
            list(step.misconceptions.all()),
            [{"expression": str(m.expression), "feedback": m.feedback} for m in s.misconceptions],
            lambda step=step, **kw: Misconception.objects.create(step=step, **kw),
        )


def loop_questions_missing(bank: bank_files.Bank) -> list[bank_files.BankError]:
    """Loop items naming a question that is neither in `bank` nor in the database (read_bank
    checks the bank alone, and cannot when loops.yaml is loaded on its own)."""
    wanted = {item.question for loop in bank.loops for item in loop.items}
    known = {q.slug for q in bank.questions}
    known |= set(Question.objects.filter(slug__in=wanted - known).values_list("slug", flat=True))
    return [
        bank_files.BankError(
            bank_files.LOOPS_FILE,
            f"loops[{i}] ({loop.slug}) > items[{j}] > question",
            f"no question with slug {item.question!r} in the bank or the database",
        )
        for i, loop in enumerate(bank.loops)
        for j, item in enumerate(loop.items)
        if item.question not in known
    ]


@transaction.atomic
def bank_load(bank: bank_files.Bank) -> Counter:
    """Upsert a validated bank; never deletes questions (learners' attempts point at them).

    Returns counts keyed like "question created", "question unchanged", "loop updated".
    """
    if bank.errors:
        raise ValueError("refusing to load a bank with errors")
    counts: Counter = Counter()
    for topic_file in bank.topics:
        t = topic_file.topic
        topic, created = Topic.objects.get_or_create(
            slug=t.slug, defaults={"title": t.title, "summary": t.summary, "order": t.order}
        )
        if not created and (topic.title, topic.summary, topic.order) != (
            t.title,
            t.summary,
            t.order,
        ):
            topic.title, topic.summary, topic.order = t.title, t.summary, t.order
            topic.save()
            counts["topic updated"] += 1
        else:
            counts["topic created" if created else "topic unchanged"] += 1
        for order, q in enumerate(topic_file.questions):
            counts[f"question {_question_upsert(topic, order, q)}"] += 1
    for order, loop_in in enumerate(bank.loops):
        counts[f"loop {_loop_upsert(order, loop_in)}"] += 1
    return counts


def _question_upsert(topic: Topic, order: int, q: bank_files.QuestionIn) -> str:
    incoming = q.model_dump(mode="json", exclude_defaults=True)
    question = Question.objects.filter(slug=q.slug).first()
    same_place = question is not None and (question.topic_id, question.order) == (topic.id, order)
    if same_place and question_dict(question) == incoming:
        return "unchanged"
    state = "updated" if question is not None else "created"
    question = question or Question(slug=q.slug)
    question.topic, question.order = topic, order
    _question_apply(question, incoming)
    return state


def _loop_upsert(order: int, loop_in: bank_files.LoopIn) -> str:
    incoming = loop_in.model_dump(mode="json", exclude_defaults=True)
    loop = Loop.objects.filter(slug=loop_in.slug).first()
    if loop is not None and loop.order == order:
        current = next(d for d in loops_file_dict()["loops"] if d["slug"] == loop.slug)
        if current == incoming:
            return "unchanged"
    state = "updated" if loop is not None else "created"
    loop = loop or Loop(slug=loop_in.slug)
    loop.title, loop.description, loop.order = loop_in.title, loop_in.description, order
    loop.save()
    questions = {
        q.slug: q for q in Question.objects.filter(slug__in=[i.question for i in loop_in.items])
    }
    _sync_ordered(
        list(loop.items.all()),
        [{"question": questions[i.question], "minutes": i.minutes} for i in loop_in.items],
        lambda **kw: LoopItem.objects.create(loop=loop, **kw),
    )
    return state
