"""Client retry policies, and the retry budget that keeps retries from amplifying overload.

What is retried: a timeout (the client's per-attempt deadline), HTTP 429, HTTP 5xx and
connection or stream errors ("error: ..."); never another 4xx (the request itself is wrong,
so sending it again cannot help).

Policies (`RetryPolicy.kind`):

- `none`: one attempt.
- `immediate`: retry at once, up to `max_retries` times. Under overload this multiplies the
  offered load by up to max_retries + 1: the retry storm.
- `backoff`: exponential backoff with full jitter (AWS Architecture Blog, "Exponential
  Backoff And Jitter"): before retry n (n = 0, 1, ...) sleep uniform(0, min(cap, base·2^n)).
  It spreads retries out in time but still sends every one of them.
- `budget`: `backoff`, plus a retry budget shared by all requests of the client, as in
  Finagle's `RetryBudget` and gRPC's retry throttling: a token bucket that starts full at
  `budget_cap` tokens; each new request deposits `budget_ratio` tokens (up to the cap) and
  each retry withdraws one. No whole token, no retry: the request fails. Over a long run
  retries are then at most budget_ratio·requests + budget_cap, so the offered load stays
  within about (1 + ratio)× the demand however hard the server fails.

`Retrier` holds the state (the budget) and the random source (injected, so it is testable);
it decides, it never sleeps or sends.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

POLICIES = ("none", "immediate", "backoff", "budget")


def is_retryable(outcome: str) -> bool:
    """Whether an attempt outcome ("timeout", "http 503: ...", "error: ...") is worth retrying."""
    kind = outcome.split(":", 1)[0]
    if kind in ("timeout", "error"):
        return True
    if kind.startswith("http "):
        status = int(kind.removeprefix("http "))
        return status == 429 or status >= 500
    return False


@dataclass(frozen=True)
class RetryPolicy:
    kind: str = "none"
    max_retries: int = 3
    backoff_base: float = 0.1
    backoff_cap: float = 2.0
    budget_ratio: float = 0.1
    budget_cap: float = 10.0

    def __post_init__(self) -> None:
        if self.kind not in POLICIES:
            raise ValueError(f"unknown retry policy {self.kind!r}; use {', '.join(POLICIES)}")
        if self.max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if self.backoff_base < 0 or self.backoff_cap < 0:
            raise ValueError("backoff base and cap must be >= 0 s")
        if self.budget_ratio < 0 or self.budget_cap < 0:
            raise ValueError("retry budget ratio and cap must be >= 0")


class RetryBudget:
    """Token bucket: `deposit()` per new request (+ratio, up to cap), `withdraw()` per retry."""

    def __init__(self, ratio: float = 0.1, cap: float = 10.0):
        self.ratio, self.cap, self.tokens = ratio, cap, cap

    def deposit(self) -> None:
        self.tokens = min(self.cap, self.tokens + self.ratio)

    def withdraw(self) -> bool:
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass(frozen=True)
class Decision:
    """Retry after `delay` seconds, or give up (delay None) for `reason`."""

    delay: float | None
    reason: str = ""


class Retrier:
    """Decides retries for one client (all its requests share the budget)."""

    def __init__(self, policy: RetryPolicy, rng: random.Random | None = None):
        self.policy = policy
        self.rng = rng or random.Random(0)
        self.budget = (
            RetryBudget(policy.budget_ratio, policy.budget_cap) if policy.kind == "budget" else None
        )

    def on_request(self) -> None:
        """A new logical request starts (feeds the budget)."""
        if self.budget is not None:
            self.budget.deposit()

    def backoff(self, retry: int) -> float:
        """Full-jitter delay before retry number `retry` (0-based)."""
        ceiling = min(self.policy.backoff_cap, self.policy.backoff_base * 2.0**retry)
        return self.rng.uniform(0.0, ceiling)

    def decide(self, outcome: str, retries_done: int) -> Decision:
        """After a failed attempt with `outcome`, having retried `retries_done` times already."""
        policy = self.policy
        if policy.kind == "none":
            return Decision(None, "retries off")
        if not is_retryable(outcome):
            return Decision(None, "not retryable")
        if retries_done >= policy.max_retries:
            return Decision(None, "max retries")
        if self.budget is not None and not self.budget.withdraw():
            return Decision(None, "retry budget exhausted")
        return Decision(0.0 if policy.kind == "immediate" else self.backoff(retries_done))
