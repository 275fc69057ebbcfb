"""The held-out input set (tests/data/arithmetic_inputs.yaml): answers as people type them.

Each case is parsed and graded exactly as the practice page does (parse_answer, then
grade_step on a one-step problem). The set was written before the parser changes and is
not tuned on, so it is scored, not required case by case: the test fails below FLOOR, and
`python -m tests.trainer.test_arithmetic_inputs` prints every miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from questions import problems
from trainer.grading.arithmetic import AnswerError, Chain, grade_step, parse_answer

CASES = Path(__file__).resolve().parent.parent / "data" / "arithmetic_inputs.yaml"
FLOOR = 0.95  # share of the set graded as a fair grader would


@dataclass(frozen=True)
class Outcome:
    about: str
    unit: str
    text: str
    wanted: str
    got: str
    detail: str


def _step_problem(step: dict) -> problems.Problem:
    unit = step["unit"]  # `expected` is a number in the step's unit
    expression = f"({step['expected']}) * ({unit})" if unit else str(step["expected"])
    spec = {"name": "answer", "prompt": "p", "expression": expression, "unit": unit}
    if step.get("integer"):
        spec["integer"] = step["integer"]
    return problems.from_dict({"parameters": {"one": {"value": 1}}, "steps": [spec]})


def grade_text(problem: problems.Problem, text: str) -> tuple[str, str]:
    step = problem.steps[0]
    try:
        value = parse_answer(text, step.unit)
    except AnswerError as exc:
        return "unreadable", str(exc)
    result = grade_step(Chain(problem, {"one": 1}), step.name, value)
    return ("correct" if result.verdict == "correct" else "wrong"), result.feedback


def outcomes() -> list[Outcome]:
    data = yaml.safe_load(CASES.read_text(encoding="utf-8"))
    found = []
    for step in data["steps"]:
        problem = _step_problem(step)
        for answer in step["answers"]:
            got, detail = grade_text(problem, answer["text"])
            found.append(
                Outcome(step["about"], step["unit"], answer["text"], answer["verdict"], got, detail)
            )
    return found


def test_the_held_out_inputs_are_graded_as_people_mean_them():
    results = outcomes()
    misses = [o for o in results if o.got != o.wanted]
    share = 1 - len(misses) / len(results)
    assert share >= FLOOR, "\n".join(
        f"{o.about} [{o.unit}]: {o.text!r} wanted {o.wanted}, got {o.got}: {o.detail}"
        for o in misses
    )


if __name__ == "__main__":
    results = outcomes()
    misses = [o for o in results if o.got != o.wanted]
    for o in misses:
        print(f"MISS {o.about} [{o.unit}]: {o.text!r} wanted {o.wanted}, got {o.got}: {o.detail}")
    print(f"{len(results) - len(misses)}/{len(results)} graded as wanted")
