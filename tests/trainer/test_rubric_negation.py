"""Negation, word by word, on the bank's own questions (issue 29): a correct sentence with
"not", "no", "without", "doesn't", "instead of" or "rather than" never reads as denying its
point, and a sentence that denies the point's predicate with a negated verb does.

Each case is graded on its question with the full grader. The sentences that must not negate
include those the blind evaluation found marked "contradicted" by grader 2.0 (quoted in the
issue); the real negations are plain denials of a claim ("X does not Y").
"""

from __future__ import annotations

import pytest

from trainer.grading.rubric import grade, terms

# (question slug, rubric point index, sentence)
MUST_NOT_NEGATE = [
    (
        "kv-cache-why-use-cache-false-crawls",
        4,
        "That memory, not the weights, is what limits how many sequences you can batch.",
    ),
    (
        "full-stack-latency-long-prompt-hol",
        2,
        "For that long every running stream gets no tokens (the freeze).",
    ),
    (
        "continuous-batching-scheduler-design",
        0,
        "Every step, retire finished sequences, free their KV, admit waiting requests.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        0,
        "The KV cache just stores, per layer, the K and V vectors of every token so far.",
    ),
    (
        "cancellation-closed-tab",
        2,
        "vLLM sees its connection close and aborts the request, which leaves the waiting/running queues and frees its KV blocks at the next step.",
    ),
    (
        "latency-levers-chat-feels-slow",
        1,
        "Streaming doesn't change the real completion time at all, it only makes the wait feel shorter because the first words show up at TTFT.",
    ),
    (
        "kv-arith-llama3-70b-node",
        0,
        "Use the 8 KV heads, not the 64 query heads: 2 x 80 x 8 x 128 x 2 B = 320 KiB per token.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        1,
        "Without the cache every step re-processes the whole prefix, so the total work grows quadratically with length.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        0,
        "Keys and values of past positions never change under the causal mask, so there is no reason to recompute them.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        3,
        "With the cache, decode is bound by memory bandwidth rather than compute, and the KV reads grow linearly with context.",
    ),
    (
        "continuous-batching-scheduler-design",
        1,
        "Admission should depend on free KV blocks and a per-iteration token budget, not only on the number of requests.",
    ),
    (
        "continuous-batching-scheduler-design",
        3,
        "When KV runs out, preempt a victim and recompute it later instead of swapping, since short contexts recompute cheaply.",
    ),
    (
        "continuous-batching-scheduler-design",
        4,
        "Use FCFS with priority classes and aging so that no tenant starves.",
    ),
    (
        "continuous-batching-scheduler-design",
        2,
        "Chunked prefill bounds TPOT without hurting TTFT much: long prompts enter in chunks that fit the token budget.",
    ),
    (
        "cancellation-closed-tab",
        3,
        "It usually breaks at proxies that buffer the stream, sync workers that never check for a disconnect, and job queues that never see the client.",
    ),
    (
        "cancellation-closed-tab",
        0,
        "Compare tokens generated with tokens delivered per request ID; if aborts are near zero while users leave, nothing is being cancelled.",
    ),
    (
        "cancellation-closed-tab",
        1,
        "The proxy must not buffer the SSE response, otherwise the disconnect never travels upstream to the API.",
    ),
    (
        "cancellation-proxy-hides-the-disconnect",
        1,
        "Behind the proxy, vLLM's client is the proxy rather than the user, so vLLM never sees a disconnect.",
    ),
    (
        "cancellation-proxy-hides-the-disconnect",
        2,
        "Race the upstream call against the proxy's own client disconnect instead of polling is_disconnected behind middleware, and cancel the upstream request.",
    ),
    (
        "cancellation-proxy-hides-the-disconnect",
        3,
        "Propagate a deadline and drop queued work that has expired instead of sending it to the engine.",
    ),
    (
        "full-stack-latency-long-prompt-hol",
        1,
        "Without chunked prefill the whole 100k prompt is one iteration, so requests queued behind it wait and p99 TTFT jumps while p50 does not move.",
    ),
    (
        "full-stack-latency-long-prompt-hol",
        4,
        "Turn on chunked prefill first rather than adding GPUs, then add token-based admission and fairness.",
    ),
    (
        "prefill-decode-rag-stutter",
        3,
        "Chunked prefill with a token budget is the first fix: TPOT stays bounded, at the cost of slightly higher TTFT rather than a stall.",
    ),
    (
        "prefill-decode-rag-stutter",
        2,
        "The stutter comes from the 8k RAG prefill landing in the same iteration as the decodes, so no decoding sequence moves until it finishes.",
    ),
    (
        "prefill-decode-rag-stutter",
        4,
        "Disaggregation isolates decode from prefill bursts, but it is not free: the KV has to be handed off and the pool ratio rebalanced.",
    ),
    (
        "latency-levers-chat-feels-slow",
        2,
        "Output length is the biggest lever: cutting tokens with max_tokens or concise prompts removes one TPOT each, no hardware needed.",
    ),
    (
        "latency-levers-chat-feels-slow",
        4,
        "TTFT work like prefix caching comes last, not first, since halving a 0.5 s TTFT saves only 0.25 s.",
    ),
    (
        "latency-levers-chat-feels-slow",
        3,
        "Decode is memory-bandwidth-bound, so TPOT falls with FP8 or INT4 weights rather than with more FLOPs.",
    ),
    (
        "kv-arith-llama3-70b-node",
        5,
        "Sizing every session at full length is a worst case; paged KV doesn't reserve the max, so real concurrency is higher.",
    ),
    (
        "kv-arith-llama3-70b-node",
        3,
        "FP8 KV halves the bytes per token, so about twice as many sessions fit, though not without a quality eval.",
    ),
    (
        "inference-basics-request-lifecycle",
        0,
        "Prefill runs the whole prompt in one parallel pass and fills the KV cache; decode then generates one token per step instead of the whole prompt again.",
    ),
    (
        "speculative-decoding-lossless-mechanism",
        0,
        "The target model verifies all k draft tokens in one forward pass instead of k sequential ones.",
    ),
    (
        "paged-attention-explain-gain-and-cost",
        0,
        "Paged KV allocates fixed-size blocks on demand instead of reserving max-length contiguous buffers, so there is no external fragmentation.",
    ),
]
MUST_NEGATE = [
    (
        "quantization-int4-70b-single-gpu",
        1,
        "Low-batch decode is not bandwidth-bound, so INT4 does not raise tokens/s per stream.",
    ),
    (
        "tensor-parallelism-70b-on-8xh100",
        1,
        "Each GPU does not hold a share of the KV heads, so per-GPU KV per token does not shrink with TP.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        0,
        "The cache does not hold the keys and values of past positions for every layer.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        3,
        "With the cache, decode is not memory-bandwidth-bound and its reads do not grow with context.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        1,
        "Without the cache a step does not re-process the whole prefix, and the work doesn't grow quadratically.",
    ),
    (
        "continuous-batching-scheduler-design",
        1,
        "Admission does not depend on free KV blocks or a token budget.",
    ),
    (
        "cancellation-closed-tab",
        2,
        "The engine doesn't abort the sequence at the scheduler, and its KV blocks are not freed at the next iteration.",
    ),
    (
        "cancellation-closed-tab",
        0,
        "You cannot measure the waste by comparing tokens generated with tokens delivered per request ID.",
    ),
    (
        "prefill-decode-rag-stutter",
        3,
        "Chunked prefill with a token budget is not the fix, and it does not bound TPOT.",
    ),
    (
        "prefill-decode-rag-stutter",
        2,
        "The stutter does not come from the long prefill sharing iterations with the decodes.",
    ),
    (
        "kv-arith-llama3-70b-node",
        3,
        "FP8 KV does not double the capacity, and it doesn't halve the bytes per token.",
    ),
    (
        "flash-attention-why-it-is-faster",
        0,
        "Standard attention is not IO-bound and does not write the N x N score matrix to HBM.",
    ),
    (
        "moe-serving-ep-tail-regression",
        0,
        "With expert parallelism an MoE layer is not a synchronisation point, and no GPU waits for the slowest rank in the all-to-all.",
    ),
    (
        "speculative-decoding-peak-regression",
        3,
        "The draft model's weights and KV cache do not take GPU memory and do not lower the max batch.",
    ),
    (
        "kv-cache-why-use-cache-false-crawls",
        4,
        "KV memory does not limit how many sequences can run at once, so it has nothing to do with throughput.",
    ),
    (
        "speculative-decoding-peak-regression",
        0,
        "At a handful of sequences the verify pass is not memory-bound, and the extra drafted positions are not using idle compute.",
    ),
]
# Wrong sentences the rule cannot prove (the negated verb is not on a key term, or the term is
# also said positively): they stay "not verified", never credited.
LEFT_UNPROVEN = [
    (
        "continuous-batching-scheduler-design",
        3,
        "When KV runs out the scheduler never preempts a victim, and it does not recompute or swap anything.",
    ),
    (
        "full-stack-latency-long-prompt-hol",
        2,
        "Running sequences do not stall or freeze while the long prefill occupies the iteration.",
    ),
    (
        "full-stack-latency-long-prompt-hol",
        4,
        "Chunked prefill should not be turned on first; splitting long prompts into chunks does not help.",
    ),
    (
        "latency-levers-chat-feels-slow",
        2,
        "Output length is not a lever, because cutting output tokens doesn't change the time.",
    ),
    (
        "inference-basics-request-lifecycle",
        0,
        "Prefill does not process the whole prompt in one parallel pass and does not fill the KV cache.",
    ),
    (
        "speculative-decoding-lossless-mechanism",
        0,
        "The target model cannot verify the draft tokens in one forward pass.",
    ),
    (
        "paged-attention-explain-gain-and-cost",
        0,
        "Paged KV does not allocate fixed-size blocks on demand.",
    ),
    (
        "quantization-int4-70b-single-gpu",
        2,
        "Weight-only INT4 does not make compute-bound prefill or high-batch decode any faster, since it dequantizes inside the matmul.",
    ),
    (
        "flash-attention-why-it-is-faster",
        1,
        "FlashAttention does not tile Q, K and V into blocks in on-chip SRAM and does not fuse the kernel.",
    ),
    (
        "flash-attention-why-it-is-faster",
        3,
        "The backward pass does not recompute the score tiles; it stores the whole attention matrix in memory.",
    ),
    (
        "timeouts-retries-504-then-meltdown",
        3,
        "Exponential backoff with jitter does not help, and a retry budget does not cap anything.",
    ),
    (
        "prompt-caching-low-hit-rate",
        3,
        "Round-robin over replicas does not matter, because routing has no effect on the replica caches.",
    ),
    (
        "serving-runtimes-cold-start-minutes",
        1,
        "Pre-staging the weights on local NVMe does not help, since the weights are not the slow part.",
    ),
    (
        "tensor-parallelism-70b-on-8xh100",
        4,
        "TP should not stay inside the NVLink domain; running it across nodes over InfiniBand does not cost anything.",
    ),
    (
        "flash-attention-why-it-is-faster",
        2,
        "The online softmax does not keep a running max and sum of exponentials, so the result is not exact.",
    ),
    (
        "moe-serving-ep-tail-regression",
        1,
        "Per-layer jitter does not compound over the 58 MoE layers, so the p99 tail does not grow.",
    ),
]


def _graded(bank, slug, sentence):
    points, prompts = bank
    return grade(sentence, points[slug], prompts[slug])


def test_there_are_enough_cases():
    assert len(MUST_NOT_NEGATE) >= 30 and len(MUST_NEGATE) >= 15
    cues = ("not", "no", "without", "doesn't", "instead of", "rather than")
    for cue in cues:
        assert any(f" {cue} " in f" {s.lower()} " for _, _, s in MUST_NOT_NEGATE), cue


@pytest.mark.parametrize("slug,index,sentence", MUST_NOT_NEGATE)
def test_a_correct_sentence_with_a_negation_word_is_not_contradicted(bank, slug, index, sentence):
    result = _graded(bank, slug, sentence)
    assert [p.index for p in result.points if p.verdict == "contradicted"] == []
    assert not any(p.penalty and p.verdict == "hit" for p in result.points)
    assert "red flag" not in result.flags


@pytest.mark.parametrize("slug,index,sentence", MUST_NEGATE)
def test_a_denial_of_the_point_is_contradicted_with_its_reason(bank, slug, index, sentence):
    point = _graded(bank, slug, sentence).points[index]
    assert point.verdict == "contradicted" and point.decided_by == "verify"
    assert point.reason.startswith("Your sentence denies what this point holds:")


@pytest.mark.parametrize("slug,index,sentence", LEFT_UNPROVEN)
def test_a_denial_the_rule_cannot_prove_is_neither_credited_nor_called_wrong(
    bank, slug, index, sentence
):
    point = _graded(bank, slug, sentence).points[index]
    assert point.verdict in ("unclear", "missed")


@pytest.mark.parametrize(
    "text,negated",
    [
        ("decode is not memory-bound", ["memory", "bound"]),
        ("that memory, not the weights, is what limits the batch", []),
        ("every running stream gets no tokens", []),
        ("bounds TPOT without hurting TTFT", []),
        ("recompute instead of swapping", []),
        ("it is not only memory-bound", []),
        ("it is not necessarily compute-bound", []),
        ("the engine doesn't free the blocks", ["free", "the", "blocks"]),
        ("if the proxy does not pass it upstream, the engine keeps going", []),
        ("the proxy must not buffer, otherwise the disconnect never travels upstream", ["buffer"]),
        ("the scheduler never evicts a running sequence", ["evicts", "a", "running", "sequence"]),
        ("it no longer holds the lock", ["longer", "holds", "the", "lock"]),
    ],
)
def test_only_a_negated_verb_negates(text, negated):
    cues = {"not", "never", "no", "doesn't"}
    assert [w for w, n in terms.predicate_tags(text) if n and w not in cues] == negated
