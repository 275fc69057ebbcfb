"""The shipped bank: valid, covers all 23 topics, and round-trips through the database."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import call_command

from questions.bank import BANK_DIR, read_bank
from questions.catalog import load_catalog
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
    # the questions added since (issue 18)
    ("cancellation-abort-waits-for-the-step", "chunks_avoided"): "floor",
    ("full-stack-latency-launch-bound-decode", "launches"): "round",
    ("kv-arith-mla-window-capacity", "mla_sequences"): "floor",
    ("kv-arith-mla-window-capacity", "swa_sequences"): "floor",
    ("moe-serving-wide-ep-arithmetic", "slots_per_gpu"): "floor",
    ("prefill-decode-xpyd-sizing", "prefill_instances"): "ceil",
    ("prefill-decode-xpyd-sizing", "decode_instances"): "ceil",
    ("serving-design-lora-adapter-memory", "adapters_in_budget"): "floor",
    ("serving-runtimes-batched-tokens-knob", "prefill_steps"): "ceil",
    ("serving-runtimes-coordinated-omission-math", "closed_samples"): "floor",
    ("serving-runtimes-coordinated-omission-math", "open_during_stall"): "floor",
    ("timeouts-retries-max-tokens-under-the-wall", "max_tokens"): "floor",
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


# --- facts in prose agree with the catalog ---------------------------------------------------

_COUNT_RE = re.compile(
    r"(?<![=\w.])(\d[\d,]*)\s*(KV heads|key-value heads|query heads|attention heads|heads|"
    r"MoE layers|layers)\b",
    re.IGNORECASE,
)


def _is_mha(text: str) -> bool:
    return "MHA" in text or "multi-head attention" in text.lower()


def _allowed_counts(model, kind: str, sentence: str) -> set[int]:
    counts = _model_counts(model, kind, sentence)
    if re.search(r"\bTP\d*\b|tensor.parallel|per GPU|GPU holds", sentence):
        # heads split across TP ranks: "a TP4 GPU holds 2 KV heads" (at least one each)
        counts |= {max(c // k, 1) for c in counts for k in (2, 4, 8, 16) if c % k == 0 or c < k}
    return counts


def _model_counts(model, kind: str, sentence: str) -> set[int]:
    kind = kind.lower()
    if "layer" in kind:
        counts = {model.layers} | ({model.moe.moe_layers} if model.moe else set())
        if "stage" in sentence.lower():  # pipeline stages split the layers evenly
            counts |= {model.layers // k for k in (2, 3, 4, 6, 8) if model.layers % k == 0}
        return counts
    if kind.startswith(("kv", "key")):
        # "if it were MHA, with 64 KV heads": a hypothetical MHA caches every query head;
        # "ships 16 KV heads, already duplicated": KV heads replicated for TP > KV heads
        counts = {model.kv_heads} | ({model.heads} if _is_mha(sentence) else set())
        if re.search(r"replicat|duplicat", sentence):
            counts |= {model.kv_heads * k for k in (2, 4)}
        return counts
    if kind.startswith(("query", "attention")):
        # "the 8 query heads that share a KV head": the GQA group size
        if re.search(r"(each|a|one|per|the) KV head", sentence):
            return {model.heads, model.heads // model.kv_heads}
        return {model.heads}
    return {model.heads, model.kv_heads}


def _point_texts(points):
    """What a point asserts as true (contradictions and wrong options are meant to be wrong)."""
    for point in points:
        yield point.text
        yield from point.claims
        if point.check is not None:
            yield point.check.ask
            yield point.check.answer or ""


def _question_texts(question):
    """(text, context): a follow-up's points are read in the light of its prompt (an "if it
    were MHA" probe makes "64 KV heads" right)."""
    yield question.prompt, ""
    yield question.model_answer, ""
    for follow_up in question.follow_ups:
        yield follow_up.prompt, ""
        yield from ((t, follow_up.prompt) for t in _point_texts(follow_up.rubric))
    yield from ((t, "") for t in _point_texts(question.rubric))
    for step in question.problem.steps if question.problem else ():
        yield step.prompt, ""
        yield step.explanation, ""
        yield from ((h, "") for h in step.hints)
        yield from ((m.feedback, "") for m in step.misconceptions)


def test_head_and_layer_counts_in_prose_match_the_catalog(bank):
    """A sentence quoting "N heads"/"N layers" refers to the models it names (or, if it names
    none, the question's models); N must be one of their catalog counts."""
    models = {m.name.lower(): m for m in load_catalog().models.values()}
    name_re = re.compile(
        "|".join(re.escape(n) for n in sorted(models, key=len, reverse=True)), re.I
    )
    wrong = []
    for q in bank.questions:
        own = {models[m.group(0).lower()] for m in name_re.finditer(q.prompt)}
        params = list(q.problem.parameters.values()) if q.problem else []
        for param in params + list(q.variables.values()):
            if param.catalog == "models":
                own |= {load_catalog().models[c] for c in param.choices}
        for text, context in _question_texts(q):
            for sentence in re.split(r"(?<=[.;?!])\s+|\n", text):
                named = {models[m.group(0).lower()] for m in name_re.finditer(sentence)} or own
                for number, kind in _COUNT_RE.findall(sentence):
                    n = int(number.replace(",", ""))
                    read = f"{context} {sentence}"
                    if named and not any(n in _allowed_counts(m, kind, read) for m in named):
                        wrong.append(
                            f"{q.slug}: {n} {kind} in {' '.join(sentence.split())[:120]!r}"
                        )
    assert wrong == []


def test_the_llama2_head_counts_are_quoted_right(bank):
    text = "\n".join(t for q in bank.questions for t, _ in _question_texts(q) if "Llama-2-7B" in t)
    assert "all 64 heads (as Llama-2-7B and 13B do" not in text
    assert "Llama-2-7B, with 32 heads" in text and "Llama-2-13B, with 40 heads" in text


_PARAMS_RE = re.compile(r"\b(\w+?_(?:active_)?params)\b")


def test_every_step_that_uses_a_parameter_count_states_it(bank):
    """Names round ("70B" is 70.55B, "37B activated" is 37.55B from the shapes): a step whose
    reference uses a count must show that count, in its own prompt, an earlier step's or the
    question's, so the obvious answer passes the tolerance."""
    missing = []
    for q in bank.questions:
        if q.problem is None:
            continue
        shown = q.prompt
        for step in q.problem.steps:
            shown += step.prompt
            for name in set(_PARAMS_RE.findall(str(step.expression))):
                if "{" + name + "}" not in shown:
                    missing.append(f"{q.slug} > {step.name}: {{{name}}} is not stated")
    assert missing == []


def test_the_deepseek_active_parameter_step_accepts_the_count_it_states(bank):
    from questions import problems
    from questions.bank import _problem_dict
    from trainer.grading.arithmetic import Chain, grade_step

    question = next(q for q in bank.questions if q.slug == "global-moe-mla-session-transfer")
    spec = problems.from_dict(_problem_dict(question.problem))
    variant = problems.draw_variant(spec, 0)
    step = next(s for s in spec.steps if s.name == "matmul_s")
    text = problems.render_text(step.prompt, variant.variables)
    stated = re.search(r"Use \*\*([\d,]+) active", " ".join(text.split()))
    assert stated, text
    active = int(stated.group(1).replace(",", ""))
    assert abs(active - 37.55e9) < 0.01e9  # the config count, not the 37B headline
    scope = dict(variant.variables)
    tokens = scope["session_tokens"].to("token").magnitude
    rate = (scope["n_gpus"] * scope["gpu_fp8_tflops"] * scope["mfu"]).to("FLOP/s").magnitude
    learner_s = 2 * active * tokens / rate  # what a learner computes from the prompt
    reference = problems.solve(spec, scope)
    chain = Chain(problem=spec, variables=scope)
    for earlier in spec.steps[: spec.steps.index(step)]:
        chain.answers[earlier.name] = reference[earlier.name]
    result = grade_step(chain, "matmul_s", problems.UREG.Quantity(learner_s, "s"))
    assert result.verdict == "correct", result.feedback
    # ...whereas the 37B headline is 1.5% off, outside the default 1% tolerance.
    headline = grade_step(chain, "matmul_s", problems.UREG.Quantity(2 * 37e9 * tokens / rate, "s"))
    assert headline.verdict != "correct"
