"""Stage 1: split an answer into sentences and clauses.

A sentence ends at . ! ? , at a paragraph or a bullet, or at ';'. A single line break
inside a paragraph (hard-wrapped text) does not end a sentence. Clauses are the parts of a
sentence joined by "and", "but", "while", a dash or a colon: a sentence can say one right and
one wrong thing, and each is judged on its own.
"""

from __future__ import annotations

import re

MIN_WORDS = 4
COPY_SHARE = 0.8  # an answer whose words are this much the prompt's restates the question

_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+|(?:^|\s)[-*•]\s+|;\s+")
_SOFT_BREAK_RE = re.compile(r"(?<!\n)\n(?![\n\s]*[-*•]\s)(?!\n)")
_CLAUSE_RE = re.compile(
    r",?\s+(?=(?:but|while|whereas|although|though|yet|and)\s)|\s+[—–]\s+|\s+-\s+|:\s+",
    re.IGNORECASE,
)
_WORD_RE = re.compile(r"[a-z0-9]+(?:[.'’][a-z0-9]+)*")


def words(text: str) -> list[str]:
    """Lower-case words; hyphenated words are split ("compute-bound" -> compute, bound)."""
    return _WORD_RE.findall(text.lower().replace("’", "'"))


def split_sentences(text: str) -> list[str]:
    """The answer's sentences (and ';' clauses, bullets, paragraphs) of >= 4 words."""
    text = _SOFT_BREAK_RE.sub(" ", text or "")
    parts = (p.strip(" -*•\t") for p in _SENTENCE_RE.split(text))
    return [p for p in parts if len(words(p)) >= MIN_WORDS]


def split_clauses(sentence: str) -> list[str]:
    """The clauses of one sentence of >= 4 words each; [] when it is a single clause."""
    parts = [p.strip(" ,") for p in _CLAUSE_RE.split(sentence)]
    parts = [p for p in parts if len(words(p)) >= MIN_WORDS]
    return parts if len(parts) > 1 else []


def restates(answer: str, prompt: str) -> bool:
    """Whether the answer is mostly the question's own words (copied or paraphrased)."""
    answer_words, prompt_words = words(answer), set(words(prompt))
    return (
        bool(answer_words)
        and sum(w in prompt_words for w in answer_words) / len(answer_words) >= COPY_SHARE
    )
