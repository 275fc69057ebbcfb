"""Grade a free-text answer point by point against a rubric, offline, and say how sure.

A pipeline of small pure stages (issue 19): split (sentences, clauses) -> retrieve (MiniLM
candidates per point) -> verify (key terms, claim vs contradiction margin, negation, pint
numbers) -> estimate (calibrated probability) -> score. Each point gets a verdict: hit
(verified), unclear (about it, neither verified nor refuted), contradicted (with the reason)
or missed. `rescore` recomputes a stored result after checks or a judge change verdicts.
"""

from trainer.grading.rubric.encoder import embed, model
from trainer.grading.rubric.grader import RubricGrader, evaluate, grade, points_of
from trainer.grading.rubric.point import GRADER_VERSION, Point, PointResult, RubricResult
from trainer.grading.rubric.score import rescore
from trainer.grading.rubric.split import restates, split_sentences

__all__ = [
    "GRADER_VERSION",
    "Point",
    "PointResult",
    "RubricGrader",
    "RubricResult",
    "embed",
    "evaluate",
    "grade",
    "model",
    "points_of",
    "rescore",
    "restates",
    "split_sentences",
]
