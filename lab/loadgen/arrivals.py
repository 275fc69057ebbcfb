"""When requests are sent: closed-loop concurrency or an open-loop arrival process.

Two families of load, as in guidellm's load profiles (`synchronous`, `concurrent`,
`constant`, `poisson`, `sweep`) and vLLM's `benchmarks/serve` (`--max-concurrency`,
`--request-rate`, `--burstiness`):

- Closed loop (`concurrency=N`): N workers, each sending its next request as soon as its
  previous one finished (retries included). The offered load adapts to the server: when it
  slows down, clients send less, so a closed loop cannot overload a server, and its latency
  numbers hide queueing ("coordinated omission"). N=1 is guidellm's `synchronous`.
  The runner drives it; nothing here is random.
- Open loop (`rate=r` requests/s): arrivals follow a clock, independent of responses, as
  with many independent users. The gaps between arrivals are drawn here:

  - `poisson`: exponential gaps with mean 1/r (a Poisson process; coefficient of variation 1).
  - `gamma`: gaps ~ Gamma(shape=b, scale=1/(r·b)), exactly vLLM's `--burstiness b`: the mean
    stays 1/r, the coefficient of variation is 1/sqrt(b). b=1 is Poisson; b<1 is burstier
    (clumps and lulls), b>1 smoother.
  - `constant`: every gap exactly 1/r (guidellm's `constant`).

  `rate=inf` sends everything at once (vLLM's default, guidellm's `throughput`). The first
  request goes at offset 0. A rate sweep is several open-loop runs in a row, one result per
  rate (`runner.sweep`), like guidellm's `sweep` over a list of rates.

The random draws come from an injected `random.Random`, so a seed fixes the schedule.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator

ARRIVALS = ("poisson", "gamma", "constant")


def check_rate(rate: float, arrival: str = "poisson", burstiness: float = 1.0) -> None:
    """ValueError for a rate that is not > 0, an unknown process or burstiness <= 0."""
    if math.isnan(rate) or rate <= 0:
        raise ValueError(f"rate must be > 0 requests/s (or inf), got {rate}")
    if arrival not in ARRIVALS:
        raise ValueError(f"unknown arrival process {arrival!r}; use {', '.join(ARRIVALS)}")
    if not (burstiness > 0 and math.isfinite(burstiness)):
        raise ValueError(f"burstiness must be > 0, got {burstiness}")


def arrival_times(
    rate: float,
    rng: random.Random,
    arrival: str = "poisson",
    burstiness: float = 1.0,
) -> Iterator[float]:
    """Offsets (seconds from the start) of an endless stream of arrivals: 0, then + gaps."""
    check_rate(rate, arrival, burstiness)
    if arrival == "constant" or math.isinf(rate):
        return (i / rate for i in itertools.count())  # i/rate, not a sum of rounded gaps
    shape = 1.0 if arrival == "poisson" else burstiness
    scale = 1.0 / (rate * shape)
    gaps = (rng.gammavariate(shape, scale) for _ in itertools.count())
    return itertools.chain([0.0], itertools.accumulate(gaps))


def parse_rates(text: str) -> list[float]:
    """ "1,2,4,inf" -> [1.0, 2.0, 4.0, inf]; ValueError for an empty list or a bad rate."""
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"rates must be numbers separated by commas, got {text!r}") from None
    if not rates:
        raise ValueError("give at least one rate")
    for rate in rates:
        check_rate(rate)
    return rates
