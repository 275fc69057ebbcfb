"""The fleet simulator on its own (no torch): requests are conserved, KV never exceeds its
budget, a long prefill stalls fifo's shorts, chunked prefill bounds the stall by its
budget, a long-context pool isolates the shorts, preemption happens only when KV is
tight, and the capacity probe counts what the admission does."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lab.labs import fleet_sim as fs

COST = fs.StepCost(fixed_ms=4.0, prefill_token_ms=0.1, decode_seq_ms=0.15,
                   context_token_ms=1e-5)  # fmt: skip
BASE = fs.FleetConfig(replicas=4, kv_tokens=262_144, block_size=16, max_seqs=128,
                      policy="fifo", token_cap=32_768, long_replicas=1, chunk_tokens=512,
                      horizon_s=40.0, sample_s=1.0)  # fmt: skip


def make(seed: int = 0, rate: float = 12.0, longs: int = 3, **kw) -> list[fs.Request]:
    args = dict(short_prompt=512, short_output=64, long_min=100_000, long_max=200_000,
                long_output=16)  # fmt: skip
    args.update(kw)
    return fs.trace(seed, rate, BASE.horizon_s, args["short_prompt"], args["short_output"],
                    longs, args["long_min"], args["long_max"], args["long_output"])  # fmt: skip


def ttfts(result: fs.FleetResult) -> list[float]:
    return [s.first_token_s - s.req.arrival_s for s in result.seqs(long=False)]


@pytest.mark.parametrize("policy", fs.POLICIES)
def test_every_request_completes_or_is_counted(policy):
    requests = make()
    result = fs.simulate(replace(BASE, policy=policy), COST, requests)
    seen = {s.req.rid for s in result.seqs()} | {r.rid for r in result.rejected}
    assert seen == {r.rid for r in requests}
    assert len(result.seqs()) + len(result.rejected) == len(requests)
    for s in result.seqs():  # drained: each produced exactly its output
        assert s.finished_s is not None and s.generated == s.req.output
        assert s.req.arrival_s <= s.first_scheduled_s <= s.first_token_s <= s.finished_s
    assert bool(result.rejected) == (policy == "cap")  # only cap refuses (the longs)
    assert all(r.long for r in result.rejected)


@pytest.mark.parametrize("policy", fs.POLICIES)
def test_kv_never_exceeds_the_budget_even_when_tight(policy):
    cfg = replace(BASE, policy=policy, kv_tokens=205_000, replicas=2)
    result = fs.simulate(cfg, COST, make(rate=20.0))
    for rep in result.replicas:
        assert rep.max_kv_blocks <= rep.kv_blocks
        assert all(0 <= s["kv_pct"] <= 100 for s in rep.samples)
        assert all(0 <= s["batch"] <= cfg.max_seqs for s in rep.samples)


def test_preemption_only_when_kv_is_tight():
    requests = make(rate=20.0)
    ample = fs.simulate(replace(BASE, replicas=2), COST, requests)
    tight = fs.simulate(replace(BASE, replicas=2, kv_tokens=205_000), COST, requests)
    assert ample.preemptions == 0
    assert tight.preemptions > 0
    # a preempted sequence is recomputed, not lost: it still finishes its output
    again = [s for s in tight.seqs() if s.preempted]
    assert again and all(s.generated == s.req.output for s in again)


def test_a_long_prefill_stalls_the_shorts_behind_it_under_fifo():
    requests = make(longs=1)
    result = fs.simulate(BASE, COST, requests)
    long_req = next(r for r in requests if r.long)
    stall_s = COST.step_ms(long_req.prompt, 0, 0) / 1000
    home = next(i for i, rep in enumerate(result.replicas) if any(s.req.long for s in rep.seqs))
    shorts = [s for s in result.replicas[home].seqs if not s.req.long]
    before = [s.first_token_s - s.req.arrival_s for s in shorts
              if s.req.arrival_s < long_req.arrival_s]  # fmt: skip
    during = [s.first_token_s - s.req.arrival_s for s in shorts
              if long_req.arrival_s < s.req.arrival_s < long_req.arrival_s + stall_s / 2]  # fmt: skip
    assert before and during
    assert min(during) > stall_s / 2 > 20 * max(before)


def test_chunked_prefill_bounds_the_stall_by_its_budget():
    requests = make(longs=2)
    fifo = fs.simulate(BASE, COST, requests)
    chunked = fs.simulate(replace(BASE, policy="chunked"), COST, requests)
    longest_prompt = max(r.prompt for r in requests if r.long)
    bound_ms = COST.step_ms(BASE.chunk_tokens, BASE.max_seqs, BASE.kv_tokens)
    assert max(ms for rep in chunked.replicas for ms in rep.step_ms) <= bound_ms
    assert max(ms for rep in fifo.replicas for ms in rep.step_ms) >= COST.step_ms(
        longest_prompt, 0, 0) - 1e-9  # fmt: skip
    assert fs.percentile(ttfts(chunked), 99) < fs.percentile(ttfts(fifo), 99) / 10
    # the long prompts were still prefilled, in many chunks
    assert all(s.finished_s is not None for s in chunked.seqs(long=True))


def test_a_long_context_pool_isolates_the_shorts():
    requests = make()
    pool = fs.simulate(replace(BASE, policy="pool"), COST, requests)
    fifo = fs.simulate(BASE, COST, requests)
    for i, rep in enumerate(pool.replicas):
        kinds = {s.req.long for s in rep.seqs}
        assert kinds <= ({True} if i < BASE.long_replicas else {False})
    assert fs.percentile(ttfts(pool), 99) < fs.percentile(ttfts(fifo), 99) / 10


def test_the_cap_refuses_what_exceeds_it_and_nothing_else():
    requests = make()
    result = fs.simulate(replace(BASE, policy="cap", token_cap=4096), COST, requests)
    assert {r.rid for r in result.rejected} == {r.rid for r in requests if r.long}
    assert fs.simulate(replace(BASE, policy="cap", token_cap=10**7), COST, requests).rejected == []


def test_the_same_seed_gives_the_same_run():
    a = fs.simulate(BASE, COST, make(seed=3))
    b = fs.simulate(BASE, COST, make(seed=3))
    assert ttfts(a) == ttfts(b)
    assert ttfts(a) != ttfts(fs.simulate(BASE, COST, make(seed=4)))


def test_the_work_is_bounded():
    with pytest.raises(fs.SimulationTooLong, match="steps"):
        fs.simulate(replace(BASE, max_steps=100), COST, make())
    with pytest.raises(fs.SimulationTooLong, match="wall-time"):
        fs.simulate(BASE, COST, make(), deadline=0.0)  # long past


def test_the_capacity_probe_counts_what_fits():
    # 4096 blocks of 16; a short of 640 tokens takes 40 blocks: 102 fit alone
    assert fs.capacity_probe(65_536, 16, 640, 0) == 65_536 // 16 // 40
    # beside a long one of 16,000 tokens (1000 blocks): (4096 - 1000) // 40 = 77
    assert fs.capacity_probe(65_536, 16, 640, 16_000) == (4096 - 1000) // 40
    assert fs.capacity_probe(65_536, 16, 640, 65_536) == 0
    # blocks, not tokens: 641 tokens take 41 blocks
    assert fs.capacity_probe(65_536, 16, 641, 0) == 4096 // 41


def test_parameters_that_make_no_sense_are_refused():
    with pytest.raises(ValueError, match="policy"):
        fs.simulate(replace(BASE, policy="lottery"), COST, [])
