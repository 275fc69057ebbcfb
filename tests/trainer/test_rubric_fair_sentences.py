"""Correct sentences the blind evaluation found marked wrong by grader 2.0 (issue 29), each
graded on its own question: none is contradicted, none raises a red flag. (The sentences
with "not", "no", "doesn't" are in test_rubric_negation.py.)"""

from __future__ import annotations

import pytest

from tests.trainer import checkfixtures as fx
from trainer.grading.rubric import grade

CASES = [
    # a realistic decode step instead of the ideal 4.8 ms floor
    (
        "continuous-batching-static-batch-diagnosis",
        "The long requests need ~2,000 decode steps at ~7 ms each, so every batch is held for ~14 s.",
    ),
    # achieved PCIe instead of the 63 GB/s peak
    (
        "fitting-405b-on-one-node",
        "At ~50 GB/s achieved PCIe, streaming the ~240 GB that doesn't fit takes about 5 s per token.",
    ),
    # KV room with all memory usable, and with vLLM's 0.95
    (
        "kv-arith-llama3-70b-node",
        "With all 640 GB usable, 640 - 141 GB of weights leaves 499 GB for KV, about 186 sessions.",
    ),
    (
        "kv-arith-llama3-70b-node",
        "At gpu_memory_utilization 0.95 the pool is 608 - 141 = 467 GB, about 174 full sessions.",
    ),
    # the red flag "uses the 64 attention heads" raised on a strong answer
    (
        "kv-arith-llama3-70b-node",
        "Llama-3-70B uses GQA, so only the 8 KV heads are cached rather than the 64 attention "
        "heads: 2 x 80 x 8 x 128 x 2 B = 320 KiB per token.",
    ),
    # the red flag "claims streaming reduces end-to-end latency"
    (
        "latency-levers-chat-feels-slow",
        "Streaming doesn't change the real completion time at all; it only shows the first words "
        "at TTFT, so the wait feels shorter.",
    ),
    (
        "cancellation-closed-tab",
        "vLLM sees its connection close and aborts the request, which leaves the waiting/running "
        "queues and frees its KV blocks at the next step.",
    ),
    (
        "continuous-batching-scheduler-design",
        "Every step, retire finished sequences, free their KV, admit waiting requests.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        "The KV cache just stores, per layer, the K and V vectors of every token so far.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        "That memory, not the weights, is what limits how many sequences you can batch.",
    ),
    (
        "full-stack-latency-long-prompt-hol",
        "For that long every running stream gets no tokens (the freeze).",
    ),
    # Grader 3.0 on the whole blind set (2026-12-07): numbers of another quantity taken for
    # the point's. A figure another expectation accepts (the TP=4 pool, not a wrong TP=8 one):
    (
        "serving-design-chat-assistant-70b",
        "A TP=4 replica has ~320 × 0.9 − 140 ≈ 150 GB for KV.",
    ),
    (
        "serving-design-chat-assistant-70b",
        "TP4 replica ≈ 320x0.9 − 140 ≈ 150 GB KV",
    ),
    # two figures of the kind, one of them another expectation's (the FP4 KV room): no proof
    (
        "quantization-fp8-vs-fp4-on-b200",
        "With ~162 GB usable on one B200, the KV budget grows from about 91 to about 120 GB, "
        "roughly a third more.",
    ),
    # "17 GB/req" states 17 GB per request; the 16 GB beside it is the weights
    (
        "flash-attention-long-context-decode-idle-gpu",
        "KV/token = 2 x 32 L x 8 KV heads x 128 x 2 B = 128 KiB -> 128k ctx ~17 GB/req ~ "
        "weights (16 GB)",
    ),
    # a figure in a sentence that does not name the quantity (launch overhead, not the floor)
    (
        "full-stack-latency-decode-trace",
        "About 1,100 eager launches at 15–20 µs each of Python, dispatcher and launch overhead "
        "is 17–22 ms of CPU time, and the GPU finishes each kernel before the next one arrives.",
    ),
]


@pytest.mark.parametrize("slug,sentence", CASES)
def test_a_correct_sentence_is_not_called_wrong_and_raises_no_flag(bank, slug, sentence):
    points, prompts = bank
    fx.assert_not_called_wrong(grade(sentence, points[slug], prompts[slug]))


def test_the_realistic_kv_room_is_accepted_and_says_under_which_assumption(bank):
    points, prompts = bank
    slug = "kv-arith-llama3-70b-node"
    result = grade(CASES[2][1], points[slug], prompts[slug])
    budget = result.points[2]
    assert budget.verdict in ("hit", "unclear")
    assert budget.verdict != "hit" or "usable share of GPU memory" in budget.reason


def test_a_wrong_number_naming_its_quantity_is_still_contradicted(bank):
    points, prompts = bank
    slug = "serving-design-chat-assistant-70b"
    result = grade("A TP=4 replica has about 40 GB for KV.", points[slug], prompts[slug])
    assert any(p.verdict == "contradicted" and "40 GB" in p.reason for p in result.points)
