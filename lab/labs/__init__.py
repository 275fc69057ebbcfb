"""The lab catalog: one module per lab, each defining `LAB` (see base.py).

Modules are listed explicitly (in catalog order) so a lab that fails to import is an
error at start-up, not a silently missing page.
"""

from __future__ import annotations

import importlib

from lab.labs.base import Lab, LabParamError, Point, RunContext

__all__ = ["LABS", "Lab", "LabParamError", "Point", "RunContext", "get_lab"]

MODULES = (
    "two_phase",
    "kv_cache_growth",
    "kv_vs_no_cache",
    "batching",
    "paging",
    "prefix_caching",
    "quantization",
    "speculative_decoding",
    "attention_memory",
    "cancellation",
    "http_cancellation",
    "latency_vs_load",
    "waterfall",
    "retry_storm",
    "long_context_admission",
    "disaggregation",
)

LABS: dict[str, Lab] = {}
for _name in MODULES:
    _lab = importlib.import_module(f"lab.labs.{_name}").LAB
    LABS[_lab.slug] = _lab


def get_lab(slug: str) -> Lab:
    """The lab with this slug; KeyError naming the known ones otherwise."""
    try:
        return LABS[slug]
    except KeyError:
        raise KeyError(f"No lab {slug!r}; known: {', '.join(LABS)}") from None
