"""The primary-source audit of the bank (issue 30): a correct answer to each item that used to
punish it is not contradicted and raises no flag, and the corrected facts are what the bank
(and so the page) shows.

Each sentence is what a candidate who knows the current facts says, graded on its question by
the full grader. Before the fixes each of them met an authored contradiction or a check answer
that said the opposite.
"""

from __future__ import annotations

import pytest

from questions import problems
from questions.bank import _problem_dict, read_bank
from questions.markdown import render_markdown
from tests.trainer import checkfixtures as fx
from trainer.grading.rubric import grade

RIGHT_ANSWERS = [
    # FA3's flash_attn_with_kvcache splits the KV and packs GQA heads: it does fill the SMs
    (
        "flash-attention-long-context-decode-idle-gpu",
        "FlashAttention-3 would fix this decode profile: its flash_attn_with_kvcache splits the "
        "KV across thread blocks and packs the 4 query heads of each KV head, so the SMs fill "
        "up, although it still reads the same 16 GiB per sequence.",
    ),
    # FA2 itself has split-KV decoding since v2.2
    (
        "flash-attention-long-context-decode-idle-gpu",
        "FlashAttention-2 has had split-KV decoding since v2.2: flash_attn_with_kvcache with "
        "num_splits=0 picks the number of splits, so the low occupancy means this path isn't "
        "using it.",
    ),
    # Mistral-7B-v0.1 slides in every layer: vLLM only unifies a model that mixes both
    (
        "kv-arith-mla-and-sliding-window",
        "With the hybrid allocator disabled, Mistral-7B-v0.1's sliding layers still only keep "
        "the last window, because every layer slides and there is nothing to unify with.",
    ),
    # prompts many times the output: the prompt is the bigger bill
    (
        "inference-basics-output-token-price",
        "For RAG with 10,000-token prompts and 200-token answers, shortening prompts saves more "
        "than shortening outputs, even at a 5x output price.",
    ),
    # GPT-5.6 has explicit breakpoints, and writes cost 1.25x
    (
        "prompt-caching-multi-turn-cost",
        "On GPT-5.6 and later OpenAI caches only where you add explicit breakpoints if you set "
        "explicit mode, and cache writes cost 1.25x the input price.",
    ),
    (
        "prompt-caching-low-hit-rate",
        "From GPT-5.6 OpenAI puts an implicit breakpoint on the newest message, so I'd add an "
        "explicit prompt_cache_breakpoint at the end of the stable system prompt.",
    ),
    # 16-token blocks: tokens 0-31 are two full blocks before the clock at 40
    (
        "prompt-caching-low-hit-rate",
        "With the clock at token 40 and 16-token blocks, the two full blocks before it, tokens "
        "0-31, still hit; everything from the clock's block on misses.",
    ),
    # uvicorn swallows a send() after the disconnect; apps learn it from http.disconnect
    (
        "cancellation-closed-tab",
        "On uvicorn the next write does not fail after a disconnect, send() just returns; the "
        "API learns it from the ASGI http.disconnect message, which Starlette's "
        "StreamingResponse listens for, and non-streaming handlers can race a listener for it "
        "like vLLM's with_cancellation.",
    ),
]


@pytest.mark.parametrize("slug,sentence", RIGHT_ANSWERS)
def test_a_right_answer_to_an_audited_item_is_not_called_wrong(bank, slug, sentence):
    points, prompts = bank
    fx.assert_not_called_wrong(grade(sentence, points[slug], prompts[slug]))


# The audited point a right sentence used to sit next to an authored "wrong version" of: it no
# longer reads close to one (closeness lowered its estimate and withheld the credit).
NOT_NEAR_A_WRONG_VERSION = [
    (RIGHT_ANSWERS[3], 4),  # output-token-price: the lever point
    (RIGHT_ANSWERS[4], 2),  # multi-turn-cost: the hosted-cache point
]


@pytest.mark.parametrize("case,index", NOT_NEAR_A_WRONG_VERSION)
def test_a_right_answer_no_longer_reads_close_to_a_wrong_version(bank, case, index):
    slug, sentence = case
    points, prompts = bank
    result = grade(sentence, points[slug], prompts[slug])
    assert "common wrong version" not in result.points[index].reason


@pytest.fixture(scope="module")
def questions():
    return {q.slug: q for q in read_bank().questions}


def _point(question, words: str):
    return next(p for p in question.rubric if words in p.text)


def _rendered(question) -> str:
    """What the learner's page shows of the question's prose: prompt, model answer, rubric."""
    parts = [question.prompt, question.model_answer]
    for point in question.rubric:
        parts.append(point.text)
        parts.extend(point.claims or [])
        if point.check:
            parts.append(point.check.ask)
            parts.append(str(point.check.answer or ""))
    for follow_up in question.follow_ups:
        parts.append(getattr(follow_up, "prompt", str(follow_up)))
        for fp in getattr(follow_up, "rubric", None) or []:
            parts.append(fp.text)
            parts.extend(fp.claims or [])
    return render_markdown("\n\n".join(parts))


def test_no_check_answer_teaches_that_fa3_does_not_help_decode(questions):
    q = questions["flash-attention-long-context-decode-idle-gpu"]
    point = _point(q, "FlashAttention-3")
    assert "split-KV" in point.check.answer and "same KV bytes" in point.check.answer
    assert "FlashAttention-3 would fix this decode profile." not in point.contradictions
    assert "since v2.2" in _rendered(q)


def test_the_hybrid_allocator_contradiction_is_scoped_to_mixed_models(questions):
    q = questions["kv-arith-mla-and-sliding-window"]
    point = _point(q, "conditional on the engine")
    assert (
        "With the hybrid allocator disabled, sliding layers still only keep the last window."
        not in (point.contradictions)
    )
    assert "mixes" in point.check.ask
    assert "Mistral-7B-v0.1 is not such a model" in q.model_answer


def test_the_cheaper_lever_depends_on_the_prompt_to_output_ratio(questions):
    q = questions["inference-basics-output-token-price"]
    point = _point(q, "strongest cost lever")
    assert not any("Shortening prompts" in c for c in point.contradictions)
    assert "similar length" in point.check.ask
    assert "RAG" in q.model_answer


def test_both_openai_caching_regimes_and_the_write_fee_are_taught(questions):
    for slug in ("prompt-caching-multi-turn-cost", "prompt-caching-low-hit-rate"):
        page = _rendered(questions[slug])
        assert "GPT-5.6" in page and "1,024" in page and "128-token" in page
        assert "prompt_cache_breakpoint" in page
        assert "512–4,096" in page
    cost = questions["prompt-caching-multi-turn-cost"]
    assert "1.35" in cost.model_answer and "1.25×" in cost.model_answer
    point = _point(cost, "hosted caches engage")
    assert "OpenAI caches only where you add cache_control markers." not in point.contradictions
    assert "1.35" in point.check.answer


def test_the_two_full_blocks_before_the_clock_hit(questions):
    point = _point(questions["prompt-caching-low-hit-rate"], "volatile content early")
    assert "0-31" in point.check.answer


def test_the_closed_tab_answer_teaches_http_disconnect_not_a_failing_write(questions):
    q = questions["cancellation-closed-tab"]
    point = _point(q, "every hop")
    assert "http.disconnect" in point.check.answer
    assert "next write" not in point.check.answer.lower()
    assert "http.disconnect" in q.model_answer and "returns silently" in q.model_answer
    assert q.sources, "the closed-tab question cites its sources"
    proxy = questions["cancellation-proxy-hides-the-disconnect"]
    assert "write failure also surfaces" not in proxy.model_answer


def test_the_kv_heaviest_model_per_parameter_is_llama_3_2_3b(questions):
    answer = questions["kv-cache-read-vs-weight-read"].model_answer
    assert "Llama-3.2-3B caches the most per" in answer and "875" in answer


def test_no_two_phase_variant_overflows_the_models_context(questions):
    q = questions["inference-basics-two-phase-timing"]
    problem = problems.from_dict(_problem_dict(q.problem))
    seen = 0
    for choice in problems.all_variants(problem):
        scope = problems.variables_for(problem, choice)
        if not problems._satisfies(problem, scope):
            continue
        seen += 1
        total = (scope["prompt_tokens"] + scope["output_tokens"]).to("token").magnitude
        assert total <= scope["model_max_position"].to("token").magnitude, choice
    assert seen > 0


def test_the_hard_tail_sample_size_is_several_thousand_unpaired(questions):
    q = questions["model-compression-eval-hard-tail"]
    follow_up = next(f for f in q.follow_ups if "3-point drop" in getattr(f, "prompt", ""))
    text = follow_up.rubric[0].text
    assert "4,350" in text and "paired" in text
    assert "4,350" in q.model_answer


AUDITED = (
    "flash-attention-long-context-decode-idle-gpu",
    "kv-arith-mla-and-sliding-window",
    "inference-basics-output-token-price",
    "prompt-caching-multi-turn-cost",
    "prompt-caching-low-hit-rate",
    "cancellation-closed-tab",
    "cancellation-proxy-hides-the-disconnect",
    "kv-cache-read-vs-weight-read",
    "inference-basics-two-phase-timing",
    "model-compression-eval-hard-tail",
)


@pytest.mark.parametrize("slug", AUDITED)
def test_every_audited_question_cites_its_sources(questions, slug):
    assert questions[slug].sources
    assert all(s.checked.isoformat() >= "2026-12-03" for s in questions[slug].sources)
