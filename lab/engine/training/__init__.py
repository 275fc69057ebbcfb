"""Training the bundled tokenizer, target and draft models: `python -m lab.engine.training`.

corpus.py (the stdlib corpus and its manifest), tokenizer.py (byte-level BPE), models.py (the
target and draft shapes), loop.py (the training loop and evaluation), report.py (the training
log and README), cli.py (the command). Nothing here imports the engine.
"""

from lab.engine.training.cli import DEFAULT_OUT, SAMPLE_PROMPTS, main
from lab.engine.training.corpus import (
    DEFAULT_CORPUS_MB,
    HELDOUT_EVERY,
    SKIP_DIRS,
    SourceFile,
    clean_source,
    read_manifest,
    read_texts,
    select_corpus,
    stdlib_dir,
    write_manifest,
)
from lab.engine.training.loop import (
    TrainSettings,
    TrainStats,
    evaluate_loss,
    greedy_sample,
    lr_at,
    train_model,
    unigram_loss,
)
from lab.engine.training.models import count_params, draft_config, target_config
from lab.engine.training.tokenizer import (
    BOS,
    EOS,
    PAD,
    SPECIAL_TOKENS,
    token_stream,
    train_tokenizer,
)

__all__ = [
    "BOS",
    "DEFAULT_CORPUS_MB",
    "DEFAULT_OUT",
    "EOS",
    "HELDOUT_EVERY",
    "PAD",
    "SAMPLE_PROMPTS",
    "SKIP_DIRS",
    "SPECIAL_TOKENS",
    "SourceFile",
    "TrainSettings",
    "TrainStats",
    "clean_source",
    "count_params",
    "draft_config",
    "evaluate_loss",
    "greedy_sample",
    "lr_at",
    "main",
    "read_manifest",
    "read_texts",
    "select_corpus",
    "stdlib_dir",
    "target_config",
    "token_stream",
    "train_model",
    "train_tokenizer",
    "unigram_loss",
    "write_manifest",
]
