"""An optional second opinion on rubric points the offline grader could not decide.

When `RUBRIC_JUDGE_URL` names an OpenAI-compatible endpoint (a vLLM on the GPU nodes, a
hosted API), each *unclear* point of a graded answer is put to a language model with a fixed
prompt and a fixed JSON schema. It never runs inside a request: `trainer.tasks.judge_attempt`
runs it on the Celery `default` queue after the offline verdicts are stored and shown, and
`apply_verdicts` folds the answers into the stored result (only points still unclear and not
decided by a check). Off when the URL is empty.

Plain Python apart from reading settings in `JudgeConfig.from_settings`: the stages take their
configuration as an argument, so they are testable against a fake endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

VERDICTS = ("covered", "not_covered", "contradicted")
# What a judge verdict becomes in the stored result.
AS_VERDICT = {"covered": "hit", "not_covered": "missed", "contradicted": "contradicted"}

SCHEMA = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": list(VERDICTS)},
        "evidence": {"type": "string"},
        "reason": {"type": "string"},
    },
    "required": ["verdict", "evidence", "reason"],
    "additionalProperties": False,
}

SYSTEM = (
    "You grade one rubric point of a candidate's answer in an LLM-inference engineering "
    "interview. Judge truth, not topic: the point is covered only if the answer states it "
    "correctly (its mechanism, and numbers within about 10% where the point needs numbers). "
    "If the answer states the point wrongly (a reversal, a negation, a wrong number, a known "
    "misconception) the verdict is contradicted. If the answer does not address it, "
    "not_covered. Quote the candidate's own words as evidence (empty if none). Reply with "
    "JSON only, matching the schema."
)


class JudgeError(RuntimeError):
    """The judge did not answer usefully (network, HTTP status, timeout, bad JSON)."""


@dataclass(frozen=True)
class JudgeConfig:
    url: str
    model: str
    api_key: str = ""
    timeout_s: float = 20.0

    @classmethod
    def from_settings(cls) -> JudgeConfig | None:
        """The configured judge, or None when RUBRIC_JUDGE_URL is empty (the default)."""
        from django.conf import settings

        if not settings.RUBRIC_JUDGE_URL:
            return None
        return cls(
            settings.RUBRIC_JUDGE_URL,
            settings.RUBRIC_JUDGE_MODEL,
            settings.RUBRIC_JUDGE_API_KEY,
            settings.RUBRIC_JUDGE_TIMEOUT_S,
        )


@dataclass(frozen=True)
class JudgeVerdict:
    index: int
    verdict: str  # one of VERDICTS
    evidence: str
    reason: str


def user_message(question_prompt: str, point: dict, answer: str) -> str:
    """The fixed prompt for one point: the question, the point with what makes it true and
    the usual wrong versions, and the answer."""
    lines = [f"Question:\n{question_prompt.strip()}", "", f"Rubric point:\n{point['text']}"]
    if point.get("claims"):
        lines += ["", "It is true when the answer says, in any words:"]
        lines += [f"- {c}" for c in point["claims"]]
    if point.get("contradictions"):
        lines += ["", "These are wrong versions of it (contradicted if the answer says them):"]
        lines += [f"- {c}" for c in point["contradictions"]]
    lines += ["", f"Candidate's answer:\n{answer.strip()}"]
    return "\n".join(lines)


def _client(config: JudgeConfig):
    from openai import OpenAI

    # Retries belong to the Celery task (its budget is visible and bounded there).
    return OpenAI(
        base_url=config.url,
        api_key=config.api_key or "unused",
        timeout=config.timeout_s,
        max_retries=0,
    )


def parse_reply(content: str | None, index: int) -> JudgeVerdict:
    """The model's JSON reply, checked against the schema."""
    try:
        data = json.loads(content or "")
    except json.JSONDecodeError as exc:
        raise JudgeError(f"the judge's reply is not JSON ({exc.msg})") from None
    if not isinstance(data, dict) or data.get("verdict") not in VERDICTS:
        raise JudgeError(f"the judge's reply does not follow the schema: {str(data)[:200]}")
    return JudgeVerdict(
        index,
        data["verdict"],
        str(data.get("evidence", ""))[:1000],
        str(data.get("reason", ""))[:500],
    )


def judge_point(
    config: JudgeConfig, question_prompt: str, point: dict, answer: str, *, client=None
):
    """Ask the judge about one point; raises JudgeError on any failure."""
    import openai

    client = client or _client(config)
    try:
        reply = client.chat.completions.create(
            model=config.model,
            temperature=0,
            messages=[
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": user_message(question_prompt, point, answer)},
            ],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "rubric_point_verdict", "schema": SCHEMA, "strict": True},
            },
        )
    except openai.OpenAIError as exc:  # connection, timeout, HTTP status
        raise JudgeError(f"{type(exc).__name__}: {exc}"[:300]) from None
    if not reply.choices:
        raise JudgeError("the judge returned no choices")
    return parse_reply(reply.choices[0].message.content, point["index"])


def pending_points(result: dict) -> list[dict]:
    """The points a judge should look at: unclear, not penalties, not decided by a check."""
    return [
        p
        for p in result.get("points", [])
        if p.get("verdict") == "unclear" and not p.get("penalty") and p.get("decided_by") != "check"
    ]


def judge_all(
    config: JudgeConfig, question_prompt: str, points: Sequence[dict], answer: str
) -> list[JudgeVerdict]:
    client = _client(config)
    return [judge_point(config, question_prompt, p, answer, client=client) for p in points]


def apply_verdicts(
    result: dict, verdicts: Sequence[JudgeVerdict], rescore: Callable[[dict], dict], model: str
) -> dict:
    """Fold judge verdicts into a stored result. Only points that are still unclear and not
    decided by a check change (a check answered meanwhile wins); returns the new result."""
    by_index = {v.index: v for v in verdicts}
    points = []
    for p in result.get("points", []):
        v = by_index.get(p.get("index"))
        if v is not None and p.get("verdict") == "unclear" and p.get("decided_by") != "check":
            p = p | {
                "verdict": AS_VERDICT[v.verdict],
                "decided_by": "judge",
                "reason": v.reason or p.get("reason", ""),
                "evidence": v.evidence or p.get("evidence", ""),
            }
        points.append(p)
    new = rescore(result | {"points": points})
    new["judge"] = {"status": "done", "model": model, "points": len(by_index)}
    return new
