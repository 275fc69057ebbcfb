"""The shipped bank: valid, covers all 23 topics, and round-trips through the database."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.management import call_command

from questions.bank import BANK_DIR, read_bank
from questions.models import Question

SEEDS = Path(__file__).resolve().parents[3] / "shared" / "seeds" / "000_eab1a535c6d1d8d0.txt"
NON_NUMERIC_TOPICS = {"serving-runtimes"}
LOOPS_REQUIRED = 5


@pytest.fixture(scope="module")
def bank():
    return read_bank()


def test_the_bank_has_no_errors(bank):
    assert [str(e) for e in bank.errors] == []


def test_all_23_topics_are_covered_in_order(bank):
    orders = sorted(t.topic.order for t in bank.topics)
    assert orders == list(range(1, 24))
    if SEEDS.exists():  # the topic blurbs the product covers, one paragraph each
        blurbs = [p for p in SEEDS.read_text().split("\n\n") if p.strip()][1:]
        assert len(blurbs) == len(bank.topics) == 23


def test_every_topic_has_a_rubric_graded_question(bank):
    for topic_file in bank.topics:
        graded = [
            q
            for q in topic_file.questions
            if q.kind in ("scenario", "design")
            and q.status == "published"
            and len([p for p in q.rubric if not p.penalty]) >= 4
            and q.model_answer.strip()
            and len(q.follow_ups) >= 2
        ]
        assert graded, f"{topic_file.topic.slug} lacks a scenario/design question with >= 4 points"


def test_every_numeric_topic_has_a_multi_step_problem_with_misconceptions(bank):
    for topic_file in bank.topics:
        if topic_file.topic.slug in NON_NUMERIC_TOPICS:
            continue
        problems = [
            q.problem
            for q in topic_file.questions
            if q.kind == "arithmetic"
            and q.status == "published"
            and len(q.problem.steps) >= 3
            and sum(len(s.misconceptions) for s in q.problem.steps) >= 2
        ]
        assert problems, (
            f"{topic_file.topic.slug} lacks an arithmetic problem (>= 3 steps, >= 2 misconceptions)"
        )


def test_every_rubric_has_a_red_flag_somewhere_in_its_topic(bank):
    for topic_file in bank.topics:
        assert any(p.penalty for q in topic_file.questions for p in q.rubric), topic_file.topic.slug


def test_the_five_interview_loops_exist(bank):
    slugs = {loop.slug for loop in bank.loops}
    assert len(slugs) >= LOOPS_REQUIRED
    assert {
        "inference-warm-up",
        "fde-full-stack-latency",
        "serving-design-round",
        "capacity-and-cost",
        "moe-and-parallelism",
    } <= slugs


@pytest.mark.django_db
def test_load_export_load_is_a_fixed_point(tmp_path, capsys):
    call_command("load_bank")
    assert Question.objects.count() == len(read_bank().questions)
    first, second = tmp_path / "first", tmp_path / "second"
    call_command("export_bank", out=first)
    call_command("load_bank", *sorted(str(p) for p in first.glob("*.yaml")))
    assert "0 created, 0 updated" in capsys.readouterr().out.split("questions:")[1]
    call_command("export_bank", out=second)
    names = sorted(p.name for p in first.glob("*.yaml"))
    assert names == sorted(p.name for p in second.glob("*.yaml"))
    assert len(names) == len(list(BANK_DIR.glob("*.yaml")))
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


# Steps whose answer is a count of GPUs, sequences, replicas, batch slots, heads or
# connections: whole numbers, rounded the way the question needs (issue 18).
COUNT_STEPS = {
    ("capacity-planning-fleet-chain", "replicas"): "ceil",
    ("capacity-planning-fleet-chain", "gpus_total"): "ceil",
    ("fitting-weights-gpus-and-spill", "gpus_needed"): "ceil",
    ("kv-arith-sequences-that-fit", "max_sequences"): "floor",
    ("long-context-kv-and-prefill-cost", "long_slots"): "floor",
    ("paged-attention-waste-arithmetic", "seqs_contiguous"): "floor",
    ("paged-attention-waste-arithmetic", "seqs_paged"): "floor",
    ("prefill-decode-intensity-roofline", "critical_batch"): "ceil",
    ("serving-design-node-concurrency", "max_sequences"): "floor",
    ("tensor-parallelism-min-tp-fit", "min_tp"): "ceil",
    ("tensor-parallelism-min-tp-fit", "kv_heads_per_gpu"): "ceil",
    ("timeouts-retries-littles-law-amplification", "pool_per_pod"): "ceil",
}


def test_count_steps_are_integer_steps(bank):
    found = {
        (q.slug, s.name): s.integer
        for q in bank.questions
        if q.problem
        for s in q.problem.steps
        if s.integer
    }
    assert {k: v for k, v in found.items() if k in COUNT_STEPS} == COUNT_STEPS
