"""Key terms and negation, word by word.

A key term is one entry of a point's `key_terms`: alternatives separated by " | ", each
one or more words ("compute-bound | compute bound | FLOP"). A word matches its inflections
("chunk" matches "chunks", "chunked"). Negation is scoped to the clause: a cue ("not",
"never", "isn't", "no longer", "rather than", "instead of" ...) negates the words after it
up to the next clause boundary, so in "decode is memory-bound, not compute-bound" only
"compute-bound" is negated.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from enum import Enum

from trainer.grading.rubric.split import words

_NEGATORS = {
    "not",
    "never",
    "no",
    "none",
    "nor",
    "neither",
    "cannot",
    "without",
    "nothing",
    "isn't",
    "aren't",
    "wasn't",
    "weren't",
    "doesn't",
    "don't",
    "didn't",
    "won't",
    "can't",
    "couldn't",
    "shouldn't",
    "wouldn't",
    "hasn't",
    "haven't",
    "hardly",
}
_TWO_WORD_NEGATORS = {("no", "longer"), ("rather", "than"), ("instead", "of")}
_NOT_NEGATORS = {("not", "only"), ("not", "just"), ("no", "matter"), ("no", "doubt")}
_BOUNDARY_WORDS = {
    "but",
    "because",
    "so",
    "while",
    "whereas",
    "which",
    "since",
    "although",
    "though",
    "yet",
    "hence",
    "therefore",
    "instead",
    "whereby",
}
_TOKEN_RE = re.compile(r"[a-z0-9]+(?:['’.][a-z0-9]+)*|[,;:.!?()—–]")
_BOUNDARY_PUNCT = set(",;:.!?()—–")
_STOPWORDS = set(
    [
        "a",
        "an",
        "the",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "and",
        "or",
        "because",
        "but",
        "while",
        "is",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "it",
        "its",
        "this",
        "that",
        "these",
        "those",
        "as",
        "from",
        "into",
        "than",
        "then",
        "so",
        "such",
        "per",
        "each",
        "any",
        "all",
        "can",
        "will",
        "would",
        "should",
        "may",
        "might",
        "must",
        "do",
        "does",
        "did",
        "has",
        "have",
        "had",
        "not",
        "no",
        "more",
        "most",
        "less",
        "very",
        "also",
        "about",
        "over",
        "under",
        "only",
        "just",
        "both",
        "either",
        "which",
        "what",
        "when",
        "where",
        "who",
        "how",
        "why",
        "there",
        "their",
        "they",
        "them",
        "we",
        "you",
        "your",
        "our",
        "i",
        "he",
        "she",
        "his",
        "her",
        "one",
        "two",
        "three",
    ]
)
FUNCTION_WORDS = frozenset(_STOPWORDS)
_META_WORDS = set(
    [
        "says",
        "say",
        "said",
        "mentions",
        "mention",
        "explains",
        "explain",
        "explained",
        "notes",
        "note",
        "states",
        "state",
        "names",
        "name",
        "gives",
        "give",
        "points",
        "point",
        "out",
        "uses",
        "use",
        "using",
        "recognises",
        "recognizes",
        "knows",
        "describes",
        "describe",
        "calls",
        "call",
        "proposes",
        "propose",
        "suggests",
        "suggest",
        "identifies",
        "identify",
        "computes",
        "compute",
        "computing",
        "estimates",
        "estimate",
        "picks",
        "pick",
        "argues",
        "argue",
        "shows",
        "show",
        "candidate",
        "answer",
    ]
)


class Polarity(Enum):
    ABSENT = 0
    POSITIVE = 1  # mentioned at least once outside a negated span
    NEGATED = 2  # mentioned only inside negated spans


_FORWARD_ONLY = {"without"}  # "bounds TPOT without hurting TTFT": only what follows


def tagged_words(text: str) -> list[tuple[str, bool]]:
    """(word, negated) for each word of `text`, hyphenated words split. A cue such as
    "not" or "never" negates its whole clause ("routing does not need to be cache-aware"
    negates routing too); "rather than", "instead of" and "without" negate what follows."""
    tokens = _TOKEN_RE.findall(text.lower().replace("’", "'").replace("-", " "))
    out: list[tuple[str, bool]] = []
    clause: list[tuple[str, bool]] = []
    whole = False  # the current clause has a clause-wide cue
    negated = False  # forward scope of the latest cue
    skip = 0

    def close() -> None:
        out.extend((w, neg or whole) for w, neg in clause)
        clause.clear()

    for i, tok in enumerate(tokens):
        if tok in _BOUNDARY_PUNCT or tok in _BOUNDARY_WORDS:
            close()
            negated = whole = False
            if tok in _BOUNDARY_PUNCT:
                continue
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if skip:
            skip -= 1
        elif (tok, nxt) in _NOT_NEGATORS:
            skip = 1
        elif (tok, nxt) in _TWO_WORD_NEGATORS:
            negated, skip = True, 1
            whole = whole or (tok, nxt) == ("no", "longer")
        elif tok in _FORWARD_ONLY:
            negated = True
        elif tok in _NEGATORS or tok.endswith("n't"):
            negated = whole = True
        clause.append((tok, negated))
    close()
    return out


def _word_matches(term_word: str, word: str) -> bool:
    if word == term_word:
        return True
    if len(term_word) <= 3:
        return word == term_word + "s"
    return word.startswith(term_word) and len(word) - len(term_word) <= 3


def _occurrences(phrase: Sequence[str], tagged: Sequence[tuple[str, bool]]) -> list[bool]:
    """For each occurrence of the words `phrase` in order: whether it is negated."""
    n = len(phrase)
    found = []
    for i in range(len(tagged) - n + 1):
        if all(_word_matches(phrase[k], tagged[i + k][0]) for k in range(n)):
            found.append(any(tagged[i + k][1] for k in range(n)))
    return found


def parse_term(term: str) -> list[list[str]]:
    """One key term -> its alternatives, each a list of words."""
    return [w for w in (words(alt.replace("-", " ")) for alt in term.split("|")) if w]


def polarity(term: Sequence[Sequence[str]], tagged: Sequence[tuple[str, bool]]) -> Polarity:
    """How the text (as `tagged_words`) mentions a parsed key term."""
    seen = [neg for alt in term for neg in _occurrences(alt, tagged)]
    if not seen:
        return Polarity.ABSENT
    return Polarity.NEGATED if all(seen) else Polarity.POSITIVE


def negated_somewhere(term: Sequence[Sequence[str]], tagged: Sequence[tuple[str, bool]]) -> bool:
    """Whether any mention of the term is inside a negated span."""
    return any(neg for alt in term for neg in _occurrences(alt, tagged))


def is_negated(text: str) -> bool:
    """Whether any word of the text is inside a negated span."""
    return any(neg for _, neg in tagged_words(text))


def content_terms(text: str) -> list[list[list[str]]]:
    """Terms of a point without key_terms: its content words, one term each."""
    seen: dict[str, None] = {}
    for w in words(text.replace("-", " ")):
        if len(w) > 2 and w not in _STOPWORDS and w not in _META_WORDS and not w[0].isdigit():
            seen.setdefault(w, None)
    return [[[w]] for w in seen]
