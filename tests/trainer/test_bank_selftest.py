"""Self-tests of the bank's arithmetic, for every problem and 50 seeds each:
the reference answers score 100%, every misconception triggers its own feedback and scores
below full, and an error-carried-forward chain earns follow-through credit."""

from __future__ import annotations

import pytest

from questions import problems
from questions.bank import _problem_dict, read_bank
from trainer.grading.arithmetic import Chain, depends_on, grade_step, misconception_text

SEEDS = range(50)
BANK = read_bank()
PROBLEMS = {
    q.slug: problems.from_dict(_problem_dict(q.problem)) for q in BANK.questions if q.problem
}


def test_the_bank_has_arithmetic_problems():
    assert len(PROBLEMS) >= 22


@pytest.mark.parametrize("slug", sorted(PROBLEMS))
def test_reference_answers_score_full_and_misconceptions_are_named(slug):
    problem = PROBLEMS[slug]
    for seed in SEEDS:
        variant = problems.draw_variant(problem, seed)
        reference = problems.solve(problem, variant.variables)
        chain = Chain(problem, variant.variables)
        for step in problem.steps:
            scope = {**variant.variables, **{k: v for k, v in reference.items() if k != step.name}}
            for index, (m, wrong) in enumerate(problems.misconception_values(step, scope)):
                result = grade_step(chain, step.name, wrong)
                assert (result.verdict, result.misconception) == ("misconception", index), (
                    f"{slug} seed {seed} step {step.name}: misconception {index} ({m.feedback!r}) "
                    f"graded {result.verdict}: {result.feedback}"
                )
                assert result.feedback == misconception_text(m, scope) and result.credit < 1
                assert "{" not in result.feedback, (slug, step.name, result.feedback)
            result = grade_step(chain, step.name, reference[step.name])
            assert (result.verdict, result.credit) == ("correct", 1.0), (slug, seed, step.name)
            chain.answers[step.name] = reference[step.name]


@pytest.mark.parametrize("slug", sorted(PROBLEMS))
def test_a_wrong_early_step_with_consistent_later_steps_earns_follow_through(slug):
    problem = PROBLEMS[slug]
    # The first step that a later step builds on: where a chain can break.
    first = next(
        s
        for s in problem.steps
        if any(s.name in depends_on(problem, later.name) for later in problem.steps)
    )
    for seed in SEEDS:
        variant = problems.draw_variant(problem, seed)
        reference = problems.solve(problem, variant.variables)
        wrong = reference[first.name] * 1.37  # not a slip: no power of ten, no 1.024^n, no 8
        mine = problems.solve(problem, variant.variables, overrides={first.name: wrong})
        chain = Chain(problem, variant.variables, {first.name: wrong})
        follow_through = 0
        for step in problem.steps:
            if step.name == first.name or first.name not in depends_on(problem, step.name):
                continue
            result = grade_step(chain, step.name, mine[step.name])
            # A step whose value the wrong input does not move (e.g. after ceil) is simply right.
            assert result.verdict in ("follow_through", "correct"), (slug, seed, step.name, result)
            assert result.credit == 1.0
            if result.verdict == "follow_through":
                assert result.broke_at == first.name
                follow_through += 1
            chain.answers[step.name] = mine[step.name]
        assert follow_through, f"{slug} seed {seed}: no step earned follow-through credit"


WRONG_FACTORS = (1.37, 2, 0.5, 100, 0.01, 1.04, 1.024**3, 8)


@pytest.mark.parametrize("slug", sorted(PROBLEMS))
def test_feedback_never_shows_an_internal_key(slug):
    """Whatever the answer, feedback names steps as the learner sees them ("step 2") and
    fills every {placeholder}: no step, parameter or variable key reaches the learner."""
    problem = PROBLEMS[slug]
    for seed in range(2):
        variant = problems.draw_variant(problem, seed)
        keys = {s.name for s in problem.steps} | set(variant.variables)
        keys = {k for k in keys if "_" in k}  # plain words (replicas, batch) may be prose
        reference = problems.solve(problem, variant.variables)
        first = problem.steps[0].name
        for answers in ({}, {first: reference[first] * 1.37}, {first: reference[first] * 0}):
            chain = Chain(problem, variant.variables, dict(answers))
            for step in problem.steps[1:] if answers else problem.steps:
                for factor in WRONG_FACTORS:
                    result = grade_step(chain, step.name, reference[step.name] * factor)
                    leaked = [k for k in keys if k in result.feedback]
                    assert not leaked and "{" not in result.feedback, (
                        slug,
                        step.name,
                        result.feedback,
                    )
