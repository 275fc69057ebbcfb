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


# --- predicate negation: the one negation that may contradict a point (issue 29) ----------
# Clause polarity above marks "not the weights" and "no tokens" as negated, which is right for
# matching terms but is no proof that a learner denies the point. Only a negated *verb* is:
# "decode is not memory-bound", "the engine doesn't free the blocks", "it never evicts".
_AUXILIARIES = {
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "do",
    "does",
    "did",
    "can",
    "could",
    "will",
    "would",
    "should",
    "must",
    "may",
    "might",
    "has",
    "have",
    "had",
    "need",
    "needs",
}
_HEDGES = {"necessarily", "only", "just", "always", "entirely", "quite", "all", "much", "every"}
_FIRST_PERSON = {"i", "we", "i'm", "i'd", "we're", "we'd", "i've", "we've"}
_CONDITIONALS = {"if", "unless", "until", "when", "otherwise", "else", "lest"}
_VERB_BOUNDARIES = _BOUNDARY_WORDS | _CONDITIONALS | {"and", "or", "then"}
_NEGATIVE_NOTIONS = _NEGATORS | {"unchanged", "same", "only", "fewer", "less", "lower", "drop"}
# Words that deny what follows them in a claim ("more traffic is ruled out"): a term the
# claims hold under one of these is not deniable by a negated verb.
_DENYING_WORDS = {
    "ruled",
    "rule",
    "rules",
    "exclude",
    "excludes",
    "excluded",
    "avoid",
    "avoids",
    "prevent",
    "prevents",
    "stop",
    "stops",
    "eliminate",
    "eliminates",
    "lack",
    "lacks",
    "fail",
    "fails",
    "nor",
    "neither",
}


def denied_in(term: Sequence[Sequence[str]], text: str) -> bool:
    """Whether a claim mentions the term in a clause that also has a denying word."""
    clauses = re.split(r"[,;:.!?()—–]|\b(?:but|because|so|while|which|and)\b", text.lower())
    for clause in clauses:
        tagged = [(w, False) for w in clause.replace("-", " ").split()]
        denies = {w for w, _ in tagged} & _DENYING_WORDS
        if denies and polarity(term, tagged) is not Polarity.ABSENT:
            return True
    return False


def negative_notion(term: Sequence[Sequence[str]]) -> bool:
    """Whether a key term is itself a negative or invariant notion ("unchanged", "never
    sees", "not propagated", "no extra"): negating a verb near it may well agree with it."""
    return any(
        w in _NEGATIVE_NOTIONS or (w.startswith("un") and len(w) > 6) for alt in term for w in alt
    )


def predicate_tags(text: str) -> list[tuple[str, bool]]:
    """(word, negated) where only a negated verb negates, forward to the clause's end: an
    auxiliary + "not" ("is not", "does not"), a contraction ("doesn't", "can't"), "cannot",
    "never", "no longer". Not a negation here: "X, not Y" and "not the weights" after a
    comma, "no tokens", "instead of", "rather than", "not only/just/necessarily"
    (a hedge, not a denial), and a negated clause under "if"/"unless". In a relative clause
    ("the 240 GB that doesn't fit takes 5 s") the negation covers only the verb after it."""
    tokens = _TOKEN_RE.findall(text.lower().replace("’", "'").replace("-", " "))
    out: list[tuple[str, bool]] = []
    negated = False
    conditional = False
    relative = False  # the clause so far has a relative pronoun: "that", "who"
    left = -1  # words a relative clause's negation still covers
    for i, tok in enumerate(tokens):
        prev = tokens[i - 1] if i else ""
        nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
        if tok in _BOUNDARY_PUNCT or tok in _VERB_BOUNDARIES:
            negated = False
            relative = False
            conditional = tok in _CONDITIONALS
            if tok in _BOUNDARY_PUNCT:
                continue
        if tok in {"that", "who", "whom", "whose"}:
            relative = True
        if left == 0:
            negated = False
        left -= 1
        cue = (
            (tok == "not" and prev in _AUXILIARIES)
            or (tok.endswith("n't") and tok not in {"n't"})
            or tok in {"cannot", "never"}
            or (tok == "no" and nxt == "longer")
        )
        # "I haven't worked it out", "we don't know": the learner hedging, not a denial
        first_person = prev in _FIRST_PERSON or (
            tok == "not" and i > 1 and tokens[i - 2] in _FIRST_PERSON
        )
        if cue and nxt not in _HEDGES and not conditional and not first_person:
            negated = True
            left = 2 if relative else -1
        out.append((tok, negated))
    return out


def predicate_negated(term: Sequence[Sequence[str]], tagged: Sequence[tuple[str, bool]]) -> bool:
    """Whether the term is mentioned and every mention of it sits under a negated verb."""
    seen = [neg for alt in term for neg in _occurrences(alt, tagged)]
    return bool(seen) and all(seen)
