"""A load generator for OpenAI-compatible completion endpoints (`python -m lab.loadgen`).

- `runner`: `LoadConfig`, `run`, `arun`, `sweep` (prompts, load profile, retries, results);
- `arrivals`: closed-loop concurrency vs open-loop Poisson / gamma / constant arrivals;
- `retry`: none / immediate / backoff (full jitter) / budget (token-bucket retry budget);
- `client`: one streaming attempt, timed per chunk, with a total deadline;
- `metrics`: per-request records and the summary (vLLM's TTFT, TPOT, ITL, E2EL, goodput).
"""

from lab.loadgen.client import LoadgenError
from lab.loadgen.metrics import Attempt, RequestRecord, format_summary, summarize
from lab.loadgen.runner import LoadConfig, arun, run, sweep

__all__ = [
    "Attempt",
    "LoadConfig",
    "LoadgenError",
    "RequestRecord",
    "arun",
    "format_summary",
    "run",
    "summarize",
    "sweep",
]
