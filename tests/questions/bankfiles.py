"""A small, valid bank file to break in tests, one field at a time."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

KV_PER_TOKEN = "2 * model_layers * model_kv_heads * model_head_dim * dtype_bytes"

TOPIC: dict[str, Any] = {
    "topic": {
        "slug": "kv-cache-arithmetic",
        "title": "KV-cache arithmetic",
        "order": 11,
        "summary": "2 x layers x KV heads x head_dim x bytes.",
    },
    "questions": [
        {
            "slug": "kv-why",
            "kind": "scenario",
            "title": "Why GQA?",
            "difficulty": 1,
            "competencies": ["memory"],
            "status": "published",
            "prompt": "Why does **GQA** shrink the cache?",
            "model_answer": "Fewer KV heads are cached.",
            "variables": {
                "model": {"catalog": "models", "choices": ["llama-3-70b"]},
                "dtype": {"catalog": "dtypes", "choices": ["bf16"]},
            },
            "follow_ups": [
                "And MLA?",
                {
                    "prompt": "And at 128K?",
                    "rubric": [
                        {
                            "text": "Says the cache grows linearly with context",
                            "claims": ["KV cache grows linearly with context length."],
                            "contradictions": ["KV cache grows quadratically with context."],
                            "key_terms": ["linear | linearly"],
                            "expects": ["40 GiB ±5%"],
                        }
                    ],
                },
            ],
            "rubric": [
                {
                    "text": "Caches KV heads, not query heads",
                    "weight": 2,
                    "concepts": ["KV heads"],
                    "claims": ["Only the KV heads are cached; query heads share them."],
                    "contradictions": ["Every attention head caches its own K and V."],
                    "key_terms": ["KV heads | key-value heads"],
                    "check": {"ask": "Which heads are cached?", "answer": "The KV heads"},
                },
                {
                    "text": "Quantifies 8x for Llama-3-70B",
                    "weight": 1,
                    "concepts": ["8x"],
                    "claims": ["Llama-3-70B has 64 query heads and 8 KV heads: 8x smaller."],
                    "expects": [
                        {
                            "expr": "model_heads / model_kv_heads",
                            "label": "query heads per KV head",
                        },
                        {"expr": KV_PER_TOKEN, "unit": "KiB", "tol": "5%", "label": "KV per token"},
                    ],
                    "check": {
                        "ask": "How many KiB of KV cache does one token take in BF16?",
                        "number": {"expr": KV_PER_TOKEN, "unit": "KiB", "tol": "5%"},
                    },
                },
                {
                    "text": "Mentions paging",
                    "weight": 1,
                    "claims": ["Paging removes fragmentation."],
                    "check": {
                        "ask": "What removes fragmentation?",
                        "answer": "Paging",
                        "options": ["GQA", "Bigger batches"],
                    },
                },
                {
                    "text": "Mentions FP8 KV",
                    "weight": 1,
                    "claims": ["FP8 halves the cache against BF16."],
                    "check": {"ask": "KiB per token in FP8?", "number": "160 KiB ±10%"},
                },
                {"text": "Claims GQA lowers FLOPs a lot", "weight": 1, "penalty": True},
            ],
        },
        {
            "slug": "kv-70b",
            "kind": "arithmetic",
            "title": "KV per token and per sequence",
            "difficulty": 2,
            "competencies": ["memory"],
            "status": "published",
            "prompt": "Work out the cache of {model_name}.",
            "problem": {
                "parameters": {
                    "model": {"catalog": "models", "choices": ["llama-3-70b", "llama-3-8b"]},
                    "dtype": {"catalog": "dtypes", "choices": ["bf16"]},
                    "context": {"choices": [4096, 8192], "unit": "token"},
                },
                "steps": [
                    {
                        "name": "kv_per_token",
                        "prompt": "Bytes per token for {model_name}?",
                        "expression": KV_PER_TOKEN,
                        "unit": "KiB",
                        "hints": ["K and V"],
                        "misconceptions": [
                            {
                                "expression": "model_layers * model_kv_heads * model_head_dim * dtype_bytes",
                                "feedback": "Forgot the x2 for K and V.",
                            },
                            {
                                "expression": "2 * model_layers * model_heads * model_head_dim * dtype_bytes",
                                "feedback": "Used attention heads instead of KV heads.",
                            },
                        ],
                    },
                    {
                        "name": "kv_per_seq",
                        "prompt": "At {context}?",
                        "expression": "kv_per_token * context / token",
                        "unit": "GiB",
                    },
                ],
            },
        },
    ],
}


def topic_data() -> dict[str, Any]:
    return copy.deepcopy(TOPIC)


def write_topic(
    directory: Path, data: dict[str, Any] | None = None, name: str | None = None
) -> Path:
    data = data if data is not None else topic_data()
    path = directory / (name or f"{data['topic']['slug']}.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
