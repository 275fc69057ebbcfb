"""The cost model of speculative decoding: what one round yields and what it costs.

Plain greedy decoding makes N tokens in N target decode steps of T seconds each. A
speculative round runs k draft steps (c·T each, c = draft step / target step) and one target
pass over the k + 1 new positions (v·T, v = that verify pass / a one-token target step), and
yields τ tokens on average (the accepted drafts plus the target's own token). N tokens take
N / τ rounds, so

    speedup = N·T / ((N / τ)·(k·c + v)·T) = τ / (k·c + v).

The textbook form (Leviathan et al. 2023) assumes each draft token is accepted independently
with probability α, so τ = 1 + α + ... + α^k = (1 - α^(k+1)) / (1 - α), and that verifying
k + 1 tokens costs one decode step (v = 1). Neither need hold: acceptance of position i may
depend on the positions before it (α is then no single number), a measured "accepted /
proposed" is not that per-position α for k > 1 (it gives τ = 1 + k·α), and a wider pass
costs more than one step. So the bench substitutes the measured τ and v (bench/speculative.py,
section e of bench.engine). Prefill, the same in both, is left out. Pure functions, no torch.
"""

from __future__ import annotations


def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Tokens one target pass yields on average when each draft token is accepted with
    probability alpha (independently) and k are proposed: (1 - alpha^(k+1)) / (1 - alpha)."""
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha is a probability in [0, 1]; got {alpha}.")
    if alpha == 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def speedup_iid(alpha: float, k: int, cost_ratio: float) -> float:
    """Speedup over plain decoding with i.i.d. acceptance alpha, k drafts per round, a draft
    step costing cost_ratio (c) target steps and verification costing one target step:
    (1 - alpha^(k+1)) / ((1 - alpha)(k·c + 1))."""
    return speedup_from_tokens_per_step(expected_tokens_per_step(alpha, k), k, cost_ratio, 1.0)


def speedup_from_tokens_per_step(
    tokens_per_step: float, k: int, cost_ratio: float, verify_cost: float
) -> float:
    """Speedup over plain decoding when a round yields tokens_per_step (τ) tokens and costs
    k draft steps of cost_ratio (c) target steps plus a verify pass of verify_cost (v)
    target steps: τ / (k·c + v). k = 0 with v = 1 is plain decoding (1.0)."""
    if k < 0 or cost_ratio < 0 or verify_cost <= 0 or tokens_per_step < 0:
        raise ValueError(
            f"Need k >= 0, c >= 0, v > 0 and tau >= 0; got k={k}, c={cost_ratio}, "
            f"v={verify_cost}, tau={tokens_per_step}."
        )
    return tokens_per_step / (k * cost_ratio + verify_cost)


def percent_difference(measured: float, model: float) -> float:
    """(measured - model) / model in percent: negative when reality falls short."""
    return 100 * (measured - model) / model
